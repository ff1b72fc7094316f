//! `/metrics`: the OpenMetrics text exposition (`prometheus-client`), with the collector's
//! familiar names. The counters stay where they are kept (atomics of the ingest, the exporters,
//! the media store and the caches); [`Scrape`], a collector, reads them when it is encoded.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    text, DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::config::SignalKind;
use crate::continuation::Continuations;
use crate::exporter::{item_name, ExporterCounters, ExporterQueue, Outbox, SignalCounters};
pub use crate::idle::memory::{AllocatorMemory, ProcessMemory};
use crate::idle::COUNTERS as IDLE;
use crate::ingest::{HistogramReading, Ingest, IngestCounters, Latencies, Stage};
use crate::interpreter::prefix_memo;
use crate::media::MediaCounters;
use crate::store::keys::cf;
use crate::store::kv::KvMemory;
use crate::store::Store;

/// The content type `/metrics` is served with.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the store holds, read for each scrape: cheap estimates from RocksDB, plus the exact
/// number of running runs (an index prefix; running runs are few).
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreGauges {
    /// Runs of any status (estimate).
    pub runs: u64,
    /// Runs with status `running`.
    pub running_runs: u64,
    /// Step events (estimate).
    pub events: u64,
    /// Snapshots (estimate).
    pub snapshots: u64,
    /// Tool effects (estimate).
    pub effects: u64,
    /// Outbox entries not yet deleted (estimate).
    pub outbox_entries: u64,
    /// Decoded messages the history cache holds for continuations.
    pub history_cache_messages: u64,
    /// Alias claims refused because another run owns the alias (since the start).
    pub alias_conflicts: u64,
    /// What the key-value store (RocksDB) holds in memory.
    pub kv_memory: KvMemory,
    /// The process's memory, when the platform says.
    pub process: Option<ProcessMemory>,
    /// What the allocators hold.
    pub allocators: AllocatorMemory,
}

impl StoreGauges {
    /// Reads the gauges; `None` when the store cannot answer (the scrape still renders the
    /// counters).
    pub fn read(store: &Store) -> Option<Self> {
        Some(Self {
            runs: store.estimated_keys(cf::RUNS).ok()?,
            running_runs: store.running_run_ids().ok()?.len() as u64,
            events: store.estimated_keys(cf::EVENTS).ok()?,
            snapshots: store.estimated_keys(cf::SNAPSHOTS).ok()?,
            effects: store.estimated_keys(cf::EFFECTS).ok()?,
            outbox_entries: store.estimated_keys(cf::OUTBOX).ok()?,
            history_cache_messages: store.history_cache_messages() as u64,
            alias_conflicts: store.alias_conflicts(),
            kv_memory: store.kv().memory(),
            process: ProcessMemory::read(),
            allocators: AllocatorMemory::read(),
        })
    }
}

/// One scrape of `/metrics`: what it reads the counters from, and the store gauges read for it
/// (on the blocking pool, before encoding).
pub struct Scrape {
    ingest: Arc<Ingest>,
    continuations: Arc<Continuations>,
    store: Option<StoreGauges>,
}

impl fmt::Debug for Scrape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrape")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Scrape {
    /// A scrape of the ingest's and the continuations' counters, with the store gauges when
    /// they could be read (the scrape still renders the counters without them).
    pub fn new(
        ingest: Arc<Ingest>,
        continuations: Arc<Continuations>,
        store: Option<StoreGauges>,
    ) -> Self {
        Self {
            ingest,
            continuations,
            store,
        }
    }

    /// The exposition, in the OpenMetrics text format (served as [`CONTENT_TYPE`]).
    pub fn render(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        // Writing to a String does not fail, and the collector's own encoding does not either.
        let _ = text::encode(&mut out, &registry);
        out
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let continuations = &self.continuations;
        encode_ingest(&mut encoder, self.ingest.counters())?;
        encode_latencies(&mut encoder, &self.ingest.counters().latencies)?;
        if let Some(g) = self.store {
            encode_store(&mut encoder, g)?;
        }
        encode_exporters(&mut encoder, self.ingest.outbox())?;
        encode_media(&mut encoder, continuations.media().counters())?;
        gauge(
            &mut encoder,
            "stepline_rendered_cache_bytes",
            "Bytes of rendered continuation answers held in memory (answered, or rendered ahead once a run went quiet).",
            continuations.rendered().held() as u64,
        )?;
        encode_caches(&mut encoder, &cache_gauges(continuations))
    }
}

