"""Strands Agents: a run's history as the ``messages`` list ``Agent(messages=...)`` takes.

The helpers need no import of Strands itself: the ``strands`` continuation is already Strands'
own message shape (Bedrock Converse content blocks).
"""

from __future__ import annotations

from typing import Any

from .client import StepLine


def strands_messages(
    run_id: str,
    *,
    client: StepLine | None = None,
    at: int | None = None,
    include_interrupted: bool = False,
    repair: bool = False,
) -> list[dict[str, Any]]:
    """The run's ``messages`` (the ``strands`` continuation), for ``Agent(messages=...)``.

    Options as in :meth:`StepLine.continuation`; ``client`` defaults to ``StepLine()``.
    """
    return strands_agent_kwargs(
        run_id, client=client, at=at, include_interrupted=include_interrupted, repair=repair
    )["messages"]


def strands_agent_kwargs(
    run_id: str,
    *,
    client: StepLine | None = None,
    at: int | None = None,
    include_interrupted: bool = False,
    repair: bool = False,
) -> dict[str, Any]:
    """``{"messages": [...], "system_prompt": ...}`` of the run, for ``Agent(**kwargs, ...)``."""
    continuation = (client or StepLine()).continuation(
        run_id, "strands", at, include_interrupted=include_interrupted, repair=repair
    )
    return {"messages": continuation.messages, "system_prompt": continuation.fields.get("system_prompt")}
