//! The run record's rollups: who started the run and its configured attributes (merged from the
//! facts' [`RunInfo`]), model and tool time, and the ledger's entries by status.
//!
//! A derivation computes them from everything it folded; an append updates them from what it
//! changed: the durations of its new model requests, and for every ledger entry it changed, the
//! entry's contribution before the step taken out and its contribution after put in. The guard
//! sends facts that would add to the trigger or the attributes to a full derivation (they
//! change the run's index keys), so an append never changes those.

use std::collections::{BTreeMap, BTreeSet};

use super::state::Acc;
use super::NewFact;
use crate::domain::{duration_ms, EffectStatus, Run, RunInfo, ToolCallCounts, ToolEffect};
use crate::interpreter::fact::SpanFact;

/// The run's trigger and attributes: per key, the run span's value, else the value of the
/// earliest fact (by start, then span id) that has one.
pub(super) fn run_info(agent: Option<&SpanFact>, facts: &[SpanFact]) -> RunInfo {
    let mut others: Vec<&SpanFact> = facts.iter().filter(|f| !f.run_info.is_empty()).collect();
    others.sort_by(|a, b| (a.start_ns, &a.span_id).cmp(&(b.start_ns, &b.span_id)));
    let mut info = RunInfo::default();
    for f in agent.into_iter().chain(others) {
        info.merge_missing(&f.run_info);
    }
    info
}

/// Puts `info` on the run record.
pub(super) fn set_info(run: &mut Run, info: RunInfo) {
    run.trigger = (!info.trigger.is_empty()).then_some(info.trigger);
    run.attributes = info.attributes;
}

/// The run record's trigger and attributes as one [`RunInfo`].
pub(super) fn info_of(run: &Run) -> RunInfo {
    RunInfo {
        trigger: run.trigger.clone().unwrap_or_default(),
        attributes: run.attributes.clone(),
    }
}

/// Whole milliseconds of model requests `models` (a pending one has none yet).
pub(super) fn model_time(models: &[NewFact<'_>]) -> u64 {
    models
        .iter()
        .filter(|n| !n.fact.pending)
        .map(|n| duration_ms(n.fact.start_ns, n.fact.end_ns))
        .fold(0u64, u64::saturating_add)
}

/// Sets the ledger rollups of a run whose whole ledger is `effects`.
pub(super) fn set_ledger(run: &mut Run, effects: &[ToolEffect]) {
    let mut counts = ToolCallCounts::default();
    let mut time = 0u64;
    for e in effects {
        counts.add(e.status);
        time = time.saturating_add(e.duration_ms.unwrap_or(0));
    }
    run.tool_calls_by_status = counts;
    run.tool_time_ms = time;
}

/// What the entries an append may change contributed before it: status and duration by index.
pub(super) struct Before(BTreeMap<u32, (EffectStatus, u64)>);

/// The contributions of the entries `acc` can still change.
pub(super) fn before(acc: &Acc) -> Before {
    Before(
        acc.known
            .iter()
            .map(|(i, e)| (*i, (e.effect.status, e.effect.duration_ms.unwrap_or(0))))
            .collect(),
    )
}

/// Updates the ledger rollups of `run` for the entries `changed` (now as `acc` holds them).
pub(super) fn update_ledger(run: &mut Run, before: &Before, acc: &Acc, changed: &BTreeSet<u32>) {
    for i in changed {
        if let Some((status, ms)) = before.0.get(i) {
            run.tool_calls_by_status.remove(*status);
            run.tool_time_ms = run.tool_time_ms.saturating_sub(*ms);
        }
        if let Some(e) = acc.known.get(i) {
            run.tool_calls_by_status.add(e.effect.status);
            run.tool_time_ms = run
                .tool_time_ms
                .saturating_add(e.effect.duration_ms.unwrap_or(0));
        }
    }
}
