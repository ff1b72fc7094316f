//! Loading the history of a snapshot, with what the renderers need to know about it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use crate::domain::{MessageHash, NodeId, Run, SnapshotRecord, SnapshotState, ToolEffect};
use crate::interpreter::{FactKind, SpanFact, StoredFact};
use crate::service_error::{ServiceError, ServiceErrorCode};
use crate::store::{RunNodes, Store, StoreError};

/// Which snapshot to continue from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Selector {
    /// A specific snapshot seq.
    pub at: Option<u32>,
    /// Allow the latest snapshot even if it is interrupted.
    pub include_interrupted: bool,
    /// Close dangling tool calls with synthesized "interrupted" results (see [`History::repair`]).
    pub repair: bool,
    /// Also load which model request sent and produced each message (model names, usage and
    /// times of [`History::producer_of`] and [`History::first_sent`]; see
    /// [`super::Format::needs_provenance`]).
    pub provenance: bool,
}

/// Why no continuation could be given.
#[derive(Debug, thiserror::Error)]
pub enum ContinuationError {
    /// The run has no snapshot matching the request.
    #[error("{0}")]
    NoSnapshot(String),
    /// The store failed or is missing data.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ServiceError for ContinuationError {
    fn error_code(&self) -> ServiceErrorCode {
        match self {
            Self::NoSnapshot(_) => ServiceErrorCode::NotFound,
            Self::Store(e) => e.error_code(),
        }
    }
}

/// A snapshot's history plus its context.
pub struct History {
    /// The run.
    pub run: Run,
    /// The chosen snapshot.
    pub snapshot: SnapshotRecord,
    /// Message bodies (OTel GenAI shape), in order (shared with the store's history cache).
    pub messages: Arc<[Value]>,
    /// Their hashes, in order.
    pub hashes: Arc<[MessageHash]>,
    /// System instructions in force at the snapshot (array of parts).
    pub system_instructions: Option<Value>,
    /// The run's model-request facts, in start order.
    pub models: Vec<SpanFact>,
    /// The run's tool-effect ledger.
    pub effects: Vec<ToolEffect>,
    /// Start of the first model request whose input holds each message (see [`History::first_sent`]).
    pub(super) sent_at: HashMap<MessageHash, u64>,
    /// Index in `models` of the first model request whose output holds each message.
    pub(super) produced_by: HashMap<MessageHash, usize>,
}

impl History {
    /// The model request whose output contains the message, if any.
    pub fn producer_of(&self, hash: &MessageHash) -> Option<&SpanFact> {
        self.produced_by.get(hash).and_then(|&i| self.models.get(i))
    }

    /// Start of the first model request whose input contains the message, if any.
    pub fn first_sent(&self, hash: &MessageHash) -> Option<u64> {
        self.sent_at.get(hash).copied()
    }

    /// Indexes the model requests (in start order) by the messages they produced, so the lookup
    /// above costs O(1) instead of a scan of every request's output.
    fn index_models(&mut self) {
        for (i, m) in self.models.iter().enumerate() {
            for r in m.output.iter().flatten() {
                self.produced_by.entry(r.hash.clone()).or_insert(i);
            }
        }
    }

    /// Index of effects by tool-call id, in ledger order.
    pub fn effects_by_id(&self) -> HashMap<&str, Vec<&ToolEffect>> {
        let mut map: HashMap<&str, Vec<&ToolEffect>> = HashMap::new();
        for e in &self.effects {
            map.entry(e.tool_call_id.as_str()).or_default().push(e);
        }
        map
    }
}

/// Loads the history of the snapshot `selector` picks for `run`.
pub fn load(store: &Store, run: Run, selector: Selector) -> Result<History, ContinuationError> {
    let chosen = match selector.at {
        Some(seq) => store.snapshot(&run.run_id, seq)?.ok_or_else(|| {
            ContinuationError::NoSnapshot(format!(
                "run {} has no snapshot {seq} (it has {})",
                run.run_id, run.snapshot_count
            ))
        })?,
        None => store
            .last_snapshot(&run.run_id, |r| {
                selector.include_interrupted || r.meta.state == SnapshotState::Complete
            })?
            .ok_or_else(|| {
                let why = run
                    .continuation_unavailable
                    .clone()
                    .unwrap_or_else(|| "no snapshot has every tool call answered yet; pass include_interrupted=true for the latest one".into());
                ContinuationError::NoSnapshot(format!(
                    "run {} has no {}snapshot: {why}",
                    run.run_id,
                    if selector.include_interrupted { "" } else { "complete " }
                ))
            })?,
    };

    let resolved = store.history(&run.run_id, &chosen.history)?;
    let system_instructions = match &chosen.instructions {
        Some(hash) => store
            .messages(&run.run_id, std::slice::from_ref(hash))?
            .pop(),
        None => None,
    };

    let mut stored: Vec<StoredFact> = if selector.provenance {
        store
            .stored_facts(&run.run_id)?
            .into_iter()
            .filter(|f| f.fact.kind == FactKind::ModelRequest)
            .collect()
    } else {
        Vec::new()
    };
    stored.sort_by(|a, b| {
        (a.fact.start_ns, &a.fact.span_id).cmp(&(b.fact.start_ns, &b.fact.span_id))
    });
    // The first request that sent each message: walk each request's input chain back until a
    // node an earlier request already covered (its ancestors are covered too).
    let mut sent_at: HashMap<MessageHash, u64> = HashMap::new();
    let mut seen: HashSet<NodeId> = HashSet::new();
    let nodes = if stored.is_empty() {
        RunNodes::default()
    } else {
        store.run_nodes(&run.run_id)?
    };
    for s in &stored {
        let mut at = s.input_chain.as_ref().and_then(|c| c.tip.clone());
        while let Some(id) = at {
            let Some(node) = nodes.get(&id) else { break };
            if !seen.insert(id) {
                break;
            }
            sent_at.entry(node.message).or_insert(s.fact.start_ns);
            at = node.parent;
        }
    }
    let models: Vec<SpanFact> = stored.into_iter().map(|s| s.fact).collect();
    let effects = store.effects(&run.run_id)?;
    let mut history = History {
        run,
        snapshot: chosen,
        messages: resolved.messages,
        hashes: resolved.hashes,
        system_instructions,
        models,
        effects,
        sent_at,
        produced_by: HashMap::new(),
    };
    history.index_models();
    Ok(history)
}
