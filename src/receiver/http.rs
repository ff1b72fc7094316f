//! The OTLP/HTTP receiver: `POST /v1/traces`, `/v1/logs` and `/v1/metrics` on an axum router.
//!
//! A request is read up to the size limit, decompressed (gzip, zstd) with the same limit
//! applied to the output, counted against the item caps (413 over them), decoded (protobuf or
//! OTLP/JSON, by `Content-Type`), handed to the sink, and answered in the request's format: an
//! `Export*ServiceResponse` on success, a `google.rpc.Status` on error. Requests whose `Content-Type` is not an OTLP format are
//! answered in JSON.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodRouter};
use axum::Router;
use http::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, Method, Uri};
use http_body_util::BodyExt;
use tokio::net::TcpListener;

use super::admission::{export_admitted, ByteBudget, DecodeGate, Received};
use super::auth::BearerAuth;
use super::decode::{encode_response, encode_status, ContentEncoding, PayloadFormat};
use super::error::ReceiverError;
use super::limits::ReceiverLimits;
use super::security::ReceiverSecurity;
use super::signal::{Logs, Metrics, Signal, Traces};
use super::sink::ExportSink;
use super::tls::TlsIncoming;
use crate::otlp::RpcStatus;
use crate::otlp::Signal as _;
use crate::service_error::{ServiceError, ServiceErrorCode};

/// What every handler shares.
struct HttpState<S> {
    sink: Arc<S>,
    limits: ReceiverLimits,
}

impl<S> Clone for HttpState<S> {
    fn clone(&self) -> Self {
        Self {
            sink: Arc::clone(&self.sink),
            limits: self.limits,
        }
    }
}

/// The OTLP/HTTP routes: `POST /v1/traces`, `/v1/logs`, `/v1/metrics`; other methods on those
/// paths get 405 with `Allow: POST`, other paths 404.
pub fn http_router<S: ExportSink>(sink: Arc<S>, limits: ReceiverLimits) -> Router {
    Router::new()
        .route(Traces::HTTP_PATH, signal_route::<S, Traces>())
        .route(Logs::HTTP_PATH, signal_route::<S, Logs>())
        .route(Metrics::HTTP_PATH, signal_route::<S, Metrics>())
        .fallback(not_found)
        .with_state(HttpState { sink, limits })
}

