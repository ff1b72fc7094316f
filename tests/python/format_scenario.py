"""A real Pydantic AI agent run, exported to stepline over OTLP/HTTP, whose history exercises every
provider format: an image in the user prompt (BinaryContent), thinking, parallel tool calls, a tool
that fails (ModelRetry) and its retry, a structured tool result, and a final text answer.

The model is a FunctionModel (no network). Steps:
  1: thinking + text + two parallel calls, get_weather (ok) and book_trip (raises ModelRetry);
  2: book_trip again (returns a dict);
  3: the answer.

Prints one JSON line: {"run_id", "all_messages", "export": {...}}.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys

from otlp_setup import install_tracer_provider
from pydantic_ai import Agent, BinaryContent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ThinkingPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

# A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True, help="OTLP/HTTP base URL, e.g. http://127.0.0.1:4318")
    args = parser.parse_args()

    provider, exporter = install_tracer_provider("http", args.endpoint, "stepline-format-scenario")
    Agent.instrument_all(True)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = sum(1 for m in messages if m.kind == "response")
        if step == 0:
            return ModelResponse(
                parts=[
                    ThinkingPart("The photo shows Paris; check the weather and book."),
                    TextPart("Checking the weather and booking."),
                    ToolCallPart("get_weather", {"city": "Paris"}, tool_call_id="call_w1"),
                    ToolCallPart("book_trip", {"city": "Paris"}, tool_call_id="call_b1"),
                ]
            )
        if step == 1:
            return ModelResponse(parts=[ToolCallPart("book_trip", {"city": "Paris"}, tool_call_id="call_b2")])
        return ModelResponse(parts=[TextPart("Booked B-1. Weather 18C.")])

    agent = Agent(FunctionModel(model), name="traveller", instructions="You plan trips.")
    state = {"retried": False}

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return f"18C in {city}"

    @agent.tool_plain
    def book_trip(city: str) -> dict:
        if not state["retried"]:
            state["retried"] = True
            raise ModelRetry("booking system busy, try again")
        return {"booking": "B-1", "city": city}

    result = agent.run_sync(["Plan a trip to the place in this photo.", BinaryContent(PNG, media_type="image/png")])

    flushed = provider.force_flush(30_000)
    provider.shutdown()
    stats = exporter.stats()
    stats["flushed"] = bool(flushed)
    print(
        json.dumps(
            {"run_id": result.run_id, "all_messages": json.loads(result.all_messages_json()), "export": stats}
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
