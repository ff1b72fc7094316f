//! The OTLP/gRPC receiver: `TraceService/Export`, `LogsService/Export` and
//! `MetricsService/Export` on one tonic server.
//!
//! Requests may be gzip- or zstd-compressed; responses are compressed when the client accepts
//! it. The size limit applies to the decompressed message. tonic answers a message whose wire
//! length is over the limit with OUT_OF_RANGE, which OTLP clients retry forever; the
//! [`RejectionStatusLayer`] rewrites it to RESOURCE_EXHAUSTED without RetryInfo (not retryable),
//! and turns tonic's INTERNAL answers to undecodable requests into INVALID_ARGUMENT.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::codec::CompressionEncoding;
use tonic::{Code, Status};

use super::auth::GrpcAuthLayer;
use super::error::ReceiverError;
use super::limits::ReceiverLimits;
use super::rpc_status::RpcStatus;
use super::security::ReceiverSecurity;
use super::signal::{Logs, Metrics, Signal, Traces};
use super::sink::ExportSink;
use super::tls::TlsIncoming;
use crate::service_error::ServiceError;

/// Serves OTLP/gRPC on `listener` until `shutdown` completes, then drains open connections.
///
/// Every export request is decoded (gzip and zstd accepted, at most
/// `limits.max_request_bytes` after decompression) and handed to `sink`; the client is
/// answered with the sink's outcome (`partial_success`) or its error status.
pub async fn serve_grpc<S: ExportSink>(
    listener: TcpListener,
    sink: Arc<S>,
    limits: ReceiverLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ReceiverError> {
    serve_grpc_with(
        listener,
        sink,
        limits,
        ReceiverSecurity::default(),
        shutdown,
    )
    .await
}

/// [`serve_grpc`] with TLS and/or bearer-token authentication: with `security.tls` only TLS
/// connections are served (handshakes run off the accept loop, see [`TlsIncoming`]); with
/// `security.auth` a request without the right `authorization` metadata is answered
/// UNAUTHENTICATED before its message is read.
pub async fn serve_grpc_with<S: ExportSink>(
    listener: TcpListener,
    sink: Arc<S>,
    limits: ReceiverLimits,
    security: ReceiverSecurity,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ReceiverError> {
    let limit = limits.max_request_bytes;
    let receiver = Arc::new(GrpcReceiver { sink });

    // The three generated servers share no trait, so configure each the same way here.
    macro_rules! configured {
        ($server:ident) => {
            $server::from_arc(Arc::clone(&receiver))
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Zstd)
                .send_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Zstd)
                .max_decoding_message_size(limit)
        };
    }

    tracing::info!(
        address = ?listener.local_addr().ok(),
        max_request_bytes = limit,
        tls = security.tls.is_some(),
        authenticated = security.auth.is_some(),
        "OTLP/gRPC receiver listening"
    );
    let router = tonic::transport::Server::builder()
        .layer(GrpcAuthLayer::new(security.auth))
        .layer(RejectionStatusLayer { limit })
        .add_service(configured!(TraceServiceServer))
        .add_service(configured!(LogsServiceServer))
        .add_service(configured!(MetricsServiceServer));
    match security.tls {
        Some(tls) => {
            router
                .serve_with_incoming_shutdown(TlsIncoming::new(listener, tls), shutdown)
                .await?
        }
        None => {
            router
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
                .await?
        }
    }
    Ok(())
}

/// The tonic service implementations: thin adapters around the sink.
struct GrpcReceiver<S> {
    sink: Arc<S>,
}

impl<S: ExportSink> GrpcReceiver<S> {
    /// Hands one decoded request of signal `G` to the sink and turns the result into a reply.
    async fn export<G: Signal>(
        &self,
        request: tonic::Request<G::Request>,
    ) -> Result<tonic::Response<G::Response>, Status> {
        if let Some(reached) = request.extensions().get::<HandlerReached>() {
            reached.0.store(true, Ordering::Relaxed);
        }
        match G::export(self.sink.as_ref(), request.into_inner()).await {
            Ok(outcome) => Ok(tonic::Response::new(G::response(outcome))),
            Err(err) => Err(to_status(&ReceiverError::from(err))),
        }
    }
}

#[tonic::async_trait]
impl<S: ExportSink> TraceService for GrpcReceiver<S> {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, Status> {
        GrpcReceiver::export::<Traces>(self, request).await
    }
}

#[tonic::async_trait]
impl<S: ExportSink> LogsService for GrpcReceiver<S> {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, Status> {
        GrpcReceiver::export::<Logs>(self, request).await
    }
}

#[tonic::async_trait]
impl<S: ExportSink> MetricsService for GrpcReceiver<S> {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, Status> {
        GrpcReceiver::export::<Metrics>(self, request).await
    }
}

/// The gRPC status for a receiver error; retryable errors carry a `google.rpc.RetryInfo`
/// detail with the delay the client should wait.
fn to_status(err: &ReceiverError) -> Status {
    let code = err.error_code().grpc_code();
    let message = err.to_string();
    match err.retry_after() {
        Some(delay) => {
            let details = RpcStatus::new(code, message.clone()).with_retry_delay(delay);
            Status::with_details(
                code,
                message,
                prost::Message::encode_to_vec(&details).into(),
            )
        }
        None => Status::new(code, message),
    }
}

