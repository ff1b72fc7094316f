//! Opening a store: on RocksDB in a directory ([`Store::open`]) or in memory
//! ([`Store::in_memory`]), with the schema check, and the migration of a database of schema 3
//! to 6.

use std::path::Path;
use std::sync::atomic::Ordering;

use super::column::Cf;
use super::core::Store;
use super::error::StoreError;
use super::kv::{KvBatch, KvStore};
use super::memory::MemoryKv;
use super::rocks::RocksKv;
use crate::records::{MIGRATED_SCHEMA, MODEL_REQUESTS_SCHEMA, RUN_KEYED_SCHEMA, SCHEMA_VERSION};

/// Where the schema version is kept ([`Cf::Meta`], decimal text).
pub(super) const SCHEMA_KEY: &[u8] = b"schema_version";

impl Store {
    /// Opens (creating if needed) the database in `dir`. `sync` makes every commit fsync the WAL.
    pub fn open(dir: &Path, sync: bool) -> Result<Store, StoreError> {
        let kv = RocksKv::open(dir)?;
        Self::over(Box::new(kv), sync, &dir.display().to_string())
    }

    /// A new, empty store in memory (nothing survives it; commits are not fsynced).
    pub fn in_memory() -> Store {
        let kv = MemoryKv::new();
        kv.insert(
            Cf::Meta,
            SCHEMA_KEY,
            SCHEMA_VERSION.to_string().into_bytes(),
        );
        kv.insert(Cf::Meta, super::media_refs::INDEXED_KEY, Vec::new());
        kv.insert(Cf::Meta, super::facts::FACT_RUNS_HAVE_META, Vec::new());
        let store = Store::assemble(Box::new(kv), false);
        store.fact_runs_have_meta.store(true, Ordering::Release);
        store
    }

    /// A store over `kv`: checks (or writes) the schema version, reads the next free run key,
    /// and migrates an older schema. `place` names the storage in errors.
    pub fn over(kv: Box<dyn KvStore>, sync: bool, place: &str) -> Result<Store, StoreError> {
        let store = Store::assemble(kv, sync);
        store.note_stored_span_logs()?;
        store.note_stored_pending_children()?;
        store.note_stored_lineage_wanted()?;
        let migrate = check_schema(store.kv.as_ref(), place)?;
        store
            .next_run_key
            .store(store.stored_next_run_key()?, Ordering::SeqCst);
        // Stores written before every run with a fact had a meta get the missing metas once
        // (reading the facts' keys of schema 6 and earlier, so before they are moved).
        store.give_fact_runs_meta()?;
        if let Some(found) = migrate {
            // Each step ends by raising the version past it, so an interrupted migration
            // resumes at the step it stopped in.
            let version = |v: u32| v.to_string().into_bytes();
            if found < MODEL_REQUESTS_SCHEMA {
                let before_rekey = version(RUN_KEYED_SCHEMA - 1);
                store.migrate_model_requests((SCHEMA_KEY, &before_rekey))?;
            }
            if found < RUN_KEYED_SCHEMA {
                let started = std::time::Instant::now();
                let moved = store.rekey_run_records()?;
                tracing::info!(
                    storage = place,
                    from_schema = found,
                    records = moved,
                    seconds = started.elapsed().as_secs_f64(),
                    "facts, step events and ledger entries moved under run keys"
                );
            }
            let mut batch = KvBatch::default();
            batch.put(Cf::Meta, SCHEMA_KEY, version(SCHEMA_VERSION));
            store.kv.write(batch, true)?;
        }
        // Stores written before the media index existed are indexed once.
        store.index_media_refs()?;
        Ok(store)
    }
}

