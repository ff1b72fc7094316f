//! Deleting a run leaves no key of it behind, in memory and on RocksDB, across a reopen in the
//! middle, and touches nothing of the other runs.

use std::collections::BTreeMap;

use serde_json::json;

use crate::domain::MessageHash;
use crate::ingest::{apply_group, Work};
use crate::interpreter::interpret_span;
use crate::store::{media_refs, Cf, DeletionPhase, KvBatch, RunKey, Store};
use crate::test_fixtures::{delegate_scenario, run_id};

type Dump = BTreeMap<(Cf, Vec<u8>), Vec<u8>>;

fn dump(store: &Store) -> Dump {
    let mut out = Dump::new();
    for cf in Cf::EVERY {
        for (k, v) in store.entries(cf) {
            out.insert((cf, k), v);
        }
    }
    out
}

/// The delegate scenario (runs 1 and 4) and the same in another trace, plus a message of run 4
/// naming blob `a` and one of the other trace's run naming blob `b` and `a`.
fn fill(store: &Store) -> (String, [u8; 32]) {
    let mine = delegate_scenario();
    let mut other = delegate_scenario();
    for span in &mut other {
        span.trace_id = vec![9; 16];
    }
    let spans = mine
        .iter()
        .chain(&other)
        .filter_map(interpret_span)
        .collect();
    let work = Work::Received {
        spans,
        logs: Vec::new(),
        outbox: None,
    };
    apply_group(store, &[work], 1).unwrap();
    let a = "ab".repeat(32);
    let b = "cd".repeat(32);
    let with = |refs: &[&str]| {
        json!({"role": "user", "parts": refs.iter().map(|r| json!({
            "type": "blob", "content": format!("media+sha256://{r}"), "size": 3
        })).collect::<Vec<_>>()})
    };
    let other_run = format!("{}-{}", hex::encode([9u8; 16]), hex::encode([4u8; 8]));
    let mut batch = store.batch();
    let only_mine = with(&[&a]);
    batch
        .put_message(&run_id(4), &MessageHash::of(&only_mine), &only_mine)
        .unwrap();
    let shared = with(&[&b]);
    batch
        .put_message(&run_id(4), &MessageHash::of(&shared), &shared)
        .unwrap();
    batch
        .put_message(&other_run, &MessageHash::of(&shared), &shared)
        .unwrap();
    store.commit(batch).unwrap();
    let mut digest = [0u8; 32];
    hex::decode_to_slice(&a, &mut digest).unwrap();
    (other_run, digest)
}

fn begin(store: &Store, run: &str) {
    let mut batch = store.batch();
    assert!(batch.begin_deletion(run, "test", 10).unwrap());
    store.commit(batch).unwrap();
}

/// Runs steps of `budget` keys until the deletion finishes (or `max` steps); the step count.
fn steps(store: &Store, run: &str, budget: usize, max: usize) -> usize {
    for n in 1..=max {
        let mut d = store.pending_deletion(run).unwrap().expect("pending");
        let mut batch = store.batch();
        let outcome = batch.deletion_step(&mut d, budget, 20).unwrap();
        store.commit(batch).unwrap();
        if let Some(done) = outcome.finished {
            store.forget_deleted(std::slice::from_ref(&done));
            store.compact_deleted(&[done]).unwrap();
            return n;
        }
    }
    max
}

/// True when the entry names `run` (by id, or by its run key where keys hold one).
fn mentions(cf: Cf, key: &[u8], value: &[u8], run: &str, run_key: Option<RunKey>) -> bool {
    let id = run.as_bytes();
    let has = |bytes: &[u8]| bytes.windows(id.len()).any(|w| w == id);
    let keyed = run_key.is_some_and(|k| match cf {
        Cf::Facts
        | Cf::Events
        | Cf::Effects
        | Cf::Messages
        | Cf::History
        | Cf::Snapshots
        | Cf::ModelRequests => key.starts_with(&k.0),
        Cf::MediaRefs => key.get(32..40) == Some(&k.0[..]),
        _ => false,
    });
    keyed || has(key) || (cf != Cf::Outbox && has(value))
}

