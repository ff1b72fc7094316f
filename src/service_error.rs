//! The one error-code enum every layer maps into, and its mapping to both transports.
//!
//! Each layer has its own typed error (`thiserror`) that implements [`ServiceError`]; the
//! HTTP and gRPC edges turn the [`ServiceErrorCode`] into a status exactly once.

use std::time::Duration;

/// What went wrong, in terms both transports understand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceErrorCode {
    /// The request is malformed (HTTP 400 / gRPC INVALID_ARGUMENT). Not retryable.
    BadRequest,
    /// The addressed resource does not exist (HTTP 404 / gRPC NOT_FOUND).
    NotFound,
    /// The request body is larger than the configured limit (HTTP 413 / gRPC RESOURCE_EXHAUSTED
    /// without RetryInfo, so OTLP clients do not retry it).
    PayloadTooLarge,
    /// The content type is not one the endpoint accepts (HTTP 415 / gRPC INVALID_ARGUMENT).
    UnsupportedMediaType,
    /// The HTTP method is not allowed on the path (HTTP 405 / gRPC UNIMPLEMENTED).
    MethodNotAllowed,
    /// Missing or wrong credentials (HTTP 401 / gRPC UNAUTHENTICATED).
    Unauthorized,
    /// The request is not allowed whatever its credentials, e.g. a `Host` the API does not
    /// answer to (HTTP 403 / gRPC PERMISSION_DENIED).
    Forbidden,
    /// A conflicting state, e.g. abandoning a run that already ended (HTTP 409 / gRPC FAILED_PRECONDITION).
    Conflict,
    /// Temporarily unable to take the request; the client should retry (HTTP 503 / gRPC UNAVAILABLE).
    Unavailable,
    /// A bug or an unexpected failure (HTTP 500 / gRPC INTERNAL).
    Internal,
}

impl ServiceErrorCode {
    /// The HTTP status for this code.
    pub fn http_status(self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            Self::BadRequest => S::BAD_REQUEST,
            Self::NotFound => S::NOT_FOUND,
            Self::PayloadTooLarge => S::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => S::UNSUPPORTED_MEDIA_TYPE,
            Self::MethodNotAllowed => S::METHOD_NOT_ALLOWED,
            Self::Unauthorized => S::UNAUTHORIZED,
            Self::Forbidden => S::FORBIDDEN,
            Self::Conflict => S::CONFLICT,
            Self::Unavailable => S::SERVICE_UNAVAILABLE,
            Self::Internal => S::INTERNAL_SERVER_ERROR,
        }
    }

    /// The gRPC status code for this code.
    pub fn grpc_code(self) -> tonic::Code {
        use tonic::Code as C;
        match self {
            Self::BadRequest | Self::UnsupportedMediaType => C::InvalidArgument,
            Self::NotFound => C::NotFound,
            Self::PayloadTooLarge => C::ResourceExhausted,
            Self::MethodNotAllowed => C::Unimplemented,
            Self::Unauthorized => C::Unauthenticated,
            Self::Forbidden => C::PermissionDenied,
            Self::Conflict => C::FailedPrecondition,
            Self::Unavailable => C::Unavailable,
            Self::Internal => C::Internal,
        }
    }
}

/// An error that knows which [`ServiceErrorCode`] it maps to.
pub trait ServiceError: std::error::Error {
    /// The transport-neutral code of this error.
    fn error_code(&self) -> ServiceErrorCode;

    /// For retryable errors: how long the client should wait before retrying.
    fn retry_after(&self) -> Option<Duration> {
        None
    }
}
