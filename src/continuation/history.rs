//! Loading the history of a snapshot, with what the renderers need to know about it.

use std::sync::Arc;

use serde_json::Value;

use super::context::{ContextCache, Effects, Provenance};
pub use super::lineage::Ancestor;
use crate::domain::{MessageHash, Run, SnapshotRecord, SnapshotState, ToolEffect};
use crate::media::MediaError;
use crate::records::ModelRequestRecord;
use crate::service_error::{ServiceError, ServiceErrorCode};
use crate::store::{Store, StoreError};

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
    /// No run has the id or alias asked for.
    #[error("{0}")]
    NoRun(String),
    /// The store failed or is missing data.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Media parts could not be restored from the media store.
    #[error(transparent)]
    Media(#[from] MediaError),
    /// A blocking task of the request failed.
    #[error("internal error: {0}")]
    Task(String),
}

impl ServiceError for ContinuationError {
    fn error_code(&self) -> ServiceErrorCode {
        match self {
            Self::NoSnapshot(_) | Self::NoRun(_) => ServiceErrorCode::NotFound,
            Self::Store(e) => e.error_code(),
            Self::Media(e) => e.error_code(),
            Self::Task(_) => ServiceErrorCode::Internal,
        }
    }

    fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Media(e) => e.retry_after(),
            _ => None,
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
    pub messages: Arc<[Arc<Value>]>,
    /// Their hashes, in order.
    pub hashes: Arc<[MessageHash]>,
    /// False when no message names a blob of the media store (known from the store's read:
    /// [`ResolvedHistory::may_name_media`](crate::store::ResolvedHistory::may_name_media)).
    pub may_name_media: bool,
    /// System instructions in force at the snapshot (array of parts).
    pub system_instructions: Option<Value>,
    /// How each entry of the run's tool-effect ledger ended (shared with the [`ContextCache`]).
    pub effects: Arc<Effects>,
    /// The whole ledger entries of the calls whose outcome is not known.
    pub unresolved: Arc<[ToolEffect]>,
    /// Which model request sent and produced each message (empty unless
    /// [`Selector::provenance`] asked for it).
    pub provenance: Arc<Provenance>,
    /// The runs this run continues (see [`super::lineage`]), nearest first: what their records
    /// say of the messages they sent and produced, which this run's own telemetry does not carry.
    pub ancestors: Vec<Ancestor>,
}

impl History {
    /// True when some message names a blob of the media store (looked for only when the
    /// store's read found the media scheme in some message).
    pub fn holds_media(&self) -> bool {
        self.may_name_media && crate::media::holds_references(self.messages.iter().map(|m| &**m))
    }

    /// The model request whose output contains the message, if any: the run's own, else the
    /// nearest continued run's.
    pub fn producer_of(&self, hash: &MessageHash) -> Option<&ModelRequestRecord> {
        std::iter::once(&self.provenance)
            .chain(self.ancestors.iter().map(|a| &a.provenance))
            .find_map(|p| p.produced_by.get(hash).and_then(|&i| p.models.get(i)))
    }

    /// Start of the first model request whose input contains the message, if any (the
    /// earliest continued run that sent it first).
    pub fn first_sent(&self, hash: &MessageHash) -> Option<u64> {
        self.ancestors
            .iter()
            .rev()
            .map(|a| &a.provenance)
            .chain(std::iter::once(&self.provenance))
            .find_map(|p| p.sent_at.get(hash).copied())
    }

    /// The framework's id of the run the message at `index` was made in: the earliest continued
    /// run whose history holds it, else this run.
    pub fn run_alias_at(&self, index: usize) -> Option<&str> {
        match self.ancestors.iter().rev().find(|a| index < a.upto) {
            Some(a) => a.alias.as_deref(),
            None => self.run.aliases.first().map(String::as_str),
        }
    }

    /// The system instructions in force when the message at `index` was sent: those of the
    /// earliest continued run whose history holds it, else the snapshot's.
    pub fn instructions_at(&self, index: usize) -> Option<&Value> {
        self.ancestors
            .iter()
            .rev()
            .find(|a| index < a.upto)
            .map_or(self.system_instructions.as_ref(), |a| {
                a.instructions.as_ref()
            })
    }

    /// The run's model requests, in start order (empty without provenance).
    pub fn models(&self) -> &[ModelRequestRecord] {
        &self.provenance.models
    }
}

/// Loads the history of the snapshot `selector` picks for `run`; the run's effects and
/// provenance come from `contexts` while the run is unchanged.
pub fn load(
    store: &Store,
    contexts: &ContextCache,
    run: Run,
    selector: Selector,
) -> Result<History, ContinuationError> {
    // The revision is read before anything it vouches for, so a context kept under it is at
    // least as new as the revision.
    let revision = store.run_meta(&run.run_id)?.map_or(0, |meta| meta.revision);
    // A waiting run's latest snapshot is its history up to the calls it waits on: the one a
    // framework resumes from, so it is the default even though those calls are unanswered.
    let include_interrupted =
        selector.include_interrupted || run.status == crate::domain::RunStatus::Waiting;
    let chosen = match selector.at {
        Some(seq) => store.snapshot(&run.run_id, seq)?.ok_or_else(|| {
            ContinuationError::NoSnapshot(format!(
                "run {} has no snapshot {seq} (it has {})",
                run.run_id, run.snapshot_count
            ))
        })?,
        None => store
            .last_snapshot(&run.run_id, |r| {
                include_interrupted || r.meta.state == SnapshotState::Complete
            })?
            .ok_or_else(|| {
                let why = run
                    .continuation_unavailable
                    .clone()
                    .unwrap_or_else(|| "no snapshot has every tool call answered yet; pass include_interrupted=true for the latest one".into());
                ContinuationError::NoSnapshot(format!(
                    "run {} has no {}snapshot: {why}",
                    run.run_id,
                    if include_interrupted { "" } else { "complete " }
                ))
            })?,
    };

    let run_id = run.run_id.as_str();
    let context = || contexts.get(store, run_id, revision, selector.provenance);
    let (resolved, context) = if contexts.holds(run_id, revision, selector.provenance) {
        (store.history(run_id, &chosen.history)?, context()?)
    } else {
        // The ledger (and provenance) are read on a second thread while the history is read
        // here: neither needs the other, and a long run's cold read is mostly these two.
        std::thread::scope(|scope| {
            let other = std::thread::Builder::new()
                .name("stepline-context".into())
                .spawn_scoped(scope, context);
            let resolved = store.history(run_id, &chosen.history);
            let context = match other {
                Ok(handle) => handle
                    .join()
                    .map_err(|_| ContinuationError::Task("the context read failed".into()))?,
                // No second thread to be had: read it here.
                Err(_) => context(),
            };
            Ok::<_, ContinuationError>((resolved?, context?))
        })?
    };
    let system_instructions = match &chosen.instructions {
        Some(hash) => store.messages(run_id, std::slice::from_ref(hash))?.pop(),
        None => None,
    };
    let ancestors = super::lineage::ancestors(
        store,
        contexts,
        run_id,
        &resolved.hashes,
        selector.provenance,
    )?;
    Ok(History {
        run,
        snapshot: chosen,
        messages: resolved.messages,
        hashes: resolved.hashes,
        may_name_media: resolved.may_name_media,
        system_instructions,
        effects: context.effects,
        unresolved: context.unresolved,
        provenance: context.provenance.unwrap_or_default(),
        ancestors,
    })
}
