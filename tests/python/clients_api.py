"""Every method of `stepline_client.StepLine` against a live stepline, printed for tests/clients.rs to compare
with the API's own answers.

Prints one JSON line: {"run", "runs", "runs_paged", "latest", "events", "effects", "unresolved", "snapshots",
"continuation", "recovery", "errors"}: the dataclasses as dicts (without `raw`), and for each error case the
exception's class name, status and message.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import sys
from typing import Any, Callable

from stepline_client import StepLine, StepLineError


def plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.name != "raw"}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def failure(call: Callable[[], Any]) -> dict[str, Any]:
    try:
        value = call()
    except StepLineError as err:
        return {"class": type(err).__name__, "status": err.status, "message": err.message}
    return {"class": None, "value": plain(value)}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--conversation-id", required=True)
    args = parser.parse_args()

    client = StepLine(args.api)
    run_id = args.run_id
    paged: list[str] = []
    cursor = None
    while True:
        page = client.runs_page(cursor=cursor, limit=1, conversation_id=args.conversation_id)
        paged += [r.run_id for r in page.runs]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    report = {
        "run": plain(client.run(run_id)),
        "runs": plain(client.runs(conversation_id=args.conversation_id)),
        "runs_paged": paged,
        "runs_limited": [r.run_id for r in client.runs(limit=1, conversation_id=args.conversation_id)],
        "latest": plain(client.latest_run(args.conversation_id)),
        "events": plain(client.events(run_id)),
        "effects": plain(client.effects(run_id)),
        "unresolved": plain(client.effects(run_id, unresolved=True)),
        "snapshots": plain(client.snapshots(run_id)),
        "continuation": plain(client.continuation(run_id, "openai-chat")),
        "continuation_at": plain(client.continuation(run_id, "pydantic-ai", at=1)),
        "recovery": plain(client.recovery(run_id)),
        "errors": {
            "unknown_run": failure(lambda: client.run("no-such-run")),
            "bad_format": failure(lambda: client.continuation(run_id, "no-such-format")),
            "bad_filter": failure(lambda: client.runs(colour="blue")),
            "abandon_completed": failure(lambda: client.abandon(run_id, reason="test")),
            "no_server": failure(lambda: StepLine(f"http://127.0.0.1:{closed_port()}", timeout=5).run(run_id)),
        },
    }
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
