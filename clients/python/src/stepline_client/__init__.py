"""Python client of stepline's query API, and one-line helpers for agent frameworks.

- :class:`StepLine`: the typed client (``runs``, ``run``, ``events``, ``effects``, ``snapshots``,
  ``continuation``, ``recovery``, ``abandon``), standard library only.
- :func:`pydantic_ai_history` (``stepline_client.pydantic_ai``): ``list[ModelMessage]`` for
  ``message_history=``.
- :class:`StepLineSession` (``stepline_client.openai_agents``): an OpenAI Agents SDK ``Session``.
- :func:`strands_messages` (``stepline_client.strands``): the ``messages`` for ``Agent(messages=...)``.

The framework helpers import their framework only when called.
"""

from __future__ import annotations

from typing import Any

from .client import DEFAULT_URL, StepLine
from .errors import (
    BadRequest,
    Conflict,
    ConnectionFailed,
    Forbidden,
    NotFound,
    ServerError,
    StepLineError,
    Unauthorized,
)
from .types import Continuation, Recovery, Run, RunPage, Snapshot, StepEvent, ToolEffect

__version__ = "0.1.0"

_LAZY = {
    "pydantic_ai_history": ("pydantic_ai", "pydantic_ai_history"),
    "strands_messages": ("strands", "strands_messages"),
    "strands_agent_kwargs": ("strands", "strands_agent_kwargs"),
    "StepLineSession": ("openai_agents", "StepLineSession"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_URL",
    "BadRequest",
    "Conflict",
    "ConnectionFailed",
    "Continuation",
    "Forbidden",
    "NotFound",
    "Recovery",
    "Run",
    "RunPage",
    "ServerError",
    "Snapshot",
    "StepEvent",
    "StepLine",
    "StepLineError",
    "StepLineSession",
    "ToolEffect",
    "Unauthorized",
    "pydantic_ai_history",
    "strands_agent_kwargs",
    "strands_messages",
]
