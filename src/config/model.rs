//! The validated configuration: what the rest of stepline builds from. Every value here has
//! been checked; nothing is left for the caller to validate except what needs I/O (binding an
//! endpoint, opening the storage directory).

use std::path::PathBuf;
use std::time::Duration;

use super::auth::{ReceiverAuthConfig, ServerTlsConfig};

/// Default OTLP/gRPC listen endpoint.
pub const DEFAULT_GRPC_ENDPOINT: &str = "127.0.0.1:4317";
/// Default OTLP/HTTP listen endpoint.
pub const DEFAULT_HTTP_ENDPOINT: &str = "127.0.0.1:4318";
/// Default query API listen endpoint.
pub const DEFAULT_API_ENDPOINT: &str = "127.0.0.1:4320";
/// Default largest gRPC request, in MiB (`max_recv_msg_size_mib`).
pub const DEFAULT_GRPC_MAX_RECV_MSG_SIZE_MIB: u64 = 64;
/// Default largest gRPC request, in bytes (64 MiB).
pub const DEFAULT_GRPC_MAX_RECV_MSG_SIZE: usize = 64 * 1024 * 1024;
/// Default largest HTTP request body, in bytes (64 MiB).
pub const DEFAULT_HTTP_MAX_REQUEST_BODY_SIZE: usize = 64 * 1024 * 1024;
/// Default inactivity timeout after which a silent run is abandoned.
pub const DEFAULT_INACTIVITY_TIMEOUT: Duration = Duration::from_secs(600);
/// Default storage directory (relative to the working directory).
pub const DEFAULT_STORAGE_DIRECTORY: &str = "./data";
/// Default size (decoded bytes) from which a `blob` part moves to the media store (64 KiB).
pub const DEFAULT_MEDIA_THRESHOLD: u64 = 64 * 1024;

/// Default for [`MediaConfig::max_inline_bytes`]: 64 MiB.
pub const DEFAULT_MEDIA_MAX_INLINE_BYTES: u64 = 64 << 20;

/// A loaded, validated `collector.yaml`.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from.
    pub source: PathBuf,
    /// The OTLP receiver used by the pipelines (`receivers.otlp` or `receivers.otlp/<name>`).
    pub receiver: OtlpReceiverConfig,
    /// The interpreter (`processors.stepline`; defaults if absent).
    pub interpreter: InterpreterConfig,
    /// Storage (`extensions.stepline_storage`; defaults if absent).
    pub storage: StorageConfig,
    /// The query API (`extensions.stepline_api`; defaults if absent).
    pub api: ApiConfig,
    /// The `health_check` extension, when configured. `None` otherwise.
    pub health_check: Option<HealthCheckConfig>,
    /// The exporters referenced by at least one pipeline, in configuration order.
    pub exporters: Vec<ExporterConfig>,
    /// `service.telemetry.logs.level`, lowercased: `trace`, `debug`, `info`, `warn` or `error`.
    pub log_level: Option<String>,
    /// `service.telemetry.traces`: stepline's own spans over OTLP; `None` (default) = off.
    pub self_traces: Option<SelfTracesConfig>,
    /// `service.shutdown_timeout`: how long the exporters may keep sending what is left in
    /// the outbox after SIGTERM (default 5 s).
    pub shutdown_timeout: Duration,
}

/// Default `service.shutdown_timeout`.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Where stepline sends its own spans (`service.telemetry.traces`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfTracesConfig {
    /// OTLP/gRPC endpoint, `http://host:port`.
    pub endpoint: String,
}

/// `receivers.otlp`: at least one of the two protocols is `Some`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpReceiverConfig {
    /// OTLP over gRPC, when `protocols.grpc` is present.
    pub grpc: Option<GrpcReceiverConfig>,
    /// OTLP over HTTP, when `protocols.http` is present.
    pub http: Option<HttpReceiverConfig>,
}

impl Default for OtlpReceiverConfig {
    /// Both protocols on their default endpoints.
    fn default() -> Self {
        Self {
            grpc: Some(GrpcReceiverConfig::default()),
            http: Some(HttpReceiverConfig::default()),
        }
    }
}

/// `receivers.otlp.protocols.grpc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcReceiverConfig {
    /// `host:port` to listen on (validated syntax; the caller binds it).
    pub endpoint: String,
    /// Largest accepted request message, in bytes (`max_recv_msg_size_mib` × 1 MiB).
    pub max_recv_msg_size: usize,
    /// `tls`: serve TLS only, when set.
    pub tls: Option<ServerTlsConfig>,
    /// `auth`: require a bearer token, when set.
    pub auth: Option<ReceiverAuthConfig>,
}

