//! Abandonment: declaring a run dead (by a user, or by the inactivity sweep). Its unsettled tool
//! calls become `unknown_after_crash` when the run is derived again. A run waiting on calls
//! (status `waiting`) can be abandoned too (by a user, or after the waiting timeout): its
//! waiting calls stay `waiting`, the run becomes `abandoned`.

use crate::domain::RunStatus;
use crate::interpreter::{Abandonment, FactKind};
use crate::store::{Store, StoreError};

use super::request::{AbandonOutcome, SweepOutcome};
use super::work_set::{load_full, Runs};

/// Abandons run `run` (an id or an alias; a run only this group knows counts too) at `at_ns`
/// for `reason`, unless it is over already or, when `silent_since_ns` is not 0, a fact arrived
/// after that time.
pub(super) fn abandon_run(
    store: &Store,
    runs: &mut Runs,
    run: &str,
    reason: &str,
    at_ns: u64,
    silent_since_ns: u64,
) -> Result<SweepOutcome, StoreError> {
    match store.resolve_run(run)? {
        Some(run_id) => abandon(store, runs, &run_id, reason, at_ns, silent_since_ns),
        None if runs.contains_key(run) => abandon(store, runs, run, reason, at_ns, silent_since_ns),
        None => Ok(SweepOutcome::Decided(AbandonOutcome::UnknownRun)),
    }
}

fn abandon(
    store: &Store,
    runs: &mut Runs,
    run_id: &str,
    reason: &str,
    at_ns: u64,
    silent_since_ns: u64,
) -> Result<SweepOutcome, StoreError> {
    let work = load_full(store, runs, run_id)?;
    let waiting = work
        .old
        .as_ref()
        .is_some_and(|r| r.status == RunStatus::Waiting);
    let facts = work.all.as_ref().map(|a| a.values()).into_iter().flatten();
    let mut facts = facts.peekable();
    if facts.peek().is_none() {
        return Ok(SweepOutcome::Decided(AbandonOutcome::UnknownRun));
    }
    let ended = facts
        .find(|f| f.kind == FactKind::AgentRun && !f.pending)
        .filter(|_| !waiting);
    if let Some(agent) = ended {
        let status = if agent.error.is_some() {
            "failed"
        } else {
            "completed"
        };
        return Ok(SweepOutcome::Decided(AbandonOutcome::AlreadyOver(
            run_id.to_string(),
            status.into(),
        )));
    }
    if work.meta.abandoned.is_some() {
        return Ok(SweepOutcome::Decided(AbandonOutcome::AlreadyOver(
            run_id.to_string(),
            "abandoned".into(),
        )));
    }
    if silent_since_ns > 0 && work.meta.last_seen_ns > silent_since_ns {
        return Ok(SweepOutcome::StillActive);
    }
    work.full = true;
    work.meta.abandoned = Some(Abandonment {
        at_ns,
        reason: reason.to_string(),
    });
    work.dirty = true;
    Ok(SweepOutcome::Decided(AbandonOutcome::Abandoned(
        run_id.to_string(),
    )))
}
