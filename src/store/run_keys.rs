//! Run keys: the short number that stands for a run id in the keys of the column families that
//! grow with a run's history (see [`RunKey`]).
//!
//! A run gets its key from the single writer, in the batch that first writes one of its facts,
//! events, ledger entries, messages, nodes or snapshots; the mapping (`run_keys`) and the next
//! free number (in `default`) are committed with that batch. Committed mappings are cached in memory; a batch's new ones
//! join the cache only once the batch is committed, so a failed commit leaves no mapping behind
//! (its numbers are skipped, never reused).

use std::sync::atomic::Ordering;

use super::core::{lock_cache, Store, WriteBatch};
use super::error::StoreError;
use super::keys::{cf, Cf, RunKey};
use super::run_key_cache::{decode, RUN_KEY_CACHE_BYTES};

/// Where the next free run key is kept ([`Cf::Meta`], be64).
pub(super) const NEXT_RUN_KEY: &[u8] = b"next_run_key";

impl Store {
    /// The next free run key recorded on disk (0 for a new store).
    pub(super) fn stored_next_run_key(&self) -> Result<u64, StoreError> {
        match self.kv.get(Cf::Meta, NEXT_RUN_KEY)? {
            Some(bytes) => Ok(decode(&bytes)?.number()),
            None => Ok(0),
        }
    }

    /// The committed key of a run, none when nothing of its history is stored.
    pub fn run_key(&self, run_id: &str) -> Result<Option<RunKey>, StoreError> {
        if let Some(key) = lock_cache(&self.run_keys).get(run_id) {
            return Ok(Some(key));
        }
        let Some(bytes) = self.kv.get(cf::RUN_KEYS, run_id.as_bytes())? else {
            return Ok(None);
        };
        let key = decode(&bytes)?;
        lock_cache(&self.run_keys).insert(run_id, key);
        Ok(Some(key))
    }

    /// The estimated bytes of the run keys cached in memory, and their bound (for metrics).
    pub fn run_key_cache_bytes(&self) -> (usize, usize) {
        (lock_cache(&self.run_keys).bytes(), RUN_KEY_CACHE_BYTES)
    }

    /// Forgets the run keys cached in memory, table and all (the idle task does: a later
    /// lookup reads `run_keys`); returns the estimated bytes dropped.
    pub fn forget_run_keys(&self) -> usize {
        lock_cache(&self.run_keys).forget()
    }
}

