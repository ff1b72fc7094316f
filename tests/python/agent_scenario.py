"""A real Pydantic AI agent run exported to stepline over OTLP (HTTP or gRPC).

The orchestrator agent (FunctionModel, so no network model) does:
  step 1: two tool calls in parallel, get_weather (ok) and book_trip (raises ModelRetry once);
  step 2: book_trip again (succeeds);
  step 3: ask_researcher, a tool that runs the delegate agent "researcher";
  step 4: a plain text answer.

Prints exactly one JSON line on stdout:
  {"run_id", "conversation_id", "delegate_run_id", "delegate_conversation_id", "output",
   "all_messages", "export": {"ok_batches", "failed_batches", "exported_spans"}}
"""

from __future__ import annotations

import argparse
import json
import sys

from otlp_setup import install_tracer_provider
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["http", "grpc"], required=True)
    parser.add_argument("--endpoint", required=True, help="receiver base URL, e.g. http://127.0.0.1:4318")
    parser.add_argument("--conversation-id", required=True)
    args = parser.parse_args()

    provider, exporter = install_tracer_provider(args.transport, args.endpoint, "stepline-e2e-scenario")
    Agent.instrument_all(True)

    def researcher_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Paris is sunny in spring.")])

    researcher = Agent(FunctionModel(researcher_model), name="researcher", instructions="You research.")

    def orchestrator_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = sum(1 for m in messages if m.kind == "response")
        if step == 0:
            return ModelResponse(
                parts=[
                    ToolCallPart("get_weather", {"city": "Paris"}, tool_call_id="call_w1"),
                    ToolCallPart("book_trip", {"city": "Paris"}, tool_call_id="call_b1"),
                ]
            )
        if step == 1:
            return ModelResponse(parts=[ToolCallPart("book_trip", {"city": "Paris"}, tool_call_id="call_b2")])
        if step == 2:
            return ModelResponse(
                parts=[ToolCallPart("ask_researcher", {"question": "Paris?"}, tool_call_id="call_r1")]
            )
        return ModelResponse(parts=[TextPart("Booked. Weather 18C.")])

    orchestrator = Agent(
        FunctionModel(orchestrator_model), name="orchestrator", instructions="You plan trips."
    )
    state: dict[str, object] = {"retried": False, "delegate_run_id": None, "delegate_conversation_id": None}

    @orchestrator.tool_plain
    def get_weather(city: str) -> str:
        return f"18C in {city}"

    @orchestrator.tool_plain
    def book_trip(city: str) -> dict:
        if not state["retried"]:
            state["retried"] = True
            raise ModelRetry("booking system busy, try again")
        return {"booking": "B-1", "city": city}

    @orchestrator.tool
    async def ask_researcher(ctx: RunContext, question: str) -> str:
        result = await researcher.run(question)
        state["delegate_run_id"] = result.run_id
        state["delegate_conversation_id"] = result.conversation_id
        return result.output

    result = orchestrator.run_sync("Plan a trip to Paris", conversation_id=args.conversation_id)

    flushed = provider.force_flush(30_000)
    provider.shutdown()
    stats = exporter.stats()
    stats["flushed"] = bool(flushed)

    print(
        json.dumps(
            {
                "run_id": result.run_id,
                "conversation_id": result.conversation_id,
                "delegate_run_id": state["delegate_run_id"],
                "delegate_conversation_id": state["delegate_conversation_id"],
                "output": result.output,
                "all_messages": json.loads(result.all_messages_json()),
                "export": stats,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
