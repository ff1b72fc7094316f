//! Deriving a run from its facts as a fold: record, events, tool-effect ledger and snapshots.
//!
//! [`derive`] folds all of a run's facts (in sort order) from an empty accumulator; it is a pure
//! function of the facts and the run's meta (lineage, abandonment), so the same facts give the
//! same run whatever order they arrived in, and a duplicate changes nothing. While the run is
//! running it leaves the accumulator as a [`RunState`]; [`append`] continues the same fold from
//! that state with new facts, in O(new facts), giving only the records that change. Its guard
//! gives `None` when the new facts change earlier steps (out of order, a replaced fact, the run
//! span, ...): the caller then derives the run in full.
//!
//! - [`state`]: the accumulator, and its conversion to and from the stored [`RunState`];
//! - [`step`]: one fold step (ledger, events, snapshots) and the run record's counters;
//! - [`ledger`]: the tool-effect ledger's rules; [`interactions`]: the calls a run ends waiting
//!   on and their resolution by a later run; [`snapshots`]: the snapshot step;
//!   [`timeline`]: step events; [`rollup`]: trigger, attributes, model and tool time, entries
//!   by status.

mod interactions;
mod ledger;
mod rollup;
mod run;
mod snapshots;
mod state;
mod step;
mod timeline;

use serde_json::Value;

use super::fact::{FactKind, SpanFact};
use crate::domain::{
    ChainRef, HistoryNode, NodeId, Run, RunStatus, SnapshotRecord, SnapshotSource, StepEvent,
    ToolEffect,
};
use crate::records::run_state::{RunMeta, RunState};
use state::Acc;
use step::Step;
use timeline::Edges;

/// Everything derived for one run.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedRun {
    /// The run record.
    pub run: Run,
    /// Step events, chronological.
    pub events: Vec<StepEvent>,
    /// The tool-effect ledger, in request order.
    pub effects: Vec<ToolEffect>,
    /// Snapshots, in step order, each naming its history chain.
    pub snapshots: Vec<SnapshotRecord>,
    /// Bodies the derivation refers to besides the facts' messages (reconstructed tool returns,
    /// system instructions), to store with the run's messages.
    pub new_messages: Vec<Value>,
    /// Every node of the snapshots' history chains.
    pub nodes: Vec<(NodeId, HistoryNode)>,
    /// What appending new facts to the run needs (none once the run is over).
    pub state: Option<RunState>,
}

/// A new fact with the chain of its input history (computed when it was stored).
pub struct NewFact<'a> {
    /// The fact.
    pub fact: &'a SpanFact,
    /// Its input as a chain reference, when it has an input.
    pub input_chain: Option<ChainRef>,
    /// The node ids of every prefix of its input (`[i]` names the first `i + 1` messages), when
    /// known: an input that extends the previous request's full history is then walked on from
    /// where that history's walk ended, not from its first message.
    pub input_prefixes: Option<&'a [NodeId]>,
}

impl<'a> NewFact<'a> {
    /// A fact without a precomputed chain.
    fn bare(fact: &'a SpanFact) -> Self {
        Self {
            fact,
            input_chain: None,
            input_prefixes: None,
        }
    }
}

/// The records an append changes.
#[derive(Debug)]
pub struct Append {
    /// The run record.
    pub run: Run,
    /// New events, numbered after the stored ones.
    pub events: Vec<StepEvent>,
    /// New or changed ledger entries, by index.
    pub effects: Vec<(u32, ToolEffect)>,
    /// Snapshot records from `snapshots[0].meta.seq` on (the ones before are unchanged; stored
    /// ones after the last of these are gone).
    pub snapshots: Vec<SnapshotRecord>,
    /// Bodies to store with the run's messages (reconstructed tool returns, instructions).
    pub new_messages: Vec<Value>,
    /// History nodes the snapshots add.
    pub nodes: Vec<(NodeId, HistoryNode)>,
    /// Tool-call ids seen, with how many ledger entries now have each.
    pub call_counts: Vec<(String, u32)>,
    /// The state after the append.
    pub state: RunState,
}

