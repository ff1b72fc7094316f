//! A run: one agent invocation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::rollup::ToolCallCounts;
use super::trigger::Trigger;

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// No end seen yet.
    Running,
    /// The agent-run span ended without error.
    Completed,
    /// The agent-run span ended with an error.
    Failed,
    /// Declared dead by the orchestrator, or silent longer than the inactivity timeout.
    Abandoned,
    /// The agent-run span ended with tool calls waiting for a human's approval or an external
    /// result (see [`crate::domain::Interaction`]); a later run answering them makes it
    /// `completed`.
    Waiting,
}

impl RunStatus {
    /// The wire name (`running`, `completed`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Abandoned => "abandoned",
            Self::Waiting => "waiting",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "running" => Some(Self::Running),
            "completed" => Some(Self::Completed),
            "failed" => Some(Self::Failed),
            "abandoned" => Some(Self::Abandoned),
            "waiting" => Some(Self::Waiting),
            _ => None,
        }
    }

    /// True once the run is over: its own telemetry has ended (no further work will be recorded
    /// for it). A `waiting` run is over in this sense (its agent-run span ended; the inactivity
    /// timeout never applies to it), though a later run may still resolve it.
    pub fn is_over(self) -> bool {
        !matches!(self, Self::Running)
    }
}

/// The run record served by the API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Run {
    /// Stable id: `<trace id>-<agent-run span id>`, the same whether or not the run span arrived.
    pub run_id: String,
    /// Framework run ids that resolve to this run (e.g. `gen_ai.agent.call.id`).
    pub aliases: Vec<String>,
    /// Trace the run belongs to (hex).
    pub trace_id: String,
    /// `gen_ai.agent.name`.
    pub agent_name: Option<String>,
    /// `gen_ai.conversation.id` (or the producer's session id).
    pub conversation_id: Option<String>,
    /// The run whose tool call started this (delegate) run.
    pub parent_run_id: Option<String>,
    /// Where the run stands.
    pub status: RunStatus,
    /// RFC 3339 start (the run span's, or the earliest child's when the run span has not arrived).
    pub started_at: String,
    /// RFC 3339 end, once over.
    pub ended_at: Option<String>,
    /// Error text of a failed or abandoned run.
    pub error: Option<String>,
    /// Model requests seen.
    pub model_request_count: u32,
    /// Tool calls in the ledger.
    pub tool_call_count: u32,
    /// Stored snapshots.
    pub snapshot_count: u32,
    /// Step events.
    pub event_count: u32,
    /// Sum of `gen_ai.usage.input_tokens` over the run's model requests.
    pub input_tokens: u64,
    /// Sum of `gen_ai.usage.output_tokens` over the run's model requests.
    pub output_tokens: u64,
    /// Why no continuation can be built, when content is missing or damaged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation_unavailable: Option<String>,
    /// What the interpretation could only guess (tool spans joined to calls by order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Start in nanoseconds since the epoch, for ordered indexes.
    pub started_ns: u64,
    /// Who started the run, from the configured trigger attributes (resource, span or baggage
    /// attributes; `processors.stepline.trigger`); null when none was seen.
    #[serde(default)]
    pub trigger: Option<Trigger>,
    /// The configured run attributes (`processors.stepline.run_attributes`) the run's spans
    /// or their resource carry; filter with `GET /v1/runs?attr.<key>=<value>`.
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
    /// Sum of the ledger entries' `duration_ms` (tool spans' end − start, whole milliseconds).
    #[serde(default)]
    pub tool_time_ms: u64,
    /// Sum of the model requests' durations (span end − start, whole milliseconds each).
    #[serde(default)]
    pub model_time_ms: u64,
    /// The ledger entries by how they ended (adds up to `tool_call_count`).
    #[serde(default)]
    pub tool_calls_by_status: ToolCallCounts,
    /// The stored snapshot of another run this run's first model request starts from (found by
    /// content when the run is read; never stored in the run record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_from: Option<ContinuedFrom>,
    /// The later run (same conversation) whose input answered every call this run waited on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_by_run_id: Option<String>,
}

/// Whether a run continues a snapshot or forks from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LineageKind {
    /// The source's latest snapshot, continued by no run that started earlier.
    Continuation,
    /// An earlier snapshot of the source, or one another run continued first.
    Fork,
}

/// The snapshot of another run a run starts from: its first model request begins with that
/// snapshot's exact history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ContinuedFrom {
    /// The source run.
    pub run_id: String,
    /// The source's snapshot (the last one with that history).
    pub snapshot_seq: u32,
    /// Continuation or fork.
    pub kind: LineageKind,
}

/// Where runs are looked for when a new run may continue one
/// (`processors.stepline.lineage_scope`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LineageScope {
    /// Runs of the same conversation; runs without a conversation id: of the same service.
    #[default]
    Conversation,
    /// Runs of the same service (`service.name`), whatever their conversation.
    Service,
    /// No lineage is looked for.
    Off,
}

impl LineageScope {
    /// Parses the configuration value (`conversation`, `service`, `off`).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "conversation" => Some(Self::Conversation),
            "service" => Some(Self::Service),
            "off" => Some(Self::Off),
            _ => None,
        }
    }
}