/// Serves [`http_router`] on `listener` until `shutdown` completes, then drains open
/// connections.
pub async fn serve_http<S: ExportSink>(
    listener: TcpListener,
    sink: Arc<S>,
    limits: ReceiverLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ReceiverError> {
    serve_http_with(
        listener,
        sink,
        limits,
        ReceiverSecurity::default(),
        shutdown,
    )
    .await
}

/// [`serve_http`] with TLS and/or bearer-token authentication: with `security.tls` only TLS
/// connections are served (HTTP/1.1 or HTTP/2 by ALPN; handshakes run off the accept loop, see
/// [`TlsIncoming`]); with `security.auth` a request without the right `Authorization` header
/// gets 401 (a `google.rpc.Status` in the request's format, and `WWW-Authenticate`) before its
/// body is read.
pub async fn serve_http_with<S: ExportSink>(
    listener: TcpListener,
    sink: Arc<S>,
    limits: ReceiverLimits,
    security: ReceiverSecurity,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ReceiverError> {
    tracing::info!(
        address = ?listener.local_addr().ok(),
        max_request_bytes = limits.max_request_bytes,
        tls = security.tls.is_some(),
        authenticated = security.auth.is_some(),
        "OTLP/HTTP receiver listening"
    );
    let mut router = http_router(sink, limits);
    if let Some(auth) = security.auth {
        router = router.layer(middleware::from_fn_with_state(auth, authenticate));
    }
    match security.tls {
        Some(tls) => axum::serve(TlsIncoming::new(listener, tls), router)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(ReceiverError::HttpServer),
        None => axum::serve(super::socket::http_listener(listener), router)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(ReceiverError::HttpServer),
    }
}

/// Refuses a request whose `Authorization` header does not pass `auth`, before its body is
/// read.
async fn authenticate(
    State(auth): State<Arc<BearerAuth>>,
    request: Request,
    next: Next,
) -> Response {
    let Err(error) = auth.check(request.headers()) else {
        return next.run(request).await;
    };
    let mut response = reject(
        request.uri().path(),
        &ReceiverError::from(error),
        reply_format(request.headers()),
    );
    let challenge = match auth.scheme() {
        "" => None,
        scheme => HeaderValue::from_str(scheme).ok(),
    };
    if let Some(challenge) = challenge {
        response.headers_mut().insert(WWW_AUTHENTICATE, challenge);
    }
    response
}

/// `POST` goes to the export handler of signal `G`; any other method is refused.
fn signal_route<S: ExportSink, G: Signal>() -> MethodRouter<HttpState<S>> {
    post(export::<S, G>).fallback(method_not_allowed)
}

/// Handles one export request of signal `G`.
async fn export<S: ExportSink, G: Signal>(
    State(state): State<HttpState<S>>,
    request: Request,
) -> Response {
    let format = match PayloadFormat::from_headers(request.headers()) {
        Ok(format) => format,
        Err(err) => return reject(G::HTTP_PATH, &err, PayloadFormat::Json),
    };
    match accept::<S, G>(&state, format, request).await {
        Ok(body) => ([(CONTENT_TYPE, format.content_type())], body).into_response(),
        Err(err) => reject(G::HTTP_PATH, &err, format),
    }
}

/// Reads, decodes and exports one request; returns the encoded response body.
async fn accept<S: ExportSink, G: Signal>(
    state: &HttpState<S>,
    format: PayloadFormat,
    request: Request,
) -> Result<Vec<u8>, ReceiverError> {
    let limit = state.limits.max_request_bytes;
    let encoding = ContentEncoding::from_headers(request.headers())?;
    let declared_too_large =
        declared_length(request.headers()).is_some_and(|length| length > limit as u64);
    let body = read_capped(
        request.into_body(),
        if declared_too_large { 0 } else { limit },
    )
    .await?
    .ok_or(ReceiverError::BodyTooLarge { limit })?;

    // Counted before it is decoded, in one of a bounded number of decoding slots.
    let received = Received {
        format,
        encoding,
        body,
        max_bytes: limit,
    };
    let sink = state.sink.as_ref();
    let outcome = export_admitted::<G, S>(
        ByteBudget::shared(),
        DecodeGate::shared(),
        &state.limits.items,
        received,
        sink,
    )
    .await?;
    encode_response(format, &G::response(outcome))
}

/// How much of an over-limit body is read and thrown away, and for how long, so the client
/// finishes sending and reads the 413 instead of a reset connection. Past either bound the
/// connection is closed.
const DRAIN_MAX_BYTES: u64 = 256 * 1024 * 1024;
const DRAIN_MAX_TIME: Duration = Duration::from_secs(10);

/// Reads a body of at most `limit` bytes. `Ok(None)` when it is larger: the rest is then
/// drained within [`DRAIN_MAX_BYTES`] and [`DRAIN_MAX_TIME`].
async fn read_capped(
    mut body: axum::body::Body,
    limit: usize,
) -> Result<Option<bytes::Bytes>, ReceiverError> {
    let mut buffer = bytes::BytesMut::new();
    loop {
        match body.frame().await {
            None => return Ok(Some(buffer.freeze())),
            Some(Err(err)) => return Err(ReceiverError::ReadBody(err.to_string())),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    if buffer.len() + data.len() > limit {
                        break;
                    }
                    buffer.extend_from_slice(&data);
                }
            }
        }
    }
    let drain = async {
        let mut drained = 0u64;
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                drained += data.len() as u64;
                if drained > DRAIN_MAX_BYTES {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_MAX_TIME, drain).await;
    Ok(None)
}

/// The `Content-Length` the client declared, if any and valid.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Answers a non-POST request on an OTLP path.
async fn method_not_allowed(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let err = ReceiverError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_string(),
    };
    reject(uri.path(), &err, reply_format(&headers))
}

/// Answers a request to a path that is not an OTLP endpoint.
async fn not_found(uri: Uri, headers: HeaderMap) -> Response {
    let err = ReceiverError::NotFound {
        path: uri.path().to_string(),
    };
    reject(uri.path(), &err, reply_format(&headers))
}

/// The request's format if it names one, else JSON.
fn reply_format(headers: &HeaderMap) -> PayloadFormat {
    PayloadFormat::from_headers(headers).unwrap_or(PayloadFormat::Json)
}

/// Logs a rejected request and renders the error: the status from its [`ServiceErrorCode`],
/// a `google.rpc.Status` body in `format`, `Retry-After` for retryable errors and `Allow`
/// for 405.
fn reject(path: &str, err: &ReceiverError, format: PayloadFormat) -> Response {
    let code = err.error_code();
    let status = code.http_status();
    if status.is_server_error() {
        tracing::warn!(path, status = status.as_u16(), reason = %err, "rejected OTLP/HTTP request");
    } else {
        tracing::debug!(path, status = status.as_u16(), reason = %err, "rejected OTLP/HTTP request");
    }
    let body = encode_status(format, &RpcStatus::new(code.grpc_code(), err.to_string()));
    let mut response = (status, [(CONTENT_TYPE, format.content_type())], body).into_response();
    let headers = response.headers_mut();
    if let Some(delay) = err.retry_after() {
        headers.insert(RETRY_AFTER, HeaderValue::from(whole_seconds(delay)));
    }
    if code == ServiceErrorCode::MethodNotAllowed {
        headers.insert(ALLOW, HeaderValue::from_static("POST"));
    }
    response
}

/// `delay` in whole seconds, rounded up (`Retry-After` has second granularity).
fn whole_seconds(delay: Duration) -> u64 {
    delay
        .as_secs()
        .saturating_add(u64::from(delay.subsec_nanos() > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(whole_seconds(Duration::from_secs(1)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(whole_seconds(Duration::ZERO), 0);
    }

    #[test]
    fn declared_length_ignores_garbage() {
        let mut headers = HeaderMap::new();
        assert_eq!(declared_length(&headers), None);
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("12"));
        assert_eq!(declared_length(&headers), Some(12));
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("x"));
        assert_eq!(declared_length(&headers), None);
    }
}
