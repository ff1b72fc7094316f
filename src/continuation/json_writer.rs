//! Compact JSON for [`Out`] trees, written straight into a byte buffer: the same bytes as
//! `serde_json::to_vec` (same key order, escaping and number formatting), without going through
//! serde's `Serializer` machinery. A continuation is mostly long message texts that need no
//! escaping, so strings are copied in runs: the next byte needing an escape is found 32 bytes at
//! a time (vector compares) and everything before it goes out with one `extend_from_slice`.

use super::Out;
use crate::domain::timestamp_bytes;
use serde_json::{Number, Value};

/// Writes `out` as compact JSON to the end of `buf`.
pub(super) fn write_out(buf: &mut Vec<u8>, out: &Out<'_>) {
    match out {
        Out::Null => buf.extend_from_slice(b"null"),
        Out::Bool(b) => write_bool(buf, *b),
        Out::U64(n) => buf.extend_from_slice(itoa::Buffer::new().format(*n).as_bytes()),
        Out::Str(s) => write_str(buf, s),
        Out::String(s) => write_str(buf, s),
        Out::Timestamp(t) => write_timestamp(buf, *t),
        Out::Written(json) => buf.extend_from_slice(json),
        Out::Raw(v) => write_value(buf, v),
        Out::Value(v) => write_value(buf, v),
        Out::Array(items) => {
            buf.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                write_out(buf, item);
            }
            buf.push(b']');
        }
        Out::Object(fields) => {
            buf.push(b'{');
            for (i, (key, value)) in fields.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                write_key(buf, key);
                write_out(buf, value);
            }
            buf.push(b'}');
        }
    }
}

/// The object of `fields` as compact JSON (the bytes [`write_out`] gives for
/// `Out::Object(fields)`), written into the buffer of its first [`Out::Written`] field: the
/// fields before it go in front of its bytes (one move within that buffer) and the ones after
/// it behind them. So an answer's long array, written in place by its renderer, is not copied
/// into a second buffer of its size. Without a written field, a new buffer of `capacity`.
pub(super) fn object_in_written(
    mut fields: Vec<(&'static str, Out<'_>)>,
    capacity: usize,
) -> Vec<u8> {
    let written = fields
        .iter_mut()
        .enumerate()
        .find_map(|(at, (_, value))| match value {
            Out::Written(json) => Some((at, std::mem::take(json))),
            _ => None,
        });
    let Some((at, mut buf)) = written else {
        let mut buf = Vec::with_capacity(capacity);
        write_out(&mut buf, &Out::Object(fields));
        return buf;
    };
    let mut head = Vec::with_capacity(1024);
    head.push(b'{');
    for (key, value) in &fields[..at] {
        write_key(&mut head, key);
        write_out(&mut head, value);
        head.push(b',');
    }
    write_key(&mut head, fields[at].0);
    let end = buf.len();
    buf.resize(end + head.len(), 0);
    buf.copy_within(..end, head.len());
    buf[..head.len()].copy_from_slice(&head);
    for (key, value) in &fields[at + 1..] {
        buf.push(b',');
        write_key(&mut buf, key);
        write_out(&mut buf, value);
    }
    buf.push(b'}');
    buf
}

/// Writes a `serde_json::Value` as compact JSON to the end of `buf` (objects in the map's own
/// iteration order, as serde_json serialises them).
pub(super) fn write_value(buf: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => buf.extend_from_slice(b"null"),
        Value::Bool(b) => write_bool(buf, *b),
        Value::Number(n) => write_number(buf, n),
        Value::String(s) => write_str(buf, s),
        Value::Array(items) => {
            buf.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                write_value(buf, item);
            }
            buf.push(b']');
        }
        Value::Object(map) => {
            buf.push(b'{');
            for (i, (key, value)) in map.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                write_key(buf, key);
                write_value(buf, value);
            }
            buf.push(b'}');
        }
    }
}