impl Default for GrpcReceiverConfig {
    fn default() -> Self {
        Self {
            endpoint: DEFAULT_GRPC_ENDPOINT.to_owned(),
            max_recv_msg_size: DEFAULT_GRPC_MAX_RECV_MSG_SIZE,
            tls: None,
            auth: None,
        }
    }
}

/// `receivers.otlp.protocols.http`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpReceiverConfig {
    /// `host:port` to listen on (validated syntax; the caller binds it).
    pub endpoint: String,
    /// Largest accepted request body, in bytes.
    pub max_request_body_size: usize,
    /// `tls`: serve TLS only, when set.
    pub tls: Option<ServerTlsConfig>,
    /// `auth`: require a bearer token, when set.
    pub auth: Option<ReceiverAuthConfig>,
}

impl Default for HttpReceiverConfig {
    fn default() -> Self {
        Self {
            endpoint: DEFAULT_HTTP_ENDPOINT.to_owned(),
            max_request_body_size: DEFAULT_HTTP_MAX_REQUEST_BODY_SIZE,
            tls: None,
            auth: None,
        }
    }
}

/// `processors.stepline`: the span interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterpreterConfig {
    /// How long a run may go without new spans before it is declared abandoned.
    /// `None` disables the timeout (`inactivity_timeout: 0s`).
    pub inactivity_timeout: Option<Duration>,
    /// How long a run may wait on calls (status `waiting`, never abandoned by the inactivity
    /// timeout) without new spans before it is declared abandoned. `None` (the default, or
    /// `waiting_timeout: 0s`): it waits for ever.
    pub waiting_timeout: Option<Duration>,
    /// The per-request and per-span caps (`limits`).
    pub limits: crate::limits::Limits,
    /// The byte budgets of the in-memory caches (`memory`).
    pub memory: super::limits::CacheBudgets,
    /// The attribute keys of a run's trigger and attributes (`trigger`, `run_attributes`);
    /// shared, as the interpreter tasks read it.
    pub run_info: std::sync::Arc<crate::domain::RunInfoKeys>,
    /// Where a new run's source is looked for (`lineage_scope`).
    pub lineage_scope: crate::domain::LineageScope,
    /// The `ai.telemetry.metadata.*` keys read, in order, for the conversation id of the Vercel
    /// AI SDK's spans (`vercel_ai.conversation_keys`).
    pub vercel_ai_conversation_keys: Vec<String>,
    /// How long a run is kept once over before it is deleted with everything derived from it
    /// (`retention`); `None` (the default) keeps runs.
    pub retention: Option<Duration>,
}

impl Default for InterpreterConfig {
    fn default() -> Self {
        Self {
            inactivity_timeout: Some(DEFAULT_INACTIVITY_TIMEOUT),
            waiting_timeout: None,
            limits: Default::default(),
            memory: Default::default(),
            run_info: Default::default(),
            lineage_scope: Default::default(),
            vercel_ai_conversation_keys: crate::interpreter::vercel_ai::DEFAULT_CONVERSATION_KEYS
                .iter()
                .map(|k| k.to_string())
                .collect(),
            retention: None,
        }
    }
}

/// `extensions.stepline_storage`: the RocksDB store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageConfig {
    /// The RocksDB directory. A relative path stays relative: the caller resolves it against
    /// the process working directory (like the Collector).
    pub directory: PathBuf,
    /// Whether every acknowledged write fsyncs the WAL first.
    pub sync: bool,
    /// Where large binary message parts are kept (`media`).
    pub media: MediaConfig,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            directory: PathBuf::from(DEFAULT_STORAGE_DIRECTORY),
            sync: true,
            media: MediaConfig::default(),
        }
    }
}

/// `extensions.stepline_storage.media`: the object store for large `blob` parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaConfig {
    /// Blobs of at least this many decoded bytes are moved to the store. `None`: every blob
    /// stays inline (`enabled: false`); references already stored are still restored.
    pub threshold: Option<u64>,
    /// The object store.
    pub location: MediaLocation,
    /// Store options (`endpoint`, `region`, `allow_http`, credentials, ...), keys checked against
    /// the store's own option names. Settings not given here come from the environment
    /// (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
    pub options: std::collections::BTreeMap<String, String>,
    /// Most blob bytes one `media=inline` answer restores; beyond it the answer is refused
    /// (413) and the caller is told to use `media=reference`.
    pub max_inline_bytes: u64,
}

impl Default for MediaConfig {
    fn default() -> Self {
        Self {
            threshold: Some(DEFAULT_MEDIA_THRESHOLD),
            location: MediaLocation::Directory(
                PathBuf::from(DEFAULT_STORAGE_DIRECTORY).join("media"),
            ),
            options: Default::default(),
            max_inline_bytes: DEFAULT_MEDIA_MAX_INLINE_BYTES,
        }
    }
}