fn assert_gone(store: &Store, before: &Dump, run: &str, run_key: Option<RunKey>) {
    let after = dump(store);
    for ((cf, key), value) in &after {
        if *cf == Cf::Deletions && key.starts_with(b"d\0") {
            continue; // the tombstone
        }
        assert!(
            !mentions(*cf, key, value, run, run_key),
            "{cf} keeps {:?} → {:?}",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(value)
        );
    }
    // Everything else is as it was.
    for ((cf, key), value) in before {
        if mentions(*cf, key, value, run, run_key) {
            continue;
        }
        assert_eq!(
            after.get(&(*cf, key.clone())),
            Some(value),
            "{cf} lost {:?}",
            String::from_utf8_lossy(key)
        );
    }
    assert!(store.check_readable().unwrap().is_empty());
}

fn deletes_every_key(store: &Store) {
    let (other_run, only_mine) = fill(store);
    let run = run_id(4);
    let run_key = store.run_key(&run).unwrap();
    assert!(run_key.is_some());
    let before = dump(store);
    assert!(before.keys().any(|(cf, _)| *cf == Cf::MediaRefs));
    begin(store, &run);
    // Hidden at once.
    assert_eq!(store.resolve_run(&run).unwrap(), None);
    assert!(store.blocks_ingest(&run, 11, 1).unwrap());
    let n = steps(store, &run, 1, 10_000);
    assert!(n > 4, "one key per step takes several steps, took {n}");
    assert_gone(store, &before, &run, run_key);
    assert!(store.pending_deletions(10).unwrap().is_empty());
    assert_eq!(store.deleted_at(&run).unwrap(), Some(20));
    assert!(store.blocks_ingest(&run, 25, 10).unwrap());
    assert!(!store.blocks_ingest(&run, 35, 10).unwrap());
    // The blob only this run named is a candidate and named by no one; the shared one is
    // still named by the other run.
    let candidates = store.media_candidates(10).unwrap();
    assert!(candidates.contains(&only_mine), "{candidates:?}");
    assert_eq!(candidates.len(), 2);
    for digest in candidates {
        let check = store.media_referenced(&digest, 10).unwrap();
        assert_eq!(check.referenced, digest != only_mine);
        assert!(check.stale.is_empty());
    }
    // The other runs are whole.
    assert!(store.run(&other_run).unwrap().is_some());
    assert!(store.run(&run_id(1)).unwrap().is_some());
    assert_eq!(store.resolve_run("outer-call").unwrap(), Some(run_id(1)));
}

#[test]
fn deleting_a_run_leaves_no_key_of_it_in_memory() {
    deletes_every_key(&Store::in_memory());
}

#[test]
fn deleting_a_run_leaves_no_key_of_it_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    deletes_every_key(&Store::open(dir.path(), false).unwrap());
}

#[test]
fn a_deletion_interrupted_by_a_reopen_resumes_and_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let (run, run_key, before) = {
        let store = Store::open(dir.path(), true).unwrap();
        fill(&store);
        let run = run_id(4);
        let run_key = store.run_key(&run).unwrap();
        let before = dump(&store);
        begin(&store, &run);
        assert_eq!(steps(&store, &run, 1, 2), 2, "not finished in two steps");
        (run, run_key, before)
    };
    let store = Store::open(dir.path(), true).unwrap();
    assert_eq!(store.resolve_run(&run).unwrap(), None, "still hidden");
    let pending = store.pending_deletions(10).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].phase, DeletionPhase::Facts);
    assert!(!pending[0].cursor.is_empty(), "progress was kept");
    steps(&store, &run, 1, 10_000);
    assert_gone(&store, &before, &run, run_key);
}

#[test]
fn an_older_store_gets_its_media_index_once_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let refs = {
        let store = Store::open(dir.path(), true).unwrap();
        fill(&store);
        let refs = store.logical_bytes(Cf::MediaRefs).unwrap();
        // As written before the index existed.
        let mut batch = KvBatch::default();
        batch.delete_range(Cf::MediaRefs, &[], &[0xff; 41]);
        batch.delete(Cf::Meta, media_refs::INDEXED_KEY);
        store.write_raw(batch).unwrap();
        assert_eq!(store.logical_bytes(Cf::MediaRefs).unwrap(), 0);
        refs
    };
    let store = Store::open(dir.path(), true).unwrap();
    assert!(refs > 0);
    assert_eq!(store.logical_bytes(Cf::MediaRefs).unwrap(), refs);
}
