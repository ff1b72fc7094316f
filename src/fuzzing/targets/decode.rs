//! `otlp_http_decode`: OTLP/HTTP payload handling as the HTTP receiver does it — `Content-Type`
//! and `Content-Encoding` negotiation, bounded gzip/zstd decompression, protobuf and OTLP/JSON
//! decoding of trace, logs and metrics requests.
//!
//! Input: byte 0 picks the `Content-Type`, byte 1 the `Content-Encoding`, byte 2 the signal
//! (bits 0-1) and whether the harness compresses the body itself first (bit 2, so the decoders
//! after decompression see mutated payloads, not only broken streams); the rest is the body.
//! Invariants: no panic; output within the limit; a decoded protobuf request re-encodes to
//! bytes that decode and re-encode to the same bytes.

use std::io::Write;

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde::de::DeserializeOwned;

use super::seeds;
use crate::fuzzing::engine::{bucket, note, Probe, Target};
use crate::receiver::decode::{decode_request, decompress, ContentEncoding, PayloadFormat};

/// The target.
pub const TARGET: Target = Target {
    name: "otlp_http_decode",
    about: "receiver::decode: content negotiation, gzip/zstd, protobuf and OTLP/JSON",
    run,
    max_len: 64 * 1024,
    scale,
    probes,
    seeds,
};

const CONTENT_TYPES: &[&str] = &[
    "application/x-protobuf",
    "application/json",
    "application/json; charset=utf-8",
    " Application/JSON ",
    "application/x-protobuf;;;",
    "text/plain",
    "",
];
const ENCODINGS: &[&str] = &[
    "identity",
    "gzip",
    "zstd",
    "identity, zstd",
    "gzip, zstd",
    "x-gzip",
    "br",
    "none",
    "GZIP",
    ",",
];
/// Decompressed bytes allowed (the receivers' limit is configurable; the logic is the same).
const LIMIT: usize = 1024 * 1024;

fn headers(data: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::new();
    let ct = usize::from(data.first().copied().unwrap_or(0));
    if ct < CONTENT_TYPES.len() {
        map.insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPES[ct]));
    } else if ct < 250 {
        map.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(CONTENT_TYPES[ct % 2]),
        );
    }
    let ce = usize::from(data.get(1).copied().unwrap_or(0));
    if ce < ENCODINGS.len() {
        map.insert(CONTENT_ENCODING, HeaderValue::from_static(ENCODINGS[ce]));
    } else if ce >= 250 {
        map.append(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        map.append(CONTENT_ENCODING, HeaderValue::from_static("identity"));
    }
    map
}

fn run(data: &[u8]) {
    let map = headers(data);
    let flags = data.get(2).copied().unwrap_or(0);
    let body = data.get(3..).unwrap_or_default();
    let format = match PayloadFormat::from_headers(&map) {
        Ok(f) => f,
        Err(e) => {
            note(("content-type", e.to_string().len() > 40));
            PayloadFormat::Protobuf
        }
    };
    let encoding = match ContentEncoding::from_headers(&map) {
        Ok(e) => e,
        Err(_) => {
            note("content-encoding error");
            ContentEncoding::Identity
        }
    };
    let body = if flags & 4 != 0 {
        compress(encoding, body)
    } else {
        body.to_vec()
    };
    let out = match decompress(encoding, Bytes::from(body), LIMIT) {
        Ok(out) => out,
        Err(e) => {
            note(("decompress", encoding.name(), discriminant(&e.to_string())));
            return;
        }
    };
    assert!(out.len() <= LIMIT, "decompressed past the limit");
    match flags & 3 {
        0 => check::<ExportTraceServiceRequest>(format, &out, "ExportTraceServiceRequest", |r| {
            r.resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len())
                .sum()
        }),
        1 => check::<ExportLogsServiceRequest>(format, &out, "ExportLogsServiceRequest", |r| {
            r.resource_logs
                .iter()
                .flat_map(|r| &r.scope_logs)
                .map(|s| s.log_records.len())
                .sum()
        }),
        _ => {
            check::<ExportMetricsServiceRequest>(format, &out, "ExportMetricsServiceRequest", |r| {
                r.resource_metrics.len()
            })
        }
    }
}

/// The first words of an error message, as a feature.
fn discriminant(message: &str) -> String {
    message
        .split(':')
        .next()
        .unwrap_or_default()
        .chars()
        .take(40)
        .collect()
}

