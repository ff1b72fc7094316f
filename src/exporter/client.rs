//! One attempt to send outbox entries: OTLP/gRPC through tonic with a codec that sends the
//! stored bytes as the message (no decode / re-encode), or OTLP/HTTP (protobuf or JSON) with
//! reqwest. No retries here (the exporter task retries). The received bytes go out as they are
//! unless they must change: JSON, or `enrich_run_id` with span runs. Several entries of one
//! signal go out as one request by concatenating their bytes: an OTLP export request has one
//! field, its repeated `resource_*` list, and concatenated protobuf messages decode as one
//! message with the lists appended.

use std::io::Write;
use std::marker::PhantomData;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};

use super::enrich::add_run_ids;
use super::error::ExportError;
use super::retry::{grpc_is_retryable, http_is_retryable};
use super::tls::{client_config, TlsConnector, ALPN_GRPC, ALPN_HTTP};
use super::unframed;
use crate::config::{Compression, ExporterConfig, ExporterProtocol, SignalKind};
use crate::otlp::{
    Logs, Metrics, PartialSuccess, RpcStatus, Signal, Traces, JSON_CONTENT_TYPE,
    PROTOBUF_CONTENT_TYPE,
};
use crate::outbox::OutboxEntry;

/// A connection to one backend.
pub struct Client {
    transport: Transport,
    enrich_run_id: bool,
}

enum Transport {
    Grpc {
        channel: Channel,
        metadata: MetadataMap,
        compression: Option<CompressionEncoding>,
        timeout: Duration,
    },
    Http {
        client: reqwest::Client,
        base: String,
        json: bool,
        headers: HeaderMap,
        compression: Compression,
    },
}

fn decode<M: Message + Default>(payload: &[u8]) -> Result<M, ExportError> {
    M::decode(payload).map_err(|e| ExportError::Payload(format!("stored request: {e}")))
}

impl Client {
    /// Builds the client, reading the TLS files. The connection is opened lazily, on the
    /// first send (so this needs a Tokio runtime for gRPC).
    pub fn new(config: &ExporterConfig) -> Result<Self, ExportError> {
        let transport = match config.protocol {
            ExporterProtocol::Grpc => {
                let endpoint = Endpoint::from_shared(config.endpoint.clone())
                    .map_err(|e| ExportError::Transport(format!("{}: {e}", config.endpoint)))?
                    .timeout(config.timeout)
                    .connect_timeout(config.timeout);
                let channel = match &config.tls {
                    // tonic is built without TLS: the connector does the handshake.
                    Some(tls) => endpoint.connect_with_connector_lazy(TlsConnector::new(
                        client_config(tls, ALPN_GRPC)?,
                        tls.server_name_override.as_deref(),
                    )),
                    None => endpoint.connect_lazy(),
                };
                let mut metadata = MetadataMap::new();
                for (name, value) in &config.headers {
                    if let (Ok(key), Ok(value)) = (
                        MetadataKey::from_bytes(name.as_bytes()),
                        MetadataValue::try_from(value.as_str()),
                    ) {
                        metadata.insert(key, value);
                    }
                }
                Transport::Grpc {
                    channel,
                    metadata,
                    compression: match config.compression {
                        Compression::None => None,
                        Compression::Gzip => Some(CompressionEncoding::Gzip),
                        Compression::Zstd => Some(CompressionEncoding::Zstd),
                    },
                    timeout: config.timeout,
                }
            }
            ExporterProtocol::HttpProtobuf | ExporterProtocol::HttpJson => {
                let mut builder = reqwest::Client::builder()
                    .timeout(config.timeout)
                    .connect_timeout(config.timeout);
                if let Some(tls) = &config.tls {
                    builder = builder.use_preconfigured_tls(client_config(tls, ALPN_HTTP)?);
                }
                let client = builder
                    .build()
                    .map_err(|e| ExportError::Transport(e.to_string()))?;
                let mut headers = HeaderMap::new();
                for (name, value) in &config.headers {
                    if let (Ok(name), Ok(value)) = (
                        HeaderName::from_bytes(name.as_bytes()),
                        HeaderValue::from_str(value),
                    ) {
                        headers.insert(name, value);
                    }
                }
                Transport::Http {
                    client,
                    base: config.endpoint.clone(),
                    json: config.protocol == ExporterProtocol::HttpJson,
                    headers,
                    compression: config.compression,
                }
            }
        };
        Ok(Self {
            transport,
            enrich_run_id: config.enrich_run_id,
        })
    }

    /// Whether this client adds `stepline.run_id` to spans (it needs the entries' span runs).
    pub fn enriches(&self) -> bool {
        self.enrich_run_id
    }

    /// One attempt to send `entry` alone; what the backend said in `partial_success` when it
    /// took it.
    pub async fn send(&self, entry: &OutboxEntry) -> Result<PartialSuccess, ExportError> {
        let body = self.body_of(entry)?;
        self.send_body(entry.signal, body).await
    }

