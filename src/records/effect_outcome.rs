//! A ledger entry's outcome read straight from its stored JSON.
//!
//! A continuation needs, of every entry of a run's ledger, the call, the tool, the status and the
//! error or retry details ([`EffectOutcome`]); the stored [`crate::domain::ToolEffect`] also holds
//! the call's arguments, result and times. Reading it with serde parses every key into a buffer
//! and walks every skipped value token by token: about 7,800 instructions an entry of the
//! 1,000-step bench run, most of a cold continuation's ledger read. [`read`] finds the keys
//! and steps over the values it does not need by their brackets and quotes.
//!
//! It gives up ([`None`]) on anything but the plain shape the store writes: a key with an escape,
//! a repeated key, a missing field, a status it does not know, bytes after the object. The caller
//! then decodes with serde, which gives the same outcome or says what is wrong. The fields it
//! keeps are read exactly as serde reads them (a string with escapes or a retry value is handed
//! to serde_json); what it steps over is not validated, so bytes that are not JSON only in a
//! skipped value may give an outcome where serde gives an error. The store never writes such
//! bytes: what it writes is serde_json's own output.

use serde_json::Value;

use crate::domain::{EffectOutcome, EffectStatus};

/// The outcome of a stored ledger entry, or `None` when it is not in the plain shape (decode it
/// with serde then).
pub fn read(bytes: &[u8]) -> Option<EffectOutcome> {
    let mut r = Scan { bytes, at: 0 };
    r.ws();
    r.eat(b'{')?;
    let (mut id, mut tool, mut status) = (None, None, None);
    let (mut error, mut retry): (Option<Option<String>>, Option<Option<Value>>) = (None, None);
    r.ws();
    if r.peek() == Some(b'}') {
        return None;
    }
    loop {
        r.ws();
        let key = r.plain_string()?;
        r.ws();
        r.eat(b':')?;
        r.ws();
        let value = r.value()?;
        match key {
            b"tool_call_id" => set(&mut id, string(value)?)?,
            b"tool_name" => set(&mut tool, string(value)?)?,
            b"status" => set(&mut status, self::status(value)?)?,
            b"error" => set(&mut error, optional(value, string)?)?,
            b"retry" => set(
                &mut retry,
                optional(value, |v| serde_json::from_slice(v).ok())?,
            )?,
            _ => {}
        }
        r.ws();
        match r.next()? {
            b',' => continue,
            b'}' => break,
            _ => return None,
        }
    }
    r.ws();
    if r.at != bytes.len() {
        return None;
    }
    Some(EffectOutcome {
        tool_call_id: id?,
        tool_name: tool?,
        status: status?,
        error: error.flatten(),
        retry: retry.flatten(),
    })
}

/// Sets a field seen for the first time; a repeated key is not the plain shape.
fn set<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    match slot {
        Some(_) => None,
        None => {
            *slot = Some(value);
            Some(())
        }
    }
}

/// `null` or a value read by `read`.
fn optional<T>(value: &[u8], read: impl FnOnce(&[u8]) -> Option<T>) -> Option<Option<T>> {
    match value {
        b"null" => Some(None),
        _ => read(value).map(Some),
    }
}

/// A JSON string value (its quotes included) as serde reads it into a `String`.
fn string(value: &[u8]) -> Option<String> {
    let inner = value.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if inner.iter().any(|&b| b == b'\\' || b < 0x20) {
        // Escapes and the control characters serde refuses: serde's own reading.
        return serde_json::from_slice(value).ok();
    }
    std::str::from_utf8(inner).ok().map(str::to_owned)
}

/// The status as serde names it (snake case).
fn status(value: &[u8]) -> Option<EffectStatus> {
    Some(match value {
        b"\"requested\"" => EffectStatus::Requested,
        b"\"started\"" => EffectStatus::Started,
        b"\"completed\"" => EffectStatus::Completed,
        b"\"failed\"" => EffectStatus::Failed,
        b"\"unknown_after_crash\"" => EffectStatus::UnknownAfterCrash,
        b"\"waiting\"" => EffectStatus::Waiting,
        _ => return None,
    })
}

