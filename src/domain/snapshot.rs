//! Snapshots: message histories at step boundaries, stored as references to history chains.

use serde::{Deserialize, Serialize};

use super::{ChainRef, MessageHash};

/// Whether a history can be sent to a provider as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotState {
    /// Every tool call is answered: provider-valid.
    Complete,
    /// Tool work is unsettled (or the history is otherwise not valid to send).
    Interrupted,
}

/// Where a history comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotSource {
    /// Exactly what the framework sent (a model request's input, or the run's final history).
    Observed,
    /// Assembled from tool spans before the next model request exists.
    Reconstructed,
}

/// Snapshot metadata as served by the API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SnapshotMeta {
    /// Position among the run's snapshots, from 0.
    pub seq: u32,
    /// The model request (from 1) this snapshot follows or precedes.
    pub step_index: u32,
    /// Complete or interrupted.
    pub state: SnapshotState,
    /// Observed or reconstructed.
    pub source: SnapshotSource,
    /// Messages in the history.
    pub message_count: u32,
    /// RFC 3339 time of the step boundary.
    pub timestamp: String,
    /// Why the snapshot is interrupted, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A stored snapshot: metadata plus its history by reference (the tip of the run's history
/// chain, see [`super::ChainRef`]), so storage grows with the number of distinct messages, not
/// with steps x history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// Metadata.
    pub meta: SnapshotMeta,
    /// The history.
    pub history: ChainRef,
    /// Key of the system instructions in force at the snapshot (stored with the messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<MessageHash>,
}
