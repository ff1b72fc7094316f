//! Raw YAML tree (after env substitution) → validated [`Config`]. Pure: no I/O.
//!
//! Walks the whole configuration and collects every problem, each with its key path, instead
//! of stopping at the first one. Within one component's settings, serde reports the first
//! problem of that component; separate components, pipelines and sections are all reported.
//!
//! Which instance is used when several components of one type are configured:
//! - the OTLP receiver is the `otlp` (or `otlp/<name>`) receiver the pipelines reference; the
//!   pipelines must reference exactly one;
//! - the interpreter is the `stepline` processor the pipelines reference or, when none does,
//!   the only one configured (defaults when none is configured);
//! - `stepline_storage`, `stepline_api` and `health_check` are the ones listed in
//!   `service.extensions` or, when none is listed, the only one configured (defaults, or no
//!   health check, when none is configured).

use std::path::Path;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_yaml_ng::{Mapping, Value};

use super::auth::{
    validate_allowed_hosts, validate_bearer_token_auth, validate_receiver_auth,
    validate_server_tls, validate_token, BearerTokenAuth, BEARERTOKENAUTH,
};
use super::authenticators::resolve_authenticators;
use super::duration::parse_duration;
use super::endpoint::parse_endpoint;
use super::error::ConfigProblem;
use super::expand::key_label;
use super::exporter::{validate_exporter, OTLPHTTP_EXPORTER, OTLP_EXPORTER};
use super::limits::{validate_limits, validate_memory};
use super::media::validate_media;
use super::model::SelfTracesConfig;
use super::model::{
    ApiConfig, Config, ExporterConfig, GrpcReceiverConfig, HealthCheckConfig, HttpReceiverConfig,
    InterpreterConfig, OtlpReceiverConfig, SignalKind, StorageConfig, DEFAULT_API_ENDPOINT,
    DEFAULT_GRPC_ENDPOINT, DEFAULT_GRPC_MAX_RECV_MSG_SIZE_MIB, DEFAULT_HTTP_ENDPOINT,
    DEFAULT_HTTP_MAX_REQUEST_BODY_SIZE, DEFAULT_INACTIVITY_TIMEOUT, DEFAULT_STORAGE_DIRECTORY,
};
use super::raw::{
    RawApiExtension, RawBatchProcessor, RawGrpcProtocol, RawHealthCheckExtension, RawHttpProtocol,
    RawOtlpExporter, RawOtlpReceiver, RawPipeline, RawService, RawSteplineProcessor,
    RawStorageExtension, Section, Text,
};
use super::telemetry::{validate_shutdown_timeout, validate_traces};

const TOP_LEVEL_KEYS: [&str; 5] = [
    "receivers",
    "processors",
    "exporters",
    "extensions",
    "service",
];
const PIPELINE_TYPES: [&str; 3] = ["traces", "logs", "metrics"];
const LOG_LEVELS: [&str; 5] = ["trace", "debug", "info", "warn", "error"];
const MIB: u64 = 1024 * 1024;

const OTLP: &str = "otlp";
const STEPLINE: &str = "stepline";
const BATCH: &str = "batch";
const STEPLINE_STORAGE: &str = "stepline_storage";
const STEPLINE_API: &str = "stepline_api";
const HEALTH_CHECK: &str = "health_check";

/// Validates the substituted YAML tree of `source`.
pub(crate) fn validate(root: &Value, source: &Path) -> Result<Config, Vec<ConfigProblem>> {
    let mut validator = Validator::default();
    let config = validator.config(root, source);
    match config {
        Some(config) if validator.problems.is_empty() => Ok(config),
        _ if !validator.problems.is_empty() => Err(validator.problems),
        _ => Err(vec![ConfigProblem::new(
            "",
            "the configuration could not be validated",
        )]),
    }
}

/// The four component sections.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Receiver,
    Processor,
    Exporter,
    Extension,
}

impl Kind {
    fn section(self) -> &'static str {
        match self {
            Self::Receiver => "receivers",
            Self::Processor => "processors",
            Self::Exporter => "exporters",
            Self::Extension => "extensions",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Self::Receiver => "receiver",
            Self::Processor => "processor",
            Self::Exporter => "exporter",
            Self::Extension => "extension",
        }
    }

    fn known_types(self) -> &'static [&'static str] {
        match self {
            Self::Receiver => &[OTLP],
            Self::Processor => &[STEPLINE, BATCH],
            Self::Exporter => &[OTLP_EXPORTER, OTLPHTTP_EXPORTER],
            Self::Extension => &[
                STEPLINE_STORAGE,
                STEPLINE_API,
                HEALTH_CHECK,
                BEARERTOKENAUTH,
            ],
        }
    }
}

