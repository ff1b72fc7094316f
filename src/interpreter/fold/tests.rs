//! Tests of the fold over whole runs (from `derive`) and of its snapshot walk.

use super::snapshots::walk_input;
use super::*;
use crate::domain::{ChainIds, ChainRef};
use crate::domain::{EffectStatus, EventKind, MessageHash, MessageRef, SnapshotState};
use crate::interpreter::fact::RequestedCall;
use crate::interpreter::tool_return::ToolReturnForm;
use crate::interpreter::validity::WalkState;
use crate::records::run_state::Abandonment;
use crate::records::run_state::LastFull;
use serde_json::json;

fn msg(v: Value) -> MessageRef {
    MessageRef::of(&v)
}

pub(super) fn user() -> Value {
    json!({"role":"user","parts":[{"type":"text","content":"Plan a trip"}]})
}

pub(super) fn call(id: &str) -> Value {
    json!({"role":"assistant","parts":[{"type":"tool_call","id":id,"name":"get_weather","arguments":{"city":"Paris"}}]})
}

pub(super) fn answer(id: &str) -> Value {
    json!({"role":"user","parts":[{"type":"tool_call_response","id":id,"name":"get_weather","result":"18C"}]})
}

pub(super) fn text() -> Value {
    json!({"role":"assistant","parts":[{"type":"text","content":"Done"}]})
}

pub(super) fn model(span: &str, start: u64, input: Vec<Value>, output: Vec<Value>) -> SpanFact {
    let mut f = SpanFact::new(
        FactKind::ModelRequest,
        "t".repeat(32),
        span.into(),
        "chat m".into(),
    );
    f.start_ns = start;
    f.end_ns = start + 10;
    f.requested_calls = output
        .iter()
        .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
        .filter(|p| p["type"] == "tool_call")
        .map(|p| RequestedCall {
            id: p["id"].as_str().unwrap().into(),
            name: p["name"].as_str().unwrap().into(),
            arguments: Some(p["arguments"].clone()),
        })
        .collect();
    let refs: Vec<MessageRef> = input.iter().map(MessageRef::of).collect();
    f.tool_return_form = ToolReturnForm::last_in(&refs, |i, _| input.get(i));
    f.input = Some(std::sync::Arc::new(refs));
    f.output = Some(output.into_iter().map(msg).collect());
    f.agent_call_id = Some("call-1".into());
    f
}

pub(super) fn tool(span: &str, id: &str, start: u64, error: bool) -> SpanFact {
    let mut f = SpanFact::new(
        FactKind::ToolCall,
        "t".repeat(32),
        span.into(),
        "execute_tool get_weather".into(),
    );
    f.start_ns = start;
    f.end_ns = start + 5;
    f.tool_call_id = Some(id.into());
    f.tool_name = Some("get_weather".into());
    f.result = Some(json!("18C"));
    f.error = error.then(|| "boom".to_string());
    f
}

fn agent(start: u64, end: u64) -> SpanFact {
    let mut f = SpanFact::new(
        FactKind::AgentRun,
        "t".repeat(32),
        "a".into(),
        "invoke_agent x".into(),
    );
    f.start_ns = start;
    f.end_ns = end;
    f.agent_name = Some("x".into());
    f.agent_call_id = Some("call-1".into());
    f.all_messages = Some(vec![
        msg(user()),
        msg(call("c1")),
        msg(answer("c1")),
        msg(text()),
    ]);
    f
}

fn full_run() -> Vec<SpanFact> {
    vec![
        model("m1", 100, vec![user()], vec![call("c1")]),
        tool("t1", "c1", 120, false),
        model(
            "m2",
            200,
            vec![user(), call("c1"), answer("c1")],
            vec![text()],
        ),
        agent(50, 300),
    ]
}