/// A cursor over the stored bytes.
struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// Steps over JSON whitespace.
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.at += 1;
        }
    }

    /// A key without escapes: its bytes between the quotes.
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.at;
        let len = memchr::memchr2(b'"', b'\\', &self.bytes[start..])?;
        if self.bytes[start + len] != b'"' {
            return None;
        }
        self.at = start + len + 1;
        Some(&self.bytes[start..start + len])
    }

    /// Steps over a string whose opening quote is behind the cursor.
    fn skip_string(&mut self) -> Option<()> {
        loop {
            let rest = self.bytes.get(self.at..)?;
            let found = memchr::memchr2(b'"', b'\\', rest)?;
            self.at += found + 1;
            if rest[found] == b'"' {
                return Some(());
            }
            // The escaped byte (a quote or a backslash among them) is not markup.
            self.at += 1;
        }
    }

    /// Steps over one value and gives its bytes. Objects and arrays are matched by their
    /// brackets, counted, not recursed into; nothing in them is validated.
    fn value(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        match self.next()? {
            b'"' => self.skip_string()?,
            b'{' | b'[' => {
                let mut depth = 1usize;
                while depth > 0 {
                    match self.next()? {
                        b'"' => self.skip_string()?,
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => depth -= 1,
                        _ => {}
                    }
                }
            }
            b',' | b'}' | b']' | b':' => return None,
            _ => {
                // A number, true, false or null: up to the next delimiter.
                while !matches!(
                    self.peek(),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
                ) {
                    self.at += 1;
                }
            }
        }
        Some(&self.bytes[start..self.at])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ToolEffect;
    use proptest::prelude::*;
    use serde_json::json;

    fn serde(bytes: &[u8]) -> Option<EffectOutcome> {
        serde_json::from_slice(bytes).ok()
    }

    fn effect(status: EffectStatus) -> ToolEffect {
        ToolEffect {
            tool_call_id: "call_1".into(),
            tool_name: "get_weather".into(),
            status,
            arguments: Some(json!({"city": "Paris", "nested": [{"a": "}]\"["}, 1.5e3, null]})),
            requested_at: Some("2026-11-29T03:00:00Z".into()),
            started_at: None,
            ended_at: None,
            result: Some(json!("it is \"sunny\" {")),
            error: None,
            idempotency_key: None,
            occurrence: 0,
            span_id: Some("00f067aa0ba902b7".into()),
            retry: None,
            duration_ms: Some(12),
            interaction: None,
            resolved_by_run_id: None,
        }
    }

    #[test]
    fn a_stored_effect_reads_as_serde_reads_it() {
        let mut failed = effect(EffectStatus::Failed);
        failed.error = Some("line 1\nsaid \"no\" \u{1F600}".into());
        failed.retry = Some(json!({"max_retries": 3, "prompt": "try again"}));
        // Long strings with a quote and a backslash well inside them.
        let mut long = effect(EffectStatus::Completed);
        long.tool_call_id = format!("{}\"{}", "i".repeat(30), "d".repeat(30));
        long.result = Some(json!(format!("{}\\\"}}{}", "r".repeat(40), "s".repeat(40))));
        for e in [effect(EffectStatus::Completed), failed, long] {
            let bytes = serde_json::to_vec(&e).unwrap();
            let fast = read(&bytes).expect("the plain shape");
            assert_eq!(Some(&fast), serde(&bytes).as_ref());
            assert_eq!(fast, EffectOutcome::from(&e));
        }
    }

    #[test]
    fn anything_but_the_plain_shape_is_left_to_serde() {
        for doc in [
            &br#"{"tool\u005fcall_id":"a","tool_name":"t","status":"failed"}"#[..],
            br#"{"tool_call_id":"a","tool_call_id":"b","tool_name":"t","status":"failed"}"#,
            br#"{"tool_name":"t","status":"failed"}"#,
            br#"{"tool_call_id":"a","tool_name":"t","status":"gone"}"#,
            br#"{"tool_call_id":"a","tool_name":"t","status":"failed"} x"#,
            br#"{"tool_call_id":1,"tool_name":"t","status":"failed"}"#,
            br#"{"tool_call_id":"a","tool_name":"t","status":"failed","error":5}"#,
            br#"{"tool_call_id":"a\u0000","tool_name":"t","status":"failed","#,
            b"{}",
            b"",
            b"[",
        ] {
            assert_eq!(read(doc), None, "{}", String::from_utf8_lossy(doc));
        }
        // Whitespace, a null error and an escaped id read as serde reads them.
        let doc = br#" { "tool_call_id" : "a\"b" , "tool_name":"t", "status":"waiting", "error":null, "x":[1,{"y":"]"}] } "#;
        assert_eq!(read(doc), serde(doc));
        assert!(read(doc).is_some());
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            any::<String>().prop_map(Value::String),
            "[\\\\\"{}\\[\\],:a-z ]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[a-z\"\\\\{}]{0,6}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_status() -> impl Strategy<Value = EffectStatus> {
        prop_oneof![
            Just(EffectStatus::Requested),
            Just(EffectStatus::Started),
            Just(EffectStatus::Completed),
            Just(EffectStatus::Failed),
            Just(EffectStatus::UnknownAfterCrash),
            Just(EffectStatus::Waiting),
        ]
    }

    proptest! {
        /// Every entry the store can write reads as serde reads it.
        #[test]
        fn every_written_entry_reads_as_with_serde(
            id in any::<String>(),
            tool in "[\\\\\"a-z_\u{e9}\n]{0,10}",
            status in arb_status(),
            arguments in prop::option::of(arb_json()),
            result in prop::option::of(arb_json()),
            error in prop::option::of(any::<String>()),
            retry in prop::option::of(arb_json()),
        ) {
            let mut e = effect(status);
            e.tool_call_id = id;
            e.tool_name = tool;
            e.arguments = arguments;
            e.result = result;
            e.error = error;
            e.retry = retry;
            let bytes = serde_json::to_vec(&e).unwrap();
            let fast = read(&bytes);
            prop_assert!(fast.is_some());
            prop_assert_eq!(fast, serde(&bytes));
        }

        /// Any bytes: no panic, and an outcome read from bytes serde reads is serde's.
        #[test]
        fn any_bytes_read_without_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let fast = read(&bytes);
            if let Some(expected) = serde(&bytes) {
                prop_assert!(fast.is_none() || fast == Some(expected));
            }
        }

        /// A written entry cut or with one byte changed: no panic, and where serde reads it the
        /// fast reading, if any, is serde's.
        #[test]
        fn damaged_entries_read_without_panic(
            arguments in prop::option::of(arb_json()),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<bool>(),
        ) {
            let mut e = effect(EffectStatus::Failed);
            e.arguments = arguments;
            e.error = Some("boom".into());
            let mut bytes = serde_json::to_vec(&e).unwrap();
            let i = at.index(bytes.len());
            if cut {
                bytes.truncate(i);
            } else {
                bytes[i] = byte;
            }
            let fast = read(&bytes);
            if let Some(expected) = serde(&bytes) {
                prop_assert!(fast.is_none() || fast == Some(expected));
            }
        }
    }
}
