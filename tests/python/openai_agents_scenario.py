"""A real OpenAI Agents SDK run, instrumented by openinference-instrumentation-openai-agents, exported to
stepline over OTLP. The model is the SDK's own OpenAIResponsesModel on an AsyncOpenAI client whose HTTP
transport is an httpx2 MockTransport answering scripted Responses payloads (no network).

The "calc" agent (session id set with openinference's `using_session`) makes:
  response 1: four parallel calls: add {a:2,b:3}, add {a:1,b:1}, fail {} (raises), helper {input:"hi"}
              (helper is an agent used as a tool: a delegate run with its own model request);
  response 2: "The sums are 5 and 2."
With --continue-from FILE (stepline's `format=openai-responses` continuation as JSON), the same agent is run
with `Runner.run(agent, input=continuation["input"] + [new question])`; the script reports the input the
mocked model received, so the test can check the SDK accepted stepline's items as its own.

Prints exactly one JSON line: {"items", "output", "received", "instructions", "export": {...}}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import scripted_responses


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["http", "grpc"], required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--session-id", required=True)
    parser.add_argument("--continue-from")
    args = parser.parse_args()

    from otlp_setup import install_tracer_provider

    provider, exporter = install_tracer_provider(args.transport, args.endpoint, "stepline-e2e-openai-agents")

    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    # Exclusive (the default): the SDK's own exporter to the OpenAI platform is replaced.
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)

    import httpx2
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool
    from openai import AsyncOpenAI

    requests: list[dict[str, Any]] = []

    def respond(body: dict[str, Any], output: list[dict[str, Any]]) -> httpx2.Response:
        n = len(requests)
        return httpx2.Response(
            200,
            json=scripted_responses.response(f"resp_{n}", body.get("instructions"), output),
        )

    def text(n: str, content: str) -> dict[str, Any]:
        return {
            "type": "message",
            "id": f"msg_{n}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": content, "annotations": []}],
        }

    def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "function_call",
            "id": f"fc_{call_id}",
            "call_id": call_id,
            "name": name,
            "arguments": json.dumps(arguments),
            "status": "completed",
        }

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        requests.append(body)
        items = body.get("input") or []
        if "helper" in (body.get("instructions") or ""):
            return respond(body, [text("helper", "helper done")])
        answered = any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items)
        if answered:
            last = items[-1] if items else {}
            if last.get("role") == "user":
                return respond(body, [text("again", "Still 5 and 2.")])
            return respond(body, [text("final", "The sums are 5 and 2.")])
        return respond(
            body,
            [
                call("call_add_1", "add", {"a": 2, "b": 3}),
                call("call_add_2", "add", {"a": 1, "b": 1}),
                call("call_fail", "fail", {}),
                call("call_helper", "helper", {"input": "hi"}),
            ],
        )

    client = AsyncOpenAI(
        api_key="test", http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    )
    model = OpenAIResponsesModel(model="gpt-scripted", openai_client=client)

    @function_tool
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    @function_tool
    def fail() -> str:
        """Always fails."""
        raise ValueError("the fail tool failed")

    helper = Agent(name="helper", instructions="You are the helper.", model=model)
    agent = Agent(
        name="calc",
        instructions="You add numbers.",
        model=model,
        tools=[add, fail, helper.as_tool(tool_name="helper", tool_description="Asks the helper.")],
    )

    if args.continue_from:
        with open(args.continue_from) as f:
            continuation = json.load(f)
        run_input: Any = list(continuation["input"]) + [{"role": "user", "content": "And once more?"}]
    else:
        run_input = "What are 2 + 3 and 1 + 1?"

    async def run() -> Any:
        with using_session(args.session_id):
            return await Runner.run(agent, input=run_input)

    result = asyncio.run(run())

    flushed = provider.force_flush(30_000)
    provider.shutdown()
    stats = exporter.stats()
    stats["flushed"] = bool(flushed)
    main_requests = [r for r in requests if "helper" not in (r.get("instructions") or "")]
    print(
        json.dumps(
            {
                "items": json.loads(json.dumps(result.to_input_list(), default=str)),
                "output": str(result.final_output),
                "received": main_requests[0]["input"] if main_requests else None,
                "instructions": main_requests[0].get("instructions") if main_requests else None,
                "export": stats,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
