//! GenAI events sent as OTLP log records (the legacy per-message events, and the latest
//! convention's `gen_ai.client.inference.operation.details` that Google ADK emits), correlated
//! to their span by trace and span id.
//!
//! A log record becomes a [`LogEvent`]; the store keeps the events of each span, and the content
//! of a model request whose span carries none is built from all of them, whichever arrived first.

use opentelemetry_proto::tonic::logs::v1::LogRecord;
use serde_json::{Map, Value};

use super::attributes::{any_to_json, Attributes};
use super::budget::{check_log, Cut, NotInterpreted};
use super::events::is_log_event;
use super::fact::SpanFact;
use super::tool_return::ToolReturnForm;
use crate::domain::MessageHash;
use crate::limits::Limits;
pub use crate::records::log_event::LogEvent;

/// Interprets one log record within `limits`: GenAI events ([`is_log_event`]) with a valid
/// trace and span id give an event; a record over a per-span cap gives the cap. Body values are cut to
/// `limits.max_nesting_depth` (a warning is logged when one is).
pub fn interpret_log(record: &LogRecord, limits: &Limits) -> Result<LogEvent, NotInterpreted> {
    if record.trace_id.len() != 16 || record.span_id.len() != 8 {
        return Err(NotInterpreted::NotAgentSpan);
    }
    let attrs = Attributes(&record.attributes);
    let name = if record.event_name.is_empty() {
        attrs
            .str(&["event.name"])
            .ok_or(NotInterpreted::NotAgentSpan)?
    } else {
        record.event_name.clone()
    };
    if !is_log_event(&name) {
        return Err(NotInterpreted::NotAgentSpan);
    }
    check_log(record, limits)?;
    let mut body = match record.body.as_ref().map(any_to_json) {
        Some(Value::Object(m)) => m,
        Some(Value::Null) | None => Map::new(),
        Some(other) => {
            let mut m = Map::new();
            m.insert("content".into(), other);
            m
        }
    };
    for kv in &record.attributes {
        if kv.key == "event.name" || body.contains_key(&kv.key) {
            continue;
        }
        let value = kv.value.as_ref().map(any_to_json).unwrap_or(Value::Null);
        body.insert(kv.key.clone(), value);
    }
    let mut cut = Cut::new(limits);
    for value in body.values_mut() {
        cut.apply("log event content", value);
    }
    for warning in cut.warnings() {
        tracing::warn!(
            trace_id = %hex::encode(&record.trace_id),
            span_id = %hex::encode(&record.span_id),
            "{warning}"
        );
    }
    let time_ns = if record.time_unix_nano > 0 {
        record.time_unix_nano
    } else {
        record.observed_time_unix_nano
    };
    Ok(LogEvent {
        trace_id: hex::encode(&record.trace_id),
        span_id: hex::encode(&record.span_id),
        message_index: attrs.int(&["gen_ai.message.index"]),
        time_ns,
        name,
        body,
    })
}

/// A model-request fact with its content rebuilt from its span's log events (sorted by
/// [`LogEvent::order_key`]), plus the message bodies. Facts whose span carries content of its own
/// are returned unchanged. Within the default [`Limits`]; see [`with_log_content_within`].
pub fn with_log_content(
    fact: &SpanFact,
    events: &[LogEvent],
) -> (SpanFact, Vec<(MessageHash, Value)>) {
    with_log_content_within(fact, events, &Limits::default())
}

