//! Deleting a run and everything derived from it, durably and in bounded steps.
//!
//! A deletion starts with one commit ([`WriteBatch::begin_deletion`]) that hides the run (its
//! record, index keys and aliases go) and records the intent (`deletions`: `p \0 run_id` → a
//! [`Deletion`]). The rest is removed by steps ([`WriteBatch::deletion_step`]), each touching at
//! most a budget of keys: the run's facts with the span-keyed records they point at (span → run
//! links, grouping spans, log records, delegate links), then its messages with their media index
//! entries (a blob whose last naming message goes becomes a candidate for the media store's
//! collection, `media_gc`), then, with range deletes that cost the same for 10 or 100 000 keys,
//! its events, ledger, working state, history nodes, snapshots, model-request records, run key,
//! meta and damage mark. The last step replaces the intent by a tombstone (`d \0 run_id` →
//! the time it finished, be64) that keeps late spans of the run from making it again for a
//! while (see [`Store::blocks_ingest`]).
//!
//! Each step commits its progress (a cursor) with what it removed, so a crash at any point
//! leaves the run hidden and its deletion resumable from the last step (the intent is found
//! again by [`Store::pending_deletions`]).

use serde::{Deserialize, Serialize};

use super::column::Cf;
use super::core::{decode, lock_cache, Store, WriteBatch};
use super::error::StoreError;
use super::history_cache::HistoryCache;
use super::keys::{self, cf, RunKey};
use super::media_refs::{self, DIGEST_BYTES};
use crate::domain::NodeId;
use crate::records::{FactKind, StoredFact};

/// Deepest chain of grouping spans followed when unlinking a delegate run from its parent span.
const MAX_GROUP_DEPTH: usize = 64;

/// Where a deletion stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeletionPhase {
    /// Removing the run's facts and the span-keyed records they name.
    Facts,
    /// Removing the run's messages and their media index entries.
    Messages,
    /// Removing the lineage index entries of the run's histories (one history node at a time).
    Lineage,
    /// Removing the rest with range deletes, then the intent.
    Final,
}

/// A deletion in progress (the intent record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deletion {
    /// The run being deleted.
    pub run_id: String,
    /// Its run key, when it had one (history, messages, snapshots).
    #[serde(default)]
    pub run_key: Option<u64>,
    /// Where it stands.
    pub phase: DeletionPhase,
    /// Hex of the last key of the current phase removed (empty: none yet).
    #[serde(default)]
    pub cursor: String,
    /// When it was asked for, nanoseconds since the epoch.
    pub requested_ns: u64,
    /// Why (`request`, `conversation`, `retention`, `parent`).
    pub reason: String,
}

/// A deletion that finished: what to compact and forget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedDeletion {
    /// The run deleted.
    pub run_id: String,
    /// Its run key, when it had one.
    pub run_key: Option<RunKey>,
}

/// What one [`WriteBatch::deletion_step`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepOutcome {
    /// Keys removed (or range deletes issued).
    pub removed: usize,
    /// The deletion finished in this step.
    pub finished: Option<FinishedDeletion>,
}

/// `p \0 run_id`: a deletion in progress.
fn pending_key(run_id: &str) -> Vec<u8> {
    let mut k = b"p\0".to_vec();
    k.extend_from_slice(run_id.as_bytes());
    k
}

/// `d \0 run_id`: a finished deletion (tombstone).
fn tombstone_key(run_id: &str) -> Vec<u8> {
    let mut k = b"d\0".to_vec();
    k.extend_from_slice(run_id.as_bytes());
    k
}

/// The key right after every key starting with `prefix` (for range deletes and compaction).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    end.push(0xff);
    end.push(0xff);
    end
}

/// The range of every key of a run in a column family keyed by run id (`run_id` and
/// `run_id \0 …`).
fn run_range(run_id: &str) -> (Vec<u8>, Vec<u8>) {
    let mut to = run_id.as_bytes().to_vec();
    to.push(1);
    (run_id.as_bytes().to_vec(), to)
}

/// The range of every key of a run key.
fn run_key_range(key: RunKey) -> (Vec<u8>, Vec<u8>) {
    (
        key.0.to_vec(),
        RunKey::of(key.number().saturating_add(1)).0.to_vec(),
    )
}

/// Column families keyed by run id.
const BY_RUN_ID: [Cf; 5] = [
    Cf::Runs,
    Cf::RunMeta,
    Cf::RunState,
    Cf::RunKeys,
    Cf::Damaged,
];

/// Column families keyed by run key.
pub(super) const BY_RUN_KEY: [Cf; 7] = [
    Cf::Facts,
    Cf::Events,
    Cf::Effects,
    Cf::Messages,
    Cf::History,
    Cf::Snapshots,
    Cf::ModelRequests,
];

