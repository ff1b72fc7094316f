//! History chains on disk: `run key (8 bytes) node id (16 bytes)` → parent node id (16 bytes,
//! absent for a first message) + message hash (16 bytes). A run's nodes are one prefix scan, so any of its
//! histories is resolved from its tip with one scan and no per-node lookups.

use super::error::StoreError;
use super::keys::{self, cf};
use super::rocks::{Store, WriteBatch};
use crate::cache_budget::{ByteCache, ENTRY_OVERHEAD};
use crate::domain::{
    ChainIds, ChainRef, HistoryNode, IdMap, MessageHash, NodeId, MESSAGE_HASH_BYTES, NODE_ID_BYTES,
};

/// Default byte budget of [`ChainCache`]: the chain share of the default cache budget.
pub const CHAIN_CACHE_BYTES: usize = 25 << 20;

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

/// The estimated bytes of a cached chain.
fn chain_bytes(chain: &ChainIds) -> usize {
    ENTRY_OVERHEAD + chain.node_ids().len() * CHAIN_BYTES_PER_MESSAGE
}

/// The nodes of one run, by id.
#[derive(Debug, Default)]
pub struct RunNodes(IdMap<NodeId, HistoryNode>);

fn corrupt(reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        cf: cf::HISTORY,
        reason: reason.into(),
    }
}

impl WriteBatch<'_> {
    /// Puts one history node of a run.
    pub fn put_node(
        &mut self,
        run_id: &str,
        id: &NodeId,
        node: &HistoryNode,
    ) -> Result<(), StoreError> {
        let run = self.run_key(run_id)?;
        let mut value = Vec::with_capacity(NODE_ID_BYTES + MESSAGE_HASH_BYTES);
        if let Some(parent) = &node.parent {
            value.extend_from_slice(&parent.0);
        }
        value.extend_from_slice(&node.message.0);
        self.put_raw(cf::HISTORY, &keys::node_key(run, id), &value)
    }
}

impl Store {
    /// The cached node ids of the run's last stored input history (empty when none).
    pub fn take_chain(&self, run_id: &str) -> ChainIds {
        let Ok(mut cache) = self.chains.lock() else {
            return ChainIds::default();
        };
        cache
            .runs
            .remove(run_id)
            .map(|(_, chain)| chain)
            .unwrap_or_default()
    }

    /// Keeps the node ids of the run's last stored input history for the next request.
    pub fn keep_chain(&self, run_id: &str, chain: ChainIds) {
        let bytes = chain_bytes(&chain);
        let Ok(mut cache) = self.chains.lock() else {
            return;
        };
        if bytes > cache.runs.budget() {
            cache.runs.remove(run_id);
            return;
        }
        // What left is dropped after the lock.
        let _left = cache.runs.insert(run_id.to_string(), chain, bytes);
    }

    /// Sets the chain cache's byte budget (evicting down to it now).
    pub fn set_chain_cache_budget(&self, bytes: usize) {
        if let Ok(mut cache) = self.chains.lock() {
            let _left = cache.runs.set_budget(bytes);
        }
    }

    /// The chain cache's estimated bytes in use and its budget (for metrics).
    pub fn chain_cache_bytes(&self) -> (usize, usize) {
        self.chains
            .lock()
            .map(|c| (c.runs.bytes(), c.runs.budget()))
            .unwrap_or((0, 0))
    }

    /// True when the run has the node (and therefore every node before it).
    pub fn has_node(&self, run_id: &str, id: &NodeId) -> Result<bool, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(false);
        };
        let handle = self.handle(cf::HISTORY)?;
        Ok(self
            .db
            .get_pinned_cf(handle, keys::node_key(run, id))?
            .is_some())
    }

    /// Every history node of a run.
    pub fn run_nodes(&self, run_id: &str) -> Result<RunNodes, StoreError> {
        let mut nodes = IdMap::default();
        let Some(run) = self.run_key(run_id)? else {
            return Ok(RunNodes(nodes));
        };
        let prefix = run.0;
        let handle = self.handle(cf::HISTORY)?;
        let mut iter = self.db.raw_iterator_cf(handle);
        iter.seek(prefix);
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            if !key.starts_with(&prefix) {
                break;
            }
            let id = NodeId::from_slice(&key[prefix.len()..])
                .ok_or_else(|| corrupt("node key of the wrong length"))?;
            nodes.insert(id, decode_node(value)?);
            iter.next();
        }
        iter.status()?;
        Ok(RunNodes(nodes))
    }

    /// One history node of a run, read on its own (none when the run does not have it).
    pub fn node(&self, run_id: &str, id: &NodeId) -> Result<Option<HistoryNode>, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(None);
        };
        let handle = self.handle(cf::HISTORY)?;
        match self.db.get_pinned_cf(handle, keys::node_key(run, id))? {
            Some(value) => Ok(Some(decode_node(&value)?)),
            None => Ok(None),
        }
    }
}