/// A configured component: its id, its type and, when they validated, its settings.
#[derive(Debug)]
struct Component<S> {
    id: String,
    type_name: String,
    settings: Option<S>,
}

#[derive(Debug)]
enum ReceiverSettings {
    Otlp(OtlpReceiverConfig),
}

#[derive(Debug)]
enum ProcessorSettings {
    Stepline(Box<InterpreterConfig>),
    /// Accepted and ignored.
    Batch,
}

#[derive(Debug)]
enum ExporterSettings {
    Otlp(ExporterConfig),
}

#[derive(Debug)]
enum ExtensionSettings {
    Storage(StorageConfig),
    Api(ApiConfig),
    HealthCheck(HealthCheckConfig),
    BearerTokenAuth(BearerTokenAuth),
}

/// What `service` references, once decoded.
#[derive(Debug, Default)]
struct ServiceRefs {
    /// `service.extensions`, deduplicated.
    extensions: Vec<String>,
    /// Every receiver referenced by a pipeline, deduplicated, in order.
    receivers: Vec<String>,
    /// Every processor referenced by a pipeline, deduplicated, in order.
    processors: Vec<String>,
    /// Whether some pipeline's receivers are unknown (not configured, or the pipeline did not
    /// decode): "no pipeline uses an otlp receiver" would then be a consequence, not a cause.
    unresolved_receivers: bool,
    /// Which signals' pipelines list which exporter.
    exporter_signals: Vec<(String, SignalKind)>,
    log_level: Option<String>,
    self_traces: Option<SelfTracesConfig>,
    shutdown_timeout: Duration,
}

/// Which configured instance of a type is used.
enum Pick<'a, S> {
    /// None of that type: use the defaults.
    Nothing,
    /// This one.
    One(&'a Component<S>),
    /// Several candidates (already reported).
    Ambiguous,
}

#[derive(Default)]
struct Validator {
    problems: Vec<ConfigProblem>,
}

impl Validator {
    fn problem(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(ConfigProblem::new(path, message));
    }

