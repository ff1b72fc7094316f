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
    /// The entry of `run_id` at `tip`, without marking it used.
    fn peek(&self, run_id: &str, tip: &NodeId) -> Option<&ResolvedHistory> {
        self.entries.get(run_id)?.get(tip).map(|(_, h)| h)
    }

    /// True when some history of `run_id` is held.
    fn holds_run(&self, run_id: &str) -> bool {
        self.entries.contains_key(run_id)
    }

    /// Drops the entry of `run_id` at `tip`.
    fn remove(&mut self, run_id: &str, tip: &NodeId) {
        let Some(run) = self.entries.get_mut(run_id) else {
            return;
        };
        if let Some((_, old)) = run.remove(tip) {
            self.held = self.held.saturating_sub(old.messages.len());
        }
        if run.is_empty() {
            self.entries.remove(run_id);
        }
    }

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
        if let Some(extended) = self.extend_cached(run_id, chain, tip)? {
            return Ok(extended);
        }
        let hashes = self.run_nodes(run_id)?.resolve(chain)?;
        let messages = self.messages(run_id, &hashes)?;
        let resolved = ResolvedHistory {
            hashes: hashes.into(),
            messages: messages.into_iter().map(Arc::new).collect(),
        };
        if let Ok(mut cache) = self.resolved.lock() {
            cache.put(run_id, tip, resolved.clone());
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
                .and_then(|c| c.peek(run_id, id).cloned())
        };
        if !self.resolved.lock().is_ok_and(|c| c.holds_run(run_id)) {
            return Ok(None);
        }
        let mut walked: Vec<MessageHash> = Vec::new();
        let mut at = Some(*tip);
        let (base_tip, base) = loop {
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
        let bodies = self.messages(run_id, &walked)?;
        let resolved = ResolvedHistory {
            hashes: base.hashes.iter().cloned().chain(walked).collect(),
            messages: base
                .messages
                .iter()
                .cloned()
                .chain(bodies.into_iter().map(Arc::new))
                .collect(),
        };
        if let Ok(mut cache) = self.resolved.lock() {
            cache.remove(run_id, &base_tip);
            cache.put(run_id, tip, resolved.clone());
        }
        Ok(Some(resolved))
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
            messages: (0..n).map(|_| Arc::new(Value::Null)).collect(),
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
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), false).unwrap();
        let bodies: Vec<Value> = (0..100).map(message).collect();
        let (long, ids) = store_history(&store, &bodies);
        let short = ChainRef {
            tip: Some(ids[89]),
            len: 90,
        };
        let first = store.history("run", &short).unwrap();
        assert_eq!(store.history_cache_messages(), 90);

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
}
