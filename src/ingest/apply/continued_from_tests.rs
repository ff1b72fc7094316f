//! The lineage index through the writer, on the in-memory store: longest match, the fork rules,
//! out-of-order arrival, redelivery, scopes.

use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;

use super::{apply_group, Work};
use crate::domain::{ContinuedFrom, LineageKind, LineageScope};
use crate::interpreter::interpret_span;
use crate::store::keys::cf;
use crate::store::{RunFilter, Store};
use crate::test_fixtures::kv;

/// A message of `role` with one text part.
fn text(role: &str, content: &str) -> serde_json::Value {
    json!({"role": role, "parts": [{"type": "text", "content": content}]})
}

/// A run on its own trace `[trace; 16]`: agent span 1 (with `conversation`), and one model
/// request per `(input, output)` (spans 2, 3, ...), the `k`-th starting at `start + 10 k`.
fn run(
    trace: u8,
    start: u64,
    conversation: Option<&str>,
    requests: &[(Vec<serde_json::Value>, serde_json::Value)],
) -> Vec<Span> {
    let span = |id: u8, parent: u8, name: &str, at: u64, attrs| Span {
        trace_id: vec![trace; 16],
        span_id: vec![id; 8],
        parent_span_id: if parent == 0 { vec![] } else { vec![parent; 8] },
        name: String::from(name),
        start_time_unix_nano: at,
        end_time_unix_nano: at + 5,
        attributes: attrs,
        ..Default::default()
    };
    let mut out = Vec::new();
    for (k, (input, output)) in requests.iter().enumerate() {
        out.push(span(
            2 + k as u8,
            1,
            "chat m",
            start + 10 * (k as u64 + 1),
            vec![
                kv("gen_ai.operation.name", "chat"),
                kv("gen_ai.input.messages", &json!(input).to_string()),
                kv("gen_ai.output.messages", &json!([output]).to_string()),
            ],
        ));
    }
    let mut attrs = vec![
        kv("gen_ai.operation.name", "invoke_agent"),
        kv("gen_ai.agent.name", "a"),
    ];
    if let Some(c) = conversation {
        attrs.push(kv("gen_ai.conversation.id", c));
    }
    let mut agent = span(1, 0, "invoke_agent a", start, attrs);
    agent.end_time_unix_nano = start + 10 * (requests.len() as u64 + 1);
    out.push(agent);
    out
}

fn id(trace: u8) -> String {
    format!("{}-{}", hex::encode([trace; 16]), hex::encode([1u8; 8]))
}

fn apply(store: &Store, spans: &[Span]) {
    let spans = spans.iter().filter_map(interpret_span).collect();
    let work = Work::Received {
        spans,
        logs: Vec::new(),
        outbox: None,
    };
    apply_group(store, &[work], 1).unwrap();
}

fn link(store: &Store, trace: u8) -> Option<ContinuedFrom> {
    store.run(&id(trace)).unwrap().unwrap().continued_from
}

fn continued(store: &Store, source: u8) -> Vec<String> {
    let filter = RunFilter {
        continued_from: Some(id(source)),
        ..Default::default()
    };
    let (runs, _) = store.list_runs(&filter, None, 100).unwrap();
    runs.into_iter().map(|r| r.run_id).collect()
}

/// Every key and value of the lineage index and the `continued_from` list index.
fn index(store: &Store) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = store.dump(cf::LINEAGE);
    out.extend(
        store
            .dump(cf::RUN_INDEX)
            .into_iter()
            .filter(|(k, _)| k.first() == Some(&b'f')),
    );
    out
}

/// Run 1: one turn. Run 2: run 1's history and a new question. Run 3: from run 1's first
/// snapshot (the question only, not a model response) and another question. Run 4: run 1's
/// history again with another question (a second continuation: a fork).
fn turns() -> [Vec<Span>; 4] {
    let (u1, a1) = (text("user", "hi"), text("assistant", "hello"));
    let one = vec![u1.clone(), a1.clone()];
    [
        run(1, 100, Some("c"), &[(vec![u1.clone()], a1.clone())]),
        run(
            2,
            1_000,
            Some("c"),
            &[(
                [one.clone(), vec![text("user", "more")]].concat(),
                text("assistant", "sure"),
            )],
        ),
        run(
            3,
            2_000,
            Some("c"),
            &[(vec![u1, text("user", "else")], text("assistant", "x"))],
        ),
        run(
            4,
            3_000,
            Some("c"),
            &[(
                [one, vec![text("user", "other")]].concat(),
                text("assistant", "y"),
            )],
        ),
    ]
}

