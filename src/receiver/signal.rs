//! The three OTLP signals, described once so both receivers handle them with the same code.

use std::future::Future;

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::sink::ExportSink;
use super::wire_count::Counted;
use crate::ingest::{ExportOutcome, IngestError};
use crate::limits::Limits;

/// One OTLP signal: its request and response messages and how to hand it to the sink.
pub(crate) trait Signal: Send + Sync + 'static {
    /// The export request message.
    type Request: prost::Message + Default + DeserializeOwned + Send + 'static;
    /// The export response message.
    type Response: prost::Message + Serialize + Send + 'static;

    /// The OTLP/HTTP path of the signal.
    const HTTP_PATH: &'static str;
    /// The request message's type name, for error messages.
    const REQUEST_TYPE: &'static str;
    /// The gRPC service name (`package.Service`); its method is `Export`.
    const GRPC_SERVICE: &'static str;
    /// What a request is counted in before it is decoded.
    const COUNTED: Counted;
    /// The name of the cap on that count under `processors.stepline.limits`.
    const LIMIT_KEY: &'static str;

    /// The cap on [`Self::COUNTED`] items per request.
    fn cap(limits: &Limits) -> usize;

    /// Hands a decoded request to the sink.
    fn export<S: ExportSink>(
        sink: &S,
        request: Self::Request,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send;

    /// The response for an accepted request; `partial_success` is set only when it says something.
    fn response(outcome: ExportOutcome) -> Self::Response;
}

/// Whether an outcome must be reported in `partial_success` (an empty one means full success).
fn is_partial(outcome: &ExportOutcome) -> bool {
    outcome.rejected != 0 || !outcome.message.is_empty()
}

/// The trace signal.
pub(crate) struct Traces;

impl Signal for Traces {
    type Request = ExportTraceServiceRequest;
    type Response = ExportTraceServiceResponse;
    const HTTP_PATH: &'static str = "/v1/traces";
    const REQUEST_TYPE: &'static str = "ExportTraceServiceRequest";
    const GRPC_SERVICE: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
    const COUNTED: Counted = Counted::Spans;
    const LIMIT_KEY: &'static str = "max_spans_per_request";

    fn cap(limits: &Limits) -> usize {
        limits.max_spans_per_request
    }

    fn export<S: ExportSink>(
        sink: &S,
        request: Self::Request,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        sink.export_traces(request)
    }

    fn response(outcome: ExportOutcome) -> Self::Response {
        ExportTraceServiceResponse {
            partial_success: is_partial(&outcome).then_some(ExportTracePartialSuccess {
                rejected_spans: outcome.rejected,
                error_message: outcome.message,
            }),
        }
    }
}

/// The logs signal.
pub(crate) struct Logs;

impl Signal for Logs {
    type Request = ExportLogsServiceRequest;
    type Response = ExportLogsServiceResponse;
    const HTTP_PATH: &'static str = "/v1/logs";
    const REQUEST_TYPE: &'static str = "ExportLogsServiceRequest";
    const GRPC_SERVICE: &'static str = "opentelemetry.proto.collector.logs.v1.LogsService";
    const COUNTED: Counted = Counted::LogRecords;
    const LIMIT_KEY: &'static str = "max_log_records_per_request";

    fn cap(limits: &Limits) -> usize {
        limits.max_log_records_per_request
    }

    fn export<S: ExportSink>(
        sink: &S,
        request: Self::Request,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        sink.export_logs(request)
    }

    fn response(outcome: ExportOutcome) -> Self::Response {
        ExportLogsServiceResponse {
            partial_success: is_partial(&outcome).then_some(ExportLogsPartialSuccess {
                rejected_log_records: outcome.rejected,
                error_message: outcome.message,
            }),
        }
    }
}

/// The metrics signal.
pub(crate) struct Metrics;

impl Signal for Metrics {
    type Request = ExportMetricsServiceRequest;
    type Response = ExportMetricsServiceResponse;
    const HTTP_PATH: &'static str = "/v1/metrics";
    const REQUEST_TYPE: &'static str = "ExportMetricsServiceRequest";
    const GRPC_SERVICE: &'static str = "opentelemetry.proto.collector.metrics.v1.MetricsService";
    const COUNTED: Counted = Counted::DataPoints;
    const LIMIT_KEY: &'static str = "max_metric_points_per_request";

    fn cap(limits: &Limits) -> usize {
        limits.max_metric_points_per_request
    }

    fn export<S: ExportSink>(
        sink: &S,
        request: Self::Request,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        sink.export_metrics(request)
    }

    fn response(outcome: ExportOutcome) -> Self::Response {
        ExportMetricsServiceResponse {
            partial_success: is_partial(&outcome).then_some(ExportMetricsPartialSuccess {
                rejected_data_points: outcome.rejected,
                error_message: outcome.message,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_outcome_leaves_partial_success_unset() {
        assert_eq!(
            Traces::response(ExportOutcome::default()).partial_success,
            None
        );
        let partial = Logs::response(ExportOutcome {
            rejected: 2,
            message: "two bad records".into(),
        });
        let partial = partial.partial_success.unwrap();
        assert_eq!(partial.rejected_log_records, 2);
        assert_eq!(partial.error_message, "two bad records");
        let warning = Metrics::response(ExportOutcome {
            rejected: 0,
            message: "deprecated attribute".into(),
        });
        assert_eq!(warning.partial_success.unwrap().rejected_data_points, 0);
    }
}
