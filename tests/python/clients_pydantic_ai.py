"""Two turns of a real Pydantic AI agent, the second one continued through `stepline_client.pydantic_ai_history`.

Turn 1: the agent (FunctionModel, no network) calls the tool `get_weather` {"city": "Paris"}, then answers; its
spans go to stepline over OTLP/HTTP and the provider is flushed. Turn 2: `pydantic_ai_history(result.run_id)`
(Pydantic AI's own run id, an alias in stepline) is passed as `message_history=` to a second agent whose model
records what it receives.

Prints one JSON line: {"turn1_messages", "history", "model_saw", "second_prompt", "output", "run_id",
"export"} where the message lists are Pydantic AI JSON (ModelMessagesTypeAdapter dumps). The Rust test
(tests/clients.rs) checks that the second turn's model saw the first turn's messages, then the new prompt.
"""

from __future__ import annotations

import argparse
import json
import sys

from otlp_setup import install_tracer_provider
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from stepline_client import StepLine, pydantic_ai_history

FOLLOW_UP = "And tomorrow?"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True, help="OTLP/HTTP base URL")
    parser.add_argument("--api", required=True, help="stepline query API base URL")
    parser.add_argument("--conversation-id", required=True)
    args = parser.parse_args()

    provider, exporter = install_tracer_provider("http", args.endpoint, "stepline-clients-pydantic-ai")
    Agent.instrument_all(True)

    def first_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(1 for m in messages if m.kind == "response") == 0:
            return ModelResponse(parts=[ToolCallPart("get_weather", {"city": "Paris"}, tool_call_id="call_w1")])
        return ModelResponse(parts=[TextPart("Sunny in Paris.")])

    agent = Agent(FunctionModel(first_model), name="weather", instructions="You report the weather.")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return f"{city}: sunny, 21C"

    first = agent.run_sync("Weather in Paris?", conversation_id=args.conversation_id)
    flushed = provider.force_flush(30_000)

    # Turn 2: the history comes from stepline, not from `first`.
    history = pydantic_ai_history(first.run_id, client=StepLine(args.api))
    seen: list[list[ModelMessage]] = []

    def second_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart("Rain tomorrow.")])

    follow = Agent(FunctionModel(second_model), name="weather", instructions="You report the weather.")
    second = follow.run_sync(FOLLOW_UP, message_history=history, conversation_id=args.conversation_id)
    provider.force_flush(30_000)
    provider.shutdown()

    saw = seen[0] if seen else []
    last = saw[-1] if saw else None
    prompts = [p.content for p in getattr(last, "parts", []) if getattr(p, "part_kind", "") == "user-prompt"]
    stats = exporter.stats()
    stats["flushed"] = bool(flushed)
    print(
        json.dumps(
            {
                "run_id": first.run_id,
                "turn1_messages": ModelMessagesTypeAdapter.dump_python(first.all_messages(), mode="json"),
                "history": ModelMessagesTypeAdapter.dump_python(history, mode="json"),
                "history_types": sorted({type(m).__name__ for m in history}),
                "model_saw": ModelMessagesTypeAdapter.dump_python(saw, mode="json"),
                "second_prompt": prompts[-1] if prompts else None,
                "output": second.output,
                "export": stats,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
