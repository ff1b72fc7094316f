"""A short Pydantic AI agent whose telemetry goes through stepline to a tracing backend.

    BACKEND_OTLP_ENDPOINT=http://my-backend:4318 stepline --config examples/python/in_front_of_a_backend/collector.yaml
    pip install ./clients/python pydantic-ai-slim opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python examples/python/in_front_of_a_backend/agent.py

The agent only knows about OTLP: its spans go to stepline exactly as they would go to the backend (the stock
exporter, configured by the standard OTEL_EXPORTER_OTLP_* variables). stepline forwards them unchanged and keeps
the run; the agent then reads its own run back from stepline's API (STEPLINE_URL, default
http://127.0.0.1:4320). The model is Pydantic AI's TestModel (no LLM, no network): it calls every tool once,
then answers with their results.

Prints one JSON line: {"run_id", "trace_id", "status", "model_request_count", "tool_call_count",
"spans_exported", "output"}.
"""

from __future__ import annotations

import json
import sys
import uuid

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from stepline_client import StepLine


class Counting(OTLPSpanExporter):
    """The stock exporter, counting the spans stepline acknowledged."""

    exported = 0

    def export(self, spans: "list[ReadableSpan]") -> SpanExportResult:  # type: ignore[override]
        result = super().export(spans)
        if result == SpanExportResult.SUCCESS:
            Counting.exported += len(spans)
        return result


def main() -> int:
    provider = TracerProvider(resource=Resource.create({"service.name": "agent-behind-stepline"}))
    provider.add_span_processor(BatchSpanProcessor(Counting()))  # OTEL_EXPORTER_OTLP_ENDPOINT
    trace.set_tracer_provider(provider)
    Agent.instrument_all()

    agent = Agent(TestModel(), name="clock", instructions="You tell the time.")

    @agent.tool_plain
    def local_time(city: str) -> str:
        return f"12:00 in {city}"

    conversation = f"clock-{uuid.uuid4().hex[:8]}"
    result = agent.run_sync("What time is it in Lisbon?", conversation_id=conversation)
    provider.force_flush()  # stepline has committed the spans once this returns

    run = StepLine().run(result.run_id)  # Pydantic AI's run id is an alias of stepline's
    print(
        json.dumps(
            {
                "run_id": run.run_id,
                "trace_id": run.trace_id,
                "conversation_id": run.conversation_id,
                "status": run.status,
                "model_request_count": run.model_request_count,
                "tool_call_count": run.tool_call_count,
                "spans_exported": Counting.exported,
                "output": result.output,
            }
        ),
        flush=True,
    )
    provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
