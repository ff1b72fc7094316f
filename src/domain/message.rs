//! Messages in the canonical OTel GenAI shape, content-addressed so each is stored once per run.

use std::borrow::Cow;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::binary_id::binary_id;

mod canonical;

/// Bytes of a message hash: a truncated SHA-256 of the message's canonical JSON (128 bits, so
/// a collision between two messages of one run is out of reach).
pub const MESSAGE_HASH_BYTES: usize = 16;

/// The message's truncated SHA-256 ([`MESSAGE_HASH_BYTES`]) over its canonical JSON (object keys
/// sorted). Binary in memory; shown and serialised as 32 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MessageHash(pub [u8; MESSAGE_HASH_BYTES]);

binary_id!(MessageHash, MESSAGE_HASH_BYTES, "message hash");

impl MessageHash {
    /// Hashes a message. `serde_json::Value` keeps object keys sorted, so equal messages hash
    /// equally whatever key order the producer used.
    ///
    /// The canonical JSON is written into a buffer kept per thread (no allocation per message
    /// once it has grown) and hashed in one pass.
    pub fn of(message: &Value) -> Self {
        CANONICAL.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buffer) => {
                buffer.clear();
                let hash = Self::of_canonical(message, &mut buffer);
                if buffer.capacity() > KEPT_BUFFER_BYTES {
                    *buffer = Vec::new();
                }
                hash
            }
            // Only reachable if hashing re-entered itself; a fresh buffer gives the same hash.
            Err(_) => Self::of_canonical(message, &mut Vec::new()),
        })
    }

    /// [`Self::of`] for a value that comes again call after call (a run's system instructions,
    /// on each of its model requests and their facts): the last value hashed this way on this
    /// thread is kept with its hash, and an equal one (compared in full) is not hashed again.
    pub fn of_repeated(value: &Value) -> Self {
        let known = LAST_REPEATED.with(|cell| {
            cell.try_borrow()
                .ok()
                .and_then(|last| last.as_ref().filter(|(v, _)| v == value).map(|(_, h)| *h))
        });
        if let Some(hash) = known {
            return hash;
        }
        let hash = Self::of(value);
        LAST_REPEATED.with(|cell| {
            if let Ok(mut last) = cell.try_borrow_mut() {
                *last = (message_bytes_below(value, KEPT_REPEATED_BYTES))
                    .then(|| (value.clone(), hash));
            }
        });
        hash
    }

    /// Hashes `message`'s canonical JSON, written into the empty `buffer`.
    fn of_canonical(message: &Value, buffer: &mut Vec<u8>) -> Self {
        canonical::write(buffer, message);
        let digest = Sha256::digest(&buffer[..]);
        let mut out = [0u8; MESSAGE_HASH_BYTES];
        out.copy_from_slice(&digest[..MESSAGE_HASH_BYTES]);
        Self(out)
    }
}

/// Appends the canonical JSON of `value` (the text a message's hash is taken over: serde_json's
/// compact text of the value, byte for byte) to `out`, and gives how deep its arrays and objects
/// nest (0 for a scalar).
pub fn write_canonical(out: &mut Vec<u8>, value: &Value) -> usize {
    canonical::write(out, value)
}

/// Capacity of the per-thread canonical JSON buffer kept between messages; a larger one (left
/// by a very large message) is freed after use.
const KEPT_BUFFER_BYTES: usize = 256 * 1024;

/// The largest value (by the bytes of its strings and keys, roughly) that
/// [`MessageHash::of_repeated`] keeps a copy of.
const KEPT_REPEATED_BYTES: usize = 64 * 1024;

/// True when the strings and keys of `value` hold fewer than `limit` bytes, counting 8 more for
/// each value: a walk that stops once it has counted that many, and whose stack never holds more
/// than `limit / 8` values.
fn message_bytes_below(value: &Value, limit: usize) -> bool {
    let mut left = limit;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        let size = match v {
            Value::String(s) => s.len(),
            Value::Array(items) => items.len().saturating_mul(8),
            Value::Object(map) => map
                .keys()
                .map(String::len)
                .fold(map.len().saturating_mul(8), usize::saturating_add),
            _ => 8,
        };
        if size >= left {
            return false;
        }
        left -= size;
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    true
}

thread_local! {
    /// The buffer [`MessageHash::of`] writes canonical JSON into.
    static CANONICAL: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The last value [`MessageHash::of_repeated`] hashed, with its hash.
    static LAST_REPEATED: std::cell::RefCell<Option<(Value, MessageHash)>> =
        const { std::cell::RefCell::new(None) };
}

