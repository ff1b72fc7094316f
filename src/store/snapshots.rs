//! A run's snapshot records (binary: see [`crate::records::snapshot`]), keyed by its run key
//! and seq.

use super::core::{Store, WriteBatch};
use super::error::StoreError;
use super::keys::{self, cf};
use crate::domain::SnapshotRecord;
use crate::records::snapshot;

fn decode(bytes: &[u8]) -> Result<SnapshotRecord, StoreError> {
    snapshot::decode(bytes).map_err(|e| StoreError::corrupt(cf::SNAPSHOTS, e))
}

impl WriteBatch<'_> {
    /// Puts a snapshot record of a run.
    pub fn put_snapshot(
        &mut self,
        run_id: &str,
        record: &SnapshotRecord,
    ) -> Result<(), StoreError> {
        let run = self.run_key(run_id)?;
        let key = keys::snapshot_key(run, record.meta.seq);
        self.put_raw(cf::SNAPSHOTS, &key, &snapshot::encode(record))
    }

    /// Deletes a snapshot record of a run.
    pub fn delete_snapshot(&mut self, run_id: &str, seq: u32) -> Result<(), StoreError> {
        let run = self.run_key(run_id)?;
        self.delete(cf::SNAPSHOTS, &keys::snapshot_key(run, seq))
    }
}

impl Store {
    /// A run's snapshots, in order.
    pub fn snapshots(&self, run_id: &str) -> Result<Vec<SnapshotRecord>, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        self.scan(cf::SNAPSHOTS, &run.0, &run.0, |_, v| {
            out.push(decode(v)?);
            Ok(true)
        })?;
        Ok(out)
    }

    /// One snapshot record of a run.
    pub fn snapshot(&self, run_id: &str, seq: u32) -> Result<Option<SnapshotRecord>, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(None);
        };
        match self.kv.get(cf::SNAPSHOTS, &keys::snapshot_key(run, seq))? {
            Some(bytes) => decode(&bytes).map(Some),
            None => Ok(None),
        }
    }

    /// The run's last snapshot record that passes `keep`, reading backwards from the last one
    /// (so the latest snapshot of a long run costs one or two reads, not a scan).
    pub fn last_snapshot(
        &self,
        run_id: &str,
        keep: impl Fn(&SnapshotRecord) -> bool,
    ) -> Result<Option<SnapshotRecord>, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(None);
        };
        let start = keys::snapshot_key(run, u32::MAX);
        let mut found = None;
        self.kv
            .scan_back(cf::SNAPSHOTS, &run.0, Some(&start), &mut |_, value| {
                let record = decode(value)?;
                if keep(&record) {
                    found = Some(record);
                    return Ok(false);
                }
                Ok(true)
            })?;
        Ok(found)
    }
}