    fn config(&mut self, root: &Value, source: &Path) -> Option<Config> {
        let empty = Mapping::new();
        let root = match root {
            Value::Null => &empty,
            Value::Mapping(mapping) => mapping,
            _ => {
                self.problem(
                    "",
                    "the file must be a YAML mapping with the keys receivers, processors, \
                     exporters, extensions and service",
                );
                return None;
            }
        };
        let mut sections: [Option<&Value>; 5] = [None; 5];
        for (key, value) in root {
            match TOP_LEVEL_KEYS
                .iter()
                .position(|known| key.as_str() == Some(known))
            {
                Some(index) => sections[index] = Some(value),
                None => self.problem(
                    key_label(key),
                    format!(
                        "unknown key `{}` (expected one of {})",
                        key_label(key),
                        TOP_LEVEL_KEYS.join(", ")
                    ),
                ),
            }
        }
        let [receivers, processors, exporters, extensions, service] = sections;

        let receivers = self.components(receivers, Kind::Receiver, Self::receiver);
        let processors = self.components(processors, Kind::Processor, Self::processor);
        let exporters = self.components(exporters, Kind::Exporter, Self::exporter);
        let extensions = self.components(extensions, Kind::Extension, Self::extension);

        let Some(service) = service else {
            self.problem(
                "service",
                "missing: define service.pipelines, e.g. a traces pipeline with receivers [otlp]",
            );
            return None;
        };
        let refs = self.service(service, &receivers, &processors, &exporters, &extensions)?;

        let receiver = match self.pick(
            "service.pipelines",
            Kind::Receiver,
            OTLP,
            &receivers,
            &refs.receivers,
            false,
        ) {
            Pick::One(Component {
                id,
                settings: Some(ReceiverSettings::Otlp(receiver)),
                ..
            }) => {
                let mut receiver = receiver.clone();
                let authenticators: Vec<(&str, Option<&BearerTokenAuth>)> = extensions
                    .iter()
                    .filter(|component| component.type_name == BEARERTOKENAUTH)
                    .map(|component| match &component.settings {
                        Some(ExtensionSettings::BearerTokenAuth(auth)) => {
                            (component.id.as_str(), Some(auth))
                        }
                        _ => (component.id.as_str(), None),
                    })
                    .collect();
                resolve_authenticators(
                    id,
                    &mut receiver,
                    &authenticators,
                    &refs.extensions,
                    &mut self.problems,
                )
                .then_some(receiver)
            }
            Pick::Nothing => {
                if !refs.unresolved_receivers {
                    self.problem(
                        "service.pipelines",
                        "no pipeline uses an otlp receiver; stepline needs one to receive \
                         telemetry (e.g. service.pipelines.traces.receivers: [otlp])",
                    );
                }
                None
            }
            Pick::One(_) | Pick::Ambiguous => None,
        };

        let interpreter = match self.pick(
            "service.pipelines",
            Kind::Processor,
            STEPLINE,
            &processors,
            &refs.processors,
            true,
        ) {
            Pick::Nothing => Some(InterpreterConfig::default()),
            Pick::One(Component {
                settings: Some(ProcessorSettings::Stepline(interpreter)),
                ..
            }) => Some(interpreter.as_ref().clone()),
            Pick::One(_) | Pick::Ambiguous => None,
        };

        let storage = match self.pick_extension(STEPLINE_STORAGE, &extensions, &refs) {
            Pick::Nothing => Some(StorageConfig::default()),
            Pick::One(Component {
                settings: Some(ExtensionSettings::Storage(storage)),
                ..
            }) => Some(storage.clone()),
            Pick::One(_) | Pick::Ambiguous => None,
        };
        let api = match self.pick_extension(STEPLINE_API, &extensions, &refs) {
            Pick::Nothing => Some(ApiConfig::default()),
            Pick::One(Component {
                settings: Some(ExtensionSettings::Api(api)),
                ..
            }) => Some(api.clone()),
            Pick::One(_) | Pick::Ambiguous => None,
        };
        let health_check = match self.pick_extension(HEALTH_CHECK, &extensions, &refs) {
            Pick::Nothing => Some(None),
            Pick::One(Component {
                settings: Some(ExtensionSettings::HealthCheck(health)),
                ..
            }) => Some(Some(health.clone())),
            Pick::One(_) | Pick::Ambiguous => None,
        };

        let mut used_exporters = Vec::new();
        let mut exporters_valid = true;
        for component in &exporters {
            let mut signals: Vec<SignalKind> = refs
                .exporter_signals
                .iter()
                .filter(|(id, _)| id == &component.id)
                .map(|(_, signal)| *signal)
                .collect();
            if signals.is_empty() {
                continue;
            }
            signals.sort();
            signals.dedup();
            match &component.settings {
                Some(ExporterSettings::Otlp(exporter)) => used_exporters.push(ExporterConfig {
                    signals,
                    ..exporter.clone()
                }),
                None => exporters_valid = false,
            }
        }

        Some(Config {
            source: source.to_path_buf(),
            exporters: exporters_valid.then_some(used_exporters)?,
            receiver: receiver?,
            interpreter: interpreter?,
            storage: storage?,
            api: api?,
            health_check: health_check?,
            log_level: refs.log_level,
            self_traces: refs.self_traces,
            shutdown_timeout: refs.shutdown_timeout,
        })
    }

    /// Decodes `body` (null = all defaults) into `T`, reporting a type or unknown-key error
    /// with its full path.
    fn decode<T: DeserializeOwned + Default>(&mut self, body: &Value, path: &str) -> Option<T> {
        match serde_path_to_error::deserialize::<_, Option<T>>(body) {
            Ok(decoded) => Some(decoded.unwrap_or_default()),
            Err(error) => {
                let inner = error.path().to_string();
                let full = match inner.as_str() {
                    "." => path.to_owned(),
                    _ if inner.starts_with('[') => format!("{path}{inner}"),
                    _ => format!("{path}.{inner}"),
                };
                self.problem(full, error.inner().to_string());
                None
            }
        }
    }

