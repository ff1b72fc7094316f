//! The fold's accumulator: what a derivation knows of a run after some of its facts, and the
//! conversion to and from the stored [`RunState`].

use std::collections::BTreeMap;

use crate::interpreter::fact::SpanFact;
use crate::interpreter::tool_return::ToolReturnForm;
use crate::records::run_state::{
    EffectBuild, Indexed, Instructions, LastFull, RunState, SnapshotMark, SortKey,
};

/// Where a fact sorts among the run's facts of its kind.
pub(super) fn key(f: &SpanFact) -> SortKey {
    SortKey {
        start_ns: f.start_ns,
        span_id: f.span_id.clone(),
    }
}

/// The state of a fold over a run's facts.
#[derive(Debug, Clone, Default)]
pub(super) struct Acc {
    /// Sort key of the last model request folded.
    pub last_model: Option<SortKey>,
    /// Sort key of the last tool call folded.
    pub last_tool: Option<SortKey>,
    /// Time of the latest event.
    pub last_event_ns: u64,
    /// Model requests folded.
    pub models: u32,
    /// Ledger entries so far.
    pub ledger_len: u32,
    /// The ledger entries that can still change, by index: every entry, in a fold from
    /// nothing; the unbound ones and the last request's, in a fold resumed from a stored state.
    pub known: BTreeMap<u32, EffectBuild>,
    /// Entries no tool span is bound to yet, in ledger order.
    pub unbound: Vec<u32>,
    /// Entries the last model request asked for, in ledger order.
    pub last_step: Vec<u32>,
    /// The ledger has entries no model request asked for.
    pub standalone: bool,
    /// The last model request's full history.
    pub last_full: Option<LastFull>,
    /// Snapshot records later model requests cannot change, and the last of them.
    pub fixed: SnapshotMark,
    /// Some snapshot is complete.
    pub has_complete: bool,
    /// The system instructions snapshots name.
    pub instructions: Instructions,
    /// The tool-return form the model requests so far last showed.
    pub form: Option<ToolReturnForm>,
}

impl Acc {
    /// The accumulator of a fold resumed from a stored state.
    pub fn resume(state: &RunState) -> Self {
        let mut known = BTreeMap::new();
        for i in state.unbound.iter().chain(&state.last_step) {
            known.insert(i.index, i.entry.clone());
        }
        Self {
            last_model: state.last_model.clone(),
            last_tool: state.last_tool.clone(),
            last_event_ns: state.last_event_ns,
            models: state.models,
            ledger_len: state.ledger_len,
            known,
            unbound: state.unbound.iter().map(|i| i.index).collect(),
            last_step: state.last_step.iter().map(|i| i.index).collect(),
            standalone: state.standalone,
            last_full: state.last_full.clone(),
            fixed: state.fixed.clone(),
            has_complete: state.has_complete,
            instructions: state.instructions,
            form: state.tool_return_form,
        }
    }

    /// The state to store for the next fold step (`None` when an entry it names is missing,
    /// which a fold never leaves).
    pub fn to_state(&self) -> Option<RunState> {
        let pick = |indexes: &[u32]| -> Option<Vec<Indexed>> {
            indexes
                .iter()
                .map(|i| {
                    self.known.get(i).map(|e| Indexed {
                        index: *i,
                        entry: e.clone(),
                    })
                })
                .collect()
        };
        Some(RunState {
            last_model: self.last_model.clone(),
            last_tool: self.last_tool.clone(),
            last_event_ns: self.last_event_ns,
            models: self.models,
            ledger_len: self.ledger_len,
            unbound: pick(&self.unbound)?,
            last_step: pick(&self.last_step)?,
            standalone: self.standalone,
            last_full: self.last_full.clone(),
            fixed: self.fixed.clone(),
            has_complete: self.has_complete,
            instructions: self.instructions,
            tool_return_form: self.form,
            keeps_rollups: true,
        })
    }
}
