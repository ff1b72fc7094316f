//! Damaged runs: a run whose stored records could not be read when the writer needed them.
//!
//! The writer marks such a run (`damaged` column family: run id → the reason, plain UTF-8, so
//! the mark itself always reads back) and answers the request that met the damage with a
//! permanent error. Readers still get the run: [`Store::run`] adds a warning
//! `damaged: <reason>` (starting with [`DAMAGED_WARNING`]) to its `warnings`, and a run whose
//! own record cannot be decoded is given as a placeholder carrying the same warning, so it
//! stays listable and one damaged run never hides the others. The inactivity sweep passes
//! marked runs by.

use super::core::Store;
use super::error::StoreError;
use super::keys::cf;
use super::kv::KvBatch;
use crate::domain::{format_timestamp, Run, RunStatus};

/// How the warning that marks a damaged run starts (followed by the reason).
pub const DAMAGED_WARNING: &str = "damaged: ";

/// Most bytes of a damage reason kept.
const MAX_REASON_BYTES: usize = 1024;

/// The warning listed on a damaged run.
pub(super) fn warning(reason: &str) -> String {
    format!("{DAMAGED_WARNING}{reason}")
}

/// `reason`, cut to [`MAX_REASON_BYTES`] at a character boundary.
fn bounded(reason: &str) -> &str {
    if reason.len() <= MAX_REASON_BYTES {
        return reason;
    }
    let end = (0..=MAX_REASON_BYTES)
        .rev()
        .find(|i| reason.is_char_boundary(*i))
        .unwrap_or(0);
    &reason[..end]
}

/// What is shown for a run whose record cannot be decoded: its id, trace and start (from the
/// index), status `running` (unknown), and the damage as a warning and as the reason no
/// continuation is available.
pub(super) fn placeholder(run_id: &str, started_ns: u64, reason: &str) -> Run {
    let reason = bounded(reason);
    Run {
        run_id: run_id.to_string(),
        aliases: Vec::new(),
        trace_id: run_id
            .split_once('-')
            .map_or(run_id, |(trace, _)| trace)
            .to_string(),
        agent_name: None,
        conversation_id: None,
        parent_run_id: None,
        status: RunStatus::Running,
        started_at: format_timestamp(started_ns),
        ended_at: None,
        error: None,
        model_request_count: 0,
        tool_call_count: 0,
        snapshot_count: 0,
        event_count: 0,
        input_tokens: 0,
        output_tokens: 0,
        continuation_unavailable: Some(format!("the run's record cannot be read: {reason}")),
        warnings: vec![warning(reason)],
        started_ns,
        trigger: None,
        attributes: Default::default(),
        tool_time_ms: 0,
        model_time_ms: 0,
        tool_calls_by_status: Default::default(),
        continued_from: None,
        resumed_by_run_id: None,
    }
}

impl Store {
    /// Why the run was marked damaged, if it was.
    pub fn damage(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .kv
            .get(cf::DAMAGED, run_id.as_bytes())?
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// Marks the run damaged, durably (the reason is cut to 1 KiB). Called by the writer.
    pub fn mark_damaged(&self, run_id: &str, reason: &str) -> Result<(), StoreError> {
        let mut batch = KvBatch::default();
        batch.put(
            cf::DAMAGED,
            run_id.as_bytes(),
            bounded(reason).as_bytes().to_vec(),
        );
        self.kv.write(batch, self.sync)?;
        Ok(())
    }

    /// Every run marked damaged, with the reason.
    pub fn damaged_runs(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut out = Vec::new();
        self.scan(cf::DAMAGED, b"", b"", |k, v| {
            out.push((
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ));
            Ok(true)
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_run_stays_readable_with_its_reason() {
        let store = Store::in_memory();
        // A run whose record is garbage: listed as a placeholder naming the damage.
        let mut batch = store.batch();
        batch.put_raw(cf::RUNS, b"aa-bb", b"{not json").unwrap();
        store.commit(batch).unwrap();
        let run = store.run("aa-bb").unwrap().unwrap();
        assert_eq!(run.trace_id, "aa");
        assert!(run.warnings[0].starts_with(DAMAGED_WARNING), "{run:?}");
        assert!(
            store.run_record("aa-bb").is_err(),
            "the writer's read is strict"
        );
        // Marked, with a long reason cut to a bound.
        let long = "é".repeat(2000);
        store.mark_damaged("aa-bb", &long).unwrap();
        let reason = store.damage("aa-bb").unwrap().unwrap();
        assert!(reason.len() <= MAX_REASON_BYTES && reason.starts_with('é'));
        assert_eq!(store.damaged_runs().unwrap().len(), 1);
        assert_eq!(store.damage("other").unwrap(), None);
    }
}
