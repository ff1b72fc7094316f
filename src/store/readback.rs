//! The read-back invariant: every record stepline writes reads back with its type.
//!
//! [`Store::check_readable`] reads every record of every column family (and the keys of
//! `default`) and decodes it the way its readers do; what does not decode is listed. Tests use
//! it after ingesting anything (property tests, end-to-end runs, crash recovery).

use serde::de::DeserializeOwned;

use super::error::StoreError;
use super::keys::cf;
use super::rocks::Store;
use super::{history, model_requests, outbox, snapshot_codec};
use crate::domain::{Run, StepEvent, ToolEffect, MESSAGE_HASH_BYTES, NODE_ID_BYTES};
use crate::interpreter::{LogEvent, RunMeta, RunState, StoredFact};

/// A stored record that does not read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// Its column family (`default` for the store's own keys).
    pub cf: &'static str,
    /// Its key.
    pub key: Vec<u8>,
    /// Why it does not decode.
    pub reason: String,
}

fn json<T: DeserializeOwned>(value: &[u8]) -> Result<(), String> {
    serde_json::from_slice::<T>(value)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn text(value: &[u8]) -> Result<(), String> {
    std::str::from_utf8(value)
        .map(drop)
        .map_err(|_| "not UTF-8".to_string())
}

fn empty(value: &[u8]) -> Result<(), String> {
    if value.is_empty() {
        Ok(())
    } else {
        Err(format!("{} bytes where none are stored", value.len()))
    }
}

fn sized(value: &[u8], len: usize) -> Result<(), String> {
    if value.len() == len {
        Ok(())
    } else {
        Err(format!("{} bytes, not {len}", value.len()))
    }
}

fn stored(result: Result<impl Sized, StoreError>) -> Result<(), String> {
    result.map(drop).map_err(|e| e.to_string())
}

/// Decodes one record of column family `name` the way its readers do.
fn check(name: &'static str, key: &[u8], value: &[u8]) -> Result<(), String> {
    match name {
        cf::RUNS => json::<Run>(value),
        cf::EVENTS => json::<StepEvent>(value),
        cf::EFFECTS => json::<ToolEffect>(value),
        cf::FACTS => json::<StoredFact>(value),
        cf::RUN_META => json::<RunMeta>(value),
        cf::SPAN_LOGS => json::<LogEvent>(value),
        cf::MESSAGES => {
            sized(key, 8 + MESSAGE_HASH_BYTES)?;
            json::<serde_json::Value>(value)
        }
        // `run_id` → the working state; `run_id \0 call id` → a be32 count.
        cf::RUN_STATE if key.contains(&0) => sized(value, 4),
        cf::RUN_STATE => json::<RunState>(value),
        cf::SNAPSHOTS => stored(snapshot_codec::decode(value)),
        cf::MODEL_REQUESTS => stored(model_requests::decode(value)),
        cf::HISTORY => {
            sized(key, 8 + NODE_ID_BYTES)?;
            stored(history::decode_node(value))
        }
        cf::OUTBOX => stored(outbox::decode_entry(key, value)),
        cf::OUTBOX_CURSORS => sized(value, 16),
        cf::RUN_KEYS => sized(value, 8),
        cf::ALIASES | cf::SPAN_RUNS | cf::GROUP_SPANS | cf::DAMAGED => text(value),
        cf::RUN_INDEX | cf::PENDING_PARENTS => empty(value),
        _ => Err(format!("no reader for column family {name}")),
    }
}

/// The store's own keys in `default`.
fn check_default(key: &[u8], value: &[u8]) -> Result<(), String> {
    match key {
        b"schema_version" => std::str::from_utf8(value)
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
            .map(drop)
            .ok_or_else(|| "not a number".to_string()),
        b"next_run_key" => sized(value, 8),
        _ => Err("unknown key".to_string()),
    }
}

impl Store {
    /// Reads every stored record back with its type; gives those that do not decode (empty
    /// when the store is sound). A full scan, for tests and checks.
    pub fn check_readable(&self) -> Result<Vec<Unreadable>, StoreError> {
        let mut bad = Vec::new();
        for &name in cf::ALL {
            self.scan(name, b"", b"", |k, v| {
                if let Err(reason) = check(name, k, v) {
                    bad.push(Unreadable {
                        cf: name,
                        key: k.to_vec(),
                        reason,
                    });
                }
                Ok(true)
            })?;
        }
        for item in self.db.iterator(rocksdb::IteratorMode::Start) {
            let (k, v) = item?;
            if let Err(reason) = check_default(&k, &v) {
                bad.push(Unreadable {
                    cf: "default",
                    key: k.to_vec(),
                    reason,
                });
            }
        }
        Ok(bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_garbage_record_is_reported_and_a_sound_store_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), false).unwrap();
        assert_eq!(store.check_readable().unwrap(), Vec::new());
        let mut batch = store.batch();
        batch
            .put_json(cf::RUN_META, b"r-1", &RunMeta::default())
            .unwrap();
        batch.put_raw(cf::EVENTS, b"r-1\0\0\0\0\0", b"[1,").unwrap();
        store.commit(batch).unwrap();
        let bad = store.check_readable().unwrap();
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].cf, cf::EVENTS);
    }
}
