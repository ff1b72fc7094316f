//! The in-memory side of run keys (see `store::run_keys`): committed run-id → run-key mappings
//! recently used, and the mappings a batch gives or takes away until it is committed.

use std::collections::{HashMap, HashSet};

use super::error::StoreError;
use super::keys::{cf, RunKey};

/// Estimated bytes of the committed mappings cached in memory (about 100 bytes each for the
/// run ids stepline makes, so some 85,000 runs) before the cache is emptied; misses read
/// `run_keys`.
pub(super) const RUN_KEY_CACHE_BYTES: usize = 8 << 20;

/// Estimated bytes of one cached mapping beside its run id's characters: the id's handle and
/// the key in the table, with the table's control byte and spare slots, and the rounding of
/// the id's allocation.
const ENTRY_BYTES: usize = 48;

/// The estimated bytes of caching `run_id`'s mapping.
fn entry_bytes(run_id: &str) -> usize {
    run_id.len() + ENTRY_BYTES
}

/// Committed run-id → run-key mappings recently used, with their estimated bytes.
#[derive(Default)]
pub(super) struct RunKeyCache {
    keys: HashMap<String, RunKey>,
    bytes: usize,
}

/// The run keys a batch gave or took away, applied to the cache when it is committed.
#[derive(Default)]
pub(super) struct BatchRunKeys {
    pub(super) assigned: HashMap<String, RunKey>,
    pub(super) removed: HashSet<String>,
    /// The run whose key was asked for last, and its key: a batch writes a run's records one
    /// after another, each asking for the key again. Forgotten when the batch deletes a run's
    /// history.
    pub(super) last: Option<(String, RunKey)>,
}

/// Decodes a stored run key (be64).
pub(super) fn decode(bytes: &[u8]) -> Result<RunKey, StoreError> {
    let key: [u8; 8] = bytes.try_into().map_err(|_| StoreError::Corrupt {
        cf: cf::RUN_KEYS,
        reason: format!("run key of {} bytes", bytes.len()),
    })?;
    Ok(RunKey(key))
}

impl RunKeyCache {
    /// The cached key of a run.
    pub(super) fn get(&self, run_id: &str) -> Option<RunKey> {
        self.keys.get(run_id).copied()
    }

    /// Caches a committed mapping read from the store.
    pub(super) fn insert(&mut self, run_id: &str, key: RunKey) {
        if let Some(cached) = self.keys.get_mut(run_id) {
            *cached = key;
            return;
        }
        self.make_room(entry_bytes(run_id));
        self.put(run_id.to_string(), key);
    }

    /// Applies a committed batch's run keys.
    pub(super) fn settle(&mut self, changes: BatchRunKeys) {
        for run_id in changes.removed {
            if self.keys.remove(&run_id).is_some() {
                self.bytes = self.bytes.saturating_sub(entry_bytes(&run_id));
            }
        }
        // A batch assigns keys only to runs that had none, so none of them is cached yet.
        self.make_room(changes.assigned.keys().map(|id| entry_bytes(id)).sum());
        for (run_id, key) in changes.assigned {
            self.put(run_id, key);
        }
    }

    /// Caches a mapping if it fits: a batch of more runs than the cache holds caches what fits,
    /// and a later lookup of the others reads `run_keys`.
    fn put(&mut self, run_id: String, key: RunKey) {
        let bytes = entry_bytes(&run_id);
        if let Some(cached) = self.keys.get_mut(&run_id) {
            *cached = key;
        } else if self.bytes + bytes <= RUN_KEY_CACHE_BYTES {
            self.keys.insert(run_id, key);
            self.bytes += bytes;
        }
    }

    /// Empties the cache (keeping its table) when `more` bytes would take it past
    /// [`RUN_KEY_CACHE_BYTES`].
    fn make_room(&mut self, more: usize) {
        if self.bytes + more > RUN_KEY_CACHE_BYTES {
            self.keys.clear();
            self.bytes = 0;
        }
    }

    /// Estimated bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Forgets every mapping and frees the table too; returns the estimated bytes dropped.
    pub(super) fn forget(&mut self) -> usize {
        std::mem::take(self).bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: usize) -> String {
        format!("{:032x}-{:016x}", n, n)
    }

    #[test]
    fn the_cache_counts_its_bytes_stays_within_them_and_forgets_everything() {
        let mut cache = RunKeyCache::default();
        let each = entry_bytes(&id(0));
        let fits = RUN_KEY_CACHE_BYTES / each;
        for n in 0..fits {
            cache.insert(&id(n), RunKey::of(n as u64));
        }
        assert_eq!(cache.bytes(), fits * each);
        assert_eq!(cache.get(&id(7)), Some(RunKey::of(7)));
        // The same mapping again costs nothing more.
        cache.insert(&id(7), RunKey::of(7));
        assert_eq!(cache.bytes(), fits * each);
        // One more empties it first.
        cache.insert(&id(fits), RunKey::of(fits as u64));
        assert_eq!(cache.bytes(), each);
        assert_eq!(cache.get(&id(7)), None);
        assert_eq!(cache.get(&id(fits)), Some(RunKey::of(fits as u64)));

        // A batch's changes are counted as they are applied.
        let mut changes = BatchRunKeys::default();
        changes.assigned.insert(id(1), RunKey::of(1));
        changes.assigned.insert(id(2), RunKey::of(2));
        changes.removed.insert(id(fits));
        cache.settle(changes);
        assert_eq!(cache.bytes(), 2 * each);
        assert_eq!(cache.get(&id(fits)), None);
        assert_eq!(cache.get(&id(2)), Some(RunKey::of(2)));

        // A batch that would pass the bound empties the cache before its mappings join it.
        let mut changes = BatchRunKeys::default();
        for n in 10..10 + fits - 1 {
            changes.assigned.insert(id(n), RunKey::of(n as u64));
        }
        cache.settle(changes);
        assert_eq!(cache.bytes(), (fits - 1) * each);
        assert!(cache.bytes() <= RUN_KEY_CACHE_BYTES);
        assert_eq!(cache.get(&id(1)), None);
        assert_eq!(cache.get(&id(10)), Some(RunKey::of(10)));

        // A batch of more runs than the cache holds caches what fits, and no more.
        let mut changes = BatchRunKeys::default();
        for n in 0..2 * fits {
            changes.assigned.insert(id(n), RunKey::of(n as u64));
        }
        cache.settle(changes);
        assert_eq!(cache.bytes(), fits * each);
        assert_eq!(cache.keys.len(), fits);
        let cached = (0..2 * fits)
            .filter(|&n| cache.get(&id(n)).is_some())
            .count();
        assert_eq!(cached, fits);
        cache.forget();
        for n in 10..10 + fits - 1 {
            cache.insert(&id(n), RunKey::of(n as u64));
        }

        // Forgetting drops the mappings and the table's memory.
        assert_eq!(cache.forget(), (fits - 1) * each);
        assert_eq!(cache.bytes(), 0);
        assert_eq!(cache.keys.capacity(), 0);
        assert_eq!(cache.get(&id(10)), None);
    }
}
