//! The read-back invariant: every record stepline writes reads back with its type.
//!
//! [`Store::check_readable`] reads every record of every column family (and the keys of
//! `default`) and decodes it the way its readers do; what does not decode is listed. Tests use
//! it after ingesting anything (property tests, end-to-end runs, crash recovery).

use serde::de::DeserializeOwned;

use super::core::Store;
use super::deletion::Deletion;
use super::error::StoreError;
use super::keys::Cf;
use super::{history, media_refs, outbox};
use crate::domain::{Run, ToolEffect, MESSAGE_HASH_BYTES, NODE_ID_BYTES};
use crate::records::{event, model_request, snapshot};
use crate::records::{LogEvent, RunMeta, RunState, StoredFact};

/// A stored record that does not read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// Its column family (`default` for the store's own keys).
    pub cf: Cf,
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

fn stored<T, E: std::fmt::Display>(result: Result<T, E>) -> Result<(), String> {
    result.map(drop).map_err(|e| e.to_string())
}

/// Decodes one record of column family `cf` the way its readers do.
fn check(cf: Cf, key: &[u8], value: &[u8]) -> Result<(), String> {
    match cf {
        Cf::Meta => check_meta(key, value),
        Cf::Runs => json::<Run>(value),
        Cf::Events => stored(event::decode(value)),
        Cf::Effects => json::<ToolEffect>(value),
        Cf::Facts => json::<StoredFact>(value),
        Cf::RunMeta => json::<RunMeta>(value),
        Cf::SpanLogs => json::<LogEvent>(value),
        Cf::Messages => {
            sized(key, 8 + MESSAGE_HASH_BYTES)?;
            json::<serde_json::Value>(value)
        }
        // `run_id` → the working state; `run_id \0 call id` → a be32 count.
        Cf::RunState if key.contains(&0) => sized(value, 4),
        Cf::RunState => json::<RunState>(value),
        Cf::Snapshots => stored(snapshot::decode(value)),
        Cf::ModelRequests => stored(model_request::decode(value)),
        Cf::History => {
            sized(key, 8 + NODE_ID_BYTES)?;
            stored(history::decode_node(value))
        }
        Cf::Outbox => stored(outbox::decode_entry(key, value)),
        Cf::OutboxCursors => sized(value, 16),
        Cf::RunKeys => sized(value, 8),
        Cf::Aliases | Cf::SpanRuns | Cf::GroupSpans | Cf::Damaged => text(value),
        Cf::Lineage => super::lineage_index::check_record(key, value),
        Cf::RunIndex | Cf::PendingParents | Cf::MediaGc => empty(value),
        Cf::MediaRefs => {
            sized(key, media_refs::DIGEST_BYTES + 8 + MESSAGE_HASH_BYTES)?;
            empty(value)
        }
        // `p \0 run_id` → a deletion in progress; `d \0 run_id` → when it finished (be64).
        Cf::Deletions if key.starts_with(b"d\0") => sized(value, 8),
        Cf::Deletions => json::<Deletion>(value),
    }
}

/// The store's own keys in [`Cf::Meta`] (`default`).
fn check_meta(key: &[u8], value: &[u8]) -> Result<(), String> {
    match key {
        b"schema_version" => std::str::from_utf8(value)
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
            .map(drop)
            .ok_or_else(|| "not a number".to_string()),
        b"next_run_key" => sized(value, 8),
        b"media_refs_indexed" | b"fact_runs_have_meta" => empty(value),
        super::recent_requests::RECENT_REQUESTS_KEY => super::recent_requests::check_record(value),
        _ => Err("unknown key".to_string()),
    }
}

impl Store {
    /// Reads every stored record back with its type; gives those that do not decode (empty
    /// when the store is sound). A full scan, for tests and checks.
    pub fn check_readable(&self) -> Result<Vec<Unreadable>, StoreError> {
        let mut bad = Vec::new();
        for cf in Cf::EVERY {
            self.scan(cf, b"", b"", |k, v| {
                if let Err(reason) = check(cf, k, v) {
                    bad.push(Unreadable {
                        cf,
                        key: k.to_vec(),
                        reason,
                    });
                }
                Ok(true)
            })?;
        }
        Ok(bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::keys::cf;

    #[test]
    fn a_garbage_record_is_reported_and_a_sound_store_is_not() {
        let store = Store::in_memory();
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