/// [`with_log_content`] with message bodies cut to `limits.max_nesting_depth` (noted in the
/// fact's warnings). Linear in the events, but for sorting them.
pub fn with_log_content_within(
    fact: &SpanFact,
    events: &[LogEvent],
    limits: &Limits,
) -> (SpanFact, Vec<(MessageHash, Value)>) {
    let mut fact = fact.clone();
    if fact.kind != super::FactKind::ModelRequest || events.is_empty() {
        return (fact, Vec::new());
    }
    if fact.content_from_logs {
        fact.input = None;
        fact.output = None;
        fact.requested_calls.clear();
        fact.content_problem = None;
    } else if fact.input.is_some() || fact.output.is_some() {
        return (fact, Vec::new());
    }
    let mut sorted: Vec<&LogEvent> = events.iter().collect();
    // Each key hashes its event's body: computed once per event, not once per comparison.
    sorted.sort_by_cached_key(|e| e.order_key());
    let pairs: Vec<(String, Map<String, Value>)> = sorted
        .iter()
        .map(|e| (e.name.clone(), e.body.clone()))
        .collect();
    let mut bodies = Vec::new();
    let problem = fact.content_problem.take();
    let mut cut = Cut::new(limits);
    super::genai::apply_legacy_events(&pairs, &mut fact, &mut bodies, &mut cut);
    cut.apply_opt("system instructions", &mut fact.system_instructions);
    for warning in cut.warnings() {
        if !fact.warnings.contains(&warning) {
            fact.warnings.push(warning);
        }
    }
    if fact.input.is_none() && fact.content_problem.is_none() {
        fact.content_problem = problem;
    }
    fact.content_from_logs = true;
    fact.tool_return_form = fact.input.as_deref().and_then(|input| {
        ToolReturnForm::last_in(input, |_, hash| {
            bodies.iter().find(|(h, _)| h == hash).map(|(_, v)| v)
        })
    });
    if let Some(output) = &fact.output {
        let first = bodies.len().saturating_sub(output.len());
        fact.requested_calls = bodies[first..]
            .iter()
            .flat_map(|(_, m)| super::genai::requested_calls(m))
            .collect();
    }
    (fact, bodies)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::kv;
    use opentelemetry_proto::tonic::common::v1::{any_value::Value as V, AnyValue, ArrayValue};
    use opentelemetry_proto::tonic::common::v1::{KeyValue, KeyValueList};

    fn kvlist(values: Vec<KeyValue>) -> AnyValue {
        AnyValue {
            value: Some(V::KvlistValue(KeyValueList { values })),
        }
    }

    fn array(values: Vec<AnyValue>) -> AnyValue {
        AnyValue {
            value: Some(V::ArrayValue(ArrayValue { values })),
        }
    }

    fn attr(key: &str, value: AnyValue) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(value),
            key_strindex: 0,
        }
    }

    /// Google ADK's `EVENT_ONLY` record: structured AnyValue messages on the record's attributes.
    #[test]
    fn an_operation_details_record_gives_the_model_request_its_content() {
        let text = kvlist(vec![kv("type", "text"), kv("content", "go")]);
        let user = kvlist(vec![kv("role", "user"), attr("parts", array(vec![text]))]);
        let call = kvlist(vec![
            kv("type", "tool_call"),
            kv("id", "f_0"),
            kv("name", "f"),
            attr("arguments", kvlist(vec![kv("x", "1")])),
        ]);
        let model = kvlist(vec![
            kv("role", "assistant"),
            attr("parts", array(vec![call])),
        ]);
        let record = LogRecord {
            trace_id: vec![7; 16],
            span_id: vec![2; 8],
            time_unix_nano: 5,
            event_name: "gen_ai.client.inference.operation.details".into(),
            attributes: vec![
                kv("gen_ai.agent.name", "trip"),
                attr("gen_ai.input.messages", array(vec![user])),
                attr("gen_ai.output.messages", array(vec![model])),
            ],
            ..Default::default()
        };
        let event = interpret_log(&record, &Limits::default()).unwrap();
        assert_eq!(event.span_id, hex::encode([2u8; 8]));
        let span = crate::test_fixtures::span(
            2,
            1,
            "generate_content m",
            1,
            vec![kv("gen_ai.operation.name", "generate_content")],
        );
        let fact = crate::interpreter::interpret_span(&span).unwrap().fact;
        assert!(fact.content_problem.is_some());
        let (fact, bodies) = with_log_content(&fact, &[event]);
        assert!(fact.content_problem.is_none(), "{:?}", fact.content_problem);
        assert_eq!(fact.input.as_ref().map(|i| i.len()), Some(1));
        assert_eq!(fact.requested_calls.len(), 1);
        assert_eq!(fact.requested_calls[0].id, "f_0");
        assert_eq!(bodies.len(), 2);
        // Other event names are still not read.
        let other = LogRecord {
            event_name: "app.something".into(),
            ..record
        };
        assert!(interpret_log(&other, &Limits::default()).is_err());
    }
}