#[test]
fn a_run_continues_the_longest_snapshot_and_later_ones_fork() {
    let store = Store::in_memory();
    for spans in turns() {
        apply(&store, &spans);
    }
    let last = store.snapshots(&id(1)).unwrap().len() as u32 - 1;
    assert_eq!(
        link(&store, 2),
        Some(ContinuedFrom {
            run_id: id(1),
            snapshot_seq: last,
            kind: LineageKind::Continuation,
        })
    );
    // Run 3 shares only a question with run 1: no model response, no lineage.
    assert_eq!(link(&store, 3), None);
    // Run 4 continues the same snapshot after run 2 did: a fork.
    assert_eq!(
        link(&store, 4),
        Some(ContinuedFrom {
            run_id: id(1),
            snapshot_seq: last,
            kind: LineageKind::Fork,
        })
    );
    assert_eq!(continued(&store, 1), vec![id(2), id(4)]);
    assert_eq!(continued(&store, 2), Vec::<String>::new());
    assert_eq!(store.check_readable().unwrap(), Vec::new());
}

#[test]
fn an_earlier_snapshot_is_a_fork_and_the_longest_match_wins() {
    let store = Store::in_memory();
    let (u1, call) = (
        text("user", "go"),
        json!({"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "f", "arguments": {}}]}),
    );
    let ret = json!({"role": "user", "parts": [{"type": "tool_call_response", "id": "c1", "result": "ok"}]});
    let done = text("assistant", "done");
    // Run 1: a tool call, then the answer.
    apply(
        &store,
        &run(
            1,
            100,
            None,
            &[
                (vec![u1.clone()], call.clone()),
                (vec![u1.clone(), call.clone(), ret.clone()], done.clone()),
            ],
        ),
    );
    // Run 2 starts from the end of run 1; run 3 from the history before the answer.
    let full = vec![u1.clone(), call.clone(), ret.clone(), done];
    apply(
        &store,
        &run(
            2,
            1_000,
            None,
            &[(
                [full, vec![text("user", "next")]].concat(),
                text("assistant", "n"),
            )],
        ),
    );
    apply(
        &store,
        &run(
            3,
            2_000,
            None,
            &[(
                vec![u1, call, ret, text("user", "instead")],
                text("assistant", "i"),
            )],
        ),
    );
    let snapshots = store.snapshots(&id(1)).unwrap();
    let two = link(&store, 2).unwrap();
    assert_eq!(
        (two.snapshot_seq, two.kind),
        (snapshots.len() as u32 - 1, LineageKind::Continuation)
    );
    assert_eq!(snapshots[two.snapshot_seq as usize].history.len, 4);
    let three = link(&store, 3).unwrap();
    assert_eq!(three.kind, LineageKind::Fork);
    assert_eq!(snapshots[three.snapshot_seq as usize].history.len, 3);
    assert!(three.snapshot_seq < two.snapshot_seq);
}

#[test]
fn arrival_order_and_redelivery_do_not_change_the_links() {
    let all = turns();
    let mut reference = None;
    let orders: [&[usize]; 4] = [&[0, 1, 2, 3], &[3, 2, 1, 0], &[1, 3, 0, 2], &[2, 0, 3, 1]];
    for order in orders {
        let store = Store::in_memory();
        for &n in order {
            // The source's spans one at a time, after the runs that continue it.
            for span in &all[n] {
                apply(&store, std::slice::from_ref(span));
            }
        }
        let links: Vec<_> = (1..=4).map(|t| link(&store, t)).collect();
        let before = index(&store);
        for spans in &all {
            apply(&store, spans);
        }
        assert_eq!(
            index(&store),
            before,
            "redelivery changed the index, order {order:?}"
        );
        assert_eq!((1..=4).map(|t| link(&store, t)).collect::<Vec<_>>(), links);
        match &reference {
            None => reference = Some(links),
            Some(r) => assert_eq!(&links, r, "order {order:?}"),
        }
        assert_eq!(continued(&store, 1), vec![id(2), id(4)], "order {order:?}");
    }
    let links = reference.unwrap();
    assert_eq!(
        links[1].as_ref().map(|l| l.kind),
        Some(LineageKind::Continuation)
    );
    assert_eq!(links[3].as_ref().map(|l| l.kind), Some(LineageKind::Fork));
}

#[test]
fn a_source_and_its_continuation_in_one_write_group_link() {
    for reversed in [false, true] {
        let store = Store::in_memory();
        let [one, two, _, _] = turns();
        let mut works: Vec<Work> = [one, two]
            .iter()
            .map(|spans| Work::Received {
                spans: spans.iter().filter_map(interpret_span).collect(),
                logs: Vec::new(),
                outbox: None,
            })
            .collect();
        if reversed {
            works.reverse();
        }
        apply_group(&store, &works, 1).unwrap();
        assert_eq!(
            link(&store, 2).map(|l| (l.run_id, l.kind)),
            Some((id(1), LineageKind::Continuation)),
            "reversed: {reversed}"
        );
    }
}

#[test]
fn scopes_keep_conversations_apart_and_off_links_nothing() {
    let (u1, a1) = (text("user", "hi"), text("assistant", "hello"));
    let next = vec![u1.clone(), a1.clone(), text("user", "more")];
    let source = run(1, 100, Some("c1"), &[(vec![u1], a1)]);
    let other = run(2, 1_000, Some("c2"), &[(next, text("assistant", "m"))]);
    for (scope, linked) in [
        (LineageScope::Conversation, false),
        (LineageScope::Service, true),
        (LineageScope::Off, false),
    ] {
        let store = Store::in_memory();
        store.set_lineage_scope(scope);
        apply(&store, &source);
        apply(&store, &other);
        assert_eq!(link(&store, 2).is_some(), linked, "{scope:?}");
    }
}

/// What the index costs the writer: runs applied one span per commit, with lineage looked for
/// and without. Run with `cargo test --release --lib lineage_overhead -- --ignored --nocapture`.
#[test]
#[ignore]
fn lineage_overhead() {
    // A conversation of `turns` runs, each continuing the one before with `steps` requests.
    fn conversation(turns: u8, steps: usize) -> Vec<Vec<Span>> {
        let mut history = Vec::new();
        let mut out = Vec::new();
        for t in 0..turns {
            let mut requests = Vec::new();
            for s in 0..steps {
                history.push(text("user", &format!("question {t}.{s}")));
                let answer = text("assistant", &format!("answer {t}.{s}"));
                requests.push((history.clone(), answer.clone()));
                history.push(answer);
            }
            out.push(run(t + 1, 1_000 * (u64::from(t) + 1), Some("c"), &requests));
        }
        out
    }
    let runs = conversation(60, 8);
    for scope in [LineageScope::Off, LineageScope::Conversation] {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let store = Store::in_memory();
            store.set_lineage_scope(scope);
            let start = std::time::Instant::now();
            for spans in &runs {
                for span in spans {
                    apply(&store, std::slice::from_ref(span));
                }
            }
            best = best.min(start.elapsed().as_secs_f64());
            if scope == LineageScope::Conversation {
                assert_eq!(
                    link(&store, 60).map(|l| (l.run_id, l.kind)),
                    Some((id(59), LineageKind::Continuation))
                );
            }
        }
        let spans: usize = runs.iter().map(Vec::len).sum();
        println!(
            "lineage {scope:?}: {spans} spans (60 runs x 8 requests, histories up to 960 messages) in {:.1} ms, {:.1} us/span",
            best * 1e3,
            best * 1e6 / spans as f64
        );
    }
}

#[test]
fn the_first_request_decides_whichever_of_a_runs_requests_arrives_first() {
    let (u1, a1) = (text("user", "hi"), text("assistant", "hello"));
    let source = run(1, 100, None, &[(vec![u1.clone()], a1.clone())]);
    let first = vec![u1, a1, text("user", "more")];
    let second = [
        first.clone(),
        vec![text("assistant", "sure"), text("user", "again")],
    ]
    .concat();
    let continued = run(
        2,
        1_000,
        None,
        &[
            (first, text("assistant", "sure")),
            (second, text("assistant", "ok")),
        ],
    );
    for order in [[0usize, 1, 2], [1, 0, 2], [2, 1, 0]] {
        let store = Store::in_memory();
        apply(&store, &source);
        for n in order {
            apply(&store, std::slice::from_ref(&continued[n]));
        }
        let link = store.lineage_link(&id(2)).unwrap().unwrap();
        assert_eq!(link.first_start, 1_010, "order {order:?}");
        assert_eq!(link.source.map(|s| (s.run_id, s.len)), Some((id(1), 2)));
        assert_eq!(
            store
                .run(&id(2))
                .unwrap()
                .unwrap()
                .continued_from
                .map(|c| c.kind),
            Some(LineageKind::Continuation),
            "order {order:?}"
        );
    }
}
