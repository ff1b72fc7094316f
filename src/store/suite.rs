//! One test suite run against both key-value stores (RocksDB and the in-memory twin), as
//! object_store's shared integration suite is: each function takes a backend, and the tests at
//! the end call every one of them with each.

use serde_json::{json, Value};

use super::activity::WrittenRun;
use super::column::Cf;
use super::core::Store;
use super::error::StoreError;
use super::keys::{self, cf};
use super::kv::{KvBatch, KvStore};
use crate::domain::{MessageHash, Run, RunStatus};
use crate::records::json::MAX_RECORD_DEPTH;

fn put(kv: &dyn KvStore, cf: Cf, pairs: &[(&[u8], &[u8])]) {
    let mut batch = KvBatch::default();
    for (k, v) in pairs {
        batch.put(cf, k, v.to_vec());
    }
    kv.write(batch, false).unwrap();
}

fn scan_all(kv: &dyn KvStore, cf: Cf, prefix: &[u8], from: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    kv.scan(cf, prefix, from, &mut |k, _| {
        out.push(k.to_vec());
        Ok(true)
    })
    .unwrap();
    out
}

fn scan_back_all(kv: &dyn KvStore, cf: Cf, prefix: &[u8], from: Option<&[u8]>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    kv.scan_back(cf, prefix, from, &mut |k, _| {
        out.push(k.to_vec());
        Ok(true)
    })
    .unwrap();
    out
}

