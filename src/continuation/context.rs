//! What a continuation needs of a run besides the messages of its history: the tool-effect
//! ledger and, for formats that carry them, which model request sent and produced each message.
//!
//! Reading these costs a scan of every effect (and every model-request record) of the run, which
//! for a long run is more than rendering it. [`ContextCache`] keeps them per run, tagged with the
//! run's revision ([`RunMeta::revision`](crate::interpreter::RunMeta), raised by every write of
//! the run's derived state): an entry is used only while the revision it was read at is the
//! run's current one, so a cached context is never older than what a read without the cache
//! would give. When the revision has moved on, only the ledger entries and model-request records
//! from the first one a commit changed since are read again (the store notes where its commits
//! changed each run: [`Store::ledger_changes`], [`Store::model_request_changes`]); when the
//! store no longer knows, every one is read, and those whose stored bytes are unchanged keep
//! the outcomes decoded before ([`Effects`]). Bounded by a byte budget (by default
//! [`CONTEXT_CACHE_BYTES`]) over the estimated bytes of every context held ([`ByteCache`]); in
//! memory only.

use std::hash::{BuildHasher, RandomState};
use std::mem::size_of;
use std::sync::{Arc, Mutex};

use crate::cache_budget::{json_bytes, ByteCache, ENTRY_OVERHEAD};
use crate::domain::{EffectOutcome, HistoryNode, IdMap, IdSet, MessageHash, NodeId, ToolEffect};
use crate::store::{
    model_requests, ChangeMark, Changed, ModelRequestRecord, RunNodes, Store, StoreError,
};

/// Default byte budget of [`ContextCache`]: the context share of the default cache budget.
pub const CONTEXT_CACHE_BYTES: usize = 38 << 20;

/// Most history nodes a read of a run's provenance looks up one by one to extend the provenance
/// read at an earlier revision by the model requests added since; past this the run's nodes are
/// read with one scan and the provenance indexed anew.
const EXTEND_NODES: usize = 256;

/// The key every [`fingerprint`] of this process is hashed with, chosen at random on first use.
static FINGERPRINT_KEY: std::sync::LazyLock<RandomState> =
    std::sync::LazyLock::new(RandomState::new);

/// A stored record's 64-bit hash and length, by which a later read of the same run tells an
/// unchanged record from a changed one without decoding it. The hash is keyed at random per
/// process (SipHash): the records hold what senders sent, and with a hash known in advance a
/// sender could make a changed record pass for the unchanged one.
fn fingerprint(bytes: &[u8]) -> (u64, usize) {
    (FINGERPRINT_KEY.hash_one(bytes), bytes.len())
}

/// The key a tool-call id is found by in [`Effects`]: its 64-bit hash, keyed like
/// [`fingerprint`] (at random per process, so a sender cannot choose ids whose keys collide).
fn call_key(id: &str) -> u64 {
    FINGERPRINT_KEY.hash_one(id.as_bytes())
}

/// Which model request sent and produced each message of a run.
#[derive(Debug, Default)]
pub struct Provenance {
    /// The run's model requests, in start order (what a continuation shows of the request that
    /// produced a message).
    pub models: Vec<ModelRequestRecord>,
    /// Start of the first model request whose input holds each message.
    pub sent_at: IdMap<MessageHash, u64>,
    /// Index in `models` of the first model request whose output holds each message.
    pub produced_by: IdMap<MessageHash, usize>,
    /// Per record, a 64-bit hash and the length of its stored bytes (empty unless read from the
    /// store), so the next read can tell whether the records read now are unchanged.
    stored: Vec<(u64, usize)>,
    /// The history nodes whose messages `sent_at` covers.
    seen: IdSet<NodeId>,
    /// True when some input chain ended at a node the run did not have (the next read then
    /// starts over: the node may have been written since).
    broken: bool,
}

impl PartialEq for Provenance {
    /// The same requests, times and producers (how it was read aside).
    fn eq(&self, other: &Self) -> bool {
        self.models == other.models
            && self.sent_at == other.sent_at
            && self.produced_by == other.produced_by
    }
}

/// Where [`Provenance::extend`] looks up history nodes.
enum Nodes<'a> {
    /// All the run's nodes, read with one scan.
    All(RunNodes),
    /// One lookup per node, at most `left` more.
    Each {
        store: &'a Store,
        run_id: &'a str,
        left: usize,
    },
}

impl Nodes<'_> {
    /// The node `id`; `Err(None)` when the lookups allowed are used up.
    fn get(&mut self, id: &NodeId) -> Result<Option<HistoryNode>, Option<StoreError>> {
        match self {
            Nodes::All(nodes) => Ok(nodes.get(id)),
            Nodes::Each {
                store,
                run_id,
                left,
            } => {
                if *left == 0 {
                    return Err(None);
                }
                *left -= 1;
                store.node(run_id, id).map_err(Some)
            }
        }
    }
}

impl Provenance {
    /// Reads the run's model-request records (kept at ingest next to its facts) and indexes them
    /// by the messages they sent and produced.
    #[cfg(test)]
    fn read(store: &Store, run_id: &str) -> Result<Provenance, StoreError> {
        Self::read_after(store, run_id, None)
    }

    /// [`Provenance::read`], building on `prior` (an earlier read of the same run) when its
    /// records are, unchanged, the first records of the run now: a run's next step adds a model
    /// request or two at the end, so only those are decoded and their input chains walked back
    /// node by node to what `prior` covers, instead of reading every node of the run and
    /// indexing every request again. Otherwise (a record changed, moved or went, an input chain
    /// was broken, or the walk is long) the provenance is indexed anew. Taking a changed record
    /// for an unchanged one needs its new bytes to have the old ones' length and 64-bit hash.
    fn read_after(
        store: &Store,
        run_id: &str,
        prior: Option<&Provenance>,
    ) -> Result<Provenance, StoreError> {
        let prior = prior.map(|p| {
            Arc::new(Provenance {
                stored: p.stored.clone(),
                ..p.copied()
            })
        });
        Self::read_after_from(store, run_id, prior, None)
    }

