//! Validation of the `otlp` and `otlphttp` exporters' settings. Pure: no I/O.

use std::time::Duration;

use super::duration::parse_duration;
use super::error::ConfigProblem;
use std::path::PathBuf;

use super::model::{
    BatchConfig, BatchSizer, Compression, ExporterConfig, ExporterProtocol, RetryConfig, TlsConfig,
    WhenFull, DEFAULT_BATCH_FLUSH_TIMEOUT, DEFAULT_BATCH_MIN_SIZE, DEFAULT_EXPORT_TIMEOUT,
    DEFAULT_NUM_CONSUMERS, DEFAULT_QUEUE_SIZE_BYTES,
};
use super::raw::{RawBatch, RawOtlpExporter, RawRetry, RawTls, Text};

/// The gRPC exporter type.
pub(crate) const OTLP_EXPORTER: &str = "otlp";
/// The HTTP exporter type.
pub(crate) const OTLPHTTP_EXPORTER: &str = "otlphttp";

/// Validates one exporter's settings at `path` (`exporters.<id>`). The returned config has no
/// `signals` yet: the pipelines fill them in.
pub(crate) fn validate_exporter(
    id: &str,
    type_name: &str,
    raw: RawOtlpExporter,
    path: &str,
) -> Result<ExporterConfig, Vec<ConfigProblem>> {
    let mut problems = Vec::new();
    let mut problem = |key: &str, message: String| {
        problems.push(ConfigProblem::new(format!("{path}.{key}"), message));
    };

    let grpc = type_name == OTLP_EXPORTER;
    let protocol = match (grpc, raw.encoding.as_ref().map(|t| t.0.trim())) {
        (true, None) => Some(ExporterProtocol::Grpc),
        (true, Some(_)) => {
            problem(
                "encoding",
                "only the otlphttp exporter has an encoding (gRPC is always protobuf)".into(),
            );
            None
        }
        (false, None | Some("" | "proto")) => Some(ExporterProtocol::HttpProtobuf),
        (false, Some("json")) => Some(ExporterProtocol::HttpJson),
        (false, Some(other)) => {
            problem(
                "encoding",
                format!("unknown encoding \"{other}\" (expected proto or json)"),
            );
            None
        }
    };

    let raw_tls = raw.tls.unwrap_or_default();
    let insecure = raw_tls.insecure.unwrap_or(false);
    let endpoint = match raw.endpoint {
        None => {
            problem(
                "endpoint",
                "missing: the backend's address, e.g. http://127.0.0.1:4317".into(),
            );
            None
        }
        Some(Text(text)) => match endpoint_url(text.trim(), grpc, insecure) {
            Ok(url) => Some(url),
            Err(message) => {
                problem("endpoint", message);
                None
            }
        },
    };
    let tls = match &endpoint {
        Some(url) => tls(raw_tls, url.starts_with("https://"), &mut problem),
        None => None,
    };

    let mut headers = Vec::new();
    for (name, Text(value)) in raw.headers.unwrap_or_default() {
        let lower = name.to_ascii_lowercase();
        let name_ok = http::HeaderName::from_bytes(lower.as_bytes()).is_ok();
        let value_ok = http::HeaderValue::from_str(&value).is_ok();
        if !name_ok {
            problem(&format!("headers.{name}"), "not a valid header name".into());
        } else if !value_ok {
            problem(
                &format!("headers.{name}"),
                "the value must be visible ASCII".into(),
            );
        } else {
            headers.push((lower, value));
        }
    }

    let compression = match raw.compression.as_ref().map(|t| t.0.trim()) {
        None | Some("gzip") => Some(Compression::Gzip),
        Some("zstd") => Some(Compression::Zstd),
        Some("" | "none") => Some(Compression::None),
        Some(other) => {
            problem(
                "compression",
                format!("unknown compression \"{other}\" (expected gzip, zstd or none)"),
            );
            None
        }
    };

    let timeout = match raw.timeout {
        None => Some(DEFAULT_EXPORT_TIMEOUT),
        Some(Text(text)) => match parse_duration(&text) {
            Ok(timeout) if timeout.is_zero() => {
                problem("timeout", "must be greater than 0".into());
                None
            }
            Ok(timeout) => Some(timeout),
            Err(message) => {
                problem("timeout", message);
                None
            }
        },
    };

    let retry = retry(raw.retry_on_failure.unwrap_or_default(), &mut problem);

    let queue = raw.sending_queue.unwrap_or_default();
    if queue.enabled == Some(false) {
        problem(
            "sending_queue.enabled",
            "the durable outbox cannot be turned off (stepline never drops acknowledged data); \
             remove the key"
                .into(),
        );
    }
    let queue_size_bytes = match queue.queue_size_bytes {
        None => Some(DEFAULT_QUEUE_SIZE_BYTES),
        Some(0) => {
            problem(
                "sending_queue.queue_size_bytes",
                "must be greater than 0".into(),
            );
            None
        }
        Some(bytes) => Some(bytes),
    };
    let when_full = match queue.when_full.as_ref().map(|t| t.0.trim()) {
        None | Some("" | "refuse") => Some(WhenFull::Refuse),
        Some("drop_oldest") => Some(WhenFull::DropOldest),
        Some(other) => {
            problem(
                "sending_queue.when_full",
                format!("unknown value \"{other}\" (expected refuse or drop_oldest)"),
            );
            None
        }
    };
    let num_consumers = match queue.num_consumers {
        None => Some(DEFAULT_NUM_CONSUMERS),
        Some(n @ 1..=1000) => usize::try_from(n).ok(),
        Some(n) => {
            problem(
                "sending_queue.num_consumers",
                format!("must be between 1 and 1000, got {n}"),
            );
            None
        }
    };

    let batch = match queue.batch {
        None => Some(None),
        Some(raw) => batch(raw, &mut problem).map(Some),
    };

    let enrich_run_id = raw.enrich_run_id.unwrap_or(false);
    match (
        protocol,
        endpoint,
        compression,
        timeout,
        retry,
        (queue_size_bytes, when_full, num_consumers, batch),
    ) {
        (
            Some(protocol),
            Some(endpoint),
            Some(compression),
            Some(timeout),
            Some(retry),
            (Some(queue_size_bytes), Some(when_full), Some(num_consumers), Some(batch)),
        ) if problems.is_empty() => Ok(ExporterConfig {
            id: id.to_owned(),
            protocol,
            endpoint,
            tls,
            headers,
            compression,
            timeout,
            retry,
            queue_size_bytes,
            when_full,
            num_consumers,
            batch,
            enrich_run_id,
            signals: Vec::new(),
        }),
        _ => Err(problems),
    }
}

