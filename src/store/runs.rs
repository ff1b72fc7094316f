//! Reads of runs and what they hold: a run's record (damaged runs readable with their reason),
//! the run list by index, a run's tool-effect ledger (its step events: [`super::events`]).

use std::time::Duration;

use super::activity::WrittenRun;
use super::changes::{ChangeMark, Changed};
use super::core::{decode, lock_cache, Store, WriteBatch};
use super::damage;
use super::error::StoreError;
use super::keys::{self, cf, RunFilter};
use crate::domain::{EffectOutcome, Run, ToolEffect};
use crate::records::effect_outcome;

/// Index entries one page of a filter no index serves reads at most.
pub const SCANNED_PER_PAGE: usize = 10_000;

impl Store {
    /// A run by its id, for readers: a run marked damaged (see [`super::damage`]) carries a
    /// `damaged: <reason>` warning, and a run whose record cannot be decoded is given as a
    /// placeholder that says so, so one damaged run never hides the others.
    pub fn run(&self, run_id: &str) -> Result<Option<Run>, StoreError> {
        self.readable_run(run_id, 0)
    }

    /// [`Store::run`], with the start (from an index position) for a placeholder.
    fn readable_run(&self, run_id: &str, started_ns: u64) -> Result<Option<Run>, StoreError> {
        let damage = self.damage(run_id)?;
        match self.run_record(run_id) {
            Ok(Some(mut run)) => {
                if let Some(reason) = damage {
                    run.warnings.push(damage::warning(&reason));
                }
                run.continued_from = self.continued_from(run_id)?;
                Ok(Some(run))
            }
            Ok(None) => Ok(None),
            Err(e) if !e.is_retryable() => Ok(Some(damage::placeholder(
                run_id,
                started_ns,
                &damage.unwrap_or_else(|| e.to_string()),
            ))),
            Err(e) => Err(e),
        }
    }

    /// A run's stored record as written (the writer's read: no damage warnings, and a record
    /// that cannot be decoded is an error).
    pub fn run_record(&self, run_id: &str) -> Result<Option<Run>, StoreError> {
        self.get_json(cf::RUNS, run_id.as_bytes())
    }

    /// Resolves a run id or an alias (e.g. `gen_ai.agent.call.id`) to a run id.
    pub fn resolve_run(&self, id_or_alias: &str) -> Result<Option<String>, StoreError> {
        if self.kv.contains(cf::RUNS, id_or_alias.as_bytes())? {
            return Ok(Some(id_or_alias.to_string()));
        }
        self.get_text(cf::ALIASES, id_or_alias.as_bytes())
    }

    /// Runs passing `filter`, in start order, after `cursor` (a value from a previous page),
    /// at most `limit`; with the cursor of the next page when there is one. A filter no index
    /// serves (`min_tool_calls`) reads at most [`SCANNED_PER_PAGE`] index entries: a page may
    /// then hold fewer than `limit` runs (even none) and still have a next cursor.
    pub fn list_runs(
        &self,
        filter: &RunFilter,
        cursor: Option<&[u8]>,
        limit: usize,
    ) -> Result<(Vec<Run>, Option<Vec<u8>>), StoreError> {
        let prefix = filter.scan_prefix();
        // A filter no index serves reads at most this many index entries per page.
        let mut budget = filter.scans().then_some(SCANNED_PER_PAGE);
        let mut start = prefix.clone();
        if let Some(c) = cursor {
            start.extend_from_slice(c);
            start.push(0); // strictly after the cursor position
        }
        let mut runs = Vec::new();
        let mut next = None;
        let mut last: Option<Vec<u8>> = None;
        self.scan(cf::RUN_INDEX, &prefix, &start, |key, _| {
            let position = &key[prefix.len()..];
            if let Some(left) = budget.as_mut() {
                if *left == 0 {
                    // Out of budget: the next page goes on after the last entry read.
                    next = last.take();
                    return Ok(false);
                }
                *left -= 1;
                last = Some(position.to_vec());
            }
            let Some(run_id) = position.get(8..).and_then(|b| std::str::from_utf8(b).ok()) else {
                return Ok(true);
            };
            let started_ns = position
                .get(..8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_be_bytes);
            if let Some(run) = self.readable_run(run_id, started_ns)? {
                if filter.matches(&run) {
                    if runs.len() == limit {
                        next = Some(keys::index_position(&runs[runs.len() - 1]));
                        return Ok(false);
                    }
                    runs.push(run);
                }
            }
            Ok(true)
        })?;
        Ok((runs, next))
    }

    /// A run's tool-effect ledger.
    pub fn effects(&self, run_id: &str) -> Result<Vec<ToolEffect>, StoreError> {
        self.run_records(cf::EFFECTS, run_id)
    }