impl Store {
    /// The deletion in progress for a run, if any.
    pub fn pending_deletion(&self, run_id: &str) -> Result<Option<Deletion>, StoreError> {
        self.get_json(Cf::Deletions, &pending_key(run_id))
    }

    /// When the run's deletion finished, if it did and its tombstone is kept.
    pub fn deleted_at(&self, run_id: &str) -> Result<Option<u64>, StoreError> {
        Ok(self
            .kv
            .get(Cf::Deletions, &tombstone_key(run_id))?
            .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
            .map(u64::from_be_bytes))
    }

    /// True when spans of `run_id` are not to be stored: its deletion is in progress, or
    /// finished less than `tombstone_ns` before `now_ns`.
    pub fn blocks_ingest(
        &self,
        run_id: &str,
        now_ns: u64,
        tombstone_ns: u64,
    ) -> Result<bool, StoreError> {
        if self.kv.contains(Cf::Deletions, &pending_key(run_id))? {
            return Ok(true);
        }
        Ok(self
            .deleted_at(run_id)?
            .is_some_and(|at| now_ns.saturating_sub(at) < tombstone_ns))
    }

    /// Up to `limit` deletions in progress, in run id order.
    pub fn pending_deletions(&self, limit: usize) -> Result<Vec<Deletion>, StoreError> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        self.scan(Cf::Deletions, b"p\0", b"p\0", |_, v| {
            out.push(decode(Cf::Deletions, v)?);
            Ok(out.len() < limit)
        })?;
        Ok(out)
    }

    /// Up to `limit` run ids whose tombstone is older than `cutoff_ns`.
    pub fn expired_tombstones(
        &self,
        cutoff_ns: u64,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        let mut seen = 0;
        self.scan(Cf::Deletions, b"d\0", b"d\0", |k, v| {
            seen += 1;
            let at = <[u8; 8]>::try_from(v).map_or(0, u64::from_be_bytes);
            if at < cutoff_ns {
                out.push(String::from_utf8_lossy(&k[2..]).into_owned());
            }
            Ok(seen < limit)
        })?;
        Ok(out)
    }

    /// The run ids in index `tag` under `value` (e.g. `c` and a conversation id), at most
    /// `limit`, in start order.
    pub fn indexed_runs(
        &self,
        tag: u8,
        value: &str,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let prefix = keys::index_prefix(tag, value);
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        self.scan(cf::RUN_INDEX, &prefix, &prefix, |k, _| {
            if let Some(id) = k
                .get(prefix.len() + 8..)
                .and_then(|b| std::str::from_utf8(b).ok())
            {
                out.push(id.to_string());
            }
            Ok(out.len() < limit)
        })?;
        Ok(out)
    }

    /// True when run `run_id` is over (completed, failed or abandoned) and nothing arrived for
    /// it since `cutoff_ns` (its last span, or its abandonment, at or before it).
    pub fn over_before(&self, run_id: &str, cutoff_ns: u64) -> Result<bool, StoreError> {
        let Some(run) = self.run_record(run_id)? else {
            return Ok(false);
        };
        if !matches!(run.status.as_str(), "completed" | "failed" | "abandoned") {
            return Ok(false);
        }
        let Some(meta) = self.run_meta(run_id)? else {
            return Ok(false);
        };
        let last = meta
            .last_seen_ns
            .max(meta.abandoned.as_ref().map_or(0, |a| a.at_ns));
        Ok(last <= cutoff_ns)
    }

    /// Runs started at or before `cutoff_ns` that are over since then (see
    /// [`Store::over_before`]), in start order from index position `after` (exclusive), looking
    /// at most at `limit` runs; with the position to go on from when the scan stopped early.
    /// A run that cannot be read is passed by.
    pub fn ended_runs_before(
        &self,
        cutoff_ns: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<(Vec<String>, Option<Vec<u8>>), StoreError> {
        let prefix = keys::index_prefix(b't', "");
        let mut start = prefix.clone();
        if let Some(after) = after {
            start.extend_from_slice(after);
            start.push(0);
        }
        let (mut out, mut seen, mut next) = (Vec::new(), 0usize, None);
        let mut last: Option<Vec<u8>> = None;
        self.scan(cf::RUN_INDEX, &prefix, &start, |k, _| {
            let position = &k[prefix.len()..];
            let started = position
                .get(..8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_be_bytes);
            if started > cutoff_ns {
                return Ok(false);
            }
            if seen == limit {
                next = last.take();
                return Ok(false);
            }
            seen += 1;
            last = Some(position.to_vec());
            if let Some(id) = position.get(8..).and_then(|b| std::str::from_utf8(b).ok()) {
                match self.over_before(id, cutoff_ns) {
                    Ok(true) => out.push(id.to_string()),
                    Ok(false) => {}
                    Err(e) if e.is_retryable() => return Err(e),
                    Err(_) => {}
                }
            }
            Ok(true)
        })?;
        Ok((out, next))
    }

    /// Compacts the ranges the finished deletions freed, so their disk space comes back: per
    /// column family keyed by run id or run key, one compaction over the span of the deleted
    /// runs' keys (the span-keyed records are small and left to RocksDB's own compactions).
    pub fn compact_deleted(&self, finished: &[FinishedDeletion]) -> Result<(), StoreError> {
        let span = |ranges: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>| {
            ranges.fold(
                None,
                |acc: Option<(Vec<u8>, Vec<u8>)>, (from, to)| match acc {
                    None => Some((from, to)),
                    Some((lo, hi)) => Some((lo.min(from), hi.max(to))),
                },
            )
        };
        if let Some((from, to)) = span(&mut finished.iter().map(|f| run_range(&f.run_id))) {
            for cf in BY_RUN_ID {
                self.kv.compact_range(cf, &from, &to)?;
            }
        }
        if let Some((from, to)) =
            span(&mut finished.iter().filter_map(|f| f.run_key.map(run_key_range)))
        {
            for cf in BY_RUN_KEY {
                self.kv.compact_range(cf, &from, &to)?;
            }
        }
        Ok(())
    }

    /// Forgets what the in-memory caches hold of finished deletions (chains by run; decoded
    /// histories are dropped as a whole).
    pub fn forget_deleted(&self, finished: &[FinishedDeletion]) {
        if finished.is_empty() {
            return;
        }
        for f in finished {
            drop(self.take_chain(&f.run_id));
        }
        let mut resolved = lock_cache(&self.resolved);
        let budget = resolved.budget();
        *resolved = HistoryCache::with_budget(budget);
    }
}

