//! Configuration: `collector.yaml` in the OpenTelemetry Collector layout.
//!
//! Raw YAML → `${env:…}` substitution on the parsed tree ([`expand`]) → serde types with
//! `deny_unknown_fields` ([`raw`]) → validated [`Config`] ([`validate`], pure) → built by the
//! caller (binding endpoints, opening storage). Every problem is reported at once, each with
//! the file and the key path: `collector.yaml: service.pipelines.traces: references receiver
//! "x" which is not configured`.
//!
//! Component types known today:
//! - receiver `otlp` (`protocols.grpc`, `protocols.http`; at least one);
//! - processor `stepline` (the interpreter: `inactivity_timeout`; `limits`, the per-request
//!   and per-span caps; `memory`, the caches' byte budgets) and `batch` (accepted with
//!   `timeout`, `send_batch_size`, `send_batch_max_size` so Collector configs load, but it has
//!   no effect: stepline commits every request durably before acknowledging it, and batching
//!   for the backend belongs to the exporters);
//! - extensions `stepline_storage` (with `media`, the object store for large binary parts),
//!   `stepline_api` and `health_check`, and `bearertokenauth` (receiver authentication, see
//!   [`ReceiverAuthConfig`]; receivers also take `tls`, see [`ServerTlsConfig`]);
//! - exporters `otlp` (gRPC) and `otlphttp` (protobuf or JSON), see [`ExporterConfig`].
//!
//! Unknown keys and unknown component types stop the start.

mod auth;
mod authenticators;
mod duration;
pub(crate) mod endpoint;
mod error;
pub(crate) mod expand;
mod exporter;
mod limits;
mod load;
mod media;
mod model;
mod raw;
mod run_info;
mod telemetry;
mod text;
mod validate;

pub use auth::{ReceiverAuthConfig, ServerTlsConfig, TlsVersion, DEFAULT_AUTH_SCHEME};
pub use error::{ConfigError, ConfigProblem};
pub use limits::{CacheBudgets, DEFAULT_CACHE_BUDGET};
pub use model::{
    ApiConfig, BatchConfig, BatchSizer, Compression, Config, ExporterConfig, ExporterProtocol,
    GrpcReceiverConfig, HealthCheckConfig, HttpReceiverConfig, InterpreterConfig, MediaConfig,
    MediaLocation, OtlpReceiverConfig, RetryConfig, SelfTracesConfig, SignalKind, StorageConfig,
    TlsConfig, WhenFull, DEFAULT_API_ENDPOINT, DEFAULT_EXPORT_TIMEOUT, DEFAULT_GRPC_ENDPOINT,
    DEFAULT_GRPC_MAX_RECV_MSG_SIZE, DEFAULT_GRPC_MAX_RECV_MSG_SIZE_MIB, DEFAULT_HTTP_ENDPOINT,
    DEFAULT_HTTP_MAX_REQUEST_BODY_SIZE, DEFAULT_INACTIVITY_TIMEOUT, DEFAULT_MEDIA_MAX_INLINE_BYTES,
    DEFAULT_MEDIA_THRESHOLD, DEFAULT_NUM_CONSUMERS, DEFAULT_QUEUE_SIZE_BYTES,
    DEFAULT_STORAGE_DIRECTORY,
};
