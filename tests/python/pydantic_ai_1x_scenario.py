"""A real Pydantic AI 1.x agent run (FunctionModel, no network) exported to stepline over OTLP.

Runs in the separate venv of tests/python/requirements-pydantic-ai-1.txt. --version picks the
instrumentation version: 1 (legacy events as the `events` span attribute) or 2 (`agent run` /
`running tool` spans with gen_ai.input/output.messages). --event-mode logs (version 1) sends the
legacy events as OTLP log records through the real OTLP/HTTP log exporter instead.

The model asks for get_weather(city=Paris), then answers in text. With --continue-from FILE
(stepline's `format=pydantic-ai` continuation) the history is loaded with ModelMessagesTypeAdapter
and passed as `message_history`; the script reports what the model received.

Prints one JSON line: {"all_messages", "output", "received", "export": {...}}.
"""

from __future__ import annotations

import argparse
import json
import sys

from otlp_setup import install_tracer_provider
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["http", "grpc"], required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--version", type=int, choices=[1, 2], required=True)
    parser.add_argument("--event-mode", choices=["attributes", "logs"], default="attributes")
    parser.add_argument("--continue-from")
    args = parser.parse_args()

    provider, exporter = install_tracer_provider(args.transport, args.endpoint, "stepline-e2e-pydantic-ai-1")
    settings: dict[str, object] = {}
    logger_provider = None
    if args.event_mode == "logs":
        # Version 1 with event_mode="logs": the legacy GenAI events go out as OTLP log records.
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

        logger_provider = LoggerProvider()
        logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(OTLPLogExporter(endpoint=args.endpoint.rstrip("/") + "/v1/logs"))
        )
        settings = {"event_mode": "logs", "logger_provider": logger_provider}
    received: list[object] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not received:
            received.append(json.loads(ModelMessagesTypeAdapter.dump_json(messages)))
        last = messages[-1]
        if any(p.part_kind == "tool-return" for p in last.parts):
            return ModelResponse(parts=[TextPart("18C in Paris.")])
        calls = sum(1 for m in messages if m.kind == "response")
        return ModelResponse(
            parts=[ToolCallPart("get_weather", {"city": "Paris"}, tool_call_id=f"call_{calls + 1}")]
        )

    agent = Agent(
        FunctionModel(model),
        name="weather",
        instructions="You report weather.",
        instrument=InstrumentationSettings(version=args.version, **settings),
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return f"18C in {city}"

    history = None
    prompt = "Weather in Paris?"
    if args.continue_from:
        with open(args.continue_from) as f:
            history = ModelMessagesTypeAdapter.validate_python(json.load(f)["messages"])
        prompt = "And tomorrow?"
    result = agent.run_sync(prompt, message_history=history)

    flushed = provider.force_flush(30_000)
    provider.shutdown()
    if logger_provider is not None:
        flushed = logger_provider.force_flush(30_000) and flushed
        logger_provider.shutdown()
    stats = exporter.stats()
    stats["flushed"] = bool(flushed)
    print(
        json.dumps(
            {
                "all_messages": json.loads(result.all_messages_json()),
                "output": result.output,
                "received": received[0] if received else None,
                "export": stats,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