    /// Walks one component section (`receivers`, …): checks ids and types, and builds the
    /// settings of known types with `build(self, type, body, path)`.
    fn components<S>(
        &mut self,
        section: Option<&Value>,
        kind: Kind,
        build: impl Fn(&mut Self, &str, &Value, &str) -> Option<S>,
    ) -> Vec<Component<S>> {
        let mut components = Vec::new();
        let mapping = match section {
            None | Some(Value::Null) => return components,
            Some(Value::Mapping(mapping)) => mapping,
            Some(_) => {
                self.problem(
                    kind.section(),
                    format!(
                        "must be a mapping of {} id (type or type/name) to settings",
                        kind.noun()
                    ),
                );
                return components;
            }
        };
        for (key, body) in mapping {
            let label = key_label(key);
            let path = format!("{}.{label}", kind.section());
            let Some(id) = key.as_str() else {
                self.problem(path, format!("{} ids must be strings", kind.noun()));
                continue;
            };
            let type_name = match parse_component_id(id) {
                Ok(type_name) => type_name,
                Err(message) => {
                    self.problem(path, message);
                    continue;
                }
            };
            let known = kind.known_types();
            let settings = if known.contains(&type_name) {
                build(self, type_name, body, &path)
            } else {
                let hint = if known.is_empty() {
                    format!(
                        "no {} types are available yet; leave the {} lists empty",
                        kind.noun(),
                        kind.section()
                    )
                } else {
                    format!("known types: {}", known.join(", "))
                };
                self.problem(
                    path,
                    format!("unknown {} type \"{type_name}\" ({hint})", kind.noun()),
                );
                None
            };
            components.push(Component {
                id: id.to_owned(),
                type_name: type_name.to_owned(),
                settings,
            });
        }
        components
    }

    /// Builds an `otlp` receiver (the only receiver type).
    fn receiver(&mut self, _type_name: &str, body: &Value, path: &str) -> Option<ReceiverSettings> {
        let raw: RawOtlpReceiver = self.decode(body, path)?;
        let protocols = raw.protocols.unwrap_or_default();
        let protocols_path = format!("{path}.protocols");
        let (grpc, http) = match (protocols.grpc, protocols.http) {
            (Section::Absent, Section::Absent) => {
                self.problem(
                    protocols_path,
                    "the otlp receiver needs at least one protocol: add protocols.grpc and/or \
                     protocols.http (an empty `grpc:` uses the defaults)",
                );
                return None;
            }
            (grpc, http) => (grpc, http),
        };
        let grpc = match grpc {
            Section::Absent => Some(None),
            Section::Present(raw) => self.grpc(raw, &format!("{protocols_path}.grpc")).map(Some),
        };
        let http = match http {
            Section::Absent => Some(None),
            Section::Present(raw) => self.http(raw, &format!("{protocols_path}.http")).map(Some),
        };
        Some(ReceiverSettings::Otlp(OtlpReceiverConfig {
            grpc: grpc?,
            http: http?,
        }))
    }

    fn grpc(&mut self, raw: RawGrpcProtocol, path: &str) -> Option<GrpcReceiverConfig> {
        let endpoint = self.endpoint(raw.endpoint, DEFAULT_GRPC_ENDPOINT, path);
        let size_path = format!("{path}.max_recv_msg_size_mib");
        let mib = raw
            .max_recv_msg_size_mib
            .unwrap_or(DEFAULT_GRPC_MAX_RECV_MSG_SIZE_MIB);
        let size = if mib == 0 {
            self.problem(size_path, "must be at least 1 (MiB)");
            None
        } else {
            match mib
                .checked_mul(MIB)
                .and_then(|bytes| usize::try_from(bytes).ok())
            {
                Some(bytes) => Some(bytes),
                None => {
                    self.problem(size_path, format!("{mib} MiB is too large"));
                    None
                }
            }
        };
        let (tls, auth) = self.transport(raw.tls, raw.auth, path);
        Some(GrpcReceiverConfig {
            endpoint: endpoint?,
            max_recv_msg_size: size?,
            tls: tls?,
            auth: auth?,
        })
    }