/// Encodes one unlabelled counter (exposed as `{name}_total`).
fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), fmt::Error> {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// Encodes one unlabelled gauge.
fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), fmt::Error> {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// Encodes a family of `kind` with one series per `(label value, value)`, labelled `label`.
fn family(
    encoder: &mut DescriptorEncoder,
    (name, help, kind): (&str, &str, MetricType),
    label: &str,
    series: impl IntoIterator<Item = (String, u64)>,
) -> Result<(), fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (value_of_label, value) in series {
        let labels = [(label, value_of_label.as_str())];
        let labelled = metric.encode_family(&labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(value).encode(labelled)?,
            _ => ConstGauge::new(value).encode(labelled)?,
        }
    }
    Ok(())
}

/// The receiver's counters.
fn encode_ingest(encoder: &mut DescriptorEncoder, c: &IngestCounters) -> Result<(), fmt::Error> {
    let rows: [(&str, &str, u64); 13] = [
        (
            "otelcol_receiver_accepted_spans",
            "Spans acknowledged after a durable commit.",
            c.accepted_spans.load(Ordering::Relaxed),
        ),
        (
            "otelcol_receiver_refused_spans",
            "Spans rejected as invalid (partial success) or refused with a retryable error.",
            c.refused_spans.load(Ordering::Relaxed),
        ),
        (
            "otelcol_receiver_accepted_log_records",
            "Log records acknowledged.",
            c.accepted_log_records.load(Ordering::Relaxed),
        ),
        (
            "otelcol_receiver_refused_log_records",
            "Log records refused with a retryable error (queue full, overload).",
            c.refused_log_records.load(Ordering::Relaxed),
        ),
        (
            "otelcol_receiver_accepted_metric_points",
            "Metric data points acknowledged.",
            c.accepted_metric_points.load(Ordering::Relaxed),
        ),
        (
            "otelcol_receiver_refused_metric_points",
            "Metric data points refused with a retryable error (queue full, overload).",
            c.refused_metric_points.load(Ordering::Relaxed),
        ),
        (
            "stepline_interpreted_spans",
            "Spans recognised as agent runs, model requests or tool calls.",
            c.interpreted_spans.load(Ordering::Relaxed),
        ),
        (
            "stepline_items_over_limits",
            "Spans and log records accepted and forwarded but not interpreted: over a per-span cap.",
            c.over_limits.load(Ordering::Relaxed),
        ),
        (
            "stepline_ingest_panics",
            "Panics caught while interpreting or applying a request (answered with a permanent error).",
            c.panics.load(Ordering::Relaxed),
        ),
        (
            "stepline_ingest_rejected_requests",
            "Requests refused permanently because what they hold cannot be stored.",
            c.rejected_requests.load(Ordering::Relaxed),
        ),
        (
            "stepline_sweep_damaged_runs",
            "Runs the inactivity sweep passed by because their records cannot be read.",
            c.sweep_damaged_runs.load(Ordering::Relaxed),
        ),
        (
            "stepline_writer_groups",
            "Write groups the writer committed (one WAL write, and sync when configured, each).",
            c.writer_groups.load(Ordering::Relaxed),
        ),
        (
            "stepline_writer_grouped_requests",
            "Requests in the write groups committed (divided by the groups: the mean group size).",
            c.writer_grouped_requests.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, value) in rows {
        counter(encoder, name, help, value)?;
    }
    Ok(())
}

/// The ingest's latency histograms, in seconds.
fn encode_latencies(encoder: &mut DescriptorEncoder, l: &Latencies) -> Result<(), fmt::Error> {
    let histogram = |mut metric: MetricEncoder<'_>, r: HistogramReading| {
        metric.encode_histogram::<NoLabelSet>(r.sum_seconds, r.count, &r.buckets, None)
    };
    let mut requests = encoder.encode_descriptor(
        "stepline_ingest_request_duration",
        "Export requests from the moment the ingest takes one (still encoded) to its answer; traces only for now.",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    histogram(
        requests.encode_family(&[("signal", "traces")])?,
        l.trace_requests.read(),
    )?;
    let mut stages = encoder.encode_descriptor(
        "stepline_ingest_stage_duration",
        "Time received requests spent in each stage: pool_wait and interpret (trace requests), writer_queue, writer_apply and rocksdb_write (every request the writer commits; a group's apply and write count once for each request in it).",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    for stage in Stage::ALL {
        histogram(
            stages.encode_family(&[("stage", stage.label())])?,
            l.stage(stage).read(),
        )?;
    }
    Ok(())
}

/// The store's gauges.
fn encode_store(encoder: &mut DescriptorEncoder, g: StoreGauges) -> Result<(), fmt::Error> {
    let gauges = [
        (
            "stepline_runs",
            "Runs stored, any status (RocksDB estimate).",
            g.runs,
        ),
        (
            "stepline_runs_running",
            "Runs with status running.",
            g.running_runs,
        ),
        (
            "stepline_step_events",
            "Step events stored (RocksDB estimate).",
            g.events,
        ),
        (
            "stepline_snapshots",
            "Snapshots stored (RocksDB estimate).",
            g.snapshots,
        ),
        (
            "stepline_tool_effects",
            "Tool effects stored (RocksDB estimate).",
            g.effects,
        ),
        (
            "stepline_outbox_entries",
            "Outbox entries not yet deleted (RocksDB estimate).",
            g.outbox_entries,
        ),
        (
            "stepline_history_cache_messages",
            "Decoded messages held in memory for continuations (read, or loaded ahead once a run went quiet).",
            g.history_cache_messages,
        ),
];
    for (name, help, value) in gauges {
        gauge(encoder, name, help, value)?;
    }
    counter(
        encoder,
        "stepline_alias_conflicts",
        "Alias claims refused because another run owns the alias.",
        g.alias_conflicts,
    )?;
    encode_memory(encoder, g.kv_memory, g.process)?;
    encode_allocators(encoder, g.allocators)
}

/// RocksDB's memory and the process's.
fn encode_memory(
    encoder: &mut DescriptorEncoder,
    kv: KvMemory,
    process: Option<ProcessMemory>,
) -> Result<(), fmt::Error> {
    let gauges = [
        (
            "stepline_rocksdb_memtable_bytes",
            "Bytes of RocksDB memtables, over every column family (those being flushed included).",
            kv.memtables,
        ),
        (
            "stepline_rocksdb_memtable_budget_bytes",
            "Budget of all RocksDB memtables together (writes wait at it, and flushes are asked for, until they are under it).",
            kv.memtable_budget,
        ),
        (
            "stepline_rocksdb_block_cache_bytes",
            "Bytes in use in RocksDB's block cache (data, index and filter blocks).",
            kv.block_cache,
        ),
        (
            "stepline_rocksdb_block_cache_pinned_bytes",
            "Bytes of RocksDB's block cache pinned by readers (not evictable now).",
            kv.block_cache_pinned,
        ),
        (
            "stepline_rocksdb_block_cache_capacity_bytes",
            "Capacity of RocksDB's block cache.",
            kv.block_cache_capacity,
        ),
        (
            "stepline_rocksdb_table_readers_bytes",
            "Bytes of RocksDB's table readers outside the block cache (estimate).",
            kv.table_readers,
        ),
    ];
    for (name, help, value) in gauges {
        gauge(encoder, name, help, value)?;
    }
    let (held, budget) = crate::receiver::bytes_in_process();
    gauge(
        encoder,
        "stepline_receiver_bytes_in_process",
        "Received bytes of the requests being decoded, interpreted or written now (each holds about 4 times its bytes in memory).",
        held,
    )?;
    gauge(
        encoder,
        "stepline_receiver_bytes_in_process_budget",
        "The most received bytes in process at once; further requests wait for room.",
        budget,
    )?;
    counter(
        encoder,
        "stepline_rocksdb_memtable_budget_waits",
        "Writes that waited for the RocksDB memtables to come under their budget.",
        kv.budget_waits,
    )?;
    counter(
        encoder,
        "stepline_rocksdb_memtable_flushes_ahead",
        "Flushes of the largest RocksDB memtable asked for by writes near the memtable budget.",
        kv.flushes_ahead,
    )?;
    let seconds = ConstCounter::new(kv.budget_wait_micros as f64 / 1e6);
    seconds.encode(encoder.encode_descriptor(
        "stepline_rocksdb_memtable_budget_wait_seconds",
        "Time writes spent waiting for the RocksDB memtables to come under their budget.",
        None,
        seconds.metric_type(),
    )?)?;
    if let Some(process) = process {
        gauge(
            encoder,
            "process_resident_memory_bytes",
            "Resident memory size of the process.",
            process.resident,
        )?;
        gauge(
            encoder,
            "stepline_process_peak_resident_memory_bytes",
            "The largest resident memory size of the process since it started.",
            process.peak_resident,
        )?;
        gauge(
            encoder,
            "stepline_process_resident_anon_bytes",
            "Anonymous part of the resident memory: the allocators' heaps and thread stacks.",
            process.resident_anon,
        )?;
        gauge(
            encoder,
            "stepline_process_resident_file_bytes",
            "File-backed part of the resident memory: touched pages of the binary and libraries.",
            process.resident_file,
        )?;
        gauge(
            encoder,
            "stepline_process_resident_huge_page_bytes",
            "Part of the resident memory in transparent huge pages (0 unless MIMALLOC_ALLOW_THP turns them back on).",
            crate::idle::memory::anon_huge_page_bytes().unwrap_or(0),
        )?;
    }
    Ok(())
}

/// What the allocators hold, and what the idle task gave back.
fn encode_allocators(
    encoder: &mut DescriptorEncoder,
    a: AllocatorMemory,
) -> Result<(), fmt::Error> {
    let gauges = [
        (
            "stepline_mimalloc_committed_bytes",
            "Bytes mimalloc has committed: Rust's heap, with free pages not yet given back.",
            a.mimalloc_committed,
        ),
        (
            "stepline_malloc_held_bytes",
            "Bytes glibc malloc holds from the OS: RocksDB's heap, free chunks included.",
            a.malloc_held,
        ),
        (
            "stepline_malloc_in_use_bytes",
            "Bytes of glibc malloc's heap in use by live allocations (RocksDB's).",
            a.malloc_in_use,
        ),
        (
            "stepline_idle_last_shrink_timestamp_seconds",
            "When the idle task last gave memory back (Unix seconds; 0 before it ever ran).",
            IDLE.last_shrink_unix_seconds.load(Ordering::Relaxed),
        ),
        (
            "stepline_idle_last_released_bytes",
            "Resident bytes the idle task's last run gave back.",
            IDLE.last_released_bytes.load(Ordering::Relaxed),
        ),
        (
            "stepline_idle_last_flushed_bytes",
            "Memtable bytes the idle task's last run flushed.",
            IDLE.last_flushed_bytes.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, value) in gauges {
        gauge(encoder, name, help, value)?;
    }
    counter(
        encoder,
        "stepline_idle_shrinks",
        "Times the idle task ran (memtables flushed, ingest caches trimmed, free memory given back) after ingest went quiet.",
        IDLE.shrinks.load(Ordering::Relaxed),
    )?;
    counter(
        encoder,
        "stepline_idle_thread_collections",
        "Times a thread (a runtime worker, the writer) gave its free mimalloc memory back because the idle task asked.",
        crate::idle::memory::thread_collections(),
    )
}

/// Each exporter's counters and queue gauges, labelled `exporter="<id>"`.
fn encode_exporters(encoder: &mut DescriptorEncoder, outbox: &Outbox) -> Result<(), fmt::Error> {
    let queues = outbox.queues();
    if queues.is_empty() {
        return Ok(());
    }
    type Pick = fn(&ExporterCounters) -> &SignalCounters;
    let families: [(&str, &str, Pick); 6] = [
        (
            "otelcol_exporter_sent",
            "Items the backend accepted.",
            |c| &c.sent,
        ),
        (
            "otelcol_exporter_send_failed",
            "Items dropped after a permanent error or when retries gave up.",
            |c| &c.send_failed,
        ),
        (
            "otelcol_exporter_enqueue_failed",
            "Items refused at the receiver because the exporter's queue was full.",
            |c| &c.enqueue_failed,
        ),
        (
            "stepline_exporter_partially_rejected",
            "Items the backend rejected in a partial_success answer.",
            |c| &c.partially_rejected,
        ),
        (
            "stepline_exporter_possible_duplicates",
            "Items sent again after a restart that may already have reached the backend.",
            |c| &c.possible_duplicates,
        ),
        (
            "stepline_exporter_dropped_oldest",
            "Unsent items dropped to make room at the cap (sending_queue.when_full: drop_oldest).",
            |c| &c.dropped_oldest,
        ),
    ];
    for (prefix, help, pick) in families {
        for signal in SignalKind::ALL {
            let name = format!("{prefix}_{}", item_name(signal));
            let series = queues
                .iter()
                .map(|queue| (queue.id.clone(), pick(&queue.counters).get(signal)));
            family(
                encoder,
                (&name, help, MetricType::Counter),
                "exporter",
                series,
            )?;
        }
    }
    type Gauge = fn(&ExporterQueue) -> u64;
    let gauges: [(&str, &str, Gauge); 2] = [
        (
            "otelcol_exporter_queue_size",
            "Bytes in the outbox not yet sent by the exporter.",
            |q| q.pending_bytes(),
        ),
        (
            "otelcol_exporter_queue_capacity",
            "The exporter's queue cap, in bytes (sending_queue.queue_size_bytes).",
            |q| q.capacity,
        ),
    ];
    for (name, help, value) in gauges {
        let series = queues.iter().map(|queue| (queue.id.clone(), value(queue)));
        family(encoder, (name, help, MetricType::Gauge), "exporter", series)?;
    }
    let series = queues.iter().map(|queue| {
        let value = queue.counters.retries.load(Ordering::Relaxed);
        (queue.id.clone(), value)
    });
    family(
        encoder,
        (
            "stepline_exporter_retries",
            "Export attempts retried.",
            MetricType::Counter,
        ),
        "exporter",
        series,
    )
}

/// One in-memory cache's estimated bytes in use and byte budget, labelled `cache="<name>"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheGauge {
    /// The cache's label: `history`, `rendered`, `context`, `prefix_memo`, `chain` or
    /// `run_keys`.
    pub cache: &'static str,
    /// Estimated bytes held.
    pub bytes: usize,
    /// The byte budget (`processors.stepline.memory`; fixed for `run_keys` and `changes`).
    pub budget: usize,
}

/// The `cache` label of each in-memory cache on `/metrics`, in the order [`cache_gauges`] gives.
pub const CACHE_LABELS: [&str; 7] = [
    "history",
    "rendered",
    "context",
    "prefix_memo",
    "chain",
    "run_keys",
    "changes",
];

/// The gauges of every cache continuations and ingest keep in memory.
pub fn cache_gauges(continuations: &Continuations) -> [CacheGauge; 7] {
    let store = continuations.store();
    let gauge = |cache, (bytes, budget)| CacheGauge {
        cache,
        bytes,
        budget,
    };
    [
        gauge("history", store.history_cache_bytes()),
        gauge(
            "rendered",
            (
                continuations.rendered().held(),
                continuations.rendered().budget(),
            ),
        ),
        gauge(
            "context",
            (
                continuations.contexts().held(),
                continuations.contexts().budget(),
            ),
        ),
        gauge(
            "prefix_memo",
            (prefix_memo::process_bytes(), prefix_memo::default_budget()),
        ),
        gauge("chain", store.chain_cache_bytes()),
        gauge("run_keys", store.run_key_cache_bytes()),
        gauge("changes", store.change_log_bytes()),
    ]
}

/// `stepline_cache_bytes{cache=...}` and `stepline_cache_budget_bytes{cache=...}`.
fn encode_caches(encoder: &mut DescriptorEncoder, gauges: &[CacheGauge]) -> Result<(), fmt::Error> {
    type Pick = fn(&CacheGauge) -> usize;
    let families: [(&str, &str, Pick); 2] = [
        (
            "stepline_cache_bytes",
            "Estimated bytes held by an in-memory cache.",
            |g| g.bytes,
        ),
        (
            "stepline_cache_budget_bytes",
            "Byte budget of an in-memory cache (processors.stepline.memory; run_keys and changes are fixed).",
            |g| g.budget,
        ),
    ];
    for (name, help, pick) in families {
        let series = gauges.iter().map(|g| (g.cache.to_string(), pick(g) as u64));
        family(encoder, (name, help, MetricType::Gauge), "cache", series)?;
    }
    Ok(())
}

/// The media store's counters.
fn encode_media(encoder: &mut DescriptorEncoder, c: &MediaCounters) -> Result<(), fmt::Error> {
    let rows: [(&str, &str, u64); 6] = [
        (
            "stepline_media_stored",
            "Blobs written to the media store.",
            c.stored.load(Ordering::Relaxed),
        ),
        (
            "stepline_media_stored_bytes",
            "Bytes written to the media store.",
            c.stored_bytes.load(Ordering::Relaxed),
        ),
        (
            "stepline_media_reused",
            "Blobs taken out of messages that the media store already held.",
            c.reused.load(Ordering::Relaxed),
        ),
        (
            "stepline_media_restored",
            "Blobs read back from the media store for continuations.",
            c.restored.load(Ordering::Relaxed),
        ),
        (
            "stepline_media_restored_bytes",
            "Bytes read back from the media store for continuations.",
            c.restored_bytes.load(Ordering::Relaxed),
        ),
        (
            "stepline_media_failures",
            "Media store reads and writes that failed (or found a blob missing or damaged).",
            c.failures.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, value) in rows {
        counter(encoder, name, help, value)?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
