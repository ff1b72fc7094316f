//! The renderers' output: a JSON tree that borrows the history's strings and values instead of
//! copying them, with objects as ordered field lists (no per-key allocation), serialised straight
//! to bytes. A 1,000-step history renders to about a megabyte of JSON; building it as
//! `serde_json::Value`s spent most of a continuation's time allocating, copying and freeing.
//! The long arrays of an answer (the messages, contents or input items) are not trees any more:
//! the renderers write them in place ([`super::writer`]) and hand them over as
//! [`Out::Written`]. Trees remain for the answer's other fields and for small pieces a renderer
//! must look at before writing them.

use super::json_writer;
use crate::domain::{format_timestamp, Nanos};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};

/// A JSON value to serialise, borrowing from the history where it can.
#[derive(Debug, Clone, PartialEq)]
pub enum Out<'a> {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An unsigned integer.
    U64(u64),
    /// A string of the history.
    Str(&'a str),
    /// A string made while rendering.
    String(String),
    /// A time as RFC 3339 text ([`format_timestamp`]), written without making a `String`.
    Timestamp(Nanos),
    /// A value of the history, serialised as it is.
    Raw(&'a Value),
    /// JSON a renderer wrote in place ([`super::writer`]): one whole value, copied as it is.
    Written(Vec<u8>),
    /// A value made while rendering.
    Value(Value),
    /// An array.
    Array(Vec<Out<'a>>),
    /// An object, fields in order (keys are the format's own names).
    Object(Vec<(&'static str, Out<'a>)>),
}

/// An object with the given fields: `obj! { "role" => "user", "content" => text }`; each value
/// goes through `Out::from`.
#[macro_export]
#[doc(hidden)]
macro_rules! obj {
    ($($key:literal => $value:expr),* $(,)?) => {
        $crate::continuation::Out::Object(vec![$(($key, $crate::continuation::Out::from($value))),*])
    };
}

impl<'a> Out<'a> {
    /// A field of an object (none for other values or a missing key).
    pub fn get(&self, key: &str) -> Option<&Out<'a>> {
        match self {
            Out::Object(fields) => fields.iter().find(|(k, _)| *k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Moves a field's value out of an object, leaving null (null when absent).
    pub fn take(&mut self, key: &str) -> Out<'a> {
        match self {
            Out::Object(fields) => fields
                .iter_mut()
                .find(|(k, _)| *k == key)
                .map_or(Out::Null, |(_, v)| std::mem::replace(v, Out::Null)),
            _ => Out::Null,
        }
    }

    /// The text of a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Out::Str(s) => Some(s),
            Out::String(s) => Some(s),
            Out::Raw(Value::String(s)) => Some(s),
            Out::Value(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    /// Sets a field of an object (replacing one with the same key; no effect on other values).
    pub fn set(&mut self, key: &'static str, value: impl Into<Out<'a>>) {
        if let Out::Object(fields) = self {
            let value = value.into();
            match fields.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => *v = value,
                None => fields.push((key, value)),
            }
        }
    }

    /// Writes the value as compact JSON to the end of `buf`: the same bytes as
    /// `serde_json::to_vec(self)`, written without serde (see `json_writer`).
    pub fn write_json(&self, buf: &mut Vec<u8>) {
        json_writer::write_out(buf, self);
    }

    /// The value as compact JSON bytes, the same as `serde_json::to_vec(self)` (which cannot
    /// fail for an `Out`).
    pub fn to_json_vec(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(128);
        self.write_json(&mut buf);
        buf
    }

    /// The value as `serde_json::Value` (for tests and callers that need to inspect it).
    pub fn to_value(&self) -> Value {
        match self {
            Out::Null => Value::Null,
            Out::Bool(b) => Value::Bool(*b),
            Out::U64(n) => Value::from(*n),
            Out::Str(s) => Value::String((*s).to_string()),
            Out::String(s) => Value::String(s.clone()),
            Out::Timestamp(t) => Value::String(format_timestamp(*t)),
            Out::Raw(v) => (*v).clone(),
            Out::Written(json) => written_value(json),
            Out::Value(v) => v.clone(),
            Out::Array(items) => Value::Array(items.iter().map(Out::to_value).collect()),
            Out::Object(fields) => {
                let mut map = Map::new();
                for (k, v) in fields {
                    map.insert((*k).to_string(), v.to_value());
                }
                Value::Object(map)
            }
        }
    }
}

impl Serialize for Out<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Out::Null => serializer.serialize_unit(),
            Out::Bool(b) => serializer.serialize_bool(*b),
            Out::U64(n) => serializer.serialize_u64(*n),
            Out::Str(s) => serializer.serialize_str(s),
            Out::String(s) => serializer.serialize_str(s),
            Out::Timestamp(t) => serializer.serialize_str(&format_timestamp(*t)),
            Out::Raw(v) => v.serialize(serializer),
            Out::Written(json) => {
                // As it was written: serde_json's serialiser copies a raw value's text.
                let text = String::from_utf8_lossy(json).into_owned();
                match serde_json::value::RawValue::from_string(text) {
                    Ok(raw) => raw.serialize(serializer),
                    Err(_) => serializer.serialize_unit(),
                }
            }
            Out::Value(v) => v.serialize(serializer),
            Out::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Out::Object(fields) => {
                let mut map = serializer.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// The value of JSON a renderer wrote (null if it is not JSON, which the writer never makes;
/// for tests and serde, not the answer's path).
fn written_value(json: &[u8]) -> Value {
    serde_json::from_slice(json).unwrap_or(Value::Null)
}

impl<'a> From<&'a str> for Out<'a> {
    fn from(s: &'a str) -> Self {
        Out::Str(s)
    }
}

impl From<String> for Out<'_> {
    fn from(s: String) -> Self {
        Out::String(s)
    }
}

impl<'a> From<&'a Value> for Out<'a> {
    fn from(v: &'a Value) -> Self {
        Out::Raw(v)
    }
}

impl From<Value> for Out<'_> {
    fn from(v: Value) -> Self {
        Out::Value(v)
    }
}