/// Where the media object store is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaLocation {
    /// A local directory (`file://<dir>`; by default `<storage directory>/media`).
    Directory(PathBuf),
    /// Amazon S3 or an S3-compatible server (`s3://<bucket>[/<prefix>]`).
    S3 {
        /// Bucket name.
        bucket: String,
        /// Key prefix, without leading or trailing `/` (may be empty).
        prefix: String,
    },
    /// Google Cloud Storage (`gs://<bucket>[/<prefix>]`).
    Gcs {
        /// Bucket name.
        bucket: String,
        /// Key prefix (may be empty).
        prefix: String,
    },
    /// Azure Blob Storage (`az://<container>[/<prefix>]`; the account comes from the options
    /// or `AZURE_STORAGE_ACCOUNT_NAME`).
    Azure {
        /// Container name.
        container: String,
        /// Key prefix (may be empty).
        prefix: String,
    },
    /// In memory (`memory://`): lost at exit; for tests.
    Memory,
}

impl MediaLocation {
    /// The URL scheme, for messages (`file://`, `s3://`, ...).
    pub fn scheme(&self) -> &'static str {
        match self {
            Self::Directory(_) => "file://",
            Self::S3 { .. } => "s3://",
            Self::Gcs { .. } => "gs://",
            Self::Azure { .. } => "az://",
            Self::Memory => "memory://",
        }
    }

    /// The key prefix inside the bucket or container (empty for directories and memory).
    pub fn prefix(&self) -> &str {
        match self {
            Self::S3 { prefix, .. } | Self::Gcs { prefix, .. } | Self::Azure { prefix, .. } => {
                prefix
            }
            Self::Directory(_) | Self::Memory => "",
        }
    }
}

impl std::fmt::Display for MediaLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (scheme, name, prefix) = match self {
            Self::Directory(dir) => return write!(f, "file://{}", dir.display()),
            Self::Memory => return f.write_str("memory://"),
            Self::S3 { bucket, prefix } => ("s3", bucket, prefix),
            Self::Gcs { bucket, prefix } => ("gs", bucket, prefix),
            Self::Azure { container, prefix } => ("az", container, prefix),
        };
        if prefix.is_empty() {
            write!(f, "{scheme}://{name}")
        } else {
            write!(f, "{scheme}://{name}/{prefix}")
        }
    }
}

/// `extensions.stepline_api`: the HTTP query API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiConfig {
    /// `host:port` to listen on (validated syntax; the caller binds it).
    pub endpoint: String,
    /// When set, requests must carry `Authorization: Bearer <token>`. Never empty.
    pub bearer_token: Option<String>,
    /// When set, `/metrics` requires `Authorization: Bearer <token>`. Never empty.
    pub metrics_bearer_token: Option<String>,
    /// `Host` values (lowercase `host` or `host:port`, IPv6 in brackets) answered besides
    /// `localhost`, `127.0.0.1`, `[::1]` and the endpoint's own host. The `Host` check applies
    /// when the API listens on a loopback address, or whenever this list is not empty.
    pub allowed_hosts: Vec<String>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            endpoint: DEFAULT_API_ENDPOINT.to_owned(),
            bearer_token: None,
            metrics_bearer_token: None,
            allowed_hosts: Vec::new(),
        }
    }
}

/// `extensions.health_check`: accepted for Collector compatibility.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthCheckConfig {
    /// `host:port`, when given (validated syntax). `None` leaves the choice to the caller.
    pub endpoint: Option<String>,
}

/// Default per-attempt export timeout.
pub const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default cap on one exporter's unsent bytes in the outbox (256 MiB).
pub const DEFAULT_QUEUE_SIZE_BYTES: u64 = 256 * 1024 * 1024;
/// Default number of requests an exporter keeps in flight (`sending_queue.num_consumers`).
pub const DEFAULT_NUM_CONSUMERS: usize = 10;
/// Default `sending_queue.batch.flush_timeout`.
pub const DEFAULT_BATCH_FLUSH_TIMEOUT: Duration = Duration::from_millis(200);
/// Default `sending_queue.batch.min_size` (in the sizer's unit).
pub const DEFAULT_BATCH_MIN_SIZE: u64 = 8192;

/// An OTLP signal, as named by pipeline types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SignalKind {
    /// `traces`.
    Traces,
    /// `logs`.
    Logs,
    /// `metrics`.
    Metrics,
}

impl SignalKind {
    /// All three, in a fixed order.
    pub const ALL: [SignalKind; 3] = [Self::Traces, Self::Logs, Self::Metrics];

