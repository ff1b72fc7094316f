//! Request extractors whose rejections answer in the API's `{"error": …}` format (axum's own
//! extractors answer plain text).

use std::collections::HashMap;

use axum::extract::{FromRequestParts, Path, Query};
use http::request::Parts;

use super::error::ApiError;

/// The `{run_id}` path segment. A segment whose percent-escapes are not UTF-8 is a 400.
pub struct RunId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for RunId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(id)| Self(id))
            .map_err(|e| ApiError::BadRequest(format!("bad run id in the path: {}", e.body_text())))
    }
}

/// The query string as name → value. A query string that does not parse is a 400.
pub struct Params(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map(|Query(params)| Self(params))
            .map_err(|e| ApiError::BadRequest(format!("bad query string: {}", e.body_text())))
    }
}
