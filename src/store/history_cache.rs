//! Decoded histories of recently read snapshots, so repeated continuations of a hot run skip
//! resolving its chain and decoding its message bodies.
//!
//! An entry is keyed by the run and the tip node of a history. A tip names its whole history
//! (a node id hashes its parent and its message hash, and a message hash hashes the body), so an
//! entry can never be stale: a re-derivation that changes a snapshot changes the tip the
//! snapshot record names, and the next read misses. The cache lives in memory only (empty after
//! a restart) and holds at most its byte budget ([`DEFAULT_HISTORY_CACHE_BYTES`] unless set with
//! `Store::set_history_cache_budget`) over all entries, an entry's bytes estimated from its
//! message bodies; what is evicted is chosen by recency and reuse ([`ByteCache`]).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::Value;

use crate::cache_budget::{json_bytes, ByteCache, Equivalent, ENTRY_OVERHEAD};
use crate::domain::{MessageHash, NodeId, MESSAGE_HASH_BYTES};

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
    /// False when no body's stored JSON holds the media store's scheme
    /// ([`MEDIA_SCHEME`](super::media_refs::MEDIA_SCHEME)), found while the bodies were decoded:
    /// then none names a blob, and readers skip looking for media parts. True says only that
    /// one may.
    pub may_name_media: bool,
}

impl ResolvedHistory {
    pub(super) fn empty() -> Self {
        Self {
            hashes: Arc::from(Vec::new()),
            messages: Arc::from(Vec::new()),
            may_name_media: false,
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

/// One cached history with its estimated bytes.
pub(super) struct Slot {
    pub(super) bytes: usize,
    pub(super) history: ResolvedHistory,
}

/// The key of a cached history: its run and tip.
#[derive(Clone, PartialEq, Eq)]
struct RunTip {
    run: String,
    tip: NodeId,
}

impl Hash for RunTip {
    fn hash<H: Hasher>(&self, state: &mut H) {
        RunTipRef {
            run: &self.run,
            tip: &self.tip,
        }
        .hash(state);
    }
}

/// A [`RunTip`] looked up without allocating its run id.
struct RunTipRef<'a> {
    run: &'a str,
    tip: &'a NodeId,
}

impl Hash for RunTipRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.run.hash(state);
        self.tip.hash(state);
    }
}

impl Equivalent<RunTip> for RunTipRef<'_> {
    fn equivalent(&self, key: &RunTip) -> bool {
        key.run == self.run && key.tip == *self.tip
    }
}

