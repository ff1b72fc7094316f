//! Who started a span's run and the run's configured attributes, read from the span's resource
//! and its own attributes (baggage arrives as span attributes when the producer copies it
//! there, e.g. with OpenTelemetry's `BaggageSpanProcessor`) into the fact's
//! [`crate::domain::RunInfo`].
//!
//! A request's resource is read once per `ResourceSpans` ([`ResourceInfo::read`]), not once per
//! span, so the work stays linear in the request's size.

use std::borrow::Cow;

use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;

use super::fact::{FactKind, Interpreted};
use crate::domain::{RunInfo, RunInfoKeys};

/// What a resource says, read once for all of its spans.
#[derive(Debug, Default)]
pub struct ResourceInfo {
    info: RunInfo,
    warnings: Vec<String>,
}

/// The text of a scalar attribute value (strings, booleans and numbers); none for arrays, maps
/// and bytes.
fn text(kv: &KeyValue) -> Option<(&str, Cow<'_, str>)> {
    let value = match kv.value.as_ref()?.value.as_ref()? {
        Any::StringValue(s) => Cow::Borrowed(s.as_str()),
        Any::BoolValue(b) => Cow::Owned(b.to_string()),
        Any::IntValue(i) => Cow::Owned(i.to_string()),
        Any::DoubleValue(d) => Cow::Owned(d.to_string()),
        _ => return None,
    };
    Some((kv.key.as_str(), value))
}

/// The scalar attributes of `attributes` that `keys` may name, as (key, text) pairs. Others are
/// passed by before their text is made: a span's message attributes never reach the extraction.
fn texts<'a>(keys: &RunInfoKeys, attributes: &'a [KeyValue]) -> Vec<(&'a str, Cow<'a, str>)> {
    attributes
        .iter()
        .filter(|kv| may_name(keys, &kv.key))
        .filter_map(text)
        .collect()
}

/// True when `keys` may file `key` (the trigger kind, trigger meta or a run attribute); a
/// superset of what [`RunInfoKeys::extract`] keeps, which decides.
fn may_name(keys: &RunInfoKeys, key: &str) -> bool {
    key == keys.kind_key
        || (!keys.meta_prefix.is_empty() && key.starts_with(keys.meta_prefix.as_str()))
        || keys.attributes.iter().any(|a| a == key)
}

impl ResourceInfo {
    /// Reads the configured keys of a resource's attributes.
    pub fn read(keys: &RunInfoKeys, attributes: &[KeyValue]) -> Self {
        let pairs = texts(keys, attributes);
        let (info, warnings) = keys.extract(pairs.iter().map(|(k, v)| (*k, v.as_ref())), []);
        Self { info, warnings }
    }
}

/// Puts on `interpreted`'s fact what its span's `attributes` and its `resource` say (the span's
/// value wins for a key both have). Warnings about values left out go on agent-run facts only,
/// so a run lists them once rather than once per span.
pub fn note_run_info(
    interpreted: &mut Interpreted,
    keys: &RunInfoKeys,
    resource: &ResourceInfo,
    attributes: &[KeyValue],
) {
    let pairs = texts(keys, attributes);
    let (mut info, warnings) = keys.extract([], pairs.iter().map(|(k, v)| (*k, v.as_ref())));
    info.merge_missing(&resource.info);
    let fact = &mut interpreted.fact;
    if fact.kind == FactKind::AgentRun {
        fact.warnings.extend(resource.warnings.iter().cloned());
        fact.warnings.extend(warnings);
    }
    fact.run_info = info;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpreter::fact::SpanFact;
    use opentelemetry_proto::tonic::common::v1::AnyValue;

    fn kv(key: &str, value: Any) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            key_strindex: 0,
        }
    }

    fn interpreted(kind: FactKind) -> Interpreted {
        Interpreted::keyed(
            SpanFact::new(kind, "t".into(), "s".into(), "n".into()),
            Vec::new(),
        )
    }

    #[test]
    fn span_attributes_win_and_scalars_are_read_as_text() {
        let keys = RunInfoKeys {
            attributes: vec!["tenant".into(), "shard".into()],
            ..RunInfoKeys::default()
        };
        let resource = ResourceInfo::read(
            &keys,
            &[
                kv("stepline.trigger.kind", Any::StringValue("schedule".into())),
                kv("tenant", Any::StringValue("acme".into())),
                kv("shard", Any::IntValue(7)),
            ],
        );
        let mut i = interpreted(FactKind::ModelRequest);
        note_run_info(
            &mut i,
            &keys,
            &resource,
            &[
                kv("tenant", Any::StringValue("globex".into())),
                kv("stepline.trigger.retry", Any::BoolValue(true)),
                kv("stepline.trigger.raw", Any::BytesValue(vec![1])),
            ],
        );
        let info = &i.fact.run_info;
        assert_eq!(info.trigger.kind.as_deref(), Some("schedule"));
        assert_eq!(
            info.trigger.meta.get("retry").map(String::as_str),
            Some("true")
        );
        assert!(!info.trigger.meta.contains_key("raw"));
        assert_eq!(info.attributes["tenant"], "globex");
        assert_eq!(info.attributes["shard"], "7");
    }

    #[test]
    fn only_the_keys_configured_are_read_and_a_filtered_read_equals_the_unfiltered_one() {
        let keys = RunInfoKeys {
            attributes: vec!["tenant".into()],
            ..RunInfoKeys::default()
        };
        let kind = keys.kind_key.clone();
        let meta = format!("{}retry", keys.meta_prefix);
        let attributes = [
            kv(&kind, Any::StringValue("webhook".into())),
            kv(&meta, Any::IntValue(2)),
            kv(
                &keys.meta_prefix.clone(),
                Any::StringValue("empty meta key".into()),
            ),
            kv("tenant", Any::DoubleValue(1.5)),
            kv("gen_ai.input.messages", Any::StringValue("[]".into())),
            kv("other", Any::BoolValue(true)),
        ];
        let read: Vec<&str> = texts(&keys, &attributes).iter().map(|(k, _)| *k).collect();
        assert_eq!(
            read,
            [kind.as_str(), meta.as_str(), &keys.meta_prefix, "tenant"]
        );
        let all: Vec<(&str, Cow<'_, str>)> = attributes.iter().filter_map(text).collect();
        let unfiltered = keys.extract([], all.iter().map(|(k, v)| (*k, v.as_ref())));
        let mut i = interpreted(FactKind::AgentRun);
        note_run_info(&mut i, &keys, &ResourceInfo::default(), &attributes);
        assert_eq!(i.fact.run_info, unfiltered.0);
        assert_eq!(i.fact.warnings, unfiltered.1);
        assert_eq!(i.fact.run_info.trigger.kind.as_deref(), Some("webhook"));
        assert_eq!(i.fact.run_info.attributes["tenant"], "1.5");
    }

    #[test]
    fn warnings_go_on_the_run_span_only() {
        let keys = RunInfoKeys::default();
        let long = "x".repeat(1000);
        let resource = ResourceInfo::read(
            &keys,
            &[kv("stepline.trigger.kind", Any::StringValue(long))],
        );
        let mut model = interpreted(FactKind::ModelRequest);
        note_run_info(&mut model, &keys, &resource, &[]);
        assert!(model.fact.warnings.is_empty());
        let mut agent = interpreted(FactKind::AgentRun);
        note_run_info(&mut agent, &keys, &resource, &[]);
        assert_eq!(agent.fact.warnings.len(), 1);
        assert!(agent.fact.run_info.is_empty());
    }
}