/// A `serde_json::Value` as compact JSON text: the same text as `value.to_string()`, written
/// by [`write_value`] instead of through `core::fmt` (a tool call's arguments and a structured
/// tool result are sent as JSON text in several formats, once per call of a long history).
pub(super) fn json_text(value: &Value) -> String {
    let mut buf = Vec::with_capacity(64);
    write_value(&mut buf, value);
    // Only whole strings of `value` and ASCII are written, so the bytes are UTF-8.
    String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Writes a time as its RFC 3339 text in quotes ([`crate::domain::format_timestamp`]).
#[inline]
pub(super) fn write_timestamp(buf: &mut Vec<u8>, nanos: crate::domain::Nanos) {
    // Digits, `-`, `:`, `.`, `T` and `Z`: nothing to escape.
    buf.push(b'"');
    buf.extend_from_slice(&timestamp_bytes(nanos));
    buf.push(b'"');
}

fn write_bool(buf: &mut Vec<u8>, b: bool) {
    buf.extend_from_slice(if b { b"true" } else { b"false" });
}

/// Integers as serde_json writes them (`itoa`); floats through `Number`'s `Display`, which is
/// serde_json's own formatting of the number (its `Serialize` and `Display` agree, also with
/// `arbitrary_precision`, where both write the stored digits).
fn write_number(buf: &mut Vec<u8>, n: &Number) {
    if let Some(u) = n.as_u64() {
        buf.extend_from_slice(itoa::Buffer::new().format(u).as_bytes());
    } else if let Some(i) = n.as_i64() {
        buf.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
    } else {
        buf.extend_from_slice(n.to_string().as_bytes());
    }
}

/// What a byte becomes inside a JSON string, as serde_json escapes it: 0 for itself, `u` for
/// `\u00XX`, otherwise the letter after the backslash. Only `"`, `\` and the control bytes below
/// 0x20 are escaped (not 0x7F, not `/`, not non-ASCII).
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0A] = b'n';
    table[0x0C] = b'f';
    table[0x0D] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `word` that is below 0x20, `"` or `\` (bytes in little-endian
/// order). Later bytes may be flagged spuriously by the borrow of an earlier flagged one, so
/// only the lowest flag is exact, which is all [`next_escape`] uses.
#[inline]
fn needs_escape(word: u64) -> u64 {
    // A byte below 0x20 has its high bit set after subtracting 0x20 and not before.
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    // Quote and backslash: the byte becomes zero after the xor; zero minus one sets the high bit.
    let quote = word ^ (ONES * u64::from(b'"'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control | quote | backslash) & HIGHS
}

/// Bytes looked at together by [`next_escape`]'s wide pass: two SSE2 vectors.
const WIDE: usize = 32;

/// True when some byte of `chunk` is below 0x20, `"` or `\`. Written as a branch-free OR over
/// the chunk so the compiler turns it into vector compares (SSE2 on x86_64: a few instructions
/// per 16 bytes instead of a SWAR round per 8).
#[inline]
fn chunk_needs_escape<const N: usize>(chunk: &[u8; N]) -> bool {
    let mut hit = false;
    for &b in chunk {
        hit |= (b < 0x20) | (b == b'"') | (b == b'\\');
    }
    hit
}

/// The index of the first byte of `bytes` that needs an escape, if any: 32 bytes at a time
/// while none is found, then eight at a time, then byte by byte.
#[inline]
fn next_escape(bytes: &[u8]) -> Option<usize> {
    let (wide, _) = bytes.as_chunks::<WIDE>();
    let mut at = 0;
    for chunk in wide {
        if chunk_needs_escape(chunk) {
            break;
        }
        at += WIDE;
    }
    next_escape_narrow(&bytes[at..]).map(|i| at + i)
}

