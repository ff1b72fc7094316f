"""Crash a Pydantic AI agent in the middle of a tool call, then resume it from stepline.

    make run                                    # stepline: OTLP on :4317/:4318, API on :4320
    pip install ./clients/python pydantic-ai-slim opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
    python examples/python/crash_and_resume.py  # --otlp / --api for other addresses

What happens:

1. A worker process runs a "payments" agent whose spans go to stepline. The model (a scripted
   FunctionModel standing in for an LLM) looks up a price, then calls `charge_card`. The tool
   charges the card at the payment provider (here a file) and then hangs.
2. This process kills the worker with SIGKILL while the tool is running: the charge happened, the
   agent never learnt it. stepline still has every span that ended before the kill.
3. The orchestrator (this process) declares the run dead (`abandon`), reads `recovery`: the
   `charge_card` call is `unknown_after_crash`, with its arguments and idempotency key. It asks the
   payment provider whether that key was charged.
4. It resumes: `pydantic_ai_history(run_id)` gives the last provider-valid history (up to the price
   lookup), and a new run continues the conversation from it, told what the provider said, so the
   card is not charged twice.

Prints what it does, then one JSON line with the facts (the test suite runs this file and checks them).
Exits non-zero if the card was charged twice or the resumed model did not get the history.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

PRICE_EUR = 120


# --- the agent (worker and resumed run share it) -------------------------------------------------


def make_agent(payments: Path, hang_in_charge: bool):
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """What an LLM would do, scripted: price, then charge, then confirm."""
        last = messages[-1]
        parts = last.parts if isinstance(last, ModelRequest) else []
        prompts = [p.content for p in parts if p.part_kind == "user-prompt" and isinstance(p.content, str)]
        returns = {p.tool_name: p.content for p in parts if p.part_kind == "tool-return"}
        key = "order-ticket-1"
        if prompts and "already charged" in prompts[-1]:
            return ModelResponse(parts=[TextPart(f"The ticket is paid ({PRICE_EUR} EUR, charged before the crash).")])
        if "charge_card" in returns:
            return ModelResponse(parts=[TextPart(f"Paid {PRICE_EUR} EUR: {returns['charge_card']}.")])
        if "lookup_price" in returns or (prompts and "not charged" in prompts[-1]):
            return ModelResponse(
                parts=[ToolCallPart("charge_card", {"amount_eur": PRICE_EUR, "idempotency_key": key}, tool_call_id="call_charge")]
            )
        return ModelResponse(parts=[ToolCallPart("lookup_price", {"item": "ticket"}, tool_call_id="call_price")])

    agent = Agent(FunctionModel(model), name="payments", instructions="You take payments.")

    @agent.tool_plain
    def lookup_price(item: str) -> str:
        return f"{item}: {PRICE_EUR} EUR"

    @agent.tool_plain
    def charge_card(amount_eur: int, idempotency_key: str) -> str:
        with payments.open("a") as f:
            f.write(json.dumps({"amount_eur": amount_eur, "idempotency_key": idempotency_key}) + "\n")
        if hang_in_charge:
            print("CHARGING", flush=True)
            time.sleep(3600)  # killed here
        return f"charged {amount_eur} EUR"

    return agent


def setup_telemetry(otlp: str):
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from pydantic_ai import Agent

    provider = TracerProvider(resource=Resource.create({"service.name": "crash-and-resume"}))
    # A short delay so spans reach stepline while the worker is still alive.
    exporter = OTLPSpanExporter(endpoint=otlp.rstrip("/") + "/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    trace.set_tracer_provider(provider)
    Agent.instrument_all()
    return provider


def worker(args: argparse.Namespace) -> int:
    setup_telemetry(args.otlp)
    agent = make_agent(Path(args.payments), hang_in_charge=True)
    agent.run_sync("Buy one ticket.", conversation_id=args.conversation_id)
    return 1  # never reached: the worker is killed inside charge_card


# --- the orchestrator ------------------------------------------------------------------------------


def charged_keys(payments: Path) -> list[str]:
    if not payments.exists():
        return []
    return [json.loads(line)["idempotency_key"] for line in payments.read_text().splitlines() if line.strip()]


def orchestrate(args: argparse.Namespace) -> int:
    from stepline_client import NotFound, StepLine, pydantic_ai_history

    client = StepLine(args.api)
    conversation = args.conversation_id or f"order-{uuid.uuid4().hex[:8]}"
    payments = Path(tempfile.mkdtemp(prefix="payments-")) / "charges.jsonl"

    # 1. The worker, killed mid-tool.
    cmd = [sys.executable, __file__, "--worker", "--otlp", args.otlp, "--payments", str(payments),
           "--conversation-id", conversation]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if line.strip() != "CHARGING":
            raise SystemExit(f"the worker stopped before the tool ran (exit {proc.wait()})")
        # Wait until stepline has the model's call to charge_card, then kill.
        run_id = None
        deadline = time.monotonic() + 30
        while run_id is None:
            for run in client.runs(conversation_id=conversation):
                try:
                    if any(e.tool_name == "charge_card" for e in client.effects(run.run_id)):
                        run_id = run.run_id
                except NotFound:
                    pass
            if run_id is None:
                if time.monotonic() > deadline:
                    raise SystemExit("stepline did not get the worker's spans within 30 s")
                time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    print(f"worker killed inside charge_card; run {run_id}")

    # 2. Declare it dead, then read what is known.
    abandoned = client.abandon(run_id, reason="worker killed")
    recovery = client.recovery(run_id)
    print(f"run is {abandoned.status}; latest complete snapshot: {recovery.latest_complete_snapshot}")
    notes = []
    for effect in recovery.unresolved_effects:
        key = (effect.arguments or {}).get("idempotency_key") if isinstance(effect.arguments, dict) else None
        happened = key is not None and key in charged_keys(payments)
        print(f"  {effect.tool_name} {effect.arguments}: {effect.status}; provider says charged={happened}")
        notes.append(f"{effect.tool_name} ({key}) was {'already charged' if happened else 'not charged'}")

    # 3. Resume from the last provider-valid history.
    history = pydantic_ai_history(run_id, client=client)
    provider = setup_telemetry(args.otlp)
    agent = make_agent(payments, hang_in_charge=False)
    seen: list[int] = []
    inner = agent.model.function  # record what the resumed model receives

    def recording(messages, info):
        seen.append(len(messages))
        return inner(messages, info)

    agent.model.function = recording
    note = "Resume the order. " + "; ".join(notes)
    result = agent.run_sync(note, message_history=history, conversation_id=conversation)
    provider.force_flush()
    print(f"resumed: {result.output}")

    charges = charged_keys(payments)
    report = {
        "conversation_id": conversation,
        "crashed_run_id": run_id,
        "status_after_abandon": abandoned.status,
        "unresolved": [{"tool_name": e.tool_name, "status": e.status, "arguments": e.arguments} for e in recovery.unresolved_effects],
        "history_messages": len(history),
        "resumed_model_saw": seen[0] if seen else None,
        "resumed_run_id": result.run_id,
        "resumed_output": result.output,
        "charges": len(charges),
    }
    print(json.dumps(report), flush=True)
    if len(charges) != 1:
        print(f"the card was charged {len(charges)} times", file=sys.stderr)
        return 1
    if not seen or seen[0] < len(history):
        print("the resumed model did not receive the history", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--otlp", default=os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                        help="stepline's OTLP/HTTP receiver")
    parser.add_argument("--api", default=os.environ.get("STEPLINE_URL", "http://127.0.0.1:4320"),
                        help="stepline's query API")
    parser.add_argument("--conversation-id")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--payments", help=argparse.SUPPRESS)
    args = parser.parse_args()
    return worker(args) if args.worker else orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
