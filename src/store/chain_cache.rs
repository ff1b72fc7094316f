//! The node ids of the last input history stored for each recently active run (see
//! [`ChainCache`]): ingest's shortcut for hashing a request's input history.

use std::collections::HashMap;

use crate::cache_budget::{LruOrder, ENTRY_OVERHEAD};
use crate::domain::{ChainIds, MESSAGE_HASH_BYTES, NODE_ID_BYTES};

/// Default byte budget of [`ChainCache`]: the chain share of the default cache budget.
pub const CHAIN_CACHE_BYTES: usize = 25 << 20;

/// Estimated bytes per message of a cached chain: its hash and node id.
const CHAIN_BYTES_PER_MESSAGE: usize = MESSAGE_HASH_BYTES + NODE_ID_BYTES;

/// The node ids of the last input history stored for each recently active run, so the next
/// request's input (mostly the same history plus a few messages) hashes only its new messages.
/// Bounded by a byte budget (by default [`CHAIN_CACHE_BYTES`]), least recently used run first
/// out (found without a scan). Only a shortcut: node ids are a pure function of the messages,
/// so a missing or stale entry is recomputed.
pub struct ChainCache {
    runs: HashMap<String, (u64, ChainIds)>,
    order: LruOrder<String>,
    held: usize,
    budget: usize,
}

impl Default for ChainCache {
    fn default() -> Self {
        Self {
            runs: HashMap::new(),
            order: LruOrder::default(),
            held: 0,
            budget: CHAIN_CACHE_BYTES,
        }
    }
}

/// The estimated bytes of a cached chain.
fn chain_bytes(chain: &ChainIds) -> usize {
    ENTRY_OVERHEAD + chain.node_ids().len() * CHAIN_BYTES_PER_MESSAGE
}

impl ChainCache {
    /// The cached node ids of the run's last stored input history (empty when none).
    pub fn take(&mut self, run_id: &str) -> ChainIds {
        let cache = self;
        match cache.runs.remove(run_id) {
            Some((tick, chain)) => {
                cache.order.remove(tick);
                cache.held = cache.held.saturating_sub(chain_bytes(&chain));
                chain
            }
            None => ChainIds::default(),
        }
    }

    /// Keeps the node ids of the run's last stored input history for the next request.
    pub fn keep(&mut self, run_id: &str, chain: ChainIds) {
        let cache = self;
        let bytes = chain_bytes(&chain);
        if let Some((tick, old)) = cache.runs.remove(run_id) {
            cache.order.remove(tick);
            cache.held = cache.held.saturating_sub(chain_bytes(&old));
        }
        if bytes > cache.budget {
            return;
        }
        let tick = cache.order.push(run_id.to_string());
        cache.held += bytes;
        cache.runs.insert(run_id.to_string(), (tick, chain));
        while cache.held > cache.budget {
            let Some(oldest) = cache.order.pop_oldest() else {
                break;
            };
            if let Some((_, evicted)) = cache.runs.remove(&oldest) {
                cache.held = cache.held.saturating_sub(chain_bytes(&evicted));
            }
        }
    }

    /// Sets the byte budget (takes effect from the next chain kept).
    pub fn set_budget(&mut self, bytes: usize) {
        self.budget = bytes;
    }

    /// The estimated bytes in use and its budget (for metrics).
    pub fn bytes(&self) -> (usize, usize) {
        (self.held, self.budget)
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
    fn the_chain_cache_forgets_the_least_recently_kept_runs_first() {
        let mut store = ChainCache::default();
        // Runs of a tenth of the budget each: the eleventh pushes out the first kept.
        let len = 100;
        store.set_budget(10 * chain_bytes(&chain(len, 0)));
        for run in 0..10 {
            store.keep(&format!("run-{run}"), chain(len, run));
        }
        // Run 0 used again: run 1 is now the least recently kept.
        let zero = store.take("run-0");
        assert_eq!(zero.node_ids().len(), len);
        store.keep("run-0", zero);
        store.keep("run-10", chain(len, 10));
        assert!(store.take("run-1").node_ids().is_empty(), "evicted");
        for run in [0, 2, 9, 10] {
            assert_eq!(
                store.take(&format!("run-{run}")).node_ids().len(),
                len,
                "run-{run}"
            );
        }
        let cache = store;
        assert_eq!(cache.runs.len(), cache.order.len());
        assert_eq!(
            cache.held,
            cache
                .runs
                .values()
                .map(|(_, c)| chain_bytes(c))
                .sum::<usize>()
        );
    }
}