impl WriteBatch<'_> {
    /// The key of a run for writing its history: the committed one, the one this batch gave it,
    /// or a new one recorded in this batch.
    pub fn run_key(&mut self, run_id: &str) -> Result<RunKey, StoreError> {
        if let Some((last, key)) = &self.run_keys.last {
            if last == run_id {
                return Ok(*key);
            }
        }
        let key = self.find_or_give_run_key(run_id)?;
        match &mut self.run_keys.last {
            Some((last, at)) => {
                last.clear();
                last.push_str(run_id);
                *at = key;
            }
            None => self.run_keys.last = Some((run_id.to_string(), key)),
        }
        Ok(key)
    }

    /// The key of a run as [`WriteBatch::run_key`] gives it, without the last run's shortcut.
    fn find_or_give_run_key(&mut self, run_id: &str) -> Result<RunKey, StoreError> {
        if let Some(key) = self.run_keys.assigned.get(run_id) {
            return Ok(*key);
        }
        if !self.run_keys.removed.contains(run_id) {
            if let Some(key) = self.store.run_key(run_id)? {
                return Ok(key);
            }
        }
        let number = self.store.next_run_key.fetch_add(1, Ordering::SeqCst);
        let key = RunKey::of(number);
        self.put_raw(cf::RUN_KEYS, run_id.as_bytes(), &key.0)?;
        self.put_raw(Cf::Meta, NEXT_RUN_KEY, &RunKey::of(number + 1).0)?;
        self.run_keys.assigned.insert(run_id.to_string(), key);
        Ok(key)
    }

    /// True when this batch gave the run its key: nothing of the run's history is committed
    /// under it, so a message or history node of the run is stored only if this batch put it
    /// (no need to ask the store).
    pub fn gave_key(&self, run_id: &str) -> bool {
        self.run_keys.assigned.contains_key(run_id)
    }

    /// Deletes a run's facts, step events, ledger entries, messages, history nodes, snapshots and
    /// model-request records, and its key (a merged run, a deleted one).
    pub fn delete_run_history(&mut self, run_id: &str) -> Result<(), StoreError> {
        self.run_keys.last = None;
        let key = match self.run_keys.assigned.remove(run_id) {
            Some(key) => Some(key),
            None if self.run_keys.removed.contains(run_id) => None,
            None => self.store.run_key(run_id)?,
        };
        if let Some(key) = key {
            // A range, not the keys found on disk: it also covers what this batch put before.
            let end = RunKey::of(key.number().saturating_add(1));
            for name in super::deletion::BY_RUN_KEY {
                self.delete_range(name, &key.0, &end.0);
            }
        }
        self.delete(cf::RUN_KEYS, run_id.as_bytes())?;
        self.run_keys.removed.insert(run_id.to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::MessageHash;
    use serde_json::json;

    #[test]
    fn run_keys_are_given_once_kept_across_reopen_and_never_reused() {
        let dir = tempfile::tempdir().unwrap();
        let body = json!({"role": "user", "parts": []});
        let hash = MessageHash::of(&body);
        {
            let store = Store::open(dir.path(), false).unwrap();
            let mut batch = store.batch();
            let a = batch.run_key("run-a").unwrap();
            assert_eq!(
                batch.run_key("run-a").unwrap(),
                a,
                "one key per run in a batch"
            );
            assert_ne!(batch.run_key("run-b").unwrap(), a);
            batch.put_message("run-a", &hash, &body).unwrap();
            assert_eq!(
                store.run_key("run-a").unwrap(),
                None,
                "not before the commit"
            );
            store.commit(batch).unwrap();
            assert_eq!(store.run_key("run-a").unwrap(), Some(a));
            assert!(store.has_message("run-a", &hash).unwrap());
            assert!(!store.has_message("run-b", &hash).unwrap());

            // A batch that is never committed leaves no mapping; its number is skipped.
            let mut lost = store.batch();
            let skipped = lost.run_key("run-c").unwrap();
            drop(lost);
            assert_eq!(store.run_key("run-c").unwrap(), None);
            let mut batch = store.batch();
            let c = batch.run_key("run-c").unwrap();
            assert!(c.number() > skipped.number());
            store.commit(batch).unwrap();
        }
        let store = Store::open(dir.path(), false).unwrap();
        let a = store.run_key("run-a").unwrap().unwrap();
        assert!(store.has_message("run-a", &hash).unwrap());

        // Deleting a run's history removes its key; the run made again gets a new one.
        let mut batch = store.batch();
        assert_eq!(batch.run_key("run-a").unwrap(), a, "the committed key");
        batch.delete_run_history("run-a").unwrap();
        let again = batch.run_key("run-a").unwrap();
        assert!(again.number() > a.number(), "keys are not reused");
        store.commit(batch).unwrap();
        assert_eq!(store.run_key("run-a").unwrap(), Some(again));
        assert!(!store.has_message("run-a", &hash).unwrap());
        let next = store.batch().run_key("run-new").unwrap();
        assert!(next.number() > again.number());
    }

    #[test]
    fn deleting_a_run_history_also_drops_what_the_same_batch_wrote() {
        let store = Store::in_memory();
        let body = json!({"role": "user", "parts": [{"type": "text", "content": "x"}]});
        let hash = MessageHash::of(&body);
        let mut batch = store.batch();
        batch.put_message("orphan", &hash, &body).unwrap();
        batch.delete_run_history("orphan").unwrap();
        store.commit(batch).unwrap();
        assert_eq!(store.run_key("orphan").unwrap(), None);
        assert!(store
            .keys_with_prefix(cf::MESSAGES, b"")
            .unwrap()
            .is_empty());
    }
}