/// A tower layer that fixes the statuses tonic gives to bad requests before they reach a
/// handler, and logs every rejected request:
///
/// - OUT_OF_RANGE ("message too large") becomes RESOURCE_EXHAUSTED without RetryInfo, so OTLP
///   clients drop the request instead of retrying it forever;
/// - INTERNAL for a request that never reached a handler (undecodable protobuf, corrupt
///   compression, broken framing) becomes INVALID_ARGUMENT: the client sent bad data.
#[derive(Debug, Clone, Copy)]
struct RejectionStatusLayer {
    limit: usize,
}

impl<S> tower::Layer<S> for RejectionStatusLayer {
    type Service = RejectionStatus<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RejectionStatus {
            inner,
            limit: self.limit,
        }
    }
}

/// The service made by [`RejectionStatusLayer`].
#[derive(Debug, Clone)]
struct RejectionStatus<S> {
    inner: S,
    limit: usize,
}

impl<S, B> tower::Service<http::Request<B>> for RejectionStatus<S>
where
    S: tower::Service<
        http::Request<B>,
        Response = http::Response<tonic::body::Body>,
        Error = Infallible,
    >,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let path: Arc<str> = Arc::from(request.uri().path());
        let limit = self.limit;
        let reached = HandlerReached::default();
        request.extensions_mut().insert(reached.clone());
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            let (mut parts, body) = response.into_parts();
            // A trailers-only response (every unary error) carries its status in the headers.
            rewrite_status(&mut parts.headers, limit, reached.get(), &path);
            // A streamed response carries it in the trailers.
            let body = body.map_frame(move |mut frame| {
                if let Some(trailers) = frame.trailers_mut() {
                    rewrite_status(trailers, limit, reached.get(), &path);
                }
                frame
            });
            Ok(http::Response::from_parts(
                parts,
                tonic::body::Body::new(body),
            ))
        })
    }
}

/// Set by a handler when the request reached it, i.e. was decoded.
#[derive(Debug, Clone, Default)]
struct HandlerReached(Arc<AtomicBool>);

impl HandlerReached {
    fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// If `headers` hold a non-OK gRPC status, logs the rejection and rewrites the statuses
/// described on [`RejectionStatusLayer`].
fn rewrite_status(headers: &mut http::HeaderMap, limit: usize, handler_reached: bool, path: &str) {
    let Some(value) = headers.get(Status::GRPC_STATUS) else {
        return;
    };
    let replacement = match Code::from_bytes(value.as_bytes()) {
        Code::Ok => return,
        Code::OutOfRange => Some(Status::resource_exhausted(format!(
            "request message exceeds the limit of {limit} bytes"
        ))),
        Code::Internal if !handler_reached => {
            headers.remove(Status::GRPC_STATUS_DETAILS);
            let reason = Status::from_header_map(headers)
                .map(|status| status.message().to_string())
                .unwrap_or_default();
            Some(Status::invalid_argument(format!(
                "invalid request: {reason}"
            )))
        }
        _ => None,
    };
    if let Some(status) = replacement {
        headers.remove(Status::GRPC_STATUS_DETAILS);
        if let Err(err) = status.add_header(headers) {
            // Cannot happen for a valid message; keep the original answer if it does.
            tracing::warn!(%err, "could not rewrite gRPC status");
        }
    }
    let code = Code::from_bytes(
        headers
            .get(Status::GRPC_STATUS)
            .map_or(b"", |v| v.as_bytes()),
    );
    let message = headers
        .get(Status::GRPC_MESSAGE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    match code {
        Code::Unavailable | Code::Internal | Code::Unknown => {
            tracing::warn!(path, ?code, %message, "rejected OTLP/gRPC request");
        }
        _ => tracing::debug!(path, ?code, %message, "rejected OTLP/gRPC request"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::IngestError;

    #[test]
    fn out_of_range_becomes_resource_exhausted() {
        let mut headers = http::HeaderMap::new();
        Status::out_of_range("Error, decoded message length too large")
            .add_header(&mut headers)
            .unwrap();
        rewrite_status(&mut headers, 1024, false, "/x");
        let status = Status::from_header_map(&headers).unwrap();
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(
            status.message(),
            "request message exceeds the limit of 1024 bytes"
        );
        assert!(status.details().is_empty());
    }

    #[test]
    fn other_statuses_are_left_alone() {
        let mut headers = http::HeaderMap::new();
        Status::invalid_argument("bad")
            .add_header(&mut headers)
            .unwrap();
        rewrite_status(&mut headers, 1024, false, "/x");
        let status = Status::from_header_map(&headers).unwrap();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "bad");

        // INTERNAL from a handler is a server fault and stays INTERNAL.
        let mut headers = http::HeaderMap::new();
        Status::internal("bug").add_header(&mut headers).unwrap();
        rewrite_status(&mut headers, 1024, true, "/x");
        assert_eq!(
            Status::from_header_map(&headers).unwrap().code(),
            Code::Internal
        );
    }

    #[test]
    fn undecodable_request_becomes_invalid_argument() {
        let mut headers = http::HeaderMap::new();
        Status::internal("failed to decode Protobuf message: 100% bad")
            .add_header(&mut headers)
            .unwrap();
        rewrite_status(&mut headers, 1024, false, "/x");
        let status = Status::from_header_map(&headers).unwrap();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "invalid request: failed to decode Protobuf message: 100% bad"
        );
    }

    #[test]
    fn unavailable_carries_retry_info() {
        let status = to_status(&ReceiverError::from(IngestError::ShuttingDown));
        assert_eq!(status.code(), Code::Unavailable);
        let details = <RpcStatus as prost::Message>::decode(status.details()).unwrap();
        assert_eq!(details.code, Code::Unavailable as i32);
        assert_eq!(
            details.details[0].type_url,
            super::super::rpc_status::RETRY_INFO_TYPE_URL
        );
    }
}
