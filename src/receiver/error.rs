//! The receiver layer's one error type, mapped to HTTP and gRPC statuses at the edge.

use std::time::Duration;

use crate::ingest::IngestError;
use crate::service_error::{ServiceError, ServiceErrorCode};

/// The payload formats the HTTP receiver accepts, as listed in error messages.
pub(crate) const ACCEPTED_CONTENT_TYPES: &str = "application/x-protobuf or application/json";

/// The content encodings the HTTP receiver accepts, as listed in error messages.
pub(crate) const ACCEPTED_CONTENT_ENCODINGS: &str = "gzip, zstd or identity";

/// Why the receiver rejected a request or could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReceiverError {
    /// The request has no `Content-Type` header.
    #[error("missing Content-Type header: use {ACCEPTED_CONTENT_TYPES}")]
    MissingContentType,
    /// The request's `Content-Type` is not one of the OTLP payload formats.
    #[error("unsupported Content-Type {content_type:?}: use {ACCEPTED_CONTENT_TYPES}")]
    UnsupportedContentType {
        /// The content type as sent (lossily decoded).
        content_type: String,
    },
    /// The request's `Content-Encoding` is not one the receiver can decompress.
    #[error("unsupported Content-Encoding {encoding:?}: use {ACCEPTED_CONTENT_ENCODINGS}")]
    UnsupportedContentEncoding {
        /// The content encoding as sent (lossily decoded).
        encoding: String,
    },
    /// The request body, as sent on the wire, is larger than the limit.
    #[error("request body exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// The configured limit in bytes.
        limit: usize,
    },
    /// The request body, once decompressed, is larger than the limit.
    #[error("request body exceeds the limit of {limit} bytes after {encoding} decompression")]
    DecompressedTooLarge {
        /// The content encoding of the body.
        encoding: &'static str,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// The request holds more items (spans, log records, data points) than the cap allows;
    /// found by counting before decoding.
    #[error(
        "request holds {count} {noun}, over the limit of {limit} per request \
         (processors.stepline.limits.{key})"
    )]
    TooManyItems {
        /// What was counted, e.g. `spans`.
        noun: &'static str,
        /// How many the request holds.
        count: u64,
        /// The configured cap.
        limit: usize,
        /// The config key of the cap under `processors.stepline.limits`.
        key: &'static str,
    },
    /// Every decoding slot stayed busy for longer than the receiver waits; retryable.
    #[error("too many requests are being decoded at once; retry in {}s", retry.as_secs())]
    DecodeBusy {
        /// How long the client should wait.
        retry: Duration,
    },
    /// The requests already being decoded, interpreted and written held the receivers' byte
    /// budget for longer than the receiver waits; retryable.
    #[error(
        "stepline is busy: requests of {held} bytes are being processed, as many as it takes at once; retry in {}s",
        retry.as_secs()
    )]
    BytesBusy {
        /// Bytes held when the request gave up waiting.
        held: usize,
        /// How long the client should wait.
        retry: Duration,
    },
    /// The request body could not be read from the connection.
    #[error("failed to read request body: {0}")]
    ReadBody(String),
    /// The body is not a valid stream in its declared content encoding.
    #[error("invalid {encoding} body: {source}")]
    Decompress {
        /// The content encoding of the body.
        encoding: &'static str,
        /// What the decompressor reported.
        source: std::io::Error,
    },
    /// The body is not a valid protobuf message of the expected type.
    #[error("invalid protobuf {message_type}: {source}")]
    InvalidProtobuf {
        /// The expected message type, e.g. `ExportTraceServiceRequest`.
        message_type: &'static str,
        /// What prost reported.
        source: prost::DecodeError,
    },
    /// The body is not a well-formed protobuf message (found while counting its items).
    #[error("invalid protobuf {message_type}: {reason}")]
    InvalidWire {
        /// The expected message type, e.g. `ExportTraceServiceRequest`.
        message_type: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The body is not valid OTLP/JSON for the expected message type.
    #[error("invalid JSON {message_type}: {reason}")]
    InvalidJson {
        /// The expected message type, e.g. `ExportTraceServiceRequest`.
        message_type: &'static str,
        /// What is wrong, with the JSON path where it is known.
        reason: String,
    },
    /// The HTTP method is not allowed on an OTLP path.
    #[error("method {method} is not allowed on {path}: use POST")]
    MethodNotAllowed {
        /// The method that was used.
        method: String,
        /// The request path.
        path: String,
    },
    /// No OTLP endpoint exists at the path.
    #[error("no OTLP endpoint at {path}: use /v1/traces, /v1/logs or /v1/metrics")]
    NotFound {
        /// The request path.
        path: String,
    },
    /// The request's credentials were missing or wrong.
    #[error(transparent)]
    Unauthenticated(#[from] super::auth::AuthError),
    /// The ingest service did not accept the request.
    #[error(transparent)]
    Ingest(#[from] IngestError),
    /// An unexpected failure inside the receiver (a bug).
    #[error("internal error: {0}")]
    Internal(String),
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    GrpcServer(#[from] tonic::transport::Error),
    /// The HTTP server failed.
    #[error("HTTP server failed: {0}")]
    HttpServer(#[source] std::io::Error),
}

impl ServiceError for ReceiverError {
    fn error_code(&self) -> ServiceErrorCode {
        match self {
            Self::MissingContentType
            | Self::UnsupportedContentType { .. }
            | Self::UnsupportedContentEncoding { .. } => ServiceErrorCode::UnsupportedMediaType,
            Self::BodyTooLarge { .. }
            | Self::DecompressedTooLarge { .. }
            | Self::TooManyItems { .. } => ServiceErrorCode::PayloadTooLarge,
            Self::DecodeBusy { .. } | Self::BytesBusy { .. } => ServiceErrorCode::Unavailable,
            Self::ReadBody(_)
            | Self::Decompress { .. }
            | Self::InvalidProtobuf { .. }
            | Self::InvalidWire { .. }
            | Self::InvalidJson { .. } => ServiceErrorCode::BadRequest,
            Self::MethodNotAllowed { .. } => ServiceErrorCode::MethodNotAllowed,
            Self::NotFound { .. } => ServiceErrorCode::NotFound,
            Self::Ingest(err) => err.error_code(),
            Self::Unauthenticated(err) => err.error_code(),
            Self::Internal(_) | Self::GrpcServer(_) | Self::HttpServer(_) => {
                ServiceErrorCode::Internal
            }
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Ingest(err) => err.retry_after(),
            Self::DecodeBusy { retry } | Self::BytesBusy { retry, .. } => Some(*retry),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_the_otlp_statuses() {
        let too_large = ReceiverError::DecompressedTooLarge {
            encoding: "gzip",
            limit: 10,
        };
        assert_eq!(too_large.error_code().http_status(), 413);
        assert_eq!(
            too_large.error_code().grpc_code(),
            tonic::Code::ResourceExhausted
        );
        assert_eq!(too_large.retry_after(), None);

        let too_many = ReceiverError::TooManyItems {
            noun: "spans",
            count: 8_000_000,
            limit: 65_536,
            key: "max_spans_per_request",
        };
        assert_eq!(too_many.error_code().http_status(), 413);
        assert_eq!(too_many.retry_after(), None);
        assert_eq!(
            too_many.to_string(),
            "request holds 8000000 spans, over the limit of 65536 per request \
             (processors.stepline.limits.max_spans_per_request)"
        );
        let busy = ReceiverError::DecodeBusy {
            retry: Duration::from_secs(1),
        };
        assert_eq!(busy.error_code().http_status(), 503);
        assert_eq!(busy.retry_after(), Some(Duration::from_secs(1)));
        let full = ReceiverError::BytesBusy {
            held: 16 << 20,
            retry: Duration::from_secs(1),
        };
        assert_eq!(full.error_code().http_status(), 503);
        assert_eq!(full.retry_after(), Some(Duration::from_secs(1)));
        assert_eq!(
            full.to_string(),
            "stepline is busy: requests of 16777216 bytes are being processed, as many as it takes \
             at once; retry in 1s"
        );

        let media = ReceiverError::UnsupportedContentType {
            content_type: "text/plain".into(),
        };
        assert_eq!(media.error_code().http_status(), 415);
        assert_eq!(
            media.to_string(),
            "unsupported Content-Type \"text/plain\": use application/x-protobuf or application/json"
        );

        let unavailable = ReceiverError::from(IngestError::ShuttingDown);
        assert_eq!(unavailable.error_code().http_status(), 503);
        assert!(unavailable.retry_after().is_some());
    }
}
