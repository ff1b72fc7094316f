//! One attempt to send an outbox entry: OTLP/gRPC with tonic's generated clients, or OTLP/HTTP
//! (protobuf or JSON) with reqwest. No retries here; see [`super::task`].

use std::io::Write;
use std::time::Duration;

use http::header::{CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::codec::CompressionEncoding;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};

use super::enrich::add_run_ids;
use super::error::ExportError;
use super::retry::{grpc_is_retryable, http_is_retryable};
use super::tls::{client_config, TlsConnector, ALPN_GRPC, ALPN_HTTP};
use crate::config::{Compression, ExporterConfig, ExporterProtocol, SignalKind};
use crate::outbox::OutboxEntry;
use crate::receiver::rpc_status::RpcStatus;

/// What the backend said about an accepted request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivered {
    /// Items the backend rejected (`partial_success`).
    pub rejected: i64,
    /// The backend's `partial_success.error_message`.
    pub message: String,
}

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

/// The per-signal messages, so the HTTP path is written once.
trait Wire {
    type Request: Message + Default + Serialize;
    type Response: Message + Default + DeserializeOwned;
    const PATH: &'static str;
    fn partial(response: Self::Response) -> Delivered;
}

struct TracesWire;
struct LogsWire;
struct MetricsWire;

impl Wire for TracesWire {
    type Request = ExportTraceServiceRequest;
    type Response = ExportTraceServiceResponse;
    const PATH: &'static str = "/v1/traces";
    fn partial(response: Self::Response) -> Delivered {
        response
            .partial_success
            .map(|p| Delivered {
                rejected: p.rejected_spans,
                message: p.error_message,
            })
            .unwrap_or_default()
    }
}

impl Wire for LogsWire {
    type Request = ExportLogsServiceRequest;
    type Response = ExportLogsServiceResponse;
    const PATH: &'static str = "/v1/logs";
    fn partial(response: Self::Response) -> Delivered {
        response
            .partial_success
            .map(|p| Delivered {
                rejected: p.rejected_log_records,
                message: p.error_message,
            })
            .unwrap_or_default()
    }
}

impl Wire for MetricsWire {
    type Request = ExportMetricsServiceRequest;
    type Response = ExportMetricsServiceResponse;
    const PATH: &'static str = "/v1/metrics";
    fn partial(response: Self::Response) -> Delivered {
        response
            .partial_success
            .map(|p| Delivered {
                rejected: p.rejected_data_points,
                message: p.error_message,
            })
            .unwrap_or_default()
    }
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

    /// One attempt to send `entry`.
    pub async fn send(&self, entry: &OutboxEntry) -> Result<Delivered, ExportError> {
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
                        let mut message: ExportTraceServiceRequest = decode(&entry.payload)?;
                        if self.enrich_run_id {
                            add_run_ids(&mut message);
                        }
                        let mut client = TraceServiceClient::new(channel.clone());
                        if let Some(encoding) = compression {
                            client = client.send_compressed(*encoding);
                        }
                        client
                            .export(request(message))
                            .await
                            .map(|r| TracesWire::partial(r.into_inner()))
                    }
                    SignalKind::Logs => {
                        let mut client = LogsServiceClient::new(channel.clone());
                        if let Some(encoding) = compression {
                            client = client.send_compressed(*encoding);
                        }
                        client
                            .export(logs_request(decode(&entry.payload)?))
                            .await
                            .map(|r| LogsWire::partial(r.into_inner()))
                    }
                    SignalKind::Metrics => {
                        let mut client = MetricsServiceClient::new(channel.clone());
                        if let Some(encoding) = compression {
                            client = client.send_compressed(*encoding);
                        }
                        client
                            .export(metrics_request(decode(&entry.payload)?))
                            .await
                            .map(|r| MetricsWire::partial(r.into_inner()))
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
                    SignalKind::Traces => {
                        let enrich: Option<fn(&mut ExportTraceServiceRequest)> =
                            self.enrich_run_id.then_some(add_run_ids);
                        target.send::<TracesWire>(&entry.payload, enrich).await
                    }
                    SignalKind::Logs => target.send::<LogsWire>(&entry.payload, None).await,
                    SignalKind::Metrics => target.send::<MetricsWire>(&entry.payload, None).await,
                }
            }
        }
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
    async fn send<W: Wire>(
        &self,
        payload: &[u8],
        modify: Option<fn(&mut W::Request)>,
    ) -> Result<Delivered, ExportError> {
        // The stored protobuf goes out as it is unless it must change (JSON, enrichment).
        let body = if self.json || modify.is_some() {
            let mut decoded: W::Request = decode(payload)?;
            if let Some(modify) = modify {
                modify(&mut decoded);
            }
            if self.json {
                serde_json::to_vec(&decoded).map_err(|e| ExportError::Payload(e.to_string()))?
            } else {
                decoded.encode_to_vec()
            }
        } else {
            payload.to_vec()
        };
        let (body, encoding) = compress(body, self.compression)?;
        let content_type = if self.json {
            "application/json"
        } else {
            "application/x-protobuf"
        };
        let mut request = self
            .client
            .post(format!("{}{}", self.base, W::PATH))
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
            .is_some_and(|v| v.starts_with("application/json"));
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ExportError::Transport(error_chain(&e)))?;
        if status.is_success() {
            let parsed = if json_answer {
                serde_json::from_slice::<W::Response>(&bytes).ok()
            } else {
                W::Response::decode(bytes.as_ref()).ok()
            };
            return Ok(parsed.map(W::partial).unwrap_or_default());
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
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn compression_round_trips() {
        let body = b"hello hello hello".to_vec();
        let (gz, encoding) = compress(body.clone(), Compression::Gzip).unwrap();
        assert_eq!(encoding, Some("gzip"));
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(gz.as_slice()), &mut out)
            .unwrap();
        assert_eq!(out, body);
        let (zs, _) = compress(body.clone(), Compression::Zstd).unwrap();
        assert_eq!(zstd::decode_all(zs.as_slice()).unwrap(), body);
    }
}