/// `sending_queue.batch`, with the Collector's defaults (200ms, 8192 items, no maximum).
fn batch(raw: RawBatch, problem: &mut impl FnMut(&str, String)) -> Option<BatchConfig> {
    let flush_timeout = match raw.flush_timeout {
        None => Some(DEFAULT_BATCH_FLUSH_TIMEOUT),
        Some(Text(text)) => match parse_duration(&text) {
            Ok(timeout) if timeout.is_zero() => {
                problem(
                    "sending_queue.batch.flush_timeout",
                    "must be greater than 0".into(),
                );
                None
            }
            Ok(timeout) => Some(timeout),
            Err(message) => {
                problem("sending_queue.batch.flush_timeout", message);
                None
            }
        },
    };
    let sizer = match raw.sizer.as_ref().map(|t| t.0.trim()) {
        None | Some("items") => Some(BatchSizer::Items),
        Some("bytes") => Some(BatchSizer::Bytes),
        Some(other) => {
            problem(
                "sending_queue.batch.sizer",
                format!("unknown sizer \"{other}\" (expected items or bytes)"),
            );
            None
        }
    };
    let min_size = raw.min_size.unwrap_or(DEFAULT_BATCH_MIN_SIZE);
    let max_size = raw.max_size.unwrap_or(0);
    if max_size != 0 && max_size < min_size {
        problem(
            "sending_queue.batch.max_size",
            format!("must be 0 (no limit) or at least min_size ({min_size}), got {max_size}"),
        );
        return None;
    }
    Some(BatchConfig {
        flush_timeout: flush_timeout?,
        min_size,
        max_size,
        sizer: sizer?,
    })
}