    /// The pipeline type name (`traces`, `logs`, `metrics`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Traces => "traces",
            Self::Logs => "logs",
            Self::Metrics => "metrics",
        }
    }

    /// The signal of a pipeline type name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|signal| signal.name() == name)
    }
}

/// How an exporter talks to the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExporterProtocol {
    /// `otlp`: OTLP/gRPC.
    Grpc,
    /// `otlphttp` with `encoding: proto` (default).
    HttpProtobuf,
    /// `otlphttp` with `encoding: json`.
    HttpJson,
}

/// Request body compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// No compression.
    None,
    /// gzip (the default, as in the Collector).
    Gzip,
    /// zstd.
    Zstd,
}

/// `retry_on_failure`: exponential backoff with jitter for retryable failures.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryConfig {
    /// When false, a retryable failure drops the entry like a permanent one.
    pub enabled: bool,
    /// First wait.
    pub initial_interval: Duration,
    /// Longest wait.
    pub max_interval: Duration,
    /// Growth factor of the wait (at least 1).
    pub multiplier: f64,
    /// Jitter: each wait is drawn in `[w·(1−f), w·(1+f)]`, `0 ≤ f < 1`.
    pub randomization_factor: f64,
    /// Give up after this long; `None` retries forever (`max_elapsed_time: 0`).
    pub max_elapsed_time: Option<Duration>,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            initial_interval: Duration::from_secs(5),
            max_interval: Duration::from_secs(30),
            multiplier: 1.5,
            randomization_factor: 0.5,
            max_elapsed_time: Some(Duration::from_secs(300)),
        }
    }
}

/// `exporters.<id>.tls` when the endpoint uses TLS (`https://`, or a scheme-less gRPC
/// endpoint without `tls.insecure: true`). Paths are as written (relative to the working
/// directory); the files are read when the exporter is built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM file of the CA certificates the server's certificate must chain to; `None` uses
    /// the Mozilla root set (webpki-roots).
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain (mutual TLS); set together with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Accept any server certificate (testing only).
    pub insecure_skip_verify: bool,
    /// The name the server certificate must be valid for (and the SNI sent), instead of the
    /// endpoint's host.
    pub server_name_override: Option<String>,
}

/// What an exporter's queue does at its byte cap (`sending_queue.when_full`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WhenFull {
    /// Refuse new requests with a retryable error (503 / UNAVAILABLE): nothing is lost.
    #[default]
    Refuse,
    /// Drop this exporter's oldest unsent entries (counted and logged) to make room.
    DropOldest,
}

/// What `sending_queue.batch` sizes batches in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BatchSizer {
    /// Spans, log records or metric data points.
    #[default]
    Items,
    /// Bytes of the encoded requests.
    Bytes,
}

/// `sending_queue.batch`: outbox entries of one signal merged into fewer, larger requests,
/// with the Collector's exporter batching rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchConfig {
    /// A batch below `min_size` goes out this long after its first entry was taken.
    pub flush_timeout: Duration,
    /// A batch goes out as soon as it holds this much (in `sizer` units).
    pub min_size: u64,
    /// A batch never holds more than this (0: no limit); entries are never split, so one
    /// larger entry goes out alone.
    pub max_size: u64,
    /// What `min_size` and `max_size` count.
    pub sizer: BatchSizer,
}

/// `exporters.otlp[/name]` or `exporters.otlphttp[/name]`, as used by the pipelines.
#[derive(Debug, Clone, PartialEq)]
pub struct ExporterConfig {
    /// The component id, e.g. `otlp/backend`.
    pub id: String,
    /// gRPC or HTTP (protobuf or JSON).
    pub protocol: ExporterProtocol,
    /// `http(s)://host:port` (gRPC) or the base URL the signal path is appended to (HTTP),
    /// without a trailing `/`.
    pub endpoint: String,
    /// TLS settings; `Some` exactly when `endpoint` starts with `https://`.
    pub tls: Option<TlsConfig>,
    /// Extra headers (lowercase names), sent with every request.
    pub headers: Vec<(String, String)>,
    /// Request compression.
    pub compression: Compression,
    /// Per-attempt timeout.
    pub timeout: Duration,
    /// Retry policy.
    pub retry: RetryConfig,
    /// Cap on this exporter's unsent bytes; at the cap receivers answer with a retryable error.
    pub queue_size_bytes: u64,
    /// What happens at the cap.
    pub when_full: WhenFull,
    /// Requests in flight at once (at least 1).
    pub num_consumers: usize,
    /// Merging entries into larger requests; `None` sends each entry as its own request.
    pub batch: Option<BatchConfig>,
    /// Add `stepline.run_id` to agent spans before sending.
    pub enrich_run_id: bool,
    /// The signals whose pipelines list this exporter. Never empty.
    pub signals: Vec<SignalKind>,
}
