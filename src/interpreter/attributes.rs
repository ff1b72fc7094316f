//! Reading OTLP attributes.

use base64::Engine;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use serde_json::Value;

/// Nesting levels the interpreter builds while reading sender data (OTLP array/kvlist values,
/// flattened attribute paths): a bound on call depth, whatever the configured cap. Values are
/// then cut to `Limits::max_nesting_depth` (see `budget::Cut`), which is below it.
pub const MAX_BUILD_DEPTH: usize = 128;

/// Bytes of JSON text kept for a structured value cut at [`MAX_BUILD_DEPTH`].
const BUILD_CUT_TEXT_BYTES: usize = 64 * 1024;

/// Converts an OTLP `AnyValue` into JSON (bytes become base64 strings). Arrays and kvlists
/// nested deeper than [`MAX_BUILD_DEPTH`] become their JSON text.
pub fn any_to_json(value: &AnyValue) -> Value {
    any_to_json_within(value, MAX_BUILD_DEPTH)
}

/// [`any_to_json`] with `levels` levels of arrays and kvlists left; deeper ones become text.
fn any_to_json_within(value: &AnyValue, levels: usize) -> Value {
    match &value.value {
        Some(Any::ArrayValue(_) | Any::KvlistValue(_)) if levels == 0 => {
            Value::String(any_text(value, BUILD_CUT_TEXT_BYTES))
        }
        // String-table references only appear in profiles, which stepline does not receive.
        None | Some(Any::StringValueStrindex(_)) => Value::Null,
        Some(Any::StringValue(s)) => Value::String(s.clone()),
        Some(Any::BoolValue(b)) => Value::Bool(*b),
        Some(Any::IntValue(i)) => Value::from(*i),
        Some(Any::DoubleValue(d)) => serde_json::Number::from_f64(*d)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        Some(Any::ArrayValue(a)) => Value::Array(
            a.values
                .iter()
                .map(|v| any_to_json_within(v, levels - 1))
                .collect(),
        ),
        Some(Any::KvlistValue(kv)) => Value::Object(
            kv.values
                .iter()
                .map(|kv| {
                    let value = kv
                        .value
                        .as_ref()
                        .map(|v| any_to_json_within(v, levels - 1))
                        .unwrap_or(Value::Null);
                    (kv.key.clone(), value)
                })
                .collect(),
        ),
        Some(Any::BytesValue(b)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
    }
}

/// The JSON text of an `AnyValue` (at most about `max_bytes` of it), written with an explicit
/// stack so any nesting costs no call depth.
fn any_text(value: &AnyValue, max_bytes: usize) -> String {
    enum Step<'a> {
        Value(&'a AnyValue),
        Key(&'a str),
        Text(&'static str),
    }
    let mut out = Vec::new();
    let mut stack = vec![Step::Value(value)];
    while let Some(step) = stack.pop() {
        if out.len() > max_bytes {
            break;
        }
        match step {
            Step::Text(t) => out.extend_from_slice(t.as_bytes()),
            Step::Key(k) => {
                let _ = serde_json::to_writer(&mut out, k);
                out.push(b':');
            }
            Step::Value(v) => match &v.value {
                Some(Any::ArrayValue(a)) => {
                    out.push(b'[');
                    stack.push(Step::Text("]"));
                    for (i, item) in a.values.iter().enumerate().rev() {
                        stack.push(Step::Value(item));
                        if i > 0 {
                            stack.push(Step::Text(","));
                        }
                    }
                }
                Some(Any::KvlistValue(kv)) => {
                    out.push(b'{');
                    stack.push(Step::Text("}"));
                    for (i, entry) in kv.values.iter().enumerate().rev() {
                        match &entry.value {
                            Some(v) => stack.push(Step::Value(v)),
                            None => stack.push(Step::Text("null")),
                        }
                        stack.push(Step::Key(&entry.key));
                        if i > 0 {
                            stack.push(Step::Text(","));
                        }
                    }
                }
                _ => {
                    let _ = serde_json::to_writer(&mut out, &any_to_json_within(v, 0));
                }
            },
        }
    }
    super::budget::text_prefix(out, max_bytes)
}

/// Lowercase hex of `bytes` (what `hex::encode` gives), written in one pass into a string of
/// the right size: span and trace ids are encoded for every span.
pub fn hex_id(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xF)] as char);
    }
    out
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

    /// The string value of the first attribute named `key`, borrowed (no copy): for tests of
    /// a value, where [`Self::str`] would copy it first.
    pub fn text(&self, key: &str) -> Option<&'a str> {
        match self.get(key)?.value.as_ref()? {
            Any::StringValue(s) => Some(s.as_str()),
            _ => None,
        }
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
    ///
    /// A path is turned into structure for at most [`MAX_BUILD_DEPTH`] segments (counting the
    /// levels of its value): the rest of a longer path is kept as one key, so the tree, the JSON
    /// built from it and every walk over them have bounded depth.
    pub fn indexed(&self, prefix: &str) -> Vec<Value> {
        let mut root = Node::default();
        let dotted = format!("{prefix}.");
        for kv in self.0 {
            let Some(rest) = kv.key.strip_prefix(&dotted) else {
                continue;
            };
            // Levels left for the value once the path is built.
            let mut node = &mut root;
            let mut levels = MAX_BUILD_DEPTH;
            let mut rest = rest;
            loop {
                levels = levels.saturating_sub(1);
                let (segment, more) = match rest.split_once('.') {
                    Some((segment, more)) if levels > 1 => (segment, Some(more)),
                    _ => (rest, None),
                };
                node = node.children.entry(segment.to_string()).or_default();
                match more {
                    Some(more) => rest = more,
                    None => break,
                }
            }
            node.value = Some(
                kv.value
                    .as_ref()
                    .map(|v| any_to_json_within(v, levels))
                    .unwrap_or(Value::Null),
            );
        }
        match root.into_json() {
            Value::Array(items) => items,
            _ => Vec::new(),
        }
    }
}