/// The TLS settings of an endpoint that uses TLS (`tls_on`); on a plain-text endpoint, the
/// settings that would have no effect are reported.
fn tls(raw: RawTls, tls_on: bool, problem: &mut impl FnMut(&str, String)) -> Option<TlsConfig> {
    let path = |value: Option<Text>| {
        value
            .map(|Text(text)| text.trim().to_owned())
            .filter(|text| !text.is_empty())
    };
    let config = TlsConfig {
        ca_file: path(raw.ca_file).map(PathBuf::from),
        cert_file: path(raw.cert_file).map(PathBuf::from),
        key_file: path(raw.key_file).map(PathBuf::from),
        insecure_skip_verify: raw.insecure_skip_verify.unwrap_or(false),
        server_name_override: path(raw.server_name_override),
    };
    if !tls_on {
        let unused = [
            ("ca_file", config.ca_file.is_some()),
            ("cert_file", config.cert_file.is_some()),
            ("key_file", config.key_file.is_some()),
            ("insecure_skip_verify", config.insecure_skip_verify),
            (
                "server_name_override",
                config.server_name_override.is_some(),
            ),
        ];
        for (key, set) in unused {
            if set {
                problem(
                    &format!("tls.{key}"),
                    "has no effect on a plain-text endpoint; use an https:// endpoint".into(),
                );
            }
        }
        return None;
    }
    if raw.insecure == Some(true) {
        problem(
            "tls.insecure",
            "true asks for plain text, but the endpoint is https://".into(),
        );
    }
    match (&config.cert_file, &config.key_file) {
        (Some(_), None) => problem("tls.key_file", "missing: cert_file needs its key".into()),
        (None, Some(_)) => problem(
            "tls.cert_file",
            "missing: key_file needs its certificate".into(),
        ),
        _ => {}
    }
    if let Some(name) = &config.server_name_override {
        if rustls::pki_types::ServerName::try_from(name.as_str()).is_err() {
            problem(
                "tls.server_name_override",
                format!("\"{name}\" is not a DNS name or IP address"),
            );
        }
    }
    Some(config)
}

/// The endpoint as an `http://` or `https://` URL without a trailing `/`.
fn endpoint_url(text: &str, grpc: bool, insecure: bool) -> Result<String, String> {
    if text.is_empty() {
        return Err("must not be empty".into());
    }
    let url = if text.starts_with("http://") || text.starts_with("https://") {
        text.to_owned()
    } else if text.contains("://") {
        return Err(format!(
            "unsupported scheme in \"{text}\" (expected http://host:port or https://host:port)"
        ));
    } else if grpc && insecure {
        format!("http://{text}")
    } else if grpc {
        // As in the Collector: a scheme-less gRPC endpoint uses TLS unless tls.insecure is set.
        format!("https://{text}")
    } else {
        return Err(format!(
            "must be a URL such as https://{text} (the signal path /v1/traces, … is appended)"
        ));
    };
    let trimmed = url.trim_end_matches('/').to_owned();
    match trimmed.parse::<http::Uri>() {
        Ok(uri) if uri.host().is_some() => Ok(trimmed),
        _ => Err(format!("\"{text}\" is not a valid URL")),
    }
}

