"""A real OpenLLMetry run: traceloop-sdk (its @agent / @tool decorators and association properties) with
Traceloop's OpenAI instrumentation, exported to stepline over OTLP. The `openai` client's HTTP transport is an
httpx2 MockTransport answering scripted Chat Completions (no network).

The "calc" agent (a small tool-calling loop; session id as the `session_id` association property) makes:
  request 1: the model asks for add {a:2,b:3} and add {a:1,b:1} (parallel calls);
  request 2: the model answers "The sums are 5 and 2."
With --continue-from FILE (stepline's `format=openai-chat` continuation as JSON), the continuation's messages
plus one more question are sent through the same mocked client; the script reports the messages the model
received, so the test can check the client accepted stepline's history as its own.

Prints exactly one JSON line: {"messages", "received", "export": {...}}.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["http", "grpc"], required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--session-id", required=True)
    parser.add_argument("--continue-from")
    args = parser.parse_args()

    from otlp_setup import CountingExporter, make_exporter

    exporter = CountingExporter(make_exporter(args.transport, args.endpoint))

    from traceloop.sdk import Traceloop
    from traceloop.sdk.decorators import agent, tool
    from traceloop.sdk.instruments import Instruments

    Traceloop.init(
        app_name="stepline-e2e-openllmetry",
        exporter=exporter,
        disable_batch=True,
        instruments={Instruments.OPENAI},
        telemetry_enabled=False,
    )
    Traceloop.set_association_properties({"session_id": args.session_id})

    import httpx2
    from openai import OpenAI

    received: list[list[dict[str, Any]]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        messages = body["messages"]
        received.append(messages)
        last = messages[-1]
        if last["role"] == "tool":
            message: dict[str, Any] = {"role": "assistant", "content": "The sums are 5 and 2."}
            finish = "stop"
        elif len(messages) > 2:
            message = {"role": "assistant", "content": "Still 5 and 2."}
            finish = "stop"
        else:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}},
                    {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 1}'}},
                ],
            }
            finish = "tool_calls"
        return httpx2.Response(
            200,
            json={
                "id": f"chatcmpl-{len(received)}",
                "object": "chat.completion",
                "created": 1,
                "model": "gpt-scripted",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            },
        )

    client = OpenAI(api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))
    tools = [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Adds two numbers.",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            },
        }
    ]

    @tool(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    @agent(name="calc")
    def calc(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        while True:
            response = client.chat.completions.create(model="gpt-scripted", messages=messages, tools=tools)
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return messages
            for call in message.tool_calls:
                result = add(**json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": str(result)})

    if args.continue_from:
        with open(args.continue_from) as f:
            continuation = json.load(f)
        messages = list(continuation["messages"]) + [{"role": "user", "content": "And once more?"}]
    else:
        messages = [
            {"role": "system", "content": "You add numbers."},
            {"role": "user", "content": "What are 2 + 3 and 1 + 1?"},
        ]
    messages = calc(messages)

    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    flushed = provider.force_flush(30_000) if hasattr(provider, "force_flush") else True
    stats = exporter.stats()
    stats["flushed"] = bool(flushed)
    print(
        json.dumps({"messages": messages, "received": received[0] if received else None, "export": stats}),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