    fn http(&mut self, raw: RawHttpProtocol, path: &str) -> Option<HttpReceiverConfig> {
        let endpoint = self.endpoint(raw.endpoint, DEFAULT_HTTP_ENDPOINT, path);
        let size_path = format!("{path}.max_request_body_size");
        let size = match raw.max_request_body_size {
            None => Some(DEFAULT_HTTP_MAX_REQUEST_BODY_SIZE),
            Some(0) => {
                self.problem(size_path, "must be greater than 0 (bytes)");
                None
            }
            Some(bytes) => match usize::try_from(bytes) {
                Ok(bytes) => Some(bytes),
                Err(_) => {
                    self.problem(size_path, format!("{bytes} bytes is too large"));
                    None
                }
            },
        };
        let (tls, auth) = self.transport(raw.tls, raw.auth, path);
        Some(HttpReceiverConfig {
            endpoint: endpoint?,
            max_request_body_size: size?,
            tls: tls?,
            auth: auth?,
        })
    }

    /// A receiver protocol's `tls` and `auth` (each `Some(None)` when absent, `None` when
    /// invalid).
    #[allow(clippy::type_complexity)]
    fn transport(
        &mut self,
        tls: Option<super::auth::RawServerTls>,
        auth: Option<super::auth::RawReceiverAuth>,
        path: &str,
    ) -> (
        Option<Option<super::auth::ServerTlsConfig>>,
        Option<Option<super::auth::ReceiverAuthConfig>>,
    ) {
        let tls = match tls {
            None => Some(None),
            Some(raw) => {
                validate_server_tls(raw, &format!("{path}.tls"), &mut self.problems).map(Some)
            }
        };
        let auth = match auth {
            None => Some(None),
            Some(raw) => {
                validate_receiver_auth(raw, &format!("{path}.auth"), &mut self.problems).map(Some)
            }
        };
        (tls, auth)
    }

    /// Validates `<path>.endpoint`, or returns `default` when it is not given.
    fn endpoint(&mut self, text: Option<Text>, default: &str, path: &str) -> Option<String> {
        match text {
            None => Some(default.to_owned()),
            Some(Text(text)) => match parse_endpoint(&text) {
                Ok(endpoint) => Some(endpoint),
                Err(message) => {
                    self.problem(format!("{path}.endpoint"), message);
                    None
                }
            },
        }
    }

    fn exporter(&mut self, type_name: &str, body: &Value, path: &str) -> Option<ExporterSettings> {
        let raw: RawOtlpExporter = self.decode(body, path)?;
        let id = path.strip_prefix("exporters.").unwrap_or(path);
        match validate_exporter(id, type_name, raw, path) {
            Ok(config) => Some(ExporterSettings::Otlp(config)),
            Err(problems) => {
                self.problems.extend(problems);
                None
            }
        }
    }

    fn processor(
        &mut self,
        type_name: &str,
        body: &Value,
        path: &str,
    ) -> Option<ProcessorSettings> {
        match type_name {
            STEPLINE => {
                let raw: RawSteplineProcessor = self.decode(body, path)?;
                let inactivity_timeout = match raw.inactivity_timeout {
                    None => Some(DEFAULT_INACTIVITY_TIMEOUT),
                    Some(Text(text)) => {
                        let timeout =
                            self.duration(&text, &format!("{path}.inactivity_timeout"))?;
                        (!timeout.is_zero()).then_some(timeout)
                    }
                };
                let waiting_timeout = match raw.waiting_timeout {
                    None => Some(None),
                    Some(Text(text)) => self
                        .duration(&text, &format!("{path}.waiting_timeout"))
                        .map(|t| (!t.is_zero()).then_some(t)),
                };
                let limits = validate_limits(raw.limits, &mut |key, message| {
                    self.problem(format!("{path}.limits.{key}"), message)
                });
                let memory = validate_memory(raw.memory, &mut |key, message| {
                    self.problem(format!("{path}.memory.{key}"), message)
                });
                let run_info = super::run_info::validate_run_info(
                    raw.trigger,
                    raw.run_attributes,
                    &mut |key, message| self.problem(format!("{path}.{key}"), message),
                );
                let lineage_scope = match raw.lineage_scope {
                    None => Default::default(),
                    Some(Text(text)) => match crate::domain::LineageScope::parse(&text) {
                        Some(scope) => scope,
                        None => {
                            self.problem(
                                format!("{path}.lineage_scope"),
                                format!("must be conversation, service or off, not {text:?}"),
                            );
                            return None;
                        }
                    },
                };
                let keys = raw.vercel_ai.and_then(|v| v.conversation_keys);
                let keys = self.vercel_ai_conversation_keys(keys, path)?;
                let retention = match raw.retention {
                    None => None,
                    Some(Text(text)) => {
                        let kept = self.duration(&text, &format!("{path}.retention"))?;
                        (!kept.is_zero()).then_some(kept)
                    }
                };
                Some(ProcessorSettings::Stepline(Box::new(InterpreterConfig {
                    inactivity_timeout,
                    waiting_timeout: waiting_timeout?,
                    limits: limits?,
                    memory: memory?,
                    run_info: std::sync::Arc::new(run_info?),
                    lineage_scope,
                    vercel_ai_conversation_keys: keys,
                    retention,
                })))
            }
            _ => {
                let raw: RawBatchProcessor = self.decode(body, path)?;
                let mut valid = true;
                if let Some(Text(text)) = &raw.timeout {
                    valid &= self.duration(text, &format!("{path}.timeout")).is_some();
                }
                if let (Some(size), Some(max)) = (raw.send_batch_size, raw.send_batch_max_size) {
                    if max != 0 && max < size {
                        self.problem(
                            format!("{path}.send_batch_max_size"),
                            format!(
                                "must be 0 (no limit) or at least send_batch_size ({size}), \
                                 got {max}"
                            ),
                        );
                        valid = false;
                    }
                }
                valid.then_some(ProcessorSettings::Batch)
            }
        }
    }

