//! The OTLP receivers: gRPC (`:4317`) and HTTP (`:4318`) adapters that decode export requests
//! for traces, logs and metrics and hand them to an [`ExportSink`] (the ingest service).
//!
//! - `grpc`: tonic services, gzip/zstd, size limit after decompression, OUT_OF_RANGE remapped
//!   to RESOURCE_EXHAUSTED.
//! - `http`: axum routes `POST /v1/{traces,logs,metrics}`, protobuf or JSON.
//! - `decode`: content negotiation, bounded decompression, payload decoding (pure code).
//! - `wire_count`: counting a request's spans / log records / data points without decoding it.
//! - `admission`: the byte budget and the decoding slots both receivers share, and counting
//!   before decoding.
//! - `error`: [`ReceiverError`], the one error type of this layer.
//! - `auth`: bearer-token checks (constant time, case-insensitive scheme), also used by the API.
//! - `tls`: the rustls server side and a listener that handshakes off the accept loop.
//! - `security`: [`ReceiverSecurity`], what one receiver is given of both.
//! - `socket`: listeners whose connections have Nagle's algorithm off (the API's too).

mod admission;
pub mod auth;
pub(crate) mod decode;
mod error;
mod grpc;
mod http;
mod limits;
mod security;
mod signal;
mod sink;
pub mod socket;
pub mod tls;
mod wire_count;

pub use self::http::{http_router, serve_http, serve_http_with};
pub use error::ReceiverError;
pub use grpc::{serve_grpc, serve_grpc_with};
pub use limits::{ReceiverLimits, DEFAULT_MAX_REQUEST_BYTES};
pub use security::ReceiverSecurity;
pub use sink::ExportSink;
pub use tls::check_tls;

/// Received bytes of the requests being decoded, interpreted or written now, and the most that
/// may be at once (the receivers' shared byte budget).
pub fn bytes_in_process() -> (u64, u64) {
    (
        admission::ByteBudget::shared().held(),
        admission::BUDGET_BYTES as u64,
    )
}
