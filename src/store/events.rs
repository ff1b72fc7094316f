//! A run's step events (binary: see [`crate::records::event`]), keyed by run id and seq.

use super::core::{Store, WriteBatch};
use super::error::StoreError;
use super::keys::{self, cf};
use crate::domain::StepEvent;
use crate::records::event;

impl WriteBatch<'_> {
    /// Puts a step event of a run at position `seq` (the event's own seq: a derivation numbers
    /// its events by position).
    pub fn put_event(&mut self, run_id: &str, seq: u32, e: &StepEvent) -> Result<(), StoreError> {
        let key = keys::run_seq(run_id, seq);
        self.batch.put(cf::EVENTS, &key, event::encode(e));
        Ok(())
    }
}

impl Store {
    /// A run's step events, chronological.
    pub fn events(&self, run_id: &str) -> Result<Vec<StepEvent>, StoreError> {
        let prefix = keys::run_prefix(run_id);
        let mut out = Vec::new();
        self.scan(cf::EVENTS, &prefix, &prefix, |_, v| {
            out.push(event::decode(v).map_err(|e| StoreError::corrupt(cf::EVENTS, e))?);
            Ok(true)
        })?;
        Ok(out)
    }
}
