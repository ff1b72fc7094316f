//! API errors, mapped once to an HTTP status and a `{"error": ...}` body.

use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::continuation::ContinuationError;
use crate::ingest::IngestError;
use crate::media::MediaError;
use crate::receiver::auth::AuthError;
use crate::service_error::{ServiceError, ServiceErrorCode};
use crate::store::StoreError;

/// The body of every error answer: `{"error": "<what is wrong>"}`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What is wrong, for people.
    pub error: String,
}

/// What can go wrong answering an API request.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A query parameter or path segment is wrong.
    #[error("{0}")]
    BadRequest(String),
    /// No such run (or snapshot).
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with the run's state.
    #[error("{0}")]
    Conflict(String),
    /// Missing or wrong bearer token.
    #[error("missing or invalid bearer token: {0}")]
    Unauthorized(#[source] AuthError),
    /// Refused whatever the credentials, e.g. a `Host` the API does not answer to.
    #[error("{0}")]
    Forbidden(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The continuation could not be built.
    #[error(transparent)]
    Continuation(#[from] ContinuationError),
    /// The writer could not take the request.
    #[error(transparent)]
    Ingest(#[from] IngestError),
    /// Media parts could not be restored from the media store.
    #[error(transparent)]
    Media(#[from] MediaError),
    /// A blocking task failed.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ServiceError for ApiError {
    fn error_code(&self) -> ServiceErrorCode {
        match self {
            Self::BadRequest(_) => ServiceErrorCode::BadRequest,
            Self::NotFound(_) => ServiceErrorCode::NotFound,
            Self::Conflict(_) => ServiceErrorCode::Conflict,
            Self::Unauthorized(_) => ServiceErrorCode::Unauthorized,
            Self::Forbidden(_) => ServiceErrorCode::Forbidden,
            Self::Store(e) => e.error_code(),
            Self::Continuation(e) => e.error_code(),
            Self::Ingest(e) => e.error_code(),
            Self::Media(e) => e.error_code(),
            Self::Internal(_) => ServiceErrorCode::Internal,
        }
    }

    fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Ingest(e) => e.retry_after(),
            Self::Media(e) => e.retry_after(),
            Self::Continuation(e) => e.retry_after(),
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.error_code().http_status();
        if status.is_server_error() {
            tracing::error!(error = %self, "api request failed");
        }
        let mut response = (
            status,
            Json(ErrorBody {
                error: self.to_string(),
            }),
        )
            .into_response();
        if let Some(after) = self.retry_after() {
            if let Ok(v) = after.as_secs().max(1).to_string().parse() {
                response.headers_mut().insert(http::header::RETRY_AFTER, v);
            }
        }
        if matches!(self, Self::Unauthorized(_)) {
            response.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}
