//! `/metrics` in the Prometheus text format, with the collector's familiar names.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::config::SignalKind;
use crate::continuation::Continuations;
use crate::exporter::{item_name, ExporterCounters, ExporterQueue, Outbox, SignalCounters};
use crate::ingest::IngestCounters;
use crate::interpreter::prefix_memo;
use crate::media::MediaCounters;
use crate::store::keys::cf;
use crate::store::Store;

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
        })
    }
}

/// Renders the counters: the receiver's, the store's gauges (when read), then each
/// exporter's (label `exporter="<id>"`).
pub fn render(c: &IngestCounters, outbox: &Outbox, store: Option<StoreGauges>) -> String {
    let mut out = String::new();
    let rows: [(&str, &str, u64); 11] = [
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
    ];
    for (name, help, value) in rows {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name}_total {value}"
        );
    }
    if let Some(g) = store {
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
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        }
        let name = "stepline_alias_conflicts";
        let _ = writeln!(
            out,
            "# HELP {name} Alias claims refused because another run owns the alias.\n# TYPE {name} counter\n{name}_total {}",
            g.alias_conflicts
        );
    }
    render_exporters(&mut out, outbox);
    out
}

fn render_exporters(out: &mut String, outbox: &Outbox) {
    let queues = outbox.queues();
    if queues.is_empty() {
        return;
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
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for queue in queues {
                let value = pick(&queue.counters).get(signal);
                let _ = writeln!(out, "{name}_total{{exporter=\"{}\"}} {value}", queue.id);
            }
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
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for queue in queues {
            let _ = writeln!(out, "{name}{{exporter=\"{}\"}} {}", queue.id, value(queue));
        }
    }
    let name = "stepline_exporter_retries";
    let _ = writeln!(
        out,
        "# HELP {name} Export attempts retried.\n# TYPE {name} counter"
    );
    for queue in queues {
        let value = queue.counters.retries.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_total{{exporter=\"{}\"}} {value}", queue.id);
    }
}

/// Appends the gauge of the rendered continuations held in memory.
pub fn render_rendered_cache(out: &mut String, held_bytes: usize) {
    let name = "stepline_rendered_cache_bytes";
    let _ = writeln!(
        out,
        "# HELP {name} Bytes of rendered continuation answers held in memory (answered, or rendered ahead once a run went quiet).\n# TYPE {name} gauge\n{name} {held_bytes}"
    );
}

/// One in-memory cache's estimated bytes in use and byte budget, labelled `cache="<name>"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheGauge {
    /// The cache's label: `history`, `rendered`, `context`, `prefix_memo` or `chain`.
    pub cache: &'static str,
    /// Estimated bytes held.
    pub bytes: usize,
    /// The byte budget (`processors.stepline.memory`).
    pub budget: usize,
}

/// The gauges of every cache continuations and ingest keep in memory.
pub fn cache_gauges(continuations: &Continuations) -> [CacheGauge; 5] {
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
    ]
}

/// Appends `stepline_cache_bytes{cache=...}` and `stepline_cache_budget_bytes{cache=...}`.
pub fn render_caches(out: &mut String, gauges: &[CacheGauge]) {
    type Pick = fn(&CacheGauge) -> usize;
    let families: [(&str, &str, Pick); 2] = [
        (
            "stepline_cache_bytes",
            "Estimated bytes held by an in-memory cache.",
            |g| g.bytes,
        ),
        (
            "stepline_cache_budget_bytes",
            "Byte budget of an in-memory cache (processors.stepline.memory).",
            |g| g.budget,
        ),
    ];
    for (name, help, pick) in families {
        let _ = writeln!(
            out,
            "# HELP {name} {help}
# TYPE {name} gauge"
        );
        for gauge in gauges {
            let _ = writeln!(out, "{name}{{cache=\"{}\"}} {}", gauge.cache, pick(gauge));
        }
    }
}

/// Appends the media store's counters.
pub fn render_media(out: &mut String, c: &MediaCounters) {
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
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name}_total {value}"
        );
    }
}
