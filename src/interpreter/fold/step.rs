//! One fold step: a run's facts (its model requests and tool spans, each in sort order) applied
//! to the accumulator, giving the records they add or change.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use super::ledger;
use super::snapshots::{self, Named, Nodes, SnapshotBuilder};
use super::state::{key, Acc};
use super::timeline::{self, Edges};
use super::NewFact;
use crate::domain::{Run, StepEvent};
use crate::interpreter::fact::SpanFact;

/// The facts of one step, and how to apply them.
pub(super) struct Step<'s, 'f> {
    /// Model requests, in sort order, all after the accumulator's last.
    pub models: &'s [NewFact<'f>],
    /// Tool spans, in sort order, all after the accumulator's last.
    pub tools: &'s [&'f SpanFact],
    /// The run's start and end, when the step holds all of its facts.
    pub edges: Option<Edges<'f>>,
    /// The run span's system instructions, when the step holds all of its facts.
    pub agent_instructions: Option<&'f Value>,
    /// The number of the step's first event.
    pub first_event: u32,
    /// A tool span no entry waits for ends the step (`None`) instead of making its own entry.
    pub strict: bool,
}

/// What a step adds or changes.
pub(super) struct Stepped {
    /// New events, numbered after the earlier ones.
    pub events: Vec<StepEvent>,
    /// Indexes of the ledger entries added or changed.
    pub changed: BTreeSet<u32>,
    /// Tool-call ids met, with how many ledger entries now have each.
    pub counts: HashMap<String, u32>,
    /// Snapshot records from the accumulator's fixed point on.
    pub snapshots: SnapshotBuilder,
    /// History nodes the snapshots add.
    pub nodes: Nodes,
    /// Bodies to store with the run's messages (reconstructed tool returns, instructions).
    pub bodies: Vec<Value>,
}

impl Stepped {
    /// A step that added nothing.
    pub fn nothing() -> Self {
        Self {
            events: Vec::new(),
            changed: BTreeSet::new(),
            counts: HashMap::new(),
            snapshots: SnapshotBuilder::new(Default::default()),
            nodes: Nodes::new(false),
            bodies: Vec::new(),
        }
    }
}

/// Applies a step to `acc`; `occurrences(id)` says how many ledger entries with call id `id`
/// there were before it. `None` when the step is strict and meets a tool span no entry waits
/// for, or an occurrence is unknown.
pub(super) fn apply(
    acc: &mut Acc,
    step: Step<'_, '_>,
    occurrences: impl FnMut(&str) -> Option<u32>,
) -> Option<Stepped> {
    let first_step = acc.models;
    let before = acc.last_step.clone();
    let model_facts: Vec<&SpanFact> = step.models.iter().map(|n| n.fact).collect();
    let ledger = ledger::apply(acc, &model_facts, step.tools, step.strict, occurrences)?;
    let requested = ledger
        .asked
        .iter()
        .flat_map(|r| r.clone())
        .filter_map(|i| acc.known.get(&i));
    let events = timeline::events(
        step.edges.as_ref(),
        &model_facts,
        first_step as usize,
        requested,
        step.tools,
        step.first_event,
    );
    let with_inputs = step.edges.is_some();
    let named = Named {
        model_body: None,
        agent_body: step.agent_instructions,
    };
    let built = snapshots::step(
        acc,
        step.models,
        first_step,
        &before,
        &ledger.asked,
        named,
        with_inputs,
    );
    if let Some(last) = model_facts.last() {
        acc.last_model = Some(key(last));
    }
    if let Some(last) = step.tools.last() {
        acc.last_tool = Some(key(last));
    }
    if let Some(t) = events.iter().map(|e| e.time_ns).max() {
        acc.last_event_ns = acc.last_event_ns.max(t);
    }
    Some(Stepped {
        events,
        changed: ledger.changed,
        counts: ledger.counts,
        snapshots: built.out,
        nodes: built.nodes,
        bodies: built.bodies.list,
    })
}

/// The run record's counters after a step of `models`, with `new_events` events, leaving
/// `ledger_len` entries and `snapshots` records.
pub(super) fn count(
    run: &mut Run,
    models: &[NewFact<'_>],
    new_events: usize,
    ledger_len: u32,
    snapshots: u32,
) {
    run.model_request_count += models.len() as u32;
    run.tool_call_count = ledger_len;
    run.snapshot_count = snapshots;
    run.event_count += new_events as u32;
    run.input_tokens += models
        .iter()
        .filter_map(|n| n.fact.input_tokens)
        .sum::<u64>();
    run.output_tokens += models
        .iter()
        .filter_map(|n| n.fact.output_tokens)
        .sum::<u64>();
}
