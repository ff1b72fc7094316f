//! `attributes`: attribute reading and flattening — `Attributes::indexed` (flattened
//! `{prefix}.{i}.a.b` lists rebuilt as JSON), `any_to_json`, `json`, `loose_json`, `str`, `int`
//! — over the attributes of generated or decoded spans and their events.
//!
//! Invariants: no panic (or stack overflow); every value built reads back as JSON (what the
//! interpreter builds from attributes ends up in stored records).

use opentelemetry_proto::tonic::common::v1::KeyValue;

use super::{assert_reads_back, scale_telemetry, seeds, telemetry, trace_input};
use crate::fuzzing::engine::{bucket, note, Probe, Target};
use crate::fuzzing::generate::kv;
use crate::interpreter::attributes::{any_to_json, Attributes};

/// The target.
pub const TARGET: Target = Target {
    name: "attributes",
    about: "interpreter::attributes: indexed flattening, any_to_json, json/loose_json",
    run,
    max_len: 64 * 1024,
    scale: scale_telemetry,
    probes,
    seeds,
};

const PREFIXES: &[&str] = &[
    "gen_ai.prompt",
    "gen_ai.completion",
    "llm.input_messages",
    "llm.output_messages",
    "llm.tools",
];

fn check(attrs: &[KeyValue]) {
    let a = Attributes(attrs);
    for prefix in PREFIXES {
        let items = a.indexed(prefix);
        note(("indexed", *prefix, bucket(items.len())));
        for item in &items {
            assert_reads_back("an indexed attribute list item", item);
        }
    }
    for kv in attrs.iter().take(64) {
        if let Some(v) = &kv.value {
            assert_reads_back("an attribute value", &any_to_json(v));
        }
        if let Some(Ok(v)) = a.json(&kv.key) {
            note(("json", v.is_array(), v.is_object()));
            assert_reads_back("a JSON attribute", &v);
        }
        if let Some(v) = a.loose_json(&[kv.key.as_str()]) {
            assert_reads_back("a loose JSON attribute", &v);
        }
        let _ = a.str(&[kv.key.as_str()]);
        let _ = a.int(&[kv.key.as_str()]);
    }
}

fn run(data: &[u8]) {
    let t = telemetry(data, 8);
    for span in &t.spans {
        check(&span.attributes);
        for event in &span.events {
            check(&event.attributes);
        }
    }
    for record in &t.logs {
        check(&record.attributes);
    }
}

/// One key of `gen_ai.prompt.0.` followed by `n` segments.
fn long_key(n: usize) -> Vec<u8> {
    let key = format!("gen_ai.prompt.0{}", ".a".repeat(n));
    trace_input(vec![seeds::span(0, 1, 0, "chat", 1, vec![kv(key, "x")])])
}

/// `n` flattened message attributes of one span.
fn many_indexed(n: usize) -> Vec<u8> {
    let attrs = (0..n)
        .flat_map(|i| {
            [
                kv(format!("llm.input_messages.{i}.message.role"), "user"),
                kv(format!("llm.input_messages.{i}.message.content"), "hi"),
            ]
        })
        .collect();
    trace_input(vec![seeds::span(0, 1, 0, "chat", 1, attrs)])
}

fn probes() -> Vec<Probe> {
    vec![
        Probe {
            name: "key segments",
            make: long_key,
            n: 100,
            open: false,
        },
        Probe {
            name: "indexed attributes",
            make: many_indexed,
            n: 1000,
            open: false,
        },
    ]
}

fn seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = seeds::span_sets().into_iter().map(trace_input).collect();
    out.push(long_key(3));
    out.push(many_indexed(3));
    out.push(b"\x04\x01\x05gen_ai.prompt.0.role".to_vec());
    out
}