#[test]
fn arrival_order_does_not_matter() {
    let facts = full_run();
    let a = derive("r", &facts, &RunMeta::default());
    let mut reversed = facts.clone();
    reversed.reverse();
    let b = derive("r", &reversed, &RunMeta::default());
    assert_eq!(a, b);
    assert_eq!(a.run.status, RunStatus::Completed);
    assert_eq!(a.run.aliases, vec!["call-1".to_string()]);
    let kinds: Vec<EventKind> = a.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![
            EventKind::RunStarted,
            EventKind::ModelRequestStarted,
            EventKind::ModelRequestCompleted,
            EventKind::ToolCallRequested,
            EventKind::ToolCallStarted,
            EventKind::ToolCallCompleted,
            EventKind::ModelRequestStarted,
            EventKind::ModelRequestCompleted,
            EventKind::RunCompleted,
        ]
    );
    assert_eq!(a.effects.len(), 1);
    assert_eq!(a.effects[0].status, EffectStatus::Completed);
    let last = a.snapshots.last().unwrap();
    assert_eq!(last.meta.state, SnapshotState::Complete);
    assert_eq!(last.meta.message_count, 4);
}

#[test]
fn parallel_calls_keep_the_order_of_the_response() {
    let two = json!({"role":"assistant","parts":[
        {"type":"tool_call","id":"z","name":"get_weather","arguments":{}},
        {"type":"tool_call","id":"a","name":"get_weather","arguments":{}}]});
    let d = derive(
        "r",
        &[model("m1", 100, vec![user()], vec![two])],
        &RunMeta::default(),
    );
    let requested: Vec<&str> = d
        .events
        .iter()
        .filter(|e| e.kind == EventKind::ToolCallRequested)
        .filter_map(|e| e.tool_call_id.as_deref())
        .collect();
    assert_eq!(requested, vec!["z", "a"]);
}

#[test]
fn snapshots_are_chain_tips_and_nodes_are_linear_in_messages() {
    let d = derive("r", &full_run(), &RunMeta::default());
    // 4 distinct messages in one growing history: one node each, however many snapshots.
    assert_eq!(d.nodes.len(), 4);
    let by_id: std::collections::HashMap<_, _> = d.nodes.iter().cloned().collect();
    for s in &d.snapshots {
        let mut len = 0;
        let mut at = s.history.tip;
        while let Some(id) = at {
            len += 1;
            at = by_id[&id].parent;
        }
        assert_eq!(len, s.meta.message_count, "snapshot {}", s.meta.seq);
    }
}

#[test]
fn crash_mid_tool_leaves_interrupted_and_unresolved_then_unknown_after_abandon() {
    let facts = vec![
        model("m1", 100, vec![user()], vec![call("c1")]),
        tool("t1", "c1", 120, false),
        model(
            "m2",
            200,
            vec![user(), call("c1"), answer("c1")],
            vec![call("c2")],
        ),
    ];
    let d = derive("r", &facts, &RunMeta::default());
    assert_eq!(d.run.status, RunStatus::Running);
    let latest_complete = d
        .snapshots
        .iter()
        .rev()
        .find(|s| s.meta.state == SnapshotState::Complete)
        .unwrap();
    assert_eq!(latest_complete.meta.message_count, 3);
    assert_eq!(
        d.snapshots.last().unwrap().meta.state,
        SnapshotState::Interrupted
    );
    assert_eq!(d.effects[1].status, EffectStatus::Requested);

    let meta = RunMeta {
        abandoned: Some(Abandonment {
            at_ns: 500,
            reason: "abandoned by request".into(),
        }),
        ..Default::default()
    };
    let d = derive("r", &facts, &meta);
    assert_eq!(d.run.status, RunStatus::Abandoned);
    assert_eq!(d.effects[1].status, EffectStatus::UnknownAfterCrash);
    assert_eq!(d.events.last().unwrap().kind, EventKind::RunAbandoned);
}

