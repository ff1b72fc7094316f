//! One attempt to send an outbox entry: OTLP/gRPC with tonic's generated clients, or OTLP/HTTP
//! (protobuf or JSON) with reqwest. No retries here (the exporter task retries). The received
//! bytes go out as they are unless they must change: JSON, or `enrich_run_id` with span runs.

use std::io::Write;
use std::time::Duration;

use http::header::{CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use tonic::codec::CompressionEncoding;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};

use super::enrich::add_run_ids;
use super::error::ExportError;
use super::retry::{grpc_is_retryable, http_is_retryable};
use super::tls::{client_config, TlsConnector, ALPN_GRPC, ALPN_HTTP};
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

    /// One attempt to send `entry`; what the backend said in `partial_success` when it took it.
    pub async fn send(&self, entry: &OutboxEntry) -> Result<PartialSuccess, ExportError> {
        let enriched = match entry.signal {
            SignalKind::Traces => self.enriched(entry)?,
            SignalKind::Logs | SignalKind::Metrics => None,
        };
        match &self.transport {
            Transport::Grpc {
                channel,
                metadata,
                compression,
                timeout,
            } => {
                let request = |message| grpc_request(message, metadata, *timeout);
                let logs_request = |message| grpc_request(message, metadata, *timeout);
                let metrics_request = |message| grpc_request(message, metadata, *timeout);
                let result = match entry.signal {
                    SignalKind::Traces => {
                        let message = match enriched {
                            Some(message) => message,
                            None => decode(&entry.payload)?,
                        };
                        let mut client = TraceServiceClient::new(channel.clone());
                        if let Some(encoding) = compression {
                            client = client.send_compressed(*encoding);
                        }
                        client
                            .export(request(message))
                            .await
                            .map(|r| Traces::partial_success(r.into_inner()))
                    }
                    SignalKind::Logs => {
                        let mut client = LogsServiceClient::new(channel.clone());
                        if let Some(encoding) = compression {
                            client = client.send_compressed(*encoding);
                        }
                        client
                            .export(logs_request(decode(&entry.payload)?))
                            .await
                            .map(|r| Logs::partial_success(r.into_inner()))
                    }
                    SignalKind::Metrics => {
                        let mut client = MetricsServiceClient::new(channel.clone());
                        if let Some(encoding) = compression {
                            client = client.send_compressed(*encoding);
                        }
                        client
                            .export(metrics_request(decode(&entry.payload)?))
                            .await
                            .map(|r| Metrics::partial_success(r.into_inner()))
                    }
                };
                result.map_err(grpc_error)
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
                match entry.signal {
                    SignalKind::Traces => target.send::<Traces>(&entry.payload, enriched).await,
                    SignalKind::Logs => target.send::<Logs>(&entry.payload, None).await,
                    SignalKind::Metrics => target.send::<Metrics>(&entry.payload, None).await,
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
        if !self.enrich_run_id || entry.span_runs.is_empty() {
            return Ok(None);
        }
        let mut request: ExportTraceServiceRequest = decode(&entry.payload)?;
        add_run_ids(&mut request, &entry.span_runs);
        Ok(Some(request))
    }
}

fn grpc_request<M>(message: M, metadata: &MetadataMap, timeout: Duration) -> tonic::Request<M> {
    let mut request = tonic::Request::new(message);
    *request.metadata_mut() = metadata.clone();
    request.set_timeout(timeout);
    request
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
    /// Posts `payload` (or `changed`, the request as it must go out instead) to the signal's path.
    async fn send<S: Signal>(
        &self,
        payload: &[u8],
        changed: Option<S::Request>,
    ) -> Result<PartialSuccess, ExportError> {
        // The stored protobuf goes out as it is unless it must change (JSON, enrichment).
        let body = match changed {
            Some(request) if self.json => to_json(&request)?,
            Some(request) => request.encode_to_vec(),
            None if self.json => to_json(&decode::<S::Request>(payload)?)?,
            None => payload.to_vec(),
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
    body: Vec<u8>,
    compression: Compression,
) -> Result<(Vec<u8>, Option<&'static str>), ExportError> {
    let failed = |e: std::io::Error| ExportError::Payload(format!("compression failed: {e}"));
    match compression {
        Compression::None => Ok((body, None)),
        Compression::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            encoder.write_all(&body).map_err(failed)?;
            Ok((encoder.finish().map_err(failed)?, Some("gzip")))
        }
        Compression::Zstd => Ok((
            zstd::stream::encode_all(body.as_slice(), 1).map_err(failed)?,
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
