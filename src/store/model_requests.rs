//! The store side of a run's model-request records (the records and their codec are in
//! [`crate::records::model_request`]): written in step with the facts, read in start order,
//! and written from the facts of a schema-3 store when it is opened.

use super::changes::{ChangeMark, Changed};
use super::core::{decode as decode_json, lock_cache, Store, WriteBatch};
use super::error::StoreError;
use super::keys::{self, cf, model_request_key, Cf};
use crate::records::model_request;
use crate::records::{FactKind, StoredFact};

pub use crate::records::model_request::{encode, ModelRequestRecord};

/// Stored facts decoded per migration batch (see [`Store::migrate_model_requests`]).
const MIGRATION_BATCH: usize = 10_000;

/// Decodes a model-request record.
pub fn decode(bytes: &[u8]) -> Result<ModelRequestRecord, StoreError> {
    model_request::decode(bytes).map_err(|e| StoreError::corrupt(cf::MODEL_REQUESTS, e))
}

/// The run id of a `facts` key of schema 6 and earlier (`run_id \0 span_id`).
fn fact_run_id(key: &[u8]) -> Result<&str, StoreError> {
    keys::split_run_id_key(key)
        .map(|(run_id, _)| run_id)
        .ok_or(StoreError::Corrupt {
            cf: cf::FACTS,
            reason: "fact key without a run id".into(),
        })
}

impl WriteBatch<'_> {
    /// Keeps a run's model-request record in step with one of its facts being written:
    /// `previous_start` is the start of the fact of the same span the run had (stored or written
    /// earlier in this batch) when that one was a model request, `stored` the fact written now.
    /// Drops the previous record when its key changes (another start, or no longer a model
    /// request), and puts the current one.
    pub fn note_fact(
        &mut self,
        run_id: &str,
        previous_start: Option<u64>,
        stored: &StoredFact,
    ) -> Result<(), StoreError> {
        let current = ModelRequestRecord::of(stored);
        let stale =
            previous_start.filter(|start| current.as_ref().is_none_or(|c| c.start_ns != *start));
        if current.is_none() && stale.is_none() {
            return Ok(());
        }
        let run = self.run_key(run_id)?;
        if let Some(start) = stale {
            let key = model_request_key(run, start, &stored.fact.span_id);
            self.delete(cf::MODEL_REQUESTS, &key)?;
        }
        if let Some(c) = current {
            let key = model_request_key(run, c.start_ns, &c.span_id);
            self.put_raw(cf::MODEL_REQUESTS, &key, &encode(&c))?;
        }
        Ok(())
    }
}

impl Store {
    /// A run's model-request records, in start order (ties by span id).
    pub fn model_requests(&self, run_id: &str) -> Result<Vec<ModelRequestRecord>, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        self.scan(cf::MODEL_REQUESTS, &run.0, &run.0, |_, value| {
            out.push(decode(value)?);
            Ok(true)
        })?;
        Ok(out)
    }

    /// The stored bytes of a run's model-request records, in start order (ties by span id),
    /// given to `visit` one at a time until it returns false (decode them with [`decode`]): a
    /// reader that read the records before can tell which are unchanged without decoding them.
    pub fn model_request_bytes(
        &self,
        run_id: &str,
        visit: impl FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.model_request_bytes_from(run_id, None, visit)
    }

    /// [`Store::model_request_bytes`] of the records from `from` on (the start and span id of
    /// the first one given, as [`Store::model_request_changes`] gives them), all when `None`.
    pub fn model_request_bytes_from(
        &self,
        run_id: &str,
        from: Option<(u64, &str)>,
        mut visit: impl FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(());
        };
        let start = match from {
            Some((start, span_id)) => model_request_key(run, start, span_id),
            None => run.0.to_vec(),
        };
        self.scan(cf::MODEL_REQUESTS, &run.0, &start, |_, value| visit(value))
    }

    /// What commits after `mark` changed of the run's model-request records: from which record
    /// on (its start and span id, the order they are read in) records were put or deleted.
    pub fn model_request_changes(
        &self,
        run_id: &str,
        mark: ChangeMark,
    ) -> Result<Changed<(u64, String)>, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            // No run key: nothing stored under one, and none to tell changes by.
            return Ok(Changed::Unknown);
        };
        Ok(
            match lock_cache(&self.changes).since(cf::MODEL_REQUESTS, &run.0, mark) {
                Changed::From(key) => {
                    let start = key.get(8..16).and_then(|b| <[u8; 8]>::try_from(b).ok());
                    let span = key.get(16..).and_then(|b| std::str::from_utf8(b).ok());
                    match (start, span) {
                        (Some(start), Some(span)) => {
                            Changed::From((u64::from_be_bytes(start), span.to_string()))
                        }
                        _ => Changed::Unknown,
                    }
                }
                Changed::Nothing => Changed::Nothing,
                Changed::Unknown => Changed::Unknown,
            },
        )
    }

    /// Writes the model-request record of every stored model-request fact (a schema-3 store
    /// has facts but no records), in durable batches; `finish` is put in the last one (the
    /// schema version, so a store is marked migrated only once every record is written).
    /// Rerunning after an interruption writes the same records again.
    pub(super) fn migrate_model_requests(&self, finish: (&[u8], &[u8])) -> Result<(), StoreError> {
        let mut batch = self.batch();
        let mut in_batch = 0usize;
        self.scan(cf::FACTS, b"", b"", |key, value| {
            let stored: StoredFact = decode_json(cf::FACTS, value)?;
            if stored.fact.kind != FactKind::ModelRequest {
                return Ok(true);
            }
            batch.note_fact(fact_run_id(key)?, None, &stored)?;
            in_batch += 1;
            if in_batch == MIGRATION_BATCH {
                let full = std::mem::replace(&mut batch, self.batch());
                self.write_batch(full, true)?;
                in_batch = 0;
            }
            Ok(true)
        })?;
        batch.put_raw(Cf::Meta, finish.0, finish.1)?;
        self.write_batch(batch, true)
    }
}
