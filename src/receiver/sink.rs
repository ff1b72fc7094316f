//! What the receivers hand decoded requests to: [`ExportSink`], implemented by [`Ingest`].

use std::future::Future;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::ingest::{ExportOutcome, Ingest, IngestError};

/// The service behind the receivers: takes one decoded export request per signal and answers
/// only once the request is accepted (or refused).
///
/// The binary uses [`Ingest`]; tests can plug in a sink that records what it received.
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
}
