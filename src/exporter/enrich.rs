//! Optional per-exporter enrichment: `stepline.run_id` on agent spans.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};

use crate::ingest::run_id_of;
use crate::interpreter::interpret_span;

/// The attribute added to agent spans.
pub const RUN_ID_ATTRIBUTE: &str = "stepline.run_id";

/// Adds `stepline.run_id` to every span stepline interprets as part of an agent run (and
/// that does not carry it already). Other spans are left as they are.
pub fn add_run_ids(request: &mut ExportTraceServiceRequest) {
    let spans = request
        .resource_spans
        .iter_mut()
        .flat_map(|r| &mut r.scope_spans)
        .flat_map(|s| &mut s.spans);
    for span in spans {
        if span.trace_id.len() != 16
            || span.span_id.len() != 8
            || span.attributes.iter().any(|kv| kv.key == RUN_ID_ATTRIBUTE)
        {
            continue;
        }
        if let Some(interpreted) = interpret_span(span) {
            span.attributes.push(KeyValue {
                key: RUN_ID_ATTRIBUTE.into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(run_id_of(&interpreted))),
                }),
                key_strindex: 0,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::{delegate_scenario, request};

    #[test]
    fn agent_spans_get_their_run_id_once() {
        let mut request = request(delegate_scenario());
        add_run_ids(&mut request);
        add_run_ids(&mut request);
        let spans: Vec<_> = request.resource_spans[0].scope_spans[0]
            .spans
            .iter()
            .collect();
        let tagged = spans
            .iter()
            .filter(|s| {
                s.attributes
                    .iter()
                    .filter(|kv| kv.key == RUN_ID_ATTRIBUTE)
                    .count()
                    == 1
            })
            .count();
        assert!(tagged > 0);
        assert!(spans.iter().all(|s| s
            .attributes
            .iter()
            .filter(|kv| kv.key == RUN_ID_ATTRIBUTE)
            .count()
            <= 1));
    }
}
