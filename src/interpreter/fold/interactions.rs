//! Waiting runs: the tool calls a run ended waiting on (a human's approval, an external
//! result), and their resolution by a later run of the same conversation.
//!
//! A run whose agent-run span ended without error waits on a call of its last model request
//! that nothing answered:
//! - a tool span marked as deferred (Pydantic AI `pydantic_ai.tool.deferral.name`:
//!   `ApprovalRequired` → approval, `CallDeferred` → external);
//! - a call with no tool span that the run's final history (Pydantic AI `all_messages`) leaves
//!   unanswered (Pydantic AI `requires_approval=True`: the tool is not even started) → approval;
//! - in a run without a final history (OpenAI Agents), a call whose tool span ended with
//!   neither result nor error and no model request after it (`needs_approval`: the SDK opens the
//!   function span, then interrupts) → approval.
//!
//! Such entries get status `waiting` and their interaction kind, and the run `waiting`. The
//! answers later runs gave ([`RunMeta::resolutions`], found by the writer by tool-call id within
//! the conversation) settle them: an answered entry is `completed` with `resolved_by_run_id`,
//! and once every waiting entry is answered the run is `completed` with `resumed_by_run_id`.
//! The fold stays a pure function of the facts and the meta.

use std::collections::HashSet;

use super::state::Acc;
use crate::domain::{
    format_timestamp, EffectStatus, InteractionKind, MessageRef, Run, RunStatus, ToolEffect,
};
use crate::records::run_state::RunMeta;

/// Marks the entries of the last model request the run ended waiting on (see the module
/// docs). `final_history` is the run's final history, when its span carries it. Call before
/// the ledger is closed, for a run whose agent-run span ended without error.
pub(super) fn mark_waiting(acc: &mut Acc, final_history: Option<&[MessageRef]>) {
    let answered: HashSet<&str> = final_history
        .into_iter()
        .flatten()
        .flat_map(|m| m.shape.closes.iter().map(String::as_str))
        .collect();
    for i in &acc.last_step {
        let Some(entry) = acc.known.get_mut(i) else {
            continue;
        };
        let e = &mut entry.effect;
        if answered.contains(e.tool_call_id.as_str()) || e.tool_call_id.is_empty() {
            continue;
        }
        let kind = if let Some(kind) = e.interaction {
            // A tool span marked deferred: it did not run, whatever it says.
            Some(kind)
        } else if e.span_id.is_none() && e.status == EffectStatus::Requested {
            final_history.is_some().then_some(InteractionKind::Approval)
        } else {
            let empty = e.status == EffectStatus::Completed
                && e.result.is_none()
                && e.error.is_none()
                && e.span_id.is_some();
            (final_history.is_none() && empty).then_some(InteractionKind::Approval)
        };
        if let Some(kind) = kind {
            e.interaction = Some(kind);
            e.status = EffectStatus::Waiting;
            e.ended_at = None;
            e.result = None;
        }
    }
}

/// Applies the answers `meta` records to the waiting entries of `effects`, and sets the run's
/// status: `waiting` while an entry waits (`abandoned` once the waiting timeout or a user
/// declared it dead), else `completed`, with `resumed_by_run_id` when answers resumed it.
pub(super) fn resolve(run: &mut Run, effects: &mut [ToolEffect], meta: &RunMeta) {
    let mut waiting = false;
    let mut resumed: Option<&crate::domain::Resolution> = None;
    for e in effects.iter_mut().filter(|e| e.interaction.is_some()) {
        if e.status != EffectStatus::Waiting {
            continue;
        }
        match meta.resolutions.get(&e.tool_call_id) {
            Some(r) => {
                e.status = EffectStatus::Completed;
                e.ended_at = Some(format_timestamp(r.at_ns));
                e.resolved_by_run_id = Some(r.run_id.clone());
                if resumed.is_none_or(|first| r < first) {
                    resumed = Some(r);
                }
            }
            None => waiting = true,
        }
    }
    if run.status != RunStatus::Completed {
        return;
    }
    if waiting {
        match &meta.abandoned {
            Some(a) => {
                run.status = RunStatus::Abandoned;
                run.error = Some(a.reason.clone());
            }
            None => run.status = RunStatus::Waiting,
        }
    } else if let Some(r) = resumed {
        run.resumed_by_run_id = Some(r.run_id.clone());
    }
}

/// The tool-call ids a run waits on (its entries with status `waiting`).
pub fn waiting_calls(effects: &[ToolEffect]) -> impl Iterator<Item = &str> {
    effects
        .iter()
        .filter(|e| e.status == EffectStatus::Waiting)
        .map(|e| e.tool_call_id.as_str())
}
