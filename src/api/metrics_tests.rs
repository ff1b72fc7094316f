use super::*;
use crate::media::Media;
use crate::test_fixtures::{delegate_scenario, request};

/// The value of the sample line `series` (name and labels) in `text`.
fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The services a scrape reads, over a RocksDB store in `dir` (`sync` as given), nothing
/// forwarded.
fn services(dir: &std::path::Path, sync: bool) -> (Arc<Store>, Arc<Ingest>, Arc<Continuations>) {
    let store = Arc::new(Store::open(dir, sync).unwrap());
    let ingest = Arc::new(Ingest::new(
        store.clone(),
        Arc::new(crate::exporter::Outbox::disabled()),
    ));
    let continuations = Arc::new(Continuations::new(
        store.clone(),
        Arc::new(Media::in_memory(Some(64 * 1024))),
    ));
    (store, ingest, continuations)
}

#[tokio::test]
async fn the_exposition_reads_the_counters_at_scrape_time_with_the_same_names() {
    let dir = tempfile::tempdir().unwrap();
    let (store, ingest, continuations) = services(dir.path(), false);
    let scrape = |gauges| Scrape::new(ingest.clone(), continuations.clone(), gauges).render();
    let before = scrape(None);
    assert_eq!(
        sample(&before, "otelcol_receiver_accepted_spans_total"),
        Some(0)
    );
    assert!(before.ends_with("# EOF\n"), "{before}");
    assert!(
        !before.contains("stepline_runs "),
        "no store gauges unless read"
    );

    ingest
        .export_traces(request(delegate_scenario()))
        .await
        .unwrap();
    let text = scrape(StoreGauges::read(&store));
    let accepted = sample(&text, "otelcol_receiver_accepted_spans_total").unwrap();
    assert_eq!(
        accepted,
        ingest.counters().accepted_spans.load(Ordering::Relaxed)
    );
    assert!(accepted > 0, "read when scraped, not when built: {text}");
    for (name, kind, help) in [
        (
            "otelcol_receiver_accepted_spans",
            "counter",
            "Spans acknowledged after a durable commit.",
        ),
        (
            "stepline_runs",
            "gauge",
            "Runs stored, any status (RocksDB estimate).",
        ),
        (
            "stepline_alias_conflicts",
            "counter",
            "Alias claims refused because another run owns the alias.",
        ),
        (
            "stepline_media_stored",
            "counter",
            "Blobs written to the media store.",
        ),
        (
            "stepline_cache_bytes",
            "gauge",
            "Estimated bytes held by an in-memory cache.",
        ),
    ] {
        assert!(
            text.contains(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n")),
            "{name}: {text}"
        );
    }
    assert!(sample(&text, "stepline_runs_running").is_some(), "{text}");
    // RocksDB's memory: the ingest wrote to the memtables, within their budget.
    let memtables = sample(&text, "stepline_rocksdb_memtable_bytes").unwrap();
    let budget = sample(&text, "stepline_rocksdb_memtable_budget_bytes").unwrap();
    assert!(memtables > 0 && memtables <= budget, "{text}");
    let kv = store.kv().memory();
    assert_eq!(budget, kv.memtable_budget, "{text}");
    let capacity = sample(&text, "stepline_rocksdb_block_cache_capacity_bytes").unwrap();
    assert!(
        capacity > 0 && capacity == kv.block_cache_capacity,
        "{text}"
    );
    // Writes that waited at the memtable budget: the store's count, and their time.
    assert_eq!(
        sample(&text, "stepline_rocksdb_memtable_budget_waits_total"),
        Some(kv.budget_waits),
        "{text}"
    );
    assert!(
        text.contains("\nstepline_rocksdb_memtable_budget_wait_seconds_total "),
        "{text}"
    );
    // Flushes asked for ahead of the budget: the store's count.
    assert_eq!(
        sample(&text, "stepline_rocksdb_memtable_flushes_ahead_total"),
        Some(kv.flushes_ahead),
        "{text}"
    );
    // The receivers' byte budget: its size, and what is held (tests alongside may hold some).
    assert_eq!(
        sample(&text, "stepline_receiver_bytes_in_process_budget"),
        Some(16 << 20),
        "{text}"
    );
    assert!(
        sample(&text, "stepline_receiver_bytes_in_process").is_some_and(|held| held <= 16 << 20),
        "{text}"
    );
    for name in [
        "stepline_rocksdb_block_cache_bytes",
        "stepline_rocksdb_block_cache_pinned_bytes",
        "stepline_rocksdb_table_readers_bytes",
    ] {
        assert!(
            sample(&text, name).is_some_and(|v| v <= capacity),
            "{name}: {text}"
        );
    }
    if cfg!(target_os = "linux") {
        let resident = sample(&text, "process_resident_memory_bytes").unwrap();
        let peak = sample(&text, "stepline_process_peak_resident_memory_bytes").unwrap();
        assert!(resident > 1 << 20 && peak >= resident, "{text}");
        // Its anonymous and file-backed parts (measured a moment apart from the total).
        let anon = sample(&text, "stepline_process_resident_anon_bytes").unwrap();
        let file = sample(&text, "stepline_process_resident_file_bytes").unwrap();
        assert!(anon > 0 && file > 0, "{text}");
        assert!(anon + file <= resident + (8 << 20), "{text}");
        let huge = sample(&text, "stepline_process_resident_huge_page_bytes").unwrap();
        assert!(huge <= anon + (8 << 20), "{text}");
    }
    assert!(sample(&text, "stepline_history_cache_messages").is_some());
    assert_eq!(sample(&text, "stepline_media_stored_total"), Some(0));
    assert_eq!(sample(&text, "stepline_rendered_cache_bytes"), Some(0));
    // The allocators: Rust's heap is in use, and glibc's (RocksDB's) holds what it uses.
    let committed = sample(&text, "stepline_mimalloc_committed_bytes").unwrap();
    assert!(committed > 0, "{text}");
    let held = sample(&text, "stepline_malloc_held_bytes").unwrap();
    let in_use = sample(&text, "stepline_malloc_in_use_bytes").unwrap();
    assert!(held >= in_use, "{text}");
    if cfg!(all(target_os = "linux", target_env = "gnu")) {
        assert!(in_use > 0, "RocksDB allocates with malloc: {text}");
    }
    assert!(
        sample(&text, "stepline_idle_shrinks_total").is_some(),
        "{text}"
    );
    for name in [
        "stepline_idle_last_shrink_timestamp_seconds",
        "stepline_idle_last_released_bytes",
        "stepline_idle_last_flushed_bytes",
        "stepline_idle_thread_collections_total",
    ] {
        assert!(sample(&text, name).is_some(), "{name}: {text}");
    }
    let gauges = text
        .lines()
        .filter(|l| l.starts_with("stepline_cache_bytes{"))
        .count();
    assert_eq!(gauges, CACHE_LABELS.len(), "{text}");
    for cache in CACHE_LABELS {
        let budget = sample(
            &text,
            &format!("stepline_cache_budget_bytes{{cache=\"{cache}\"}}"),
        );
        assert!(budget.is_some_and(|b| b > 0), "{cache}: {text}");
        assert!(sample(&text, &format!("stepline_cache_bytes{{cache=\"{cache}\"}}")).is_some());
    }
}

#[tokio::test]
async fn each_trace_request_is_timed_whole_and_stage_by_stage() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, ingest, continuations) = services(dir.path(), true);
    let requests = 3;
    for _ in 0..requests {
        ingest
            .export_traces(request(delegate_scenario()))
            .await
            .unwrap();
    }
    let text = Scrape::new(ingest.clone(), continuations, None).render();
    let whole = "stepline_ingest_request_duration_seconds";
    assert!(
        text.contains(&format!(
            "# TYPE {whole} histogram\n# UNIT {whole} seconds\n"
        )),
        "{text}"
    );
    let traces = "{signal=\"traces\"";
    assert_eq!(
        sample(&text, &format!("{whole}_count{traces}}}")),
        Some(requests),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            &format!("{whole}_bucket{{le=\"+Inf\",signal=\"traces\"}}")
        ),
        Some(requests),
        "{text}"
    );
    // Every stage saw each request once (the requests went through the blocking pool).
    let stage = "stepline_ingest_stage_duration_seconds";
    for label in [
        "pool_wait",
        "interpret",
        "writer_queue",
        "writer_apply",
        "rocksdb_write",
    ] {
        assert_eq!(
            sample(&text, &format!("{stage}_count{{stage=\"{label}\"}}")),
            Some(requests),
            "{label}: {text}"
        );
    }
    // The buckets are cumulative: each at least the one below it, the last the count.
    let buckets: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{stage}_bucket{{le=")))
        .filter(|l| l.contains("stage=\"rocksdb_write\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(buckets.len(), 15, "{text}");
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{text}");
    assert_eq!(buckets.last(), Some(&requests), "{text}");
    // A durable write takes time, and the whole request takes longer than its write.
    let seconds = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series}: {text}"))
    };
    let written = seconds(&format!("{stage}_sum{{stage=\"rocksdb_write\"}}"));
    let total = seconds(&format!("{whole}_sum{traces}}}"));
    assert!(
        written > 0.0 && total > written,
        "{written} {total}: {text}"
    );
}
