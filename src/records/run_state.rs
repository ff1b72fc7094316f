//! The persisted records of one run's derivation: what is known of the run besides its facts
//! ([`RunMeta`]) and the working state a derivation leaves for the next fact ([`RunState`]).
//!
//! Both are stored as JSON. The named parts of [`RunState`] ([`SortKey`], [`Indexed`],
//! [`SnapshotMark`], [`Instructions`]) are written as the tuples earlier builds wrote (arrays),
//! so a state stored by an earlier build reads back unchanged and the bytes stay the same.

use serde::{Deserialize, Serialize};

use super::fact::ToolReturnForm;
use super::walk_state::WalkState;
use crate::domain::{ChainRef, MessageHash, SnapshotState, ToolEffect};

/// What is known of a run besides its span facts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The run whose tool call started this one, once the link is resolved.
    pub parent_run_id: Option<String>,
    /// Set when the run was declared dead.
    pub abandoned: Option<Abandonment>,
    /// Wall-clock nanoseconds when a new fact of the run last arrived.
    pub last_seen_ns: u64,
    /// Raised by every write of the run's derived state (run record, events, effects,
    /// snapshots), to at least the writer's clock: state read at one revision can be reused while
    /// the revision is unchanged, and a run deleted and made again (a merged orphan) does not
    /// start over at a revision an earlier run of that id had.
    #[serde(default)]
    pub revision: u64,
    /// The answers later runs gave to the calls this run ended waiting on, by tool-call id (the
    /// earliest answer of each call: see [`crate::domain::Resolution`]).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub resolutions: std::collections::BTreeMap<String, crate::domain::Resolution>,
}

/// A run declared dead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Abandonment {
    /// When, in nanoseconds since the epoch.
    pub at_ns: u64,
    /// Why (`abandoned by request`, `no telemetry for 600s`).
    pub reason: String,
}

/// Where a span sorts among the run's spans of its kind: by start, then span id. Stored as
/// `[start_ns, span_id]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "(u64, String)", into = "(u64, String)")]
pub struct SortKey {
    /// Start, nanoseconds since the epoch.
    pub start_ns: u64,
    /// Span id (hex).
    pub span_id: String,
}

impl From<(u64, String)> for SortKey {
    fn from((start_ns, span_id): (u64, String)) -> Self {
        Self { start_ns, span_id }
    }
}

impl From<SortKey> for (u64, String) {
    fn from(k: SortKey) -> Self {
        (k.start_ns, k.span_id)
    }
}

/// A ledger entry while it is being built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EffectBuild {
    /// The entry as it is stored.
    pub effect: ToolEffect,
    /// Index of the model request that asked for it (none: no request asked for it).
    pub request_step: Option<usize>,
    /// When the request asking for it ended.
    pub requested_ns: Option<u64>,
    /// When the tool span that settled it ended.
    pub ended_ns: Option<u64>,
}

/// A ledger entry with its index in the run's ledger. Stored as `[index, entry]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "(u32, EffectBuild)", into = "(u32, EffectBuild)")]
pub struct Indexed {
    /// Index in the ledger.
    pub index: u32,
    /// The entry.
    pub entry: EffectBuild,
}

impl From<(u32, EffectBuild)> for Indexed {
    fn from((index, entry): (u32, EffectBuild)) -> Self {
        Self { index, entry }
    }
}

impl From<Indexed> for (u32, EffectBuild) {
    fn from(i: Indexed) -> Self {
        (i.index, i.entry)
    }
}

/// The full history of a model request (input + output) and the validity walk at its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastFull {
    /// The history.
    pub history: ChainRef,
    /// The walk at its end.
    pub walk: WalkState,
    /// When the request ended.
    pub end_ns: u64,
}

