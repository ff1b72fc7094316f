//! The span→run block the writer puts in a traces request's outbox entry: every span whose fact
//! lands in a run maps to that run's real id (the one the API lists), children of grouping
//! spans (Strands cycles, OpenInference CHAIN, Traceloop task) included.

use std::collections::{BTreeMap, BTreeSet};

use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use super::*;
use crate::config::SignalKind;
use crate::interpreter::interpret_span;
use crate::outbox::OutboxEntry;
use crate::store::RunFilter;
use crate::test_fixtures::{
    openinference_scenario, openllmetry_scenario, request, run_id, strands_delegate,
    strands_scenario,
};

/// Span ids (binary) of a stored entry's run block.
type SpanKey = ([u8; 16], [u8; 8]);

/// A received traces request holding `spans`, with its outbox entry (seq `seq`).
fn received(spans: &[Span], seq: u64) -> Work {
    let mut entry = OutboxEntry::new(
        SignalKind::Traces,
        spans.len() as u64,
        request(spans.to_vec()).encode_to_vec(),
    );
    entry.seq = seq;
    Work::Received {
        spans: spans.iter().filter_map(interpret_span).collect(),
        logs: Vec::new(),
        outbox: Some(entry),
    }
}

fn key(span: &Span) -> SpanKey {
    (
        span.trace_id.as_slice().try_into().unwrap(),
        span.span_id.as_slice().try_into().unwrap(),
    )
}

/// The run id of the run whose agent span is `[span; 8]` in trace `[trace; 16]`.
fn run_in(trace: u8, span: u8) -> String {
    format!("{}-{}", hex::encode([trace; 16]), hex::encode([span; 8]))
}

/// The span→run map of each stored outbox entry, by seq.
fn stored_blocks(store: &Store) -> BTreeMap<u64, BTreeMap<SpanKey, String>> {
    store
        .outbox_after(0, 100, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|entry| {
            let block = entry
                .span_runs
                .iter()
                .map(|s| ((s.trace_id, s.span_id), s.run_id.clone()))
                .collect();
            (entry.seq, block)
        })
        .collect()
}

fn listed_runs(store: &Store) -> BTreeSet<String> {
    let (runs, _) = store.list_runs(&RunFilter::default(), None, 100).unwrap();
    runs.into_iter().map(|r| r.run_id).collect()
}

/// Exactly the spans of `spans` whose facts are stored in a listed run are mapped, each to
/// that run; the interpreted spans left out are grouping spans of a run not shown (yet).
fn assert_every_fact_maps_to_its_run(
    store: &Store,
    spans: &[Span],
    block: &BTreeMap<SpanKey, String>,
) {
    let listed = listed_runs(store);
    let mut stored_in: BTreeMap<SpanKey, String> = BTreeMap::new();
    for run in &listed {
        for fact in store.facts(run).unwrap() {
            let mut key: SpanKey = ([0; 16], [0; 8]);
            hex::decode_to_slice(&fact.trace_id, &mut key.0).unwrap();
            hex::decode_to_slice(&fact.span_id, &mut key.1).unwrap();
            stored_in.insert(key, run.clone());
        }
    }
    let mut expected = BTreeMap::new();
    for span in spans {
        let Some(i) = interpret_span(span) else {
            continue;
        };
        match stored_in.get(&key(span)) {
            Some(run) => {
                expected.insert(key(span), run.clone());
            }
            None => assert_eq!(
                i.fact.kind,
                FactKind::Group,
                "span {} is in no listed run",
                hex::encode(&span.span_id)
            ),
        }
    }
    assert_eq!(block, &expected);
}

#[test]
fn every_interpreted_span_maps_to_its_runs_real_id_through_grouping_spans() {
    let store = Store::in_memory();
    let mut all = strands_scenario();
    all.extend(strands_delegate());
    all.extend(openinference_scenario());
    all.extend(openllmetry_scenario());
    let applied = apply_group(&store, &[received(&all, 1)], 1).unwrap();
    let Applied::Stored(Stored {
        outbox_bytes: Some(bytes),
    }) = &applied[0]
    else {
        panic!("{applied:?}");
    };
    let blocks = stored_blocks(&store);
    let block = &blocks[&1];
    assert_every_fact_maps_to_its_run(&store, &all, block);
    // The entry's stored size is what the writer was told (and within what it reserved).
    let entry = &store.outbox_after(0, 1, usize::MAX).unwrap()[0];
    assert_eq!(entry.size(), *bytes);
    assert!(*bytes <= entry.payload.len() as u64 + 9 + run_block_bound(block.len()));

    let run_of = |trace: &[u8], span: u8| {
        let trace: [u8; 16] = trace.try_into().unwrap();
        block[&(trace, [span; 8])].clone()
    };
    let strands_trace = &strands_scenario()[0].trace_id;
    // Strands: the cycles (2, 5) and their chats and tool (3, 4, 6) are the agent's run; the
    // delegate's cycle (9) and chat (8) are the delegate's.
    for span in [1, 2, 3, 4, 5, 6] {
        assert_eq!(
            run_of(strands_trace, span),
            run_id(1),
            "strands span {span}"
        );
    }
    for span in [7, 8, 9] {
        assert_eq!(
            run_of(strands_trace, span),
            run_id(7),
            "strands span {span}"
        );
    }
    // OpenInference: the responses under CHAIN turns land in their agent's run, not the turn's.
    assert_eq!(run_of(&[9; 16], 5), run_in(9, 3));
    assert_eq!(run_of(&[9; 16], 13), run_in(9, 3));
    assert_eq!(run_of(&[9; 16], 11), run_in(9, 9));
    // OpenLLMetry: the chat under `step.task` is the agent's.
    assert_eq!(run_of(&[10; 16], 5), run_in(10, 1));
    assert_eq!(run_of(&[10; 16], 2), run_in(10, 1));
}

#[test]
fn requests_of_a_group_each_map_their_own_spans() {
    // The Strands scenario cycle by cycle, in two requests of one write group, then its
    // delegate in a later group: each entry maps only its own spans, to the real run.
    let store = Store::in_memory();
    let strands = strands_scenario();
    let (first, second) = strands.split_at(3);
    let delegate = strands_delegate();
    apply_group(&store, &[received(first, 1), received(second, 2)], 1).unwrap();
    apply_group(&store, &[received(&delegate, 3)], 2).unwrap();
    let blocks = stored_blocks(&store);
    assert_eq!(blocks.len(), 3);
    assert_every_fact_maps_to_its_run(&store, first, &blocks[&1]);
    assert_every_fact_maps_to_its_run(&store, second, &blocks[&2]);
    assert_every_fact_maps_to_its_run(&store, &delegate, &blocks[&3]);
    for (seq, run) in [(1, run_id(1)), (2, run_id(1)), (3, run_id(7))] {
        assert!(!blocks[&seq].is_empty());
        assert!(blocks[&seq].values().all(|r| *r == run), "entry {seq}");
    }
}

#[test]
fn requests_without_interpreted_spans_or_outbox_entries_carry_no_block() {
    let store = Store::in_memory();
    let mut plain = strands_scenario()[0].clone();
    plain.attributes.clear();
    plain.name = "GET /health".into();
    assert!(interpret_span(&plain).is_none());
    let applied = apply_group(&store, &[received(&[plain], 1)], 1).unwrap();
    let entry = &store.outbox_after(0, 1, usize::MAX).unwrap()[0];
    assert!(entry.span_runs.is_empty());
    assert_eq!(
        applied,
        vec![Applied::Stored(Stored {
            outbox_bytes: Some(entry.size())
        })]
    );
    assert_eq!(run_block_bound(0), 0);
}