/// Checks the schema version in `kv` (writing it in a new store); the version found when the
/// store is to be migrated.
fn check_schema(kv: &dyn KvStore, place: &str) -> Result<Option<u32>, StoreError> {
    match kv.get(Cf::Meta, SCHEMA_KEY)? {
        Some(bytes) => {
            let found = std::str::from_utf8(&bytes)
                .ok()
                .and_then(|s| s.parse::<u32>().ok())
                .ok_or_else(|| StoreError::Corrupt {
                    cf: Cf::Meta,
                    reason: "schema version is not a number".into(),
                })?;
            if found < MIGRATED_SCHEMA {
                return Err(StoreError::OlderSchema {
                    path: place.to_string(),
                    found,
                    supported: SCHEMA_VERSION,
                });
            }
            if found > SCHEMA_VERSION {
                return Err(StoreError::NewerSchema {
                    path: place.to_string(),
                    found,
                    supported: SCHEMA_VERSION,
                });
            }
            Ok((found < SCHEMA_VERSION).then_some(found))
        }
        None => {
            let mut batch = KvBatch::default();
            batch.put(
                Cf::Meta,
                SCHEMA_KEY,
                SCHEMA_VERSION.to_string().into_bytes(),
            );
            kv.write(batch, true)?;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sets the schema version of the database in `dir`.
    fn set_schema(dir: &Path, version: &str) {
        let kv = RocksKv::open(dir).unwrap();
        let mut batch = KvBatch::default();
        batch.put(Cf::Meta, SCHEMA_KEY, version.as_bytes().to_vec());
        kv.write(batch, true).unwrap();
    }

    #[test]
    fn a_schema_5_store_keeps_its_json_events_and_writes_binary_ones() {
        use crate::domain::{format_timestamp, EventKind, StepEvent};
        use crate::store::keys::{self, cf};
        let dir = tempfile::tempdir().unwrap();
        let event = |seq: u32| StepEvent {
            seq,
            kind: EventKind::ToolCallRequested,
            timestamp: format_timestamp(1_795_860_000_123_456_789),
            span_id: Some("0202020202020202".into()),
            tool_call_id: Some("c1".into()),
            tool_name: Some("lookup".into()),
            error: None,
            time_ns: 1_795_860_000_123_456_789,
        };
        {
            // A store of schema 5: its events are JSON.
            let kv = RocksKv::open(dir.path()).unwrap();
            let mut batch = KvBatch::default();
            batch.put(Cf::Meta, SCHEMA_KEY, b"5".to_vec());
            batch.put(
                cf::EVENTS,
                &keys::run_seq("r-1", 0),
                serde_json::to_vec(&event(0)).unwrap(),
            );
            kv.write(batch, true).unwrap();
        }
        let store = Store::open(dir.path(), true).unwrap();
        assert_eq!(
            store.kv().get(Cf::Meta, SCHEMA_KEY).unwrap(),
            Some(SCHEMA_VERSION.to_string().into_bytes())
        );
        let mut batch = store.batch();
        batch.put_event("r-1", 1, &event(1)).unwrap();
        store.commit(batch).unwrap();
        // The JSON event moved under the run's key, the new one is put there too.
        let run = store.run_key("r-1").unwrap().unwrap();
        assert_eq!(
            store
                .kv()
                .get(cf::EVENTS, &keys::run_seq("r-1", 0))
                .unwrap(),
            None
        );
        let stored = store
            .kv()
            .get(cf::EVENTS, &keys::run_key_seq(run, 1))
            .unwrap();
        assert_ne!(stored.and_then(|v| v.first().copied()), Some(b'{'));
        // The JSON event reads as it was (its nanoseconds were never stored), the new one whole.
        let old = StepEvent {
            time_ns: 0,
            ..event(0)
        };
        assert_eq!(store.events("r-1").unwrap(), vec![old, event(1)]);
        assert_eq!(store.check_readable().unwrap(), vec![]);
    }

    #[test]
    fn a_newer_schema_is_refused_with_a_clear_message() {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::open(dir.path(), true).unwrap());
        set_schema(dir.path(), "99");
        let err = Store::open(dir.path(), true).err().unwrap();
        let text = err.to_string();
        assert!(text.contains("schema version 99"), "{text}");
        assert!(text.contains("upgrade stepline"), "{text}");
        // A layout older than 3 is refused too (not migrated: history storage changed in 2 and
        // 3; 3 is migrated, see `continuation::context`).
        for version in ["1", "2"] {
            let old = tempfile::tempdir().unwrap();
            drop(Store::open(old.path(), true).unwrap());
            set_schema(old.path(), version);
            let text = Store::open(old.path(), true).err().unwrap().to_string();
            assert!(
                text.contains(&format!("schema version {version}")),
                "{text}"
            );
            assert!(text.contains("older"), "{text}");
        }
        // The current version reopens fine; an in-memory store has it too.
        let dir2 = tempfile::tempdir().unwrap();
        drop(Store::open(dir2.path(), true).unwrap());
        Store::open(dir2.path(), true).unwrap();
        assert_eq!(
            Store::in_memory().kv().get(Cf::Meta, SCHEMA_KEY).unwrap(),
            Some(SCHEMA_VERSION.to_string().into_bytes())
        );
    }
}
