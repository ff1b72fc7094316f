//! Run aliases (framework run ids such as `gen_ai.agent.call.id`) and who owns them.
//!
//! An alias belongs to the first run that claimed it: `aliases` maps it to that run for good.
//! A later run carrying the same alias does not take it over (lookups keep resolving to the
//! first run); the refused claim is counted ([`Store::alias_conflicts`]), logged, and listed on
//! the claiming run as a warning. An alias whose run is gone (merged into the run above a
//! grouping span) is free again.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use super::core::{Store, WriteBatch};
use super::error::StoreError;
use super::keys::cf;

/// The aliases one write batch claimed, and the runs it deleted, so claims made in the same
/// batch are decided in order and an alias of a deleted run can be taken.
#[derive(Debug, Default)]
pub struct AliasClaims {
    claimed: HashMap<String, String>,
    released: HashSet<String>,
    conflicts: u64,
}

impl AliasClaims {
    /// The run is deleted by this batch: aliases it owned may be claimed by another run.
    pub fn release_run(&mut self, run_id: &str) {
        self.released.insert(run_id.to_string());
    }

    /// Claims `alias` for `run_id`: writes the mapping when the alias is free (or already the
    /// run's); when another run owns it, nothing is written and the owner is returned.
    pub fn claim(
        &mut self,
        store: &Store,
        batch: &mut WriteBatch<'_>,
        alias: &str,
        run_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let owner = match self.claimed.get(alias) {
            Some(owner) => Some(owner.clone()),
            None => store.alias_owner(alias)?,
        };
        match owner {
            Some(owner) if owner == run_id => {
                self.claimed.insert(alias.to_string(), owner);
                Ok(None)
            }
            Some(owner)
                if self.released.contains(&owner)
                    || (!self.claimed.contains_key(alias) && !store.has_run(&owner)?) =>
            {
                batch.put_raw(cf::ALIASES, alias.as_bytes(), run_id.as_bytes())?;
                self.claimed.insert(alias.to_string(), run_id.to_string());
                Ok(None)
            }
            Some(owner) => Ok(Some(owner)),
            None => {
                batch.put_raw(cf::ALIASES, alias.as_bytes(), run_id.as_bytes())?;
                self.claimed.insert(alias.to_string(), run_id.to_string());
                Ok(None)
            }
        }
    }

    /// Counts and logs a refused claim the claiming run did not list yet (a run derived again
    /// refuses the same claim again: that is not counted twice).
    pub fn refused(&mut self, alias: &str, owner: &str, claimant: &str) {
        self.conflicts += 1;
        tracing::warn!(
            alias,
            owner,
            claimant,
            "a run carries an alias another run owns; the alias stays with its first run"
        );
    }

    /// Refused claims counted so far.
    pub fn conflicts(&self) -> u64 {
        self.conflicts
    }
}

/// The warning listed on a run whose claim of `alias` was refused.
pub fn conflict_warning(alias: &str, owner: &str) -> String {
    format!("alias {alias:?} belongs to run {owner}; lookups by it resolve to that run")
}

impl Store {
    /// The run an alias maps to (as stored; see [`Store::resolve_run`] for lookups).
    pub fn alias_owner(&self, alias: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .kv
            .get(cf::ALIASES, alias.as_bytes())?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// True when a run record is stored under `run_id` (readable or not).
    pub fn has_run(&self, run_id: &str) -> Result<bool, StoreError> {
        self.kv.contains(cf::RUNS, run_id.as_bytes())
    }

    /// Claims of an alias another run owns refused since the store was opened.
    pub fn alias_conflicts(&self) -> u64 {
        self.alias_conflicts.load(Ordering::Relaxed)
    }

    /// Counts refused claims of a committed batch.
    pub fn note_alias_conflicts(&self, n: u64) {
        self.alias_conflicts.fetch_add(n, Ordering::Relaxed);
    }
}
