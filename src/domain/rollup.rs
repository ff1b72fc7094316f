//! A run's rollups besides its counters: how its tool calls ended ([`ToolCallCounts`]) and the
//! millisecond durations the fold sums (see `interpreter::fold::rollup`).

use serde::{Deserialize, Serialize};

use super::effect::EffectStatus;

/// The run's ledger entries by how they ended; the three add up to `tool_call_count`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolCallCounts {
    /// Entries with status `completed`.
    #[serde(default)]
    pub completed: u32,
    /// Entries with status `failed`.
    #[serde(default)]
    pub failed: u32,
    /// Every other entry: the outcome is not known (`requested`, `started`,
    /// `unknown_after_crash`, ...).
    #[serde(default)]
    pub unresolved: u32,
}

impl ToolCallCounts {
    /// The counter an entry of `status` counts under.
    fn slot(&mut self, status: EffectStatus) -> &mut u32 {
        match status {
            EffectStatus::Completed => &mut self.completed,
            EffectStatus::Failed => &mut self.failed,
            _ => &mut self.unresolved,
        }
    }

    /// Counts one entry of `status`.
    pub fn add(&mut self, status: EffectStatus) {
        let n = self.slot(status);
        *n = n.saturating_add(1);
    }

    /// Uncounts one entry of `status`.
    pub fn remove(&mut self, status: EffectStatus) {
        let n = self.slot(status);
        *n = n.saturating_sub(1);
    }

    /// All entries counted.
    pub fn total(&self) -> u32 {
        self.completed
            .saturating_add(self.failed)
            .saturating_add(self.unresolved)
    }
}

/// Whole milliseconds from `start_ns` to `end_ns` (rounded down; 0 when the end is not after
/// the start).
pub fn duration_ms(start_ns: u64, end_ns: u64) -> u64 {
    end_ns.saturating_sub(start_ns) / 1_000_000
}
