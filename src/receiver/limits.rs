//! Limits applied by both receivers.

use crate::limits::Limits;

/// The size limit the OTLP specification recommends for one request: 64 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// Limits applied by both receivers to every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiverLimits {
    /// The largest request accepted, in bytes, measured after decompression (and, for HTTP,
    /// also on the wire). Larger requests get HTTP 413 / gRPC RESOURCE_EXHAUSTED.
    pub max_request_bytes: usize,
    /// The per-request item caps (`max_spans_per_request`, ...), checked by counting a request
    /// before it is decoded; over a cap, HTTP 413 / gRPC RESOURCE_EXHAUSTED.
    pub items: Limits,
}

impl Default for ReceiverLimits {
    fn default() -> Self {
        Self {
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            items: Limits::default(),
        }
    }
}
