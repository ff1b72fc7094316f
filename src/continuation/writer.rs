//! Writing a format's JSON in place while the history is walked, instead of first building an
//! [`Out`] tree of the whole answer and then serialising it. A 1,000-step history is tens of
//! thousands of objects; as a tree each is an allocation that is filled, walked again to be
//! written, and freed. Written in place, each field is a copy of its key (quoted and checked when
//! the program is compiled, see [`key!`](crate::key)) and of its value.
//!
//! The bytes are those `serde_json` writes for the same fields in the same order (compact, the
//! same escaping and number formatting), through the writer of [`json_writer`].

use std::borrow::Cow;

use serde_json::Value;

use super::json_writer;
use super::Out;
use crate::domain::Nanos;

/// An object key with its quotes and the colon after it (`"name":`), made by [`key!`](crate::key),
/// which checks when the program is compiled that the name needs no escape in JSON.
/// `N` is its length in bytes, so that copying it is a few moves rather than a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key<const N: usize>(&'static [u8; N]);

impl<const N: usize> Key<N> {
    /// The key for `quoted`, which must be `"name":`, `N` bytes long, with a name of printable
    /// bytes other than `"` and `\` (nothing to escape). Panics otherwise: at compile time when
    /// evaluated in a constant, as [`key!`](crate::key) does.
    pub const fn new(quoted: &'static str) -> Self {
        let Some(bytes) = quoted.as_bytes().first_chunk::<N>() else {
            panic!("a key is N bytes long")
        };
        assert!(quoted.len() == N, "a key is N bytes long");
        let n = N;
        assert!(
            n >= 3 && bytes[0] == b'"' && bytes[n - 2] == b'"' && bytes[n - 1] == b':',
            "a key is written as \"name\":"
        );
        let mut i = 1;
        while i < n - 2 {
            let b = bytes[i];
            assert!(
                b >= 0x20 && b != b'"' && b != b'\\',
                "a key's name needs no escape"
            );
            i += 1;
        }
        Key(bytes)
    }

    /// The key as written: `"name":`.
    pub fn as_bytes(self) -> &'static [u8; N] {
        self.0
    }

    /// The key's name, without quotes or colon.
    pub fn name(self) -> &'static str {
        std::str::from_utf8(self.0.get(1..N.saturating_sub(2)).unwrap_or(&[])).unwrap_or("")
    }
}

/// The [`Key`] for a literal name, checked when the program is compiled:
/// `key!("tool_call_id")`.
#[macro_export]
#[doc(hidden)]
macro_rules! key {
    ($name:literal) => {{
        const QUOTED: &str = concat!("\"", $name, "\":");
        const KEY: $crate::continuation::Key<{ QUOTED.len() }> =
            $crate::continuation::Key::new(QUOTED);
        KEY
    }};
}

/// The commas between the items of an array or the fields of an object being written: none
/// before the first.
#[derive(Debug, Default)]
pub struct Commas {
    started: bool,
}

impl Commas {
    /// Writes the comma the next item needs, if any.
    #[inline]
    pub fn next(&mut self, buf: &mut Vec<u8>) {
        if self.started {
            buf.push(b',');
        }
        self.started = true;
    }

    /// True before the first item.
    pub fn is_empty(&self) -> bool {
        !self.started
    }
}

/// An object being written at the end of a buffer: opened by [`Obj::open`], its fields written in
/// order, closed by [`Obj::close`].
pub struct Obj<'b> {
    buf: &'b mut Vec<u8>,
    commas: Commas,
}

impl<'b> Obj<'b> {
    /// Opens an object at the end of `buf`.
    #[inline]
    pub fn open(buf: &'b mut Vec<u8>) -> Self {
        buf.push(b'{');
        Self {
            buf,
            commas: Commas::default(),
        }
    }

    /// Writes `key` (after a comma when a field came before): the value is to be written next,
    /// to the buffer returned.
    #[inline]
    pub fn key<const N: usize>(&mut self, key: Key<N>) -> &mut Vec<u8> {
        self.commas.next(self.buf);
        self.buf.extend_from_slice(key.0);
        self.buf
    }

    /// A string field.
    #[inline]
    pub fn str<const N: usize>(&mut self, key: Key<N>, value: &str) {
        json_writer::write_str(self.key(key), value);
    }

    /// A field holding a value of the history, as it is.
    #[inline]
    pub fn value<const N: usize>(&mut self, key: Key<N>, value: &Value) {
        json_writer::write_value(self.key(key), value);
    }

    /// A field holding an [`Out`].
    pub fn out<const N: usize>(&mut self, key: Key<N>, value: &Out<'_>) {
        json_writer::write_out(self.key(key), value);
    }

