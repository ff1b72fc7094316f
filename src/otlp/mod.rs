//! OTLP itself, described once for both directions: the receivers (which take export requests
//! in) and the exporters (which send them on) share these descriptions instead of importing
//! each other.
//!
//! - `signal`: the three signals ([`Traces`], [`Logs`], [`Metrics`]) as the [`Signal`] trait:
//!   request and response messages, the OTLP/HTTP path, the gRPC service, `partial_success`
//!   in both directions; the content types of OTLP/HTTP; the metric item names.
//! - `rpc_status`: the `google.rpc.Status` error body and its `RetryInfo` detail.
//! - `tls_error`: [`TlsError`], an unusable TLS setting of a receiver or an exporter.

pub(crate) mod rpc_status;
mod signal;
mod tls_error;

pub(crate) use rpc_status::RpcStatus;
pub use signal::{
    item_name, Logs, Metrics, PartialSuccess, Signal, Traces, JSON_CONTENT_TYPE,
    PROTOBUF_CONTENT_TYPE,
};
pub use tls_error::TlsError;
