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
/// bytes, the insides of strings (most of a record's bytes) skipped eight bytes at a time.
pub fn json_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut at = 0;
    while let Some(&b) = bytes.get(at) {
        at += 1;
        match b {
            b'"' => at = string_end(bytes, at),
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

/// The index just past the quote closing the string whose contents start at `at` (the end of
/// `bytes` when it is not closed); an escaped byte never closes it.
fn string_end(bytes: &[u8], mut at: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // True when one of the word's bytes is zero.
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS != 0;
    loop {
        // Eight bytes at a time while none of them is a quote or a backslash.
        while let Some(chunk) = bytes.get(at..at + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let w = u64::from_le_bytes(word);
            if zero_byte(w ^ (ONES * u64::from(b'"'))) || zero_byte(w ^ (ONES * u64::from(b'\\'))) {
                break;
            }
            at += 8;
        }
        match bytes.get(at) {
            None => return bytes.len(),
            Some(b'"') => return at + 1,
            Some(b'\\') => at += 2,
            Some(_) => at += 1,
        }
    }
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

    /// The byte-at-a-time depth count [`json_depth`] skips strings faster than.
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

    proptest::proptest! {
        /// Skipping strings a word at a time counts what the byte-at-a-time scan counts, on
        /// any bytes (brackets, quotes and backslashes inside and outside strings, cut
        /// anywhere).
        #[test]
        fn word_skipping_depth_equals_byte_by_byte(
            picks in proptest::collection::vec(0u8..12, 0..200),
        ) {
            let alphabet = b"[]{}\"\\ax:,\x80";
            let bytes: Vec<u8> = picks.iter().map(|&p| alphabet[usize::from(p) % alphabet.len()]).collect();
            proptest::prop_assert_eq!(json_depth(&bytes), depth_byte_by_byte(&bytes));
        }
    }

    #[test]
    fn strings_longer_than_a_word_hide_their_brackets() {
        let doc = br#"{"a":"[[[[[[[[[[[[[[[[ \" [[[[ ","b":[["x\\"],{"c":"]]]]]]]]]]]]"}]}"#;
        assert_eq!(json_depth(doc), 3);
        assert_eq!(json_depth(doc), depth_byte_by_byte(doc));
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
