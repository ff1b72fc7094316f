use super::*;
use crate::exporter::Outbox;
use crate::test_fixtures::{delegate_scenario, request, run_id};

use super::TEST_SERIAL as SERIAL;

fn open(dir: &std::path::Path) -> (Arc<Store>, Arc<Ingest>) {
    let store = Arc::new(Store::open(dir, false).unwrap());
    let ingest = Arc::new(Ingest::new(store.clone(), Arc::new(Outbox::disabled())));
    (store, ingest)
}

#[tokio::test]
async fn a_shrink_flushes_the_memtables_trims_the_ingest_caches_and_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let outer = run_id(1);
    let before_run;
    {
        let (store, ingest) = open(dir.path());
        ingest
            .export_traces(request(delegate_scenario()))
            .await
            .unwrap();
        before_run = store.run(&outer).unwrap().expect("the run is stored");
        let memtables = store.kv().memory().memtables;
        let capacity = store.kv().memory().block_cache_capacity;
        assert!(
            store.run_key_cache_bytes().0 > 0,
            "the run keys written are cached"
        );
        let shrinks = COUNTERS.shrinks.load(Ordering::Relaxed);
        let collections = memory::thread_collections();
        let (s, i) = (store.clone(), ingest.clone());
        let done = tokio::task::spawn_blocking(move || shrink(&s, &i))
            .await
            .unwrap()
            .unwrap();
        assert!(done.flushed_bytes > 0, "{done:?}");
        let after = store.kv().memory().memtables;
        assert!(
            after < memtables,
            "memtables {memtables} before, {after} after"
        );
        // Nothing is left to flush; the ingest caches keep at most their idle share.
        assert_eq!(store.kv().flush_memtables().unwrap(), 0);
        let (chain, chain_budget) = store.chain_cache_bytes();
        assert!(
            chain <= chain_budget / IDLE_SHARE,
            "{chain} of {chain_budget}"
        );
        let memo = ingest.prefix_memo();
        assert!(memo.bytes() <= memo.budget() / IDLE_SHARE);
        assert_eq!(
            store.run_key_cache_bytes().0,
            0,
            "the run keys are forgotten"
        );
        // The block cache keeps its idle share until the next write.
        let idle = store.kv().memory();
        assert_eq!(idle.block_cache_capacity, capacity / IDLE_SHARE as u64);
        assert!(
            idle.block_cache <= idle.block_cache_capacity + idle.block_cache_pinned,
            "{idle:?}"
        );
        // The writer thread, waiting for work, was asked to give its free memory back.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while memory::thread_collections() == collections && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(memory::thread_collections() > collections);
        assert_eq!(COUNTERS.shrinks.load(Ordering::Relaxed), shrinks + 1);
        assert!(COUNTERS.last_shrink_unix_seconds.load(Ordering::Relaxed) > 0);
        assert_eq!(
            COUNTERS.last_flushed_bytes.load(Ordering::Relaxed),
            done.flushed_bytes
        );
        if cfg!(target_os = "linux") {
            assert!(done.resident_before.is_some() && done.resident_after.is_some());
        }
        // Everything reads back, now from the data files.
        assert_eq!(store.run(&outer).unwrap(), Some(before_run.clone()));
    }
    // And after a restart.
    let (store, _ingest) = open(dir.path());
    assert_eq!(store.run(&outer).unwrap(), Some(before_run));
}

#[test]
fn the_prefix_memo_trim_keeps_entries_within_the_share_and_its_budget() {
    use crate::interpreter::prefix_memo::PrefixMemo;
    let memo = PrefixMemo::new(10_000, 1 << 20);
    let history = |n: usize| {
        let messages: Vec<serde_json::Value> = (0..20)
            .map(|m| serde_json::json!({"role": "user", "content": format!("run {n} message {m}")}))
            .collect();
        serde_json::to_string(&messages).unwrap()
    };
    for n in 0..200 {
        let read = memo.read(&format!("run-{n}"), &history(n), |_| true);
        assert!(read.is_some());
    }
    let held = memo.bytes();
    assert!(held > (1 << 20) / 4, "{held}");
    let dropped = memo.trim((1 << 20) / 8);
    assert!(memo.bytes() <= (1 << 20) / 8, "{}", memo.bytes());
    assert_eq!(held - memo.bytes(), dropped);
    assert!(
        (0..200).any(|n| memo.holds(&format!("run-{n}"))),
        "an eighth stays"
    );
    // The budget is the same as before: the memo fills up again.
    assert_eq!(memo.budget(), 1 << 20);
    for n in 200..400 {
        let _ = memo.read(&format!("run-{n}"), &history(n), |_| true);
    }
    assert!(memo.bytes() > (1 << 20) / 4);
}

#[tokio::test]
async fn the_idle_task_waits_while_writes_flow_and_runs_once_when_they_stop() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (store, ingest) = open(dir.path());
    let quiet = Duration::from_millis(300);
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(run(store.clone(), ingest.clone(), quiet, async move {
        let _ = stop_rx.wait_for(|stop| *stop).await;
    }));
    let shrinks = || COUNTERS.shrinks.load(Ordering::Relaxed);
    let start = shrinks();
    let capacity = || store.kv().memory().block_cache_capacity;
    let full = capacity();
    // Writes every 50 ms for 1.5 s: never quiet for 300 ms.
    for _ in 0..30 {
        ingest
            .export_traces(request(delegate_scenario()))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(shrinks(), start, "no shrink while writes flow");
    // Quiet: one shrink, and only one however long it stays quiet.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while shrinks() == start && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(shrinks(), start + 1);
    assert_eq!(capacity(), full / IDLE_SHARE as u64, "divided while idle");
    tokio::time::sleep(quiet * 3).await;
    assert_eq!(shrinks(), start + 1, "once per quiet period");
    assert_eq!(
        capacity(),
        full / IDLE_SHARE as u64,
        "divided while it stays idle"
    );
    // Writes again, then quiet again: another one.
    ingest
        .export_traces(request(delegate_scenario()))
        .await
        .unwrap();
    // The next write gives the block cache its capacity back (before the next quiet period).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while capacity() != full && shrinks() == start + 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(capacity(), full, "restored by the next write");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while shrinks() == start + 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(shrinks(), start + 2);
    let _ = stop_tx.send(true);
    task.await.unwrap();
}