/// Decodes a node's stored value: parent id (absent for a first message) + message hash.
pub(super) fn decode_node(value: &[u8]) -> Result<HistoryNode, StoreError> {
    let (parent, message) = match value.len() {
        MESSAGE_HASH_BYTES => (None, value),
        n if n == NODE_ID_BYTES + MESSAGE_HASH_BYTES => {
            let parent = NodeId::from_slice(&value[..NODE_ID_BYTES])
                .ok_or_else(|| corrupt("node parent"))?;
            (Some(parent), &value[NODE_ID_BYTES..])
        }
        n => return Err(corrupt(format!("node value of {n} bytes"))),
    };
    let message = MessageHash::from_slice(message).ok_or_else(|| corrupt("node message"))?;
    Ok(HistoryNode { parent, message })
}

impl RunNodes {
    /// The node with this id.
    pub fn get(&self, id: &NodeId) -> Option<HistoryNode> {
        self.0.get(id).copied()
    }

    /// The message hashes of a history, in order.
    pub fn resolve(&self, chain: &ChainRef) -> Result<Vec<MessageHash>, StoreError> {
        let mut out = Vec::with_capacity(chain.len as usize);
        let mut at = chain.tip;
        while let Some(id) = at {
            let node = self
                .0
                .get(&id)
                .ok_or_else(|| corrupt(format!("history node {id} is missing")))?;
            out.push(node.message);
            if out.len() > chain.len as usize {
                return Err(corrupt(format!(
                    "history {} is longer than its {} messages",
                    id, chain.len
                )));
            }
            at = node.parent;
        }
        if out.len() != chain.len as usize {
            return Err(corrupt(format!(
                "history of {} messages has {}",
                chain.len,
                out.len()
            )));
        }
        out.reverse();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), false).unwrap();
        // Runs of a tenth of the budget each: the eleventh pushes one out.
        let len = 100;
        let each = chain_bytes(&chain(len, 0));
        store.set_chain_cache_budget(10 * each);
        for run in 0..10 {
            store.keep_chain(&format!("run-{run}"), chain(len, run));
        }
        assert_eq!(store.chain_cache_bytes(), (10 * each, 10 * each));
        // Run 0 taken and kept again, as every request of a run does.
        let zero = store.take_chain("run-0");
        assert_eq!(zero.node_ids(), chain(len, 0).node_ids());
        store.keep_chain("run-0", zero);
        store.keep_chain("run-10", chain(len, 10));
        let (held, budget) = store.chain_cache_bytes();
        assert!(held <= budget);
        let kept: Vec<usize> = (0..=10)
            .filter(|run| {
                !store
                    .take_chain(&format!("run-{run}"))
                    .node_ids()
                    .is_empty()
            })
            .collect();
        assert!(kept.len() >= 9, "{kept:?}");
        assert!(kept.contains(&0) && kept.contains(&10), "{kept:?}");
        // Taken out: nothing is held any more.
        assert_eq!(store.chain_cache_bytes().0, 0);
        // A chain over the budget is not kept; a smaller budget evicts now.
        store.keep_chain("big", chain(11 * len, 0));
        assert!(store.take_chain("big").node_ids().is_empty());
        for run in 0..10 {
            store.keep_chain(&format!("run-{run}"), chain(len, run));
        }
        store.set_chain_cache_budget(3 * each);
        assert!(store.chain_cache_bytes().0 <= 3 * each);
    }
}
