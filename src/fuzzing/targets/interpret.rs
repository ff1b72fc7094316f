//! `interpret_span` and `interpret_log`: the interpreter's entry points on generated or decoded
//! spans and log records.
//!
//! Invariants: no panic (or stack overflow); `interpret_span_with` and its prefix memo give the
//! same fact as `interpret_span`; the stored form of every fact, message body and log event
//! reads back (serde_json, as the store reads them); a model request's content rebuilt from
//! the log records of its span (`with_log_content`) reads back too.

use crate::domain::MessageHash;
use crate::fuzzing::engine::{bucket, note, Probe, Target};
use crate::fuzzing::generate::kv;
use crate::interpreter::{
    interpret_log, interpret_span, interpret_span_with, with_log_content, FactKind, Interpreted,
    LogEvent, PrefixMemo, StoredFact,
};

use super::{assert_reads_back, logs_input, scale_telemetry, seeds, telemetry, trace_input};

/// `interpret_span`.
pub const SPAN_TARGET: Target = Target {
    name: "interpret_span",
    about: "interpreter::interpret_span / interpret_span_with over generated or decoded spans",
    run: run_spans,
    max_len: 64 * 1024,
    scale: scale_telemetry,
    probes: span_probes,
    seeds: span_seeds,
};

/// `interpret_log`.
pub const LOG_TARGET: Target = Target {
    name: "interpret_log",
    about: "interpreter::interpret_log and with_log_content over generated or decoded log records",
    run: run_logs,
    max_len: 64 * 1024,
    scale: scale_telemetry,
    probes: log_probes,
    seeds: log_seeds,
};

/// Checks that what interpreting a span produced is stored in a form that reads back.
pub(crate) fn check_interpreted(i: &Interpreted) {
    let stored = StoredFact::of(&i.fact);
    let text = match serde_json::to_string(&stored) {
        Ok(t) => t,
        Err(e) => panic!("a fact does not serialize: {e}"),
    };
    if let Err(e) = serde_json::from_str::<StoredFact>(&text) {
        panic!("a stored fact does not read back: {e}");
    }
    for (_, body) in &i.messages {
        assert_reads_back("a message body", body);
    }
    for m in i.shared.iter() {
        assert_reads_back("a shared message body", &m.body);
    }
}

fn note_fact(i: &Interpreted) {
    let f = &i.fact;
    note((
        "fact",
        f.kind as u8,
        bucket(f.input.as_ref().map_or(0, |v| v.len())),
        bucket(f.output.as_ref().map_or(0, |v| v.len())),
        bucket(f.requested_calls.len()),
        f.content_problem.is_some(),
        f.error.is_some(),
        f.pending,
        f.arguments.is_some(),
        f.result.is_some(),
    ));
    if let Some(problem) = &f.content_problem {
        note(
            problem
                .split(|c: char| !c.is_alphabetic() && c != ' ')
                .next()
                .unwrap_or_default()
                .to_string(),
        );
    }
}

fn run_spans(data: &[u8]) {
    let t = telemetry(data, 16);
    let memo = PrefixMemo::default();
    for span in &t.spans {
        let plain = interpret_span(span);
        let with = interpret_span_with(span, &memo, &crate::limits::Limits::default()).ok();
        match (&plain, &with) {
            (Some(a), Some(b)) => {
                assert!(
                    a.run_span_id == b.run_span_id,
                    "the memo changes the run span"
                );
                assert!(a.fact == b.fact, "the memo changes the fact");
                note_fact(a);
                check_interpreted(a);
                check_interpreted(b);
            }
            (None, None) => note("not an agent span"),
            _ => panic!("the memo changes whether a span is interpreted"),
        }
    }
}

fn check_event(e: &LogEvent) {
    let text = serde_json::to_string(e)
        .unwrap_or_else(|err| panic!("a log event does not serialize: {err}"));
    if let Err(err) = serde_json::from_str::<LogEvent>(&text) {
        panic!("a stored log event does not read back: {err}");
    }
    let _ = e.order_key();
}

fn run_logs(data: &[u8]) {
    let t = telemetry(data, 4);
    let events: Vec<LogEvent> = t
        .logs
        .iter()
        .filter_map(|r| interpret_log(r, &crate::limits::Limits::default()).ok())
        .collect();
    note(("log events", bucket(events.len())));
    for e in &events {
        note(("event", e.name.clone(), e.message_index.is_some()));
        check_event(e);
    }
    for span in &t.spans {
        let Some(i) = interpret_span(span) else {
            continue;
        };
        if i.fact.kind != FactKind::ModelRequest {
            continue;
        }
        let mine: Vec<LogEvent> = events
            .iter()
            .filter(|e| e.trace_id == i.fact.trace_id && e.span_id == i.fact.span_id)
            .cloned()
            .collect();
        let (fact, messages) = with_log_content(&i.fact, &mine);
        note(("with logs", fact.content_from_logs, bucket(messages.len())));
        for (hash, body) in &messages {
            assert!(
                *hash == MessageHash::of(body),
                "a rebuilt message's hash is not its body's"
            );
            assert_reads_back("a message rebuilt from log records", body);
        }
        let stored = StoredFact::of(&fact);
        let text = serde_json::to_string(&stored).unwrap_or_default();
        if let Err(e) = serde_json::from_str::<StoredFact>(&text) {
            panic!("a fact rebuilt from log records does not read back: {e}");
        }
    }
}

