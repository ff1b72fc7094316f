//! Validation of `service.telemetry.traces` (stepline's own spans, Collector layout) and of
//! `service.shutdown_timeout`. Pure: no I/O.

use std::time::Duration;

use super::duration::parse_duration;
use super::error::ConfigProblem;
use super::model::{SelfTracesConfig, DEFAULT_SHUTDOWN_TIMEOUT};
use super::raw::{RawTelemetryTraces, Text};

/// `service.telemetry.traces`: at most one `batch` processor with an `otlp` exporter over
/// gRPC, as the Collector writes it:
///
/// ```yaml
/// traces:
///   processors:
///     - batch:
///         exporter:
///           otlp: { protocol: grpc, endpoint: http://127.0.0.1:4317 }
/// ```
pub(crate) fn validate_traces(
    raw: RawTelemetryTraces,
    problems: &mut Vec<ConfigProblem>,
) -> Option<SelfTracesConfig> {
    const PATH: &str = "service.telemetry.traces";
    let mut problem = |key: String, message: &str| {
        problems.push(ConfigProblem::new(format!("{PATH}.{key}"), message));
    };
    let processors = raw.processors.unwrap_or_default();
    if processors.len() > 1 {
        problem(
            "processors".into(),
            "stepline exports its own spans to one endpoint: give one batch processor",
        );
    }
    let batch = processors.into_iter().next()?.batch;
    let Some(batch) = batch else {
        problem("processors.0".into(), "only a batch processor is supported");
        return None;
    };
    let Some(otlp) = batch.exporter.and_then(|exporter| exporter.otlp) else {
        problem(
            "processors.0.batch.exporter".into(),
            "missing: otlp: { protocol: grpc, endpoint: http://host:4317 }",
        );
        return None;
    };
    let key = |name: &str| format!("processors.0.batch.exporter.otlp.{name}");
    match otlp.protocol.as_ref().map(|Text(t)| t.trim()) {
        None | Some("" | "grpc") => {}
        Some(_) => problem(key("protocol"), "only grpc is supported"),
    }
    let endpoint = otlp
        .endpoint
        .map(|Text(t)| t.trim().trim_end_matches('/').to_owned())
        .unwrap_or_default();
    let valid = endpoint.starts_with("http://")
        && endpoint
            .parse::<http::Uri>()
            .is_ok_and(|uri| uri.host().is_some());
    if !valid {
        problem(
            key("endpoint"),
            "must be a plain-text gRPC URL such as http://127.0.0.1:4317",
        );
        return None;
    }
    Some(SelfTracesConfig { endpoint })
}

/// `service.shutdown_timeout`: how long the exporters may keep sending after SIGTERM.
pub(crate) fn validate_shutdown_timeout(
    raw: Option<Text>,
    problems: &mut Vec<ConfigProblem>,
) -> Duration {
    match raw {
        None => DEFAULT_SHUTDOWN_TIMEOUT,
        Some(Text(text)) => match parse_duration(&text) {
            Ok(timeout) => timeout,
            Err(message) => {
                problems.push(ConfigProblem::new("service.shutdown_timeout", message));
                DEFAULT_SHUTDOWN_TIMEOUT
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traces(yaml: &str) -> (Option<SelfTracesConfig>, Vec<String>) {
        let raw: RawTelemetryTraces = serde_yaml_ng::from_str(yaml).unwrap();
        let mut problems = Vec::new();
        let config = validate_traces(raw, &mut problems);
        (config, problems.iter().map(|p| p.to_string()).collect())
    }

    #[test]
    fn collector_layout_of_self_traces() {
        let (config, problems) = traces(
            "processors:\n  - batch:\n      exporter:\n        otlp: { protocol: grpc, endpoint: http://h:4317/ }",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(config.unwrap().endpoint, "http://h:4317");
        assert_eq!(traces("{}"), (None, Vec::new()));
        let (config, problems) = traces(
            "processors:\n  - batch:\n      exporter:\n        otlp: { protocol: http/protobuf, endpoint: h:1 }",
        );
        assert_eq!(config, None);
        assert_eq!(
            problems,
            [
                "service.telemetry.traces.processors.0.batch.exporter.otlp.protocol: only grpc is supported",
                "service.telemetry.traces.processors.0.batch.exporter.otlp.endpoint: must be a plain-text gRPC URL such as http://127.0.0.1:4317",
            ]
        );
        let mut problems = Vec::new();
        assert_eq!(
            validate_shutdown_timeout(Some(Text("2s".into())), &mut problems),
            Duration::from_secs(2)
        );
        validate_shutdown_timeout(Some(Text("soon".into())), &mut problems);
        assert_eq!(problems.len(), 1);
    }
}