fn retry(raw: RawRetry, problem: &mut impl FnMut(&str, String)) -> Option<RetryConfig> {
    let defaults = RetryConfig::default();
    let mut valid = true;
    let mut duration = |key: &str, value: Option<Text>, default: Duration| match value {
        None => Some(default),
        Some(Text(text)) => match parse_duration(&text) {
            Ok(duration) => Some(duration),
            Err(message) => {
                problem(&format!("retry_on_failure.{key}"), message);
                None
            }
        },
    };
    let initial = duration(
        "initial_interval",
        raw.initial_interval,
        defaults.initial_interval,
    );
    let max = duration("max_interval", raw.max_interval, defaults.max_interval);
    let elapsed = duration(
        "max_elapsed_time",
        raw.max_elapsed_time,
        defaults.max_elapsed_time.unwrap_or_default(),
    );
    let multiplier = raw.multiplier.unwrap_or(defaults.multiplier);
    if !(multiplier.is_finite() && multiplier >= 1.0) {
        problem(
            "retry_on_failure.multiplier",
            format!("must be at least 1, got {multiplier}"),
        );
        valid = false;
    }
    let randomization_factor = raw
        .randomization_factor
        .unwrap_or(defaults.randomization_factor);
    if !(0.0..1.0).contains(&randomization_factor) {
        problem(
            "retry_on_failure.randomization_factor",
            format!("must be in [0, 1), got {randomization_factor}"),
        );
        valid = false;
    }
    let (initial, max, elapsed) = (initial?, max?, elapsed?);
    if initial.is_zero() {
        problem(
            "retry_on_failure.initial_interval",
            "must be greater than 0".into(),
        );
        valid = false;
    }
    if max < initial {
        problem(
            "retry_on_failure.max_interval",
            format!("must be at least initial_interval ({initial:?})"),
        );
        valid = false;
    }
    valid.then_some(RetryConfig {
        enabled: raw.enabled.unwrap_or(true),
        initial_interval: initial,
        max_interval: max,
        multiplier,
        randomization_factor,
        max_elapsed_time: (!elapsed.is_zero()).then_some(elapsed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(yaml: &str) -> RawOtlpExporter {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn messages(result: Result<ExporterConfig, Vec<ConfigProblem>>) -> Vec<String> {
        result.unwrap_err().iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn defaults_follow_the_collector() {
        let config =
            validate_exporter("otlp/a", "otlp", raw("endpoint: http://127.0.0.1:1/"), "e").unwrap();
        assert_eq!(config.endpoint, "http://127.0.0.1:1");
        assert_eq!(config.protocol, ExporterProtocol::Grpc);
        assert_eq!(config.compression, Compression::Gzip);
        assert_eq!(config.timeout, Duration::from_secs(5));
        assert_eq!(config.retry, RetryConfig::default());
        assert!(!config.enrich_run_id);
    }

    #[test]
    fn insecure_grpc_without_scheme_and_json_http() {
        let config = validate_exporter(
            "otlp",
            "otlp",
            raw("endpoint: 127.0.0.1:4317\ntls: {insecure: true}\ncompression: none"),
            "e",
        )
        .unwrap();
        assert_eq!(config.endpoint, "http://127.0.0.1:4317");
        assert_eq!(config.compression, Compression::None);
        let config = validate_exporter(
            "otlphttp/b",
            "otlphttp",
            raw(
                "endpoint: http://h:4318\nencoding: json\nheaders: {X-Key: v}\n\
                 retry_on_failure: {max_elapsed_time: 0}",
            ),
            "e",
        )
        .unwrap();
        assert_eq!(config.protocol, ExporterProtocol::HttpJson);
        assert_eq!(config.headers, [("x-key".to_string(), "v".to_string())]);
        assert_eq!(config.retry.max_elapsed_time, None);
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let lines = messages(validate_exporter(
            "otlp",
            "otlp",
            raw(
                "endpoint: backend:4317\ncompression: lz5\ntimeout: 0s\nencoding: json\n\
                 tls: {ca_file: /ca.pem, server_name_override: \"a b\"}\n\
                 sending_queue: {queue_size_bytes: 0, when_full: later, num_consumers: 0}\n\
                 retry_on_failure: {multiplier: 0.5}",
            ),
            "exporters.otlp",
        ));
        for expected in [
            "exporters.otlp.encoding: only the otlphttp exporter",
            "exporters.otlp.tls.server_name_override: \"a b\" is not a DNS name",
            "exporters.otlp.sending_queue.when_full: unknown value \"later\"",
            "exporters.otlp.sending_queue.num_consumers: must be between 1 and 1000",
            "exporters.otlp.compression: unknown compression \"lz5\"",
            "exporters.otlp.timeout: must be greater than 0",
            "exporters.otlp.retry_on_failure.multiplier: must be at least 1",
            "exporters.otlp.sending_queue.queue_size_bytes: must be greater than 0",
        ] {
            assert!(
                lines.iter().any(|line| line.starts_with(expected)),
                "{expected} not in {lines:?}"
            );
        }
        let lines = messages(validate_exporter(
            "otlphttp",
            "otlphttp",
            raw("{}"),
            "exporters.otlphttp",
        ));
        assert_eq!(
            lines,
            ["exporters.otlphttp.endpoint: missing: the backend's address, e.g. http://127.0.0.1:4317"]
        );
    }

    #[test]
    fn batching_is_off_unless_configured_and_takes_the_collectors_keys() {
        let config = validate_exporter("otlp", "otlp", raw("endpoint: h:4317"), "e").unwrap();
        assert_eq!(config.batch, None);
        let config = validate_exporter(
            "otlp",
            "otlp",
            raw("endpoint: h:4317\nsending_queue: {batch: {}}"),
            "e",
        )
        .unwrap();
        assert_eq!(
            config.batch,
            Some(BatchConfig {
                flush_timeout: Duration::from_millis(200),
                min_size: 8192,
                max_size: 0,
                sizer: BatchSizer::Items,
            })
        );
        let config = validate_exporter(
            "otlphttp",
            "otlphttp",
            raw("endpoint: http://h:4318\nsending_queue:\n  batch: \
                 {flush_timeout: 50ms, min_size: 1000, max_size: 4000, sizer: bytes}"),
            "e",
        )
        .unwrap();
        assert_eq!(
            config.batch,
            Some(BatchConfig {
                flush_timeout: Duration::from_millis(50),
                min_size: 1000,
                max_size: 4000,
                sizer: BatchSizer::Bytes,
            })
        );
        let lines = messages(validate_exporter(
            "otlp",
            "otlp",
            raw("endpoint: h:4317\nsending_queue: \
                 {batch: {flush_timeout: 0s, min_size: 10, max_size: 5, sizer: requests}}"),
            "exporters.otlp",
        ));
        for expected in [
            "exporters.otlp.sending_queue.batch.flush_timeout: must be greater than 0",
            "exporters.otlp.sending_queue.batch.sizer: unknown sizer \"requests\"",
            "exporters.otlp.sending_queue.batch.max_size: must be 0 (no limit) or at least min_size (10), got 5",
        ] {
            assert!(
                lines.iter().any(|line| line.starts_with(expected)),
                "{expected} not in {lines:?}"
            );
        }
        let unknown = serde_yaml_ng::from_str::<RawOtlpExporter>(
            "endpoint: h:4317\nsending_queue: {batch: {send_batch_size: 5}}",
        );
        assert!(unknown.is_err(), "unknown batch keys are refused");
    }

    #[test]
    fn tls_follows_the_scheme() {
        let config = validate_exporter(
            "otlp",
            "otlp",
            raw("endpoint: backend:4317\ntls: {ca_file: ca.pem, server_name_override: b.example}"),
            "e",
        )
        .unwrap();
        assert_eq!(config.endpoint, "https://backend:4317");
        let tls = config.tls.unwrap();
        assert_eq!(tls.ca_file, Some(PathBuf::from("ca.pem")));
        assert_eq!(tls.server_name_override.as_deref(), Some("b.example"));
        assert_eq!(config.num_consumers, DEFAULT_NUM_CONSUMERS);
        assert_eq!(config.when_full, WhenFull::Refuse);
        let config = validate_exporter(
            "otlphttp",
            "otlphttp",
            raw(
                "endpoint: https://h/\ntls: {cert_file: c.pem, key_file: k.pem}\n\
                 sending_queue: {when_full: drop_oldest, num_consumers: 1}",
            ),
            "e",
        )
        .unwrap();
        assert_eq!(config.endpoint, "https://h");
        assert_eq!(config.tls.unwrap().key_file, Some(PathBuf::from("k.pem")));
        assert_eq!(config.when_full, WhenFull::DropOldest);
        assert_eq!(config.num_consumers, 1);
        let plain = validate_exporter(
            "otlp",
            "otlp",
            raw("endpoint: http://h:1\ntls: {insecure: true}"),
            "e",
        )
        .unwrap();
        assert_eq!(plain.tls, None);

        let lines = messages(validate_exporter(
            "otlp",
            "otlp",
            raw("endpoint: http://h:1\ntls: {ca_file: ca.pem, insecure_skip_verify: true}"),
            "x",
        ));
        assert_eq!(
            lines,
            [
                "x.tls.ca_file: has no effect on a plain-text endpoint; use an https:// endpoint",
                "x.tls.insecure_skip_verify: has no effect on a plain-text endpoint; use an https:// endpoint",
            ]
        );
        let lines = messages(validate_exporter(
            "otlp",
            "otlp",
            raw("endpoint: https://h:1\ntls: {insecure: true, cert_file: c.pem}"),
            "x",
        ));
        assert_eq!(
            lines,
            [
                "x.tls.insecure: true asks for plain text, but the endpoint is https://",
                "x.tls.key_file: missing: cert_file needs its key",
            ]
        );
    }
}
