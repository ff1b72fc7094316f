//! The canonical JSON text of a message, as hashed: byte for byte what `serde_json::to_writer`
//! writes for a `serde_json::Value` (compact, object keys in the map's sorted order, strings
//! escaped as serde_json escapes them, numbers formatted by serde_json), written directly into
//! a buffer. Strings, most of a message's bytes, are scanned eight bytes at a time for the few
//! bytes JSON escapes.

use serde_json::Value;

/// Appends the canonical JSON of `value` to `out` and gives how deep its arrays and objects nest
/// (0 for a scalar).
///
/// Recursive over arrays and objects, like serde_json's own writer it replaces: the values
/// hashed come from serde_json's parser (at most 128 levels) or from the interpreter's builders,
/// which cut them to a bounded depth.
pub(super) fn write(out: &mut Vec<u8>, value: &Value) -> usize {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        // serde_json's own number formatting; writing into a `Vec` cannot fail.
        Value::Number(n) => {
            let _ = serde_json::to_writer(&mut *out, n);
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            let mut deepest = 0;
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                deepest = deepest.max(write(out, item));
            }
            out.push(b']');
            return deepest + 1;
        }
        Value::Object(map) => {
            let mut deepest = 0;
            out.push(b'{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, key);
                out.push(b':');
                deepest = deepest.max(write(out, item));
            }
            out.push(b'}');
            return deepest + 1;
        }
    }
    0
}

/// A word with every byte set to `b`.
const fn splat(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

const LOW_BITS: u64 = splat(0x01);
const HIGH_BITS: u64 = splat(0x80);

/// True when some byte of `word` needs escaping in JSON: a control byte (below 0x20), `"` or
/// `\`. Exact for the word as a whole (the usual zero-byte test: `(x - 0x01..) & !x & 0x80..`
/// is non-zero if and only if a byte of `x` is zero, and `(x - 0x20..) & !x & 0x80..` if and only
/// if a byte is below 0x20).
fn needs_escape(word: u64) -> bool {
    let control = word.wrapping_sub(splat(0x20)) & !word;
    let quote = word ^ splat(b'"');
    let backslash = word ^ splat(b'\\');
    let quote = quote.wrapping_sub(LOW_BITS) & !quote;
    let backslash = backslash.wrapping_sub(LOW_BITS) & !backslash;
    (control | quote | backslash) & HIGH_BITS != 0
}

/// The escape of one byte as serde_json writes it: `None` for bytes written as they are.
fn escape(byte: u8) -> Option<&'static [u8]> {
    Some(match byte {
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        0x08 => b"\\b",
        0x09 => b"\\t",
        0x0A => b"\\n",
        0x0C => b"\\f",
        0x0D => b"\\r",
        0x00..=0x1F => return Some(&CONTROL[byte as usize]),
        _ => return None,
    })
}

/// `\u00XX` (lowercase hex, as serde_json writes it) for every control byte.
static CONTROL: [[u8; 6]; 32] = {
    let hex = b"0123456789abcdef";
    let mut table = [[0u8; 6]; 32];
    let mut b = 0;
    while b < 32 {
        table[b] = [b'\\', b'u', b'0', b'0', hex[b >> 4], hex[b & 0xF]];
        b += 1;
    }
    table
};

/// The word of an eight-byte chunk.
fn word(chunk: &[u8]) -> u64 {
    // Chunks are eight bytes; anything else (never) reads as a word to look at byte by byte.
    u64::from_ne_bytes(<[u8; 8]>::try_from(chunk).unwrap_or([0; 8]))
}

/// Appends `s` as a JSON string literal.
fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // Bytes from `start` to `i` are written as they are, in one copy.
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Words with nothing to escape are passed over.
        let clean = bytes[i..]
            .chunks_exact(8)
            .take_while(|c| !needs_escape(word(c)))
            .count();
        i += 8 * clean;
        let rest = &bytes[i..];
        if rest.len() < 8 {
            // The tail, padded with spaces (never escaped).
            let mut tail = [b' '; 8];
            tail[..rest.len()].copy_from_slice(rest);
            if !needs_escape(u64::from_ne_bytes(tail)) {
                break;
            }
        }
        // A word (or the tail) with a byte to escape: byte by byte through it.
        let end = bytes.len().min(i + 8);
        while i < end {
            if let Some(escaped) = escape(bytes[i]) {
                out.extend_from_slice(&bytes[start..i]);
                out.extend_from_slice(escaped);
                start = i + 1;
            }
            i += 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn canonical(value: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        write(&mut out, value);
        out
    }

    #[test]
    fn every_byte_class_is_written_as_serde_json_writes_it() {
        let all: String = (0u32..0x250).filter_map(char::from_u32).collect();
        for s in [
            all.clone(),
            all.repeat(3),
            "plain ascii text of some length, with no escapes at all".into(),
            "\"\\\u{7f}\u{1f}\u{0}/é😀".into(),
            String::new(),
            "1234567\"".into(),
            "12345678\n123456789".into(),
        ] {
            let v = Value::String(s);
            assert_eq!(canonical(&v), serde_json::to_vec(&v).unwrap());
        }
        let v = json!({"z": [1, -2, 1.5, 1e300, 0.1, null, true, false, {}],
            "a": {"b\n": "c\u{1}", "": []}, "é": u64::MAX, "m": i64::MIN});
        assert_eq!(canonical(&v), serde_json::to_vec(&v).unwrap());
    }

    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            ".{0,40}".prop_map(Value::String),
            proptest::collection::vec(0u8..0x80, 0..40)
                .prop_map(|b| Value::String(b.into_iter().map(char::from).collect())),
        ];
        leaf.prop_recursive(6, 64, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(".{0,12}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn the_word_test_finds_exactly_the_bytes_to_escape() {
        for b in 0..=255u8 {
            for at in 0..8 {
                for fill in [b'a', 0x80, 0xff, b' ', 0x21, 0x5d] {
                    let mut w = [fill; 8];
                    w[at] = b;
                    let expected = w.iter().any(|&x| escape(x).is_some());
                    assert_eq!(needs_escape(u64::from_ne_bytes(w)), expected, "{w:?}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn the_word_test_is_exact(w in any::<[u8; 8]>()) {
            let expected = w.iter().any(|&x| escape(x).is_some());
            prop_assert_eq!(needs_escape(u64::from_ne_bytes(w)), expected);
        }

        #[test]
        fn canonical_text_is_serde_jsons(value in any_value()) {
            prop_assert_eq!(canonical(&value), serde_json::to_vec(&value).unwrap());
        }
    }
}