/// The facts of `kind` in sort order (start, span id).
fn sorted(facts: &[SpanFact], kind: FactKind) -> Vec<&SpanFact> {
    let mut of: Vec<&SpanFact> = facts.iter().filter(|f| f.kind == kind).collect();
    of.sort_by(|a, b| (a.start_ns, &a.span_id).cmp(&(b.start_ns, &b.span_id)));
    of
}

/// Derives a run from its facts: one fold step over all of them from an empty accumulator.
pub fn derive(run_id: &str, facts: &[SpanFact], meta: &RunMeta) -> DerivedRun {
    // Joins of id-less tool spans depend on every fact of the run (a later call or tool span
    // can move them), so such runs are never appended to: no working state is kept for them.
    let appendable = !super::call_join::needs_join(facts);
    let (facts, join_warnings) = &super::call_join::join(facts);
    let first = |pending: bool| {
        facts
            .iter()
            .filter(|f| f.kind == FactKind::AgentRun && f.pending == pending)
            .min_by(|a, b| (a.start_ns, &a.span_id).cmp(&(b.start_ns, &b.span_id)))
    };
    let agent = first(false);
    // A run known only from its pending span: running, with its ids.
    let started = first(true);
    let models: Vec<NewFact<'_>> = sorted(facts, FactKind::ModelRequest)
        .into_iter()
        .map(NewFact::bare)
        .collect();
    let tools = sorted(facts, FactKind::ToolCall);
    let status = match (agent, &meta.abandoned) {
        (Some(a), _) if a.error.is_some() => RunStatus::Failed,
        (Some(_), _) => RunStatus::Completed,
        (None, Some(_)) => RunStatus::Abandoned,
        (None, None) => RunStatus::Running,
    };
    // The instructions of the last agent-run fact (pending or not), in span order.
    let agent_instructions = facts
        .iter()
        .rfind(|f| f.kind == FactKind::AgentRun)
        .and_then(|f| f.system_instructions.as_ref());

    let mut acc = Acc::default();
    acc.instructions.agent = agent_instructions.map(crate::domain::MessageHash::of_repeated);
    let step = Step {
        models: &models,
        tools: &tools,
        edges: Some(Edges {
            agent,
            started,
            abandoned: meta.abandoned.as_ref(),
        }),
        agent_instructions,
        first_event: 0,
        strict: false,
    };
    // A lenient step with every occurrence known always applies; were it refused, the run
    // would read as one without records rather than take the writer down.
    let mut stepped =
        step::apply(&mut acc, step, |_| Some(0)).unwrap_or_else(step::Stepped::nothing);
    let final_history = agent.and_then(|a| a.all_messages.as_deref().map(|all| (all, a.end_ns)));
    if status == RunStatus::Completed {
        interactions::mark_waiting(&mut acc, final_history.map(|(all, _)| all));
    }
    ledger::close(&mut acc, final_history, status.is_over());
    if let Some((all, end_ns)) = final_history {
        // The run's final history, when its span carries it.
        let mut walk = crate::interpreter::validity::WalkState::default();
        all.iter().for_each(|r| walk.push(&r.shape));
        let history = stepped.nodes.history(all, None);
        stepped.snapshots.push(
            history,
            &walk,
            SnapshotSource::Observed,
            acc.models,
            end_ns,
            acc.instructions.effective(),
        );
    }
    // What appending to the run needs, while it is running.
    let state = (appendable && agent.is_none() && meta.abandoned.is_none())
        .then(|| acc.to_state())
        .flatten();
    let mut effects: Vec<ToolEffect> = acc.known.into_values().map(|e| e.effect).collect();
    let records = stepped.snapshots.records;
    let mut run = run::record(run::Parts {
        run_id,
        facts,
        agent,
        started,
        models: &models,
        tools: &tools,
        meta,
        status,
        join_warnings,
        snapshots: &records,
    });
    interactions::resolve(&mut run, &mut effects, meta);
    step::count(
        &mut run,
        &models,
        stepped.events.len(),
        effects.len() as u32,
        records.len() as u32,
    );
    rollup::set_info(&mut run, rollup::run_info(agent.or(started), facts));
    run.model_time_ms = rollup::model_time(&models);
    rollup::set_ledger(&mut run, &effects);
    DerivedRun {
        run,
        events: stepped.events,
        effects,
        snapshots: records,
        new_messages: stepped.bodies,
        nodes: stepped.nodes.list,
        state,
    }
}