    /// `vercel_ai.conversation_keys`: 1 to 32 metadata keys of 1 to 256 bytes (absent: the
    /// defaults).
    fn vercel_ai_conversation_keys(
        &mut self,
        keys: Option<Vec<String>>,
        path: &str,
    ) -> Option<Vec<String>> {
        let Some(keys) = keys else {
            return Some(InterpreterConfig::default().vercel_ai_conversation_keys);
        };
        let at = format!("{path}.vercel_ai.conversation_keys");
        if keys.is_empty() || keys.len() > 32 {
            self.problem(at, "must list 1 to 32 ai.telemetry.metadata keys");
            return None;
        }
        if keys.iter().any(|k| k.is_empty() || k.len() > 256) {
            self.problem(at, "every key must be 1 to 256 bytes");
            return None;
        }
        Some(keys)
    }

    fn duration(&mut self, text: &str, path: &str) -> Option<std::time::Duration> {
        match parse_duration(text) {
            Ok(duration) => Some(duration),
            Err(message) => {
                self.problem(path, message);
                None
            }
        }
    }

    fn extension(
        &mut self,
        type_name: &str,
        body: &Value,
        path: &str,
    ) -> Option<ExtensionSettings> {
        match type_name {
            STEPLINE_STORAGE => {
                let raw: RawStorageExtension = self.decode(body, path)?;
                let directory = match raw.directory {
                    None => DEFAULT_STORAGE_DIRECTORY.to_owned(),
                    Some(Text(directory)) if directory.trim().is_empty() => {
                        self.problem(
                            format!("{path}.directory"),
                            "must not be empty (leave the key out for ./data)",
                        );
                        return None;
                    }
                    Some(Text(directory)) => directory,
                };
                let directory = std::path::PathBuf::from(directory);
                let media = validate_media(raw.media, &directory, &mut |key, message| {
                    self.problem(format!("{path}.media.{key}"), message)
                })?;
                Some(ExtensionSettings::Storage(StorageConfig {
                    directory,
                    sync: raw.sync.unwrap_or(true),
                    media,
                }))
            }
            STEPLINE_API => {
                let raw: RawApiExtension = self.decode(body, path)?;
                let endpoint = self.endpoint(raw.endpoint, DEFAULT_API_ENDPOINT, path);
                let mut token = |text: Option<Text>, key: &str| match validate_token(text) {
                    Ok(token) => Some(token),
                    Err(message) => {
                        self.problem(format!("{path}.{key}"), message);
                        None
                    }
                };
                let bearer_token = token(raw.bearer_token, "bearer_token");
                let metrics_bearer_token = token(raw.metrics_bearer_token, "metrics_bearer_token");
                let allowed_hosts =
                    validate_allowed_hosts(raw.allowed_hosts, path, &mut self.problems);
                Some(ExtensionSettings::Api(ApiConfig {
                    endpoint: endpoint?,
                    bearer_token: bearer_token?,
                    metrics_bearer_token: metrics_bearer_token?,
                    allowed_hosts: allowed_hosts?,
                }))
            }
            BEARERTOKENAUTH => {
                let raw: super::auth::RawBearerTokenAuth = self.decode(body, path)?;
                validate_bearer_token_auth(raw, path, &mut self.problems)
                    .map(ExtensionSettings::BearerTokenAuth)
            }
            _ => {
                let raw: RawHealthCheckExtension = self.decode(body, path)?;
                let endpoint = match raw.endpoint {
                    None => None,
                    Some(text) => Some(self.endpoint(Some(text), "", path)?),
                };
                Some(ExtensionSettings::HealthCheck(HealthCheckConfig {
                    endpoint,
                }))
            }
        }
    }