impl WriteBatch<'_> {
    /// Starts deleting `run_id`: hides it (record, index keys, aliases it owns) and records the
    /// intent. False when no run record is stored under it or its deletion is already under way.
    pub fn begin_deletion(
        &mut self,
        run_id: &str,
        reason: &str,
        now_ns: u64,
    ) -> Result<bool, StoreError> {
        let store = self.store;
        if !store.has_run(run_id)? || store.kv.contains(Cf::Deletions, &pending_key(run_id))? {
            return Ok(false);
        }
        // A record that cannot be decoded still goes; its index keys then stay behind, and
        // the index readers pass keys without a run by.
        if let Ok(Some(run)) = store.run_record(run_id) {
            for key in keys::index_keys(&run) {
                self.delete(cf::RUN_INDEX, &key)?;
            }
            for alias in &run.aliases {
                if store.alias_owner(alias)?.as_deref() == Some(run_id) {
                    self.delete(cf::ALIASES, alias.as_bytes())?;
                }
            }
            // The interaction index's entries of the calls the run ended waiting on.
            if let Some(conv) = &run.conversation_id {
                for effect in store.effects(run_id).unwrap_or_default() {
                    if effect.interaction.is_some() {
                        let key = super::waiting_key(conv, &effect.tool_call_id, run_id);
                        self.delete(cf::RUN_INDEX, &key)?;
                    }
                }
            }
        }
        self.delete(cf::RUNS, run_id.as_bytes())?;
        let deletion = Deletion {
            run_id: run_id.to_string(),
            run_key: store.run_key(run_id)?.map(RunKey::number),
            phase: DeletionPhase::Facts,
            cursor: String::new(),
            requested_ns: now_ns,
            reason: reason.to_string(),
        };
        self.put_json(Cf::Deletions, &pending_key(run_id), &deletion)?;
        Ok(true)
    }

    /// Removes at most `budget` keys of deletion `d` (or, in its last phase, issues its range
    /// deletes and replaces the intent by a tombstone), recording its progress in `d` and in
    /// the batch.
    pub fn deletion_step(
        &mut self,
        d: &mut Deletion,
        budget: usize,
        now_ns: u64,
    ) -> Result<StepOutcome, StoreError> {
        let budget = budget.max(1);
        let mut outcome = StepOutcome::default();
        match d.phase {
            DeletionPhase::Facts => {
                let (removed, last) = self.remove_facts(d, budget)?;
                outcome.removed = removed;
                self.advance(d, removed, budget, last, DeletionPhase::Messages)?;
            }
            DeletionPhase::Messages => {
                let (removed, last) = match d.run_key {
                    Some(key) => self.remove_messages(RunKey::of(key), d, budget)?,
                    None => (0, None),
                };
                outcome.removed = removed;
                self.advance(d, removed, budget, last, DeletionPhase::Lineage)?;
            }
            DeletionPhase::Lineage => {
                let (removed, last) = match d.run_key {
                    Some(key) => self.remove_lineage_entries(RunKey::of(key), d, budget)?,
                    None => (0, None),
                };
                outcome.removed = removed;
                self.advance(d, removed, budget, last, DeletionPhase::Final)?;
            }
            DeletionPhase::Final => {
                outcome.removed = self.remove_rest(d, now_ns)?;
                outcome.finished = Some(FinishedDeletion {
                    run_id: d.run_id.clone(),
                    run_key: d.run_key.map(RunKey::of),
                });
            }
        }
        Ok(outcome)
    }

    /// Records progress: the cursor, or the next phase when the phase ran out of keys.
    fn advance(
        &mut self,
        d: &mut Deletion,
        removed: usize,
        budget: usize,
        last: Option<Vec<u8>>,
        next: DeletionPhase,
    ) -> Result<(), StoreError> {
        if removed < budget {
            d.phase = next;
            d.cursor.clear();
        } else if let Some(last) = last {
            d.cursor = hex::encode(last);
        }
        self.put_json(Cf::Deletions, &pending_key(&d.run_id), d)
    }

    /// Where the current phase resumes: after its cursor, else at `prefix`.
    fn resume_at(d: &Deletion, prefix: &[u8]) -> Vec<u8> {
        match hex::decode(&d.cursor) {
            Ok(mut last) if !last.is_empty() => {
                last.push(0);
                last
            }
            _ => prefix.to_vec(),
        }
    }

    /// Removes up to `budget` facts of the run and the span-keyed records each names.
    fn remove_facts(
        &mut self,
        d: &Deletion,
        budget: usize,
    ) -> Result<(usize, Option<Vec<u8>>), StoreError> {
        let store = self.store;
        // A deletion begun by a build of schema 6 or earlier may have no key recorded: the key
        // the run's facts were moved under on opening is the run's.
        let run = match d.run_key {
            Some(key) => RunKey::of(key),
            None => match store.run_key(&d.run_id)? {
                Some(key) => key,
                None => return Ok((0, None)),
            },
        };
        let prefix = run.0;
        let from = Self::resume_at(d, &prefix);
        let mut found: Vec<(Vec<u8>, Option<StoredFact>)> = Vec::new();
        store.scan(cf::FACTS, &prefix, &from, |k, v| {
            found.push((k.to_vec(), decode::<StoredFact>(cf::FACTS, v).ok()));
            Ok(found.len() < budget)
        })?;
        let last = found.last().map(|(k, _)| k.clone());
        let removed = found.len();
        for (key, fact) in found {
            if let Some(stored) = fact {
                self.unlink_span(&d.run_id, &stored)?;
            }
            self.delete(cf::FACTS, &key)?;
        }
        Ok((removed, last))
    }

    /// Removes what a fact of run `run_id` put under its span's key.
    fn unlink_span(&mut self, run_id: &str, stored: &StoredFact) -> Result<(), StoreError> {
        let store = self.store;
        let fact = &stored.fact;
        let span = keys::span_key(&fact.trace_id, &fact.span_id);
        if store.span_run(&fact.trace_id, &fact.span_id)?.as_deref() == Some(run_id) {
            self.delete(cf::SPAN_RUNS, &span)?;
        }
        let mut under = span.clone();
        under.push(0);
        let end = prefix_end(&under);
        self.delete_range(cf::SPAN_LOGS, &under, &end);
        match fact.kind {
            FactKind::Group => self.delete(cf::GROUP_SPANS, &span)?,
            // The delegate links of the tool span (its delegates are deleted on their own).
            FactKind::ToolCall => self.delete_range(cf::PENDING_PARENTS, &under, &end),
            // This run as a delegate: its link under the tool span, and under each grouping
            // span it was forwarded to.
            FactKind::AgentRun => {
                let mut parent = fact.parent_span_id.clone();
                for _ in 0..MAX_GROUP_DEPTH {
                    let Some(p) = parent else { break };
                    let mut key = keys::span_key(&fact.trace_id, &p);
                    key.push(0);
                    key.extend_from_slice(run_id.as_bytes());
                    self.delete(cf::PENDING_PARENTS, &key)?;
                    parent = store
                        .group_parent(&fact.trace_id, &p)?
                        .filter(|up| *up != p);
                }
            }
            FactKind::ModelRequest => {}
        }
        Ok(())
    }

    /// Removes up to `budget` messages of run key `run`, with their media index entries; a blob
    /// named by one becomes a collection candidate.
    fn remove_messages(
        &mut self,
        run: RunKey,
        d: &Deletion,
        budget: usize,
    ) -> Result<(usize, Option<Vec<u8>>), StoreError> {
        let from = Self::resume_at(d, &run.0);
        let mut found: Vec<(Vec<u8>, Vec<[u8; DIGEST_BYTES]>)> = Vec::new();
        self.store.scan(cf::MESSAGES, &run.0, &from, |k, v| {
            found.push((k.to_vec(), media_refs::named_in(v)));
            Ok(found.len() < budget)
        })?;
        let last = found.last().map(|(k, _)| k.clone());
        let removed = found.len();
        for (key, digests) in found {
            for digest in digests {
                let mut entry = digest.to_vec();
                entry.extend_from_slice(&key);
                self.delete(Cf::MediaRefs, &entry)?;
                self.put_raw(Cf::MediaGc, &digest, b"")?;
            }
            self.delete(cf::MESSAGES, &key)?;
        }
        Ok((removed, last))
    }

    /// Removes the lineage entries (snapshot holder, wanted history) that up to `budget` of the
    /// run's history nodes may have, in the scope the run was looked up in.
    fn remove_lineage_entries(
        &mut self,
        run: RunKey,
        d: &Deletion,
        budget: usize,
    ) -> Result<(usize, Option<Vec<u8>>), StoreError> {
        let Some(link) = self.store.lineage_link(&d.run_id).ok().flatten() else {
            return Ok((0, None));
        };
        let from = Self::resume_at(d, &run.0);
        let mut found: Vec<Vec<u8>> = Vec::new();
        self.store.scan(cf::HISTORY, &run.0, &from, |k, _| {
            found.push(k.to_vec());
            Ok(found.len() < budget)
        })?;
        let last = found.last().cloned();
        let removed = found.len();
        for key in found {
            if let Some(node) = key.get(run.0.len()..).and_then(NodeId::from_slice) {
                self.delete_lineage_node(&link.scope, &node, &d.run_id)?;
            }
        }
        Ok((removed, last))
    }

    /// The last phase: range deletes over everything else of the run, and the tombstone.
    fn remove_rest(&mut self, d: &Deletion, now_ns: u64) -> Result<usize, StoreError> {
        self.delete_lineage_of(&d.run_id)?;
        let (from, to) = run_range(&d.run_id);
        for cf in BY_RUN_ID {
            self.delete_range(cf, &from, &to);
        }
        // The run key's ranges and its mapping (also settles the run-key cache on commit).
        self.delete_run_history(&d.run_id)?;
        if let Some(key) = d.run_key.map(RunKey::of) {
            let (from, to) = run_key_range(key);
            for cf in BY_RUN_KEY {
                self.delete_range(cf, &from, &to);
            }
        }
        self.delete(Cf::Deletions, &pending_key(&d.run_id))?;
        self.put_raw(
            Cf::Deletions,
            &tombstone_key(&d.run_id),
            &now_ns.to_be_bytes(),
        )?;
        Ok(BY_RUN_ID.len() + BY_RUN_KEY.len())
    }

    /// Drops the tombstone of a deletion that finished long enough ago.
    pub fn forget_tombstone(&mut self, run_id: &str) -> Result<(), StoreError> {
        self.delete(Cf::Deletions, &tombstone_key(run_id))
    }

    /// Deletes stale media index entries and settles collection candidates: a blob still
    /// named leaves the candidates; `removed` blobs (gone from the media store) leave too.
    pub fn settle_media(
        &mut self,
        stale: &[Vec<u8>],
        settled: &[[u8; DIGEST_BYTES]],
    ) -> Result<(), StoreError> {
        for key in stale {
            self.delete(Cf::MediaRefs, key)?;
        }
        for digest in settled {
            self.delete(Cf::MediaGc, digest)?;
        }
        Ok(())
    }
}

/// Raw access to every column family, for tests above the store that check what a deletion
/// leaves behind.
#[cfg(test)]
impl Store {
    /// Every entry of column family `cf`, in key order.
    pub(crate) fn entries(&self, cf: Cf) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        let _ = self.scan(cf, b"", b"", |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        });
        out
    }

    /// Writes `batch` as it is, bypassing the domain writes (to make older stores' states).
    pub(crate) fn write_raw(&self, batch: super::KvBatch) -> Result<(), StoreError> {
        self.kv.write(batch, true).map(drop)
    }
}
