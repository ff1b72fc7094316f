//! History chains on disk: `run key (8 bytes) node id (16 bytes)` → parent node id (16 bytes,
//! absent for a first message) + message hash (16 bytes). A run's nodes are one prefix scan, so any of its
//! histories is resolved from its tip with one scan and no per-node lookups.

use super::core::{lock_cache, Store, WriteBatch};
use super::error::StoreError;
use super::keys::{self, cf};
use crate::domain::{
    ChainIds, ChainRef, HistoryNode, IdMap, MessageHash, NodeId, MESSAGE_HASH_BYTES, NODE_ID_BYTES,
};

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
        lock_cache(&self.chains).take(run_id)
    }

    /// Keeps the node ids of the run's last stored input history for the next request.
    pub fn keep_chain(&self, run_id: &str, chain: ChainIds) {
        lock_cache(&self.chains).keep(run_id, chain)
    }

    /// Sets the chain cache's byte budget (evicting down to it now).
    pub fn set_chain_cache_budget(&self, bytes: usize) {
        lock_cache(&self.chains).set_budget(bytes)
    }

    /// The chain cache's estimated bytes in use and its budget (for metrics).
    pub fn chain_cache_bytes(&self) -> (usize, usize) {
        lock_cache(&self.chains).bytes()
    }

    /// True when the run has the node (and therefore every node before it).
    pub fn has_node(&self, run_id: &str, id: &NodeId) -> Result<bool, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(false);
        };
        self.kv.contains(cf::HISTORY, &keys::node_key(run, id))
    }

    /// Every history node of a run.
    pub fn run_nodes(&self, run_id: &str) -> Result<RunNodes, StoreError> {
        let mut nodes = IdMap::default();
        let Some(run) = self.run_key(run_id)? else {
            return Ok(RunNodes(nodes));
        };
        let prefix = run.0;
        self.scan(cf::HISTORY, &prefix, &prefix, |key, value| {
            let id = NodeId::from_slice(&key[prefix.len()..])
                .ok_or_else(|| corrupt("node key of the wrong length"))?;
            nodes.insert(id, decode_node(value)?);
            Ok(true)
        })?;
        Ok(RunNodes(nodes))
    }

    /// One history node of a run, read on its own (none when the run does not have it).
    pub fn node(&self, run_id: &str, id: &NodeId) -> Result<Option<HistoryNode>, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(None);
        };
        match self.kv.get(cf::HISTORY, &keys::node_key(run, id))? {
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
