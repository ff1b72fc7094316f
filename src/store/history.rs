//! History chains on disk: `run_id \0 node id (16 bytes)` → parent node id (16 bytes, absent for
//! a first message) + message hash (32 bytes). A run's nodes are one prefix scan, so any of its
//! histories is resolved from its tip with one scan and no per-node lookups.

use std::collections::HashMap;

use super::error::StoreError;
use super::keys::{self, cf};
use super::rocks::{Store, WriteBatch};
use crate::domain::{ChainRef, HistoryNode, MessageHash, NodeId, NODE_ID_BYTES};

/// The nodes of one run, by id.
#[derive(Debug, Default)]
pub struct RunNodes(HashMap<NodeId, HistoryNode>);

fn node_key(run_id: &str, id: &NodeId) -> Vec<u8> {
    let mut key = keys::run_prefix(run_id);
    key.extend(hex::decode(&id.0).unwrap_or_else(|_| id.0.as_bytes().to_vec()));
    key
}

fn corrupt(reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        cf: cf::HISTORY,
        reason: reason.into(),
    }
}

impl WriteBatch<'_> {
    /// Puts one history node of a run.
    pub fn put_node(&mut self, run_id: &str, id: &NodeId, node: &HistoryNode) {
        let mut value = Vec::with_capacity(NODE_ID_BYTES + 32);
        if let Some(parent) = &node.parent {
            value.extend(hex::decode(&parent.0).unwrap_or_default());
        }
        value.extend(hex::decode(&node.message.0).unwrap_or_default());
        self.put_raw(cf::HISTORY, &node_key(run_id, id), &value);
    }
}

impl Store {
    /// True when the run has the node (and therefore every node before it).
    pub fn has_node(&self, run_id: &str, id: &NodeId) -> Result<bool, StoreError> {
        let handle = self.handle(cf::HISTORY)?;
        Ok(self
            .db
            .get_pinned_cf(handle, node_key(run_id, id))?
            .is_some())
    }

    /// Every history node of a run.
    pub fn run_nodes(&self, run_id: &str) -> Result<RunNodes, StoreError> {
        let prefix = keys::run_prefix(run_id);
        let mut nodes = HashMap::new();
        let handle = self.handle(cf::HISTORY)?;
        let mut iter = self.db.raw_iterator_cf(handle);
        iter.seek(&prefix);
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            if !key.starts_with(&prefix) {
                break;
            }
            let id = NodeId(hex::encode(&key[prefix.len()..]));
            let (parent, message) = match value.len() {
                32 => (None, value),
                48 => (
                    Some(NodeId(hex::encode(&value[..NODE_ID_BYTES]))),
                    &value[NODE_ID_BYTES..],
                ),
                n => return Err(corrupt(format!("node value of {n} bytes"))),
            };
            nodes.insert(
                id,
                HistoryNode {
                    parent,
                    message: MessageHash(hex::encode(message)),
                },
            );
            iter.next();
        }
        iter.status()?;
        Ok(RunNodes(nodes))
    }
}

impl RunNodes {
    /// The node with this id.
    pub fn get(&self, id: &NodeId) -> Option<&HistoryNode> {
        self.0.get(id)
    }

    /// The message hashes of a history, in order.
    pub fn resolve(&self, chain: &ChainRef) -> Result<Vec<MessageHash>, StoreError> {
        let mut out = Vec::with_capacity(chain.len as usize);
        let mut at = chain.tip.as_ref();
        while let Some(id) = at {
            let node = self
                .0
                .get(id)
                .ok_or_else(|| corrupt(format!("history node {} is missing", id.0)))?;
            out.push(node.message.clone());
            if out.len() > chain.len as usize {
                return Err(corrupt(format!(
                    "history {} is longer than its {} messages",
                    id.0, chain.len
                )));
            }
            at = node.parent.as_ref();
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
