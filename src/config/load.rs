//! Loading: read the file, parse YAML, substitute `${env:…}`, validate.

use std::path::Path;
use std::sync::Arc;

use serde_yaml_ng::Value;

use super::auth::{with_secret_problems, SecretReferences};
use super::error::{ConfigError, ConfigProblem};
use super::expand::expand_env;
use super::model::Config;
use super::validate::validate;

impl Config {
    /// Reads, substitutes env vars (from the process environment), parses and validates the
    /// file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            file: path.to_path_buf(),
            source: Arc::new(source),
        })?;
        Self::from_yaml(&text, path, &|name| std::env::var(name).ok())
    }

    /// Same as [`Config::load`] from text, with an injectable env lookup (for tests).
    /// `source` is only used to name the file in errors and in [`Config::source`].
    pub fn from_yaml(
        text: &str,
        source: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let invalid = |problems: Vec<ConfigProblem>| ConfigError::Invalid {
            file: source.to_path_buf(),
            problems,
        };
        let mut root: Value = serde_yaml_ng::from_str(text).map_err(|error| {
            invalid(vec![ConfigProblem::new(
                "",
                format!("invalid YAML: {error}"),
            )])
        })?;
        root.apply_merge().map_err(|error| {
            invalid(vec![ConfigProblem::new(
                "",
                format!("invalid YAML merge key (<<): {error}"),
            )])
        })?;
        // Secrets written as ${env:VAR} are noted before substitution, so one that resolves
        // empty stops the start instead of silently turning authentication off.
        let secrets = SecretReferences::find(&root);
        let problems = expand_env(&mut root, env, source);
        if !problems.is_empty() {
            return Err(invalid(problems));
        }
        with_secret_problems(secrets.check(&root), validate(&root, source)).map_err(invalid)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::config::{
        ApiConfig, GrpcReceiverConfig, HttpReceiverConfig, InterpreterConfig, MediaConfig,
        MediaLocation, OtlpReceiverConfig, StorageConfig,
    };

    const MINIMAL: &str = "
receivers:
  otlp:
    protocols:
      grpc:
service:
  pipelines:
    traces:
      receivers: [otlp]
";

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn load(yaml: &str) -> Result<Config, ConfigError> {
        Config::from_yaml(yaml, Path::new("collector.yaml"), &no_env)
    }

    fn load_with(yaml: &str, pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env = |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        };
        Config::from_yaml(yaml, Path::new("collector.yaml"), &env)
    }

    /// The error text, one line per problem.
    fn error_lines(yaml: &str) -> Vec<String> {
        let error = load(yaml).unwrap_err();
        let text = error.to_string();
        assert_eq!(text.lines().count(), error.problems().len(), "{text}");
        text.lines().map(str::to_owned).collect()
    }

    fn assert_has(lines: &[String], expected: &str) {
        assert!(
            lines.iter().any(|line| line == expected),
            "no line {expected:?} in:\n{}",
            lines.join("\n")
        );
    }

    #[test]
    fn vercel_ai_conversation_keys_default_and_are_checked() {
        let config = load(MINIMAL).unwrap();
        assert_eq!(
            config.interpreter.vercel_ai_conversation_keys,
            ["sessionId", "session_id", "conversationId", "threadId"]
        );
        let with = |keys: &str| {
            format!(
                "receivers:\n  otlp:\n    protocols:\n      grpc:\nprocessors:\n  stepline:\n    \
                 vercel_ai:\n      conversation_keys: {keys}\nservice:\n  pipelines:\n    traces:\n      \
                 receivers: [otlp]\n      processors: [stepline]\n"
            )
        };
        let config = load(&with("[chatId, sessionId]")).unwrap();
        assert_eq!(
            config.interpreter.vercel_ai_conversation_keys,
            ["chatId", "sessionId"]
        );
        let lines = error_lines(&with("[]"));
        assert!(
            lines
                .iter()
                .any(|l| l.contains("vercel_ai.conversation_keys")),
            "{lines:?}"
        );
    }

    #[test]
    fn minimal_config_takes_every_default() {
        let config = load(MINIMAL).unwrap();
        assert_eq!(config.source, PathBuf::from("collector.yaml"));
        assert_eq!(config.receiver.grpc, Some(GrpcReceiverConfig::default()));
        assert_eq!(config.receiver.http, None);
        let grpc = config.receiver.grpc.unwrap();
        assert_eq!(grpc.endpoint, "127.0.0.1:4317");
        assert_eq!(grpc.max_recv_msg_size, 64 * 1024 * 1024);
        assert_eq!(
            config.interpreter.inactivity_timeout,
            Some(Duration::from_secs(600))
        );
        assert_eq!(config.storage.directory, PathBuf::from("./data"));
        assert!(config.storage.sync);
        assert_eq!(config.api.endpoint, "127.0.0.1:4320");
        assert_eq!(config.api.bearer_token, None);
        assert!(config.health_check.is_none());
        assert_eq!(config.log_level, None);
    }

    #[test]
    fn sub_config_defaults() {
        assert_eq!(HttpReceiverConfig::default().endpoint, "127.0.0.1:4318");
        assert_eq!(
            HttpReceiverConfig::default().max_request_body_size,
            67_108_864
        );
        assert_eq!(
            InterpreterConfig::default().inactivity_timeout,
            Some(Duration::from_secs(600))
        );
        assert_eq!(StorageConfig::default().directory, PathBuf::from("./data"));
        assert_eq!(ApiConfig::default().endpoint, "127.0.0.1:4320");
        let both = OtlpReceiverConfig::default();
        assert!(both.grpc.is_some() && both.http.is_some());
    }

    #[test]
    fn every_option_is_read() {
        let config = load(
            "
receivers:
  otlp/agents:
    protocols:
      grpc:
        endpoint: 0.0.0.0:14317
        max_recv_msg_size_mib: 8
      http:
        endpoint: '[::1]:14318'
        max_request_body_size: 1048576
processors:
  batch:
    timeout: 1s
    send_batch_size: 512
    send_batch_max_size: 1024
  stepline:
    inactivity_timeout: 1m30s
extensions:
  stepline_storage:
    directory: /var/lib/stepline
    sync: false
  stepline_api:
    endpoint: localhost:9000
    bearer_token: s3cret
  health_check:
    endpoint: 127.0.0.1:13133
service:
  extensions: [stepline_storage, stepline_api, health_check]
  telemetry:
    logs:
      level: DEBUG
  pipelines:
    traces:
      receivers: [otlp/agents]
      processors: [batch, stepline]
      exporters: []
    logs:
      receivers: [otlp/agents]
    metrics/extra:
      receivers: [otlp/agents]
      processors: [stepline]
",
        )
        .unwrap();
        assert_eq!(
            config.receiver.grpc,
            Some(GrpcReceiverConfig {
                endpoint: "0.0.0.0:14317".into(),
                max_recv_msg_size: 8 * 1024 * 1024,
                tls: None,
                auth: None,
            })
        );
        assert_eq!(
            config.receiver.http,
            Some(HttpReceiverConfig {
                endpoint: "[::1]:14318".into(),
                max_request_body_size: 1_048_576,
                tls: None,
                auth: None,
            })
        );
        assert_eq!(
            config.interpreter.inactivity_timeout,
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            config.storage,
            StorageConfig {
                directory: "/var/lib/stepline".into(),
                sync: false,
                media: MediaConfig {
                    location: MediaLocation::Directory("/var/lib/stepline/media".into()),
                    ..MediaConfig::default()
                }
            }
        );
        assert_eq!(
            config.api,
            ApiConfig {
                endpoint: "localhost:9000".into(),
                bearer_token: Some("s3cret".into()),
                ..ApiConfig::default()
            }
        );
        assert_eq!(
            config.health_check.unwrap().endpoint.as_deref(),
            Some("127.0.0.1:13133")
        );
        assert_eq!(config.log_level.as_deref(), Some("debug"));
    }

    #[test]
    fn zero_inactivity_timeout_disables_it_and_empty_token_means_none() {
        let config = load(&format!(
            "{MINIMAL}processors:\n  stepline:\n    inactivity_timeout: 0s\n\
             extensions:\n  stepline_api:\n    bearer_token: ''\n"
        ))
        .unwrap();
        assert_eq!(config.interpreter.inactivity_timeout, None);
        assert_eq!(config.api.bearer_token, None);
    }

    #[test]
    fn lineage_scope_is_read_and_checked() {
        use crate::domain::LineageScope;
        assert_eq!(
            load(MINIMAL).unwrap().interpreter.lineage_scope,
            LineageScope::Conversation
        );
        for (text, scope) in [
            ("conversation", LineageScope::Conversation),
            ("service", LineageScope::Service),
            ("off", LineageScope::Off),
        ] {
            let config = load(&format!(
                "{MINIMAL}processors:\n  stepline:\n    lineage_scope: {text}\n"
            ))
            .unwrap();
            assert_eq!(config.interpreter.lineage_scope, scope);
        }
        let lines = error_lines(&format!(
            "{MINIMAL}processors:\n  stepline:\n    lineage_scope: trace\n"
        ));
        assert_has(
            &lines,
            "collector.yaml: processors.stepline.lineage_scope: must be conversation, service or \
             off, not \"trace\"",
        );
    }

    #[test]
    fn retention_is_off_by_default_and_takes_days() {
        let config = load(MINIMAL).unwrap();
        assert_eq!(config.interpreter.retention, None);
        let config = load(&format!(
            "{MINIMAL}processors:\n  stepline:\n    retention: 30d\n"
        ))
        .unwrap();
        assert_eq!(
            config.interpreter.retention,
            Some(Duration::from_secs(30 * 86_400))
        );
        let off = load(&format!(
            "{MINIMAL}processors:\n  stepline:\n    retention: 0\n"
        ))
        .unwrap();
        assert_eq!(off.interpreter.retention, None);
        let bad = load(&format!(
            "{MINIMAL}processors:\n  stepline:\n    retention: soon\n"
        ))
        .err()
        .unwrap()
        .to_string();
        assert!(bad.contains("processors.stepline.retention"), "{bad}");
    }

    #[test]
    fn waiting_timeout_is_off_by_default_and_zero_keeps_it_off() {
        assert_eq!(load(MINIMAL).unwrap().interpreter.waiting_timeout, None);
        let with = |value: &str| {
            load(&format!(
                "{MINIMAL}processors:\n  stepline:\n    waiting_timeout: {value}\n"
            ))
        };
        assert_eq!(
            with("24h").unwrap().interpreter.waiting_timeout,
            Some(Duration::from_secs(24 * 3600))
        );
        assert_eq!(with("0s").unwrap().interpreter.waiting_timeout, None);
        let error = with("soon").unwrap_err().to_string();
        assert!(
            error.contains("processors.stepline.waiting_timeout"),
            "{error}"
        );
    }

    #[test]
    fn unreferenced_single_instances_are_still_used() {
        // Not listed in service.extensions / not in a pipeline: still the one configured.
        let config = load(&format!(
            "{MINIMAL}processors:\n  stepline/slow:\n    inactivity_timeout: 1h\n\
             extensions:\n  stepline_storage/main:\n    directory: elsewhere\n"
        ))
        .unwrap();
        assert_eq!(
            config.interpreter.inactivity_timeout,
            Some(Duration::from_secs(3600))
        );
        assert_eq!(config.storage.directory, PathBuf::from("elsewhere"));
    }

    #[test]
    fn env_substitution_forms() {
        let yaml = "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: ${env:GRPC_ENDPOINT}
      http:
        endpoint: ${env:HTTP_HOST:-127.0.0.1}:${env:HTTP_PORT:-4318}
extensions:
  stepline_storage:
    directory: ${env:BASE}/stepline-$${env:NOT_EXPANDED}
  stepline_api:
    endpoint: ${env:API_ENDPOINT:-127.0.0.1:4999}
    bearer_token: pa$$word${env:TOKEN_SUFFIX}
service:
  pipelines:
    traces:
      receivers: [otlp]
";
        let config = load_with(
            yaml,
            &[
                ("GRPC_ENDPOINT", "0.0.0.0:5317"),
                ("HTTP_PORT", "5318"),
                ("BASE", "/srv"),
                ("TOKEN_SUFFIX", "42"),
            ],
        )
        .unwrap();
        assert_eq!(config.receiver.grpc.unwrap().endpoint, "0.0.0.0:5317");
        assert_eq!(config.receiver.http.unwrap().endpoint, "127.0.0.1:5318");
        assert_eq!(
            config.storage.directory,
            PathBuf::from("/srv/stepline-${env:NOT_EXPANDED}")
        );
        assert_eq!(config.api.endpoint, "127.0.0.1:4999");
        assert_eq!(config.api.bearer_token.as_deref(), Some("pa$word42"));
    }

    #[test]
    fn unset_variable_without_default_means_default_value() {
        let yaml = "
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: ${env:UNSET_ENDPOINT}
extensions:
  stepline_api:
    bearer_token: ${env:UNSET_TOKEN}
    allow_no_auth: true
service:
  pipelines:
    traces:
      receivers: [otlp]
";
        let config = load(yaml).unwrap();
        assert_eq!(config.receiver.grpc.unwrap().endpoint, "127.0.0.1:4317");
        assert_eq!(config.api.bearer_token, None);
    }

    #[test]
    fn typed_scalars_from_env() {
        let yaml = "
receivers:
  otlp:
    protocols:
      grpc:
        max_recv_msg_size_mib: ${env:MIB:-16}
extensions:
  stepline_storage:
    sync: ${env:SYNC:-false}
  stepline_api:
    bearer_token: ${env:TOKEN}
service:
  pipelines:
    traces:
      receivers: [otlp]
";
        let defaults = load_with(yaml, &[("TOKEN", "t")]).unwrap();
        assert!(!defaults.storage.sync);
        assert_eq!(
            defaults.receiver.grpc.unwrap().max_recv_msg_size,
            16 * 1024 * 1024
        );
        let from_env =
            load_with(yaml, &[("SYNC", "true"), ("MIB", "2"), ("TOKEN", "12345")]).unwrap();
        assert!(from_env.storage.sync);
        assert_eq!(
            from_env.receiver.grpc.unwrap().max_recv_msg_size,
            2 * 1024 * 1024
        );
        // A numeric token is still text, exactly as written.
        assert_eq!(from_env.api.bearer_token.as_deref(), Some("12345"));
        // A non-boolean from the environment is a type error at the key.
        let error = load_with(yaml, &[("SYNC", "yes"), ("TOKEN", "t")])
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "collector.yaml: extensions.stepline_storage.sync: invalid type: string \"yes\", \
             expected a boolean"
        );
    }

    #[test]
    fn malformed_env_reference_names_file_and_path() {
        let lines = error_lines(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: ${env:}\n\
             extensions:\n  stepline_api:\n    endpoint: ${env:API\n",
        );
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(lines[0].starts_with(
            "collector.yaml: receivers.otlp.protocols.grpc.endpoint: malformed reference \"${env:}\""
        ));
        assert!(lines[1].starts_with(
            "collector.yaml: extensions.stepline_api.endpoint: unterminated reference \"${env:API\""
        ));
    }

    #[test]
    fn unknown_key_names_key_and_file() {
        let lines = error_lines(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpiont: 0.0.0.0:4317\n\
             service:\n  pipelines:\n    traces:\n      receivers: [otlp]\n",
        );
        assert_eq!(
            lines,
            ["collector.yaml: receivers.otlp.protocols.grpc.endpiont: unknown field `endpiont`, \
              expected one of `endpoint`, `max_recv_msg_size_mib`, `tls`, `auth`"]
        );
    }

    #[test]
    fn unknown_top_level_and_service_keys() {
        let lines = error_lines(&format!("{MINIMAL}connectors: {{}}\n"));
        assert_has(
            &lines,
            "collector.yaml: connectors: unknown key `connectors` (expected one of receivers, \
             processors, exporters, extensions, service)",
        );
        let lines = error_lines(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\nservice:\n  pipeline:\n    traces: {}\n",
        );
        assert!(lines[0].starts_with("collector.yaml: service.pipeline: unknown field `pipeline`"));
    }

    #[test]
    fn exporters_are_wired_through_the_pipelines() {
        let config = load(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n\
             exporters:\n  otlp/a:\n    endpoint: http://127.0.0.1:1\n\
             \x20 otlphttp/b:\n    endpoint: http://127.0.0.1:2\n    encoding: json\n\
             \x20 otlp/unused:\n    endpoint: http://127.0.0.1:3\n\
             service:\n  pipelines:\n    traces:\n      receivers: [otlp]\n      \
             exporters: [otlp/a, otlphttp/b]\n    logs:\n      receivers: [otlp]\n      \
             exporters: [otlphttp/b]\n",
        )
        .unwrap();
        let summary: Vec<_> = config
            .exporters
            .iter()
            .map(|e| (e.id.as_str(), e.protocol, e.signals.clone()))
            .collect();
        use crate::config::{ExporterProtocol, SignalKind};
        assert_eq!(
            summary,
            [
                ("otlp/a", ExporterProtocol::Grpc, vec![SignalKind::Traces]),
                (
                    "otlphttp/b",
                    ExporterProtocol::HttpJson,
                    vec![SignalKind::Traces, SignalKind::Logs]
                ),
            ]
        );
    }

    #[test]
    fn unknown_component_types_are_errors() {
        let lines = error_lines(&format!(
            "{MINIMAL}processors:\n  memory_limiter:\nexporters:\n  kafka/backend:\n    brokers: x:1\n\
             extensions:\n  pprof:\n"
        ));
        assert_has(
            &lines,
            "collector.yaml: processors.memory_limiter: unknown processor type \"memory_limiter\" \
             (known types: stepline, batch)",
        );
        assert_has(
            &lines,
            "collector.yaml: exporters.kafka/backend: unknown exporter type \"kafka\" (known \
             types: otlp, otlphttp)",
        );
        assert_has(
            &lines,
            "collector.yaml: extensions.pprof: unknown extension type \"pprof\" (known types: \
             stepline_storage, stepline_api, health_check, bearertokenauth)",
        );
        let lines = error_lines(
            "receivers:\n  kafka:\n  otlp:\n    protocols:\n      http:\n\
             service:\n  pipelines:\n    traces:\n      receivers: [otlp, kafka]\n",
        );
        assert_eq!(
            lines,
            ["collector.yaml: receivers.kafka: unknown receiver type \"kafka\" (known types: otlp)"]
        );
    }

    #[test]
    fn references_to_unconfigured_components_are_errors() {
        let lines = error_lines(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n\
             service:\n  extensions: [stepline_api]\n  pipelines:\n    traces:\n      \
             receivers: [otlp, x]\n      processors: [stepline]\n      exporters: [debug]\n",
        );
        assert_eq!(
            lines,
            [
                "collector.yaml: service.extensions: references extension \"stepline_api\" which \
                 is not configured",
                "collector.yaml: service.pipelines.traces: references receiver \"x\" which is not \
                 configured",
                "collector.yaml: service.pipelines.traces: references processor \"stepline\" \
                 which is not configured",
                "collector.yaml: service.pipelines.traces: references exporter \"debug\" which is \
                 not configured",
            ]
        );
    }

    #[test]
    fn pipeline_shape_errors() {
        let lines = error_lines(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n\
             processors:\n  stepline:\n\
             service:\n  pipelines:\n    traces:\n      receivers: [otlp, otlp]\n      \
             processors: [stepline, stepline, stepline]\n    logs:\n      processors: []\n    \
             profiles:\n      receivers: [otlp]\n    metrics/:\n      receivers: [otlp]\n",
        );
        assert_eq!(
            lines,
            [
                "collector.yaml: service.pipelines.traces: references receiver \"otlp\" more than \
                 once",
                "collector.yaml: service.pipelines.traces: references processor \"stepline\" more \
                 than once",
                "collector.yaml: service.pipelines.logs: must have at least one receiver",
                "collector.yaml: service.pipelines.profiles: unknown pipeline type \"profiles\" \
                 (expected traces, logs, metrics, optionally followed by /name)",
                "collector.yaml: service.pipelines.metrics/: invalid id \"metrics/\": the name \
                 after '/' must be non-empty, without spaces",
            ]
        );
    }

    #[test]
    fn needs_exactly_one_otlp_receiver_in_the_pipelines() {
        let lines = error_lines(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\nservice:\n  pipelines: {}\n",
        );
        assert_eq!(lines.len(), 1);
        assert!(lines[0]
            .starts_with("collector.yaml: service.pipelines: no pipeline uses an otlp receiver"));
        let lines = error_lines(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n  otlp/2:\n    protocols:\n      \
             http:\nservice:\n  pipelines:\n    traces:\n      receivers: [otlp]\n    logs:\n      \
             receivers: [otlp/2]\n",
        );
        assert_eq!(
            lines,
            [
                "collector.yaml: service.pipelines: uses several otlp receivers (\"otlp\", \
              \"otlp/2\"); stepline runs exactly one"
            ]
        );
        let lines = error_lines("receivers:\n  otlp:\n    protocols:\n      grpc:\n");
        assert!(lines[0].starts_with("collector.yaml: service: missing"));
        let lines = error_lines(
            "receivers:\n  otlp:\n    protocols: {}\n\
             service:\n  pipelines:\n    traces:\n      receivers: [otlp]\n",
        );
        assert!(lines[0].starts_with(
            "collector.yaml: receivers.otlp.protocols: the otlp receiver needs at least one protocol"
        ));
    }

    #[test]
    fn ambiguous_unreferenced_instances_are_errors() {
        let lines = error_lines(&format!(
            "{MINIMAL}extensions:\n  stepline_storage/a:\n  stepline_storage/b:\n"
        ));
        assert_eq!(
            lines,
            [
                "collector.yaml: service.extensions: several stepline_storage extensions are \
              configured (\"stepline_storage/a\", \"stepline_storage/b\") and none is referenced \
              here; reference the one to use"
            ]
        );
        // Listing one picks it.
        let yaml = "receivers:\n  otlp:\n    protocols:\n      grpc:\n\
             extensions:\n  stepline_storage/a:\n    directory: a\n  stepline_storage/b:\n    \
             directory: b\nservice:\n  extensions: [stepline_storage/b]\n  pipelines:\n    \
             traces:\n      receivers: [otlp]\n";
        assert_eq!(load(yaml).unwrap().storage.directory, PathBuf::from("b"));
    }

    #[test]
    fn bad_endpoint_duration_bool_and_sizes() {
        let lines = error_lines(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: localhost\n        \
             max_recv_msg_size_mib: 0\n      http:\n        endpoint: 4318\n\
             processors:\n  stepline:\n    inactivity_timeout: 10 minutes\n  batch:\n    timeout: 5\n\
             extensions:\n  stepline_storage:\n    sync: yes\n  stepline_api:\n    endpoint: \
             '127.0.0.1:99999'\n\
             service:\n  telemetry:\n    logs:\n      level: verbose\n  pipelines:\n    traces:\n      \
             receivers: [otlp]\n      processors: [batch, stepline]\n",
        );
        assert_eq!(
            lines,
            [
                "collector.yaml: receivers.otlp.protocols.grpc.endpoint: invalid endpoint \
                 \"localhost\": missing :port; expected host:port, e.g. 127.0.0.1:4317, \
                 0.0.0.0:4317 or [::1]:4317",
                "collector.yaml: receivers.otlp.protocols.grpc.max_recv_msg_size_mib: must be at \
                 least 1 (MiB)",
                "collector.yaml: receivers.otlp.protocols.http.endpoint: invalid endpoint \
                 \"4318\": missing :port; expected host:port, e.g. 127.0.0.1:4317, 0.0.0.0:4317 \
                 or [::1]:4317",
                "collector.yaml: processors.stepline.inactivity_timeout: invalid duration \
                 \"10 minutes\": unknown unit \" minutes\"; use ms, s, m or h, e.g. \"30s\", \
                 \"10m\" or \"1m30s\"",
                "collector.yaml: processors.batch.timeout: invalid duration \"5\": missing unit \
                 after \"5\"; use ms, s, m or h, e.g. \"30s\", \"10m\" or \"1m30s\"",
                "collector.yaml: extensions.stepline_storage.sync: invalid type: string \"yes\", \
                 expected a boolean",
                "collector.yaml: extensions.stepline_api.endpoint: invalid endpoint \
                 \"127.0.0.1:99999\": port \"99999\" is not a number from 0 to 65535",
                "collector.yaml: service.telemetry.logs.level: unknown log level \"verbose\" \
                 (expected one of trace, debug, info, warn, error)",
            ]
        );
    }

    #[test]
    fn type_errors_carry_the_full_path() {
        let lines = error_lines(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: [a, b]\n      \
             http:\n        max_request_body_size: -1\n\
             service:\n  pipelines:\n    traces:\n      receivers: otlp\n",
        );
        assert_has(
            &lines,
            "collector.yaml: receivers.otlp.protocols.grpc.endpoint: invalid type: sequence, \
             expected a string",
        );
        assert_has(
            &lines,
            "collector.yaml: service.pipelines.traces.receivers: invalid type: string \"otlp\", \
             expected a sequence",
        );
        // One problem per component: the grpc type error hides the http one of the same receiver.
        assert_eq!(lines.len(), 2, "{lines:#?}");
    }

    #[test]
    fn several_errors_are_reported_at_once() {
        let lines = error_lines(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: nope\n  zipkin:\n\
             processors:\n  stepline:\n    inactivity_timeout: soon\n\
             extensions:\n  stepline_storage:\n    sync: maybe\n    colour: blue\n\
             service:\n  extensions: [ghost]\n  pipelines:\n    traces:\n      \
             receivers: [otlp, missing]\n",
        );
        assert!(lines.len() >= 6, "{lines:#?}");
        for line in &lines {
            assert!(line.starts_with("collector.yaml: "), "{line}");
        }
        for fragment in [
            "receivers.otlp.protocols.grpc.endpoint: invalid endpoint \"nope\"",
            "receivers.zipkin: unknown receiver type \"zipkin\"",
            "processors.stepline.inactivity_timeout: invalid duration \"soon\"",
            "extensions.stepline_storage.sync: invalid type: string \"maybe\"",
            "service.extensions: references extension \"ghost\" which is not configured",
            "service.pipelines.traces: references receiver \"missing\" which is not configured",
        ] {
            assert!(
                lines.iter().any(|line| line.contains(fragment)),
                "missing {fragment:?} in {lines:#?}"
            );
        }
    }

    #[test]
    fn batch_limits_are_checked_but_batch_has_no_effect() {
        let lines = error_lines(&format!(
            "{MINIMAL}processors:\n  batch:\n    send_batch_size: 100\n    send_batch_max_size: 10\n"
        ));
        assert_eq!(
            lines,
            [
                "collector.yaml: processors.batch.send_batch_max_size: must be 0 (no limit) or at \
              least send_batch_size (100), got 10"
            ]
        );
    }

    #[test]
    fn invalid_yaml_and_wrong_shapes() {
        let lines = error_lines("receivers: [\n");
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with("collector.yaml: invalid YAML: "),
            "{lines:?}"
        );
        assert!(lines[0].contains("line"), "{lines:?}");
        let lines = error_lines("receivers:\n  otlp: {}\n  otlp: {}\n");
        assert!(lines[0].contains("duplicate entry"), "{lines:?}");
        let lines = error_lines("- just\n- a list\n");
        assert!(lines[0].starts_with("collector.yaml: the file must be a YAML mapping"));
        let lines = error_lines(&format!("{MINIMAL}exporters: [otlp]\n"));
        assert!(lines[0].starts_with("collector.yaml: exporters: must be a mapping"));
        let lines = error_lines("");
        assert!(lines[0].starts_with("collector.yaml: service: missing"));
    }

    #[test]
    fn yaml_merge_keys_are_applied() {
        let config = load(
            "
receivers:
  otlp:
    protocols:
      grpc: &grpc
        endpoint: 0.0.0.0:4317
      http:
        <<: *grpc
        max_request_body_size: 1024
service:
  pipelines:
    traces:
      receivers: [otlp]
",
        )
        .unwrap();
        let http = config.receiver.http.unwrap();
        assert_eq!(http.endpoint, "0.0.0.0:4317");
        assert_eq!(http.max_request_body_size, 1024);
    }

    #[test]
    fn load_reads_the_file_and_reports_a_missing_one() {
        let missing = Path::new("/nonexistent/stepline/collector.yaml");
        let error = Config::load(missing).unwrap_err();
        assert!(matches!(error, ConfigError::Read { .. }));
        assert!(error.to_string().starts_with(
            "/nonexistent/stepline/collector.yaml: cannot read the configuration file"
        ));

        let path =
            std::env::temp_dir().join(format!("stepline-config-test-{}.yaml", std::process::id()));
        std::fs::write(&path, MINIMAL).unwrap();
        let loaded = Config::load(&path);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(loaded.unwrap().source, path);
    }

    /// Every shipped example (`collector.yaml` and `config/*.yaml`) must load.
    #[test]
    fn shipped_configs_load() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = vec![root.join("collector.yaml")];
        let mut examples: Vec<PathBuf> = std::fs::read_dir(root.join("config"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
            .collect();
        examples.sort();
        assert!(
            examples.len() >= 2,
            "expected examples in config/: {examples:?}"
        );
        files.extend(examples);
        // The examples that require tokens get them from the environment.
        let tokens = |name: &str| name.ends_with("_TOKEN").then(|| "t0ken".to_owned());
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let config = Config::from_yaml(&text, &file, &tokens)
                .unwrap_or_else(|error| panic!("{} does not load:\n{error}", file.display()));
            assert!(config.receiver.grpc.is_some() || config.receiver.http.is_some());
        }
        let text = std::fs::read_to_string(root.join("collector.yaml")).unwrap();
        let default = Config::from_yaml(&text, Path::new("collector.yaml"), &no_env).unwrap();
        assert_eq!(default.receiver, OtlpReceiverConfig::default());
        assert_eq!(default.api, ApiConfig::default());
        assert_eq!(default.storage, StorageConfig::default());
        assert_eq!(default.interpreter, InterpreterConfig::default());
    }
}