    /// The provenance of the run now, given `prior` (read at `mark`) when there is one: the
    /// prior itself when no record changed since (and no input chain of it was broken), else
    /// [`Provenance::read_after`] reading only the records from the first one changed since on
    /// (see [`Store::model_request_changes`]).
    ///
    /// A prior no one else holds is extended in place; a shared one is copied first.
    fn read_since(
        store: &Store,
        run_id: &str,
        prior: Option<(Arc<Provenance>, ChangeMark)>,
    ) -> Result<Arc<Provenance>, StoreError> {
        let Some((prior, mark)) = prior else {
            return Ok(Arc::new(Self::read_after(store, run_id, None)?));
        };
        let from = match store.model_request_changes(run_id, mark)? {
            // A broken prior waits on a history node, not a record: it is read anew.
            Changed::Nothing if !prior.broken => return Ok(prior),
            Changed::Nothing => None,
            Changed::From(from) => Some(from),
            Changed::Unknown => None,
        };
        let from = from.as_ref().map(|(start, span_id)| {
            let key = (*start, span_id.as_bytes());
            let held = prior
                .models
                .partition_point(|m| (m.start_ns, m.span_id.as_bytes()) < key);
            (held, *start, span_id.as_str())
        });
        Ok(Arc::new(Self::read_after_from(
            store,
            run_id,
            Some(prior),
            from,
        )?))
    }

    /// [`Provenance::read_after`], taking the first `held` records of `prior` as they are and
    /// reading the records from `(start, span_id)` on, when `from` gives them (the records
    /// before it are known unchanged since `prior` was read).
    fn read_after_from(
        store: &Store,
        run_id: &str,
        prior: Option<Arc<Provenance>>,
        from: Option<(usize, u64, &str)>,
    ) -> Result<Provenance, StoreError> {
        let owned = prior.filter(|p| !p.broken && p.stored.len() == p.models.len());
        let prior = owned.as_deref();
        // Records before the first changed ones are the prior's (a `from` without a prior to
        // take them from reads everything).
        let from = from.filter(|(held, _, _)| prior.is_some_and(|p| *held <= p.stored.len()));
        let mut stored: Vec<(u64, usize)> = match (prior, from) {
            (Some(p), Some((held, _, _))) => p.stored[..held].to_vec(),
            _ => Vec::new(),
        };
        let mut added: Vec<ModelRequestRecord> = Vec::new();
        let mut all: Vec<ModelRequestRecord> = Vec::new();
        // Whether the records so far are the prior's; once not, every record is decoded.
        let mut extends = prior.is_some();
        let start = from.map(|(_, start, span_id)| (start, span_id));
        store.model_request_bytes_from(run_id, start, |bytes| {
            let at = stored.len();
            let seen = fingerprint(bytes);
            stored.push(seen);
            match prior {
                Some(p) if extends && at < p.stored.len() => {
                    if p.stored[at] != seen {
                        extends = false;
                    }
                }
                Some(_) if extends => added.push(model_requests::decode(bytes)?),
                _ => all.push(model_requests::decode(bytes)?),
            }
            Ok(true)
        })?;
        if let Some(p) = owned.filter(|p| extends && stored.len() >= p.stored.len()) {
            let nodes = Nodes::Each {
                store,
                run_id,
                left: EXTEND_NODES,
            };
            // Taken whole when no one else holds it: a next step then adds its records without
            // copying the run's (1,000 records and their indexes at step 1,000).
            let base = Arc::try_unwrap(p)
                .map(|mut p| {
                    p.stored = Vec::new();
                    p
                })
                .unwrap_or_else(|shared| shared.copied());
            if let Some(mut extended) = base.extend(nodes, added)? {
                extended.stored = stored;
                return Ok(extended);
            }
        }
        if all.len() != stored.len() {
            // Some records were taken for the prior's: read them all.
            all = store.model_requests(run_id)?;
        }
        let mut provenance = Self::index(store, run_id, all)?;
        // Fingerprints only when they are of the records indexed (a write may have come between
        // the two reads above).
        if provenance.models.len() == stored.len() {
            provenance.stored = stored;
        }
        Ok(provenance)
    }

    /// A copy of what the index holds, without the records' fingerprints (a shared prior, before
    /// it is extended).
    fn copied(&self) -> Provenance {
        Provenance {
            models: self.models.clone(),
            sent_at: self.sent_at.clone(),
            produced_by: self.produced_by.clone(),
            stored: Vec::new(),
            seen: self.seen.clone(),
            broken: self.broken,
        }
    }

    /// Indexes a run's model requests, given in start order (ties by span id).
    fn index(
        store: &Store,
        run_id: &str,
        requests: Vec<ModelRequestRecord>,
    ) -> Result<Provenance, StoreError> {
        let nodes = if requests.is_empty() {
            RunNodes::default()
        } else {
            store.run_nodes(run_id)?
        };
        let extended = Provenance::default().extend(Nodes::All(nodes), requests)?;
        // Reading every node at once never runs out of lookups.
        Ok(extended.unwrap_or_default())
    }

    /// Adds `requests` (in start order, all after the ones held) to the index: the first
    /// request that sent each message (walking each request's input chain back until a node
    /// an earlier request already covered: its ancestors are covered too) and the first that
    /// produced it. None when `nodes` ran out of lookups.
    fn extend(
        mut self,
        mut nodes: Nodes<'_>,
        requests: Vec<ModelRequestRecord>,
    ) -> Result<Option<Provenance>, StoreError> {
        for r in &requests {
            let mut at = r.input_tip;
            while let Some(id) = at {
                if self.seen.contains(&id) {
                    break;
                }
                let node = match nodes.get(&id) {
                    Ok(Some(node)) => node,
                    Ok(None) => {
                        self.broken = true;
                        break;
                    }
                    Err(Some(e)) => return Err(e),
                    Err(None) => return Ok(None),
                };
                self.seen.insert(id);
                self.sent_at.entry(node.message).or_insert(r.start_ns);
                at = node.parent;
            }
        }
        self.models.reserve(requests.len());
        for r in requests {
            let i = self.models.len();
            for hash in &r.output {
                self.produced_by.entry(*hash).or_insert(i);
            }
            self.models.push(r);
        }
        Ok(Some(self))
    }