fn check<T>(format: PayloadFormat, body: &[u8], name: &'static str, items: fn(&T) -> usize)
where
    T: Message + Default + DeserializeOwned,
{
    match decode_request::<T>(format, body, name) {
        Ok(request) => {
            note((name, format == PayloadFormat::Json, bucket(items(&request))));
            let once = request.encode_to_vec();
            let again = T::decode(once.as_slice()).unwrap_or_else(|e| {
                panic!("a decoded {name} re-encodes to bytes that do not decode: {e}")
            });
            assert!(
                again.encode_to_vec() == once,
                "{name} does not re-encode to the same bytes"
            );
        }
        Err(e) => note((
            name,
            format == PayloadFormat::Json,
            discriminant(&e.to_string()),
        )),
    }
}

fn compress(encoding: ContentEncoding, body: &[u8]) -> Vec<u8> {
    match encoding {
        ContentEncoding::Identity => body.to_vec(),
        ContentEncoding::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            let _ = e.write_all(body);
            e.finish().unwrap_or_default()
        }
        ContentEncoding::Zstd => zstd::encode_all(body, 1).unwrap_or_default(),
    }
}

fn scale(data: &[u8], k: usize) -> Vec<u8> {
    let head = data.get(..3).unwrap_or(data);
    let mut out = head.to_vec();
    out.extend(data.get(3..).unwrap_or_default().repeat(k));
    out
}

/// A JSON trace request of `n` spans.
fn json_spans(n: usize) -> Vec<u8> {
    let spans: Vec<_> = (0..n)
        .map(|i| {
            seeds::span(
                0,
                (i % 200) as u8 + 1,
                0,
                "chat m",
                i as u64,
                vec![crate::fuzzing::generate::kv(
                    "gen_ai.operation.name",
                    "chat",
                )],
            )
        })
        .collect();
    let mut out = vec![1, 0, 0];
    out.extend(serde_json::to_vec(&seeds::request(spans)).unwrap_or_default());
    out
}

/// A gzip protobuf trace request of `n` spans, compressed by the harness.
fn gzip_spans(n: usize) -> Vec<u8> {
    let spans: Vec<_> = (0..n)
        .map(|i| seeds::span(0, (i % 200) as u8 + 1, 0, "chat m", i as u64, Vec::new()))
        .collect();
    let mut out = vec![0, 1, 4];
    out.extend(seeds::request(spans).encode_to_vec());
    out
}

/// A JSON request whose one attribute is an array of `n` values.
fn json_array(n: usize) -> Vec<u8> {
    let values: Vec<String> = (0..n).map(|i| format!(r#"{{"intValue":"{i}"}}"#)).collect();
    let body = format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"traceId":"07070707070707070707070707070707","spanId":"0101010101010101","attributes":[{{"key":"k","value":{{"arrayValue":{{"values":[{}]}}}}}}]}}]}}]}}]}}"#,
        values.join(",")
    );
    let mut out = vec![1, 0, 0];
    out.extend(body.into_bytes());
    out
}

fn probes() -> Vec<Probe> {
    vec![
        Probe {
            name: "json spans",
            make: json_spans,
            n: 250,
            open: false,
        },
        Probe {
            name: "gzip protobuf spans",
            make: gzip_spans,
            n: 1000,
            open: false,
        },
        Probe {
            name: "json array attribute",
            make: json_array,
            n: 2000,
            open: false,
        },
    ]
}

fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (i, spans) in seeds::span_sets().into_iter().enumerate() {
        let request = seeds::request(spans);
        let mut proto = vec![
            0,
            if i % 2 == 0 { 0 } else { 1 },
            if i % 2 == 0 { 0 } else { 4 },
        ];
        proto.extend(request.encode_to_vec());
        out.push(proto);
        let mut json = vec![1, 0, 0];
        json.extend(serde_json::to_vec(&request).unwrap_or_default());
        out.push(json);
    }
    let (_, logs) = seeds::legacy_events();
    let request = seeds::logs_request(logs);
    let mut json = vec![1, 0, 1];
    json.extend(serde_json::to_vec(&request).unwrap_or_default());
    out.push(json);
    let mut proto = vec![0, 2, 5];
    proto.extend(request.encode_to_vec());
    out.push(proto);
    out.push([vec![1, 0, 2], br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","gauge":{"dataPoints":[{"asInt":"3","timeUnixNano":"1"}]}}]}]}]}"#.to_vec()].concat());
    // A real gzip body (not compressed by the harness) and a zstd one.
    let request = seeds::request(seeds::pydantic_ai()).encode_to_vec();
    out.push([vec![0, 1, 0], compress(ContentEncoding::Gzip, &request)].concat());
    out.push([vec![0, 2, 0], compress(ContentEncoding::Zstd, &request)].concat());
    out
}