/// What the validity walk needs to know of a message, kept next to its hash so snapshots can be
/// judged without loading message bodies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageShape {
    /// `assistant`, `user`, `system`, `tool`, ... (the common roles are static strings, so
    /// references clone without allocating).
    pub role: Cow<'static, str>,
    /// Tool-call ids this message opens (tool_call parts).
    #[serde(default, skip_serializing_if = "CallIds::is_empty")]
    pub opens: CallIds,
    /// Tool-call ids this message answers (tool_call_response parts).
    #[serde(default, skip_serializing_if = "CallIds::is_empty")]
    pub closes: CallIds,
}

/// The tool-call ids of a message's shape, shared: a reference clones (and drops) without
/// allocating, and a message without ids holds nothing. Reads as a slice of ids; serialised as a
/// JSON array of strings, as the `Vec<String>` it replaced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallIds(Option<Arc<[String]>>);

impl CallIds {
    /// True when there are no ids.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

impl Deref for CallIds {
    type Target = [String];

    fn deref(&self) -> &[String] {
        self.0.as_deref().unwrap_or(&[])
    }
}

impl From<Vec<String>> for CallIds {
    fn from(ids: Vec<String>) -> Self {
        CallIds((!ids.is_empty()).then(|| ids.into()))
    }
}

impl FromIterator<String> for CallIds {
    fn from_iter<I: IntoIterator<Item = String>>(ids: I) -> Self {
        ids.into_iter().collect::<Vec<_>>().into()
    }
}

impl<'a> IntoIterator for &'a CallIds {
    type Item = &'a String;
    type IntoIter = std::slice::Iter<'a, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// For tests: ids compared with a list of them.
#[cfg(test)]
impl<T> PartialEq<Vec<T>> for CallIds
where
    String: PartialEq<T>,
{
    fn eq(&self, other: &Vec<T>) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a == b)
    }
}

impl Serialize for CallIds {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for CallIds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(deserializer).map(CallIds::from)
    }
}

impl MessageShape {
    /// Reads the shape of a canonical OTel GenAI message.
    pub fn of(message: &Value) -> Self {
        let role = role_name(
            message
                .get("role")
                .and_then(Value::as_str)
                .unwrap_or("other"),
        );
        let (mut opens, mut closes) = (Vec::new(), Vec::new());
        for part in message
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = part
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            match part.get("type").and_then(Value::as_str) {
                Some("tool_call") => opens.push(id),
                Some("tool_call_response") => closes.push(id),
                _ => {}
            }
        }
        MessageShape {
            role,
            opens: opens.into(),
            closes: closes.into(),
        }
    }
}

/// Roles shared by every reference that names them, rather than copied per message.
const COMMON_ROLES: [&str; 7] = [
    "user",
    "assistant",
    "system",
    "tool",
    "developer",
    "model",
    "other",
];

/// `role` as a shape's role: a static string for the common roles, else a copy.
fn role_name(role: &str) -> Cow<'static, str> {
    match COMMON_ROLES.iter().find(|r| **r == role) {
        Some(common) => Cow::Borrowed(common),
        None => Cow::Owned(role.to_string()),
    }
}

/// A message of a history: its hash (the key of its body) and its shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageRef {
    /// Key of the message body in the run's message store.
    pub hash: MessageHash,
    /// Role and tool-call ids, for the validity walk.
    pub shape: MessageShape,
}

