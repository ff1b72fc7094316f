"""A real Strands Agents run exported to stepline over OTLP, with a scripted model (no network).

The "calc" agent (session.id set through trace attributes) makes:
  cycle 1: the model reasons (with a signature) and asks for tool `add` {a: 2, b: 3};
  cycle 2: the model answers "The sum is 5.".
With --continue-from FILE (stepline's `format=strands` continuation as JSON), the agent is built with
`Agent(messages=…, system_prompt=…)` instead and asked one more question; the script then reports the
history the model received, so the test can check Strands accepted stepline's history as its own.

--delegate: the tool is `ask_helper` {question}, which runs a second Strands agent "helper" (agent as
tool: a delegate run nested in the tool span) whose scripted model answers "5" at once.

--mode default | latest (OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental) |
attributes (gen_ai_latest_experimental,gen_ai_span_attributes_only).

Prints exactly one JSON line: {"messages", "output", "received", "export": {...}}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, AsyncIterator

MODES = {
    "default": "",
    "latest": "gen_ai_latest_experimental",
    "attributes": "gen_ai_latest_experimental,gen_ai_span_attributes_only",
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["http", "grpc"], required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--session-id", required=True)
    parser.add_argument("--mode", choices=sorted(MODES), default="default")
    parser.add_argument("--continue-from")
    parser.add_argument("--delegate", action="store_true")
    args = parser.parse_args()
    tool_name, tool_input = ("ask_helper", '{"question": "2 + 3?"}') if args.delegate else ("add", '{"a": 2, "b": 3}')
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = MODES[args.mode]

    from otlp_setup import install_tracer_provider

    provider, exporter = install_tracer_provider(args.transport, args.endpoint, "stepline-e2e-strands")

    from strands import Agent, tool
    from strands.models.model import Model

    received: list[Any] = []

    class ScriptedModel(Model):
        """Answers from a script: a tool call unless the last message carries a tool result."""

        def __init__(self, answer_at_once: str | None = None) -> None:
            self.config: dict[str, Any] = {"model_id": "scripted"}
            self.answer_at_once = answer_at_once

        def update_config(self, **model_config: Any) -> None:
            self.config.update(model_config)

        def get_config(self) -> Any:
            return self.config

        async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):  # type: ignore[override]
            raise NotImplementedError
            yield  # pragma: no cover

        async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs) -> AsyncIterator[Any]:  # type: ignore[override]
            if self.answer_at_once is not None:
                yield {"messageStart": {"role": "assistant"}}
                yield {"contentBlockDelta": {"delta": {"text": self.answer_at_once}}}
                yield {"contentBlockStop": {}}
                yield {"messageStop": {"stopReason": "end_turn"}}
                return
            if not received:
                received.append(json.loads(json.dumps(messages, default=str)))
            last = messages[-1]["content"] if messages else []
            answered = any("toolResult" in block for block in last)
            yield {"messageStart": {"role": "assistant"}}
            if answered:
                yield {"contentBlockDelta": {"delta": {"text": "The sum is 5."}}}
                yield {"contentBlockStop": {}}
                stop = "end_turn"
            else:
                yield {"contentBlockDelta": {"delta": {"reasoningContent": {"text": "I should add."}}}}
                yield {"contentBlockDelta": {"delta": {"reasoningContent": {"signature": "sig-1"}}}}
                yield {"contentBlockStop": {}}
                calls = sum(1 for m in messages for b in m["content"] if "toolUse" in b)
                yield {
                    "contentBlockStart": {
                        "start": {"toolUse": {"toolUseId": f"tooluse_{calls + 1}", "name": tool_name}}
                    }
                }
                yield {"contentBlockDelta": {"delta": {"toolUse": {"input": tool_input}}}}
                yield {"contentBlockStop": {}}
                stop = "tool_use"
            yield {"messageStop": {"stopReason": stop}}
            yield {
                "metadata": {
                    "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
                    "metrics": {"latencyMs": 1},
                }
            }

    @tool
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    @tool
    def ask_helper(question: str) -> str:
        """Asks the helper agent."""
        helper = Agent(
            model=ScriptedModel(answer_at_once="5"),
            name="helper",
            trace_attributes={"session.id": args.session_id},
            callback_handler=None,
        )
        return str(helper(question)).strip()

    common = dict(
        model=ScriptedModel(),
        tools=[ask_helper] if args.delegate else [add],
        name="calc",
        trace_attributes={"session.id": args.session_id},
        callback_handler=None,
    )
    if args.continue_from:
        with open(args.continue_from) as f:
            continuation = json.load(f)
        agent = Agent(
            messages=continuation["messages"], system_prompt=continuation["system_prompt"], **common
        )
        prompt = "And once more?"
    else:
        agent = Agent(system_prompt="You add numbers.", **common)
        prompt = "What is 2 + 3?"
    result = agent(prompt)

    flushed = provider.force_flush(30_000)
    provider.shutdown()
    stats = exporter.stats()
    stats["flushed"] = bool(flushed)
    print(
        json.dumps(
            {
                "messages": json.loads(json.dumps(agent.messages, default=str)),
                "output": str(result),
                "received": received[0] if received else None,
                "export": stats,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
