"""Lineage of continued and forked runs with a real Pydantic AI agent exported to stepline over OTLP.

Each turn runs the agent (FunctionModel named `model-turn-N`, run instructions `Turn N`; the model
calls the `lookup` tool, then answers), flushes the stock exporter and waits until stepline has the
run completed:

  turn 0: a new conversation;
  turn 1: `message_history=` the pydantic-ai continuation of turn 0 (a continuation);
  turn 2: `message_history=` the pydantic-ai continuation of turn 1 (a continuation);
  fork:   `message_history=` turn 0's continuation `at=` its snapshot before the answer (a fork);
  plain:  three runs of another agent with a common system prompt (two different questions, one
          repeated): unrelated, never linked.

Prints one JSON line: {"turns": [alias...], "fork", "fork_at", "plain": [alias...],
"continuation": turn 3's continuation (the history after turn 2) as Pydantic AI loads it, dumped
back to JSON, "all_messages": Pydantic AI's own `all_messages()` of turn 2, "instructions":
{"stepline": [...], "pydantic": [...]}, "model_names": {...}, "export": {...}}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from otlp_setup import install_tracer_provider
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel


def get(api: str, path: str) -> tuple[int, object]:
    url = api.rstrip("/") + path
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


def wait_completed(api: str, run_id: str, deadline_s: float = 60.0) -> dict:
    path = f"/v1/runs/{urllib.parse.quote(run_id, safe='')}"
    end = time.monotonic() + deadline_s
    last: object = None
    while time.monotonic() < end:
        status, body = get(api, path)
        last = body
        if status == 200 and isinstance(body, dict) and body.get("status") == "completed":
            return body
        time.sleep(0.1)
    raise SystemExit(f"run {run_id} not completed in stepline after {deadline_s}s: {last}")


def continuation(api: str, run_id: str, at: int | None = None) -> list[ModelMessage]:
    path = f"/v1/runs/{urllib.parse.quote(run_id, safe='')}/continuation?format=pydantic-ai"
    if at is not None:
        path += f"&at={at}"
    status, body = get(api, path)
    if status != 200 or not isinstance(body, dict):
        raise SystemExit(f"GET {path} -> {status}: {body}")
    return ModelMessagesTypeAdapter.validate_python(body["messages"])


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        return ModelResponse(parts=[TextPart(f"Answer after {len(messages)} messages.")])
    return ModelResponse(
        parts=[ToolCallPart("lookup", {"q": len(messages)}, tool_call_id=f"call_{len(messages)}")]
    )


def plain_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("Plain answer.")])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True, help="receiver base URL, e.g. http://127.0.0.1:4318")
    parser.add_argument("--api", required=True, help="stepline query API base URL")
    parser.add_argument("--service", required=True, help="service.name of the exported spans")
    args = parser.parse_args()

    provider, exporter = install_tracer_provider("http", args.endpoint, args.service)
    Agent.instrument_all(True)

    agent = Agent(name="lineage")

    @agent.tool_plain
    def lookup(q: int) -> str:
        return f"found {q}"

    def turn(n: int, prompt: str, history: list[ModelMessage] | None):
        result = agent.run_sync(
            prompt,
            model=FunctionModel(model, model_name=f"model-turn-{n}"),
            instructions=f"Turn {n}",
            message_history=history,
        )
        provider.force_flush()
        wait_completed(args.api, result.run_id)
        return result

    r0 = turn(0, "Where is the key?", None)
    r1 = turn(1, "And the door?", continuation(args.api, r0.run_id))
    r2 = turn(2, "And the window?", continuation(args.api, r1.run_id))
    after = continuation(args.api, r2.run_id)

    # Turn 0's snapshot before its answer: the history up to the tool's return.
    status, snapshots = get(args.api, f"/v1/runs/{urllib.parse.quote(r0.run_id, safe='')}/snapshots")
    if status != 200 or not isinstance(snapshots, dict):
        raise SystemExit(f"snapshots of turn 0 -> {status}: {snapshots}")
    metas = snapshots["snapshots"]
    fork_at = max(
        s["seq"] for s in metas if s["state"] == "complete" and s["message_count"] == 3
    )
    if fork_at == metas[-1]["seq"]:
        raise SystemExit(f"the snapshot before the answer is the last one: {metas}")
    fork = turn(9, "Start over from the lookup.", continuation(args.api, r0.run_id, fork_at))

    plain = Agent(FunctionModel(plain_model), name="plain", system_prompt="You are a helpful assistant.")
    plain_runs = [plain.run_sync(q) for q in ["What is 2+2?", "Name a colour.", "What is 2+2?"]]
    provider.force_flush()
    for r in plain_runs:
        wait_completed(args.api, r.run_id)

    own = ModelMessagesTypeAdapter.dump_python(r2.all_messages(), mode="json")
    loaded = ModelMessagesTypeAdapter.dump_python(after, mode="json")
    report = {
        "turns": [r0.run_id, r1.run_id, r2.run_id],
        "fork": fork.run_id,
        "fork_at": fork_at,
        "plain": [r.run_id for r in plain_runs],
        "continuation": loaded,
        "all_messages": own,
        "instructions": {
            "stepline": [m.get("instructions") for m in loaded if m["kind"] == "request"],
            "pydantic": [m.get("instructions") for m in own if m["kind"] == "request"],
        },
        "model_names": {
            "stepline": [m.get("model_name") for m in loaded if m["kind"] == "response"],
            "pydantic": [m.get("model_name") for m in own if m["kind"] == "response"],
        },
        "export": exporter.stats(),
    }
    provider.shutdown()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