    /// Estimated bytes held.
    fn bytes(&self) -> usize {
        let hash_entry = size_of::<MessageHash>() + 2 * size_of::<u64>();
        self.models
            .iter()
            .map(|m| {
                size_of::<ModelRequestRecord>()
                    + m.span_id.capacity()
                    + m.output.capacity() * size_of::<MessageHash>()
                    + m.model.as_ref().map_or(0, String::capacity)
            })
            .sum::<usize>()
            + (self.sent_at.len() + self.produced_by.len()) * hash_entry
            + self.stored.capacity() * size_of::<(u64, usize)>()
            + self.seen.len() * (size_of::<NodeId>() + size_of::<u64>())
    }
}

/// Estimated bytes of one ledger outcome.
fn outcome_bytes(o: &EffectOutcome) -> usize {
    size_of::<EffectOutcome>()
        + o.tool_call_id.capacity()
        + o.tool_name.capacity()
        + o.error.as_ref().map_or(0, String::capacity)
        + o.retry.as_ref().map_or(0, json_bytes)
}

/// Estimated bytes of one whole ledger entry.
fn effect_bytes(e: &ToolEffect) -> usize {
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::capacity);
    let json = |v: &Option<serde_json::Value>| v.as_ref().map_or(0, json_bytes);
    size_of::<ToolEffect>()
        + e.tool_call_id.capacity()
        + e.tool_name.capacity()
        + json(&e.arguments)
        + json(&e.result)
        + json(&e.retry)
        + text(&e.requested_at)
        + text(&e.started_at)
        + text(&e.ended_at)
        + text(&e.error)
        + text(&e.idempotency_key)
        + text(&e.span_id)
}

/// How each entry of a run's tool-effect ledger ended, in request order, with the entries of
/// each tool-call id found by a binary search (built once per revision and shared by every
/// render; no hash map of the ids, which are a sender's). The search runs over the ids' keyed
/// hashes held in one flat array, so each of its steps reads a word of that array rather than
/// an entry and the heap bytes of its id; the id itself is compared only where a hash matches.
#[derive(Debug, Default)]
pub struct Effects {
    outcomes: Vec<EffectOutcome>,
    /// Per entry, the [`call_key`] of its tool-call id and its index into `outcomes`, sorted
    /// by key, then id, then index (so ledger order within an id).
    order: Vec<(u64, u32)>,
    /// Per entry, a 64-bit hash and the length of its stored bytes (empty unless read from the
    /// store), so the next read of the ledger can tell which entries are unchanged.
    stored: Vec<(u64, usize)>,
}

impl Effects {
    /// Reads the run's ledger. An entry whose stored bytes have the hash and length of the entry
    /// at the same position in `prior` (an earlier read of the same run) takes that entry's
    /// outcome instead of being decoded: a run's next step mostly adds or changes a few entries
    /// of a long ledger, and decoding every entry's JSON (arguments and results included) was
    /// most of a read. Taking a changed entry for an unchanged one needs its new bytes to have
    /// the old ones' length and 64-bit hash ([`fingerprint`]: keyed at random per process, so
    /// a sender cannot make such bytes).
    fn read(
        store: &Store,
        run_id: &str,
        prior: Option<&Arc<Effects>>,
    ) -> Result<(Arc<Self>, Vec<ToolEffect>), StoreError> {
        Self::read_from(store, run_id, prior, 0)
    }

    /// [`Effects::read`], taking the entries of `prior` before position `from` as they are (they
    /// are known unchanged since it was read) and reading the ledger from `from` on; `from` is
    /// taken as 0 unless `prior` holds that many entries with their fingerprints. Gives the
    /// whole entries of the unresolved calls from that position on.
    fn read_from(
        store: &Store,
        run_id: &str,
        prior: Option<&Arc<Effects>>,
        from: usize,
    ) -> Result<(Arc<Self>, Vec<ToolEffect>), StoreError> {
        let from = prior
            .filter(|p| from <= p.outcomes.len() && p.stored.len() == p.outcomes.len())
            .map_or(0, |_| from);
        let mut stored: Vec<(u64, usize)> = prior.map_or(Vec::new(), |p| p.stored[..from].to_vec());
        let at_from = u32::try_from(from).unwrap_or(u32::MAX);
        let (tail, unresolved) = store.effect_outcomes_with(run_id, at_from, |bytes| {
            let at = stored.len();
            let seen = fingerprint(bytes);
            stored.push(seen);
            let prior = prior?;
            if prior.stored.get(at) != Some(&seen) {
                return None;
            }
            prior.outcomes.get(at).cloned()
        })?;
        // Every entry unchanged: the ledger held is this one, shared instead of indexed again.
        if let Some(prior) = prior.filter(|p| p.stored == stored) {
            return Ok((prior.clone(), unresolved));
        }
        let outcomes = match prior {
            Some(p) if from > 0 => p.outcomes[..from].iter().cloned().chain(tail).collect(),
            _ => tail,
        };
        let mut effects = Self::new(outcomes);
        effects.stored = stored;
        Ok((Arc::new(effects), unresolved))
    }

    /// The ledger now and the whole entries of its unresolved calls, given `prior` (the context
    /// read earlier, its ledger and unresolved entries read at its mark) when there is one: the
    /// prior's when no entry changed since, else read from the first entry changed since (see
    /// [`Store::ledger_changes`]), the prior's entries before it taken as they are.
    fn read_since(
        store: &Store,
        run_id: &str,
        prior: Option<&RunContext>,
    ) -> Result<(Arc<Self>, Arc<[ToolEffect]>), StoreError> {
        let Some(RunContext {
            effects,
            unresolved,
            mark,
            ..
        }) = prior
        else {
            let (effects, unresolved) = Self::read(store, run_id, None)?;
            return Ok((effects, unresolved.into()));
        };
        let from = match store.ledger_changes(run_id, *mark) {
            Changed::Nothing => return Ok((effects.clone(), unresolved.clone())),
            Changed::From(from) => from as usize,
            Changed::Unknown => 0,
        };
        // Entries are taken from the prior only when it has their fingerprints (as
        // `read_from` requires); its unresolved calls before `from` are its first ones.
        let whole = effects.stored.len() == effects.outcomes.len();
        let held = effects
            .outcomes
            .get(..from)
            .filter(|_| whole)
            .map(|kept| kept.iter().filter(|o| o.status.is_unresolved()).count())
            .filter(|&held| held <= unresolved.len());
        let (from, held) = held.map_or((0, 0), |held| (from, held));
        let (read, tail) = Self::read_from(store, run_id, Some(effects), from)?;
        if Arc::ptr_eq(&read, effects) {
            // The same stored bytes throughout: the same unresolved entries too.
            return Ok((read, unresolved.clone()));
        }
        Ok((
            read,
            unresolved[..held].iter().cloned().chain(tail).collect(),
        ))
    }

