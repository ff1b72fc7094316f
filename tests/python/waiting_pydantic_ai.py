"""A real Pydantic AI agent that ends waiting on deferred tool calls, then is resumed in a new run.

Exported to stepline over OTLP (the stock exporter; FunctionModel, no network). Two phases, run as two
processes the way an application waits for a human:

--phase wait: the "ops" agent (output_type=[str, DeferredToolRequests]) gets one response asking for four
  calls: delete_file (requires_approval=True: not started), pay (raises ApprovalRequired), run_job (raises
  CallDeferred) and get_time (runs). The run ends with DeferredToolRequests.
  Prints {"run_id", "conversation_id", "calls", "approvals", "all_messages", "export"}.

--phase resume: fetches the waiting run's continuation from stepline (format=pydantic-ai, the default snapshot of a waiting run,
  repair=false: its last snapshot, ending with the deferred calls),
  loads it with ModelMessagesTypeAdapter and resumes with DeferredToolResults: delete_file approved, pay
  denied (ToolDenied), run_job's external result. The model then answers with text.
  Prints {"run_id", "output", "history_len", "export"}.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
import urllib.request

from otlp_setup import install_tracer_provider
from pydantic_ai import (
    Agent,
    ApprovalRequired,
    CallDeferred,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolDenied,
)
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [p for m in messages if m.kind == "request" for p in m.parts if p.part_kind == "tool-return"]
    if not returns:
        return ModelResponse(
            parts=[
                ToolCallPart("delete_file", {"path": "a.txt"}, tool_call_id="call_del"),
                ToolCallPart("pay", {"amount": 5}, tool_call_id="call_pay"),
                ToolCallPart("run_job", {"job": "nightly"}, tool_call_id="call_job"),
                ToolCallPart("get_time", {}, tool_call_id="call_time"),
            ]
        )
    return ModelResponse(parts=[TextPart("done: " + "; ".join(str(p.content) for p in returns))])


def build_agent() -> Agent:
    agent = Agent(FunctionModel(model), name="ops", output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        return f"deleted {path}"

    @agent.tool
    def pay(ctx: RunContext, amount: int) -> str:
        if not ctx.tool_call_approved:
            raise ApprovalRequired(metadata={"why": "money"})
        return f"paid {amount}"

    @agent.tool_plain
    def run_job(job: str) -> str:
        raise CallDeferred

    @agent.tool_plain
    def get_time() -> str:
        return "noon"

    return agent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phase", choices=["wait", "resume"], required=True)
    parser.add_argument("--endpoint", required=True, help="receiver base URL, e.g. http://127.0.0.1:4318")
    parser.add_argument("--conversation-id", required=True)
    parser.add_argument("--api", help="stepline query API base URL (resume)")
    parser.add_argument("--run-id", help="the waiting run (resume)")
    args = parser.parse_args()

    provider, exporter = install_tracer_provider("http", args.endpoint, "stepline-e2e-waiting")
    Agent.instrument_all(True)
    agent = build_agent()

    if args.phase == "wait":
        result = agent.run_sync("Clean up and pay", conversation_id=args.conversation_id)
        if not isinstance(result.output, DeferredToolRequests):
            raise SystemExit(f"expected DeferredToolRequests, got {result.output!r}")
        report = {
            "run_id": result.run_id,
            "conversation_id": result.conversation_id,
            "calls": [c.tool_call_id for c in result.output.calls],
            "approvals": [c.tool_call_id for c in result.output.approvals],
            "all_messages": json.loads(result.all_messages_json()),
        }
    else:
        url = (
            f"{args.api.rstrip('/')}/v1/runs/{urllib.parse.quote(args.run_id, safe='')}"
            "/continuation?format=pydantic-ai&repair=false"
        )
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        history = ModelMessagesTypeAdapter.validate_python(body["messages"])
        results = DeferredToolResults(
            approvals={"call_del": True, "call_pay": ToolDenied("too costly")},
            calls={"call_job": "job ok"},
        )
        result = agent.run_sync(
            message_history=history,
            deferred_tool_results=results,
            conversation_id=args.conversation_id,
        )
        report = {
            "run_id": result.run_id,
            "output": result.output,
            "history_len": len(history),
            "unresolved_effects": body.get("unresolved_effects"),
        }

    flushed = provider.force_flush(30_000)
    provider.shutdown()
    stats = exporter.stats()
    stats["flushed"] = bool(flushed)
    report["export"] = stats
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
