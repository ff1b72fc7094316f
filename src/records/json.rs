//! The JSON record codec: most stored records (runs, events, effects, facts, run meta and
//! state, log events, message bodies) are JSON documents. A record is encoded only when it reads
//! back: serde_json refuses to read a document nested [`MAX_RECORD_DEPTH`] + 1 levels or more.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::domain::write_canonical;

use super::codec::RecordError;

/// What a JSON record is called in errors.
const RECORD: &str = "JSON record";

/// Deepest nesting of arrays and objects a stored JSON record may have: serde_json refuses to
/// read a document nested 128 levels or more, so a deeper record would be written and never read
/// back. [`encode`] refuses one.
pub const MAX_RECORD_DEPTH: usize = 127;

/// serde_json's compact output, counting how deep arrays and objects nest as they are written,
/// so the depth of a record is known without reading its bytes again.
struct DepthCount<'a> {
    depth: &'a mut usize,
    deepest: &'a mut usize,
}

impl DepthCount<'_> {
    fn open(&mut self) {
        *self.depth += 1;
        *self.deepest = (*self.deepest).max(*self.depth);
    }

    fn close(&mut self) {
        *self.depth = self.depth.saturating_sub(1);
    }
}

impl serde_json::ser::Formatter for DepthCount<'_> {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open();
        writer.write_all(b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close();
        writer.write_all(b"]")
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open();
        writer.write_all(b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close();
        writer.write_all(b"}")
    }
}

/// The JSON form of a record, or why it cannot be stored (it does not serialise, or it would
/// not read back).
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, RecordError> {
    // Most records are a few hundred bytes: starting there spares the small steps of growth.
    let mut bytes = Vec::with_capacity(ENCODE_CAPACITY);
    encode_into(value, &mut bytes)?;
    Ok(bytes)
}

/// The capacity [`encode`] starts its output with.
const ENCODE_CAPACITY: usize = 256;

/// Appends the JSON form of a record to `out`, or gives why it cannot be stored (it does not
/// serialise, or it would not read back); on an error `out` is as it was. The nesting is counted
/// while the record is written (serde_json's compact output, byte for byte).
fn encode_into<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), RecordError> {
    let error = |reason: String| RecordError {
        record: RECORD,
        reason,
    };
    let start = out.len();
    let (mut depth, mut deepest) = (0, 0);
    let formatter = DepthCount {
        depth: &mut depth,
        deepest: &mut deepest,
    };
    let written = value.serialize(&mut serde_json::Serializer::with_formatter(
        &mut *out, formatter,
    ));
    if let Err(e) = written {
        out.truncate(start);
        return Err(error(e.to_string()));
    }
    if deepest > MAX_RECORD_DEPTH {
        out.truncate(start);
        return Err(too_deep(deepest));
    }
    Ok(())
}

/// Why a record nested `deepest` levels deep is not stored.
fn too_deep(deepest: usize) -> RecordError {
    RecordError {
        record: RECORD,
        reason: format!(
            "the record nests {deepest} levels deep, more than the {MAX_RECORD_DEPTH} a stored record may (it could not be read back)"
        ),
    }
}

/// [`encode`] of a JSON value (a message body): the same bytes, written by the message
/// hash's canonical writer, which scans strings a word at a time where serde_json's writer goes
/// byte by byte.
pub fn encode_value(value: &Value) -> Result<Vec<u8>, RecordError> {
    let mut out = Vec::new();
    let deepest = write_canonical(&mut out, value);
    if deepest > MAX_RECORD_DEPTH {
        return Err(too_deep(deepest));
    }
    Ok(out)
}