impl MessageRef {
    /// Builds the reference of a message body.
    pub fn of(message: &Value) -> Self {
        Self {
            hash: MessageHash::of(message),
            shape: MessageShape::of(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_repeated_value_hashes_as_any_other() {
        let instructions = |n: usize| json!([{"type": "text", "content": "be brief ".repeat(n)}]);
        let large = instructions(KEPT_REPEATED_BYTES);
        assert!(!message_bytes_below(&large, KEPT_REPEATED_BYTES));
        assert!(message_bytes_below(&instructions(10), KEPT_REPEATED_BYTES));
        // The same value again, another one, the first again, one too large to keep, and a value
        // equal to the kept one but built anew: each gives the plain hash.
        for v in [
            instructions(1),
            instructions(1),
            instructions(2),
            instructions(1),
            large.clone(),
            large,
            json!(null),
            instructions(2),
        ] {
            assert_eq!(MessageHash::of_repeated(&v), MessageHash::of(&v), "{v}");
        }
    }

    #[test]
    fn key_order_does_not_change_the_hash() {
        let a: Value =
            serde_json::from_str(r#"{"role":"user","parts":[{"type":"text","content":"hi"}]}"#)
                .unwrap();
        let b: Value =
            serde_json::from_str(r#"{"parts":[{"content":"hi","type":"text"}],"role":"user"}"#)
                .unwrap();
        assert_eq!(MessageHash::of(&a), MessageHash::of(&b));
    }

    #[test]
    fn the_hash_is_the_truncated_sha256_of_the_canonical_json() {
        let big = "x".repeat(KEPT_BUFFER_BYTES + 10);
        for message in [
            json!({"role": "user", "parts": [{"type": "text", "content": "hi"}]}),
            json!({"role": "assistant", "parts": [{"type": "text", "content": big}]}),
            json!({"z": 1.5, "a": [null, true, {"b": "\u{e9}\"\n"}]}),
            json!({"role": "user"}),
        ] {
            let digest = Sha256::digest(serde_json::to_vec(&message).unwrap());
            assert_eq!(
                MessageHash::of(&message).0[..],
                digest[..MESSAGE_HASH_BYTES]
            );
        }
    }

    #[test]
    fn hashes_serialise_as_hex_and_reject_anything_else() {
        let hash = MessageHash::of(&json!({"role": "user"}));
        let text = serde_json::to_string(&hash).unwrap();
        assert_eq!(text, format!("\"{hash}\""));
        assert_eq!(text.len(), 2 + 2 * MESSAGE_HASH_BYTES);
        assert_eq!(serde_json::from_str::<MessageHash>(&text).unwrap(), hash);
        for bad in [
            "\"\"",
            "\"abc\"",
            "\"zz4fb9146c86a694441f6306ee7e2bf6\"",
            "7",
            "\"2c4fb9146c86a694441f6306ee7e2bf600\"",
        ] {
            assert!(serde_json::from_str::<MessageHash>(bad).is_err(), "{bad}");
        }
        assert_eq!(MessageHash::from_slice(&[0; 3]), None);
    }

    #[test]
    fn common_roles_are_static_and_every_role_reads_back() {
        for role in ["user", "assistant", "tool", "critic", ""] {
            let shape = MessageShape::of(&json!({"role": role, "parts": []}));
            assert_eq!(shape.role, role);
            assert_eq!(
                matches!(shape.role, Cow::Borrowed(_)),
                COMMON_ROLES.contains(&role)
            );
            let text = serde_json::to_string(&shape).unwrap();
            assert_eq!(
                text,
                format!("{{\"role\":{}}}", serde_json::to_string(role).unwrap())
            );
            assert_eq!(serde_json::from_str::<MessageShape>(&text).unwrap(), shape);
        }
        assert_eq!(MessageShape::of(&json!({"parts": []})).role, "other");
    }

    #[test]
    fn call_ids_read_and_write_as_the_list_they_were_and_clone_without_copying() {
        let m = json!({"role":"assistant","parts":[
            {"type":"tool_call","id":"a","name":"f"},
            {"type":"tool_call","id":"b","name":"g"}]});
        let shape = MessageShape::of(&m);
        let text = serde_json::to_string(&shape).unwrap();
        assert_eq!(
            text, r#"{"role":"assistant","opens":["a","b"]}"#,
            "closes skipped"
        );
        let back: MessageShape = serde_json::from_str(&text).unwrap();
        assert_eq!(back, shape);
        // The form before: both lists written out, empty ones too.
        let old: MessageShape =
            serde_json::from_str(r#"{"role":"user","opens":[],"closes":["a"]}"#).unwrap();
        assert!(
            old.opens.is_empty() && old.opens.0.is_none(),
            "an empty list holds nothing"
        );
        assert_eq!(old.closes, vec!["a"]);
        let copy = shape.clone();
        let (Some(one), Some(other)) = (&shape.opens.0, &copy.opens.0) else {
            panic!("ids held");
        };
        assert!(Arc::ptr_eq(one, other), "a clone shares the ids");
        assert!(MessageShape::of(&json!({"role":"user","parts":[]}))
            .closes
            .0
            .is_none());
    }

    #[test]
    fn shape_lists_tool_ids() {
        let m = json!({"role":"assistant","parts":[{"type":"tool_call","id":"a","name":"f"},{"type":"text","content":"x"}]});
        assert_eq!(MessageShape::of(&m).opens, vec!["a".to_string()]);
        let r =
            json!({"role":"user","parts":[{"type":"tool_call_response","id":"a","result":"1"}]});
        assert_eq!(MessageShape::of(&r).closes, vec!["a".to_string()]);
    }
}
