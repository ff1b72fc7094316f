//! Decoded histories of recently read snapshots, so repeated continuations of a hot run skip
//! resolving its chain and decoding its message bodies.
//!
//! An entry is keyed by the run and the tip node of a history. A tip names its whole history
//! (a node id hashes its parent and its message hash, and a message hash hashes the body), so an
//! entry can never be stale: a re-derivation that changes a snapshot changes the tip the
//! snapshot record names, and the next read misses. The cache lives in memory only (empty after
//! a restart) and holds at most its byte budget ([`DEFAULT_HISTORY_CACHE_BYTES`] unless set with
//! `Store::set_history_cache_budget`) over all entries, an entry's bytes estimated from its
//! message bodies; least recently used entry first out, found without a scan.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::cache_budget::{json_bytes, LruOrder, ENTRY_OVERHEAD};
use crate::domain::{IdMap, MessageHash, NodeId, MESSAGE_HASH_BYTES};

/// Default byte budget of [`HistoryCache`]: the history share of the default cache budget.
pub const DEFAULT_HISTORY_CACHE_BYTES: usize = 100 << 20;

/// Most nodes a read walks back from a history's tip looking for a cached history it extends.
pub const EXTEND_WALK: usize = 64;

/// A history resolved from its tip: message hashes and bodies, in order.
#[derive(Debug, Clone)]
pub struct ResolvedHistory {
    /// Message hashes, in order.
    pub hashes: Arc<[MessageHash]>,
    /// Message bodies (OTel GenAI shape), in order; each shared with the other cached histories
    /// of the run that hold it.
    pub messages: Arc<[Arc<Value>]>,
}

impl ResolvedHistory {
    pub(super) fn empty() -> Self {
        Self {
            hashes: Arc::from(Vec::new()),
            messages: Arc::from(Vec::new()),
        }
    }
}

/// The estimated bytes of one message of a history: its body, its hash and its slots.
pub(super) fn message_bytes(body: &Value) -> usize {
    json_bytes(body) + MESSAGE_HASH_BYTES + 2 * std::mem::size_of::<usize>()
}

/// The estimated bytes of a history's messages (bodies shared with other entries are counted
/// in each, so the estimate errs high).
pub fn history_bytes(messages: &[Arc<Value>]) -> usize {
    ENTRY_OVERHEAD + messages.iter().map(|m| message_bytes(m)).sum::<usize>()
}

/// One cached history with its use tick and estimated bytes.
pub(super) struct Slot {
    tick: u64,
    pub(super) bytes: usize,
    pub(super) history: ResolvedHistory,
}

/// Resolved histories by run id, then tip (a map per run, so a lookup neither allocates the run
/// id nor hashes it with the tip), with their use order for eviction.
pub struct HistoryCache {
    entries: HashMap<String, IdMap<NodeId, Slot>>,
    order: LruOrder<(String, NodeId)>,
    messages: usize,
    bytes: usize,
    pub(super) budget: usize,
}

impl Default for HistoryCache {
    fn default() -> Self {
        Self::with_budget(DEFAULT_HISTORY_CACHE_BYTES)
    }
}

impl HistoryCache {
    /// An empty cache holding at most `budget` estimated bytes.
    pub fn with_budget(budget: usize) -> Self {
        Self {
            entries: HashMap::new(),
            order: LruOrder::default(),
            messages: 0,
            bytes: 0,
            budget,
        }
    }

    /// The entry of `run_id` at `tip`, without marking it used.
    pub(super) fn peek(&self, run_id: &str, tip: &NodeId) -> Option<&Slot> {
        self.entries.get(run_id)?.get(tip)
    }

    /// True when some history of `run_id` is held.
    pub(super) fn holds_run(&self, run_id: &str) -> bool {
        self.entries.contains_key(run_id)
    }

    /// Drops the entry of `run_id` at `tip`.
    pub(super) fn remove(&mut self, run_id: &str, tip: &NodeId) {
        let Some(run) = self.entries.get_mut(run_id) else {
            return;
        };
        let old = run.remove(tip);
        if run.is_empty() {
            self.entries.remove(run_id);
        }
        if let Some(old) = old {
            self.order.remove(old.tick);
            self.forget(&old);
        }
    }

    /// Uncounts a slot taken out.
    fn forget(&mut self, slot: &Slot) {
        self.messages = self.messages.saturating_sub(slot.history.messages.len());
        self.bytes = self.bytes.saturating_sub(slot.bytes);
    }

    pub(super) fn get(&mut self, run_id: &str, tip: &NodeId) -> Option<ResolvedHistory> {
        let slot = self.entries.get_mut(run_id)?.get_mut(tip)?;
        slot.tick = self.order.touch(slot.tick);
        Some(slot.history.clone())
    }

