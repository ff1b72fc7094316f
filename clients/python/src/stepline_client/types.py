"""The API's answers as dataclasses.

Each class names the fields of stepline's public JSON contract (README, "Query API") and keeps the
whole answer in ``raw``, so fields a newer stepline adds are not lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class Run:
    """One agent invocation (``GET /v1/runs/{run_id}``)."""

    run_id: str
    trace_id: str
    status: str
    started_at: str
    aliases: list[str] = field(default_factory=list)
    agent_name: str | None = None
    conversation_id: str | None = None
    parent_run_id: str | None = None
    ended_at: str | None = None
    error: str | None = None
    model_request_count: int = 0
    tool_call_count: int = 0
    snapshot_count: int = 0
    event_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    warnings: list[str] = field(default_factory=list)
    continuation_unavailable: str | None = None
    raw: JSON = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, value: JSON) -> "Run":
        return cls(
            run_id=str(value.get("run_id", "")),
            trace_id=str(value.get("trace_id", "")),
            status=str(value.get("status", "")),
            started_at=str(value.get("started_at", "")),
            aliases=[a for a in value.get("aliases") or [] if isinstance(a, str)],
            agent_name=_opt_str(value.get("agent_name")),
            conversation_id=_opt_str(value.get("conversation_id")),
            parent_run_id=_opt_str(value.get("parent_run_id")),
            ended_at=_opt_str(value.get("ended_at")),
            error=_opt_str(value.get("error")),
            model_request_count=_int(value.get("model_request_count")),
            tool_call_count=_int(value.get("tool_call_count")),
            snapshot_count=_int(value.get("snapshot_count")),
            event_count=_int(value.get("event_count")),
            input_tokens=_int(value.get("input_tokens")),
            output_tokens=_int(value.get("output_tokens")),
            warnings=[w for w in value.get("warnings") or [] if isinstance(w, str)],
            continuation_unavailable=_opt_str(value.get("continuation_unavailable")),
            raw=value,
        )


@dataclass(frozen=True)
class RunPage:
    """One page of ``GET /v1/runs``: the runs and the cursor of the next page (``None``: last page)."""

    runs: list[Run]
    next_cursor: str | None


@dataclass(frozen=True)
class StepEvent:
    """One step event (``GET /v1/runs/{run_id}/events``)."""

    seq: int
    kind: str
    timestamp: str
    span_id: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    error: str | None = None
    raw: JSON = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, value: JSON) -> "StepEvent":
        return cls(
            seq=_int(value.get("seq")),
            kind=str(value.get("kind", "")),
            timestamp=str(value.get("timestamp", "")),
            span_id=_opt_str(value.get("span_id")),
            tool_call_id=_opt_str(value.get("tool_call_id")),
            tool_name=_opt_str(value.get("tool_name")),
            error=_opt_str(value.get("error")),
            raw=value,
        )


@dataclass(frozen=True)
class ToolEffect:
    """One entry of the tool-effect ledger (``GET /v1/runs/{run_id}/effects``).

    ``status``: ``requested``, ``started``, ``completed``, ``failed`` or ``unknown_after_crash``.
    """

    tool_call_id: str
    tool_name: str
    status: str
    arguments: Any = None
    requested_at: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    result: Any = None
    error: str | None = None
    idempotency_key: str | None = None
    raw: JSON = field(default_factory=dict, repr=False, compare=False)

    @property
    def unresolved(self) -> bool:
        """Whether nobody knows if the call took effect (requested, started, unknown after a crash)."""
        return self.status in ("requested", "started", "unknown_after_crash")

    @classmethod
    def from_json(cls, value: JSON) -> "ToolEffect":
        return cls(
            tool_call_id=str(value.get("tool_call_id", "")),
            tool_name=str(value.get("tool_name", "")),
            status=str(value.get("status", "")),
            arguments=value.get("arguments"),
            requested_at=_opt_str(value.get("requested_at")),
            started_at=_opt_str(value.get("started_at")),
            ended_at=_opt_str(value.get("ended_at")),
            result=value.get("result"),
            error=_opt_str(value.get("error")),
            idempotency_key=_opt_str(value.get("idempotency_key")),
            raw=value,
        )


@dataclass(frozen=True)
class Snapshot:
    """A message history at a step boundary (snapshot metadata).

    ``state``: ``complete`` (every tool call answered: any provider accepts it) or ``interrupted``;
    ``source``: ``observed`` or ``reconstructed``.
    """

    seq: int
    step_index: int
    state: str
    source: str
    message_count: int
    timestamp: str
    raw: JSON = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, value: JSON) -> "Snapshot":
        return cls(
            seq=_int(value.get("seq")),
            step_index=_int(value.get("step_index")),
            state=str(value.get("state", "")),
            source=str(value.get("source", "")),
            message_count=_int(value.get("message_count")),
            timestamp=str(value.get("timestamp", "")),
            raw=value,
        )

    @classmethod
    def maybe(cls, value: Any) -> "Snapshot | None":
        return cls.from_json(value) if isinstance(value, dict) else None


# The continuation's own keys; every other top-level key is one of the format's request fields.
_ENVELOPE = ("run_id", "format", "snapshot", "unresolved_effects", "warnings", "repaired")


@dataclass(frozen=True)
class Continuation:
    """A run's history rendered in one format (``GET /v1/runs/{run_id}/continuation``).

    ``fields`` holds the format's request fields, ready to splat into a request: ``messages`` for
    ``pydantic-ai``, ``openai-chat`` and ``strands`` (plus ``system_prompt``), ``instructions`` +
    ``input`` for ``openai-responses``, ``system`` + ``messages`` for ``anthropic``, ...
    """

    run_id: str
    format: str
    snapshot: Snapshot
    unresolved_effects: list[ToolEffect]
    warnings: list[str]
    fields: JSON
    repaired: list[JSON] | None = None
    raw: JSON = field(default_factory=dict, repr=False, compare=False)

    @property
    def messages(self) -> list[Any]:
        """The ``messages`` field (empty when the format has none)."""
        value = self.fields.get("messages")
        return value if isinstance(value, list) else []

    @classmethod
    def from_json(cls, value: JSON) -> "Continuation":
        repaired = value.get("repaired")
        return cls(
            run_id=str(value.get("run_id", "")),
            format=str(value.get("format", "")),
            snapshot=Snapshot.from_json(value.get("snapshot") or {}),
            unresolved_effects=[
                ToolEffect.from_json(e) for e in value.get("unresolved_effects") or [] if isinstance(e, dict)
            ],
            warnings=[w for w in value.get("warnings") or [] if isinstance(w, str)],
            fields={k: v for k, v in value.items() if k not in _ENVELOPE},
            repaired=repaired if isinstance(repaired, list) else None,
            raw=value,
        )


@dataclass(frozen=True)
class Recovery:
    """What an orchestrator needs to decide how to go on (``GET /v1/runs/{run_id}/recovery``)."""

    run_id: str
    status: str
    latest_complete_snapshot: Snapshot | None
    latest_snapshot: Snapshot | None
    unresolved_effects: list[ToolEffect]
    completed_tools: list[ToolEffect]
    failed_tools: list[ToolEffect]
    raw: JSON = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, value: JSON) -> "Recovery":
        def effects(key: str) -> list[ToolEffect]:
            return [ToolEffect.from_json(e) for e in value.get(key) or [] if isinstance(e, dict)]

        return cls(
            run_id=str(value.get("run_id", "")),
            status=str(value.get("status", "")),
            latest_complete_snapshot=Snapshot.maybe(value.get("latest_complete_snapshot")),
            latest_snapshot=Snapshot.maybe(value.get("latest_snapshot")),
            unresolved_effects=effects("unresolved_effects"),
            completed_tools=effects("completed_tools"),
            failed_tools=effects("failed_tools"),
            raw=value,
        )
