//! Reading a run's histories through the history cache ([`super::history_cache`]): a hit, a
//! cached history extended by the few messages after it, or a full read then kept.

use std::sync::Arc;

use serde_json::Value;

use super::core::Store;
use super::error::StoreError;
use super::history_cache::{message_bytes, HistoryCache, ResolvedHistory, EXTEND_WALK};
use super::keys::{self, cf};
use crate::cache_budget::ENTRY_OVERHEAD;
use crate::domain::{ChainRef, MessageHash, NodeId};

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
        if let Some(extended) = self.extend_cached(run_id, chain, tip)? {
            return Ok(extended);
        }
        let hashes = self.run_nodes(run_id)?.resolve(chain)?;
        // Sized while decoded (on the decoding threads): `history_bytes` of the messages.
        let read = self.messages_sized(run_id, &hashes)?;
        let resolved = ResolvedHistory {
            hashes: hashes.into(),
            messages: read.bodies.into_iter().map(Arc::new).collect(),
            may_name_media: read.may_name_media,
        };
        let bytes = ENTRY_OVERHEAD + read.bytes;
        if let Ok(mut cache) = self.resolved.lock() {
            cache.put(run_id, tip, resolved.clone(), bytes);
        }
        Ok(resolved)
    }

    /// The history ending at `tip` built on a cached history of the run it extends by at most
    /// [`EXTEND_WALK`] messages (a run's next snapshot mostly is its last one plus a step): the
    /// nodes after the cached tip are read one by one and only their bodies are read, the
    /// cached bodies are shared. The cached history is then replaced by the longer one. None
    /// when no cached history of the run is that close (or the chain is not as recorded: the
    /// full read then says what is wrong).
    fn extend_cached(
        &self,
        run_id: &str,
        chain: &ChainRef,
        tip: &NodeId,
    ) -> Result<Option<ResolvedHistory>, StoreError> {
        let cached_base = |id: &NodeId| {
            self.resolved
                .lock()
                .ok()
                .and_then(|c| c.peek(run_id, id).map(|s| (s.bytes, s.history.clone())))
        };
        if !self.resolved.lock().is_ok_and(|c| c.holds_run(run_id)) {
            return Ok(None);
        }
        let mut walked: Vec<MessageHash> = Vec::new();
        let mut at = Some(*tip);
        let (base_tip, (base_bytes, base)) = loop {
            let Some(id) = at else {
                return Ok(None);
            };
            if !walked.is_empty() {
                if let Some(base) = cached_base(&id) {
                    break (id, base);
                }
            }
            if walked.len() == EXTEND_WALK {
                return Ok(None);
            }
            let Some(node) = self.node(run_id, &id)? else {
                return Ok(None);
            };
            walked.push(node.message);
            at = node.parent;
        };
        if base.hashes.len() + walked.len() != chain.len as usize {
            return Ok(None);
        }
        walked.reverse();
        let added = self.messages_sized(run_id, &walked)?;
        let bytes = base_bytes + added.bytes;
        let resolved = ResolvedHistory {
            hashes: base.hashes.iter().cloned().chain(walked).collect(),
            messages: base
                .messages
                .iter()
                .cloned()
                .chain(added.bodies.into_iter().map(Arc::new))
                .collect(),
            may_name_media: base.may_name_media || added.may_name_media,
        };
        if let Ok(mut cache) = self.resolved.lock() {
            cache.remove(run_id, &base_tip);
            cache.put(run_id, tip, resolved.clone(), bytes);
        }
        Ok(Some(resolved))
    }

    /// Empties the history cache (for benchmarks measuring cold reads).
    pub fn clear_history_cache(&self) {
        if let Ok(mut cache) = self.resolved.lock() {
            *cache = HistoryCache::with_budget(cache.budget());
        }
    }

    /// Sets the history cache's byte budget (evicting down to it now).
    pub fn set_history_cache_budget(&self, bytes: usize) {
        if let Ok(mut cache) = self.resolved.lock() {
            cache.set_budget(bytes);
        }
    }

    /// The history cache's estimated bytes in use and its budget (for metrics).
    pub fn history_cache_bytes(&self) -> (usize, usize) {
        self.resolved
            .lock()
            .map(|c| (c.bytes(), c.budget()))
            .unwrap_or((0, 0))
    }

    /// True when the history `chain` of `run_id` could be kept by the history cache, judged
    /// without decoding it: the stored (encoded) sizes of its message bodies, a lower bound on
    /// what they take decoded, must fit the cache's budget. Loading ahead skips a history that
    /// does not, so the prefetch never reads one that alone exceeds the budget.
    pub fn history_fits_cache(&self, run_id: &str, chain: &ChainRef) -> Result<bool, StoreError> {
        let budget = self.resolved.lock().map(|c| c.budget()).unwrap_or(0);
        let Some(run) = self.run_key(run_id)? else {
            return Ok(true);
        };
        if chain.tip.is_none() {
            return Ok(true);
        }
        let floor = ENTRY_OVERHEAD + chain.len as usize * message_bytes(&Value::Null);
        if floor > budget {
            return Ok(false);
        }
        let hashes = self.run_nodes(run_id)?.resolve(chain)?;
        let mut total = floor;
        for hash in &hashes {
            if let Some(body) = self.kv.get(cf::MESSAGES, &keys::message_key(run, hash))? {
                total += body.len();
                if total > budget {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Messages the history cache holds (for tests and metrics).
    pub fn history_cache_messages(&self) -> usize {
        self.resolved.lock().map(|c| c.held()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stores the messages and nodes of a history; returns its chain and each message's node.
    fn store_history(store: &Store, bodies: &[Value]) -> (ChainRef, Vec<NodeId>) {
        let mut batch = store.batch();
        let mut ids = crate::domain::ChainIds::default();
        let hashes: Vec<MessageHash> = bodies.iter().map(MessageHash::of).collect();
        let node_ids = ids.ids(&hashes).to_vec();
        for (body, hash) in bodies.iter().zip(&hashes) {
            batch.put_message("run", hash, body).unwrap();
        }
        for (id, node) in ids.nodes_from(0) {
            batch.put_node("run", id, &node).unwrap();
        }
        store.commit(batch).unwrap();
        let chain = ChainRef {
            tip: node_ids.last().cloned(),
            len: bodies.len() as u32,
        };
        (chain, node_ids)
    }

    fn message(n: usize) -> Value {
        serde_json::json!({"role": "user", "parts": [{"type": "text", "content": format!("m{n}")}]})
    }

    #[test]
    fn a_history_extending_a_cached_one_shares_its_bodies_and_replaces_it() {
        let store = Store::in_memory();
        let bodies: Vec<Value> = (0..100).map(message).collect();
        let (long, ids) = store_history(&store, &bodies);
        let short = ChainRef {
            tip: Some(ids[89]),
            len: 90,
        };
        let first = store.history("run", &short).unwrap();
        assert_eq!(store.history_cache_messages(), 90);
        assert!(!first.may_name_media);

        // Ten messages on: built on the cached ninety, which it replaces.
        let extended = store.history("run", &long).unwrap();
        assert_eq!(
            extended.messages.iter().map(|m| &**m).collect::<Vec<_>>(),
            bodies.iter().collect::<Vec<_>>()
        );
        let hashes: Vec<MessageHash> = bodies.iter().map(MessageHash::of).collect();
        assert_eq!(&extended.hashes[..], &hashes[..]);
        assert!(
            Arc::ptr_eq(&extended.messages[0], &first.messages[0]),
            "the cached bodies are shared, not read again"
        );
        assert_eq!(
            store.history_cache_messages(),
            100,
            "the shorter one was replaced"
        );

        // The same read from nothing gives the same history.
        store.clear_history_cache();
        let cold = store.history("run", &long).unwrap();
        assert_eq!(cold.messages, extended.messages);
        assert_eq!(cold.hashes, extended.hashes);
        assert!(!Arc::ptr_eq(&cold.messages[0], &first.messages[0]));

        // A history more than EXTEND_WALK messages past the cached one is read in full; one
        // that branched off before the cached tip is not built on it.
        let bodies: Vec<Value> = (0..200).map(message).collect();
        let (far, _) = store_history(&store, &bodies);
        store.clear_history_cache();
        store.history("run", &short).unwrap();
        let read = store.history("run", &far).unwrap();
        assert_eq!(read.messages.len(), 200);
        assert!(!Arc::ptr_eq(&read.messages[0], &first.messages[0]));
        let mut branch: Vec<Value> = (0..50).map(message).collect();
        branch.push(message(10_000));
        let (branched, _) = store_history(&store, &branch);
        let read = store.history("run", &branched).unwrap();
        assert_eq!(read.messages.len(), 51);
        assert_eq!(*read.messages[50], message(10_000));
    }

    #[test]
    fn a_history_extended_by_a_message_naming_a_blob_may_name_media() {
        let store = Store::in_memory();
        let mut bodies: Vec<Value> = (0..90).map(message).collect();
        let (short, _) = store_history(&store, &bodies);
        assert!(!store.history("run", &short).unwrap().may_name_media);
        bodies.push(
            serde_json::json!({"role": "user", "parts": [{"type": "blob", "size": 3,
            "content": format!("media+sha256://{}", "cd".repeat(32))}]}),
        );
        let (long, _) = store_history(&store, &bodies);
        let extended = store.history("run", &long).unwrap();
        assert_eq!(extended.messages.len(), 91);
        assert!(extended.may_name_media);
        // Cached, and read from nothing: the same.
        assert!(store.history("run", &long).unwrap().may_name_media);
        store.clear_history_cache();
        assert!(store.history("run", &long).unwrap().may_name_media);
        assert!(!store.history("run", &short).unwrap().may_name_media);
    }
}
