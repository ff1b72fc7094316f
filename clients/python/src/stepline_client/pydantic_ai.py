"""Pydantic AI: a run's history as ``list[ModelMessage]``, ready for ``message_history=``.

Needs ``pydantic-ai-slim`` (``pip install 'stepline-client[pydantic-ai]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .client import StepLine

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage


def pydantic_ai_history(
    run_id: str,
    *,
    client: StepLine | None = None,
    at: int | None = None,
    include_interrupted: bool = False,
    repair: bool = False,
) -> list["ModelMessage"]:
    """The run's history (the ``pydantic-ai`` continuation) loaded with ``ModelMessagesTypeAdapter``.

    ``run_id`` is stepline's run id or Pydantic AI's own (``result.run_id``). By default the latest
    complete snapshot; ``at``, ``include_interrupted`` and ``repair`` as in
    :meth:`StepLine.continuation`. ``client`` defaults to ``StepLine()`` (``$STEPLINE_URL``,
    ``$STEPLINE_TOKEN``). Then::

        result = await agent.run("and tomorrow?", message_history=pydantic_ai_history(run_id))
    """
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    continuation = (client or StepLine()).continuation(
        run_id, "pydantic-ai", at, include_interrupted=include_interrupted, repair=repair
    )
    return ModelMessagesTypeAdapter.validate_python(continuation.messages)
