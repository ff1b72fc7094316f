//! Appending new facts to a derived run without deriving it again: the common case of a run
//! whose model requests and tool calls arrive roughly in order costs O(new facts), not O(run).
//!
//! [`RunState`] is what a derivation leaves for the next one (the open ledger entries, the last
//! model request's history, the snapshots that can still change). [`append`] applies new facts
//! on top of it and gives only the records that change, or `None` when the facts change earlier
//! derivations (out of order, a replaced fact, the run span, ...): then the caller derives the
//! run in full with [`super::derive`], which stays the reference.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::derive::{
    build_events, reconstructed_answer, settle, EffectBuild, LastFull, SnapshotBuilder,
};
use super::fact::{FactKind, SpanFact};
use super::tool_return::ToolReturnForm;
use super::validity::{Walk, WalkState};
use crate::domain::{
    format_timestamp, ChainRef, EffectStatus, HistoryNode, MessageHash, MessageRef, NodeId, Run,
    RunStatus, SnapshotRecord, SnapshotSource, SnapshotState, StepEvent, ToolEffect,
};

/// What a derivation of a running run leaves for appending to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Sort key (start, span id) of the last model request.
    pub(super) last_model: Option<(u64, String)>,
    /// Sort key of the last tool call.
    pub(super) last_tool: Option<(u64, String)>,
    /// Time of the latest event.
    pub(super) last_event_ns: u64,
    /// Model requests so far.
    pub(super) models: u32,
    /// Ledger entries so far.
    pub(super) ledger_len: u32,
    /// Ledger entries no tool span is bound to yet, by index, in ledger order.
    pub(super) unbound: Vec<(u32, EffectBuild)>,
    /// Ledger entries the last model request asked for, by index, in ledger order.
    pub(super) last_step: Vec<(u32, EffectBuild)>,
    /// The ledger has entries no model request asked for.
    pub(super) standalone: bool,
    /// The last model request's full history.
    pub(super) last_full: Option<LastFull>,
    /// Snapshot records later model requests cannot change, and the last of them.
    pub(super) fixed: (u32, Option<(ChainRef, SnapshotState)>),
    /// Some snapshot is complete.
    pub(super) has_complete: bool,
    /// The latest system instructions of a model request, and those of the run span.
    pub(super) instructions: (Option<MessageHash>, Option<MessageHash>),
    /// The tool-return form the model requests so far last showed, which reconstructed answers
    /// take (none shown: the default form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tool_return_form: Option<ToolReturnForm>,
}

/// Where a derivation's snapshots stand after its last model request.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SnapshotTail {
    /// Records no model request after the last one can change, and the last of them.
    pub fixed: (u32, Option<(ChainRef, SnapshotState)>),
    /// The last model request's full history, when it has one.
    pub last_full: Option<LastFull>,
    /// The latest system instructions of a model request, and those of the run span.
    pub instructions: (Option<MessageHash>, Option<MessageHash>),
    /// The tool-return form the model requests last showed.
    pub tool_return_form: Option<ToolReturnForm>,
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

/// The state a full derivation leaves, for a running run (none once it is over).
pub(super) fn state_after_derive(
    models: &[&SpanFact],
    tools: &[&SpanFact],
    ledger: &[EffectBuild],
    events: &[StepEvent],
    snapshots: &[SnapshotRecord],
    tail: SnapshotTail,
) -> RunState {
    let SnapshotTail {
        fixed,
        last_full,
        instructions,
        tool_return_form,
    } = tail;
    let last = models.len().checked_sub(1);
    let indexed = |keep: &dyn Fn(&EffectBuild) -> bool| {
        ledger
            .iter()
            .enumerate()
            .filter(|(_, e)| keep(e))
            .map(|(i, e)| (i as u32, e.clone()))
            .collect::<Vec<_>>()
    };
    RunState {
        last_model: models.last().map(|m| (m.start_ns, m.span_id.clone())),
        last_tool: tools.last().map(|t| (t.start_ns, t.span_id.clone())),
        last_event_ns: events.iter().map(|e| e.time_ns).max().unwrap_or(0),
        models: models.len() as u32,
        ledger_len: ledger.len() as u32,
        unbound: indexed(&|e| e.effect.span_id.is_none()),
        last_step: indexed(&|e| last.is_some() && e.request_step == last),
        standalone: ledger.iter().any(|e| e.request_step.is_none()),
        last_full,
        fixed,
        has_complete: snapshots
            .iter()
            .any(|s| s.meta.state == SnapshotState::Complete),
        instructions,
        tool_return_form,
    }
}

