//! The migration of a store of schema 6 or earlier, whose facts, step events and ledger entries
//! were keyed by run id (`run_id \0 …`): each moves under its run's key ([`RunKey`]), with the
//! rest of its key after it ([`keys::REKEYED_CFS`]).
//!
//! Records move in batches, each one commit that puts the new keys, deletes the old ones and
//! gives runs their keys, so an interrupted migration resumes where it stopped when the store is
//! opened again. A run id is hex and `-`, so every old key sorts at or after `\x01`, and every
//! run key (a number below 2^56) before it: the old keys left are those from `\x01` on.

use super::core::Store;
use super::error::StoreError;
use super::keys::{self, RunKey};

/// Records moved per commit.
const REKEY_BATCH: usize = 4_096;

/// Where the keys of schema 6 and earlier start: after every run key.
const OLD_KEYS_FROM: &[u8] = &[1];

impl Store {
    /// Moves every fact, step event and ledger entry keyed by run id under its run's key. A key
    /// without a run id before a `\0` is left where it is (no reader looks for it); returns how
    /// many records moved.
    pub(super) fn rekey_run_records(&self) -> Result<usize, StoreError> {
        let mut moved = 0;
        for cf in keys::REKEYED_CFS {
            let mut from = OLD_KEYS_FROM.to_vec();
            loop {
                let mut found: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
                self.scan(cf, b"", &from, |k, v| {
                    found.push((k.to_vec(), v.to_vec()));
                    Ok(found.len() < REKEY_BATCH)
                })?;
                let Some((last, _)) = found.last() else {
                    break;
                };
                from = last.clone();
                from.push(0);
                let full = found.len() == REKEY_BATCH;
                let mut batch = self.batch();
                for (key, value) in &found {
                    let Some((run_id, rest)) = keys::split_run_id_key(key) else {
                        continue;
                    };
                    let run: RunKey = batch.run_key(run_id)?;
                    let mut new = Vec::with_capacity(8 + rest.len());
                    new.extend_from_slice(&run.0);
                    new.extend_from_slice(rest);
                    batch.put_raw(cf, &new, value)?;
                    batch.delete(cf, key)?;
                    moved += 1;
                }
                self.write_batch(batch, true)?;
                if !full {
                    break;
                }
            }
        }
        Ok(moved)
    }
}

/// Puts the facts, step events and ledger entries of the closed RocksDB store in `dir` back
/// under their run ids, as schema 6 kept them, and sets its schema version to 6: the store a
/// build of schema 6 left (for tests of the migration).
#[cfg(test)]
pub(crate) fn key_by_run_id(dir: &std::path::Path) {
    use super::keys::cf;
    use rocksdb::IteratorMode;
    let db =
        rocksdb::DB::open_cf(&rocksdb::Options::default(), dir, cf::ALL.iter().copied()).unwrap();
    let mapping = db.cf_handle(cf::RUN_KEYS.name()).unwrap();
    let runs: std::collections::HashMap<Vec<u8>, Vec<u8>> = db
        .iterator_cf(&mapping, IteratorMode::Start)
        .map(|kv| {
            let (run_id, key) = kv.unwrap();
            (key.to_vec(), run_id.to_vec())
        })
        .collect();
    for name in keys::REKEYED_CFS {
        let handle = db.cf_handle(name.name()).unwrap();
        let records: Vec<_> = db
            .iterator_cf(&handle, IteratorMode::Start)
            .map(Result::unwrap)
            .collect();
        for (key, value) in records {
            let mut old = runs[&key[..8]].clone();
            old.push(0);
            old.extend_from_slice(&key[8..]);
            db.delete_cf(&handle, &key).unwrap();
            db.put_cf(&handle, old, value).unwrap();
        }
    }
    db.put(super::open::SCHEMA_KEY, b"6").unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::keys::{cf, Cf};
    use crate::store::kv::KvBatch;

    #[test]
    fn records_past_a_batch_move_under_one_key_per_run_and_a_rerun_moves_nothing() {
        let store = Store::in_memory();
        let count = REKEY_BATCH + 10;
        let mut batch = KvBatch::default();
        for n in 0..count as u32 {
            let run = format!("run-{}", n % 3);
            batch.put(cf::EVENTS, &keys::run_seq(&run, n), vec![n as u8]);
        }
        batch.put(cf::FACTS, &keys::run_child("run-0", "span"), b"{}".to_vec());
        batch.put(cf::FACTS, b"no-separator", b"x".to_vec());
        store.kv().write(batch, true).unwrap();

        assert_eq!(store.rekey_run_records().unwrap(), count + 1);
        let keyed: Vec<RunKey> = (0..3)
            .map(|n| store.run_key(&format!("run-{n}")).unwrap().unwrap())
            .collect();
        for n in 0..count as u32 {
            let run = keyed[n as usize % 3];
            assert_eq!(
                store
                    .kv()
                    .get(cf::EVENTS, &keys::run_key_seq(run, n))
                    .unwrap(),
                Some(vec![n as u8])
            );
            let old = keys::run_seq(&format!("run-{}", n % 3), n);
            assert_eq!(store.kv().get(cf::EVENTS, &old).unwrap(), None);
        }
        assert_eq!(
            store.stored_fact_bytes("run-0", "span"),
            Some(b"{}".to_vec())
        );
        // The key without a run stays; a second pass finds nothing left to move.
        assert!(store.kv().contains(Cf::Facts, b"no-separator").unwrap());
        assert_eq!(store.rekey_run_records().unwrap(), 0);
    }

    impl Store {
        fn stored_fact_bytes(&self, run_id: &str, span_id: &str) -> Option<Vec<u8>> {
            let run = self.run_key(run_id).unwrap()?;
            self.kv()
                .get(cf::FACTS, &keys::fact_key(run, span_id))
                .unwrap()
        }
    }
}
