//! The JSON record codec: most stored records (runs, events, effects, facts, run meta and
//! state, log events, message bodies) are JSON documents. A record is encoded only when it reads
//! back: serde_json refuses to read a document nested [`MAX_RECORD_DEPTH`] + 1 levels or more.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::codec::RecordError;

/// What a JSON record is called in errors.
const RECORD: &str = "JSON record";

/// Deepest nesting of arrays and objects a stored JSON record may have: serde_json refuses to
/// read a document nested 128 levels or more, so a deeper record would be written and never read
/// back. [`encode`] refuses one.
pub const MAX_RECORD_DEPTH: usize = 127;

/// How deep the arrays and objects of a JSON document nest (0 for a scalar); one pass over its
/// bytes.
pub fn json_depth(bytes: &[u8]) -> usize {
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

/// The JSON form of a record, or why it cannot be stored (it does not serialise, or it would
/// not read back).
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, RecordError> {
    let error = |reason: String| RecordError {
        record: RECORD,
        reason,
    };
    let bytes = serde_json::to_vec(value).map_err(|e| error(e.to_string()))?;
    let depth = json_depth(&bytes);
    if depth > MAX_RECORD_DEPTH {
        return Err(error(format!(
            "the record nests {depth} levels deep, more than the {MAX_RECORD_DEPTH} a stored record may (it could not be read back)"
        )));
    }
    Ok(bytes)
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
        assert_eq!(json_depth(&bytes), MAX_RECORD_DEPTH);
        assert_eq!(decode::<Value>(&bytes).unwrap(), deepest);
        let too_deep = nested(MAX_RECORD_DEPTH + 1);
        assert!(serde_json::from_slice::<Value>(&serde_json::to_vec(&too_deep).unwrap()).is_err());
        let error = encode(&too_deep).unwrap_err();
        assert!(error.reason.contains("levels deep"), "{error}");
        // Brackets inside strings do not count.
        assert_eq!(json_depth(br#"{"a":"[[[[\"{{"}"#), 1);
        assert!(decode::<Value>(b"{not json").is_err());
    }
}
