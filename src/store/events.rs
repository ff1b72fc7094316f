//! A run's step events (binary: see [`crate::records::event`]), keyed by run key and seq.

use super::core::{Store, WriteBatch};
use super::error::StoreError;
use super::keys::{self, cf, Cf};
use crate::domain::StepEvent;
use crate::records::event;

impl WriteBatch<'_> {
    /// Puts a step event of a run at position `seq` (the event's own seq: a derivation numbers
    /// its events by position).
    pub fn put_event(&mut self, run_id: &str, seq: u32, e: &StepEvent) -> Result<(), StoreError> {
        let key = keys::run_key_seq(self.run_key(run_id)?, seq);
        self.batch.put(cf::EVENTS, &key, event::encode(e));
        Ok(())
    }

    /// Deletes the record at position `seq` of a run in a column family keyed by run key and
    /// position (step events, ledger entries).
    pub fn delete_at(&mut self, cf: Cf, run_id: &str, seq: u32) -> Result<(), StoreError> {
        let key = keys::run_key_seq(self.run_key(run_id)?, seq);
        self.delete(cf, &key)
    }
}

impl Store {
    /// A run's step events, chronological.
    pub fn events(&self, run_id: &str) -> Result<Vec<StepEvent>, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(Vec::new());
        };
        let prefix = run.0;
        let mut out = Vec::new();
        self.scan(cf::EVENTS, &prefix, &prefix, |_, v| {
            out.push(event::decode(v).map_err(|e| StoreError::corrupt(cf::EVENTS, e))?);
            Ok(true)
        })?;
        Ok(out)
    }
}
