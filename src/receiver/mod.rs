//! The OTLP receivers: gRPC (`:4317`) and HTTP (`:4318`) adapters that decode export requests
//! for traces, logs and metrics and hand them to an [`ExportSink`] (the ingest service).
//!
//! - `grpc`: tonic services, gzip/zstd, size limit after decompression, OUT_OF_RANGE remapped
//!   to RESOURCE_EXHAUSTED.
//! - `http`: axum routes `POST /v1/{traces,logs,metrics}`, protobuf or JSON.
//! - `decode`: content negotiation, bounded decompression, payload decoding (pure code).
//! - `error`: [`ReceiverError`], the one error type of this layer.

pub(crate) mod decode;
mod error;
mod grpc;
mod http;
mod limits;
pub(crate) mod rpc_status;
mod signal;
mod sink;

pub use self::http::{http_router, serve_http};
pub use error::ReceiverError;
pub use grpc::serve_grpc;
pub use limits::{ReceiverLimits, DEFAULT_MAX_REQUEST_BYTES};
pub use sink::ExportSink;