/// Gets, absent keys, and column families kept apart.
pub fn get_and_unknown_keys(kv: &dyn KvStore) {
    put(kv, Cf::Runs, &[(b"a", b"1"), (b"", b"empty key")]);
    assert_eq!(kv.get(Cf::Runs, b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(kv.get(Cf::Runs, b"").unwrap(), Some(b"empty key".to_vec()));
    assert_eq!(kv.get(Cf::Runs, b"b").unwrap(), None);
    assert_eq!(
        kv.get(Cf::Events, b"a").unwrap(),
        None,
        "another column family"
    );
    assert!(kv.contains(Cf::Runs, b"a").unwrap());
    assert!(!kv.contains(Cf::Runs, b"a\0").unwrap());
    // A later put of the same key wins, within a batch too.
    let mut batch = KvBatch::default();
    batch.put(Cf::Runs, b"a", b"2".to_vec());
    batch.put(Cf::Runs, b"a", b"3".to_vec());
    kv.write(batch, true).unwrap();
    assert_eq!(kv.get(Cf::Runs, b"a").unwrap(), Some(b"3".to_vec()));
}

/// Many keys at once, in the order asked, absent ones as none.
pub fn multi_get_in_order(kv: &dyn KvStore) {
    put(kv, Cf::Messages, &[(b"k1", b"v1"), (b"k3", b"v3")]);
    let keys = vec![
        b"k3".to_vec(),
        b"k2".to_vec(),
        b"k1".to_vec(),
        b"k3".to_vec(),
    ];
    assert_eq!(
        kv.multi_get(Cf::Messages, &keys).unwrap(),
        [
            Some(b"v3".to_vec()),
            None,
            Some(b"v1".to_vec()),
            Some(b"v3".to_vec())
        ]
    );
    assert!(kv.multi_get(Cf::Messages, &[]).unwrap().is_empty());
}

/// Scans go in bytewise key order (not by length, not signed), start at `from`, and end where
/// the prefix ends, including at the last possible key and at 0xff bytes.
pub fn scan_order_and_prefix_ends(kv: &dyn KvStore) {
    let keys: [&[u8]; 9] = [
        b"a",
        b"a\0",
        b"a\0\x01",
        b"a\x7f",
        b"a\x80",
        b"a\xff",
        b"a\xff\xff",
        b"b",
        b"\xff",
    ];
    let pairs: Vec<(&[u8], &[u8])> = keys.iter().rev().map(|k| (*k, &b"v"[..])).collect();
    put(kv, Cf::Facts, &pairs);
    assert_eq!(scan_all(kv, Cf::Facts, b"", b""), keys.map(<[u8]>::to_vec));
    assert_eq!(
        scan_all(kv, Cf::Facts, b"a", b"a"),
        keys[..7].iter().map(|k| k.to_vec()).collect::<Vec<_>>()
    );
    assert_eq!(
        scan_all(kv, Cf::Facts, b"a\xff", b"a\xff"),
        [b"a\xff".to_vec(), b"a\xff\xff".to_vec()]
    );
    // From inside the prefix; from a key that is not stored; from below the prefix (nothing).
    assert_eq!(
        scan_all(kv, Cf::Facts, b"a", b"a\x7f"),
        keys[3..7].iter().map(|k| k.to_vec()).collect::<Vec<_>>()
    );
    assert_eq!(
        scan_all(kv, Cf::Facts, b"a", b"a\x01")[0],
        b"a\x7f".to_vec()
    );
    assert!(scan_all(kv, Cf::Facts, b"b", b"a").is_empty());
    assert!(scan_all(kv, Cf::Facts, b"c", b"c").is_empty());
    // The visitor stops a scan.
    let mut seen = 0;
    kv.scan(Cf::Facts, b"", b"", &mut |_, _| {
        seen += 1;
        Ok(seen < 2)
    })
    .unwrap();
    assert_eq!(seen, 2);
    // A visitor's error ends the scan with it.
    let error = kv
        .scan(Cf::Facts, b"", b"", &mut |_, _| {
            Err(StoreError::Corrupt {
                cf: Cf::Facts,
                reason: "visitor".into(),
            })
        })
        .unwrap_err();
    assert!(error.to_string().contains("visitor"), "{error}");
    // Backwards: from the last key, from a key at or before `from`, within a prefix.
    let mut all_back = keys.map(<[u8]>::to_vec).to_vec();
    all_back.reverse();
    assert_eq!(scan_back_all(kv, Cf::Facts, b"", None), all_back);
    assert_eq!(
        scan_back_all(kv, Cf::Facts, b"a", Some(b"a\x80\x00")),
        [
            b"a\x80".to_vec(),
            b"a\x7f".to_vec(),
            b"a\0\x01".to_vec(),
            b"a\0".to_vec(),
            b"a".to_vec()
        ]
    );
    assert_eq!(
        scan_back_all(kv, Cf::Facts, b"a", Some(b"a\xff\xff\xff"))[0],
        b"a\xff\xff"
    );
    assert!(scan_back_all(kv, Cf::Facts, b"b", Some(b"a\xff")).is_empty());
    assert!(scan_back_all(kv, Cf::Events, b"", None).is_empty());
}

/// Scans longer than one chunk of the in-memory store, with the visitor reading the store.
pub fn long_scans_and_reading_while_scanning(kv: &dyn KvStore) {
    let mut batch = KvBatch::default();
    for n in 0..1000u32 {
        batch.put(Cf::Outbox, &n.to_be_bytes(), n.to_le_bytes().to_vec());
    }
    kv.write(batch, false).unwrap();
    let mut n = 0u32;
    kv.scan(Cf::Outbox, b"", b"", &mut |k, v| {
        assert_eq!(k, n.to_be_bytes());
        assert_eq!(kv.get(Cf::Outbox, k)?.as_deref(), Some(v));
        n += 1;
        Ok(true)
    })
    .unwrap();
    assert_eq!(n, 1000);
    let mut back = Vec::new();
    kv.scan_back(Cf::Outbox, b"", None, &mut |k, _| {
        back.push(u32::from_be_bytes(k.try_into().unwrap()));
        Ok(true)
    })
    .unwrap();
    assert_eq!(back, (0..1000).rev().collect::<Vec<_>>());
    assert_eq!(
        kv.estimated_keys(Cf::Outbox).map(|n| n > 0).ok(),
        Some(true)
    );
}

/// A batch is applied whole, in order: a delete after a put removes it, a put after a range
/// delete stays; a failed batch (none can fail here) is the backend's concern.
pub fn batch_atomicity_and_order(kv: &dyn KvStore) {
    put(
        kv,
        Cf::RunIndex,
        &[(b"x1", b""), (b"x2", b""), (b"x3", b"")],
    );
    let mut batch = KvBatch::default();
    batch.put(Cf::RunIndex, b"y", b"1".to_vec());
    batch.delete(Cf::RunIndex, b"y");
    batch.delete_range(Cf::RunIndex, b"x", b"y");
    batch.put(Cf::RunIndex, b"x2", b"again".to_vec());
    batch.put(Cf::Aliases, b"alias", b"run".to_vec());
    assert_eq!(batch.len(), 5);
    // Not applied before it is written.
    assert_eq!(kv.get(Cf::Aliases, b"alias").unwrap(), None);
    kv.write(batch, true).unwrap();
    assert_eq!(scan_all(kv, Cf::RunIndex, b"", b""), [b"x2".to_vec()]);
    assert_eq!(
        kv.get(Cf::RunIndex, b"x2").unwrap(),
        Some(b"again".to_vec())
    );
    assert_eq!(
        kv.get(Cf::Aliases, b"alias").unwrap(),
        Some(b"run".to_vec())
    );
    assert!(
        kv.write(KvBatch::default(), false).is_ok(),
        "an empty batch"
    );
}

/// Range deletes remove `[from, to)` only; an empty or reversed range removes nothing.
pub fn delete_range_bounds(kv: &dyn KvStore) {
    let keys: Vec<Vec<u8>> = (0..10u64).map(|n| n.to_be_bytes().to_vec()).collect();
    let mut batch = KvBatch::default();
    for k in &keys {
        batch.put(Cf::Outbox, k, k.clone());
    }
    kv.write(batch, false).unwrap();
    let mut batch = KvBatch::default();
    batch.delete_range(Cf::Outbox, &keys[2], &keys[5]);
    batch.delete_range(Cf::Outbox, &keys[8], &keys[8]);
    batch.delete_range(Cf::Outbox, &keys[9], &keys[7]);
    kv.write(batch, false).unwrap();
    let left: Vec<Vec<u8>> = scan_all(kv, Cf::Outbox, b"", b"");
    let expected: Vec<Vec<u8>> = [0, 1, 5, 6, 7, 8, 9]
        .iter()
        .map(|&i| keys[i].clone())
        .collect();
    assert_eq!(left, expected);
    // To past every key.
    let mut batch = KvBatch::default();
    batch.delete_range(Cf::Outbox, &[], &[0xff; 9]);
    kv.write(batch, false).unwrap();
    assert!(scan_all(kv, Cf::Outbox, b"", b"").is_empty());
}

fn run(id: &str, started_ns: u64) -> Run {
    Run {
        run_id: id.to_string(),
        aliases: Vec::new(),
        trace_id: "t".into(),
        agent_name: Some("agent".into()),
        conversation_id: Some("conv".into()),
        parent_run_id: None,
        status: RunStatus::Running,
        started_at: crate::domain::format_timestamp(started_ns),
        ended_at: None,
        error: None,
        model_request_count: 0,
        tool_call_count: 0,
        snapshot_count: 0,
        event_count: 0,
        input_tokens: 0,
        output_tokens: 0,
        continuation_unavailable: None,
        warnings: Vec::new(),
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

/// Domain-level round trips: runs through their indexes, messages, aliases, the schema keys,
/// and the refusal of records that would not read back.
pub fn domain_round_trips(store: &Store) {
    let mut batch = store.batch();
    for (id, start) in [("r-2", 20), ("r-1", 10), ("r-3", 30)] {
        let r = run(id, start);
        batch.put_json(cf::RUNS, id.as_bytes(), &r).unwrap();
        for key in keys::index_keys(&r) {
            batch.put_raw(cf::RUN_INDEX, &key, b"").unwrap();
        }
    }
    batch.put_raw(cf::ALIASES, b"call-1", b"r-1").unwrap();
    let body = json!({"role": "user", "parts": [{"type": "text", "content": "hi"}]});
    let hash = MessageHash::of(&body);
    batch.put_message("r-1", &hash, &body).unwrap();
    store.commit_runs(batch, &[WrittenRun::of("r-1")]).unwrap();
    assert_eq!(store.run("r-1").unwrap().unwrap(), run("r-1", 10));
    assert_eq!(store.resolve_run("call-1").unwrap().as_deref(), Some("r-1"));
    assert_eq!(store.resolve_run("r-2").unwrap().as_deref(), Some("r-2"));
    assert_eq!(store.resolve_run("nobody").unwrap(), None);
    let filter = super::RunFilter {
        conversation_id: Some("conv".into()),
        ..Default::default()
    };
    let (page, next) = store.list_runs(&filter, None, 2).unwrap();
    let ids: Vec<&str> = page.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["r-1", "r-2"], "in start order");
    let (rest, none) = store.list_runs(&filter, next.as_deref(), 2).unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(none, None);
    let mut running = store.running_run_ids().unwrap();
    running.sort();
    assert_eq!(running, ["r-1", "r-2", "r-3"]);
    assert_eq!(store.messages("r-1", &[hash]).unwrap(), [body]);
    assert!(store.has_message("r-1", &hash).unwrap());
    assert!(!store.has_message("r-2", &hash).unwrap());
    assert_eq!(store.check_readable().unwrap(), Vec::new());

    // A record nested too deep to read back is refused, nothing is written.
    let mut deep = Value::from(1);
    for _ in 0..=MAX_RECORD_DEPTH {
        deep = Value::Array(vec![deep]);
    }
    let mut batch = store.batch();
    let error = batch.put_json(cf::RUN_META, b"deep", &deep).unwrap_err();
    assert!(!error.is_retryable(), "{error}");
    assert!(batch.is_empty());
    // A record that reads back as garbage is reported by the read-back check.
    let mut batch = store.batch();
    batch.put_raw(cf::EVENTS, b"r-1\0\0\0\0\0", b"[1,").unwrap();
    store.commit(batch).unwrap();
    let bad = store.check_readable().unwrap();
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(bad[0].cf, Cf::Events);
    assert!(store.committed_bytes() > 0);
}

macro_rules! suite {
    ($($name:ident),*) => {
        /// Runs every key-value test against a fresh backend from `make`.
        pub fn every_kv_test(make: impl Fn() -> Box<dyn KvStore>) {
            $( $name(make().as_ref()); )*
        }
    };
}

suite!(
    get_and_unknown_keys,
    multi_get_in_order,
    scan_order_and_prefix_ends,
    long_scans_and_reading_while_scanning,
    batch_atomicity_and_order,
    delete_range_bounds
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryKv;
    use crate::store::rocks::RocksKv;

    #[test]
    fn the_suite_passes_on_rocksdb() {
        let dirs = std::cell::RefCell::new(Vec::new());
        every_kv_test(|| {
            let dir = tempfile::tempdir().unwrap();
            let kv = RocksKv::open(dir.path()).unwrap();
            dirs.borrow_mut().push(dir);
            Box::new(kv)
        });
        let dir = tempfile::tempdir().unwrap();
        domain_round_trips(&Store::open(dir.path(), false).unwrap());
    }

    #[test]
    fn the_suite_passes_in_memory() {
        every_kv_test(|| Box::new(MemoryKv::new()));
        domain_round_trips(&Store::in_memory());
    }
}