    /// The bytes `entry` goes out as: its payload as received, or (traces, when this exporter
    /// enriches and the writer resolved span runs) the request with `stepline.run_id` added.
    pub fn body_of(&self, entry: &OutboxEntry) -> Result<Bytes, ExportError> {
        Ok(match self.enriched(entry)? {
            Some(request) => Bytes::from(request.encode_to_vec()),
            None => entry.payload.clone(),
        })
    }

    /// [`Client::body_of`] taking the entry, so its payload is not copied when unchanged.
    pub fn into_body(&self, entry: OutboxEntry) -> Result<Bytes, ExportError> {
        Ok(match self.enriched(&entry)? {
            Some(request) => Bytes::from(request.encode_to_vec()),
            None => entry.payload,
        })
    }

    /// One attempt to send `body`, an encoded export request of `signal` (the bytes of one or
    /// more entries, see [`Client::body_of`]).
    pub async fn send_body(
        &self,
        signal: SignalKind,
        body: Bytes,
    ) -> Result<PartialSuccess, ExportError> {
        self.send_parts(signal, vec![body]).await
    }

    /// One attempt to send the export request of `signal` made of `parts`, the bodies of one
    /// or more entries (see [`Client::body_of`]): concatenated protobuf export requests decode
    /// as one request holding all their `resource_*` entries. Uncompressed gRPC sends the parts
    /// as they are; compression and HTTP take them as one piece.
    pub async fn send_parts(
        &self,
        signal: SignalKind,
        parts: Vec<Bytes>,
    ) -> Result<PartialSuccess, ExportError> {
        match &self.transport {
            Transport::Grpc {
                channel,
                metadata,
                compression,
                timeout,
            } => {
                let target = GrpcTarget {
                    channel,
                    metadata,
                    compression: *compression,
                    timeout: *timeout,
                };
                match signal {
                    SignalKind::Traces => target.send::<Traces>(parts).await,
                    SignalKind::Logs => target.send::<Logs>(parts).await,
                    SignalKind::Metrics => target.send::<Metrics>(parts).await,
                }
            }
            Transport::Http {
                client,
                base,
                json,
                headers,
                compression,
            } => {
                let target = HttpTarget {
                    client,
                    base,
                    json: *json,
                    headers,
                    compression: *compression,
                };
                let body = concat(parts);
                match signal {
                    SignalKind::Traces => target.send::<Traces>(body).await,
                    SignalKind::Logs => target.send::<Logs>(body).await,
                    SignalKind::Metrics => target.send::<Metrics>(body).await,
                }
            }
        }
    }

    /// The trace request of `entry` with `stepline.run_id` on the spans of its span runs, when
    /// this exporter enriches and the writer resolved any; `None` leaves the received bytes.
    fn enriched(
        &self,
        entry: &OutboxEntry,
    ) -> Result<Option<ExportTraceServiceRequest>, ExportError> {
        if !self.enrich_run_id || entry.signal != SignalKind::Traces || entry.span_runs.is_empty() {
            return Ok(None);
        }
        let mut request: ExportTraceServiceRequest = decode(&entry.payload)?;
        add_run_ids(&mut request, &entry.span_runs);
        Ok(Some(request))
    }
}

/// Where a gRPC request goes and how.
struct GrpcTarget<'a> {
    channel: &'a Channel,
    metadata: &'a MetadataMap,
    compression: Option<CompressionEncoding>,
    timeout: Duration,
}

impl GrpcTarget<'_> {
    /// Sends `parts`, concatenated, as the message of `<service>/Export` of signal `S`.
    async fn send<S: Signal>(&self, parts: Vec<Bytes>) -> Result<PartialSuccess, ExportError> {
        let path = PathAndQuery::try_from(format!("/{}/Export", S::GRPC_SERVICE))
            .map_err(|e| ExportError::Payload(format!("gRPC path: {e}")))?;
        if self.compression.is_none() {
            let decoder = MessageDecoder::<S::Response>(PhantomData);
            return unframed::unary(
                self.channel,
                path,
                self.metadata,
                self.timeout,
                parts,
                decoder,
            )
            .await
            .map(S::partial_success)
            .map_err(grpc_error);
        }
        let body = concat(parts);
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        if let Some(encoding) = self.compression {
            grpc = grpc.send_compressed(encoding);
        }
        // Worded as tonic's generated clients word it.
        grpc.ready().await.map_err(|e| {
            grpc_error(tonic::Status::unknown(format!(
                "Service was not ready: {e}"
            )))
        })?;
        let mut request = tonic::Request::new(body);
        *request.metadata_mut() = self.metadata.clone();
        request.set_timeout(self.timeout);
        grpc.unary(request, path, RawRequestCodec::<S::Response>(PhantomData))
            .await
            .map(|response| S::partial_success(response.into_inner()))
            .map_err(grpc_error)
    }
}