/// Resolved histories by run id and tip in a [`ByteCache`], with how many tips of each run it
/// holds (so a read knows without a walk whether some history of the run could be extended),
/// updated with every entry that leaves.
pub struct HistoryCache {
    entries: ByteCache<RunTip, Slot>,
    runs: HashMap<String, usize>,
    messages: usize,
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
            entries: ByteCache::new(budget),
            runs: HashMap::new(),
            messages: 0,
        }
    }

    /// The entry of `run_id` at `tip`, without marking it used.
    pub(super) fn peek(&self, run_id: &str, tip: &NodeId) -> Option<&Slot> {
        self.entries.peek(&RunTipRef { run: run_id, tip })
    }

    /// True when some history of `run_id` is held.
    pub(super) fn holds_run(&self, run_id: &str) -> bool {
        self.runs.contains_key(run_id)
    }

    /// Drops the entry of `run_id` at `tip`.
    pub(super) fn remove(&mut self, run_id: &str, tip: &NodeId) {
        if let Some((key, old)) = self.entries.remove(&RunTipRef { run: run_id, tip }) {
            self.forget(&key, &old);
        }
    }

    /// Uncounts an entry taken out.
    fn forget(&mut self, key: &RunTip, slot: &Slot) {
        self.messages = self.messages.saturating_sub(slot.history.messages.len());
        if let Some(tips) = self.runs.get_mut(key.run.as_str()) {
            *tips = tips.saturating_sub(1);
            if *tips == 0 {
                self.runs.remove(key.run.as_str());
            }
        }
    }

    pub(super) fn get(&mut self, run_id: &str, tip: &NodeId) -> Option<ResolvedHistory> {
        self.entries
            .get(&RunTipRef { run: run_id, tip })
            .map(|slot| slot.history.clone())
    }

    /// Keeps `history` (of `bytes` estimated bytes) as the entry of `run_id` at `tip`, then
    /// evicts entries down to the budget. A history over the whole budget is not kept.
    pub(super) fn put(
        &mut self,
        run_id: &str,
        tip: &NodeId,
        history: ResolvedHistory,
        bytes: usize,
    ) {
        self.remove(run_id, tip);
        if bytes > self.entries.budget() {
            return;
        }
        self.messages += history.messages.len();
        match self.runs.get_mut(run_id) {
            Some(tips) => *tips += 1,
            None => {
                self.runs.insert(run_id.to_string(), 1);
            }
        }
        let key = RunTip {
            run: run_id.to_string(),
            tip: *tip,
        };
        let left = self.entries.insert(key, Slot { bytes, history }, bytes);
        for (key, slot) in &left {
            self.forget(key, slot);
        }
    }

    /// Sets the byte budget, evicting entries down to it now.
    pub(super) fn set_budget(&mut self, budget: usize) {
        let left = self.entries.set_budget(budget);
        for (key, slot) in &left {
            self.forget(key, slot);
        }
    }

    /// Messages held over all entries.
    pub fn held(&self) -> usize {
        self.messages
    }

    /// Estimated bytes held over all entries.
    pub fn bytes(&self) -> usize {
        self.entries.bytes()
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.entries.budget()
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
            may_name_media: false,
        }
    }

    #[test]
    fn the_cache_stays_within_its_budget_and_keeps_what_is_used() {
        let each = history_bytes(&history(100).messages);
        let mut cache = HistoryCache::with_budget(3 * each + each / 2);
        let tip = |n: u8| NodeId([n; NODE_ID_BYTES]);
        cache.put("a", &tip(1), history(100), each);
        cache.put("b", &tip(2), history(100), each);
        cache.put("c", &tip(3), history(100), each);
        assert_eq!(cache.bytes(), 3 * each);
        assert!(cache.get("a", &tip(1)).is_some());
        // d pushes one entry out, not the one just used.
        cache.put("d", &tip(4), history(100), each);
        assert!(cache.bytes() <= cache.budget());
        assert_eq!(cache.bytes(), 3 * each);
        assert!(cache.get("a", &tip(1)).is_some());
        let kept = [("b", 2), ("c", 3), ("d", 4)]
            .iter()
            .filter(|(run, n)| cache.get(run, &tip(*n)).is_some())
            .count();
        assert_eq!(kept, 2);
        assert_eq!(cache.held(), 300);
        assert_eq!(cache.runs.len(), 3, "the run index follows the eviction");
        // The same run with another tip is another entry; a history over the budget is not
        // kept and leaves the others alone.
        assert!(cache.get("a", &tip(4)).is_none());
        cache.put("e", &tip(5), history(400), 4 * each);
        assert!(cache.get("e", &tip(5)).is_none());
        assert!(!cache.holds_run("e"));
        assert_eq!(cache.held(), 300);
        // A smaller budget evicts now, and the counts follow.
        cache.set_budget(each + each / 2);
        assert_eq!(cache.held(), 100);
        assert_eq!(cache.bytes(), each);
        assert_eq!(cache.runs.values().sum::<usize>(), 1);
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
                may_name_media: false,
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
        let counted: usize = cache.entries.iter().map(|(_, slot)| slot.bytes).sum();
        assert_eq!(counted, cache.bytes());
        let messages: usize = cache
            .entries
            .iter()
            .map(|(_, slot)| slot.history.messages.len())
            .sum();
        assert_eq!(messages, cache.held());
        let mut per_run: HashMap<&str, usize> = HashMap::new();
        for (key, _) in cache.entries.iter() {
            *per_run.entry(key.run.as_str()).or_default() += 1;
        }
        assert_eq!(
            per_run,
            cache
                .runs
                .iter()
                .map(|(run, n)| (run.as_str(), *n))
                .collect::<HashMap<_, _>>()
        );
    }
}
