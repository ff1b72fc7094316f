//! Tests of waiting runs resolved across runs through the store: whichever run arrives first,
//! redelivered, or in one write group; and the sweeps around a waiting run.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::domain::{EffectStatus, MessageHash, MessageRef, RunStatus};
use crate::interpreter::{RequestedCall, SpanFact};

fn user() -> Value {
    json!({"role":"user","parts":[{"type":"text","content":"Clean up"}]})
}

fn asks() -> Value {
    json!({"role":"assistant","parts":[{"type":"tool_call","id":"call_del","name":"delete_file","arguments":{"path":"a"}}]})
}

fn answers() -> Value {
    json!({"role":"user","parts":[{"type":"tool_call_response","id":"call_del","name":"delete_file","result":"deleted a"}]})
}

fn done() -> Value {
    json!({"role":"assistant","parts":[{"type":"text","content":"Done"}]})
}

/// A span of trace `trace` (one hex digit repeated), with its message bodies.
fn fact(
    kind: FactKind,
    trace: char,
    span: &str,
    start: u64,
    input: Vec<Value>,
    output: Vec<Value>,
    all: Option<Vec<Value>>,
) -> Interpreted {
    let mut f = SpanFact::new(
        kind,
        trace.to_string().repeat(32),
        span.repeat(16),
        "s".into(),
    );
    if kind != FactKind::AgentRun {
        f.parent_span_id = Some("a".repeat(16));
    }
    f.start_ns = start;
    f.end_ns = start + 10;
    f.conversation_id = Some("conv".into());
    f.agent_name = Some("ops".into());
    let mut bodies: Vec<(MessageHash, Value)> = Vec::new();
    let mut refs = |values: &[Value]| -> Vec<MessageRef> {
        values
            .iter()
            .map(|v| {
                bodies.push((MessageHash::of(v), v.clone()));
                MessageRef::of(v)
            })
            .collect()
    };
    if kind == FactKind::ModelRequest {
        f.input = Some(Arc::new(refs(&input)));
        f.output = Some(refs(&output));
        f.requested_calls = output
            .iter()
            .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
            .filter(|p| p["type"] == "tool_call")
            .map(|p| RequestedCall {
                id: p["id"].as_str().unwrap_or_default().into(),
                name: p["name"].as_str().unwrap_or_default().into(),
                arguments: Some(p["arguments"].clone()),
            })
            .collect();
    }
    if let Some(all) = all {
        f.all_messages = Some(refs(&all));
    }
    Interpreted::keyed(f, bodies)
}

/// The waiting run (trace `a…`): asks for `call_del`, which nothing answers.
fn waiting_run() -> Vec<Interpreted> {
    vec![
        fact(
            FactKind::ModelRequest,
            'a',
            "1",
            100,
            vec![user()],
            vec![asks()],
            None,
        ),
        fact(
            FactKind::AgentRun,
            'a',
            "a",
            50,
            vec![],
            vec![],
            Some(vec![user(), asks()]),
        ),
    ]
}

/// The resumed run (trace `b…`): its request's input ends with the answer.
fn resumed_run() -> Vec<Interpreted> {
    let history = vec![user(), asks(), answers()];
    let mut all = history.clone();
    all.push(done());
    vec![
        fact(
            FactKind::ModelRequest,
            'b',
            "1",
            1_000,
            history,
            vec![done()],
            None,
        ),
        fact(FactKind::AgentRun, 'b', "a", 900, vec![], vec![], Some(all)),
    ]
}

fn waiting_id() -> String {
    format!("{}-{}", "a".repeat(32), "a".repeat(16))
}

fn resumed_id() -> String {
    format!("{}-{}", "b".repeat(32), "a".repeat(16))
}

fn received(spans: Vec<Interpreted>) -> Work {
    Work::Received {
        spans,
        logs: Vec::new(),
        outbox: None,
    }
}

/// The waiting run's record and ledger.
fn state(store: &Store) -> (crate::domain::Run, Vec<crate::domain::ToolEffect>) {
    let id = waiting_id();
    (
        store.run(&id).unwrap().unwrap(),
        store.effects(&id).unwrap(),
    )
}

fn assert_resolved(store: &Store, what: &str) {
    let (run, effects) = state(store);
    assert_eq!(run.status, RunStatus::Completed, "{what}");
    assert_eq!(run.resumed_by_run_id, Some(resumed_id()), "{what}");
    assert_eq!(effects.len(), 1, "{what}");
    assert_eq!(effects[0].status, EffectStatus::Completed, "{what}");
    assert_eq!(effects[0].resolved_by_run_id, Some(resumed_id()), "{what}");
}

