//! The in-memory side of run keys (see `store::run_keys`): committed run-id → run-key mappings
//! recently used, and the mappings a batch gives or takes away until it is committed.

use std::collections::{HashMap, HashSet};

use super::error::StoreError;
use super::keys::{cf, RunKey};

/// Most committed mappings cached in memory (about 100 bytes each); the cache is emptied when
/// it is full, and misses read `run_keys`.
pub(super) const CACHED_RUN_KEYS: usize = 100_000;

/// Committed run-id → run-key mappings recently used.
#[derive(Default)]
pub(super) struct RunKeyCache(HashMap<String, RunKey>);

/// The run keys a batch gave or took away, applied to the cache when it is committed.
#[derive(Default)]
pub(super) struct BatchRunKeys {
    pub(super) assigned: HashMap<String, RunKey>,
    pub(super) removed: HashSet<String>,
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
        self.0.get(run_id).copied()
    }

    /// Caches a committed mapping read from the store.
    pub(super) fn insert(&mut self, run_id: &str, key: RunKey) {
        if self.0.len() >= CACHED_RUN_KEYS {
            self.0.clear();
        }
        self.0.insert(run_id.to_string(), key);
    }

    /// Applies a committed batch's run keys.
    pub(super) fn settle(&mut self, changes: BatchRunKeys) {
        for run_id in changes.removed {
            self.0.remove(&run_id);
        }
        if self.0.len() + changes.assigned.len() > CACHED_RUN_KEYS {
            self.0.clear();
        }
        self.0.extend(changes.assigned);
    }
}
