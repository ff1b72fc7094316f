//! Tests of `enrich`: entries carry their span→run block through the outbox encoding, and the
//! spans it lists are tagged with that run id, group children included.

use super::*;
use crate::config::SignalKind;
use crate::outbox::OutboxEntry;
use crate::test_fixtures::{kv, openinference_scenario, openllmetry_scenario, request, span};
use crate::test_fixtures::{strands_scenario, TRACE};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// The run id a span carries, if any (and how many times the attribute is there).
fn tags(span: &Span) -> Vec<String> {
    span.attributes
        .iter()
        .filter(|kv| kv.key == RUN_ID_ATTRIBUTE)
        .map(
            |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                other => panic!("not a string: {other:?}"),
            },
        )
        .collect()
}

fn span_run(span: &Span, run_id: &str) -> SpanRun {
    SpanRun {
        trace_id: span.trace_id.as_slice().try_into().unwrap(),
        span_id: span.span_id.as_slice().try_into().unwrap(),
        run_id: run_id.to_owned(),
    }
}

/// An outbox entry of `request` with `span_runs`, written and read back as the store does.
fn stored_entry(request: &ExportTraceServiceRequest, span_runs: Vec<SpanRun>) -> OutboxEntry {
    let mut entry = OutboxEntry::new(
        SignalKind::Traces,
        request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len() as u64)
            .sum(),
        request.encode_to_vec(),
    );
    entry.seq = 7;
    entry.span_runs = span_runs;
    OutboxEntry::decode(&entry.key(), &entry.encode()).unwrap()
}

#[test]
fn every_listed_span_of_three_producers_gets_its_run_id() {
    // One request mixing Strands (cycles), OpenInference (CHAIN spans) and OpenLLMetry (a
    // task span) runs, each of whose spans the writer resolved to the run's id (not the id
    // of the group the span sits in).
    let strands = strands_scenario();
    let openinference = openinference_scenario();
    let openllmetry = openllmetry_scenario();
    let mut expected: Vec<(Vec<u8>, Vec<u8>, String)> = Vec::new();
    let mut span_runs = Vec::new();
    for (spans, run) in [
        (&strands, "strands-run"),
        (&openinference, "openinference-run"),
        (&openllmetry, "openllmetry-run"),
    ] {
        for s in spans.iter() {
            span_runs.push(span_run(s, run));
            expected.push((s.trace_id.clone(), s.span_id.clone(), run.to_owned()));
        }
    }
    let mut spans = [strands, openinference, openllmetry].concat();
    // A span of no run: not listed, left alone.
    let mut plain = span(
        99,
        0,
        "GET /health",
        1,
        vec![kv("http.request.method", "GET")],
    );
    plain.trace_id = vec![42; 16];
    spans.push(plain);
    let mut request = request(spans);
    let entry = stored_entry(&request, span_runs);
    assert_eq!(entry.span_runs.len(), expected.len());

    let tagged = add_run_ids(&mut request, &entry.span_runs);
    assert_eq!(tagged, expected.len());
    let spans = &request.resource_spans[0].scope_spans[0].spans;
    for s in spans {
        let want = expected
            .iter()
            .find(|(t, i, _)| *t == s.trace_id && *i == s.span_id)
            .map(|(_, _, run)| vec![run.clone()])
            .unwrap_or_default();
        assert_eq!(tags(s), want, "{}", s.name);
    }
    for name in ["execute_event_loop_cycle", "step.task"] {
        assert!(spans.iter().any(|s| s.name == name && !tags(s).is_empty()));
    }
    assert!(spans.iter().any(|s| s
        .attributes
        .iter()
        .any(|kv| kv.key == "openinference.span.kind"
            && kv.value.as_ref().and_then(|v| v.value.as_ref())
                == Some(&any_value::Value::StringValue("CHAIN".into())))
        && tags(s) == ["openinference-run"]));
}

#[test]
fn an_existing_attribute_is_kept_and_tagging_twice_adds_nothing() {
    let mut own = span(
        1,
        0,
        "invoke_agent a",
        1,
        vec![kv(RUN_ID_ATTRIBUTE, "theirs")],
    );
    own.attributes
        .push(kv("gen_ai.operation.name", "invoke_agent"));
    let child = span(2, 1, "chat", 2, vec![kv("gen_ai.operation.name", "chat")]);
    let runs = vec![span_run(&own, "ours"), span_run(&child, "ours")];
    let mut request = request(vec![own, child]);
    assert_eq!(add_run_ids(&mut request, &runs), 1);
    assert_eq!(add_run_ids(&mut request, &runs), 0);
    let spans = &request.resource_spans[0].scope_spans[0].spans;
    assert_eq!(tags(&spans[0]), ["theirs"]);
    assert_eq!(tags(&spans[1]), ["ours"]);
}

#[test]
fn malformed_ids_and_unlisted_spans_are_left_alone() {
    let mut short = span(3, 0, "short id", 1, vec![]);
    short.span_id = vec![3; 4];
    let mut no_trace = span(4, 0, "no trace id", 1, vec![]);
    no_trace.trace_id.clear();
    let other_trace = SpanRun {
        trace_id: [8; 16],
        span_id: [5; 8],
        run_id: "elsewhere".into(),
    };
    let listed = SpanRun {
        trace_id: TRACE,
        span_id: [3; 8],
        run_id: "r".into(),
    };
    let before = request(vec![short, no_trace, span(5, 0, "unlisted", 1, vec![])]);
    let mut after = before.clone();
    assert_eq!(add_run_ids(&mut after, &[listed, other_trace]), 0);
    assert_eq!(after, before);
    assert_eq!(add_run_ids(&mut after, &[]), 0);
    assert_eq!(after, before);
}

#[test]
fn many_spans_and_runs_are_tagged_in_linear_time() {
    // 200,000 spans of one trace, each listed: one pass and one hash map, well under a second
    // even in a loaded debug-free build; a quadratic scan would take minutes.
    let n: u32 = 200_000;
    let spans: Vec<Span> = (0..n)
        .map(|i| Span {
            trace_id: TRACE.to_vec(),
            span_id: [&i.to_be_bytes()[..], &[0; 4]].concat(),
            name: "s".into(),
            ..Default::default()
        })
        .collect();
    let runs: Vec<SpanRun> = spans
        .iter()
        .map(|s| span_run(s, if s.span_id[3] % 2 == 0 { "even" } else { "odd" }))
        .collect();
    let mut request = request(spans);
    let started = std::time::Instant::now();
    assert_eq!(add_run_ids(&mut request, &runs), n as usize);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let spans = &request.resource_spans[0].scope_spans[0].spans;
    assert_eq!(tags(&spans[0]), ["even"]);
    assert_eq!(tags(&spans[1]), ["odd"]);
}
