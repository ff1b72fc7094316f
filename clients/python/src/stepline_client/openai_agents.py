"""OpenAI Agents SDK: a ``Session`` whose history is what stepline read from the telemetry.

``Runner.run(agent, input, session=StepLineSession(conversation_id, client))`` starts the turn from
the conversation's latest run as stepline knows it: the ``input`` items of the ``openai-responses``
continuation, the format the SDK takes as input items. The SDK needs no import here: the class
implements the SDK's ``Session`` protocol structurally (``session_id``, ``session_settings``,
``get_items``, ``add_items``, ``pop_item``, ``clear_session``).

Writes come from the telemetry, not from the session: ``add_items`` stores nothing. The turn's
items reach stepline when the instrumentation (``openinference-instrumentation-openai-agents``)
exports its spans, which happens when the spans end and the span processor sends them. A
``BatchSpanProcessor`` sends on a timer, so call ``tracer_provider.force_flush()`` after a turn
(before the next turn reads the session, and before a short-lived process exits); once it returns
``True`` stepline has committed the spans and the next ``get_items`` sees the turn.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .client import StepLine
from .errors import NotFound

FORMAT = "openai-responses"
"""The continuation format the SDK takes as input items."""


class StepLineSession:
    """An OpenAI Agents SDK session read from stepline.

    ``session_id`` is a conversation id (the ``session.id`` that OpenInference's
    ``using_session(...)`` puts on the spans): ``get_items`` reads the latest top-level run of that
    conversation that has a complete snapshot. When no run belongs to such a conversation, the id
    is taken as a run id (stepline's, or an alias): the history of that run. ``client`` defaults
    to ``StepLine()``; ``include_interrupted`` / ``repair`` as in :meth:`StepLine.continuation`
    (the default is the latest complete snapshot, which any provider accepts).
    """

    session_settings: Any = None

    def __init__(
        self,
        session_id: str,
        client: StepLine | None = None,
        *,
        include_interrupted: bool = False,
        repair: bool = False,
        session_settings: Any = None,
    ) -> None:
        self.session_id = session_id
        self.client = client or StepLine()
        self.include_interrupted = include_interrupted
        self.repair = repair
        self.session_settings = session_settings
        self.last_run_id: str | None = None
        """The run whose history the last ``get_items`` returned (``None``: none yet)."""
        self.last_warnings: list[str] = []
        """The continuation's warnings at the last ``get_items`` (what the format could not carry)."""

    def items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """``get_items`` without ``await`` (blocking HTTP)."""
        items: list[dict[str, Any]] = []
        self.last_run_id, self.last_warnings = None, []
        for run_id in self._candidate_runs():
            try:
                continuation = self.client.continuation(
                    run_id, FORMAT, include_interrupted=self.include_interrupted, repair=self.repair
                )
            except NotFound:
                continue  # a run without a (complete) snapshot yet: the one before it
            value = continuation.fields.get("input")
            items = [i for i in value if isinstance(i, dict)] if isinstance(value, list) else []
            self.last_run_id, self.last_warnings = continuation.run_id, continuation.warnings
            break
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return items

    def _candidate_runs(self) -> list[str]:
        """Run ids to read, best first: the conversation's top-level runs, newest first, or the id
        itself as a run."""
        runs = [r.run_id for r in self.client.iter_runs(conversation_id=self.session_id) if r.parent_run_id is None]
        if runs:
            return runs[::-1]
        try:
            return [self.client.run(self.session_id).run_id]
        except NotFound:
            return []

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The conversation's history as Responses input items; the latest ``limit`` when given."""
        return await asyncio.to_thread(self.items, limit)

    async def add_items(self, items: list[Any]) -> None:
        """Stores nothing: the items reach stepline through the telemetry. Flush the tracer
        provider (``force_flush()``) before the next turn reads the session (see the module)."""
        return None

    async def pop_item(self) -> Any:
        """Returns ``None``: this session wrote nothing it could take back (the SDK calls it only
        to undo its own ``add_items``)."""
        return None

    async def clear_session(self) -> None:
        """Not supported: the history is the telemetry stepline stored; start a new conversation id."""
        raise NotImplementedError(
            "a StepLineSession reads the history stepline derived from the telemetry; it cannot be "
            "cleared from the client: use a new session id for a fresh conversation"
        )
