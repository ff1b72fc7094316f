//! The validated configuration: what the rest of stepline builds from. Every value here has
//! been checked; nothing is left for the caller to validate except what needs I/O (binding an
//! endpoint, opening the storage directory).

use std::path::PathBuf;
use std::time::Duration;

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
    /// `service.telemetry.logs.level`, lowercased: `trace`, `debug`, `info`, `warn` or `error`.
    pub log_level: Option<String>,
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
}

impl Default for GrpcReceiverConfig {
    fn default() -> Self {
        Self {
            endpoint: DEFAULT_GRPC_ENDPOINT.to_owned(),
            max_recv_msg_size: DEFAULT_GRPC_MAX_RECV_MSG_SIZE,
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
}

impl Default for HttpReceiverConfig {
    fn default() -> Self {
        Self {
            endpoint: DEFAULT_HTTP_ENDPOINT.to_owned(),
            max_request_body_size: DEFAULT_HTTP_MAX_REQUEST_BODY_SIZE,
        }
    }
}

/// `processors.stepline`: the span interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterpreterConfig {
    /// How long a run may go without new spans before it is declared abandoned.
    /// `None` disables the timeout (`inactivity_timeout: 0s`).
    pub inactivity_timeout: Option<Duration>,
}

impl Default for InterpreterConfig {
    fn default() -> Self {
        Self {
            inactivity_timeout: Some(DEFAULT_INACTIVITY_TIMEOUT),
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
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            directory: PathBuf::from(DEFAULT_STORAGE_DIRECTORY),
            sync: true,
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
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            endpoint: DEFAULT_API_ENDPOINT.to_owned(),
            bearer_token: None,
        }
    }
}

/// `extensions.health_check`: accepted for Collector compatibility.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthCheckConfig {
    /// `host:port`, when given (validated syntax). `None` leaves the choice to the caller.
    pub endpoint: Option<String>,
}