    /// A run's tool-effect ledger as a continuation reads it: how each entry ended, in request
    /// order, and the whole entries of the unresolved calls (the others' arguments, results and
    /// times are skipped, not built).
    pub fn effect_outcomes(
        &self,
        run_id: &str,
    ) -> Result<(Vec<EffectOutcome>, Vec<ToolEffect>), StoreError> {
        self.effect_outcomes_with(run_id, 0, |_| None)
    }

    /// The point the store's commits have reached. Taken before reading a run's ledger (or its
    /// model-request records), it lets a later reader ask what changed since
    /// ([`Store::ledger_changes`], [`Store::model_request_changes`]).
    pub fn change_mark(&self) -> ChangeMark {
        lock_cache(&self.changes).mark()
    }

    /// Estimated bytes held by the log of where recent commits changed runs' ledgers and
    /// model-request records, and its fixed bound.
    pub fn change_log_bytes(&self) -> (usize, usize) {
        (lock_cache(&self.changes).bytes(), super::changes::BYTES)
    }

    /// What commits after `mark` changed of the run's ledger: from which entry (its position,
    /// from 0) entries were put or deleted.
    pub fn ledger_changes(&self, run_id: &str, mark: ChangeMark) -> Changed<u32> {
        // A run without a key has no ledger; a key that cannot be read tells nothing.
        let Ok(Some(run)) = self.run_key(run_id) else {
            return Changed::Unknown;
        };
        let prefix = run.0;
        match lock_cache(&self.changes).since(cf::EFFECTS, &prefix, mark) {
            Changed::From(key) => key
                .get(prefix.len()..)
                .and_then(|n| <[u8; 4]>::try_from(n).ok())
                .map_or(Changed::Unknown, |n| Changed::From(u32::from_be_bytes(n))),
            Changed::Nothing => Changed::Nothing,
            Changed::Unknown => Changed::Unknown,
        }
    }

    /// [`Store::effect_outcomes`] of the entries from position `from` on, first asking `known`
    /// about each entry's stored bytes (called once per entry, in request order): an outcome it gives is taken instead of decoding the
    /// entry, so a caller that read the ledger before decodes only what changed since. The others
    /// are read by [`effect_outcome::read`], and by serde when that gives up.
    pub fn effect_outcomes_with(
        &self,
        run_id: &str,
        from: u32,
        mut known: impl FnMut(&[u8]) -> Option<EffectOutcome>,
    ) -> Result<(Vec<EffectOutcome>, Vec<ToolEffect>), StoreError> {
        let (mut outcomes, mut unresolved) = (Vec::new(), Vec::new());
        let Some(run) = self.run_key(run_id)? else {
            return Ok((outcomes, unresolved));
        };
        let (prefix, start) = (run.0, keys::run_key_seq(run, from));
        self.scan(cf::EFFECTS, &prefix, &start, |_, v| {
            let outcome: EffectOutcome = match known(v).or_else(|| effect_outcome::read(v)) {
                Some(outcome) => outcome,
                None => decode(cf::EFFECTS, v)?,
            };
            if outcome.status.is_unresolved() {
                unresolved.push(decode(cf::EFFECTS, v)?);
            }
            outcomes.push(outcome);
            Ok(true)
        })?;
        Ok((outcomes, unresolved))
    }

    /// Ids of runs whose status is `running`.
    pub fn running_run_ids(&self) -> Result<Vec<String>, StoreError> {
        self.run_ids_with_status(crate::domain::RunStatus::Running)
    }

    /// Ids of runs whose status is `status`, from the status index.
    pub(super) fn run_ids_with_status(
        &self,
        status: crate::domain::RunStatus,
    ) -> Result<Vec<String>, StoreError> {
        let prefix = keys::index_prefix(b's', status.as_str());
        let mut out = Vec::new();
        self.scan(cf::RUN_INDEX, &prefix, &prefix, |k, _| {
            if let Some(id) = k
                .get(prefix.len() + 8..)
                .and_then(|b| std::str::from_utf8(b).ok())
            {
                out.push(id.to_string());
            }
            Ok(true)
        })?;
        Ok(out)
    }

    /// Takes the runs written since they were last taken whose last commit is at least `quiet`
    /// old; a run written again later is given again (see [`super::activity`]).
    pub fn take_quiet_runs(&self, quiet: Duration) -> Vec<WrittenRun> {
        lock_cache(&self.recent).take_quiet(quiet)
    }
}

impl WriteBatch<'_> {
    /// Puts a run's ledger entry at position `seq`.
    pub fn put_effect(
        &mut self,
        run_id: &str,
        seq: u32,
        effect: &ToolEffect,
    ) -> Result<(), StoreError> {
        let key = keys::run_key_seq(self.run_key(run_id)?, seq);
        self.put_json(cf::EFFECTS, &key, effect)
    }
}