#[test]
fn a_run_waits_until_a_later_run_answers_its_calls() {
    let store = Store::in_memory();
    apply_group(&store, &[received(waiting_run())], 1).unwrap();
    let (run, effects) = state(&store);
    assert_eq!(run.status, RunStatus::Waiting);
    assert_eq!(effects[0].status, EffectStatus::Waiting);
    assert_eq!(store.waiting_run_ids().unwrap(), [waiting_id()]);
    assert!(store.running_run_ids().unwrap().is_empty());

    apply_group(&store, &[received(resumed_run())], 2).unwrap();
    assert_resolved(&store, "waiting run first");
    assert!(store.waiting_run_ids().unwrap().is_empty());
    let resumed = store.run(&resumed_id()).unwrap().unwrap();
    assert_eq!(resumed.status, RunStatus::Completed);

    // Redelivered, in either order: nothing changes.
    let before = (state(&store), store.run_meta(&waiting_id()).unwrap());
    apply_group(&store, &[received(resumed_run())], 3).unwrap();
    apply_group(&store, &[received(waiting_run())], 4).unwrap();
    assert_eq!(
        before,
        (state(&store), store.run_meta(&waiting_id()).unwrap())
    );
}

#[test]
fn the_answer_arriving_first_or_in_the_same_group_resolves_alike() {
    // The resumed run's spans before the waiting run's.
    let store = Store::in_memory();
    apply_group(&store, &[received(resumed_run())], 1).unwrap();
    apply_group(&store, &[received(waiting_run())], 2).unwrap();
    assert_resolved(&store, "answer first");
    let first = state(&store);

    // One span at a time, interleaved.
    let store = Store::in_memory();
    let (w, r) = (waiting_run(), resumed_run());
    for i in [&r[0], &w[0], &r[1], &w[1]] {
        apply_group(&store, &[received(vec![i.clone()])], 1).unwrap();
    }
    assert_resolved(&store, "interleaved");
    assert_eq!(first, state(&store));

    // Both in one write group (two requests), and both in one request.
    for works in [
        vec![received(resumed_run()), received(waiting_run())],
        vec![received(
            resumed_run().into_iter().chain(waiting_run()).collect(),
        )],
    ] {
        let store = Store::in_memory();
        apply_group(&store, &works, 1).unwrap();
        assert_resolved(&store, "one group");
        assert_eq!(first, state(&store));
    }
}

#[test]
fn an_earlier_request_or_another_conversation_does_not_answer() {
    for waiting_first in [false, true] {
        let store = Store::in_memory();
        let mut elsewhere = resumed_run();
        for i in &mut elsewhere {
            i.fact.conversation_id = Some("elsewhere".into());
        }
        // A request that started before the waiting run did.
        let mut earlier = resumed_run();
        earlier[0].fact.start_ns = 10;
        let mut works = vec![received(elsewhere), received(earlier)];
        if waiting_first {
            works.insert(0, received(waiting_run()));
        } else {
            works.push(received(waiting_run()));
        }
        for work in works {
            apply_group(&store, &[work], 1).unwrap();
        }
        let (run, effects) = state(&store);
        assert_eq!(
            run.status,
            RunStatus::Waiting,
            "waiting first: {waiting_first}"
        );
        assert_eq!(effects[0].status, EffectStatus::Waiting);
        assert!(run.resumed_by_run_id.is_none());
    }
}

#[tokio::test]
async fn the_inactivity_sweep_leaves_a_waiting_run_alone_and_the_waiting_timeout_abandons_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), false).unwrap());
    let ingest =
        crate::ingest::Ingest::new(store.clone(), Arc::new(crate::ingest::Outbox::disabled()));
    ingest
        .writer
        .receive(waiting_run(), Vec::new(), None, 0)
        .await
        .unwrap();
    assert_eq!(state(&store).0.status, RunStatus::Waiting);
    assert_eq!(ingest.sweep(&store, Duration::ZERO).await.unwrap(), 0);
    assert_eq!(state(&store).0.status, RunStatus::Waiting);
    // Not silent for long enough yet.
    assert_eq!(
        ingest
            .sweep_waiting(&store, Duration::from_secs(3600))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        ingest.sweep_waiting(&store, Duration::ZERO).await.unwrap(),
        1
    );
    let (run, effects) = state(&store);
    assert_eq!(run.status, RunStatus::Abandoned);
    assert_eq!(
        run.error.as_deref(),
        Some("no telemetry for 0s (waiting timeout)")
    );
    assert_eq!(effects[0].status, EffectStatus::Waiting);
    assert!(store.waiting_run_ids().unwrap().is_empty());
}
