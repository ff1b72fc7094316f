//! The run explorer: a small browser UI served at `/ui/` on the query API's listener.
//!
//! The pages are plain HTML, CSS and JavaScript modules kept under `ui/` in the repository and
//! embedded in the binary at build time ([`ASSETS`]); nothing is read from disk at run time and
//! there is no build step. The assets hold no data, so they are served without a token; every
//! data request the page makes goes to `/v1/*` with the API token the user enters once (kept in
//! the tab's `sessionStorage`). The router is merged into the API router, so the API's `Host`
//! allow-list covers these routes too.

use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};

use crate::continuation::Format;
use crate::service_error::{ServiceError, ServiceErrorCode};

/// One embedded file of the explorer.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// File name under `/ui/` (and under `ui/` in the repository).
    pub name: &'static str,
    /// `Content-Type` it is served with.
    pub content_type: &'static str,
    /// The file's bytes.
    pub body: &'static str,
}

/// Every file of the explorer, embedded at build time.
pub const ASSETS: &[Asset] = &[
    asset(
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../../ui/index.html"),
    ),
    asset(
        "app.css",
        "text/css; charset=utf-8",
        include_str!("../../ui/app.css"),
    ),
    asset("app.js", JS, include_str!("../../ui/app.js")),
    asset("api.js", JS, include_str!("../../ui/api.js")),
    asset("dom.js", JS, include_str!("../../ui/dom.js")),
    asset("runs.js", JS, include_str!("../../ui/runs.js")),
    asset("run.js", JS, include_str!("../../ui/run.js")),
    asset("timeline.js", JS, include_str!("../../ui/timeline.js")),
    asset(
        "continuation.js",
        JS,
        include_str!("../../ui/continuation.js"),
    ),
];

const JS: &str = "text/javascript; charset=utf-8";

const fn asset(name: &'static str, content_type: &'static str, body: &'static str) -> Asset {
    Asset {
        name,
        content_type,
        body,
    }
}

/// The page's content security policy: only its own scripts, styles and API; no frames.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

/// Why the explorer could not answer.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    /// No embedded file of that name.
    #[error("no such file in the run explorer: {0:?}")]
    NotFound(String),
}

impl ServiceError for UiError {
    fn error_code(&self) -> ServiceErrorCode {
        match self {
            Self::NotFound(_) => ServiceErrorCode::NotFound,
        }
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let status = self.error_code().http_status();
        (
            status,
            Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response()
    }
}

/// The explorer's routes: `/ui` (redirect), `/ui/` (the page), `/ui/{file}` (its assets) and
/// `/ui/formats.json` (the continuation formats the API renders). No token, no state.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|| async { serve("index.html") }))
        .route("/ui/formats.json", get(formats))
        .route("/ui/{file}", get(asset_at))
}

/// `GET /ui/{file}`. The name is taken from the raw path (embedded names are plain ASCII), so a
/// percent-escape that is not UTF-8 is a 404 like any other unknown name, not an extractor error.
async fn asset_at(uri: Uri) -> Result<Response, UiError> {
    serve(uri.path().strip_prefix("/ui/").unwrap_or_default())
}

/// The embedded file `name`, or the explorer's 404.
fn serve(name: &str) -> Result<Response, UiError> {
    let asset = ASSETS
        .iter()
        .find(|a| a.name == name)
        .ok_or_else(|| UiError::NotFound(truncate(name, 128).to_owned()))?;
    let mut response = (StatusCode::OK, asset.body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    // Revalidate every time: a new binary may serve new files under the same names.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    Ok(response)
}

/// `GET /ui/formats.json`: `{"formats": [...]}`, the names `?format=` takes, so the page's
/// format menu never drifts from the API.
async fn formats() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "formats": Format::NAMES }))
}

fn truncate(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests;
