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
