//! Interactions: tool calls a run ended waiting on, for a human's approval or for an external
//! system's result, and how a later run of the same conversation resolved them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a waiting tool call waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InteractionKind {
    /// A human's decision to run the call or not (Pydantic AI `requires_approval` /
    /// `ApprovalRequired`, OpenAI Agents `needs_approval`).
    Approval,
    /// A result produced outside the agent (Pydantic AI `CallDeferred`).
    External,
}

impl InteractionKind {
    /// Reads Pydantic AI's `pydantic_ai.tool.deferral.name` (the exception the tool raised).
    pub fn of_deferral(name: &str) -> Option<Self> {
        match name {
            "ApprovalRequired" => Some(Self::Approval),
            "CallDeferred" => Some(Self::External),
            _ => None,
        }
    }
}

/// Where an interaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InteractionStatus {
    /// Nothing answered it yet.
    Pending,
    /// An approval the resuming run acted on: the tool ran in it.
    Approved,
    /// An approval the resuming run answered without running the tool.
    Denied,
    /// An external call whose result the resuming run carried.
    Completed,
}

/// One interaction of a waiting (or resumed) run, as `GET /v1/runs/{id}/interactions` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Interaction {
    /// The tool-call id.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// What the call waits for.
    pub kind: InteractionKind,
    /// Where it stands.
    pub status: InteractionStatus,
    /// The call's arguments, when the telemetry carries them.
    pub arguments: Option<Value>,
    /// When the model asked for the call (RFC 3339).
    pub requested_at: Option<String>,
    /// When a later run answered it (RFC 3339): the start of its first request carrying the answer.
    pub resolved_at: Option<String>,
    /// The run that answered it.
    pub resolved_by_run_id: Option<String>,
    /// What the answer was: for an approval `approved` or `denied`; for an external call
    /// `completed`; none while pending.
    pub decision: Option<String>,
}

/// How a later run answered a waiting call: kept on the waiting run's meta (see
/// [`crate::records::run_state::RunMeta`]) and folded into its ledger and status.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Resolution {
    /// Start of the answering model request, nanoseconds since the epoch.
    pub at_ns: u64,
    /// The answering run.
    pub run_id: String,
}
