//! The tool-effect ledger of a run: entries the model requests ask for, tool spans bound to
//! them, answers a later input (or the run's final history) shows, and the reconstructed tool
//! return a request's settled entries give. Each rule lives here once; the fold applies them.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use serde_json::Value;

use super::state::Acc;
use crate::domain::{format_timestamp, EffectStatus, ToolEffect};
use crate::interpreter::fact::{RequestedCall, SpanFact};
use crate::interpreter::tool_return::{Answer, ToolReturnForm};
use crate::records::run_state::EffectBuild;

/// A new ledger entry for call `id` of tool `name` with `status`, its `occurrence`-th of that id.
fn entry(id: &str, name: &str, status: EffectStatus, occurrence: u32) -> ToolEffect {
    ToolEffect {
        tool_call_id: id.to_string(),
        tool_name: name.to_string(),
        status,
        arguments: None,
        requested_at: None,
        started_at: None,
        ended_at: None,
        result: None,
        error: None,
        idempotency_key: None,
        occurrence,
        span_id: None,
        retry: None,
        duration_ms: None,
        interaction: None,
        resolved_by_run_id: None,
    }
}

/// The entry model request `model` (the run's `step`-th) asks for with `call`.
pub(super) fn requested(
    call: &RequestedCall,
    model: &SpanFact,
    step: usize,
    occurrence: u32,
) -> EffectBuild {
    let mut effect = entry(&call.id, &call.name, EffectStatus::Requested, occurrence);
    effect.arguments = call.arguments.clone();
    effect.requested_at = Some(format_timestamp(model.end_ns));
    EffectBuild {
        effect,
        request_step: Some(step),
        requested_ns: Some(model.end_ns),
        ended_ns: None,
    }
}

/// The entry of a tool span no model request asked for (or none that was seen).
fn standalone(id: &str, name: &str, occurrence: u32) -> EffectBuild {
    EffectBuild {
        effect: entry(id, name, EffectStatus::Started, occurrence),
        request_step: None,
        requested_ns: None,
        ended_ns: None,
    }
}

/// Binds tool span `tool` to its entry: span, start, the name and arguments the request left
/// out, and (once the span is over) what it settled.
fn bind(entry: &mut EffectBuild, tool: &SpanFact) {
    let e = &mut entry.effect;
    e.span_id = Some(tool.span_id.clone());
    if e.tool_name.is_empty() {
        e.tool_name = tool.tool_name.clone().unwrap_or_default();
    }
    if e.arguments.is_none() {
        e.arguments = tool.arguments.clone();
    }
    e.started_at = Some(format_timestamp(tool.start_ns));
    e.interaction = tool.deferral.or(e.interaction);
    if tool.pending {
        // Running: an answer an input showed is not its end.
        e.status = EffectStatus::Started;
        e.ended_at = None;
        e.duration_ms = None;
        return;
    }
    settle(entry, tool);
}

/// Records what a finished tool span says on its ledger entry: end time, result or error, and
/// the status they give.
fn settle(entry: &mut EffectBuild, tool: &SpanFact) {
    let e = &mut entry.effect;
    e.ended_at = Some(format_timestamp(tool.end_ns));
    e.duration_ms = Some(crate::domain::duration_ms(tool.start_ns, tool.end_ns));
    e.result = tool.result.clone();
    e.error = tool.error.clone();
    e.retry = tool.retry.clone();
    e.idempotency_key = tool.idempotency_key.clone();
    e.status = if tool.error.is_some() {
        EffectStatus::Failed
    } else {
        EffectStatus::Completed
    };
    entry.ended_ns = Some(tool.end_ns);
}

/// What one fold step changed in the ledger.
#[derive(Default)]
pub(super) struct LedgerStep {
    /// Indexes of the entries added or changed.
    pub changed: BTreeSet<u32>,
    /// Per model request of the step (in order), the indexes of the entries it asked for.
    pub asked: Vec<std::ops::Range<u32>>,
    /// Tool-call ids met, with how many ledger entries now have each.
    pub counts: HashMap<String, u32>,
}

/// Entries still `Requested` (no tool span, no answer yet) of one call id, by request time.
type Awaiting = HashMap<String, BTreeSet<(u64, u32)>>;

