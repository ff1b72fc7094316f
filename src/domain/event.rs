//! Step events: the append-only, chronological story of a run.

use serde::{Deserialize, Serialize};

/// What happened.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The run began.
    RunStarted,
    /// A model request began.
    ModelRequestStarted,
    /// A model request returned a response.
    ModelRequestCompleted,
    /// A model request failed.
    ModelRequestFailed,
    /// The model asked for a tool call.
    ToolCallRequested,
    /// A tool began running.
    ToolCallStarted,
    /// A tool returned.
    ToolCallCompleted,
    /// A tool failed (including retry requests to the model).
    ToolCallFailed,
    /// The run ended without error.
    RunCompleted,
    /// The run ended with an error.
    RunFailed,
    /// The run was declared dead.
    RunAbandoned,
}

impl EventKind {
    /// Order among events with the same timestamp.
    pub fn tie_rank(self) -> u8 {
        match self {
            Self::RunStarted => 0,
            Self::ModelRequestStarted => 1,
            Self::ModelRequestCompleted | Self::ModelRequestFailed => 2,
            Self::ToolCallRequested => 3,
            Self::ToolCallStarted => 4,
            Self::ToolCallCompleted | Self::ToolCallFailed => 5,
            Self::RunCompleted | Self::RunFailed | Self::RunAbandoned => 9,
        }
    }
}

/// One step event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StepEvent {
    /// Position in the run's chronology, from 0.
    pub seq: u32,
    /// What happened.
    pub kind: EventKind,
    /// RFC 3339 time.
    pub timestamp: String,
    /// Span the event comes from (hex), when there is one.
    pub span_id: Option<String>,
    /// Tool-call id, for tool events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Tool name, for tool events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// Error text, for failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Nanosecond time, for ordering.
    #[serde(skip)]
    pub time_ns: u64,
}