    /// Indexes the ledger outcomes, given in request order.
    pub fn new(outcomes: Vec<EffectOutcome>) -> Self {
        let mut order: Vec<(u64, u32)> = outcomes
            .iter()
            .enumerate()
            .filter_map(|(i, o)| Some((call_key(&o.tool_call_id), u32::try_from(i).ok()?)))
            .collect();
        // By key, then by id (only ids whose keys collide compare), then in ledger order.
        order.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| {
                    let id = |i: u32| outcomes.get(i as usize).map(|o| &o.tool_call_id);
                    id(a.1).cmp(&id(b.1))
                })
                .then(a.1.cmp(&b.1))
        });
        Self {
            outcomes,
            order,
            stored: Vec::new(),
        }
    }

    /// The `n`-th ledger entry (from 0, in request order) of the tool call `id`.
    pub fn of_call(&self, id: &str, n: usize) -> Option<&EffectOutcome> {
        let key = call_key(id);
        let start = self.order.partition_point(|&(k, _)| k < key);
        let same = &self.order[start..];
        let same = &same[..same.partition_point(|&(k, _)| k == key)];
        // Within a key, the entries of ids whose keys collide sort by id (a chance of one in
        // 2^64 a pair, the key being secret); the id's own are consecutive, in ledger order.
        let first = same.partition_point(|&(_, i)| {
            self.outcomes
                .get(i as usize)
                .is_some_and(|o| o.tool_call_id.as_str() < id)
        });
        let &(_, i) = same.get(first.checked_add(n)?)?;
        self.outcomes
            .get(i as usize)
            .filter(|o| o.tool_call_id == id)
    }

    /// Estimated bytes held: outcomes, the call index and the stored-bytes fingerprints.
    fn bytes(&self) -> usize {
        self.outcomes.iter().map(outcome_bytes).sum::<usize>()
            + self.order.capacity() * size_of::<(u64, u32)>()
            + self.stored.capacity() * size_of::<(u64, usize)>()
    }

    /// Every entry, in request order.
    pub fn outcomes(&self) -> &[EffectOutcome] {
        &self.outcomes
    }

    /// How many entries the ledger has.
    pub fn len(&self) -> usize {
        self.outcomes.len()
    }

    /// True when the ledger is empty.
    pub fn is_empty(&self) -> bool {
        self.outcomes.is_empty()
    }
}

/// A run's context at one revision.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The store's commits reached before the context was read (see [`Store::change_mark`]).
    pub mark: ChangeMark,
    /// How each entry of the tool-effect ledger ended, in request order, indexed by call id.
    pub effects: Arc<Effects>,
    /// The whole ledger entries of the calls whose outcome is not known, in request order.
    pub unresolved: Arc<[ToolEffect]>,
    /// Provenance, when it was asked for.
    pub provenance: Option<Arc<Provenance>>,
}

impl RunContext {
    /// Estimated bytes held by the context (its parts shared with other holders counted too).
    fn bytes(&self) -> usize {
        ENTRY_OVERHEAD
            + self.effects.bytes()
            + self.unresolved.iter().map(effect_bytes).sum::<usize>()
            + self.provenance.as_ref().map_or(0, |p| p.bytes())
    }
}

struct Entry {
    revision: u64,
    context: RunContext,
}

/// Run contexts by run id, each valid for one revision of its run.
pub struct ContextCache {
    entries: Mutex<ByteCache<String, Entry>>,
    budget: usize,
}

impl Default for ContextCache {
    fn default() -> Self {
        Self::with_budget(CONTEXT_CACHE_BYTES)
    }
}