#[test]
fn settled_tools_before_the_next_request_give_a_reconstructed_snapshot() {
    let facts = vec![
        model("m1", 100, vec![user()], vec![call("c1")]),
        tool("t1", "c1", 120, false),
    ];
    let d = derive("r", &facts, &RunMeta::default());
    let last = d.snapshots.last().unwrap();
    assert_eq!(last.meta.source, SnapshotSource::Reconstructed);
    assert_eq!(last.meta.state, SnapshotState::Complete);
    assert_eq!(d.new_messages.len(), 1);
    assert_eq!(d.new_messages[0]["parts"][0]["response"], "18C");
}

#[test]
fn repeated_tool_call_ids_within_a_run_are_separate_entries() {
    let facts = vec![
        model("m1", 100, vec![user()], vec![call("c1")]),
        tool("t1", "c1", 120, true),
        model(
            "m2",
            200,
            vec![user(), call("c1"), answer("c1")],
            vec![call("c1")],
        ),
        tool("t2", "c1", 220, false),
    ];
    let d = derive("r", &facts, &RunMeta::default());
    assert_eq!(d.effects.len(), 2);
    assert_eq!(d.effects[0].status, EffectStatus::Failed);
    assert_eq!(d.effects[0].occurrence, 0);
    assert_eq!(d.effects[1].status, EffectStatus::Completed);
    assert_eq!(d.effects[1].occurrence, 1);
}

#[test]
fn content_off_gives_a_reason_instead_of_a_continuation() {
    let mut m = model("m1", 100, vec![], vec![]);
    m.input = None;
    m.output = None;
    m.content_problem = Some("no content".into());
    let d = derive("r", &[m], &RunMeta::default());
    assert!(d.snapshots.is_empty());
    assert_eq!(
        d.run.continuation_unavailable.as_deref(),
        Some("no content")
    );
}

/// A run whose second request showed `shown` as the answer to `c1`, and whose second tool
/// (`c2`) settled before any third request.
fn answered_then_reconstructed(shown: Value) -> DerivedRun {
    let facts = vec![
        model("m1", 100, vec![user()], vec![call("c1")]),
        tool("t1", "c1", 120, false),
        model("m2", 200, vec![user(), call("c1"), shown], vec![call("c2")]),
        tool("t2", "c2", 220, false),
    ];
    derive("r", &facts, &RunMeta::default())
}

fn reconstructed(d: &DerivedRun) -> &Value {
    let last = d.snapshots.last().unwrap();
    assert_eq!(last.meta.source, SnapshotSource::Reconstructed);
    assert_eq!(last.meta.state, SnapshotState::Complete);
    d.new_messages
        .iter()
        .find(|m| m.get("role").is_some())
        .expect("a reconstructed answer")
}

#[test]
fn reconstructed_answers_take_the_pydantic_ai_form_the_run_showed() {
    let d = answered_then_reconstructed(answer("c1"));
    // The form the run will send next: identical to an observed answer, so the same hash.
    let observed = json!({"role":"user","parts":[{"type":"tool_call_response","id":"c2","name":"get_weather","result":"18C"}]});
    assert_eq!(reconstructed(&d), &observed);
    let tip = d.snapshots.last().unwrap().history.tip.unwrap();
    let by_id: std::collections::HashMap<_, _> = d.nodes.iter().cloned().collect();
    assert_eq!(by_id[&tip].message, MessageHash::of(&observed));
}

#[test]
fn reconstructed_answers_take_the_tool_role_forms_the_run_showed() {
    // Pydantic AI v6 (`result`) and the semantic conventions (`response`).
    for key in ["result", "response"] {
        let shown = json!({"role":"tool","parts":[{"type":"tool_call_response","id":"c1","name":"get_weather",key:"18C"}]});
        let d = answered_then_reconstructed(shown);
        let expected = json!({"role":"tool","parts":[{"type":"tool_call_response","id":"c2","name":"get_weather",key:"18C"}]});
        assert_eq!(reconstructed(&d), &expected, "{key}");
    }
}

