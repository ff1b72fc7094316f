//! The three OTLP signals, described once so the receivers and the exporters handle them with
//! the same code: the request and response messages, where each is sent (OTLP/HTTP path, gRPC
//! service), and `partial_success` read from and written into a response.

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

use crate::config::SignalKind;

/// The content type of binary protobuf OTLP/HTTP bodies.
pub const PROTOBUF_CONTENT_TYPE: &str = "application/x-protobuf";
/// The content type of OTLP/JSON bodies.
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// `partial_success` of an export response: items the server rejected, and its message
/// (a warning when nothing was rejected). Empty means full success.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartialSuccess {
    /// Items (spans, log records, data points) rejected.
    pub rejected: i64,
    /// The server's `error_message`.
    pub message: String,
}

impl PartialSuccess {
    /// Whether it says nothing (a full success), so a response leaves the field unset.
    pub fn is_empty(&self) -> bool {
        self.rejected == 0 && self.message.is_empty()
    }
}

/// One OTLP signal: its request and response messages and where they go.
pub trait Signal: Send + Sync + 'static {
    /// The export request message.
    type Request: prost::Message + Default + Serialize + DeserializeOwned + Send + 'static;
    /// The export response message.
    type Response: prost::Message + Default + Serialize + DeserializeOwned + Send + 'static;

    /// Which signal this is.
    const KIND: SignalKind;
    /// The OTLP/HTTP path of the signal.
    const HTTP_PATH: &'static str;
    /// The request message's type name, for error messages.
    const REQUEST_TYPE: &'static str;
    /// The gRPC service name (`package.Service`); its one method is `Export`.
    const GRPC_SERVICE: &'static str;

    /// What a response says in `partial_success` (empty when the field is unset).
    fn partial_success(response: Self::Response) -> PartialSuccess;

    /// A response carrying `partial`; the field is set only when it says something.
    fn with_partial_success(partial: PartialSuccess) -> Self::Response;
}

/// Declares a signal and implements [`Signal`] for it: its messages, where it is sent, and the
/// field of its `partial_success` message that counts the rejected items.
macro_rules! signal {
    (
        $(#[$doc:meta])*
        $signal:ident {
            kind: $kind:ident,
            http_path: $path:literal,
            grpc_service: $service:literal,
            request: $request:ident,
            response: $response:ident,
            partial: $partial:ident { rejected: $rejected:ident },
        }
    ) => {
        $(#[$doc])*
        pub struct $signal;

        impl Signal for $signal {
            type Request = $request;
            type Response = $response;
            const KIND: SignalKind = SignalKind::$kind;
            const HTTP_PATH: &'static str = $path;
            const REQUEST_TYPE: &'static str = stringify!($request);
            const GRPC_SERVICE: &'static str = $service;

            fn partial_success(response: Self::Response) -> PartialSuccess {
                response
                    .partial_success
                    .map(|p| PartialSuccess {
                        rejected: p.$rejected,
                        message: p.error_message,
                    })
                    .unwrap_or_default()
            }

            fn with_partial_success(partial: PartialSuccess) -> Self::Response {
                $response {
                    partial_success: (!partial.is_empty()).then_some($partial {
                        $rejected: partial.rejected,
                        error_message: partial.message,
                    }),
                }
            }
        }
    };
}

signal! {
    /// The trace signal.
    Traces {
        kind: Traces,
        http_path: "/v1/traces",
        grpc_service: "opentelemetry.proto.collector.trace.v1.TraceService",
        request: ExportTraceServiceRequest,
        response: ExportTraceServiceResponse,
        partial: ExportTracePartialSuccess { rejected: rejected_spans },
    }
}

signal! {
    /// The logs signal.
    Logs {
        kind: Logs,
        http_path: "/v1/logs",
        grpc_service: "opentelemetry.proto.collector.logs.v1.LogsService",
        request: ExportLogsServiceRequest,
        response: ExportLogsServiceResponse,
        partial: ExportLogsPartialSuccess { rejected: rejected_log_records },
    }
}

signal! {
    /// The metrics signal.
    Metrics {
        kind: Metrics,
        http_path: "/v1/metrics",
        grpc_service: "opentelemetry.proto.collector.metrics.v1.MetricsService",
        request: ExportMetricsServiceRequest,
        response: ExportMetricsServiceResponse,
        partial: ExportMetricsPartialSuccess { rejected: rejected_data_points },
    }
}

/// The name of the per-signal item in metric names (`spans`, `log_records`, `metric_points`).
pub fn item_name(signal: SignalKind) -> &'static str {
    match signal {
        SignalKind::Traces => "spans",
        SignalKind::Logs => "log_records",
        SignalKind::Metrics => "metric_points",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_partial_success_leaves_the_field_unset_and_reads_back() {
        assert_eq!(
            Traces::with_partial_success(PartialSuccess::default()).partial_success,
            None
        );
        let partial = PartialSuccess {
            rejected: 2,
            message: "two bad records".into(),
        };
        let response = Logs::with_partial_success(partial.clone());
        assert_eq!(
            response
                .partial_success
                .as_ref()
                .unwrap()
                .rejected_log_records,
            2
        );
        assert_eq!(Logs::partial_success(response), partial);
        let warning = PartialSuccess {
            rejected: 0,
            message: "deprecated attribute".into(),
        };
        let response = Metrics::with_partial_success(warning.clone());
        assert_eq!(
            response
                .partial_success
                .as_ref()
                .unwrap()
                .rejected_data_points,
            0
        );
        assert_eq!(Metrics::partial_success(response), warning);
        assert_eq!(
            Traces::partial_success(ExportTraceServiceResponse::default()),
            PartialSuccess::default()
        );
    }

    #[test]
    fn signals_name_their_paths_services_and_items() {
        assert_eq!(
            [Traces::KIND, Logs::KIND, Metrics::KIND].map(item_name),
            ["spans", "log_records", "metric_points"]
        );
        assert_eq!(
            [Traces::HTTP_PATH, Logs::HTTP_PATH, Metrics::HTTP_PATH],
            ["/v1/traces", "/v1/logs", "/v1/metrics"]
        );
        assert!(Metrics::GRPC_SERVICE.ends_with(".MetricsService"));
        assert_eq!(Traces::REQUEST_TYPE, "ExportTraceServiceRequest");
        assert_eq!(Metrics::REQUEST_TYPE, "ExportMetricsServiceRequest");
    }
}
