//! The configuration as written: serde types for each component's settings, every one with
//! `deny_unknown_fields`. Nothing here is validated beyond YAML types; see `validate`.
//!
//! Every field is optional so that a missing key, an explicit `~` and an environment reference
//! that expanded to nothing all mean "use the default".

use serde::{Deserialize, Deserializer};

pub(crate) use super::text::Text;

/// A settings block whose mere presence matters: `grpc:` with nothing under it (or `grpc: {}`)
/// enables gRPC with defaults, while a missing `grpc` key leaves it off.
#[derive(Debug, Default)]
pub(crate) enum Section<T> {
    /// The key is not there.
    #[default]
    Absent,
    /// The key is there; an empty or null body gives `T::default()`.
    Present(T),
}

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for Section<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self::Present(
            Option::<T>::deserialize(deserializer)?.unwrap_or_default(),
        ))
    }
}

/// `receivers.otlp`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOtlpReceiver {
    /// `protocols`: which OTLP transports to serve.
    pub(crate) protocols: Option<RawOtlpProtocols>,
}

/// `receivers.otlp.protocols`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOtlpProtocols {
    /// `grpc`: OTLP over gRPC.
    #[serde(default)]
    pub(crate) grpc: Section<RawGrpcProtocol>,
    /// `http`: OTLP over HTTP (protobuf or JSON).
    #[serde(default)]
    pub(crate) http: Section<RawHttpProtocol>,
}

/// `receivers.otlp.protocols.grpc`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGrpcProtocol {
    /// `endpoint`: `host:port` to listen on.
    pub(crate) endpoint: Option<Text>,
    /// `max_recv_msg_size_mib`: largest accepted request, in MiB.
    pub(crate) max_recv_msg_size_mib: Option<u64>,
    /// `tls`: serve TLS (see `auth.rs`).
    pub(crate) tls: Option<super::auth::RawServerTls>,
    /// `auth`: require a bearer token (see `auth.rs`).
    pub(crate) auth: Option<super::auth::RawReceiverAuth>,
}

/// `receivers.otlp.protocols.http`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttpProtocol {
    /// `endpoint`: `host:port` to listen on.
    pub(crate) endpoint: Option<Text>,
    /// `max_request_body_size`: largest accepted body, in bytes.
    pub(crate) max_request_body_size: Option<u64>,
    /// `tls`: serve TLS (see `auth.rs`).
    pub(crate) tls: Option<super::auth::RawServerTls>,
    /// `auth`: require a bearer token (see `auth.rs`).
    pub(crate) auth: Option<super::auth::RawReceiverAuth>,
}

/// `processors.stepline`: the interpreter.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSteplineProcessor {
    /// `inactivity_timeout`: duration after which a silent run is abandoned; `0s` disables.
    pub(crate) inactivity_timeout: Option<Text>,
    /// `waiting_timeout`: duration after which a run waiting on calls is abandoned; absent or
    /// `0s`: never.
    pub(crate) waiting_timeout: Option<Text>,
    /// `limits`: the per-request and per-span caps.
    pub(crate) limits: Option<super::limits::RawLimits>,
    /// `memory`: the byte budgets of the in-memory caches.
    pub(crate) memory: Option<super::limits::RawMemory>,
    /// `trigger`: the attribute keys that say who started a run.
    pub(crate) trigger: Option<super::run_info::RawTrigger>,
    /// `run_attributes`: attribute keys copied onto the run record.
    pub(crate) run_attributes: Option<Vec<Text>>,
    /// `lineage_scope`: `conversation` (default), `service` or `off`.
    pub(crate) lineage_scope: Option<Text>,
    /// `vercel_ai`: how the Vercel AI SDK's `ai.*` spans are read.
    pub(crate) vercel_ai: Option<RawVercelAi>,
    /// `retention`: how long a run is kept once over (`30d`); absent or `0` keeps runs.
    pub(crate) retention: Option<Text>,
}

/// `processors.stepline.vercel_ai`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawVercelAi {
    /// `conversation_keys`: the `ai.telemetry.metadata.*` keys read for the conversation id, in
    /// order.
    pub(crate) conversation_keys: Option<Vec<String>>,
}

/// `processors.batch`: accepted for compatibility with Collector configs, without effect.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBatchProcessor {
    /// `timeout`: a duration.
    pub(crate) timeout: Option<Text>,
    /// `send_batch_size`: a count.
    pub(crate) send_batch_size: Option<u64>,
    /// `send_batch_max_size`: a count; 0 means no limit.
    pub(crate) send_batch_max_size: Option<u64>,
}