    /// Decodes `service` and checks every reference in it. `None` when it could not be decoded.
    fn service(
        &mut self,
        body: &Value,
        receivers: &[Component<ReceiverSettings>],
        processors: &[Component<ProcessorSettings>],
        exporters: &[Component<ExporterSettings>],
        extensions: &[Component<ExtensionSettings>],
    ) -> Option<ServiceRefs> {
        let raw: RawService = self.decode(body, "service")?;
        let mut refs = ServiceRefs::default();

        let listed = raw.extensions.unwrap_or_default();
        self.references("service.extensions", Kind::Extension, &listed, extensions);
        refs.extensions = dedup(&listed);

        let pipelines = raw.pipelines.unwrap_or_default();
        for (key, body) in &pipelines {
            let path = format!("service.pipelines.{}", key_label(key));
            let mut signal_kind = None;
            match key.as_str().map(parse_component_id) {
                None => self.problem(&path, "pipeline ids must be strings"),
                Some(Err(message)) => self.problem(&path, message),
                Some(Ok(signal)) if !PIPELINE_TYPES.contains(&signal) => self.problem(
                    &path,
                    format!(
                        "unknown pipeline type \"{signal}\" (expected {}, optionally followed \
                         by /name)",
                        PIPELINE_TYPES.join(", ")
                    ),
                ),
                Some(Ok(signal)) => signal_kind = SignalKind::from_name(signal),
            }
            let Some(pipeline) = self.decode::<RawPipeline>(body, &path) else {
                refs.unresolved_receivers = true;
                continue;
            };
            let pipeline_receivers = pipeline.receivers.unwrap_or_default();
            if pipeline_receivers.is_empty() {
                self.problem(&path, "must have at least one receiver");
            }
            refs.unresolved_receivers |=
                !self.references(&path, Kind::Receiver, &pipeline_receivers, receivers);
            refs.receivers.extend(pipeline_receivers);
            let pipeline_processors = pipeline.processors.unwrap_or_default();
            self.references(&path, Kind::Processor, &pipeline_processors, processors);
            refs.processors.extend(pipeline_processors);
            let pipeline_exporters = pipeline.exporters.unwrap_or_default();
            self.references(&path, Kind::Exporter, &pipeline_exporters, exporters);
            if let Some(signal) = signal_kind {
                refs.exporter_signals
                    .extend(pipeline_exporters.into_iter().map(|id| (id, signal)));
            }
        }
        refs.receivers = dedup(&refs.receivers);
        refs.processors = dedup(&refs.processors);

        refs.shutdown_timeout = validate_shutdown_timeout(raw.shutdown_timeout, &mut self.problems);
        let telemetry = raw.telemetry.unwrap_or_default();
        if let Some(traces) = telemetry.traces {
            refs.self_traces = validate_traces(traces, &mut self.problems);
        }
        let level = telemetry.logs.and_then(|logs| logs.level);
        if let Some(Text(level)) = level {
            let normalized = level.trim().to_ascii_lowercase();
            if LOG_LEVELS.contains(&normalized.as_str()) {
                refs.log_level = Some(normalized);
            } else {
                self.problem(
                    "service.telemetry.logs.level",
                    format!(
                        "unknown log level \"{level}\" (expected one of {})",
                        LOG_LEVELS.join(", ")
                    ),
                );
            }
        }
        Some(refs)
    }

