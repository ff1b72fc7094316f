//! Histories as content-addressed chains: a node is the hash of its parent node and of one
//! message, so a history is named by its last node (its tip), every prefix of it by one of that
//! node's ancestors, and a rewritten history (compaction, history processors) is a new branch
//! that shares the nodes of the common prefix without copying them.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::binary_id::binary_id;
use super::{MessageHash, MessageRef, MESSAGE_HASH_BYTES};

/// Bytes of a node id (a truncated SHA-256: collisions within one run are out of reach).
pub const NODE_ID_BYTES: usize = 16;

/// The id of a history node. Binary in memory; shown and serialised as 32 lowercase hex
/// characters.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeId(pub [u8; NODE_ID_BYTES]);

binary_id!(NodeId, NODE_ID_BYTES, "node id");

impl NodeId {
    /// The node that appends `message` to the history ending at `parent` (none: empty history).
    /// It hashes the hex text of both (as ids were hashed when they were strings), so the ids of
    /// existing stores stay valid.
    pub fn child(parent: Option<&NodeId>, message: &MessageHash) -> NodeId {
        let mut hasher = Sha256::new();
        if let Some(p) = parent {
            let mut buf = [0u8; 2 * NODE_ID_BYTES];
            hasher.update(p.hex_into(&mut buf).as_bytes());
        }
        hasher.update(b"/");
        let mut buf = [0u8; 2 * MESSAGE_HASH_BYTES];
        hasher.update(message.hex_into(&mut buf).as_bytes());
        let digest = hasher.finalize();
        let mut out = [0u8; NODE_ID_BYTES];
        out.copy_from_slice(&digest[..NODE_ID_BYTES]);
        NodeId(out)
    }
}

/// A history by reference: its tip node and its length (`tip` is none for the empty history).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainRef {
    /// The last node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tip: Option<NodeId>,
    /// Messages in the history.
    pub len: u32,
}

impl ChainRef {
    /// The reference of a history given by its messages.
    pub fn of(messages: &[MessageRef]) -> ChainRef {
        let mut tip = None;
        for m in messages {
            tip = Some(NodeId::child(tip.as_ref(), &m.hash));
        }
        ChainRef {
            tip,
            len: messages.len() as u32,
        }
    }
}

/// One stored node: its parent and its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryNode {
    /// The node before it (none for a first message).
    pub parent: Option<NodeId>,
    /// The message it appends.
    pub message: MessageHash,
}

/// The node ids of every prefix of a history, reusing the work of the previous call for the
/// prefix both share (consecutive histories of a run mostly extend each other).
#[derive(Debug)]
pub struct ChainIds {
    hashes: Vec<MessageHash>,
    ids: Vec<NodeId>,
    fresh: usize,
}

impl Default for ChainIds {
    fn default() -> Self {
        Self {
            hashes: Vec::new(),
            ids: Vec::new(),
            fresh: usize::MAX,
        }
    }
}

impl ChainIds {
    /// The node ids of every prefix of the history `messages` (`ids[i]` names `messages[..=i]`).
    pub fn ids<'a>(&mut self, messages: impl IntoIterator<Item = &'a MessageHash>) -> &[NodeId] {
        let mut n = 0;
        for hash in messages {
            if n < self.hashes.len() && self.hashes[n] == *hash {
                n += 1;
                continue;
            }
            if n < self.hashes.len() {
                self.hashes.truncate(n);
                self.ids.truncate(n);
            }
            let id = NodeId::child(self.ids.last(), hash);
            self.hashes.push(*hash);
            self.ids.push(id);
            n += 1;
            self.fresh = self.fresh.min(n - 1);
        }
        self.hashes.truncate(n);
        self.ids.truncate(n);
        &self.ids
    }

    /// Index of the first id computed by the last call to [`ChainIds::ids`] (the ones before
    /// were shared with an earlier call), then resets it.
    pub fn take_fresh(&mut self) -> usize {
        std::mem::replace(&mut self.fresh, usize::MAX)
    }

    /// The stored nodes of the ids from `from` of the last call: `(id, node)`.
    pub fn nodes_from(&self, from: usize) -> impl Iterator<Item = (&NodeId, HistoryNode)> + '_ {
        (from..self.ids.len()).map(move |i| {
            (
                &self.ids[i],
                HistoryNode {
                    parent: i.checked_sub(1).map(|p| self.ids[p]),
                    message: self.hashes[i],
                },
            )
        })
    }

    /// The node ids of the last call (`[i]` names the first `i + 1` messages).
    pub fn node_ids(&self) -> &[NodeId] {
        &self.ids
    }

    /// The reference of the history of the last call.
    pub fn current(&self) -> ChainRef {
        ChainRef {
            tip: self.ids.last().copied(),
            len: self.ids.len() as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refs(texts: &[&str]) -> Vec<MessageRef> {
        texts
            .iter()
            .map(|t| {
                MessageRef::of(&json!({"role": "user", "parts": [{"type": "text", "content": t}]}))
            })
            .collect()
    }

    /// Ids computed by the code that hashed `String` ids: stores written by it stay readable.
    #[test]
    fn node_ids_are_pinned() {
        let hash =
            MessageHash::of(&json!({"parts": [{"content": "hi", "type": "text"}], "role": "user"}));
        assert_eq!(hash.to_string(), "2c4fb9146c86a694441f6306ee7e2bf6");
        let first = NodeId::child(None, &hash);
        assert_eq!(first.to_string(), "806e9295288c0dbbe044ed95c2810be9");
        let second = NodeId::child(Some(&first), &hash);
        assert_eq!(second.to_string(), "d66ea70f26783654879610bffe5b1a88");
        // Records keep the hex text of ids.
        let chain = ChainRef {
            tip: Some(second),
            len: 2,
        };
        let json = serde_json::to_string(&chain).unwrap();
        assert_eq!(
            json,
            r#"{"tip":"d66ea70f26783654879610bffe5b1a88","len":2}"#
        );
        assert_eq!(serde_json::from_str::<ChainRef>(&json).unwrap(), chain);
        assert!(serde_json::from_str::<ChainRef>(r#"{"tip":"d66e","len":2}"#).is_err());
    }

    #[test]
    fn a_history_is_named_by_its_content_and_prefixes_share_nodes() {
        let a = refs(&["a", "b", "c"]);
        let mut ids = ChainIds::default();
        let hashes = |r: &[MessageRef]| r.iter().map(|m| m.hash).collect::<Vec<_>>();
        let full = ids.ids(&hashes(&a)).to_vec();
        assert_eq!(ChainRef::of(&a).tip.as_ref(), full.last());
        assert_eq!(ChainRef::of(&a[..2]).tip.as_ref(), Some(&full[1]));
        // A rewrite of the first message changes every node after it; the same content again
        // gives the same nodes.
        let b = refs(&["z", "b", "c"]);
        let rewritten = ids.ids(&hashes(&b)).to_vec();
        assert!(rewritten.iter().zip(&full).all(|(x, y)| x != y));
        assert_eq!(ids.ids(&hashes(&a)), &full[..]);
        assert_eq!(ChainRef::of(&[]).tip, None);
    }
}
