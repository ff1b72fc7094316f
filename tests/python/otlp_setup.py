"""Shared OpenTelemetry set-up for the end-to-end scripts.

Configures the global TracerProvider with the real OTLP span exporter (HTTP/protobuf or gRPC) behind a
BatchSpanProcessor. The exporter is wrapped only to count export results, so a script can report whether
stepline acknowledged every batch; the bytes on the wire are those of the stock exporter.
"""

from __future__ import annotations

import threading
from typing import Sequence

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)


class CountingExporter(SpanExporter):
    """Delegates to a real exporter and counts how many batches/spans succeeded or failed."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.ok_batches = 0
        self.failed_batches = 0
        self.exported_spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._inner.export(spans)
        with self._lock:
            if result == SpanExportResult.SUCCESS:
                self.ok_batches += 1
                self.exported_spans += len(spans)
            else:
                self.failed_batches += 1
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "ok_batches": self.ok_batches,
                "failed_batches": self.failed_batches,
                "exported_spans": self.exported_spans,
            }


def make_exporter(transport: str, endpoint: str) -> SpanExporter:
    """`endpoint` is the base URL of the receiver, e.g. http://127.0.0.1:4318 or http://127.0.0.1:4317."""
    endpoint = endpoint.rstrip("/")
    if transport == "http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        if not endpoint.endswith("/v1/traces"):
            endpoint = endpoint + "/v1/traces"
        return HttpExporter(endpoint=endpoint, timeout=10)
    if transport == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter(endpoint=endpoint, insecure=True, timeout=10)
    raise SystemExit(f"unknown transport {transport!r} (expected http or grpc)")


def install_tracer_provider(
    transport: str, endpoint: str, service_name: str, schedule_delay_millis: int = 500
) -> tuple[TracerProvider, CountingExporter]:
    exporter = CountingExporter(make_exporter(transport, endpoint))
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(
        BatchSpanProcessor(exporter, schedule_delay_millis=schedule_delay_millis)
    )
    trace.set_tracer_provider(provider)
    return provider, exporter
