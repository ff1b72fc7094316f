//! Optional per-exporter enrichment: `stepline.run_id` on the spans of agent runs.
//!
//! The writer resolved which run each interpreted span belongs to and kept that in the outbox
//! entry ([`SpanRun`]); this only copies those ids onto the spans, so nothing is interpreted
//! twice and group children (Strands cycles, OpenInference CHAIN spans, Traceloop tasks) get
//! their run's id like every other span of the run.

use std::collections::HashMap;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};

use crate::outbox::SpanRun;

/// The attribute added to the spans of agent runs.
pub const RUN_ID_ATTRIBUTE: &str = "stepline.run_id";

/// Adds `stepline.run_id` = its run's id to every span of `request` listed in `span_runs`;
/// a span that already carries the attribute keeps it, spans not listed are left as they
/// are. Returns how many spans were tagged.
///
/// Linear in the spans and attributes of the request plus `span_runs` (one hash map, keyed
/// with std's randomly seeded hasher, so crafted ids cannot make lookups collide).
pub fn add_run_ids(request: &mut ExportTraceServiceRequest, span_runs: &[SpanRun]) -> usize {
    if span_runs.is_empty() {
        return 0;
    }
    let runs: HashMap<([u8; 16], [u8; 8]), &str> = span_runs
        .iter()
        .map(|s| ((s.trace_id, s.span_id), s.run_id.as_str()))
        .collect();
    let spans = request
        .resource_spans
        .iter_mut()
        .flat_map(|r| &mut r.scope_spans)
        .flat_map(|s| &mut s.spans);
    let mut tagged = 0;
    for span in spans {
        let (Ok(trace_id), Ok(span_id)) = (
            <[u8; 16]>::try_from(span.trace_id.as_slice()),
            <[u8; 8]>::try_from(span.span_id.as_slice()),
        ) else {
            continue;
        };
        let Some(run_id) = runs.get(&(trace_id, span_id)) else {
            continue;
        };
        if span.attributes.iter().any(|kv| kv.key == RUN_ID_ATTRIBUTE) {
            continue;
        }
        span.attributes.push(KeyValue {
            key: RUN_ID_ATTRIBUTE.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue((*run_id).to_owned())),
            }),
            key_strindex: 0,
        });
        tagged += 1;
    }
    tagged
}

#[cfg(test)]
#[path = "enrich_tests.rs"]
mod tests;
