//! Optional per-exporter enrichment: `stepline.run_id` on agent spans.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};

use crate::ingest::run_id_of;
use crate::interpreter::interpret_span;

/// The attribute added to agent spans.
pub const RUN_ID_ATTRIBUTE: &str = "stepline.run_id";

/// Adds `stepline.run_id` to every span stepline interprets as part of an agent run (and
/// that does not carry it already). Other spans, and spans over the default per-span caps
/// (which the interpreter does not read), are left as they are. The interpreter's work is
/// linear in each span's size, with bounded recursion, so no request can stall or crash this.
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
    fn crafted_spans_are_left_alone_without_crashing() {
        use crate::test_fixtures::{kv, span};
        let path = vec!["a"; 10_000].join(".");
        let spans = vec![
            span(
                2,
                3,
                "openai.chat",
                10,
                vec![kv(&format!("gen_ai.prompt.0.{path}"), "x")],
            ),
            span(
                4,
                3,
                "response",
                10,
                vec![
                    kv("openinference.span.kind", "LLM"),
                    kv(&format!("llm.input_messages.0.{path}"), "x"),
                ],
            ),
        ];
        let mut request = request(spans);
        add_run_ids(&mut request);
        let spans = &request.resource_spans[0].scope_spans[0].spans;
        assert!(spans
            .iter()
            .all(|s| s.attributes.iter().all(|kv| kv.key != RUN_ID_ATTRIBUTE)));
    }

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