/// A client codec that sends an already encoded request message as it is and decodes the
/// response with prost.
struct RawRequestCodec<R>(PhantomData<fn() -> R>);

impl<R: Message + Default + Send + 'static> Codec for RawRequestCodec<R> {
    type Encode = Bytes;
    type Decode = R;
    type Encoder = BytesEncoder;
    type Decoder = MessageDecoder<R>;

    fn encoder(&mut self) -> Self::Encoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        MessageDecoder(PhantomData)
    }
}

/// Writes the message bytes as they are.
struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

/// Decodes a response message with prost.
struct MessageDecoder<R>(PhantomData<fn() -> R>);

impl<R: Message + Default> Decoder for MessageDecoder<R> {
    type Item = R;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<R>, tonic::Status> {
        R::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(format!("failed to decode the response: {e}")))
    }
}

fn grpc_error(status: tonic::Status) -> ExportError {
    let retry_after = RpcStatus::decode(status.details())
        .ok()
        .and_then(|details| details.retry_delay());
    // Connection failures (refused, TLS handshake) carry their cause as the source.
    let mut message = status.message().to_owned();
    if let Some(source) = std::error::Error::source(&status) {
        let cause = error_chain(source);
        if !message.contains(&cause) {
            message = if message.is_empty() {
                cause
            } else {
                format!("{message}: {cause}")
            };
        }
    }
    ExportError::Refused {
        status: format!("gRPC {:?}", status.code()),
        message,
        retryable: grpc_is_retryable(status.code(), retry_after.is_some()),
        retry_after,
    }
}

struct HttpTarget<'a> {
    client: &'a reqwest::Client,
    base: &'a str,
    json: bool,
    headers: &'a HeaderMap,
    compression: Compression,
}

impl HttpTarget<'_> {
    /// Posts `body` (an encoded request of signal `S`; converted to JSON when this exporter
    /// speaks JSON) to the signal's path.
    async fn send<S: Signal>(&self, body: Bytes) -> Result<PartialSuccess, ExportError> {
        let body = if self.json {
            Bytes::from(to_json(&decode::<S::Request>(&body)?)?)
        } else {
            body
        };
        let (body, encoding) = compress(body, self.compression)?;
        let content_type = if self.json {
            JSON_CONTENT_TYPE
        } else {
            PROTOBUF_CONTENT_TYPE
        };
        let mut request = self
            .client
            .post(format!("{}{}", self.base, S::HTTP_PATH))
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, content_type)
            .body(body);
        if let Some(encoding) = encoding {
            request = request.header(CONTENT_ENCODING, encoding);
        }
        let response = request
            .send()
            .await
            .map_err(|e| ExportError::Transport(error_chain(&e)))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let json_answer = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(JSON_CONTENT_TYPE));
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ExportError::Transport(error_chain(&e)))?;
        if status.is_success() {
            let parsed = if json_answer {
                serde_json::from_slice::<S::Response>(&bytes).ok()
            } else {
                S::Response::decode(bytes.as_ref()).ok()
            };
            return Ok(parsed.map(S::partial_success).unwrap_or_default());
        }
        let message = if json_answer {
            serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("message").and_then(|m| m.as_str().map(str::to_owned)))
        } else {
            RpcStatus::decode(bytes.as_ref())
                .ok()
                .map(|s| s.message)
                .filter(|m| !m.is_empty())
        }
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes[..bytes.len().min(256)]).into_owned());
        Err(ExportError::Refused {
            status: format!("HTTP {status}"),
            message,
            retryable: http_is_retryable(status),
            retry_after,
        })
    }
}

/// One request of the parts: concatenated protobuf export requests decode as one request
/// holding all their `resource_*` entries.
fn concat(mut parts: Vec<Bytes>) -> Bytes {
    if parts.len() == 1 {
        return parts.pop().unwrap_or_default();
    }
    let mut body = BytesMut::with_capacity(parts.iter().map(Bytes::len).sum());
    for part in parts {
        body.extend_from_slice(&part);
    }
    body.freeze()
}

fn to_json<M: serde::Serialize>(message: &M) -> Result<Vec<u8>, ExportError> {
    serde_json::to_vec(message).map_err(|e| ExportError::Payload(e.to_string()))
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn compress(
    body: Bytes,
    compression: Compression,
) -> Result<(Bytes, Option<&'static str>), ExportError> {
    let failed = |e: std::io::Error| ExportError::Payload(format!("compression failed: {e}"));
    match compression {
        Compression::None => Ok((body, None)),
        Compression::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            encoder.write_all(&body).map_err(failed)?;
            Ok((Bytes::from(encoder.finish().map_err(failed)?), Some("gzip")))
        }
        Compression::Zstd => Ok((
            Bytes::from(zstd::stream::encode_all(&body[..], 1).map_err(failed)?),
            Some("zstd"),
        )),
    }
}

/// `Retry-After`: delay in seconds, or an HTTP date.
fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = at.signed_duration_since(chrono::Utc::now());
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
