"""The typed client of stepline's query API (standard library only: ``urllib``)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterator

from .errors import ConnectionFailed, StepLineError, error_for
from .types import Continuation, Recovery, Run, RunPage, Snapshot, StepEvent, ToolEffect

DEFAULT_URL = "http://127.0.0.1:4320"
"""Where ``make run`` puts the query API."""

_PAGE = 500
"""Runs asked for per page when listing (the API's maximum is 1000)."""

_MAX_ERROR_TEXT = 2000


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class StepLine:
    """A client of one stepline query API.

    ``url`` defaults to ``$STEPLINE_URL``, then ``http://127.0.0.1:4320``; ``token`` (sent as
    ``Authorization: Bearer <token>``) to ``$STEPLINE_TOKEN`` (none when unset or empty). Every
    method raises a :class:`~stepline_client.errors.StepLineError` subclass on an error answer
    (``NotFound``, ``Unauthorized``, ``Conflict``, ...) or when stepline cannot be reached
    (``ConnectionFailed``).
    """

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0) -> None:
        self.url = (url or os.environ.get("STEPLINE_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else (os.environ.get("STEPLINE_TOKEN") or None)
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"StepLine({self.url!r}, token={'***' if self.token else None})"

    # -- HTTP -------------------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        body: Any = None,
    ) -> Any:
        url = self.url + path
        query = {k: _query_value(v) for k, v in (params or {}).items() if v is not None}
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read()
        except urllib.error.HTTPError as err:
            raise error_for(err.code, _error_message(err), url) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise ConnectionFailed(None, f"cannot reach stepline: {reason}", url) from None
        try:
            return json.loads(text)
        except ValueError:
            raise ConnectionFailed(None, f"the answer is not JSON: {text[:200]!r}", url) from None

    def _get(self, path: str, **params: Any) -> Any:
        return self._request("GET", path, params)

    @staticmethod
    def _run_path(run_id: str, tail: str = "") -> str:
        if not run_id:
            raise ValueError("run_id must not be empty")
        return f"/v1/runs/{urllib.parse.quote(run_id, safe='')}{tail}"

    # -- runs -------------------------------------------------------------------------------------

    def runs_page(self, cursor: str | None = None, limit: int | None = None, **filters: Any) -> RunPage:
        """One page of ``GET /v1/runs``.

        ``filters``: ``conversation_id``, ``parent_run_id``, ``agent_name``, ``status``,
        ``trace_id`` (AND-combined; stepline answers 400, raised as ``BadRequest``, for one it does
        not know).
        """
        answer = self._get("/v1/runs", cursor=cursor, limit=limit, **filters)
        runs = [Run.from_json(r) for r in answer.get("runs") or [] if isinstance(r, dict)]
        cursor = answer.get("next_cursor")
        return RunPage(runs=runs, next_cursor=cursor if isinstance(cursor, str) and cursor else None)

    def iter_runs(self, *, limit: int | None = None, **filters: Any) -> Iterator[Run]:
        """Every run matching ``filters`` (at most ``limit``), oldest first, fetched a page at a time."""
        if "cursor" in filters:
            raise TypeError("iter_runs() pages by itself; use runs_page(cursor=...) for one page")
        cursor: str | None = None
        left = limit
        while left is None or left > 0:
            page = self.runs_page(cursor=cursor, limit=_PAGE if left is None else min(left, _PAGE), **filters)
            for run in page.runs[:left]:
                yield run
            if left is not None:
                left -= len(page.runs)
            if page.next_cursor is None or page.next_cursor == cursor:
                return
            cursor = page.next_cursor

    def runs(self, *, limit: int | None = None, **filters: Any) -> list[Run]:
        """Every run matching ``filters`` (see :meth:`runs_page`; at most ``limit``), ordered by
        ``started_at``."""
        return list(self.iter_runs(limit=limit, **filters))

    def run(self, run_id: str) -> Run:
        """The run, by stepline's run id or a framework's run id (an alias)."""
        return Run.from_json(self._get(self._run_path(run_id)))

    def latest_run(self, conversation_id: str, *, top_level: bool = True) -> Run | None:
        """The conversation's run that started last (only runs without a parent when ``top_level``:
        an agent called as a tool is a delegate run of its caller), or ``None``."""
        latest = None
        for run in self.iter_runs(conversation_id=conversation_id):
            if not top_level or run.parent_run_id is None:
                latest = run
        return latest

    def events(self, run_id: str) -> list[StepEvent]:
        """The run's step events, chronological."""
        answer = self._get(self._run_path(run_id, "/events"))
        return [StepEvent.from_json(e) for e in answer.get("events") or [] if isinstance(e, dict)]

    def effects(self, run_id: str, *, unresolved: bool = False) -> list[ToolEffect]:
        """The run's tool-effect ledger (only the calls whose outcome is unknown with ``unresolved``)."""
        answer = self._get(self._run_path(run_id, "/effects"), unresolved=unresolved or None)
        return [ToolEffect.from_json(e) for e in answer.get("effects") or [] if isinstance(e, dict)]

    def snapshots(self, run_id: str) -> list[Snapshot]:
        """The run's snapshot metadata, oldest first."""
        answer = self._get(self._run_path(run_id, "/snapshots"))
        return [Snapshot.from_json(s) for s in answer.get("snapshots") or [] if isinstance(s, dict)]

    def continuation(
        self,
        run_id: str,
        format: str = "otel",
        at: int | None = None,
        *,
        include_interrupted: bool = False,
        repair: bool = False,
        media: str | None = None,
    ) -> Continuation:
        """The run's history in ``format`` (``otel``, ``pydantic-ai``, ``openai-chat``,
        ``openai-responses``, ``anthropic``, ``gemini``, ``strands``, ``vercel-ai``).

        By default the latest ``complete`` snapshot (every tool call answered); ``at`` picks a
        snapshot by its ``seq``, ``include_interrupted`` allows the latest one with unsettled tool
        work, ``repair`` answers its dangling calls with a synthesized "interrupted" result,
        ``media`` is ``inline`` (default) or ``reference``. Raises ``NotFound`` when the run has
        no matching snapshot.
        """
        answer = self._get(
            self._run_path(run_id, "/continuation"),
            format=format,
            at=at,
            include_interrupted=include_interrupted or None,
            repair=repair or None,
            media=media,
        )
        return Continuation.from_json(answer)

    def recovery(self, run_id: str) -> Recovery:
        """The latest complete and latest snapshots, the calls whose outcome is unknown, and the
        tools that completed or failed: what is needed to decide how a dead run goes on."""
        return Recovery.from_json(self._get(self._run_path(run_id, "/recovery")))

    def abandon(self, run_id: str, reason: str | None = None) -> Run:
        """Declares the run dead now: status ``abandoned``, its unsettled tool calls
        ``unknown_after_crash``. Raises ``Conflict`` when the run is already over.

        ``reason`` is sent as the JSON body ``{"reason": ...}``; a stepline that does not take a
        reason records ``abandoned by request`` and ignores the body.
        """
        body = {"reason": reason} if reason is not None else None
        return Run.from_json(self._request("POST", self._run_path(run_id, "/abandon"), body=body))

    def health(self) -> dict[str, Any]:
        """``GET /healthz``: ``{"status": "ok"}`` while ingest can commit."""
        return self._get("/healthz")

    # -- framework helpers (each imports its framework when called) ---------------------------------

    def pydantic_ai_history(self, run_id: str, **options: Any) -> list[Any]:
        """See :func:`stepline_client.pydantic_ai.pydantic_ai_history`."""
        from .pydantic_ai import pydantic_ai_history

        return pydantic_ai_history(run_id, client=self, **options)

    def strands_messages(self, run_id: str, **options: Any) -> list[dict[str, Any]]:
        """See :func:`stepline_client.strands.strands_messages`."""
        from .strands import strands_messages

        return strands_messages(run_id, client=self, **options)

    def openai_agents_session(self, session_id: str, **options: Any) -> Any:
        """See :class:`stepline_client.openai_agents.StepLineSession`."""
        from .openai_agents import StepLineSession

        return StepLineSession(session_id, self, **options)


def _error_message(err: urllib.error.HTTPError) -> str:
    """stepline's ``{"error": ...}`` text, or the start of whatever else the answer held."""
    try:
        text = err.read()
    except OSError:
        return err.reason if isinstance(err.reason, str) else str(err)
    try:
        value = json.loads(text)
    except ValueError:
        return text[:_MAX_ERROR_TEXT].decode(errors="replace") or str(err.reason)
    if isinstance(value, dict) and isinstance(value.get("error"), str):
        return value["error"]
    return json.dumps(value)[:_MAX_ERROR_TEXT]


__all__ = ["DEFAULT_URL", "StepLine", "StepLineError"]