/// One model request whose output asks for `n` tool calls.
fn tool_calls(n: usize) -> Vec<u8> {
    let calls: Vec<_> = (0..n)
        .map(|i| serde_json::json!({"type":"tool_call","id":format!("c{i}"),"name":"t","arguments":{"i":i}}))
        .collect();
    let output = serde_json::json!([{"role":"assistant","parts":calls}]).to_string();
    trace_input(vec![seeds::span(
        0,
        2,
        1,
        "chat m",
        1,
        vec![
            kv("gen_ai.operation.name", "chat"),
            kv(
                "gen_ai.input.messages",
                r#"[{"role":"user","parts":[{"type":"text","content":"go"}]}]"#,
            ),
            kv("gen_ai.output.messages", output),
        ],
    )])
}

/// One model request whose input history holds `n` messages.
fn history(n: usize) -> Vec<u8> {
    let messages: Vec<_> = (0..n)
        .map(|i| serde_json::json!({"role": if i % 2 == 0 {"user"} else {"assistant"}, "parts":[{"type":"text","content":format!("m{i}")}]}))
        .collect();
    trace_input(vec![seeds::span(
        0,
        2,
        1,
        "chat m",
        1,
        vec![
            kv("gen_ai.operation.name", "chat"),
            kv(
                "gen_ai.input.messages",
                serde_json::Value::Array(messages).to_string(),
            ),
        ],
    )])
}

/// One span with `n` `operation.details` events of one attribute each.
fn events(n: usize) -> Vec<u8> {
    let mut s = seeds::span(
        0,
        2,
        1,
        "chat m",
        1,
        vec![kv("gen_ai.operation.name", "chat")],
    );
    for i in 0..n {
        s.events
            .push(opentelemetry_proto::tonic::trace::v1::span::Event {
                time_unix_nano: i as u64,
                name: "gen_ai.client.inference.operation.details".into(),
                attributes: vec![kv(
                    "gen_ai.input.messages",
                    format!(r#"[{{"role":"user","parts":[{{"type":"text","content":"{i}"}}]}}]"#),
                )],
                ..Default::default()
            });
    }
    trace_input(vec![s])
}

/// An OpenInference LLM span with `n` flattened input messages.
fn flattened(n: usize) -> Vec<u8> {
    let mut attrs = vec![kv("openinference.span.kind", "LLM")];
    for i in 0..n {
        attrs.push(kv(format!("llm.input_messages.{i}.message.role"), "user"));
        attrs.push(kv(format!("llm.input_messages.{i}.message.content"), "hi"));
    }
    trace_input(vec![seeds::span(1, 2, 1, "response", 1, attrs)])
}

fn span_probes() -> Vec<Probe> {
    vec![
        Probe {
            name: "tool calls in one response",
            make: tool_calls,
            n: 200,
            open: false,
        },
        Probe {
            name: "input history messages",
            make: history,
            n: 500,
            open: false,
        },
        Probe {
            name: "operation.details events",
            make: events,
            n: 200,
            open: false,
        },
        Probe {
            name: "OpenInference flattened messages",
            make: flattened,
            n: 500,
            open: false,
        },
    ]
}

fn span_seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = seeds::span_sets().into_iter().map(trace_input).collect();
    out.push(tool_calls(3));
    out.push(events(2));
    for s in [
        &b"\x00\x01\x02\x03\x04"[..],
        &b"\x05\x00\x07\x10gen_ai.input.messages"[..],
    ] {
        out.push(s.to_vec());
    }
    out
}

/// `n` legacy user-message events of one span.
fn log_records(n: usize) -> Vec<u8> {
    let (_, mut logs) = seeds::legacy_events();
    let first = logs.remove(1);
    let records = (0..n)
        .map(|i| {
            let mut r = first.clone();
            r.time_unix_nano = i as u64;
            r
        })
        .collect();
    logs_input(records)
}

fn log_probes() -> Vec<Probe> {
    vec![Probe {
        name: "log records of one span",
        make: log_records,
        n: 500,
        open: false,
    }]
}

fn log_seeds() -> Vec<Vec<u8>> {
    let (_, logs) = seeds::legacy_events();
    vec![
        logs_input(logs),
        log_records(3),
        b"\x01\x01\x00\x05".to_vec(),
    ]
}
