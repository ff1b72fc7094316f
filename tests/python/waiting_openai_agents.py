"""A real OpenAI Agents SDK run that stops on tools needing approval, then is resumed from its RunState.

Instrumented by openinference-instrumentation-openai-agents, exported to stepline over OTLP (stock exporter).
The model is the SDK's OpenAIResponsesModel on an AsyncOpenAI client whose transport is an httpx2
MockTransport answering scripted Responses payloads (no network), as in openai_agents_scenario.py.

--phase wait: the "ops" agent's first response asks for delete_file and pay (both
  `@function_tool(needs_approval=True)`) and get_time. The run ends with `result.interruptions`; the
  RunState is written to --state (as an application stores it while a human decides).
  Prints {"interruptions": [{"call_id", "tool_name"}], "export"}.
--phase resume: a new process loads the RunState, approves delete_file, rejects pay and runs again
  (`Runner.run(agent, state)`); the model answers with text.
  Prints {"output", "interruptions", "received", "export"}.
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
    parser.add_argument("--phase", choices=["wait", "resume"], required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--session-id", required=True)
    parser.add_argument("--state", required=True, help="file the RunState is written to / read from")
    args = parser.parse_args()

    from otlp_setup import install_tracer_provider

    provider, exporter = install_tracer_provider("http", args.endpoint, "stepline-e2e-waiting-oai")

    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)

    import httpx2
    from agents import Agent, OpenAIResponsesModel, Runner, RunState, function_tool
    from openai import AsyncOpenAI

    requests: list[dict[str, Any]] = []

    def respond(body: dict[str, Any], output: list[dict[str, Any]]) -> httpx2.Response:
        return httpx2.Response(
            200,
            json=scripted_responses.response(f"resp_{args.phase}_{len(requests)}", body.get("instructions"), output),
        )

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
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if len(outputs) >= 3:
            text = "done: " + "; ".join(str(o.get("output")) for o in outputs)
            return respond(
                body,
                [
                    {
                        "type": "message",
                        "id": "msg_final",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}],
                    }
                ],
            )
        return respond(
            body,
            [
                call("call_del", "delete_file", {"path": "a.txt"}),
                call("call_pay", "pay", {"amount": 5}),
                call("call_time", "get_time", {}),
            ],
        )

    client = AsyncOpenAI(api_key="test", http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)))
    model = OpenAIResponsesModel(model="gpt-scripted", openai_client=client)

    @function_tool(needs_approval=True)
    def delete_file(path: str) -> str:
        """Deletes a file."""
        return f"deleted {path}"

    @function_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pays."""
        return f"paid {amount}"

    @function_tool
    def get_time() -> str:
        """The time."""
        return "noon"

    agent = Agent(name="ops", instructions="You run ops.", model=model, tools=[delete_file, pay, get_time])

    async def run() -> dict[str, Any]:
        if args.phase == "wait":
            with using_session(args.session_id):
                result = await Runner.run(agent, input="Clean up and pay")
            with open(args.state, "w") as f:
                f.write(result.to_state().to_string())
            return {
                "interruptions": [
                    {"call_id": getattr(i.raw_item, "call_id", None), "tool_name": i.tool_name}
                    for i in result.interruptions
                ],
                "output": None if result.final_output is None else str(result.final_output),
            }
        with open(args.state) as f:
            state = await RunState.from_string(agent, f.read())
        for item in state.get_interruptions():
            if item.tool_name == "delete_file":
                state.approve(item)
            else:
                state.reject(item)
        with using_session(args.session_id):
            result = await Runner.run(agent, state)
        return {
            "output": str(result.final_output),
            "interruptions": len(result.interruptions),
            "received": requests[-1]["input"] if requests else None,
        }

    report = asyncio.run(run())
    flushed = provider.force_flush(30_000)
    provider.shutdown()
    stats = exporter.stats()
    stats["flushed"] = bool(flushed)
    report["export"] = stats
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
