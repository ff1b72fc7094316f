//! What a continuation needs of a run besides the messages of its history: the tool-effect
//! ledger and, for formats that carry them, which model request sent and produced each message.
//!
//! Reading these costs a scan of every effect (and every model-request record) of the run, which
//! for a long run is more than rendering it. [`ContextCache`] keeps them per run, tagged with the
//! run's revision ([`RunMeta::revision`](crate::interpreter::RunMeta), raised by every write of
//! the run's derived state): an entry is used only while the revision it was read at is the
//! run's current one, so a cached context is never older than what a read without the cache
//! would give. When the revision has moved on, the ledger is read again, but the entries whose
//! stored bytes are unchanged keep the outcomes decoded before ([`Effects`]). Bounded by a byte
//! budget (by default [`CONTEXT_CACHE_BYTES`]) over the estimated bytes of every context held
//! ([`ByteCache`]); in memory only.

use std::hash::BuildHasher;
use std::mem::size_of;
use std::sync::{Arc, Mutex};

use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::cache_budget::{json_bytes, ByteCache, ENTRY_OVERHEAD};
use crate::domain::{EffectOutcome, IdMap, IdSet, MessageHash, NodeId, ToolEffect};
use crate::store::{ModelRequestRecord, RunNodes, Store, StoreError};

/// Default byte budget of [`ContextCache`]: the context share of the default cache budget.
pub const CONTEXT_CACHE_BYTES: usize = 38 << 20;

/// Which model request sent and produced each message of a run.
#[derive(Debug, Default, PartialEq)]
pub struct Provenance {
    /// The run's model requests, in start order (what a continuation shows of the request that
    /// produced a message).
    pub models: Vec<ModelRequestRecord>,
    /// Start of the first model request whose input holds each message.
    pub sent_at: IdMap<MessageHash, u64>,
    /// Index in `models` of the first model request whose output holds each message.
    pub produced_by: IdMap<MessageHash, usize>,
}

impl Provenance {
    /// Reads the run's model-request records (kept at ingest next to its facts) and indexes them
    /// by the messages they sent and produced.
    fn read(store: &Store, run_id: &str) -> Result<Provenance, StoreError> {
        let requests = store.model_requests(run_id)?;
        Self::index(store, run_id, requests)
    }

