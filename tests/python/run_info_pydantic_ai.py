"""Who started a run, its attributes and its rollups, from a real Pydantic AI agent over OTLP.

The resource attributes come from OTEL_RESOURCE_ATTRIBUTES (the caller's, or the value of
`--resource-attributes` put there before the SDK starts, e.g.
`stepline.trigger.kind=schedule,stepline.trigger.job=nightly,tenant=acme`), read by the SDK's
`Resource.create`. The first run also carries a span attribute from baggage: the script puts
`stepline.trigger.user=alice` in the baggage and a span processor copies baggage entries onto
every span it starts (what `opentelemetry-processor-baggage`'s BaggageSpanProcessor does).

Run "tools" (FunctionModel, no network): step 1 calls `lookup` (sleeps ~30 ms, ok) and `book`
(raises ModelRetry the first time) in parallel; step 2 calls `book` again (sleeps ~20 ms, ok);
step 3 answers in text. Run "plain": one text answer, no tools.

Prints one JSON line: {"tools_run_id", "plain_run_id", "resource": {...}, "export": {...}}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import SpanProcessor

from otlp_setup import install_tracer_provider
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


class CopyBaggage(SpanProcessor):
    """Copies every baggage entry of the parent context onto the span as an attribute."""

    def on_start(self, span, parent_context=None) -> None:
        for key, value in baggage.get_all(parent_context).items():
            span.set_attribute(key, str(value))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["http", "grpc"], required=True)
    parser.add_argument("--endpoint", required=True, help="receiver base URL, e.g. http://127.0.0.1:4318")
    parser.add_argument("--resource-attributes", help="the value of OTEL_RESOURCE_ATTRIBUTES to run with")
    args = parser.parse_args()
    if args.resource_attributes is not None:
        os.environ["OTEL_RESOURCE_ATTRIBUTES"] = args.resource_attributes

    provider, exporter = install_tracer_provider(args.transport, args.endpoint, "stepline-run-info")
    provider.add_span_processor(CopyBaggage())
    Agent.instrument_all(True)

    def tools_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = sum(1 for m in messages if m.kind == "response")
        if step == 0:
            return ModelResponse(
                parts=[
                    ToolCallPart("lookup", {"city": "Paris"}, tool_call_id="call_l1"),
                    ToolCallPart("book", {"city": "Paris"}, tool_call_id="call_b1"),
                ]
            )
        if step == 1:
            return ModelResponse(parts=[ToolCallPart("book", {"city": "Paris"}, tool_call_id="call_b2")])
        return ModelResponse(parts=[TextPart("Booked.")])

    agent = Agent(FunctionModel(tools_model), name="planner", instructions="You plan trips.")
    retried = {"book": False}

    @agent.tool_plain
    def lookup(city: str) -> str:
        time.sleep(0.03)
        return f"18C in {city}"

    @agent.tool_plain
    def book(city: str) -> dict:
        if not retried["book"]:
            retried["book"] = True
            raise ModelRetry("booking system busy, try again")
        time.sleep(0.02)
        return {"booking": "B-1", "city": city}

    token = context.attach(baggage.set_baggage("stepline.trigger.user", "alice"))
    try:
        tools_result = agent.run_sync("Plan a trip to Paris")
    finally:
        context.detach(token)

    plain = Agent(
        FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("Hello.")])),
        name="greeter",
    )
    plain_result = plain.run_sync("Say hello")

    resource = dict(provider.resource.attributes)
    flushed = provider.force_flush(30_000)
    provider.shutdown()
    stats = exporter.stats()
    stats["flushed"] = bool(flushed)
    print(
        json.dumps(
            {
                "tools_run_id": tools_result.run_id,
                "plain_run_id": plain_result.run_id,
                "resource": {k: str(v) for k, v in resource.items()},
                "export": stats,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
