//! Reading OTLP attributes.

use base64::Engine;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use serde_json::Value;

/// Converts an OTLP `AnyValue` into JSON (bytes become base64 strings).
pub fn any_to_json(value: &AnyValue) -> Value {
    match &value.value {
        // String-table references only appear in profiles, which stepline does not receive.
        None | Some(Any::StringValueStrindex(_)) => Value::Null,
        Some(Any::StringValue(s)) => Value::String(s.clone()),
        Some(Any::BoolValue(b)) => Value::Bool(*b),
        Some(Any::IntValue(i)) => Value::from(*i),
        Some(Any::DoubleValue(d)) => serde_json::Number::from_f64(*d)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        Some(Any::ArrayValue(a)) => Value::Array(a.values.iter().map(any_to_json).collect()),
        Some(Any::KvlistValue(kv)) => Value::Object(
            kv.values
                .iter()
                .map(|kv| {
                    (
                        kv.key.clone(),
                        kv.value.as_ref().map(any_to_json).unwrap_or(Value::Null),
                    )
                })
                .collect(),
        ),
        Some(Any::BytesValue(b)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
    }
}

/// The attributes of one span, for lookups by key.
pub struct Attributes<'a>(pub &'a [KeyValue]);

impl<'a> Attributes<'a> {
    /// The raw value of the first attribute named `key`.
    pub fn get(&self, key: &str) -> Option<&'a AnyValue> {
        self.0
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
    }

    /// A string attribute (the first of `keys` that is present); integers are formatted.
    pub fn str(&self, keys: &[&str]) -> Option<String> {
        keys.iter()
            .find_map(|k| match self.get(k)?.value.as_ref()? {
                Any::StringValue(s) => Some(s.clone()),
                Any::IntValue(i) => Some(i.to_string()),
                _ => None,
            })
    }

    /// An integer attribute (the first of `keys` that is present); numeric strings are accepted.
    pub fn int(&self, keys: &[&str]) -> Option<i64> {
        keys.iter()
            .find_map(|k| match self.get(k)?.value.as_ref()? {
                Any::IntValue(i) => Some(*i),
                Any::DoubleValue(d) => Some(*d as i64),
                Any::StringValue(s) => s.parse().ok(),
                _ => None,
            })
    }

    /// A JSON-valued attribute: a string holding JSON is parsed, a structured value converted.
    /// `Err` carries the reason when a string is present but is not valid JSON.
    pub fn json(&self, key: &str) -> Option<Result<Value, String>> {
        let value = self.get(key)?;
        Some(match &value.value {
            Some(Any::StringValue(s)) => serde_json::from_str(s)
                .map_err(|e| format!("{key} is not valid JSON ({e}); it may have been cut by an attribute length limit")),
            _ => Ok(any_to_json(value)),
        })
    }

    /// A value that is usually JSON but may be plain text: objects and arrays in a string are
    /// parsed, any other string stays a string.
    pub fn loose_json(&self, keys: &[&str]) -> Option<Value> {
        keys.iter().find_map(|k| {
            let value = self.get(k)?;
            Some(match &value.value {
                Some(Any::StringValue(s)) => {
                    let t = s.trim_start();
                    if t.starts_with('{') || t.starts_with('[') {
                        serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
                    } else {
                        Value::String(s.clone())
                    }
                }
                _ => any_to_json(value),
            })
        })
    }
}

impl Attributes<'_> {
    /// Flattened indexed attributes (`{prefix}.{i}.a.b.{j}.c`, as OpenInference and OpenLLMetry
    /// write message lists) rebuilt as nested JSON: one item per index, in index order; numeric
    /// path segments become arrays (in index order), the others object keys.
    pub fn indexed(&self, prefix: &str) -> Vec<Value> {
        let mut root = Node::default();
        let dotted = format!("{prefix}.");
        for kv in self.0 {
            let Some(rest) = kv.key.strip_prefix(&dotted) else {
                continue;
            };
            let value = kv.value.as_ref().map(any_to_json).unwrap_or(Value::Null);
            root.insert(rest.split('.'), value);
        }
        match root.into_json() {
            Value::Array(items) => items,
            _ => Vec::new(),
        }
    }
}

/// A path tree for [`Attributes::indexed`].
#[derive(Default)]
struct Node {
    value: Option<Value>,
    children: std::collections::BTreeMap<String, Node>,
}

impl Node {
    fn insert<'k>(&mut self, mut path: impl Iterator<Item = &'k str>, value: Value) {
        match path.next() {
            None => self.value = Some(value),
            Some(segment) => self
                .children
                .entry(segment.to_string())
                .or_default()
                .insert(path, value),
        }
    }

    fn into_json(self) -> Value {
        if self.children.is_empty() {
            return self.value.unwrap_or(Value::Null);
        }
        let numeric = self.children.keys().all(|k| k.parse::<u32>().is_ok());
        if numeric {
            let mut items: Vec<(u32, Value)> = self
                .children
                .into_iter()
                .filter_map(|(k, v)| Some((k.parse().ok()?, v.into_json())))
                .collect();
            items.sort_by_key(|(i, _)| *i);
            Value::Array(items.into_iter().map(|(_, v)| v).collect())
        } else {
            Value::Object(
                self.children
                    .into_iter()
                    .map(|(k, v)| (k, v.into_json()))
                    .collect(),
            )
        }
    }
}

#[cfg(test)]
mod indexed_tests {
    use super::*;
    use crate::test_fixtures::kv;

    #[test]
    fn flattened_lists_rebuild_in_index_order() {
        let attrs = vec![
            kv("p.10.role", "tool"),
            kv("p.2.role", "user"),
            kv("p.2.tool_calls.1.name", "b"),
            kv("p.2.tool_calls.0.name", "a"),
            kv("other", "x"),
        ];
        let items = Attributes(&attrs).indexed("p");
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["role"], "user");
        assert_eq!(items[0]["tool_calls"][1]["name"], "b");
        assert_eq!(items[1]["role"], "tool");
    }
}
