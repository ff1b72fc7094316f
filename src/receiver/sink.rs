//! What the receivers hand decoded requests to: [`ExportSink`], implemented by [`Ingest`].

use std::future::Future;

use bytes::Bytes;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::ingest::{ExportOutcome, Ingest, IngestError};

/// The service behind the receivers: takes one decoded export request per signal and answers
/// only once the request is accepted (or refused).
///
/// The binary uses [`Ingest`]; tests can plug in a sink that records what it received.
///
/// The receivers call the `*_encoded` methods, which also pass the protobuf bytes the request
/// was decoded from (`None` for OTLP/JSON); by default they ignore the bytes.
pub trait ExportSink: Send + Sync + 'static {
    /// Accepts a trace export request.
    fn export_traces(
        &self,
        request: ExportTraceServiceRequest,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send;

    /// Accepts a logs export request.
    fn export_logs(
        &self,
        request: ExportLogsServiceRequest,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send;

    /// Accepts a metrics export request.
    fn export_metrics(
        &self,
        request: ExportMetricsServiceRequest,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send;

    /// Accepts a trace export request decoded from `encoded` (protobuf, after decompression).
    fn export_traces_encoded(
        &self,
        request: ExportTraceServiceRequest,
        encoded: Option<Bytes>,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        drop(encoded);
        self.export_traces(request)
    }

    /// Accepts a logs export request decoded from `encoded`.
    fn export_logs_encoded(
        &self,
        request: ExportLogsServiceRequest,
        encoded: Option<Bytes>,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        drop(encoded);
        self.export_logs(request)
    }

    /// Accepts a metrics export request decoded from `encoded`.
    fn export_metrics_encoded(
        &self,
        request: ExportMetricsServiceRequest,
        encoded: Option<Bytes>,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        drop(encoded);
        self.export_metrics(request)
    }
}

impl ExportSink for Ingest {
    fn export_traces(
        &self,
        request: ExportTraceServiceRequest,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        Ingest::export_traces(self, request)
    }

    fn export_logs(
        &self,
        request: ExportLogsServiceRequest,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        Ingest::export_logs(self, request)
    }

    fn export_metrics(
        &self,
        request: ExportMetricsServiceRequest,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        Ingest::export_metrics(self, request)
    }

    fn export_traces_encoded(
        &self,
        request: ExportTraceServiceRequest,
        encoded: Option<Bytes>,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        Ingest::export_traces_from(self, request, encoded)
    }

    fn export_logs_encoded(
        &self,
        request: ExportLogsServiceRequest,
        encoded: Option<Bytes>,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        Ingest::export_logs_from(self, request, encoded)
    }

    fn export_metrics_encoded(
        &self,
        request: ExportMetricsServiceRequest,
        encoded: Option<Bytes>,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        Ingest::export_metrics_from(self, request, encoded)
    }
}
