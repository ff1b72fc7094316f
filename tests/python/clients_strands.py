"""Two turns of a real Strands agent, the second one built from `stepline_client.strands_messages`.

Turn 1: the "calc" agent (scripted model, no network; `session.id` set through trace attributes) calls the tool
`add` {a: 2, b: 3} and answers; its spans go to stepline over OTLP/HTTP and the provider is flushed. Turn 2:
the run is found with `StepLine.latest_run(session_id)`, and a new `Agent(messages=strands_messages(run_id),
system_prompt=...)` is asked one more question; its model records the messages it receives.

Prints one JSON line: {"turn1_messages" (Strands' own `agent.messages` after turn 1), "history" (what
strands_messages returned), "system_prompt", "received" (what turn 2's model got), "run_id", "output", "export"}.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, AsyncIterator


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--api", required=True)
    parser.add_argument("--session-id", required=True)
    args = parser.parse_args()

    from otlp_setup import install_tracer_provider

    provider, exporter = install_tracer_provider("http", args.endpoint, "stepline-clients-strands")

    from strands import Agent, tool
    from strands.models.model import Model

    from stepline_client import StepLine, strands_agent_kwargs, strands_messages

    received: list[Any] = []

    class ScriptedModel(Model):
        """A tool call for the first question, then text; records the messages of each call."""

        def __init__(self) -> None:
            self.config: dict[str, Any] = {"model_id": "scripted"}

        def update_config(self, **model_config: Any) -> None:
            self.config.update(model_config)

        def get_config(self) -> Any:
            return self.config

        async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):  # type: ignore[override]
            raise NotImplementedError
            yield  # pragma: no cover

        async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs) -> AsyncIterator[Any]:  # type: ignore[override]
            received.append(json.loads(json.dumps(messages, default=str)))
            last = messages[-1]["content"] if messages else []
            answered = any("toolResult" in block for block in last)
            asked_again = any(block.get("text") == "And once more?" for block in last)
            yield {"messageStart": {"role": "assistant"}}
            if answered or asked_again:
                yield {"contentBlockDelta": {"delta": {"text": "Still 5." if asked_again else "The sum is 5."}}}
                yield {"contentBlockStop": {}}
                stop = "end_turn"
            else:
                yield {"contentBlockStart": {"start": {"toolUse": {"toolUseId": "tooluse_1", "name": "add"}}}}
                yield {"contentBlockDelta": {"delta": {"toolUse": {"input": '{"a": 2, "b": 3}'}}}}
                yield {"contentBlockStop": {}}
                stop = "tool_use"
            yield {"messageStop": {"stopReason": stop}}
            yield {"metadata": {"usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}, "metrics": {"latencyMs": 1}}}

    @tool
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    common = dict(
        model=ScriptedModel(),
        tools=[add],
        name="calc",
        trace_attributes={"session.id": args.session_id},
        callback_handler=None,
    )
    first = Agent(system_prompt="You add numbers.", **common)
    first("What is 2 + 3?")
    flushed = provider.force_flush(30_000)
    turn1 = json.loads(json.dumps(first.messages, default=str))

    client = StepLine(args.api)
    run = client.latest_run(args.session_id)
    if run is None:
        raise SystemExit(f"stepline has no run in conversation {args.session_id!r}")
    history = strands_messages(run.run_id, client=client)
    kwargs = strands_agent_kwargs(run.run_id, client=client)
    history_as_read = json.loads(json.dumps(history))  # Strands appends to the list it is given

    received.clear()
    second = Agent(messages=history, system_prompt=kwargs["system_prompt"], **common)
    result = second("And once more?")
    provider.force_flush(30_000)
    provider.shutdown()

    stats = exporter.stats()
    stats["flushed"] = bool(flushed)
    print(
        json.dumps(
            {
                "run_id": run.run_id,
                "turn1_messages": turn1,
                "history": history_as_read,
                "system_prompt": kwargs["system_prompt"],
                "received": received[0] if received else None,
                "output": str(result).strip(),
                "export": stats,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