    /// Checks that every id in `ids` is configured and listed once. `false` if one is missing.
    fn references<S>(
        &mut self,
        path: &str,
        kind: Kind,
        ids: &[String],
        configured: &[Component<S>],
    ) -> bool {
        let mut all_configured = true;
        for (index, id) in ids.iter().enumerate() {
            if ids[..index].contains(id) {
                // Reported once, at its second occurrence.
                if ids[..index].iter().filter(|seen| *seen == id).count() == 1 {
                    self.problem(
                        path,
                        format!("references {} \"{id}\" more than once", kind.noun()),
                    );
                }
                continue;
            }
            if !configured.iter().any(|component| &component.id == id) {
                all_configured = false;
                self.problem(
                    path,
                    format!(
                        "references {} \"{id}\" which is not configured",
                        kind.noun()
                    ),
                );
            }
        }
        all_configured
    }

    fn pick_extension<'a>(
        &mut self,
        type_name: &str,
        extensions: &'a [Component<ExtensionSettings>],
        refs: &ServiceRefs,
    ) -> Pick<'a, ExtensionSettings> {
        self.pick(
            "service.extensions",
            Kind::Extension,
            type_name,
            extensions,
            &refs.extensions,
            true,
        )
    }

    /// Chooses the instance of `type_name` to use: the one `referenced`, or else (when
    /// `fallback` is set) the only one configured. Reports ambiguity at `path`.
    fn pick<'a, S>(
        &mut self,
        path: &str,
        kind: Kind,
        type_name: &str,
        configured: &'a [Component<S>],
        referenced: &[String],
        fallback: bool,
    ) -> Pick<'a, S> {
        let used: Vec<&Component<S>> = referenced
            .iter()
            .filter_map(|id| configured.iter().find(|component| &component.id == id))
            .filter(|component| component.type_name == type_name)
            .collect();
        let candidates: Vec<&Component<S>> = match used.as_slice() {
            [one] => return Pick::One(one),
            [] if !fallback => return Pick::Nothing,
            [] => configured
                .iter()
                .filter(|component| component.type_name == type_name)
                .collect(),
            _ => {
                self.problem(
                    path,
                    format!(
                        "uses several {type_name} {}s ({}); stepline runs exactly one",
                        kind.noun(),
                        ids(&used)
                    ),
                );
                return Pick::Ambiguous;
            }
        };
        match candidates.as_slice() {
            [] => Pick::Nothing,
            [one] => Pick::One(one),
            _ => {
                self.problem(
                    path,
                    format!(
                        "several {type_name} {}s are configured ({}) and none is referenced \
                         here; reference the one to use",
                        kind.noun(),
                        ids(&candidates)
                    ),
                );
                Pick::Ambiguous
            }
        }
    }
}

/// `type` of a component id `type` or `type/name`, or a message saying what is wrong with it.
fn parse_component_id(id: &str) -> Result<&str, String> {
    let (type_name, name) = match id.split_once('/') {
        Some((type_name, name)) => (type_name, Some(name)),
        None => (id, None),
    };
    let mut chars = type_name.chars();
    let type_ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !type_ok {
        return Err(format!(
            "invalid id \"{id}\": expected type or type/name, the type starting with a letter \
             and made of letters, digits and '_'"
        ));
    }
    if let Some(name) = name {
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "invalid id \"{id}\": the name after '/' must be non-empty, without spaces"
            ));
        }
    }
    Ok(type_name)
}

fn dedup(ids: &[String]) -> Vec<String> {
    let mut unique: Vec<String> = Vec::with_capacity(ids.len());
    for id in ids {
        if !unique.contains(id) {
            unique.push(id.clone());
        }
    }
    unique
}

fn ids<S>(components: &[&Component<S>]) -> String {
    components
        .iter()
        .map(|component| format!("\"{}\"", component.id))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_ids() {
        assert_eq!(parse_component_id("otlp").unwrap(), "otlp");
        assert_eq!(parse_component_id("otlp/agents").unwrap(), "otlp");
        assert_eq!(
            parse_component_id("stepline_storage/a.b-c").unwrap(),
            "stepline_storage"
        );
        for bad in ["", "/x", "otlp/", "1otlp", "ot-lp", "otlp/a b"] {
            assert!(parse_component_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn dedup_keeps_first_occurrence_order() {
        let ids: Vec<String> = ["b", "a", "b", "c", "a"].map(String::from).into();
        assert_eq!(dedup(&ids), ["b", "a", "c"]);
    }
}
