//! Why an attempt to forward an outbox entry failed.

use std::time::Duration;

use crate::otlp::TlsError;
use crate::service_error::{ServiceError, ServiceErrorCode};
use crate::store::StoreError;

/// A failed export attempt. [`ExportError::is_retryable`] says whether to try again.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The backend answered with an error status.
    #[error("the backend answered {status}: {message}")]
    Refused {
        /// The gRPC code or HTTP status, as text.
        status: String,
        /// The backend's message.
        message: String,
        /// Decided by the OTLP retry rules (`retry.rs`).
        retryable: bool,
        /// `Retry-After` or gRPC `RetryInfo`, when the backend sent one.
        retry_after: Option<Duration>,
    },
    /// The backend could not be reached or did not answer in time.
    #[error("cannot reach the backend: {0}")]
    Transport(String),
    /// The stored request could not be decoded or re-encoded (not retryable).
    #[error("the outbox entry cannot be sent: {0}")]
    Payload(String),
    /// The exporter's TLS settings cannot be used (a file is missing or not PEM, …).
    #[error("{0}")]
    Tls(#[from] TlsError),
    /// The outbox could not be read or its cursor written.
    #[error("outbox: {0}")]
    Store(#[from] StoreError),
}

impl ExportError {
    /// Whether the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Refused { retryable, .. } => *retryable,
            Self::Transport(_) | Self::Store(_) => true,
            Self::Payload(_) | Self::Tls(_) => false,
        }
    }

    /// How long the backend asked to wait, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Refused { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

impl ServiceError for ExportError {
    fn error_code(&self) -> ServiceErrorCode {
        if self.is_retryable() {
            ServiceErrorCode::Unavailable
        } else {
            ServiceErrorCode::Internal
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        ExportError::retry_after(self)
    }
}
