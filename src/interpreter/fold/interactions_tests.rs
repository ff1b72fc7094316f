//! Tests of waiting runs in the fold: which calls a run ends waiting on, and how recorded
//! answers resolve them.

use super::tests::{answer, call, model, tool, user};
use super::*;
use crate::domain::{EffectStatus, InteractionKind, MessageRef, Resolution};
use crate::records::run_state::Abandonment;

/// The agent-run span of the run, ended at `end`, with `all` as its final history (none: the
/// producer sends none, like OpenAI Agents).
fn agent(end: u64, all: Option<Vec<Value>>) -> SpanFact {
    let mut f = SpanFact::new(
        FactKind::AgentRun,
        "t".repeat(32),
        "a".into(),
        "invoke_agent ops".into(),
    );
    f.start_ns = 50;
    f.end_ns = end;
    f.conversation_id = Some("conv".into());
    f.all_messages = all.map(|all| all.iter().map(MessageRef::of).collect());
    f
}

/// A run whose one model request asks for `c1` and `c2`; `c2` runs (a tool span with a result).
fn asked() -> Vec<SpanFact> {
    let two = serde_json::json!({"role":"assistant","parts":[
        {"type":"tool_call","id":"c1","name":"get_weather","arguments":{}},
        {"type":"tool_call","id":"c2","name":"get_weather","arguments":{}}]});
    vec![
        model("m1", 100, vec![user()], vec![two]),
        tool("t2", "c2", 120, false),
    ]
}

fn status_of<'a>(d: &'a DerivedRun, id: &str) -> &'a ToolEffect {
    d.effects.iter().find(|e| e.tool_call_id == id).unwrap()
}

#[test]
fn a_call_the_final_history_leaves_unanswered_waits_for_approval() {
    let mut facts = asked();
    facts.push(agent(
        300,
        Some(vec![user(), call("c1"), call("c2"), answer("c2")]),
    ));
    let d = derive("r", &facts, &RunMeta::default());
    assert_eq!(d.run.status, RunStatus::Waiting);
    assert!(d.run.status.is_over());
    let c1 = status_of(&d, "c1");
    assert_eq!(c1.status, EffectStatus::Waiting);
    assert_eq!(c1.interaction, Some(InteractionKind::Approval));
    assert_eq!(status_of(&d, "c2").status, EffectStatus::Completed);
    assert!(d.state.is_none(), "a waiting run is not appended to");
    assert_eq!(waiting_calls(&d.effects).collect::<Vec<_>>(), ["c1"]);
}

#[test]
fn a_deferred_tool_span_waits_for_its_kind_and_an_answered_call_does_not() {
    let mut facts = asked();
    let mut deferred = tool("t1", "c1", 110, false);
    deferred.result = None;
    deferred.deferral = Some(InteractionKind::External);
    facts.push(deferred);
    facts.push(agent(
        300,
        Some(vec![user(), call("c1"), call("c2"), answer("c2")]),
    ));
    let d = derive("r", &facts, &RunMeta::default());
    assert_eq!(d.run.status, RunStatus::Waiting);
    let c1 = status_of(&d, "c1");
    assert_eq!(
        (c1.status, c1.interaction),
        (EffectStatus::Waiting, Some(InteractionKind::External))
    );
    // The same run whose final history answers c1 is complete: nothing waits.
    facts.pop();
    facts.pop();
    facts.push(tool("t1", "c1", 110, false));
    facts.push(agent(
        300,
        Some(vec![user(), call("c1"), answer("c1"), answer("c2")]),
    ));
    let d = derive("r", &facts, &RunMeta::default());
    assert_eq!(d.run.status, RunStatus::Completed);
    assert!(d.effects.iter().all(|e| e.interaction.is_none()));
}

#[test]
fn without_a_final_history_an_empty_tool_span_of_the_last_step_waits() {
    let mut facts = asked();
    let mut interrupted = tool("t1", "c1", 110, false);
    interrupted.result = None;
    facts.push(interrupted);
    facts.push(agent(300, None));
    let d = derive("r", &facts, &RunMeta::default());
    assert_eq!(d.run.status, RunStatus::Waiting);
    assert_eq!(status_of(&d, "c1").status, EffectStatus::Waiting);
    assert_eq!(status_of(&d, "c2").status, EffectStatus::Completed);

    // A call without any tool span and no final history is not guessed to wait.
    let mut facts = asked();
    facts.push(agent(300, None));
    let d = derive("r", &facts, &RunMeta::default());
    assert_eq!(d.run.status, RunStatus::Completed);
    assert_eq!(status_of(&d, "c1").status, EffectStatus::UnknownAfterCrash);

    // A run that failed waits on nothing.
    let mut facts = asked();
    let mut failed = agent(300, Some(vec![user(), call("c1")]));
    failed.error = Some("boom".into());
    facts.push(failed);
    let d = derive("r", &facts, &RunMeta::default());
    assert_eq!(d.run.status, RunStatus::Failed);
    assert_eq!(status_of(&d, "c1").status, EffectStatus::UnknownAfterCrash);
}

#[test]
fn recorded_answers_resolve_the_waiting_calls_and_the_run() {
    let mut facts = asked();
    facts.push(agent(
        300,
        Some(vec![user(), call("c1"), call("c2"), answer("c2")]),
    ));
    let mut meta = RunMeta::default();
    meta.resolutions.insert(
        "c1".into(),
        Resolution {
            at_ns: 1_000,
            run_id: "later".into(),
        },
    );
    let d = derive("r", &facts, &meta);
    assert_eq!(d.run.status, RunStatus::Completed);
    assert_eq!(d.run.resumed_by_run_id.as_deref(), Some("later"));
    let c1 = status_of(&d, "c1");
    assert_eq!(c1.status, EffectStatus::Completed);
    assert_eq!(c1.interaction, Some(InteractionKind::Approval));
    assert_eq!(c1.resolved_by_run_id.as_deref(), Some("later"));
    assert_eq!(c1.ended_at, Some(crate::domain::format_timestamp(1_000)));

    // An answer to another call leaves the run waiting.
    let mut other = RunMeta::default();
    other
        .resolutions
        .insert("c9".into(), meta.resolutions["c1"].clone());
    let d = derive("r", &facts, &other);
    assert_eq!(d.run.status, RunStatus::Waiting);
    assert!(d.run.resumed_by_run_id.is_none());

    // Abandoned while waiting: abandoned, the call still waiting.
    let abandoned = RunMeta {
        abandoned: Some(Abandonment {
            at_ns: 5_000,
            reason: "no telemetry for 1s (waiting timeout)".into(),
        }),
        ..RunMeta::default()
    };
    let d = derive("r", &facts, &abandoned);
    assert_eq!(d.run.status, RunStatus::Abandoned);
    assert_eq!(
        d.run.error.as_deref(),
        Some("no telemetry for 1s (waiting timeout)")
    );
    assert_eq!(status_of(&d, "c1").status, EffectStatus::Waiting);
}
