"""A real Pydantic AI agent that hangs inside a tool, so the test can SIGKILL it mid-run.

Step 1: the model calls the fast tool `lookup_price` (id call_fast1).
Step 2: the model calls `charge_card` (id call_slow1), which prints one marker line
        `TOOL_STARTED {"run_id": ..., "conversation_id": ..., "tool_call_id": ...}` and then sleeps 600 s.

The BatchSpanProcessor uses a 100 ms schedule delay, so step 1's spans (chat + execute_tool) are exported
while the tool blocks. The agent-run span and the in-flight tool span never end, so they are never sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from otlp_setup import install_tracer_provider
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["http", "grpc"], required=True)
    parser.add_argument("--endpoint", required=True, help="receiver base URL, e.g. http://127.0.0.1:4318")
    parser.add_argument("--conversation-id", default="conv-crash")
    args = parser.parse_args()

    install_tracer_provider(args.transport, args.endpoint, "stepline-e2e-crash", schedule_delay_millis=100)
    Agent.instrument_all(True)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = sum(1 for m in messages if m.kind == "response")
        if step == 0:
            return ModelResponse(parts=[ToolCallPart("lookup_price", {"item": "ticket"}, tool_call_id="call_fast1")])
        if step == 1:
            return ModelResponse(
                parts=[ToolCallPart("charge_card", {"amount_eur": 120}, tool_call_id="call_slow1")]
            )
        return ModelResponse(parts=[TextPart("Charged.")])

    agent = Agent(FunctionModel(model), name="payments", instructions="You take payments.")

    @agent.tool_plain
    def lookup_price(item: str) -> str:
        return f"{item}: 120 EUR"

    @agent.tool
    async def charge_card(ctx: RunContext, amount_eur: int) -> str:
        marker = {"run_id": ctx.run_id, "conversation_id": ctx.conversation_id, "tool_call_id": ctx.tool_call_id}
        print("TOOL_STARTED " + json.dumps(marker), flush=True)
        await asyncio.sleep(600)
        return "charged"

    agent.run_sync("Buy the ticket", conversation_id=args.conversation_id)
    print("UNEXPECTED_END", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