/// Applies a step's model requests (`models`, the run's `acc.models`-th on, in order) and tool
/// spans (in order) to the ledger: a request's input answers earlier entries, its calls add
/// entries, tool spans bind to the first unbound entry of their call id (of their name, for a
/// span without an id). A tool span no entry waits for gets an entry of its own, unless `strict`
/// (an append): then `None`. `occurrences(id)` says how many entries with call id `id` the
/// ledger had before the step (`None`: unknown, give up).
pub(super) fn apply(
    acc: &mut Acc,
    models: &[&SpanFact],
    tools: &[&SpanFact],
    strict: bool,
    mut occurrences: impl FnMut(&str) -> Option<u32>,
) -> Option<LedgerStep> {
    let mut step = LedgerStep::default();
    let mut occurrence = |id: &str, counts: &mut HashMap<String, u32>| -> Option<u32> {
        let n = match counts.get(id) {
            Some(n) => *n,
            None => occurrences(id)?,
        };
        counts.insert(id.to_string(), n + 1);
        Some(n)
    };
    let mut awaiting: Awaiting = HashMap::new();
    for i in &acc.unbound {
        if let Some(e) = acc.known.get(i) {
            if e.effect.status == EffectStatus::Requested {
                awaiting
                    .entry(e.effect.tool_call_id.clone())
                    .or_default()
                    .insert((e.requested_ns.unwrap_or(0), *i));
            }
        }
    }
    let base = acc.models as usize;
    for (j, m) in models.iter().enumerate() {
        if let Some(input) = m.input.as_ref().filter(|_| !awaiting.is_empty()) {
            answer_by_input(acc, &mut awaiting, input, m.start_ns, &mut step.changed);
        }
        acc.last_step.clear();
        let first = acc.ledger_len;
        if m.error.is_none() {
            for call in &m.requested_calls {
                let n = occurrence(&call.id, &mut step.counts)?;
                let index = acc.ledger_len;
                acc.known.insert(index, requested(call, m, base + j, n));
                awaiting
                    .entry(call.id.clone())
                    .or_default()
                    .insert((m.end_ns, index));
                acc.unbound.push(index);
                acc.last_step.push(index);
                step.changed.insert(index);
                acc.ledger_len += 1;
            }
        }
        step.asked.push(first..acc.ledger_len);
    }
    acc.models += models.len() as u32;

    // Unbound entries by call id and by tool name, in ledger order.
    let mut by_id: HashMap<&str, VecDeque<u32>> = HashMap::new();
    let mut by_name: HashMap<&str, VecDeque<u32>> = HashMap::new();
    let idless = tools
        .iter()
        .any(|t| t.tool_call_id.as_deref().unwrap_or("").is_empty());
    for i in &acc.unbound {
        if let Some(e) = acc.known.get(i) {
            by_id
                .entry(&e.effect.tool_call_id)
                .or_default()
                .push_back(*i);
            if idless {
                by_name
                    .entry(&e.effect.tool_name)
                    .or_default()
                    .push_back(*i);
            }
        }
    }
    let mut bound: HashSet<u32> = HashSet::new();
    let mut binds: Vec<(u32, &SpanFact)> = Vec::with_capacity(tools.len());
    let mut added: Vec<(u32, EffectBuild)> = Vec::new();
    for &t in tools {
        let id = t.tool_call_id.as_deref().unwrap_or("");
        let name = t.tool_name.as_deref().unwrap_or("");
        let queue = if id.is_empty() {
            by_name.get_mut(name)
        } else {
            by_id.get_mut(id)
        };
        // The first entry of that id (or name) not bound yet: ones bound meanwhile are dropped.
        let slot = queue.and_then(|q| {
            while let Some(i) = q.pop_front() {
                if !bound.contains(&i) {
                    return Some(i);
                }
            }
            None
        });
        let index = match slot {
            Some(i) => i,
            None if strict => return None,
            None => {
                let n = occurrence(id, &mut step.counts)?;
                let index = acc.ledger_len + added.len() as u32;
                added.push((index, standalone(id, name, n)));
                index
            }
        };
        bound.insert(index);
        binds.push((index, t));
    }
    drop((by_id, by_name));
    acc.standalone |= !added.is_empty();
    acc.ledger_len += added.len() as u32;
    acc.known.extend(added);
    for (index, tool) in binds {
        if let Some(entry) = acc.known.get_mut(&index) {
            bind(entry, tool);
            step.changed.insert(index);
        }
    }
    acc.unbound.retain(|i| !bound.contains(i));
    Some(step)
}