    /// Indexes a run's model requests, given in start order (ties by span id).
    fn index(
        store: &Store,
        run_id: &str,
        requests: Vec<ModelRequestRecord>,
    ) -> Result<Provenance, StoreError> {
        // The first request that sent each message: walk each request's input chain back until
        // a node an earlier request already covered (its ancestors are covered too).
        let mut sent_at: IdMap<MessageHash, u64> = IdMap::default();
        let mut seen: IdSet<NodeId> = IdSet::default();
        let nodes = if requests.is_empty() {
            RunNodes::default()
        } else {
            store.run_nodes(run_id)?
        };
        for r in &requests {
            let mut at = r.input_tip;
            while let Some(id) = at {
                let Some(node) = nodes.get(&id) else { break };
                if !seen.insert(id) {
                    break;
                }
                sent_at.entry(node.message).or_insert(r.start_ns);
                at = node.parent;
            }
        }
        let mut produced_by = IdMap::default();
        let mut models = Vec::with_capacity(requests.len());
        for (i, r) in requests.into_iter().enumerate() {
            for hash in &r.output {
                produced_by.entry(*hash).or_insert(i);
            }
            models.push(r);
        }
        Ok(Provenance {
            models,
            sent_at,
            produced_by,
        })
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
/// each tool-call id found without a scan (built once per revision and shared by every render).
#[derive(Debug, Default)]
pub struct Effects {
    outcomes: Vec<EffectOutcome>,
    /// Indices into `outcomes` grouped by tool-call id, ledger order within a group.
    order: Vec<u32>,
    /// Each tool-call id's `(start, len)` in `order`.
    by_call: FxHashMap<Box<str>, (u32, u32)>,
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
    /// the old ones' length and 64-bit hash.
    fn read(
        store: &Store,
        run_id: &str,
        prior: Option<&Effects>,
    ) -> Result<(Self, Vec<ToolEffect>), StoreError> {
        let mut stored: Vec<(u64, usize)> = Vec::new();
        let (outcomes, unresolved) = store.effect_outcomes_with(run_id, |bytes| {
            let at = stored.len();
            let seen = (FxBuildHasher.hash_one(bytes), bytes.len());
            stored.push(seen);
            let prior = prior?;
            if prior.stored.get(at) != Some(&seen) {
                return None;
            }
            prior.outcomes.get(at).cloned()
        })?;
        let mut effects = Self::new(outcomes);
        effects.stored = stored;
        Ok((effects, unresolved))
    }

    /// Indexes the ledger outcomes, given in request order.
    pub fn new(outcomes: Vec<EffectOutcome>) -> Self {
        let mut order: Vec<u32> = (0..outcomes.len())
            .filter_map(|i| u32::try_from(i).ok())
            .collect();
        // Stable: entries of one id keep their ledger order.
        order.sort_by(|&a, &b| {
            outcomes[a as usize]
                .tool_call_id
                .cmp(&outcomes[b as usize].tool_call_id)
        });
        let mut by_call: FxHashMap<Box<str>, (u32, u32)> = FxHashMap::default();
        by_call.reserve(outcomes.len());
        for (at, &i) in order.iter().enumerate() {
            let id = outcomes[i as usize].tool_call_id.as_str();
            let at = u32::try_from(at).unwrap_or(u32::MAX);
            match by_call.get_mut(id) {
                Some((_, len)) => *len += 1,
                None => {
                    by_call.insert(id.into(), (at, 1));
                }
            }
        }
        Self {
            outcomes,
            order,
            by_call,
            stored: Vec::new(),
        }
    }

    /// The `n`-th ledger entry (from 0, in request order) of the tool call `id`.
    pub fn of_call(&self, id: &str, n: usize) -> Option<&EffectOutcome> {
        let &(start, len) = self.by_call.get(id)?;
        if n >= len as usize {
            return None;
        }
        let i = *self.order.get(start as usize + n)?;
        self.outcomes.get(i as usize)
    }

    /// Estimated bytes held: outcomes, the call index and the stored-bytes fingerprints.
    fn bytes(&self) -> usize {
        self.outcomes.iter().map(outcome_bytes).sum::<usize>()
            + self.order.capacity() * size_of::<u32>()
            + self
                .by_call
                .keys()
                .map(|k| k.len() + size_of::<(Box<str>, (u32, u32))>() + 8)
                .sum::<usize>()
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
        let (effects, unresolved, held_provenance) = match cached {
            Some(c) => (c.effects, c.unresolved, c.provenance),
            None => {
                // The ledger read at an earlier revision, if any, spares decoding what is unchanged.
                let prior = self.prior_effects(run_id);
                let (effects, unresolved) = Effects::read(store, run_id, prior.as_deref())?;
                (Arc::new(effects), Arc::from(unresolved), None)
            }
        };
        let provenance = match (provenance, held_provenance) {
            (_, Some(p)) => Some(p),
            (true, None) => Some(Arc::new(Provenance::read(store, run_id)?)),
            (false, None) => None,
        };
        let context = RunContext {
            effects,
            unresolved,
            provenance,
        };
        self.keep(run_id, revision, &context);
        Ok(context)
    }

    /// The ledger last read for `run_id`, at whatever revision.
    fn prior_effects(&self, run_id: &str) -> Option<Arc<Effects>> {
        let entries = self.entries.lock().ok()?;
        entries
            .peek(run_id)
            .map(|entry| entry.context.effects.clone())
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

    /// Marks every context held as read at the revision before the one it was read at, as if
    /// its run had been written since (for benchmarks measuring the read after a run's next
    /// step: the context is read again, with what it held to go on).
    pub fn outdate(&self) {
        if let Ok(mut entries) = self.entries.lock() {
            let runs: Vec<String> = entries.iter().map(|(run, _)| run.clone()).collect();
            for run in runs {
                entries.update(run.as_str(), |entry| {
                    entry.revision = entry.revision.wrapping_sub(1)
                });
            }
        }
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
        // planted name shows it was not decoded again) ...
        let mut planted = Effects::read(&store, &run, None).unwrap().0;
        planted.outcomes[0].tool_name = "planted".into();
        let (again, _) = Effects::read(&store, &run, Some(&planted)).unwrap();
        assert_eq!(again.outcomes()[0].tool_name, "planted");
        assert_eq!(again.outcomes()[1..], first.outcomes()[1..]);
        // ... and one whose bytes differ is decoded.
        planted.stored[0].0 ^= 1;
        let (fresh, _) = Effects::read(&store, &run, Some(&planted)).unwrap();
        assert_eq!(fresh.outcomes(), first.outcomes());
        // A prior of another length lines up by position only.
        let short = Effects::new(Vec::new());
        let (alone, _) = Effects::read(&store, &run, Some(&short)).unwrap();
        assert_eq!(alone.outcomes(), first.outcomes());
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
        // Back to what a schema-3 build leaves: no records, version 3.
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
        assert_eq!(db.get(b"schema_version").unwrap().unwrap(), b"4".to_vec());
        drop(db);
        let store = Store::open(dir.path(), false).unwrap();
        assert_eq!(Provenance::read(&store, &run).unwrap(), expected);
    }
}
