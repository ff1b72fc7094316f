"""Fetch a run's continuation from stepline and continue the conversation with a real Pydantic AI agent.

GET {api}/v1/runs/{run_id}/continuation?format=pydantic-ai, validate body["messages"] with
ModelMessagesTypeAdapter, then run a follow-up `agent.run_sync("and tomorrow?", message_history=history)` with a
FunctionModel that checks it receives the old history followed by the new prompt.

Prints one JSON line: {"validated", "message_count", "model_saw", "history_matches", "last_prompt", "output",
"new_message_count", "snapshot", "canonical_messages"} where canonical_messages is the continuation as Pydantic AI
loaded it, dumped back to JSON (defaults filled in), for comparison with `result.all_messages()`. Exits non-zero (with the reason on stderr) if anything does not hold.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

FOLLOW_UP = "and tomorrow?"


def fetch_continuation(api: str, run_id: str) -> dict:
    url = f"{api.rstrip('/')}/v1/runs/{urllib.parse.quote(run_id, safe='')}/continuation?format=pydantic-ai"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as err:
        raise SystemExit(f"GET {url} -> {err.code}: {err.read().decode(errors='replace')}") from err


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", required=True, help="stepline query API base URL, e.g. http://127.0.0.1:4320")
    parser.add_argument("--run-id", required=True)
    args = parser.parse_args()

    body = fetch_continuation(args.api, args.run_id)
    if "messages" not in body:
        raise SystemExit(f"continuation has no 'messages' field: {json.dumps(body)[:2000]}")
    history = ModelMessagesTypeAdapter.validate_python(body["messages"])
    history_dump = ModelMessagesTypeAdapter.dump_python(history, mode="json")

    seen: dict[str, object] = {}

    # Pydantic AI sends the history unchanged followed by a new request with the prompt; when the
    # history ends with a request (tool returns, the run stopped before the next model call) that has
    # the same or no instructions, it merges the prompt into that request instead.
    ends_with_request = bool(history) and isinstance(history[-1], ModelRequest)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen["count"] = len(messages)
        dumped = ModelMessagesTypeAdapter.dump_python(messages, mode="json")
        if len(messages) == len(history) + 1:
            seen["history_matches"] = dumped[: len(history)] == history_dump
        elif ends_with_request and len(messages) == len(history):
            prefix = dumped[-1]["parts"][: len(history_dump[-1]["parts"])]
            seen["history_matches"] = dumped[:-1] == history_dump[:-1] and prefix == history_dump[-1]["parts"]
        else:
            seen["history_matches"] = False
        last = messages[-1]
        prompts = [
            p.content
            for p in (last.parts if isinstance(last, ModelRequest) else [])
            if isinstance(p, UserPromptPart)
        ]
        seen["last_prompt"] = prompts[-1] if prompts else None
        return ModelResponse(parts=[TextPart(f"Tomorrow too; I saw {len(messages) - 1} earlier messages.")])

    agent = Agent(FunctionModel(model), name="orchestrator", instructions="You plan trips.")
    result = agent.run_sync(FOLLOW_UP, message_history=history)

    report = {
        "validated": True,
        "message_count": len(history),
        "model_saw": seen.get("count"),
        "history_matches": seen.get("history_matches"),
        "last_prompt": seen.get("last_prompt"),
        "output": result.output,
        "new_message_count": len(result.new_messages()),
        "snapshot": body.get("snapshot"),
        "canonical_messages": history_dump,
    }
    print(json.dumps(report), flush=True)

    problems = []
    allowed_counts = {len(history) + 1, len(history)} if ends_with_request else {len(history) + 1}
    if report["model_saw"] not in allowed_counts:
        problems.append(f"model saw {report['model_saw']} messages, expected one of {sorted(allowed_counts)}")
    if report["history_matches"] is not True:
        problems.append("the model did not receive the continuation's history unchanged")
    if report["last_prompt"] != FOLLOW_UP:
        problems.append(f"last message prompt is {report['last_prompt']!r}, expected {FOLLOW_UP!r}")
    if problems:
        print("; ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