/// True when `new` may follow `old` on the run record without changing it.
fn same_or_new(old: &Option<String>, new: &Option<String>) -> bool {
    new.is_none() || old == new
}

/// The guard: true when `new` facts can extend the running run `old` (whose stored state is
/// `state`) without changing what earlier steps derived.
fn appendable(old: &Run, state: &RunState, new: &[NewFact<'_>]) -> bool {
    if old.status != RunStatus::Running
        || state.standalone
        || !state.keeps_rollups
        || new.is_empty()
    {
        return false;
    }
    let info = rollup::info_of(old);
    new.iter().all(|n| {
        let f = n.fact;
        // A fact with warnings changes the run record's warnings: derived in full.
        matches!(f.kind, FactKind::ModelRequest | FactKind::ToolCall)
            && !f.pending
            && f.warnings.is_empty()
            && f.trace_id == old.trace_id
            && f.start_ns >= old.started_ns
            && f.agent_call_id
                .as_ref()
                .is_none_or(|a| old.aliases.contains(a))
            && same_or_new(&old.agent_name, &f.agent_name)
            && same_or_new(&old.conversation_id, &f.conversation_id)
            // New trigger or attribute values change the run's index keys: derived in full.
            && info.covers(&f.run_info)
            && (f.kind != FactKind::ToolCall
                || f.tool_call_id.as_ref().is_some_and(|id| !id.is_empty()))
            && match f.kind {
                FactKind::ModelRequest => state.last_model.as_ref(),
                _ => state.last_tool.as_ref(),
            }
            .is_none_or(|last| state::key(f) > *last)
    })
}

/// Applies new facts to a running run: the fold continued from its stored `state`. `None` when
/// they change earlier derivations, and the run must be derived in full. `occurrences(id)`
/// answers how many stored ledger entries have tool-call id `id`.
pub fn append(
    old: &Run,
    state: &RunState,
    new: &[NewFact<'_>],
    occurrences: impl FnMut(&str) -> Option<u32>,
) -> Option<Append> {
    if !appendable(old, state, new) {
        return None;
    }
    let mut models: Vec<NewFact<'_>> = new
        .iter()
        .filter(|n| n.fact.kind == FactKind::ModelRequest)
        .map(|n| NewFact {
            fact: n.fact,
            input_chain: n.input_chain.clone(),
            input_prefixes: n.input_prefixes,
        })
        .collect();
    models.sort_by_key(|n| state::key(n.fact));
    let mut tools: Vec<&SpanFact> = new
        .iter()
        .map(|n| n.fact)
        .filter(|f| f.kind == FactKind::ToolCall)
        .collect();
    tools.sort_by_key(|f| state::key(f));

    let mut acc = Acc::resume(state);
    let before = rollup::before(&acc);
    let step = Step {
        models: &models,
        tools: &tools,
        edges: None,
        agent_instructions: None,
        first_event: old.event_count,
        strict: true,
    };
    let stepped = step::apply(&mut acc, step, occurrences)?;
    // Events all after the stored ones, or the order would change; and a continuation.
    if stepped
        .events
        .iter()
        .any(|e| e.time_ns <= state.last_event_ns)
        || !acc.has_complete
    {
        return None;
    }
    let mut run = old.clone();
    step::count(
        &mut run,
        &models,
        stepped.events.len(),
        acc.ledger_len,
        stepped.snapshots.mark.next_seq,
    );
    run.continuation_unavailable = None;
    run.model_time_ms = run
        .model_time_ms
        .saturating_add(rollup::model_time(&models));
    rollup::update_ledger(&mut run, &before, &acc, &stepped.changed);
    let effects = stepped
        .changed
        .iter()
        .filter_map(|i| acc.known.get(i).map(|e| (*i, e.effect.clone())))
        .collect();
    Some(Append {
        run,
        events: stepped.events,
        effects,
        snapshots: stepped.snapshots.records,
        new_messages: stepped.bodies,
        nodes: stepped.nodes.list,
        call_counts: stepped.counts.into_iter().collect(),
        state: acc.to_state()?,
    })
}

pub use interactions::waiting_calls;

#[cfg(test)]
mod fold_tests;
#[cfg(test)]
mod interactions_tests;
#[cfg(test)]
mod tests;