/// A request starting at `start_ns` whose `input` answers a call settles the entries of that
/// call requested at or before `start_ns` that nothing settled yet (output tools, tools run
/// outside the instrumentation).
fn answer_by_input(
    acc: &mut Acc,
    awaiting: &mut Awaiting,
    input: &[crate::domain::MessageRef],
    start_ns: u64,
    changed: &mut BTreeSet<u32>,
) {
    let closed: HashSet<&str> = input
        .iter()
        .flat_map(|r| r.shape.closes.iter().map(String::as_str))
        .collect();
    for id in closed {
        let Some(waiting) = awaiting.get_mut(id) else {
            continue;
        };
        let later = waiting.split_off(&(start_ns.saturating_add(1), 0));
        for (_, i) in std::mem::replace(waiting, later) {
            let Some(e) = acc.known.get_mut(&i) else {
                continue;
            };
            if e.effect.status == EffectStatus::Requested && e.effect.span_id.is_none() {
                e.effect.status = EffectStatus::Completed;
                e.effect.ended_at = Some(format_timestamp(start_ns));
                changed.insert(i);
            }
        }
        if waiting.is_empty() {
            awaiting.remove(id);
        }
    }
}

/// The run is over: an entry still waiting is settled by the run's final history when that
/// answers it (at `end_ns`), and an entry nothing settled becomes unknown once `over`.
pub(super) fn close(
    acc: &mut Acc,
    final_history: Option<(&[crate::domain::MessageRef], u64)>,
    over: bool,
) {
    let closed: Option<(HashSet<&str>, u64)> = final_history.map(|(all, end)| {
        let ids = all
            .iter()
            .flat_map(|m| m.shape.closes.iter().map(String::as_str))
            .collect();
        (ids, end)
    });
    for e in acc.known.values_mut() {
        let effect = &mut e.effect;
        if effect.status == EffectStatus::Requested {
            if let Some((ids, end)) = &closed {
                if ids.contains(effect.tool_call_id.as_str()) {
                    effect.status = EffectStatus::Completed;
                    effect.ended_at = Some(format_timestamp(*end));
                }
            }
        }
        if over && effect.status.is_unsettled() {
            effect.status = EffectStatus::UnknownAfterCrash;
        }
    }
}

/// The reconstructed tool message answering `open` calls of a model request from its settled
/// ledger entries, in `form`, with the time of the last answer; none unless every open call is
/// answered. Parts follow the order of `open` (the order of the calls); a failed call's error
/// text goes under the same key as a result.
pub(super) fn reconstructed_answer<'e>(
    open: &[String],
    entries: impl Iterator<Item = &'e EffectBuild>,
    fallback_ns: u64,
    form: ToolReturnForm,
) -> Option<(Value, u64)> {
    // The first settled entry of each call id, in entry order.
    let mut settled: HashMap<&str, &EffectBuild> = HashMap::new();
    for e in entries {
        if e.effect.span_id.is_some()
            && matches!(
                e.effect.status,
                EffectStatus::Completed | EffectStatus::Failed
            )
        {
            settled.entry(e.effect.tool_call_id.as_str()).or_insert(e);
        }
    }
    let answers: Vec<&EffectBuild> = open
        .iter()
        .map(|id| settled.get(id.as_str()).copied())
        .collect::<Option<_>>()?;
    let message = form.message(answers.iter().map(|e| {
        Answer {
            id: &e.effect.tool_call_id,
            name: &e.effect.tool_name,
            result: e
                .effect
                .result
                .clone()
                .or_else(|| e.effect.error.clone().map(Value::String))
                .unwrap_or(Value::Null),
        }
    }));
    let time_ns = answers
        .iter()
        .filter_map(|e| e.ended_ns)
        .max()
        .unwrap_or(fallback_ns);
    Some((message, time_ns))
}