impl ContextCache {
    /// An empty cache holding at most `budget` estimated bytes.
    pub fn with_budget(budget: usize) -> Self {
        Self {
            entries: Mutex::new(ByteCache::new(budget)),
            budget,
        }
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// The context of `run_id` at `revision` (read before calling, so the context returned is at
    /// least that new), from the cache when it holds that revision, else read and kept.
    pub fn get(
        &self,
        store: &Store,
        run_id: &str,
        revision: u64,
        provenance: bool,
    ) -> Result<RunContext, StoreError> {
        let cached = self.lookup(run_id, revision);
        // The context read at an earlier revision, if any, taken out of the cache (the one read
        // now replaces it): only what changed since is read, and a provenance no one else holds
        // is extended in place. Should the read fail, the next one reads everything.
        let mut prior = match &cached {
            Some(_) => None,
            None => self.take_prior(run_id),
        };
        // Taken before anything is read: what commits after it change is read again next time.
        let mark = store.change_mark();
        let (mark, effects, unresolved, held_provenance) = match cached {
            Some(c) => (c.mark, c.effects, c.unresolved, c.provenance),
            None => {
                let (effects, unresolved) = Effects::read_since(store, run_id, prior.as_ref())?;
                (mark, effects, unresolved, None)
            }
        };
        let provenance = match (provenance, held_provenance) {
            (_, Some(p)) => Some(p),
            (true, None) => {
                let held = prior
                    .as_mut()
                    .and_then(|p| p.provenance.take().map(|prov| (prov, p.mark)));
                Some(Provenance::read_since(store, run_id, held)?)
            }
            (false, None) => None,
        };
        drop(prior);
        let context = RunContext {
            mark,
            effects,
            unresolved,
            provenance,
        };
        self.keep(run_id, revision, &context);
        Ok(context)
    }

    /// True when the context of `run_id` at `revision` is held (with provenance, when
    /// `provenance` asks for it): [`ContextCache::get`] then reads nothing.
    pub fn holds(&self, run_id: &str, revision: u64, provenance: bool) -> bool {
        self.entries
            .lock()
            .ok()
            .and_then(|e| {
                e.peek(run_id).map(|entry| {
                    entry.revision == revision
                        && (!provenance || entry.context.provenance.is_some())
                })
            })
            .unwrap_or(false)
    }

    /// The context last read for `run_id`, at whatever revision, taken out of the cache.
    fn take_prior(&self, run_id: &str) -> Option<RunContext> {
        let taken = self.entries.lock().ok()?.remove(run_id);
        taken.map(|(_, entry)| entry.context)
    }

    fn lookup(&self, run_id: &str, revision: u64) -> Option<RunContext> {
        let entries = self.entries.lock().ok()?;
        let entry = entries.peek(run_id)?;
        if entry.revision != revision {
            return None;
        }
        // Marked used only when it answers.
        entries.get(run_id).map(|entry| entry.context.clone())
    }

    fn keep(&self, run_id: &str, revision: u64, context: &RunContext) {
        // Estimated outside the lock: it walks the whole context.
        let bytes = context.bytes();
        let entry = Entry {
            revision,
            context: context.clone(),
        };
        let left = match self.entries.lock() {
            Ok(mut entries) if bytes <= self.budget => {
                entries.insert(run_id.to_string(), entry, bytes)
            }
            Ok(mut entries) => entries.remove(run_id).into_iter().collect(),
            Err(_) => return,
        };
        // Dropped after the lock: the last holder of a context frees it all.
        drop(left);
    }

    /// Empties the cache (for benchmarks measuring cold reads).
    pub fn clear(&self) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.clear();
        }
    }

    /// Estimated bytes held over all runs.
    pub fn held(&self) -> usize {
        self.entries.lock().map(|e| e.bytes()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ChainRef;
    use crate::ingest::{apply_group, Work};
    use crate::interpreter::{interpret_span, FactKind};
    use crate::store::keys::cf;
    use crate::test_fixtures::{kv, run_id, span};
    use opentelemetry_proto::tonic::trace::v1::Span;
    use serde::Deserialize;

    /// Provenance as it was read before the model-request records: from every fact of the run.
    fn read_from_facts(store: &Store, run_id: &str) -> Provenance {
        #[derive(Deserialize)]
        struct FactRecord {
            fact: FactFields,
            #[serde(default)]
            input_chain: Option<ChainRef>,
        }
        #[derive(Deserialize)]
        struct FactFields {
            kind: FactKind,
            span_id: String,
            start_ns: u64,
            end_ns: u64,
            #[serde(default)]
            model: Option<String>,
            #[serde(default)]
            input_tokens: Option<u64>,
            #[serde(default)]
            output_tokens: Option<u64>,
            #[serde(default)]
            output: Option<Vec<OutputRef>>,
        }
        #[derive(Deserialize)]
        struct OutputRef {
            hash: MessageHash,
        }
        let mut stored: Vec<FactRecord> = store
            .run_records::<FactRecord>(cf::FACTS, run_id)
            .unwrap()
            .into_iter()
            .filter(|f| f.fact.kind == FactKind::ModelRequest)
            .collect();
        stored.sort_by(|a, b| {
            (a.fact.start_ns, &a.fact.span_id).cmp(&(b.fact.start_ns, &b.fact.span_id))
        });
        let requests = stored
            .into_iter()
            .map(|s| ModelRequestRecord {
                span_id: s.fact.span_id,
                start_ns: s.fact.start_ns,
                end_ns: s.fact.end_ns,
                model: s.fact.model,
                input_tokens: s.fact.input_tokens,
                output_tokens: s.fact.output_tokens,
                input_tip: s.input_chain.and_then(|c| c.tip),
                output: s
                    .fact
                    .output
                    .into_iter()
                    .flatten()
                    .map(|r| r.hash)
                    .collect(),
            })
            .collect();
        Provenance::index(store, run_id, requests).unwrap()
    }

    fn user(n: u32) -> String {
        format!(r#"{{"role":"user","parts":[{{"type":"text","content":"u{n}"}}]}}"#)
    }

    fn assistant(n: u32) -> String {
        format!(r#"{{"role":"assistant","parts":[{{"type":"text","content":"a{n}"}}]}}"#)
    }

    /// Model request `n` (span `[n + 1; 8]`) of the run of span 1, at `start`: its input is the
    /// conversation so far, its output answer `n`.
    fn request(n: u32, start: u64, tokens: &str) -> Span {
        let mut input = Vec::new();
        for i in 1..=n {
            input.push(user(i));
            if i < n {
                input.push(assistant(i));
            }
        }
        span(
            n as u8 + 1,
            1,
            "chat m",
            start,
            vec![
                kv("gen_ai.operation.name", "chat"),
                kv("gen_ai.request.model", &format!("model-{n}")),
                kv("gen_ai.usage.input_tokens", tokens),
                kv("gen_ai.usage.output_tokens", "7"),
                kv("gen_ai.input.messages", &format!("[{}]", input.join(","))),
                kv("gen_ai.output.messages", &format!("[{}]", assistant(n))),
            ],
        )
    }

    fn apply(store: &Store, spans: &[Span]) {
        let work = Work::Received {
            spans: spans.iter().filter_map(interpret_span).collect(),
            logs: Vec::new(),
            outbox: None,
        };
        apply_group(store, &[work], 1).unwrap();
    }

    /// A run of four model requests, two of them sent again later: one with another start
    /// (moving it before the others), one with other token counts.
    fn run_with_rewrites(store: &Store) {
        let agent = span(
            1,
            0,
            "invoke_agent a",
            50,
            vec![
                kv("gen_ai.operation.name", "invoke_agent"),
                kv("gen_ai.agent.name", "a"),
            ],
        );
        apply(
            store,
            &[agent, request(1, 100, "10"), request(2, 200, "20")],
        );
        apply(store, &[request(3, 300, "30"), request(4, 300, "40")]);
        // Rewritten: request 3 starts before request 1 now; request 2 has other tokens; and
        // request 4 arrives twice in one group, moved both times.
        apply(store, &[request(3, 90, "31"), request(2, 200, "21")]);
        apply(store, &[request(4, 310, "40"), request(4, 320, "41")]);
    }

    #[test]
    fn a_ledger_read_again_decodes_only_entries_whose_bytes_changed() {
        let store = Store::in_memory();
        apply(&store, &crate::test_fixtures::delegate_scenario());
        let run = run_id(1);
        let (first, unresolved) = Effects::read(&store, &run, None).unwrap();
        assert!(!first.is_empty(), "the outer run called a tool");
        assert_eq!(first.stored.len(), first.len());
        assert_eq!(
            (first.outcomes().to_vec(), unresolved.clone()),
            store.effect_outcomes(&run).unwrap()
        );
        // A prior read whose first entry has the same stored bytes is taken at its word (the
        // planted name shows it was not decoded again); with every entry the same, the prior
        // itself is the ledger read ...
        let mut planted = Effects::read(&store, &run, None).unwrap().0;
        Arc::get_mut(&mut planted).unwrap().outcomes[0].tool_name = "planted".into();
        let (again, _) = Effects::read(&store, &run, Some(&planted)).unwrap();
        assert!(Arc::ptr_eq(&again, &planted));
        assert_eq!(again.outcomes()[0].tool_name, "planted");
        drop(again);
        // ... and when the ledger differs otherwise (here the prior has an entry more), the
        // unchanged entries are still taken ...
        {
            let p = Arc::get_mut(&mut planted).unwrap();
            p.outcomes.push(first.outcomes()[0].clone());
            p.stored.push((0, 0));
        }
        let (mixed, _) = Effects::read(&store, &run, Some(&planted)).unwrap();
        assert!(!Arc::ptr_eq(&mixed, &planted));
        assert_eq!(mixed.outcomes()[0].tool_name, "planted");
        assert_eq!(mixed.outcomes()[1..], first.outcomes()[1..]);
        assert_eq!(mixed.stored, first.stored);
        assert_eq!(mixed.len(), first.len());
        // ... and one whose bytes differ is decoded.
        Arc::get_mut(&mut planted).unwrap().stored[0].0 ^= 1;
        let (fresh, _) = Effects::read(&store, &run, Some(&planted)).unwrap();
        assert_eq!(fresh.outcomes(), first.outcomes());
        // A prior of another length lines up by position only.
        let short = Arc::new(Effects::new(Vec::new()));
        let (alone, _) = Effects::read(&store, &run, Some(&short)).unwrap();
        assert_eq!(alone.outcomes(), first.outcomes());
    }

    #[test]
    fn provenance_read_again_extends_the_prior_one_only_when_its_records_are_unchanged() {
        let store = Store::in_memory();
        let run = run_id(1);
        let agent = span(
            1,
            0,
            "invoke_agent a",
            50,
            vec![
                kv("gen_ai.operation.name", "invoke_agent"),
                kv("gen_ai.agent.name", "a"),
            ],
        );
        apply(
            &store,
            &[agent, request(1, 100, "10"), request(2, 200, "20")],
        );
        let first = Provenance::read_after(&store, &run, None).unwrap();
        assert_eq!(first.stored.len(), 2);
        // Two more requests: the prior is extended (the planted model name shows its records
        // were not decoded again) and otherwise equals a read from nothing.
        apply(&store, &[request(3, 300, "30"), request(4, 400, "40")]);
        let full = Provenance::read_after(&store, &run, None).unwrap();
        let extended = Provenance::read_after(&store, &run, Some(&first)).unwrap();
        assert_eq!(extended, full);
        assert_eq!(extended.stored, full.stored);
        assert_eq!(extended.models.len(), 4);
        let mut planted = Provenance::read_after(&store, &run, None).unwrap();
        planted.models.truncate(2);
        planted.stored.truncate(2);
        planted.models[0].model = Some("planted".into());
        // (The planted prior covers what the first read covered.)
        planted.seen = first.seen.clone();
        planted.sent_at = first.sent_at.clone();
        planted.produced_by = first.produced_by.clone();
        let from_planted = Provenance::read_after(&store, &run, Some(&planted)).unwrap();
        assert_eq!(from_planted.models[0].model.as_deref(), Some("planted"));
        assert_eq!(from_planted.models[1..], full.models[1..]);
        assert_eq!(from_planted.sent_at, full.sent_at);
        // A rewritten record (other tokens) or a moved one is not extended: read anew.
        apply(&store, &[request(2, 200, "21")]);
        let rewritten = Provenance::read_after(&store, &run, Some(&from_planted)).unwrap();
        assert_eq!(
            rewritten,
            Provenance::read_after(&store, &run, None).unwrap()
        );
        assert_eq!(rewritten.models[0].model.as_deref(), Some("model-1"));
        apply(&store, &[request(3, 90, "31")]);
        let moved = Provenance::read_after(&store, &run, Some(&rewritten)).unwrap();
        assert_eq!(moved, Provenance::read_after(&store, &run, None).unwrap());
        assert_eq!(moved, read_from_facts(&store, &run));
        assert_eq!(moved.models[0].start_ns, 90);
    }

    /// Model request `n` of a tool-calling run (agent span 1), span `2n + 8`, at `100n`: it
    /// sends the conversation so far (every earlier call answered) and calls tool `c{n}`.
    fn calling(n: u8, tokens: &str) -> Span {
        let call = |i: u8| {
            format!(
                r#"{{"role":"assistant","parts":[{{"type":"tool_call","id":"c{i}","name":"t","arguments":{{"i":{i}}}}}]}}"#
            )
        };
        let mut input = vec![user(0)];
        for i in 1..n {
            input.push(call(i));
            input.push(format!(
                r#"{{"role":"user","parts":[{{"type":"tool_call_response","id":"c{i}","name":"t","result":"r{i}"}}]}}"#
            ));
        }
        span(
            2 * n + 8,
            1,
            "chat m",
            100 * n as u64,
            vec![
                kv("gen_ai.operation.name", "chat"),
                kv("gen_ai.request.model", "m"),
                kv("gen_ai.usage.input_tokens", tokens),
                kv("gen_ai.input.messages", &format!("[{}]", input.join(","))),
                kv("gen_ai.output.messages", &format!("[{}]", call(n))),
            ],
        )
    }

    /// The tool span answering call `c{n}` of [`calling`].
    fn answering(n: u8) -> Span {
        span(
            2 * n + 9,
            1,
            "execute_tool t",
            100 * n as u64 + 50,
            vec![
                kv("gen_ai.operation.name", "execute_tool"),
                kv("gen_ai.tool.call.id", &format!("c{n}")),
                kv("gen_ai.tool.name", "t"),
                kv("gen_ai.tool.call.result", &format!("r{n}")),
            ],
        )
    }

    fn agent() -> Span {
        span(
            1,
            0,
            "invoke_agent a",
            50,
            vec![
                kv("gen_ai.operation.name", "invoke_agent"),
                kv("gen_ai.agent.name", "a"),
            ],
        )
    }

    /// The run's context as `contexts` gives it at the run's current revision.
    fn context_now(store: &Store, contexts: &ContextCache, run: &str) -> RunContext {
        let revision = store.run_meta(run).unwrap().map_or(0, |m| m.revision);
        contexts.get(store, run, revision, true).unwrap()
    }

    fn same_context(a: &RunContext, b: &RunContext) -> bool {
        a.effects.outcomes() == b.effects.outcomes()
            && a.effects.stored == b.effects.stored
            && a.unresolved == b.unresolved
            && a.provenance == b.provenance
            && a.provenance.as_ref().map(|p| &p.stored) == b.provenance.as_ref().map(|p| &p.stored)
    }

    #[test]
    fn a_context_read_at_each_step_is_the_one_read_from_nothing() {
        // In memory and in RocksDB (whose scans from a key seek).
        let dir = tempfile::tempdir().unwrap();
        for store in [Store::in_memory(), Store::open(dir.path(), false).unwrap()] {
            context_read_at_each_step(&store);
        }
    }

    fn context_read_at_each_step(store: &Store) {
        let run = run_id(1);
        let contexts = ContextCache::default();
        let groups: Vec<Vec<Span>> = vec![
            vec![agent(), calling(1, "10"), answering(1)],
            // A call left unanswered, then answered with the next step: an earlier entry changes.
            vec![calling(2, "20")],
            vec![answering(2), calling(3, "30")],
            vec![answering(3)],
            // A model request sent again with other tokens: a record before the last changes.
            vec![calling(2, "21")],
            vec![calling(4, "40"), answering(4)],
            // Sent again unchanged: the same bytes rewritten.
            vec![calling(4, "40")],
            vec![calling(5, "50")],
        ];
        for (n, group) in groups.iter().enumerate() {
            apply(store, group);
            let read = context_now(store, &contexts, &run);
            let fresh = context_now(store, &ContextCache::default(), &run);
            assert!(
                same_context(&read, &fresh),
                "after group {n}: {read:?} vs {fresh:?}"
            );
            assert_eq!(
                (read.effects.outcomes().to_vec(), read.unresolved.to_vec()),
                store.effect_outcomes(&run).unwrap(),
                "after group {n}"
            );
        }
        assert_eq!(context_now(store, &contexts, &run).effects.len(), 5);
        assert_eq!(context_now(store, &contexts, &run).unresolved.len(), 1);
    }

    #[test]
    fn a_context_read_at_the_next_step_reads_only_the_entries_changed_since() {
        let store = Store::in_memory();
        let run = run_id(1);
        let contexts = ContextCache::default();
        apply(
            &store,
            &[agent(), calling(1, "10"), answering(1), calling(2, "20")],
        );
        let read = context_now(&store, &contexts, &run);
        // The first entry and record planted in what is held: read again, they would be lost.
        let mut outcomes = read.effects.outcomes().to_vec();
        outcomes[0].tool_name = "planted".into();
        let mut effects = Effects::new(outcomes);
        effects.stored = read.effects.stored.clone();
        let held = read.provenance.clone().unwrap();
        let mut models = held.models.clone();
        models[0].model = Some("planted".into());
        let provenance = Provenance {
            models,
            sent_at: held.sent_at.clone(),
            produced_by: held.produced_by.clone(),
            stored: held.stored.clone(),
            seen: held.seen.clone(),
            broken: held.broken,
        };
        let revision = store.run_meta(&run).unwrap().unwrap().revision;
        let planted = RunContext {
            effects: Arc::new(effects),
            provenance: Some(Arc::new(provenance)),
            ..read
        };
        contexts.keep(&run, revision, &planted);
        // The next step answers call 2 and makes call 3: entries 1 and 2, record 3.
        apply(&store, &[answering(2), calling(3, "30")]);
        let next = context_now(&store, &contexts, &run);
        let fresh = context_now(&store, &ContextCache::default(), &run);
        assert_eq!(next.effects.outcomes()[0].tool_name, "planted");
        assert_eq!(next.effects.outcomes()[1..], fresh.effects.outcomes()[1..]);
        assert_eq!(next.effects.stored, fresh.effects.stored);
        assert_eq!(next.unresolved, fresh.unresolved);
        let (next_p, fresh_p) = (
            next.provenance.clone().unwrap(),
            fresh.provenance.clone().unwrap(),
        );
        assert_eq!(next_p.models[0].model.as_deref(), Some("planted"));
        assert_eq!(next_p.models[1..], fresh_p.models[1..]);
        assert_eq!(next_p.sent_at, fresh_p.sent_at);
        assert_eq!(next_p.produced_by, fresh_p.produced_by);
        // Nothing written since: what is held is given as it is.
        let again = context_now(&store, &contexts, &run);
        assert!(Arc::ptr_eq(&again.effects, &next.effects));
        // Past what the store remembers (another store's mark here), every entry is read again:
        // the planted one, its fingerprint altered, is decoded anew.
        let mut forgotten = contexts.take_prior(&run).unwrap();
        let mut effects = Effects::new(forgotten.effects.outcomes().to_vec());
        effects.stored = forgotten.effects.stored.clone();
        effects.stored[0].0 ^= 1;
        forgotten.effects = Arc::new(effects);
        forgotten.mark = Store::in_memory().change_mark();
        contexts.keep(&run, 0, &forgotten);
        let whole = context_now(&store, &contexts, &run);
        assert_eq!(whole.effects.outcomes(), fresh.effects.outcomes());
        assert_eq!(whole.effects.stored, fresh.effects.stored);
        // A provenance whose input chain was broken waits on a node, not a record: with no
        // record changed since, it is still read anew.
        let mut held = contexts.take_prior(&run).unwrap();
        let p = held.provenance.clone().unwrap();
        let mut models = p.models.clone();
        models[0].model = Some("planted".into());
        held.provenance = Some(Arc::new(Provenance {
            models,
            sent_at: p.sent_at.clone(),
            produced_by: p.produced_by.clone(),
            stored: p.stored.clone(),
            seen: p.seen.clone(),
            broken: true,
        }));
        held.mark = store.change_mark();
        contexts.keep(&run, 0, &held);
        let anew = context_now(&store, &contexts, &run).provenance.unwrap();
        assert_eq!(anew.models[0].model.as_deref(), Some("m"));
        assert_eq!(*anew, *fresh.provenance.unwrap());
    }

    #[test]
    fn a_provenance_held_elsewhere_is_copied_and_one_only_the_cache_holds_is_extended() {
        let store = Store::in_memory();
        let run = run_id(1);
        let contexts = ContextCache::default();
        apply(&store, &[agent(), calling(1, "10"), answering(1)]);
        let first = context_now(&store, &contexts, &run).provenance.unwrap();
        // Held here too: the next step's read copies it and leaves it as it was.
        apply(&store, &[calling(2, "20")]);
        let second = context_now(&store, &contexts, &run).provenance.unwrap();
        assert_eq!(first.models.len(), 1);
        assert_eq!(second.models.len(), 2);
        assert_eq!(first.stored.len(), 1);
        drop((first, second));
        // Held by the cache alone: extended in place, and the same as a read from nothing.
        apply(&store, &[answering(2), calling(3, "30")]);
        let third = context_now(&store, &contexts, &run).provenance.unwrap();
        let fresh = context_now(&store, &ContextCache::default(), &run)
            .provenance
            .unwrap();
        assert_eq!(third.models.len(), 3);
        assert_eq!(*third, *fresh);
        assert_eq!(third.stored, fresh.stored);
    }

    #[test]
    fn effects_are_found_by_call_id_in_ledger_order() {
        use crate::domain::EffectStatus;
        let entry = |id: &str, tool: &str| EffectOutcome {
            tool_call_id: id.into(),
            tool_name: tool.into(),
            status: EffectStatus::Completed,
            error: None,
            retry: None,
        };
        // A reused id ("a") answers in ledger order; ids sort apart from their ledger order.
        let effects = Effects::new(vec![
            entry("b", "first"),
            entry("a", "second"),
            entry("c", "third"),
            entry("a", "fourth"),
        ]);
        let tool = |id: &str, n: usize| effects.of_call(id, n).map(|e| e.tool_name.as_str());
        assert_eq!(tool("a", 0), Some("second"));
        assert_eq!(tool("a", 1), Some("fourth"));
        assert_eq!(tool("a", 2), None);
        assert_eq!(tool("b", 0), Some("first"));
        assert_eq!(tool("c", 0), Some("third"));
        assert_eq!(tool("missing", 0), None);
        assert_eq!(tool("0", 0), None, "before every id");
        assert_eq!(tool("z", 0), None, "after every id");
        assert_eq!(tool("b", usize::MAX), None);
        // An id repeated many times among others: its n-th entry, by position, not by a walk.
        let many = Effects::new(
            (0..3000)
                .map(|i| match i % 3 {
                    0 => entry("same", &i.to_string()),
                    _ => entry(&format!("other{i}"), "other"),
                })
                .collect(),
        );
        for n in [0, 1, 500, 999] {
            let found = many.of_call("same", n).map(|e| e.tool_name.clone());
            assert_eq!(found, Some((3 * n).to_string()));
        }
        assert!(many.of_call("same", 1000).is_none());
        assert_eq!(
            many.of_call("other4", 0).map(|e| e.tool_name.as_str()),
            Some("other")
        );
        assert_eq!(effects.len(), 4);
        assert_eq!(effects.outcomes()[2].tool_name, "third");
        assert!(Effects::default().is_empty());
    }

    #[test]
    fn provenance_from_the_records_is_the_one_from_the_facts() {
        let store = Store::in_memory();
        run_with_rewrites(&store);
        let run = run_id(1);
        let from_records = Provenance::read(&store, &run).unwrap();
        assert_eq!(from_records, read_from_facts(&store, &run));
        let order: Vec<(u64, Option<u64>)> = from_records
            .models
            .iter()
            .map(|m| (m.start_ns, m.input_tokens))
            .collect();
        assert_eq!(
            order,
            [
                (90, Some(31)),
                (100, Some(10)),
                (200, Some(21)),
                (320, Some(41))
            ]
        );
        assert_eq!(from_records.produced_by.len(), 4);
        assert!(from_records.sent_at.len() >= 4);
        // One record per request: the moved ones left no record at their old start.
        let run_key = store.run_key(&run).unwrap().unwrap();
        assert_eq!(
            store
                .keys_with_prefix(cf::MODEL_REQUESTS, &run_key.0)
                .unwrap()
                .len(),
            4
        );
    }

    #[test]
    fn a_schema_3_store_is_migrated_on_opening() {
        let dir = tempfile::tempdir().unwrap();
        let run = run_id(1);
        let expected = {
            let store = Store::open(dir.path(), false).unwrap();
            run_with_rewrites(&store);
            Provenance::read(&store, &run).unwrap()
        };
        // Back to what a schema-3 build leaves: facts keyed by run id, no records, version 3.
        crate::store::key_by_run_id(dir.path());
        {
            let db = rocksdb::DB::open_cf(
                &rocksdb::Options::default(),
                dir.path(),
                cf::ALL.iter().copied(),
            )
            .unwrap();
            let records = db.cf_handle(cf::MODEL_REQUESTS.name()).unwrap();
            db.delete_range_cf(&records, &[0u8; 8][..], &[0xffu8; 9][..])
                .unwrap();
            db.put(b"schema_version", b"3").unwrap();
            assert_eq!(
                db.iterator_cf(&records, rocksdb::IteratorMode::Start)
                    .count(),
                0
            );
        }
        let store = Store::open(dir.path(), false).unwrap();
        assert_eq!(Provenance::read(&store, &run).unwrap(), expected);
        assert_eq!(expected.models.len(), 4);
        drop(store);
        // Migrated once: the version written is this build's, and it opens again as is.
        let db = rocksdb::DB::open_cf(
            &rocksdb::Options::default(),
            dir.path(),
            cf::ALL.iter().copied(),
        )
        .unwrap();
        assert_eq!(
            db.get(b"schema_version").unwrap().unwrap(),
            crate::records::SCHEMA_VERSION.to_string().into_bytes()
        );
        drop(db);
        let store = Store::open(dir.path(), false).unwrap();
        assert_eq!(Provenance::read(&store, &run).unwrap(), expected);
    }
}