impl From<bool> for Out<'_> {
    fn from(b: bool) -> Self {
        Out::Bool(b)
    }
}

impl From<u64> for Out<'_> {
    fn from(n: u64) -> Self {
        Out::U64(n)
    }
}

impl From<u32> for Out<'_> {
    fn from(n: u32) -> Self {
        Out::U64(u64::from(n))
    }
}

impl From<usize> for Out<'_> {
    fn from(n: usize) -> Self {
        Out::U64(n as u64)
    }
}

impl<'a> From<Vec<Out<'a>>> for Out<'a> {
    fn from(items: Vec<Out<'a>>) -> Self {
        Out::Array(items)
    }
}

impl<'a, T: Into<Out<'a>>> From<Option<T>> for Out<'a> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Out::Null, Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serialises_like_the_value_it_stands_for() {
        let history = json!({"a": [1, "two", null]});
        let mut out = obj! {
            "text" => "hi",
            "n" => 3u64,
            "raw" => &history,
            "made" => json!({"x": true}),
            "list" => vec![Out::Null, Out::from(false), Out::from("q\"uote".to_string())],
            "none" => None::<&str>,
            "at" => Out::Timestamp(1_795_860_000_123_456_789),
            "written" => Out::Written(br#"{"b":1,"a":[2]}"#.to_vec()),
        };
        out.set("text", "bye");
        out.set("added", 1u32);
        let text = serde_json::to_string(&out).unwrap();
        assert_eq!(out.to_json_vec(), text.as_bytes());
        // Written JSON keeps its own order of keys.
        assert!(text.contains(r#""written":{"b":1,"a":[2]}"#), "{text}");
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed, out.to_value());
        assert_eq!(
            parsed,
            json!({"text": "bye", "n": 3, "raw": {"a": [1, "two", null]}, "made": {"x": true},
                   "list": [null, false, "q\"uote"], "none": null,
                   "at": "2026-11-28T10:00:00.123456789Z", "written": {"b": 1, "a": [2]},
                   "added": 1})
        );
        assert_eq!(out.get("n"), Some(&Out::U64(3)));
        assert_eq!(out.get("text").and_then(Out::as_str), Some("bye"));
        assert_eq!(out.get("missing"), None);
        assert_eq!(out.take("n"), Out::U64(3));
        assert_eq!(out.get("n"), Some(&Out::Null));
    }
}