/// `extensions.stepline_storage`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStorageExtension {
    /// `directory`: where RocksDB lives.
    pub(crate) directory: Option<Text>,
    /// `sync`: fsync the WAL on every acknowledged write.
    pub(crate) sync: Option<bool>,
    /// `media`: the object store for large binary message parts.
    pub(crate) media: Option<RawMedia>,
}

/// `extensions.stepline_storage.media`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMedia {
    /// `enabled`: move large blobs out of stored messages (default true).
    pub(crate) enabled: Option<bool>,
    /// `threshold`: decoded size from which a blob moves (`64KiB`, `1MiB`, bytes).
    pub(crate) threshold: Option<Text>,
    /// `url`: the object store (`file://`, `s3://`, `gs://`, `az://`, `memory://`).
    pub(crate) url: Option<Text>,
    /// `options`: object store options (endpoint, region, allow_http, credentials, ...); an
    /// empty value means "not given".
    pub(crate) options: Option<std::collections::BTreeMap<String, Option<Text>>>,
    /// `max_inline_bytes`: most blob bytes one `media=inline` answer restores.
    pub(crate) max_inline_bytes: Option<Text>,
}

/// `extensions.stepline_api`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawApiExtension {
    /// `endpoint`: `host:port` of the query API.
    pub(crate) endpoint: Option<Text>,
    /// `bearer_token`: required `Authorization: Bearer` token; empty means none.
    pub(crate) bearer_token: Option<Text>,
    /// `allow_no_auth`: a token written as `${env:VAR}` may resolve empty (no authentication).
    /// Decoded so that a non-boolean is reported at its key; acted on by the secret check
    /// (`auth::SecretReferences`), which reads the substituted tree.
    #[allow(dead_code)]
    pub(crate) allow_no_auth: Option<bool>,
    /// `metrics_bearer_token`: token required on `/metrics`; empty means none.
    pub(crate) metrics_bearer_token: Option<Text>,
    /// `allowed_hosts`: more `Host` values the API answers to.
    pub(crate) allowed_hosts: Option<Vec<Option<Text>>>,
}

/// `extensions.health_check`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHealthCheckExtension {
    /// `endpoint`: `host:port`.
    pub(crate) endpoint: Option<Text>,
}

/// `exporters.otlp` and `exporters.otlphttp` (one shape; `encoding` applies to `otlphttp`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOtlpExporter {
    /// `endpoint`: `host:port` or `http://host:port` (gRPC), base URL (HTTP).
    pub(crate) endpoint: Option<Text>,
    /// `headers`: extra request headers (gRPC metadata).
    pub(crate) headers: Option<std::collections::BTreeMap<String, Text>>,
    /// `tls`: transport security.
    pub(crate) tls: Option<RawTls>,
    /// `compression`: `gzip` (default), `zstd` or `none`.
    pub(crate) compression: Option<Text>,
    /// `encoding`: `proto` (default) or `json`; `otlphttp` only.
    pub(crate) encoding: Option<Text>,
    /// `timeout`: per attempt.
    pub(crate) timeout: Option<Text>,
    /// `retry_on_failure`.
    pub(crate) retry_on_failure: Option<RawRetry>,
    /// `sending_queue`.
    pub(crate) sending_queue: Option<RawSendingQueue>,
    /// `enrich_run_id`: add `stepline.run_id` to agent spans.
    pub(crate) enrich_run_id: Option<bool>,
}

/// `exporters.<id>.tls`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    /// `insecure`: plain text (no TLS).
    pub(crate) insecure: Option<bool>,
    /// `insecure_skip_verify`.
    pub(crate) insecure_skip_verify: Option<bool>,
    /// `ca_file`.
    pub(crate) ca_file: Option<Text>,
    /// `cert_file`.
    pub(crate) cert_file: Option<Text>,
    /// `key_file`.
    pub(crate) key_file: Option<Text>,
    /// `server_name_override`: the name the server certificate must carry.
    pub(crate) server_name_override: Option<Text>,
}

/// `exporters.<id>.retry_on_failure`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetry {
    /// `enabled`.
    pub(crate) enabled: Option<bool>,
    /// `initial_interval`.
    pub(crate) initial_interval: Option<Text>,
    /// `max_interval`.
    pub(crate) max_interval: Option<Text>,
    /// `multiplier`.
    pub(crate) multiplier: Option<f64>,
    /// `randomization_factor`.
    pub(crate) randomization_factor: Option<f64>,
    /// `max_elapsed_time`; 0 = retry forever.
    pub(crate) max_elapsed_time: Option<Text>,
}