/// A path tree for [`Attributes::indexed`], at most [`MAX_BUILD_DEPTH`] levels deep.
#[derive(Default)]
struct Node {
    value: Option<Value>,
    children: std::collections::BTreeMap<String, Node>,
}

impl Node {
    /// The tree as JSON. Recursive, over a tree of bounded depth.
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
    fn hex_ids_are_lowercase_hex() {
        for bytes in [
            &[][..],
            &[0u8, 1, 0x7f, 0x80, 0xab, 0xff][..],
            &[0x5a; 16][..],
        ] {
            assert_eq!(hex_id(bytes), hex::encode(bytes));
        }
    }

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

    #[test]
    fn very_long_paths_keep_their_tail_as_one_key() {
        for prefix in ["gen_ai.prompt", "llm.input_messages"] {
            let path = vec!["a"; 10_000].join(".");
            let attrs = vec![kv(&format!("{prefix}.0.{path}"), "deep")];
            let items = Attributes(&attrs).indexed(prefix);
            assert_eq!(items.len(), 1);
            let depth = crate::interpreter::budget::depth(&items[0]);
            assert!(depth < MAX_BUILD_DEPTH, "{depth}");
            let mut at = &items[0];
            while let Some((_, v)) = at.as_object().and_then(|m| m.iter().next()) {
                at = v;
            }
            assert_eq!(at, "deep");
        }
    }

    #[test]
    fn deep_any_values_become_text_past_the_build_depth() {
        use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};
        let mut v = AnyValue {
            value: Some(Any::StringValue("x".into())),
        };
        for i in 0..(MAX_BUILD_DEPTH + 40) {
            v = AnyValue {
                value: Some(if i % 2 == 0 {
                    Any::ArrayValue(ArrayValue { values: vec![v] })
                } else {
                    Any::KvlistValue(KeyValueList {
                        values: vec![KeyValue {
                            key: "k".into(),
                            value: Some(v),
                            key_strindex: 0,
                        }],
                    })
                }),
            };
        }
        let json = any_to_json(&v);
        assert_eq!(crate::interpreter::budget::depth(&json), MAX_BUILD_DEPTH);
        let text = any_text(&v, 1 << 20);
        let parsed: Value = serde_json::from_str(&text[..]).unwrap_or(Value::Null);
        // Deeper than serde_json parses; the text itself is well formed up to its end.
        assert!(parsed.is_null() && text.starts_with("{\"k\":[{\"k\":"));
        assert!(text.ends_with("]}"));
    }
}