/// [`next_escape`] eight bytes at a time.
#[inline]
fn next_escape_narrow(bytes: &[u8]) -> Option<usize> {
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let flags = needs_escape(u64::from_le_bytes(word));
        if flags != 0 {
            return Some(at + (flags.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| ESCAPE[usize::from(b)] != 0)
        .map(|i| at + i)
}

/// True when no byte of `bytes` needs an escape: [`short_is_plain`] up to [`SHORT`] bytes, two
/// overlapping 16-byte vector checks up to [`WIDE`], else 32 bytes at a time with the last
/// chunk overlapping the one before (tool-call ids, run ids and short texts are 17–64 bytes
/// long and would otherwise end in the eight-byte and byte-by-byte passes of [`next_escape`]).
#[inline]
fn is_plain(bytes: &[u8]) -> bool {
    if bytes.len() <= SHORT {
        return short_is_plain(bytes);
    }
    if let Some(tail) = bytes.last_chunk::<WIDE>() {
        let (chunks, _) = bytes.as_chunks::<WIDE>();
        return !chunks.iter().any(chunk_needs_escape) && !chunk_needs_escape(tail);
    }
    match (bytes.first_chunk::<16>(), bytes.last_chunk::<16>()) {
        (Some(head), Some(tail)) => !chunk_needs_escape(head) && !chunk_needs_escape(tail),
        _ => short_is_plain(bytes),
    }
}

/// Strings up to this long are checked whole with at most two word compares (see
/// [`short_is_plain`]).
const SHORT: usize = 16;

/// True when no byte of `bytes` (at most [`SHORT`] long) needs an escape: two overlapping
/// eight-byte words cover 8 to 16 bytes, two overlapping four-byte ones (padded with spaces)
/// cover 4 to 7, and shorter strings are looked at byte by byte. A word is flagged only when
/// one of its bytes needs an escape ([`needs_escape`]'s spurious flags follow a true one).
#[inline]
fn short_is_plain(bytes: &[u8]) -> bool {
    const SPACES: u64 = 0x2020_2020_0000_0000;
    if let (Some(head), Some(tail)) = (bytes.first_chunk::<8>(), bytes.last_chunk::<8>()) {
        let (head, tail) = (u64::from_le_bytes(*head), u64::from_le_bytes(*tail));
        return (needs_escape(head) | needs_escape(tail)) == 0;
    }
    if let (Some(head), Some(tail)) = (bytes.first_chunk::<4>(), bytes.last_chunk::<4>()) {
        let head = u64::from(u32::from_le_bytes(*head)) | SPACES;
        let tail = u64::from(u32::from_le_bytes(*tail)) | SPACES;
        return (needs_escape(head) | needs_escape(tail)) == 0;
    }
    bytes.iter().all(|&b| ESCAPE[usize::from(b)] == 0)
}

/// Writes `s` as a JSON string (quoted and escaped) to the end of `buf`. Inlined: an answer
/// writes tens of thousands of strings, most of them short and plain (the formats' keys and
/// kinds, ids), and those are copied here without a call.
#[inline]
pub(super) fn write_str(buf: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    if bytes.len() <= SHORT && short_is_plain(bytes) {
        buf.reserve(bytes.len() + 2);
        buf.push(b'"');
        buf.extend_from_slice(bytes);
        buf.push(b'"');
        return;
    }
    write_long_str(buf, bytes);
}

/// Writes an object's key and the `:` after it.
#[inline]
fn write_key(buf: &mut Vec<u8>, key: &str) {
    write_str(buf, key);
    buf.push(b':');
}

/// [`write_str`] for a string longer than [`SHORT`] or needing an escape: copied whole when
/// it needs none, else escaped in runs.
#[inline(never)]
fn write_long_str(buf: &mut Vec<u8>, bytes: &[u8]) {
    static HEX: [u8; 16] = *b"0123456789abcdef";
    buf.reserve(bytes.len() + 2);
    buf.push(b'"');
    if bytes.len() > SHORT && is_plain(bytes) {
        buf.extend_from_slice(bytes);
        buf.push(b'"');
        return;
    }
    let mut start = 0;
    while let Some(offset) = next_escape(&bytes[start..]) {
        let at = start + offset;
        buf.extend_from_slice(&bytes[start..at]);
        let byte = bytes[at];
        match ESCAPE[usize::from(byte)] {
            b'u' => buf.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xF)],
            ]),
            letter => buf.extend_from_slice(&[b'\\', letter]),
        }
        start = at + 1;
    }
    buf.extend_from_slice(&bytes[start..]);
    buf.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn an_object_written_into_its_written_field_is_the_object_written_whole() {
        let written = || Out::Written(br#"[{"a":1},"b"]"#.to_vec());
        let cases: Vec<Vec<(&'static str, Out<'_>)>> = vec![
            vec![("only", written())],
            vec![
                ("first", written()),
                ("after", Out::Str("x\"y")),
                ("n", Out::Null),
            ],
            vec![("before", Out::U64(7)), ("list", written())],
            vec![
                ("before", Out::Value(json!({"k": [1, "two"]}))),
                ("list", written()),
                ("after", Out::Bool(true)),
                ("second", written()),
            ],
            vec![
                ("none", Out::Str("written")),
                ("empty", Out::Array(Vec::new())),
            ],
            Vec::new(),
        ];
        for fields in cases {
            let whole = Out::Object(fields.clone()).to_json_vec();
            let into = object_in_written(fields, 16);
            assert_eq!(
                String::from_utf8_lossy(&into),
                String::from_utf8_lossy(&whole)
            );
        }
        // With room enough, the answer is the written field's own buffer.
        let mut list = Vec::with_capacity(1024);
        list.extend_from_slice(b"[1,2]");
        let at = list.as_ptr();
        let into = object_in_written(
            vec![("run", Out::Str("r")), ("list", Out::Written(list))],
            0,
        );
        assert_eq!(into, br#"{"run":"r","list":[1,2]}"#);
        assert_eq!(into.as_ptr(), at, "not copied into a buffer of its own");
    }

    fn same_as_serde(out: &Out<'_>) {
        let expected = serde_json::to_vec(out).expect("serde_json serialises every Out");
        let written = out.to_json_vec();
        assert_eq!(
            String::from_utf8_lossy(&written),
            String::from_utf8_lossy(&expected)
        );
        assert_eq!(written, expected);
    }

    #[test]
    fn every_control_byte_quote_backslash_and_del() {
        let all: String = (0u8..0x80).map(char::from).collect();
        same_as_serde(&Out::Str(&all));
        for byte in 0u8..0x80 {
            let one = char::from(byte).to_string();
            same_as_serde(&Out::String(one.clone()));
            // At every position of a 32-byte chunk and of an eight-byte word, and past the last
            // whole chunk and word.
            for pad in 0..70 {
                let text = format!("{}{one}{}", "a".repeat(pad), "é".repeat(pad % 3));
                same_as_serde(&Out::Str(&text));
            }
        }
        let text = "\u{7f}\u{80}\u{2028}😀/";
        same_as_serde(&Out::Str(text));
        assert_eq!(
            Out::Str(text).to_json_vec(),
            format!("\"{text}\"").into_bytes()
        );
        assert_eq!(
            Out::Str("\u{0}\u{8}\u{9}\u{a}\u{b}\u{c}\u{d}\u{1f}\"\\").to_json_vec(),
            b"\"\\u0000\\b\\t\\n\\u000b\\f\\r\\u001f\\\"\\\\\"".to_vec()
        );
    }

    #[test]
    fn an_escape_anywhere_in_a_medium_string_is_found() {
        // Lengths around the 16-byte halves and the overlapping last 32-byte chunk.
        for len in 1..=100 {
            assert!(is_plain(&vec![b'a'; len]), "{len}");
            for at in 0..len {
                for byte in [b'"', b'\\', b'\n', 0x1f] {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = byte;
                    assert!(!is_plain(&bytes), "{len} {at} {byte}");
                    let text = String::from_utf8(bytes).unwrap();
                    same_as_serde(&Out::Str(&text));
                }
            }
        }
    }

    #[test]
    fn json_text_is_the_values_own_text() {
        for value in [
            json!({"step": 3, "q": "a\"b\n", "nested": [1.5, null, {"z": true, "a": -2}]}),
            json!("text"),
            json!(null),
            json!([]),
            json!({"ü😀": "\u{1}"}),
        ] {
            assert_eq!(json_text(&value), value.to_string());
        }
    }

    #[test]
    fn empty_and_long_strings() {
        same_as_serde(&Out::Str(""));
        same_as_serde(&Out::Value(json!({"": ""})));
        let plain = "lorem ipsum dolor sit amet, ünïcødé 😀 ".repeat(1 << 15);
        assert!(plain.len() > 1 << 20);
        same_as_serde(&Out::Str(&plain));
        let mut escapes = plain.clone();
        escapes.push_str("\n\"tail\\\u{1}");
        escapes.insert_str(12_345, "\t\r");
        same_as_serde(&Out::String(escapes));
    }

    #[test]
    fn numbers_and_nesting() {
        let value = json!({
            "z": [0, 1, -1, u64::MAX, i64::MIN, 0.5, -0.0, 1e300, 1.5e-300, 123456789.125, 1e21],
            "a": {"nested": [[], {}, [null, true, false]]},
            "m": "x",
        });
        let out = Out::Object(vec![
            ("raw", Out::Raw(&value)),
            ("made", Out::Value(value.clone())),
            ("n", Out::U64(u64::MAX)),
            ("zero", Out::U64(0)),
            (
                "list",
                Out::Array(vec![Out::Null, Out::Bool(true), Out::Array(vec![])]),
            ),
            ("empty", Out::Object(vec![])),
            ("key \"quoted\"", Out::Str("v")),
        ]);
        same_as_serde(&out);
    }

    fn json_string() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[\\x00-\\x7f]{0,40}",
            "[a-z\"\\\\\\n\\t\\x00-\\x1f\\x7f é😀]{0,40}",
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            (-1000i32..1000, 1u32..1000)
                .prop_map(|(a, b)| Value::from(f64::from(a) / f64::from(b))),
            json_string().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((json_string(), inner), 0..8)
                    .prop_map(|fields| Value::Object(fields.into_iter().collect())),
            ]
        })
    }

    /// An `Out` tree owning its values (`Raw` and `Str` borrow from it when written).
    #[derive(Debug, Clone)]
    enum Tree {
        Null,
        Bool(bool),
        U64(u64),
        Str(String),
        String(String),
        Raw(Value),
        Value(Value),
        Array(Vec<Tree>),
        Object(Vec<(&'static str, Tree)>),
    }

    impl Tree {
        fn out(&self) -> Out<'_> {
            match self {
                Tree::Null => Out::Null,
                Tree::Bool(b) => Out::Bool(*b),
                Tree::U64(n) => Out::U64(*n),
                Tree::Str(s) => Out::Str(s),
                Tree::String(s) => Out::String(s.clone()),
                Tree::Raw(v) => Out::Raw(v),
                Tree::Value(v) => Out::Value(v.clone()),
                Tree::Array(items) => Out::Array(items.iter().map(Tree::out).collect()),
                Tree::Object(fields) => {
                    Out::Object(fields.iter().map(|(k, v)| (*k, v.out())).collect())
                }
            }
        }
    }

    fn tree() -> impl Strategy<Value = Tree> {
        const KEYS: &[&str] = &["role", "content", "", "a\"b", "tab\t", "ü😀", "role"];
        let leaf = prop_oneof![
            Just(Tree::Null),
            any::<bool>().prop_map(Tree::Bool),
            any::<u64>().prop_map(Tree::U64),
            json_string().prop_map(Tree::Str),
            json_string().prop_map(Tree::String),
            json_value().prop_map(Tree::Raw),
            json_value().prop_map(Tree::Value),
        ];
        leaf.prop_recursive(3, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Tree::Array),
                prop::collection::vec((prop::sample::select(KEYS), inner), 0..6)
                    .prop_map(Tree::Object),
            ]
        })
    }

    proptest! {
        #[test]
        fn writes_the_bytes_serde_json_writes(tree in tree()) {
            let out = tree.out();
            let expected = serde_json::to_vec(&out).expect("serde_json serialises every Out");
            prop_assert_eq!(out.to_json_vec(), expected);
        }

        #[test]
        fn json_text_matches_serde_json(value in json_value()) {
            prop_assert_eq!(json_text(&value), value.to_string());
        }

        #[test]
        fn strings_are_escaped_as_serde_json_escapes_them(text in json_string()) {
            let expected = serde_json::to_vec(&text).expect("a string serialises");
            prop_assert_eq!(Out::Str(&text).to_json_vec(), expected);
        }
    }
}