/// The last snapshot record: its history and state (a candidate equal to it is not recorded).
/// Stored as `[history, state]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "(ChainRef, SnapshotState)", into = "(ChainRef, SnapshotState)")]
pub struct LastSnapshot {
    /// Its history.
    pub history: ChainRef,
    /// Its state.
    pub state: SnapshotState,
}

impl From<(ChainRef, SnapshotState)> for LastSnapshot {
    fn from((history, state): (ChainRef, SnapshotState)) -> Self {
        Self { history, state }
    }
}

impl From<LastSnapshot> for (ChainRef, SnapshotState) {
    fn from(s: LastSnapshot) -> Self {
        (s.history, s.state)
    }
}

/// A point in a run's snapshot records: how many there are, and the last of them. Stored as
/// `[next_seq, last]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(
    from = "(u32, Option<LastSnapshot>)",
    into = "(u32, Option<LastSnapshot>)"
)]
pub struct SnapshotMark {
    /// Records before this point (the seq of the next one).
    pub next_seq: u32,
    /// The last record before this point.
    pub last: Option<LastSnapshot>,
}

impl From<(u32, Option<LastSnapshot>)> for SnapshotMark {
    fn from((next_seq, last): (u32, Option<LastSnapshot>)) -> Self {
        Self { next_seq, last }
    }
}

impl From<SnapshotMark> for (u32, Option<LastSnapshot>) {
    fn from(m: SnapshotMark) -> Self {
        (m.next_seq, m.last)
    }
}

/// The system instructions snapshots name: the latest a model request carried, and the run
/// span's. Stored as `[model, agent]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(
    from = "(Option<MessageHash>, Option<MessageHash>)",
    into = "(Option<MessageHash>, Option<MessageHash>)"
)]
pub struct Instructions {
    /// The latest a model request carried.
    pub model: Option<MessageHash>,
    /// The run span's.
    pub agent: Option<MessageHash>,
}

impl Instructions {
    /// The instructions a snapshot names: the model request's, else the run span's.
    pub fn effective(&self) -> Option<MessageHash> {
        self.model.or(self.agent)
    }
}

impl From<(Option<MessageHash>, Option<MessageHash>)> for Instructions {
    fn from((model, agent): (Option<MessageHash>, Option<MessageHash>)) -> Self {
        Self { model, agent }
    }
}

impl From<Instructions> for (Option<MessageHash>, Option<MessageHash>) {
    fn from(i: Instructions) -> Self {
        (i.model, i.agent)
    }
}

/// What a derivation of a running run leaves for the next fact: the fold's accumulator, less
/// what can be read back from the run record and the ledger's call counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Sort key of the last model request.
    pub last_model: Option<SortKey>,
    /// Sort key of the last tool call.
    pub last_tool: Option<SortKey>,
    /// Time of the latest event.
    pub last_event_ns: u64,
    /// Model requests so far.
    pub models: u32,
    /// Ledger entries so far.
    pub ledger_len: u32,
    /// Ledger entries no tool span is bound to yet, in ledger order.
    pub unbound: Vec<Indexed>,
    /// Ledger entries the last model request asked for, in ledger order.
    pub last_step: Vec<Indexed>,
    /// The ledger has entries no model request asked for.
    pub standalone: bool,
    /// The last model request's full history.
    pub last_full: Option<LastFull>,
    /// Snapshot records later model requests cannot change, and the last of them.
    pub fixed: SnapshotMark,
    /// Some snapshot is complete.
    pub has_complete: bool,
    /// The latest system instructions of a model request, and those of the run span.
    pub instructions: Instructions,
    /// The tool-return form the model requests so far last showed, which reconstructed answers
    /// take (none shown: the default form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_return_form: Option<ToolReturnForm>,
    /// The run record kept with this state carries the rollups (tool and model time, entries
    /// by status), so an append may update them; a state written before them reads back
    /// `false`, and the run is then derived in full once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keeps_rollups: bool,
}

#[cfg(test)]
#[path = "run_state_tests.rs"]
mod tests;
