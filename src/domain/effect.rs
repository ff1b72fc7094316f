//! The tool-effect ledger: which tool calls ran, and which may have had side effects when a run died.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a tool call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EffectStatus {
    /// The model asked for it; nothing says it ran.
    Requested,
    /// Known to be running.
    Started,
    /// Returned a result.
    Completed,
    /// Failed (or asked the model to retry).
    Failed,
    /// The run is over without a terminal record: it may or may not have had its effect.
    UnknownAfterCrash,
    /// The run ended waiting on this call: for a human's approval or an external result (see
    /// [`ToolEffect::interaction`]). Not run by this run.
    Waiting,
}

impl EffectStatus {
    /// True for `requested` and `started`: the call's outcome is not known yet.
    pub fn is_unsettled(self) -> bool {
        matches!(self, Self::Requested | Self::Started)
    }

    /// True when the outcome is not known: unsettled, waiting, or unknown after a crash.
    pub fn is_unresolved(self) -> bool {
        matches!(
            self,
            Self::Requested | Self::Started | Self::UnknownAfterCrash | Self::Waiting
        )
    }
}

/// One tool call of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolEffect {
    /// The call id (ids repeat across runs; the ledger is per run).
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// Where it stands.
    pub status: EffectStatus,
    /// Arguments, when the telemetry carries them.
    pub arguments: Option<Value>,
    /// When the model asked for it.
    pub requested_at: Option<String>,
    /// When the tool began.
    pub started_at: Option<String>,
    /// When the tool ended.
    pub ended_at: Option<String>,
    /// The result, when the telemetry carries it.
    pub result: Option<Value>,
    /// Error text of a failed call.
    pub error: Option<String>,
    /// Idempotency key, when the tool span provides one.
    pub idempotency_key: Option<String>,
    /// The n-th call with this id in the run (from 0); ids may repeat within a run too.
    pub occurrence: u32,
    /// Span of the tool execution (hex), when it arrived.
    pub span_id: Option<String>,
    /// Framework retry details (Pydantic AI `pydantic_ai.tool.retry.*`), when the tool asked for a retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Value>,
    /// Whole milliseconds from the tool span's start to its end, once it ended (none for a
    /// call no tool span settled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// What the call waits (or waited) for, when the run ended waiting on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interaction: Option<crate::domain::InteractionKind>,
    /// The later run whose input answered the waiting call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by_run_id: Option<String>,
}

/// How a ledger entry ended, as a continuation reads it: the call, the tool, its status and
/// whether it failed or asked for a retry. Read from a stored [`ToolEffect`] without building
/// its arguments, result and times.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct EffectOutcome {
    /// The call id.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// Where it stands.
    pub status: EffectStatus,
    /// Error text of a failed call.
    #[serde(default)]
    pub error: Option<String>,
    /// Framework retry details, when the tool asked for a retry.
    #[serde(default)]
    pub retry: Option<Value>,
}

impl From<&ToolEffect> for EffectOutcome {
    fn from(e: &ToolEffect) -> Self {
        Self {
            tool_call_id: e.tool_call_id.clone(),
            tool_name: e.tool_name.clone(),
            status: e.status,
            error: e.error.clone(),
            retry: e.retry.clone(),
        }
    }
}
