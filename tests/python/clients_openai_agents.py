"""Two turns of a real OpenAI Agents SDK agent sharing a `stepline_client.StepLineSession`.

The model is the SDK's OpenAIResponsesModel on an AsyncOpenAI client whose transport is an httpx2 MockTransport
answering scripted Responses payloads (no network); the spans go to stepline through OpenInference's
instrumentation and the OTLP/HTTP exporter.

Turn 1 (`Runner.run(agent, "What is 2 + 3?", session=session)`): the session is still empty; the model calls
`add` {a: 2, b: 3}, then answers. The tracer provider is flushed (the session's writes are the telemetry).
Turn 2 (`Runner.run(agent, "And once more?", session=session)`): `get_items` reads the conversation from stepline.

Prints one JSON line: {"turn1_items" (the SDK's `to_input_list()` of turn 1), "first_input" and
"second_input" (the input the mocked model received in each turn's first request), "session_items",
"session_run_id", "limited" (get_items(limit=2)), "first_run_id", "by_run_items" (a session opened
with turn 1's run id), "output", "export"}.
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
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--api", required=True)
    parser.add_argument("--session-id", required=True)
    args = parser.parse_args()

    from otlp_setup import install_tracer_provider

    provider, exporter = install_tracer_provider("http", args.endpoint, "stepline-clients-openai-agents")

    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)

    import httpx2
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool
    from agents.memory import Session
    from openai import AsyncOpenAI

    from stepline_client import StepLine, StepLineSession

    requests: list[dict[str, Any]] = []

    def message(n: int, text: str) -> dict[str, Any]:
        return {
            "type": "message",
            "id": f"msg_{n}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        requests.append(body)
        items = body.get("input") or []
        last = items[-1] if items else {}
        if isinstance(last, dict) and last.get("role") == "user":
            prompt = last.get("content")
            if prompt == "And once more?":
                output = [message(len(requests), "Still 5.")]
            else:
                output = [
                    {
                        "type": "function_call",
                        "id": "fc_1",
                        "call_id": "call_add_1",
                        "name": "add",
                        "arguments": json.dumps({"a": 2, "b": 3}),
                        "status": "completed",
                    }
                ]
        else:
            output = [message(len(requests), "2 + 3 = 5.")]
        return httpx2.Response(
            200,
            json=scripted_responses.response(f"resp_{len(requests)}", body.get("instructions"), output),
        )

    client = AsyncOpenAI(api_key="test", http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)))
    model = OpenAIResponsesModel(model="gpt-scripted", openai_client=client)

    @function_tool
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    agent = Agent(name="calc", instructions="You add numbers.", model=model, tools=[add])
    session = StepLineSession(args.session_id, StepLine(args.api))
    if not isinstance(session, Session):
        raise SystemExit("StepLineSession does not satisfy the SDK's Session protocol")

    async def turn(prompt: str) -> Any:
        with using_session(args.session_id):
            return await Runner.run(agent, prompt, session=session)

    first = asyncio.run(turn("What is 2 + 3?"))
    flushed = provider.force_flush(30_000)
    first_requests = len(requests)

    second = asyncio.run(turn("And once more?"))
    first_run_id = session.last_run_id  # the run turn 2's get_items read: turn 1's
    flushed = provider.force_flush(30_000) and flushed
    # After the flush, the session reads the second turn's run: both turns.
    session_items = session.items()
    limited = asyncio.run(session.get_items(limit=2))
    # A run id instead of a conversation id: that run's history, whatever came after it.
    by_run = StepLineSession(first_run_id, StepLine(args.api)).items() if first_run_id else None
    provider.shutdown()

    stats = exporter.stats()
    stats["flushed"] = bool(flushed)
    print(
        json.dumps(
            {
                "turn1_items": json.loads(json.dumps(first.to_input_list(), default=str)),
                "first_input": requests[0]["input"],
                "second_input": requests[first_requests]["input"] if len(requests) > first_requests else None,
                "session_items": session_items,
                "session_run_id": session.last_run_id,
                "limited": limited,
                "first_run_id": first_run_id,
                "by_run_items": by_run,
                "output": str(second.final_output),
                "export": stats,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