/// `exporters.<id>.sending_queue`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSendingQueue {
    /// `enabled`: the durable outbox cannot be turned off; only `true` is accepted.
    pub(crate) enabled: Option<bool>,
    /// `queue_size_bytes`: cap on this exporter's unsent bytes.
    pub(crate) queue_size_bytes: Option<u64>,
    /// `num_consumers`: requests in flight at once.
    pub(crate) num_consumers: Option<u64>,
    /// `when_full`: `refuse` (default) or `drop_oldest`.
    pub(crate) when_full: Option<Text>,
    /// `batch`: merge entries into larger requests (present, even empty, turns it on).
    pub(crate) batch: Option<RawBatch>,
}

/// `exporters.<id>.sending_queue.batch`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBatch {
    /// `flush_timeout`: how long a batch below `min_size` waits.
    pub(crate) flush_timeout: Option<Text>,
    /// `min_size`: the size at which a batch goes out.
    pub(crate) min_size: Option<u64>,
    /// `max_size`: the most a batch holds (0: no limit).
    pub(crate) max_size: Option<u64>,
    /// `sizer`: `items` (default) or `bytes`.
    pub(crate) sizer: Option<Text>,
}

/// `service`. Pipelines are kept as YAML so each one is decoded (and reported) on its own.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawService {
    /// `extensions`: ids of the extensions to start.
    pub(crate) extensions: Option<Vec<String>>,
    /// `pipelines`: pipeline id → [`RawPipeline`].
    pub(crate) pipelines: Option<serde_yaml_ng::Mapping>,
    /// `telemetry`: stepline's own logs and traces.
    pub(crate) telemetry: Option<RawTelemetry>,
    /// `shutdown_timeout`: how long the exporters may keep sending after SIGTERM.
    pub(crate) shutdown_timeout: Option<Text>,
}

/// `service.pipelines.<id>`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPipeline {
    /// `receivers`: receiver ids.
    pub(crate) receivers: Option<Vec<String>>,
    /// `processors`: processor ids, in order.
    pub(crate) processors: Option<Vec<String>>,
    /// `exporters`: exporter ids.
    pub(crate) exporters: Option<Vec<String>>,
}

/// `service.telemetry`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTelemetry {
    /// `logs`.
    pub(crate) logs: Option<RawTelemetryLogs>,
    /// `traces`: stepline's own spans, exported over OTLP.
    pub(crate) traces: Option<RawTelemetryTraces>,
}

/// `service.telemetry.traces`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTelemetryTraces {
    /// `processors`: one `batch` processor with its exporter.
    pub(crate) processors: Option<Vec<RawTelemetryProcessor>>,
}

/// `service.telemetry.traces.processors[]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTelemetryProcessor {
    /// `batch`.
    pub(crate) batch: Option<RawTelemetryBatch>,
}

/// `…processors[].batch`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTelemetryBatch {
    /// `exporter`.
    pub(crate) exporter: Option<RawTelemetryExporter>,
}

/// `…batch.exporter`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTelemetryExporter {
    /// `otlp`.
    pub(crate) otlp: Option<RawTelemetryOtlp>,
}

/// `…exporter.otlp`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTelemetryOtlp {
    /// `protocol`: `grpc`.
    pub(crate) protocol: Option<Text>,
    /// `endpoint`: `http://host:port`.
    pub(crate) endpoint: Option<Text>,
}

/// `service.telemetry.logs`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTelemetryLogs {
    /// `level`: `trace`, `debug`, `info`, `warn` or `error`.
    pub(crate) level: Option<Text>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode<T: serde::de::DeserializeOwned>(yaml: &str) -> Result<T, String> {
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).unwrap();
        serde_path_to_error::deserialize(&value).map_err(|error| error.to_string())
    }

    #[test]
    fn section_distinguishes_absent_from_empty() {
        let absent: RawOtlpProtocols = decode("http: {}").unwrap();
        assert!(matches!(absent.grpc, Section::Absent));
        assert!(matches!(absent.http, Section::Present(_)));
        let null: RawOtlpProtocols = decode("grpc:").unwrap();
        assert!(matches!(null.grpc, Section::Present(_)));
        assert!(matches!(null.http, Section::Absent));
    }

    #[test]
    fn text_accepts_any_scalar_but_not_collections() {
        let api: RawApiExtension = decode("bearer_token: 12345\nendpoint: true").unwrap();
        assert_eq!(api.bearer_token, Some(Text("12345".into())));
        assert_eq!(api.endpoint, Some(Text("true".into())));
        let error = decode::<RawApiExtension>("endpoint: [a]").unwrap_err();
        assert!(
            error.contains("endpoint: invalid type: sequence, expected a string"),
            "{error}"
        );
    }

    #[test]
    fn unknown_fields_are_rejected_with_their_path() {
        let error = decode::<RawOtlpProtocols>("grpc:\n  endpiont: x").unwrap_err();
        assert!(
            error.starts_with("grpc.endpiont: unknown field `endpiont`"),
            "{error}"
        );
    }
}
