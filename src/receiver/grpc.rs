//! The OTLP/gRPC receiver: `TraceService/Export`, `LogsService/Export` and
//! `MetricsService/Export` on one tonic server.
//!
//! Requests may be gzip- or zstd-compressed; responses are compressed when the client accepts
//! it. The size limit applies to the decompressed message; the message is then counted against
//! the item caps (RESOURCE_EXHAUSTED over them) before it is decoded, in a decoding slot shared
//! with the HTTP receiver. tonic answers a message whose wire length is over the limit with
//! OUT_OF_RANGE, which OTLP clients retry forever; the
//! [`RejectionStatusLayer`] rewrites it to RESOURCE_EXHAUSTED without RetryInfo (not retryable),
//! and turns tonic's INTERNAL answers to undecodable requests into INVALID_ARGUMENT.

use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body_util::BodyExt;
use tokio::net::TcpListener;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::{NamedService, UnaryService};
use tonic::{Code, Status};

use super::admission::{export_admitted, ByteBudget, DecodeGate, Received};
use super::auth::GrpcAuthLayer;
use super::decode::{ContentEncoding, PayloadFormat};
use super::error::ReceiverError;
use super::limits::ReceiverLimits;
use super::security::ReceiverSecurity;
use super::signal::{Logs, Metrics, Signal, Traces};
use super::sink::ExportSink;
use super::tls::TlsIncoming;
use crate::otlp::RpcStatus;
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
    let receiver = Arc::new(GrpcReceiver { sink, limits });

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
        .add_service(ExportService::<S, Traces>::new(&receiver))
        .add_service(ExportService::<S, Logs>::new(&receiver))
        .add_service(ExportService::<S, Metrics>::new(&receiver));
    match security.tls {
        Some(tls) => {
            router
                .serve_with_incoming_shutdown(TlsIncoming::new(listener, tls), shutdown)
                .await?
        }
        None => {
            router
                .serve_with_incoming_shutdown(super::socket::grpc_incoming(listener), shutdown)
                .await?
        }
    }
    Ok(())
}

/// What the export services share: the sink and the limits.
struct GrpcReceiver<S> {
    sink: Arc<S>,
    limits: ReceiverLimits,
}

impl<S: ExportSink> GrpcReceiver<S> {
    /// Counts, decodes and hands one request of signal `G` (its message bytes as tonic
    /// received and decompressed them) to the sink, and turns the result into a reply.
    async fn export<G: Signal>(
        &self,
        request: tonic::Request<Bytes>,
    ) -> Result<tonic::Response<G::Response>, Status> {
        if let Some(reached) = request.extensions().get::<HandlerReached>() {
            reached.0.store(true, Ordering::Relaxed);
        }
        let received = Received {
            format: PayloadFormat::Protobuf,
            encoding: ContentEncoding::Identity,
            body: request.into_inner(),
            max_bytes: self.limits.max_request_bytes,
        };
        let sink = self.sink.as_ref();
        match export_admitted::<G, S>(
            ByteBudget::shared(),
            DecodeGate::shared(),
            &self.limits.items,
            received,
            sink,
        )
        .await
        {
            Ok(outcome) => Ok(tonic::Response::new(G::response(outcome))),
            // Worded as tonic words the decoding errors it answers itself.
            Err(
                err @ (ReceiverError::InvalidWire { .. } | ReceiverError::InvalidProtobuf { .. }),
            ) => Err(Status::invalid_argument(format!(
                "invalid request: failed to decode Protobuf message: {err}"
            ))),
            Err(err) => Err(to_status(&err)),
        }
    }
}

/// The gRPC service of signal `G` (`<package>.<Service>/Export`).
///
/// Written out instead of the generated server because the generated one decodes with prost
/// inside tonic, before any handler could count the request: this one takes the message as
/// bytes (decompressed and size-limited by tonic) and decodes it after counting.
struct ExportService<S, G> {
    receiver: Arc<GrpcReceiver<S>>,
    signal: PhantomData<fn() -> G>,
}

impl<S, G> ExportService<S, G> {
    fn new(receiver: &Arc<GrpcReceiver<S>>) -> Self {
        Self {
            receiver: Arc::clone(receiver),
            signal: PhantomData,
        }
    }
}

impl<S, G> Clone for ExportService<S, G> {
    fn clone(&self) -> Self {
        Self::new(&self.receiver)
    }
}

impl<S, G: Signal> NamedService for ExportService<S, G> {
    const NAME: &'static str = G::GRPC_SERVICE;
}

impl<S, G, B> tower::Service<http::Request<B>> for ExportService<S, G>
where
    S: ExportSink,
    G: Signal,
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let path = request.uri().path();
        let is_export = path
            .strip_prefix('/')
            .and_then(|p| p.strip_prefix(G::GRPC_SERVICE))
            .is_some_and(|method| method == "/Export");
        if !is_export {
            return Box::pin(async {
                let mut response = http::Response::new(tonic::body::Body::default());
                let headers = response.headers_mut();
                headers.insert(Status::GRPC_STATUS, (Code::Unimplemented as i32).into());
                headers.insert(
                    http::header::CONTENT_TYPE,
                    tonic::metadata::GRPC_CONTENT_TYPE,
                );
                Ok(response)
            });
        }
        let method = ExportMethod::<S, G> {
            receiver: Arc::clone(&self.receiver),
            signal: PhantomData,
        };
        let limit = self.receiver.limits.max_request_bytes;
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(RawCodec::<G::Response>(PhantomData))
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Zstd)
                .send_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Zstd)
                .max_decoding_message_size(limit);
            Ok(grpc.unary(method, request).await)
        })
    }
}

/// The unary `Export` method of signal `G`.
struct ExportMethod<S, G> {
    receiver: Arc<GrpcReceiver<S>>,
    signal: PhantomData<fn() -> G>,
}

impl<S: ExportSink, G: Signal> UnaryService<Bytes> for ExportMethod<S, G> {
    type Response = G::Response;
    type Future =
        Pin<Box<dyn Future<Output = Result<tonic::Response<G::Response>, Status>> + Send>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let receiver = Arc::clone(&self.receiver);
        Box::pin(async move { receiver.export::<G>(request).await })
    }
}

/// A codec that hands the request message over as bytes and encodes responses with prost.
struct RawCodec<R>(PhantomData<fn() -> R>);

impl<R: prost::Message + Send + 'static> Codec for RawCodec<R> {
    type Encode = R;
    type Decode = Bytes;
    type Encoder = MessageEncoder<R>;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        MessageEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder
    }
}

/// Encodes a response message with prost.
struct MessageEncoder<R>(PhantomData<fn() -> R>);

impl<R: prost::Message> Encoder for MessageEncoder<R> {
    type Item = R;
    type Error = Status;

    fn encode(&mut self, item: R, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|err| Status::internal(format!("encoding the response: {err}")))
    }
}

/// Takes a whole request message as bytes.
struct RawDecoder;

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
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
            crate::otlp::rpc_status::RETRY_INFO_TYPE_URL
        );
    }
}