    /// Keeps `history` (of `bytes` estimated bytes) as the entry of `run_id` at `tip`, then
    /// evicts least recently used entries down to the budget. A history over the whole budget
    /// is not kept.
    pub(super) fn put(
        &mut self,
        run_id: &str,
        tip: &NodeId,
        history: ResolvedHistory,
        bytes: usize,
    ) {
        self.remove(run_id, tip);
        if bytes > self.budget {
            return;
        }
        let tick = self.order.push((run_id.to_string(), *tip));
        self.messages += history.messages.len();
        self.bytes += bytes;
        let run = match self.entries.get_mut(run_id) {
            Some(run) => run,
            None => self.entries.entry(run_id.to_string()).or_default(),
        };
        run.insert(
            *tip,
            Slot {
                tick,
                bytes,
                history,
            },
        );
        self.evict_to(self.budget);
    }

    /// Drops least recently used entries until at most `budget` bytes are held.
    pub(super) fn evict_to(&mut self, budget: usize) {
        while self.bytes > budget {
            let Some((run_id, tip)) = self.order.pop_oldest() else {
                break;
            };
            let Some(run) = self.entries.get_mut(&run_id) else {
                continue;
            };
            if let Some(evicted) = run.remove(&tip) {
                if run.is_empty() {
                    self.entries.remove(&run_id);
                }
                self.forget(&evicted);
            }
        }
    }

    /// Messages held over all entries.
    pub fn held(&self) -> usize {
        self.messages
    }

    /// Estimated bytes held over all entries.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::NODE_ID_BYTES;

    fn history(n: usize) -> ResolvedHistory {
        ResolvedHistory {
            hashes: vec![MessageHash([7; MESSAGE_HASH_BYTES]); n].into(),
            messages: (0..n).map(|_| Arc::new(Value::Null)).collect(),
        }
    }

    #[test]
    fn the_cache_stays_within_its_budget_least_recently_used_first_out() {
        let each = history_bytes(&history(100).messages);
        let mut cache = HistoryCache::with_budget(3 * each + each / 2);
        let tip = |n: u8| NodeId([n; NODE_ID_BYTES]);
        cache.put("a", &tip(1), history(100), each);
        cache.put("b", &tip(2), history(100), each);
        cache.put("c", &tip(3), history(100), each);
        assert_eq!(cache.bytes(), 3 * each);
        assert!(cache.get("a", &tip(1)).is_some());
        // d pushes the least recently used (b) out.
        cache.put("d", &tip(4), history(100), each);
        assert!(cache.bytes() <= cache.budget());
        assert!(cache.get("b", &tip(2)).is_none());
        assert!(cache.get("a", &tip(1)).is_some());
        assert!(cache.get("c", &tip(3)).is_some());
        assert!(cache.get("d", &tip(4)).is_some());
        // The same run with another tip is another entry; a history over the budget is not
        // kept and leaves the others alone.
        assert!(cache.get("a", &tip(4)).is_none());
        cache.put("e", &tip(5), history(400), 4 * each);
        assert!(cache.get("e", &tip(5)).is_none());
        assert_eq!(cache.held(), 300);
    }

    #[test]
    fn many_entries_never_pass_the_budget() {
        let budget = 1 << 20;
        let mut cache = HistoryCache::with_budget(budget);
        for n in 0..20_000u32 {
            let messages: Vec<Arc<Value>> = (0..(n % 7 + 1))
                .map(|i| {
                    Arc::new(serde_json::json!({"content": "x".repeat((n * i) as usize % 900)}))
                })
                .collect();
            let bytes = history_bytes(&messages);
            let resolved = ResolvedHistory {
                hashes: vec![MessageHash([1; MESSAGE_HASH_BYTES]); messages.len()].into(),
                messages: messages.into(),
            };
            let mut tip = [0; NODE_ID_BYTES];
            tip[..4].copy_from_slice(&n.to_le_bytes());
            cache.put(&format!("run-{}", n % 50), &NodeId(tip), resolved, bytes);
            assert!(cache.bytes() <= budget);
        }
        assert!(
            cache.bytes() > budget / 2,
            "the budget is used, not just respected"
        );
        let counted: usize = cache
            .entries
            .values()
            .flat_map(|tips| tips.values())
            .map(|slot| slot.bytes)
            .sum();
        assert_eq!(counted, cache.bytes());
        assert_eq!(
            cache.order.len(),
            cache.entries.values().map(|t| t.len()).sum::<usize>()
        );
    }
}