fn key(f: &SpanFact) -> (u64, String) {
    (f.start_ns, f.span_id.clone())
}

/// True when `new` may follow `old` on the run record without changing it.
fn same_or_new(old: &Option<String>, new: &Option<String>) -> bool {
    new.is_none() || old == new
}

/// Applies new facts to a running run; `None` when they change earlier derivations, and the
/// run must be derived in full. `occurrences(id)` answers how many stored ledger entries have
/// tool-call id `id`.
pub fn append(
    old: &Run,
    state: &RunState,
    new: &[NewFact<'_>],
    mut occurrences: impl FnMut(&str) -> Option<u32>,
) -> Option<Append> {
    if old.status != RunStatus::Running || state.standalone || new.is_empty() {
        return None;
    }
    for n in new {
        let f = n.fact;
        // A fact with warnings changes the run record's warnings: derived in full.
        let eligible = matches!(f.kind, FactKind::ModelRequest | FactKind::ToolCall)
            && !f.pending
            && f.warnings.is_empty()
            && f.trace_id == old.trace_id
            && f.start_ns >= old.started_ns
            && f.agent_call_id
                .as_ref()
                .is_none_or(|a| old.aliases.contains(a))
            && same_or_new(&old.agent_name, &f.agent_name)
            && same_or_new(&old.conversation_id, &f.conversation_id)
            && (f.kind != FactKind::ToolCall
                || f.tool_call_id.as_ref().is_some_and(|id| !id.is_empty()));
        if !eligible {
            return None;
        }
    }
    let mut models: Vec<&NewFact<'_>> = new
        .iter()
        .filter(|n| n.fact.kind == FactKind::ModelRequest)
        .collect();
    models.sort_by_key(|n| key(n.fact));
    let mut tools: Vec<&SpanFact> = new
        .iter()
        .map(|n| n.fact)
        .filter(|f| f.kind == FactKind::ToolCall)
        .collect();
    tools.sort_by_key(|f| key(f));
    if let (Some(first), Some(last)) = (models.first(), &state.last_model) {
        if key(first.fact) <= *last {
            return None;
        }
    }
    if let (Some(first), Some(last)) = (tools.first(), &state.last_tool) {
        if key(first) <= *last {
            return None;
        }
    }

    // The ledger: entries the new requests ask for, results their inputs show, tool spans.
    let mut known: BTreeMap<u32, EffectBuild> = BTreeMap::new();
    known.extend(state.unbound.iter().cloned());
    known.extend(state.last_step.iter().cloned());
    let mut unbound: Vec<u32> = state.unbound.iter().map(|(i, _)| *i).collect();
    let mut last_step: Vec<u32> = state.last_step.iter().map(|(i, _)| *i).collect();
    let mut changed: BTreeSet<u32> = BTreeSet::new();
    let mut ledger_len = state.ledger_len;
    let mut counts: HashMap<String, u32> = HashMap::new();
    let mut requested: Vec<EffectBuild> = Vec::new();
    let base = state.models as usize;
    for (j, n) in models.iter().enumerate() {
        let m = n.fact;
        if let Some(input) = m.input.as_ref().filter(|_| !unbound.is_empty()) {
            // The ids the input answers, read once for all the unbound entries.
            let closed: HashSet<&str> = input
                .iter()
                .flat_map(|r| r.shape.closes.iter().map(String::as_str))
                .collect();
            for i in &unbound {
                let Some(e) = known.get_mut(i) else { continue };
                if e.effect.status != EffectStatus::Requested
                    || m.start_ns < e.requested_ns.unwrap_or(0)
                {
                    continue;
                }
                let id = &e.effect.tool_call_id;
                if closed.contains(id.as_str()) {
                    e.effect.status = EffectStatus::Completed;
                    e.effect.ended_at = Some(format_timestamp(m.start_ns));
                    changed.insert(*i);
                }
            }
        }
        last_step.clear();
        if m.error.is_some() {
            continue;
        }
        for call in &m.requested_calls {
            let occurrence = match counts.get(&call.id) {
                Some(c) => *c,
                None => occurrences(&call.id)?,
            };
            counts.insert(call.id.clone(), occurrence + 1);
            let entry = EffectBuild {
                effect: ToolEffect {
                    tool_call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    status: EffectStatus::Requested,
                    arguments: call.arguments.clone(),
                    requested_at: Some(format_timestamp(m.end_ns)),
                    started_at: None,
                    ended_at: None,
                    result: None,
                    error: None,
                    idempotency_key: None,
                    occurrence,
                    span_id: None,
                    retry: None,
                },
                request_step: Some(base + j),
                requested_ns: Some(m.end_ns),
                ended_ns: None,
            };
            let mut for_events = entry.clone();
            for_events.request_step = Some(j);
            requested.push(for_events);
            known.insert(ledger_len, entry);
            unbound.push(ledger_len);
            last_step.push(ledger_len);
            changed.insert(ledger_len);
            ledger_len += 1;
        }
    }
    // Unbound entries by call id, in ledger order; each tool span takes the first of its id.
    let mut unbound_by_id: HashMap<String, std::collections::VecDeque<u32>> = HashMap::new();
    for i in &unbound {
        if let Some(e) = known.get(i).filter(|e| e.effect.span_id.is_none()) {
            unbound_by_id
                .entry(e.effect.tool_call_id.clone())
                .or_default()
                .push_back(*i);
        }
    }
    let mut bound: HashSet<u32> = HashSet::new();
    for t in &tools {
        let id = t.tool_call_id.as_deref().unwrap_or("");
        let index = unbound_by_id.get_mut(id)?.pop_front()?;
        bound.insert(index);
        let entry = known.get_mut(&index)?;
        let e = &mut entry.effect;
        e.span_id = Some(t.span_id.clone());
        if e.tool_name.is_empty() {
            e.tool_name = t.tool_name.clone().unwrap_or_default();
        }
        if e.arguments.is_none() {
            e.arguments = t.arguments.clone();
        }
        e.started_at = Some(format_timestamp(t.start_ns));
        settle(entry, t);
        changed.insert(index);
    }
    unbound.retain(|i| !bound.contains(i));

    // Events: all after the stored ones, or the order would change.
    let model_facts: Vec<&SpanFact> = models.iter().map(|n| n.fact).collect();
    let mut events = build_events(None, None, &model_facts, &tools, &requested, None);
    if events.iter().any(|e| e.time_ns <= state.last_event_ns) {
        return None;
    }
    for e in events.iter_mut() {
        e.seq += old.event_count;
    }

    // Snapshots: the last request's reconstructed one, then the new requests'.
    let mut out = SnapshotBuilder::new(state.fixed.0, state.fixed.1.clone());
    let mut nodes: Vec<(NodeId, HistoryNode)> = Vec::new();
    let mut new_messages: Vec<Value> = Vec::new();
    let (mut model_instructions, agent_instructions) = state.instructions;
    let mut form = state.tool_return_form;
    let entries_of = |step: usize, known: &BTreeMap<u32, EffectBuild>| -> Vec<EffectBuild> {
        known
            .values()
            .filter(|e| e.request_step == Some(step))
            .cloned()
            .collect()
    };
    if let (Some(full), Some(last)) = (&state.last_full, (state.models as usize).checked_sub(1)) {
        let next_observed = models.first().is_some_and(|n| n.fact.input.is_some());
        if !next_observed {
            let entries = entries_of(last, &known);
            let instructions = model_instructions.or(agent_instructions);
            if let Some(r) = reconstruct(full, &entries, form.unwrap_or_default()) {
                r.push_to(
                    &mut out,
                    &mut nodes,
                    &mut new_messages,
                    state.models,
                    instructions,
                );
            }
        }
    }
    let mut fixed = state.fixed.clone();
    let mut last_full = state.last_full.clone();
    let mut output_nodes: Vec<(NodeId, HistoryNode)> = Vec::new();
    for (j, n) in models.iter().enumerate() {
        let m = n.fact;
        let k = base + j;
        let step_index = k as u32 + 1;
        if let Some(v) = &m.system_instructions {
            let hash = MessageHash::of(v);
            if model_instructions.as_ref() != Some(&hash) {
                new_messages.push(v.clone());
            }
            model_instructions = Some(hash);
        }
        form = m.tool_return_form.or(form);
        fixed = (out.next_seq, out.previous.clone());
        let previous_full = last_full.take();
        let Some(input) = &m.input else { continue };
        let instructions = model_instructions.or(agent_instructions);
        let mut walk = walk_input(input, n.input_prefixes, previous_full.as_ref());
        let history = n.input_chain.clone().unwrap_or_else(|| ChainRef::of(input));
        out.push(
            history.clone(),
            &walk,
            SnapshotSource::Observed,
            step_index,
            m.start_ns,
            instructions,
        );
        fixed = (out.next_seq, out.previous.clone());
        let (None, Some(output)) = (&m.error, &m.output) else {
            continue;
        };
        let mut tip = history.tip;
        for r in output {
            let id = NodeId::child(tip.as_ref(), &r.hash);
            output_nodes.push((
                id,
                HistoryNode {
                    parent: tip,
                    message: r.hash,
                },
            ));
            tip = Some(id);
            walk.push(&r.shape);
        }
        let full = LastFull {
            history: ChainRef {
                tip,
                len: history.len + output.len() as u32,
            },
            walk,
            end_ns: m.end_ns,
        };
        out.push(
            full.history.clone(),
            &full.walk,
            SnapshotSource::Observed,
            step_index,
            m.end_ns,
            instructions,
        );
        fixed = (out.next_seq, out.previous.clone());
        let next_observed = models.get(j + 1).is_some_and(|n| n.fact.input.is_some());
        if !next_observed {
            let entries = entries_of(k, &known);
            if let Some(r) = reconstruct(&full, &entries, form.unwrap_or_default()) {
                r.push_to(
                    &mut out,
                    &mut nodes,
                    &mut new_messages,
                    step_index,
                    instructions,
                );
            }
        }
        last_full = Some(full);
    }
    nodes.extend(output_nodes);
    let has_complete = state.has_complete
        || out
            .records
            .iter()
            .any(|s| s.meta.state == SnapshotState::Complete);
    if !has_complete {
        return None;
    }

    let mut run = old.clone();
    run.model_request_count += models.len() as u32;
    run.tool_call_count = ledger_len;
    run.snapshot_count = out.next_seq;
    run.event_count += events.len() as u32;
    run.input_tokens += models
        .iter()
        .filter_map(|n| n.fact.input_tokens)
        .sum::<u64>();
    run.output_tokens += models
        .iter()
        .filter_map(|n| n.fact.output_tokens)
        .sum::<u64>();
    run.continuation_unavailable = None;

    let pick = |indexes: &[u32]| -> Option<Vec<(u32, EffectBuild)>> {
        indexes
            .iter()
            .map(|i| known.get(i).map(|e| (*i, e.clone())))
            .collect()
    };
    let next = RunState {
        last_model: models
            .last()
            .map(|n| key(n.fact))
            .or_else(|| state.last_model.clone()),
        last_tool: tools
            .last()
            .map(|t| key(t))
            .or_else(|| state.last_tool.clone()),
        last_event_ns: events
            .iter()
            .map(|e| e.time_ns)
            .max()
            .unwrap_or(0)
            .max(state.last_event_ns),
        models: state.models + models.len() as u32,
        ledger_len,
        unbound: pick(&unbound)?,
        last_step: if models.is_empty() {
            pick(&state.last_step.iter().map(|(i, _)| *i).collect::<Vec<_>>())?
        } else {
            pick(&last_step)?
        },
        standalone: false,
        last_full,
        fixed,
        has_complete,
        instructions: (model_instructions, agent_instructions),
        tool_return_form: form,
    };
    Some(Append {
        run,
        events,
        effects: changed
            .iter()
            .filter_map(|i| known.get(i).map(|e| (*i, e.effect.clone())))
            .collect(),
        snapshots: out.records,
        new_messages,
        nodes,
        call_counts: counts.into_iter().collect(),
        state: next,
    })
}

/// The validity walk over a request's input. When the input starts with the previous request's
/// full history (its node ids say so: a node id names its whole history), the walk goes on from
/// where that history's walk ended, which is where a walk from the first message would be.
fn walk_input(
    input: &[MessageRef],
    prefixes: Option<&[NodeId]>,
    previous: Option<&LastFull>,
) -> WalkState {
    if let (Some(ids), Some(full)) = (prefixes, previous) {
        let len = full.history.len as usize;
        let extends = ids.len() == input.len()
            && len > 0
            && len <= input.len()
            && full.history.tip.as_ref() == ids.get(len - 1);
        if extends {
            let mut walk = full.walk.clone();
            input[len..].iter().for_each(|r| walk.push(&r.shape));
            return walk;
        }
    }
    let mut walk = WalkState::default();
    input.iter().for_each(|r| walk.push(&r.shape));
    walk
}

/// A reconstructed snapshot: the last request's full history answered from the tool spans.
struct Reconstructed {
    history: ChainRef,
    walk: WalkState,
    time_ns: u64,
    node: (NodeId, HistoryNode),
    message: Value,
}

impl Reconstructed {
    fn push_to(
        self,
        out: &mut SnapshotBuilder,
        nodes: &mut Vec<(NodeId, HistoryNode)>,
        messages: &mut Vec<Value>,
        step_index: u32,
        instructions: Option<MessageHash>,
    ) {
        nodes.push(self.node);
        messages.push(self.message);
        out.push(
            self.history,
            &self.walk,
            SnapshotSource::Reconstructed,
            step_index,
            self.time_ns,
            instructions,
        );
    }
}

/// The reconstructed snapshot after `full`, its answer in `form`, when every call it leaves open
/// is settled.
fn reconstruct(
    full: &LastFull,
    entries: &[EffectBuild],
    form: ToolReturnForm,
) -> Option<Reconstructed> {
    let Walk::Open(open) = full.walk.result() else {
        return None;
    };
    let (message, time_ns) = reconstructed_answer(&open, entries.iter(), full.end_ns, form)?;
    let answer = MessageRef::of(&message);
    let id = NodeId::child(full.history.tip.as_ref(), &answer.hash);
    let mut walk = full.walk.clone();
    walk.push(&answer.shape);
    Some(Reconstructed {
        history: ChainRef {
            tip: Some(id),
            len: full.history.len + 1,
        },
        walk,
        time_ns,
        node: (
            id,
            HistoryNode {
                parent: full.history.tip,
                message: answer.hash,
            },
        ),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ChainIds;
    use serde_json::json;

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
}