/// Decodes a JSON record.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, RecordError> {
    serde_json::from_slice(bytes).map_err(|e| RecordError {
        record: RECORD,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// How deep the arrays and objects of a JSON document nest, one byte at a time (strings
    /// and their escapes skipped): what [`encode`] counts as it writes.
    fn depth_byte_by_byte(bytes: &[u8]) -> usize {
        let (mut depth, mut deepest) = (0usize, 0usize);
        let (mut in_string, mut escaped) = (false, false);
        for &b in bytes {
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        deepest
    }

    /// JSON values with strings full of brackets, quotes and backslashes, nested up to
    /// `levels` arrays and objects deep.
    fn values(levels: u32) -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[\\[\\]{}\"\\\\a ]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(levels, 64, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[\\[{\"a]{0,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// A record is written byte for byte as serde_json writes it, its depth counted as
        /// the byte-at-a-time scan counts it, appended after what the buffer held.
        #[test]
        fn records_encode_as_serde_json_and_count_their_depth(value in values(8)) {
            let expected = serde_json::to_vec(&value).unwrap();
            proptest::prop_assert_eq!(&encode(&value).unwrap(), &expected);
            let mut out = b"kept".to_vec();
            encode_into(&value, &mut out).unwrap();
            proptest::prop_assert_eq!(&out[..4], b"kept");
            proptest::prop_assert_eq!(&out[4..], &expected[..]);
        }

        /// Around the limit, a record is refused exactly when it nests deeper than a stored
        /// record may, however its arrays and objects mix and whatever brackets its strings hold.
        #[test]
        fn records_past_the_depth_limit_are_refused(
            levels in (MAX_RECORD_DEPTH - 3)..(MAX_RECORD_DEPTH + 4),
            objects in proptest::collection::vec(proptest::bool::ANY, MAX_RECORD_DEPTH + 4),
            noise in values(2),
        ) {
            let mut value = noise.clone();
            for &object in &objects[..levels] {
                value = if object {
                    serde_json::json!({"[[{": "]]}}", "v": value, "w": noise})
                } else {
                    serde_json::json!(["{{[\\\"", value, noise])
                };
            }
            let depth = depth_byte_by_byte(&serde_json::to_vec(&value).unwrap());
            proptest::prop_assert!(depth >= levels);
            proptest::prop_assert_eq!(encode(&value).is_err(), depth > MAX_RECORD_DEPTH);
            // A value written by the canonical writer: the same bytes, the same refusal.
            match (encode(&value), encode_value(&value)) {
                (Ok(a), Ok(b)) => proptest::prop_assert_eq!(a, b),
                (Err(a), Err(b)) => proptest::prop_assert_eq!(a.reason, b.reason),
                (a, b) => proptest::prop_assert!(false, "{:?} against {:?}", a, b),
            }
        }
    }

    /// A JSON array nested `depth` levels.
    fn nested(depth: usize) -> Value {
        let mut v = Value::from(1);
        for _ in 0..depth {
            v = Value::Array(vec![v]);
        }
        v
    }

    #[test]
    fn the_deepest_record_allowed_reads_back_and_a_deeper_one_is_refused() {
        let deepest = nested(MAX_RECORD_DEPTH);
        let bytes = encode(&deepest).unwrap();
        assert_eq!(depth_byte_by_byte(&bytes), MAX_RECORD_DEPTH);
        assert_eq!(decode::<Value>(&bytes).unwrap(), deepest);
        let too_deep = nested(MAX_RECORD_DEPTH + 1);
        assert!(serde_json::from_slice::<Value>(&serde_json::to_vec(&too_deep).unwrap()).is_err());
        let error = encode(&too_deep).unwrap_err();
        assert!(error.reason.contains("128 levels deep"), "{error}");
        assert_eq!(encode_value(&too_deep).unwrap_err().reason, error.reason);
        assert_eq!(encode_value(&deepest).unwrap(), bytes);
        // A refused record leaves the buffer it was to be appended to as it was.
        let mut out = b"kept".to_vec();
        assert!(encode_into(&too_deep, &mut out).is_err());
        assert_eq!(out, b"kept");
        // Brackets inside strings do not count.
        let stringy = serde_json::json!({"a": "[[[[\"{{", "b": [["]]]]\\"]]});
        assert_eq!(depth_byte_by_byte(&encode(&stringy).unwrap()), 3);
        assert!(decode::<Value>(b"{not json").is_err());
    }
}