    /// An unsigned integer field.
    #[inline]
    pub fn u64<const N: usize>(&mut self, key: Key<N>, value: u64) {
        let buf = self.key(key);
        buf.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    /// A time field, as RFC 3339 text.
    #[inline]
    pub fn timestamp<const N: usize>(&mut self, key: Key<N>, value: Nanos) {
        json_writer::write_timestamp(self.key(key), value);
    }

    /// A `null` field.
    #[inline]
    pub fn null<const N: usize>(&mut self, key: Key<N>) {
        self.key(key).extend_from_slice(b"null");
    }

    /// Closes the object.
    #[inline]
    pub fn close(self) {
        self.buf.push(b'}');
    }
}

/// Sets aside room in a renderer's (empty) buffer: the caller's room when it gave some (it knows
/// the size of the last answer in the format), else `per_message` bytes for each of `messages`
/// (a guess for short texts; a longer history doubles its way up from there) and a few
/// kilobytes for the answer's other fields, which go in front of the array once it is written
/// ([`super::json_writer::object_in_written`]).
pub fn room(buf: &mut Vec<u8>, messages: usize, per_message: usize) {
    if buf.capacity() == 0 {
        buf.reserve(messages.saturating_mul(per_message).saturating_add(4096));
    }
}

/// A content part of an OpenAI message: a text, or a media part as the renderer made it.
pub enum Content<'a> {
    /// A text part.
    Text(Cow<'a, str>),
    /// A media part.
    Media(Out<'a>),
}

/// The texts of `content` joined by blank lines (its media left out): what a message whose
/// content must be one string carries.
pub fn joined_texts(content: &[Content<'_>]) -> String {
    let texts: Vec<&str> = content
        .iter()
        .filter_map(|c| match c {
            Content::Text(t) => Some(t.as_ref()),
            Content::Media(_) => None,
        })
        .collect();
    texts.join("\n\n")
}

/// Writes `content` as a list of parts, each text as `{"type": text_type, "text": ...}`.
pub fn write_content(buf: &mut Vec<u8>, content: &[Content<'_>], text_type: &str) {
    buf.push(b'[');
    let mut items = Commas::default();
    for c in content {
        items.next(buf);
        match c {
            Content::Text(text) => {
                let mut p = Obj::open(buf);
                p.str(key!("type"), text_type);
                p.str(key!("text"), text);
                p.close();
            }
            Content::Media(media) => json_writer::write_out(buf, media),
        }
    }
    buf.push(b']');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::obj;
    use serde_json::json;

    #[test]
    fn fields_are_written_as_serde_json_writes_them() {
        let history = json!({"nested": ["a\"b", 1.5, null, {"k\n": true}]});
        let mut buf = Vec::new();
        let mut items = Commas::default();
        buf.push(b'[');
        for n in 0..2u64 {
            items.next(&mut buf);
            let mut o = Obj::open(&mut buf);
            o.str(key!("text"), "line\nbreak \"quoted\" é");
            o.value(key!("raw"), &history);
            o.out(key!("out"), &obj! {"inner" => n});
            o.u64(key!("n"), n);
            o.timestamp(key!("at"), 1_795_860_000_123_456_789);
            o.null(key!("none"));
            o.close();
        }
        items.next(&mut buf);
        Obj::open(&mut buf).close();
        buf.push(b']');
        let expected: Vec<Value> = (0..2u64)
            .map(|n| {
                json!({"text": "line\nbreak \"quoted\" é", "raw": history, "out": {"inner": n},
                       "n": n, "at": "2026-11-28T10:00:00.123456789Z", "none": null})
            })
            .chain([json!({})])
            .collect();
        // serde_json keeps its map's keys sorted; these objects are compared parsed, and each
        // key's order is the order written.
        let parsed: Vec<Value> = serde_json::from_slice(&buf).unwrap();
        assert_eq!(parsed, expected);
        let text = String::from_utf8(buf).unwrap();
        assert!(text.starts_with(
            r#"[{"text":"line\nbreak \"quoted\" é","raw":{"nested":["a\"b",1.5,null,{"k\n":true}]},"out":{"inner":0},"n":0,"at":"2026-11-28T10:00:00.123456789Z","none":null},"#
        ));
        assert!(text.ends_with(",{}]"));
    }

    #[test]
    fn a_key_knows_its_name_and_a_name_to_escape_is_refused() {
        assert_eq!(key!("tool_call_id").name(), "tool_call_id");
        assert_eq!(key!("").name(), "");
        assert_eq!(Key::<4>::new("\"a\":").name(), "a");
        for bad in ["\"\"\":", "\"\\\":", "\"\n\":", "ab:", "\"a\"", "\"ab\":"] {
            assert!(
                std::panic::catch_unwind(|| Key::<4>::new(bad)).is_err(),
                "{bad:?} was taken as a key"
            );
        }
    }
}
