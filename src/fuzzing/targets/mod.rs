//! The fuzz targets, one module per entry point, and how their inputs are read.
//!
//! Inputs of the span-based targets (`attributes`, `interpret_span`, `interpret_log`,
//! `ingest`) come in three forms, by first byte: `P` then an `ExportTraceServiceRequest` in
//! protobuf, `L` then an `ExportLogsServiceRequest` in protobuf (real requests, as the seeds and
//! the size probes are), anything else a [`Source`] for the structure-aware generators.

mod api;
mod attributes;
mod codecs;
mod config;
mod decode;
mod ingest;
mod interpret;
mod media;
pub(crate) mod seeds;
mod selftest;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use super::engine::Target;
use super::generate;
use super::Source;

/// Every target.
pub fn all() -> Vec<Target> {
    vec![
        decode::TARGET,
        attributes::TARGET,
        interpret::SPAN_TARGET,
        interpret::LOG_TARGET,
        ingest::TARGET,
        codecs::TARGET,
        media::TARGET,
        config::TARGET,
        api::TARGET,
    ]
}

/// The target named `name`, the engine's [`selftest`] included.
pub fn by_name(name: &str) -> Option<Target> {
    all()
        .into_iter()
        .chain([selftest::TARGET])
        .find(|t| t.name == name)
}

/// Spans and log records of one input of a span-based target.
pub(crate) struct Telemetry {
    pub spans: Vec<Span>,
    pub logs: Vec<LogRecord>,
}

/// Reads an input of a span-based target (see the module doc); `max_spans` bounds generated
/// spans (protobuf input is bounded by its size).
pub(crate) fn telemetry(data: &[u8], max_spans: usize) -> Telemetry {
    match data.first() {
        Some(b'P') => Telemetry {
            spans: ExportTraceServiceRequest::decode(&data[1..])
                .map(|r| {
                    r.resource_spans
                        .into_iter()
                        .flat_map(|r| r.scope_spans)
                        .flat_map(|s| s.spans)
                        .collect()
                })
                .unwrap_or_default(),
            logs: Vec::new(),
        },
        Some(b'L') => Telemetry {
            spans: Vec::new(),
            logs: ExportLogsServiceRequest::decode(&data[1..])
                .map(|r| {
                    r.resource_logs
                        .into_iter()
                        .flat_map(|r| r.scope_logs)
                        .flat_map(|s| s.log_records)
                        .collect()
                })
                .unwrap_or_default(),
        },
        _ => {
            let mut src = Source::new(data);
            let spans = generate::spans(&mut src, max_spans);
            let n = src.count(1024);
            let logs = (0..n).map(|_| generate::log_record(&mut src)).collect();
            Telemetry { spans, logs }
        }
    }
}

/// A trace request of `spans` as a `P` input.
pub(crate) fn trace_input(spans: Vec<Span>) -> Vec<u8> {
    let mut out = vec![b'P'];
    out.extend(seeds::request(spans).encode_to_vec());
    out
}

/// A logs request of `records` as an `L` input.
pub(crate) fn logs_input(records: Vec<LogRecord>) -> Vec<u8> {
    let mut out = vec![b'L'];
    out.extend(seeds::logs_request(records).encode_to_vec());
    out
}

/// Scales a span-based input: a protobuf request repeated (its spans or records ×k, as
/// protobuf concatenation appends repeated fields), generator bytes repeated.
pub(crate) fn scale_telemetry(data: &[u8], k: usize) -> Vec<u8> {
    match data.first() {
        Some(&tag @ (b'P' | b'L')) => {
            let mut out = vec![tag];
            out.extend(data[1..].repeat(k));
            out
        }
        _ => data.repeat(k),
    }
}

/// Checks that a JSON value written as text reads back (every record stepline writes must read
/// back): panics otherwise. Equality is not checked: without serde_json's `float_roundtrip`
/// a float may come back in its last bit.
pub(crate) fn assert_reads_back(what: &str, value: &serde_json::Value) {
    let text = value.to_string();
    if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
        panic!("{what} does not read back: {e}");
    }
}
