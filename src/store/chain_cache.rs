//! The node ids of the last input history stored for each recently active run (see
//! [`ChainCache`]): ingest's shortcut for hashing a request's input history.

use crate::cache_budget::{ByteCache, ENTRY_OVERHEAD};
use crate::domain::{ChainIds, MESSAGE_HASH_BYTES, NODE_ID_BYTES};

/// Default byte budget of [`ChainCache`]: the chain share (10%) of the default cache budget
/// (`crate::config::DEFAULT_CACHE_BUDGET`).
pub const CHAIN_CACHE_BYTES: usize = (48 << 20) / 10;

/// Estimated bytes per message of a cached chain: its hash and node id.
const CHAIN_BYTES_PER_MESSAGE: usize = MESSAGE_HASH_BYTES + NODE_ID_BYTES;

/// The node ids of the last input history stored for each recently active run, so the next
/// request's input (mostly the same history plus a few messages) hashes only its new messages.
/// Bounded by a byte budget (by default [`CHAIN_CACHE_BYTES`]) in a [`ByteCache`]. Only a
/// shortcut: node ids are a pure function of the messages, so a missing or stale entry is
/// recomputed.
pub struct ChainCache {
    runs: ByteCache<String, ChainIds>,
}

impl Default for ChainCache {
    fn default() -> Self {
        Self {
            runs: ByteCache::new(CHAIN_CACHE_BYTES),
        }
    }
}

/// The estimated bytes of a cached chain under `run_id`: the key, and the chain's two vectors
/// at the capacity pushing its messages one by one leaves them (the next power of two, at
/// least 4): counting only their length left up to half of what a chain holds uncounted.
fn chain_bytes(run_id: &str, chain: &ChainIds) -> usize {
    let capacity = chain.node_ids().len().next_power_of_two().max(4);
    ENTRY_OVERHEAD + run_id.len() + capacity * CHAIN_BYTES_PER_MESSAGE
}

impl ChainCache {
    /// The cached node ids of the run's last stored input history (empty when none).
    pub fn take(&mut self, run_id: &str) -> ChainIds {
        self.runs
            .remove(run_id)
            .map(|(_, chain)| chain)
            .unwrap_or_default()
    }

    /// Keeps the node ids of the run's last stored input history for the next request.
    pub fn keep(&mut self, run_id: &str, chain: ChainIds) {
        let bytes = chain_bytes(run_id, &chain);
        if bytes > self.runs.budget() {
            self.runs.remove(run_id);
            return;
        }
        // What left the cache is dropped here.
        let _left = self.runs.insert(run_id.to_string(), chain, bytes);
    }

    /// Sets the byte budget, evicting down to it now.
    pub fn set_budget(&mut self, bytes: usize) {
        let _left = self.runs.set_budget(bytes);
    }

    /// The estimated bytes in use and its budget (for metrics).
    pub fn bytes(&self) -> (usize, usize) {
        (self.runs.bytes(), self.runs.budget())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::domain::MessageHash;

    fn chain(len: usize, seed: usize) -> ChainIds {
        let hashes: Vec<MessageHash> = (0..len)
            .map(|n| MessageHash::of(&serde_json::json!({"run": seed, "n": n})))
            .collect();
        let mut chain = ChainIds::default();
        chain.ids(hashes.iter());
        chain
    }

    #[test]
    fn the_chain_cache_stays_within_its_budget_and_keeps_a_run_used_again() {
        let mut cache = ChainCache::default();
        // Runs of a tenth of the budget each: the eleventh pushes one out.
        let len = 100;
        // Run ids of one length ("run-0" to "run-9"), so every entry weighs the same.
        let each = chain_bytes("run-0", &chain(len, 0));
        cache.set_budget(10 * each);
        for run in 0..10 {
            cache.keep(&format!("run-{run}"), chain(len, run));
        }
        assert_eq!(cache.bytes(), (10 * each, 10 * each));
        // Run 0 taken and kept again, as every request of a run does.
        let zero = cache.take("run-0");
        assert_eq!(zero.node_ids(), chain(len, 0).node_ids());
        cache.keep("run-0", zero);
        cache.keep("run-10", chain(len, 10));
        let (held, budget) = cache.bytes();
        assert!(held <= budget);
        let kept: Vec<usize> = (0..=10)
            .filter(|run| !cache.take(&format!("run-{run}")).node_ids().is_empty())
            .collect();
        assert!(kept.len() >= 9, "{kept:?}");
        assert!(kept.contains(&0) && kept.contains(&10), "{kept:?}");
        // Taken out: nothing is held any more.
        assert_eq!(cache.bytes().0, 0);
        // A chain over the budget is not kept; a smaller budget evicts now.
        cache.keep("big", chain(11 * len, 0));
        assert!(cache.take("big").node_ids().is_empty());
        for run in 0..10 {
            cache.keep(&format!("run-{run}"), chain(len, run));
        }
        cache.set_budget(3 * each);
        assert!(cache.bytes().0 <= 3 * each);
    }
}