#[test]
fn a_failed_call_carries_its_error_under_the_mirrored_key() {
    let mut facts = vec![
        model("m1", 100, vec![user()], vec![call("c1")]),
        tool("t1", "c1", 120, false),
        model(
            "m2",
            200,
            vec![user(), call("c1"), answer("c1")],
            vec![call("c2")],
        ),
        tool("t2", "c2", 220, true),
    ];
    // A failed tool span without a result: its error text is the answer.
    facts[3].result = None;
    let d = derive("r", &facts, &RunMeta::default());
    assert_eq!(
        reconstructed(&d),
        &json!({"role":"user","parts":[{"type":"tool_call_response","id":"c2","name":"get_weather","result":"boom"}]})
    );
}

#[test]
fn without_a_shown_tool_return_the_default_form_is_kept() {
    let facts = vec![
        model("m1", 100, vec![user()], vec![call("c1")]),
        tool("t1", "c1", 120, false),
    ];
    let d = derive("r", &facts, &RunMeta::default());
    assert_eq!(
        reconstructed(&d),
        &json!({"role":"tool","parts":[{"type":"tool_call_response","id":"c1","name":"get_weather","response":"18C"}]})
    );
}

#[test]
fn a_request_without_a_tool_return_keeps_the_form_shown_before() {
    // The third request's input shows no tool return (a rewritten history): the form the
    // second one showed still holds.
    let shown = json!({"role":"tool","parts":[{"type":"tool_call_response","id":"c1","name":"get_weather","result":"18C"}]});
    let facts = vec![
        model("m1", 100, vec![user()], vec![call("c1")]),
        tool("t1", "c1", 120, false),
        model("m2", 200, vec![user(), call("c1"), shown], vec![text()]),
        model("m3", 300, vec![user()], vec![call("c3")]),
        tool("t3", "c3", 320, false),
    ];
    let d = derive("r", &facts, &RunMeta::default());
    let answer = reconstructed(&d);
    assert_eq!(answer["role"], "tool");
    assert_eq!(answer["parts"][0]["result"], "18C");
}

#[test]
fn an_input_that_extends_the_last_full_history_is_walked_from_its_end() {
    let history: Vec<MessageRef> = [
        json!({"role": "user", "parts": [{"type": "text", "content": "go"}]}),
        json!({"role": "assistant", "parts": [{"type": "tool_call", "id": "a", "name": "f"}]}),
        json!({"role": "user", "parts": [{"type": "tool_call_response", "id": "a"}]}),
        json!({"role": "assistant", "parts": [{"type": "tool_call", "id": "b", "name": "f"}]}),
        json!({"role": "assistant", "parts": [{"type": "text", "content": "too early"}]}),
    ]
    .iter()
    .map(MessageRef::of)
    .collect();
    let mut chain = ChainIds::default();
    let ids = chain.ids(history.iter().map(|r| &r.hash)).to_vec();
    let full_walk = |refs: &[MessageRef]| {
        let mut walk = WalkState::default();
        refs.iter().for_each(|r| walk.push(&r.shape));
        walk
    };
    for len in 1..=history.len() {
        let previous = LastFull {
            history: ChainRef::of(&history[..len]),
            walk: full_walk(&history[..len]),
            end_ns: 0,
        };
        assert_eq!(
            walk_input(&history, Some(&ids), Some(&previous)),
            full_walk(&history),
            "from {len}"
        );
    }
    // A last history the input does not start with (or ids of another input) is not used.
    let other = LastFull {
        history: ChainRef::of(&history[1..3]),
        walk: WalkState::default(),
        end_ns: 0,
    };
    assert_eq!(
        walk_input(&history, Some(&ids), Some(&other)),
        full_walk(&history)
    );
    assert_eq!(
        walk_input(&history[..3], Some(&ids), Some(&other)),
        full_walk(&history[..3])
    );
}
