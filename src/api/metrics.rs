//! `/metrics` in the Prometheus text format, with the collector's familiar names.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::ingest::IngestCounters;

/// Renders the counters.
pub fn render(c: &IngestCounters) -> String {
    let mut out = String::new();
    let rows: [(&str, &str, u64); 5] = [
        (
            "otelcol_receiver_accepted_spans",
            "Spans acknowledged after a durable commit.",
            c.accepted_spans.load(Ordering::Relaxed),
        ),
        (
            "otelcol_receiver_refused_spans",
            "Spans rejected as invalid (partial success).",
            c.refused_spans.load(Ordering::Relaxed),
        ),
        (
            "otelcol_receiver_accepted_log_records",
            "Log records acknowledged.",
            c.accepted_log_records.load(Ordering::Relaxed),
        ),
        (
            "otelcol_receiver_accepted_metric_points",
            "Metric data points acknowledged.",
            c.accepted_metric_points.load(Ordering::Relaxed),
        ),
        (
            "stepline_interpreted_spans",
            "Spans recognised as agent runs, model requests or tool calls.",
            c.interpreted_spans.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, value) in rows {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name}_total {value}"
        );
    }
    out
}
