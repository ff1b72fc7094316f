//! Decoded histories of recently read snapshots, so repeated continuations of a hot run skip
//! resolving its chain and decoding its message bodies.
//!
//! An entry is keyed by the run and the tip node of a history. A tip names its whole history
//! (a node id hashes its parent and its message hash, and a message hash hashes the body), so an
//! entry can never be stale: a re-derivation that changes a snapshot changes the tip the
//! snapshot record names, and the next read misses. The cache lives in memory only (empty after
//! a restart) and holds at most [`HISTORY_CACHE_MESSAGES`] messages over all entries, least
//! recently used entry first out.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::error::StoreError;
use super::rocks::Store;
use crate::domain::{ChainRef, IdMap, MessageHash, NodeId};

/// Most messages [`HistoryCache`] holds over all its entries.
pub const HISTORY_CACHE_MESSAGES: usize = 50_000;

/// A history resolved from its tip: message hashes and bodies, in order.
#[derive(Debug, Clone)]
pub struct ResolvedHistory {
    /// Message hashes, in order.
    pub hashes: Arc<[MessageHash]>,
    /// Message bodies (OTel GenAI shape), in order.
    pub messages: Arc<[Value]>,
}

impl ResolvedHistory {
    fn empty() -> Self {
        Self {
            hashes: Arc::from(Vec::new()),
            messages: Arc::from(Vec::new()),
        }
    }
}

/// Resolved histories by run id, then tip (a map per run, so a lookup neither allocates the run
/// id nor hashes it with the tip), with a use counter for eviction.
#[derive(Default)]
pub struct HistoryCache {
    entries: HashMap<String, IdMap<NodeId, (u64, ResolvedHistory)>>,
    held: usize,
    tick: u64,
}

impl HistoryCache {
    fn get(&mut self, run_id: &str, tip: &NodeId) -> Option<ResolvedHistory> {
        self.tick += 1;
        let tick = self.tick;
        let entry = self.entries.get_mut(run_id)?.get_mut(tip)?;
        entry.0 = tick;
        Some(entry.1.clone())
    }

    fn put(&mut self, run_id: &str, tip: &NodeId, history: ResolvedHistory) {
        let len = history.messages.len();
        if len > HISTORY_CACHE_MESSAGES {
            return;
        }
        self.tick += 1;
        let run = match self.entries.get_mut(run_id) {
            Some(run) => run,
            None => self.entries.entry(run_id.to_string()).or_default(),
        };
        if let Some((_, old)) = run.insert(*tip, (self.tick, history)) {
            self.held = self.held.saturating_sub(old.messages.len());
        }
        self.held += len;
        while self.held > HISTORY_CACHE_MESSAGES {
            let Some((run_id, tip)) = self
                .entries
                .iter()
                .flat_map(|(run, tips)| tips.iter().map(move |(tip, (t, _))| (*t, run, *tip)))
                .min_by_key(|(t, _, _)| *t)
                .map(|(_, run, tip)| (run.clone(), tip))
            else {
                break;
            };
            let Some(run) = self.entries.get_mut(&run_id) else {
                break;
            };
            if let Some((_, evicted)) = run.remove(&tip) {
                self.held = self.held.saturating_sub(evicted.messages.len());
            }
            if run.is_empty() {
                self.entries.remove(&run_id);
            }
        }
    }

    /// Messages held over all entries.
    pub fn held(&self) -> usize {
        self.held
    }
}

impl Store {
    /// The messages of a history of `run_id`, from the cache or resolved from disk (then kept).
    pub fn history(&self, run_id: &str, chain: &ChainRef) -> Result<ResolvedHistory, StoreError> {
        let Some(tip) = &chain.tip else {
            return Ok(ResolvedHistory::empty());
        };
        if let Some(hit) = self
            .resolved
            .lock()
            .ok()
            .and_then(|mut c| c.get(run_id, tip))
        {
            return Ok(hit);
        }
        let hashes = self.run_nodes(run_id)?.resolve(chain)?;
        let messages = self.messages(run_id, &hashes)?;
        let resolved = ResolvedHistory {
            hashes: hashes.into(),
            messages: messages.into(),
        };
        if let Ok(mut cache) = self.resolved.lock() {
            cache.put(run_id, tip, resolved.clone());
        }
        Ok(resolved)
    }

    /// Empties the history cache (for benchmarks measuring cold reads).
    pub fn clear_history_cache(&self) {
        if let Ok(mut cache) = self.resolved.lock() {
            *cache = HistoryCache::default();
        }
    }

    /// Messages the history cache holds (for tests and metrics).
    pub fn history_cache_messages(&self) -> usize {
        self.resolved.lock().map(|c| c.held()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{MESSAGE_HASH_BYTES, NODE_ID_BYTES};

    fn history(n: usize) -> ResolvedHistory {
        ResolvedHistory {
            hashes: vec![MessageHash([7; MESSAGE_HASH_BYTES]); n].into(),
            messages: vec![Value::Null; n].into(),
        }
    }

    #[test]
    fn the_cache_stays_within_its_bound_least_recently_used_first_out() {
        let mut cache = HistoryCache::default();
        let tip = |n: u8| NodeId([n; NODE_ID_BYTES]);
        let third = HISTORY_CACHE_MESSAGES / 3;
        cache.put("a", &tip(1), history(third));
        cache.put("b", &tip(2), history(third));
        cache.put("c", &tip(3), history(third));
        assert!(cache.get("a", &tip(1)).is_some());
        // d pushes the least recently used (b) out.
        cache.put("d", &tip(4), history(third));
        assert!(cache.held() <= HISTORY_CACHE_MESSAGES);
        assert!(cache.get("b", &tip(2)).is_none());
        assert!(cache.get("a", &tip(1)).is_some());
        assert!(cache.get("d", &tip(4)).is_some());
        // The same run with another tip is another entry; too large a history is not kept.
        assert!(cache.get("a", &tip(4)).is_none());
        cache.put("e", &tip(5), history(HISTORY_CACHE_MESSAGES + 1));
        assert!(cache.get("e", &tip(5)).is_none());
    }
}
