//! What a continuation needs of a run besides the messages of its history: the tool-effect
//! ledger and, for formats that carry them, which model request sent and produced each message.
//!
//! Reading these costs a scan of every effect (and every model-request fact) of the run, which
//! for a long run is more than rendering it. [`ContextCache`] keeps them per run, tagged with the
//! run's revision ([`RunMeta::revision`](crate::interpreter::RunMeta), raised by every write of
//! the run's derived state): an entry is used only while the revision it was read at is the
//! run's current one, so a cached context is never older than what a read without the cache
//! would give. Bounded by [`CONTEXT_CACHE_ITEMS`], least recently used run first out; in memory
//! only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use crate::domain::{ChainRef, IdMap, IdSet, MessageHash, NodeId, ToolEffect};
use crate::interpreter::FactKind;
use crate::store::keys::cf;
use crate::store::{RunNodes, Store, StoreError};

/// Most effects plus model-request facts [`ContextCache`] holds over all runs.
pub const CONTEXT_CACHE_ITEMS: usize = 100_000;

/// What a continuation shows of the model request that produced a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRequest {
    /// Span id (hex).
    pub span_id: String,
    /// Start, nanoseconds since the epoch.
    pub start_ns: u64,
    /// End, nanoseconds since the epoch.
    pub end_ns: u64,
    /// Model name.
    pub model: Option<String>,
    /// Input tokens.
    pub input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
}

/// The fields of a stored span fact that provenance reads; the rest of the record (tool
/// arguments and results, message shapes) is skipped without being built.
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

/// Which model request sent and produced each message of a run.
#[derive(Debug, Default)]
pub struct Provenance {
    /// The run's model requests, in start order.
    pub models: Vec<ModelRequest>,
    /// Start of the first model request whose input holds each message.
    pub sent_at: IdMap<MessageHash, u64>,
    /// Index in `models` of the first model request whose output holds each message.
    pub produced_by: IdMap<MessageHash, usize>,
}

impl Provenance {
    /// Reads the run's model-request facts and indexes them by the messages they sent and
    /// produced.
    fn read(store: &Store, run_id: &str) -> Result<Provenance, StoreError> {
        let mut stored: Vec<FactRecord> = store
            .run_records::<FactRecord>(cf::FACTS, run_id)?
            .into_iter()
            .filter(|f| f.fact.kind == FactKind::ModelRequest)
            .collect();
        stored.sort_by(|a, b| {
            (a.fact.start_ns, &a.fact.span_id).cmp(&(b.fact.start_ns, &b.fact.span_id))
        });
        // The first request that sent each message: walk each request's input chain back until
        // a node an earlier request already covered (its ancestors are covered too).
        let mut sent_at: IdMap<MessageHash, u64> = IdMap::default();
        let mut seen: IdSet<NodeId> = IdSet::default();
        let nodes = if stored.is_empty() {
            RunNodes::default()
        } else {
            store.run_nodes(run_id)?
        };
        for s in &stored {
            let mut at = s.input_chain.as_ref().and_then(|c| c.tip);
            while let Some(id) = at {
                let Some(node) = nodes.get(&id) else { break };
                if !seen.insert(id) {
                    break;
                }
                sent_at.entry(node.message).or_insert(s.fact.start_ns);
                at = node.parent;
            }
        }
        let mut produced_by = IdMap::default();
        let mut models = Vec::with_capacity(stored.len());
        for (i, s) in stored.into_iter().enumerate() {
            let f = s.fact;
            for r in f.output.into_iter().flatten() {
                produced_by.entry(r.hash).or_insert(i);
            }
            models.push(ModelRequest {
                span_id: f.span_id,
                start_ns: f.start_ns,
                end_ns: f.end_ns,
                model: f.model,
                input_tokens: f.input_tokens,
                output_tokens: f.output_tokens,
            });
        }
        Ok(Provenance {
            models,
            sent_at,
            produced_by,
        })
    }

    fn items(&self) -> usize {
        self.models.len()
    }
}

/// A run's context at one revision.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The tool-effect ledger, in request order.
    pub effects: Arc<[ToolEffect]>,
    /// Provenance, when it was asked for.
    pub provenance: Option<Arc<Provenance>>,
}

impl RunContext {
    fn items(&self) -> usize {
        self.effects.len() + self.provenance.as_ref().map_or(0, |p| p.items())
    }
}

struct Entry {
    revision: u64,
    used: u64,
    context: RunContext,
}

#[derive(Default)]
struct Entries {
    runs: HashMap<String, Entry>,
    held: usize,
    tick: u64,
}

/// Run contexts by run id, each valid for one revision of its run.
#[derive(Default)]
pub struct ContextCache {
    entries: Mutex<Entries>,
}

impl ContextCache {
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
        let (effects, held_provenance) = match cached {
            Some(c) => (c.effects, c.provenance),
            None => (Arc::from(store.effects(run_id)?), None),
        };
        let provenance = match (provenance, held_provenance) {
            (_, Some(p)) => Some(p),
            (true, None) => Some(Arc::new(Provenance::read(store, run_id)?)),
            (false, None) => None,
        };
        let context = RunContext {
            effects,
            provenance,
        };
        self.keep(run_id, revision, &context);
        Ok(context)
    }

    fn lookup(&self, run_id: &str, revision: u64) -> Option<RunContext> {
        let mut entries = self.entries.lock().ok()?;
        entries.tick += 1;
        let tick = entries.tick;
        let entry = entries.runs.get_mut(run_id)?;
        if entry.revision != revision {
            return None;
        }
        entry.used = tick;
        Some(entry.context.clone())
    }

    fn keep(&self, run_id: &str, revision: u64, context: &RunContext) {
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        let items = context.items();
        if items > CONTEXT_CACHE_ITEMS {
            return;
        }
        entries.tick += 1;
        let used = entries.tick;
        let entry = Entry {
            revision,
            used,
            context: context.clone(),
        };
        if let Some(old) = entries.runs.insert(run_id.to_string(), entry) {
            entries.held = entries.held.saturating_sub(old.context.items());
        }
        entries.held += items;
        while entries.held > CONTEXT_CACHE_ITEMS {
            let Some(oldest) = entries
                .runs
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            if let Some(evicted) = entries.runs.remove(&oldest) {
                entries.held = entries.held.saturating_sub(evicted.context.items());
            }
        }
    }

    /// Empties the cache (for benchmarks measuring cold reads).
    pub fn clear(&self) {
        if let Ok(mut entries) = self.entries.lock() {
            *entries = Entries::default();
        }
    }

    /// Effects and model-request facts held over all runs.
    pub fn held(&self) -> usize {
        self.entries.lock().map(|e| e.held).unwrap_or(0)
    }
}
