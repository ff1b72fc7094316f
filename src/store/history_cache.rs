//! Decoded histories of recently read snapshots, so repeated continuations of a hot run skip
//! resolving its chain and decoding its message bodies.
//!
//! An entry is keyed by the run and the tip node of a history. A tip names its whole history
//! (a node id hashes its parent and its message hash, and a message hash hashes the body), so an
//! entry can never be stale: a re-derivation that changes a snapshot changes the tip the
//! snapshot record names, and the next read misses. The cache lives in memory only (empty after
//! a restart) and holds at most its byte budget ([`DEFAULT_HISTORY_CACHE_BYTES`] unless set with
//! [`Store::set_history_cache_budget`]) over all entries, an entry's bytes estimated from its
//! message bodies; what is evicted is chosen by recency and reuse ([`ByteCache`]).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::Value;

use super::error::StoreError;
use super::rocks::Store;
use crate::cache_budget::{json_bytes, ByteCache, Equivalent, ENTRY_OVERHEAD};
use crate::domain::{ChainRef, MessageHash, NodeId, MESSAGE_HASH_BYTES};

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
    fn empty() -> Self {
        Self {
            hashes: Arc::from(Vec::new()),
            messages: Arc::from(Vec::new()),
        }
    }
}

/// The estimated bytes of one message of a history: its body, its hash and its slots.
fn message_bytes(body: &Value) -> usize {
    json_bytes(body) + MESSAGE_HASH_BYTES + 2 * std::mem::size_of::<usize>()
}

/// The estimated bytes of a history's messages (bodies shared with other entries are counted
/// in each, so the estimate errs high).
pub fn history_bytes(messages: &[Arc<Value>]) -> usize {
    ENTRY_OVERHEAD + messages.iter().map(|m| message_bytes(m)).sum::<usize>()
}

/// One cached history with its estimated bytes.
struct Slot {
    bytes: usize,
    history: ResolvedHistory,
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
    fn peek(&self, run_id: &str, tip: &NodeId) -> Option<&Slot> {
        self.entries.peek(&RunTipRef { run: run_id, tip })
    }

    /// True when some history of `run_id` is held.
    fn holds_run(&self, run_id: &str) -> bool {
        self.runs.contains_key(run_id)
    }

    /// Drops the entry of `run_id` at `tip`.
    fn remove(&mut self, run_id: &str, tip: &NodeId) {
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

    fn get(&mut self, run_id: &str, tip: &NodeId) -> Option<ResolvedHistory> {
        self.entries
            .get(&RunTipRef { run: run_id, tip })
            .map(|slot| slot.history.clone())
    }

    /// Keeps `history` (of `bytes` estimated bytes) as the entry of `run_id` at `tip`, then
    /// evicts entries down to the budget. A history over the whole budget is not kept.
    fn put(&mut self, run_id: &str, tip: &NodeId, history: ResolvedHistory, bytes: usize) {
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
    fn set_budget(&mut self, budget: usize) {
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
        let bytes = history_bytes(&resolved.messages);
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
        let bodies = self.messages(run_id, &walked)?;
        let bytes = base_bytes + bodies.iter().map(message_bytes).sum::<usize>();
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
        let handle = self.handle(super::keys::cf::MESSAGES)?;
        let mut total = floor;
        for hash in &hashes {
            if let Some(body) = self
                .db
                .get_pinned_cf(handle, super::keys::message_key(run, hash))?
            {
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
    use crate::domain::NODE_ID_BYTES;

    fn history(n: usize) -> ResolvedHistory {
        ResolvedHistory {
            hashes: vec![MessageHash([7; MESSAGE_HASH_BYTES]); n].into(),
            messages: (0..n).map(|_| Arc::new(Value::Null)).collect(),
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
