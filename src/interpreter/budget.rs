//! The interpreter's budget on sender data: the per-span caps a span (or log record) must meet
//! to be interpreted ([`check_span`], [`check_log`], [`check_interpreted`]), and the one
//! nesting-depth cut ([`Cut`]) applied to every JSON value the interpreter keeps, so that every
//! record stepline writes stays well under serde_json's 128-level read limit and reads back.
//!
//! A span over a cap is not interpreted (the caller still accepts and forwards it, and says so
//! in the OTLP `partial_success`). A value nested deeper than `max_nesting_depth` is kept: the
//! part below the cap is replaced by its JSON text (bounded in length), and the cut is noted.

use std::collections::BTreeSet;

use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value;

use super::fact::Interpreted;
use crate::domain::MessageRef;
use crate::limits::Limits;
use crate::service_error::{ServiceError, ServiceErrorCode};

/// Why a span or a log record gave no interpretation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotInterpreted {
    /// It is not an agent run, model request, tool call or grouping span (or, for a log record,
    /// not a legacy GenAI event of a span).
    #[error("not an agent span")]
    NotAgentSpan,
    /// It is over a per-span cap: accepted and forwarded, but not interpreted.
    #[error(transparent)]
    OverLimit(#[from] OverLimit),
}

impl ServiceError for NotInterpreted {
    fn error_code(&self) -> ServiceErrorCode {
        ServiceErrorCode::BadRequest
    }
}

/// The per-span cap a span or a log record is over (see [`Limits`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverLimit {
    /// Too many attributes on one span, span event or log record.
    #[error("{count} attributes on one {place} (max_attributes_per_span is {max})")]
    Attributes {
        /// `span`, `span event` or `log record`.
        place: &'static str,
        /// Attributes found.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// Too many events on one span.
    #[error("{count} events on one span (max_events_per_span is {max})")]
    Events {
        /// Events found.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// An attribute key (or a key inside a structured value) is too long.
    #[error("an attribute key of {bytes} bytes (max_attribute_key_bytes is {max})")]
    KeyBytes {
        /// Bytes of the key.
        bytes: usize,
        /// The cap.
        max: usize,
    },
    /// An attribute value (or a log record body) is too large.
    #[error("an attribute value of {bytes} or more bytes (max_attribute_value_bytes is {max})")]
    ValueBytes {
        /// Bytes counted when the cap was passed.
        bytes: usize,
        /// The cap.
        max: usize,
    },
    /// Too many tool calls in one model response (or tool results in one message).
    #[error("{count} tool calls in one message (max_tool_calls_per_response is {max})")]
    ToolCalls {
        /// Calls found.
        count: usize,
        /// The cap.
        max: usize,
    },
}

/// Checks a span against the per-span caps: attribute and event counts, key and value sizes.
/// Linear in the span's size; stops at the first cap passed.
pub fn check_span(span: &Span, limits: &Limits) -> Result<(), OverLimit> {
    if span.events.len() > limits.max_events_per_span {
        return Err(OverLimit::Events {
            count: span.events.len(),
            max: limits.max_events_per_span,
        });
    }
    check_attributes(&span.attributes, "span", limits)?;
    for event in &span.events {
        check_attributes(&event.attributes, "span event", limits)?;
    }
    Ok(())
}

/// Checks a log record against the per-span caps: its attributes, and its body as a value.
pub fn check_log(record: &LogRecord, limits: &Limits) -> Result<(), OverLimit> {
    check_attributes(&record.attributes, "log record", limits)?;
    if let Some(body) = &record.body {
        check_value(body, limits)?;
    }
    Ok(())
}

/// Checks what an interpretation holds against the caps only known once content is read: tool
/// calls in one response, and tool calls or results in one message.
pub fn check_interpreted(interpreted: &Interpreted, limits: &Limits) -> Result<(), OverLimit> {
    let max = limits.max_tool_calls_per_response;
    let calls = interpreted.fact.requested_calls.len();
    if calls > max {
        return Err(OverLimit::ToolCalls { count: calls, max });
    }
    let fact = &interpreted.fact;
    let lists = [
        fact.input.as_deref().map(Vec::as_slice),
        fact.output.as_deref(),
        fact.all_messages.as_deref(),
    ];
    for message in lists.into_iter().flatten().flatten() {
        check_shape(message, max)?;
    }
    Ok(())
}

fn check_shape(message: &MessageRef, max: usize) -> Result<(), OverLimit> {
    let count = message.shape.opens.len().max(message.shape.closes.len());
    if count > max {
        return Err(OverLimit::ToolCalls { count, max });
    }
    Ok(())
}

/// Checks one list of attributes: its length, then every key and value.
fn check_attributes(
    attributes: &[KeyValue],
    place: &'static str,
    limits: &Limits,
) -> Result<(), OverLimit> {
    if attributes.len() > limits.max_attributes_per_span {
        return Err(OverLimit::Attributes {
            place,
            count: attributes.len(),
            max: limits.max_attributes_per_span,
        });
    }
    for kv in attributes {
        check_key(&kv.key, limits)?;
        if let Some(value) = &kv.value {
            check_value(value, limits)?;
        }
    }
    Ok(())
}

fn check_key(key: &str, limits: &Limits) -> Result<(), OverLimit> {
    if key.len() > limits.max_attribute_key_bytes {
        return Err(OverLimit::KeyBytes {
            bytes: key.len(),
            max: limits.max_attribute_key_bytes,
        });
    }
    Ok(())
}

/// Checks one value: the bytes of its strings, keys and scalars add up to at most
/// `max_attribute_value_bytes`, and every key inside it is within `max_attribute_key_bytes`.
/// Walks with an explicit stack, so nesting costs no call depth.
fn check_value(value: &AnyValue, limits: &Limits) -> Result<(), OverLimit> {
    let max = limits.max_attribute_value_bytes;
    // A scalar (almost every attribute) needs no walk.
    let scalar = match &value.value {
        Some(Any::StringValue(s)) => Some(s.len()),
        Some(Any::BytesValue(b)) => Some(b.len()),
        Some(Any::ArrayValue(_) | Any::KvlistValue(_)) => None,
        _ => Some(8),
    };
    if let Some(bytes) = scalar {
        return match bytes > max {
            true => Err(OverLimit::ValueBytes { bytes, max }),
            false => Ok(()),
        };
    }
    let mut bytes = 0usize;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        bytes = bytes.saturating_add(match &v.value {
            Some(Any::StringValue(s)) => s.len(),
            Some(Any::BytesValue(b)) => b.len(),
            Some(Any::ArrayValue(a)) => {
                stack.extend(a.values.iter());
                1
            }
            Some(Any::KvlistValue(kv)) => {
                let mut keys = 1usize;
                for entry in &kv.values {
                    check_key(&entry.key, limits)?;
                    keys = keys.saturating_add(entry.key.len());
                    stack.extend(entry.value.as_ref());
                }
                keys
            }
            _ => 8,
        });
        if bytes > max {
            return Err(OverLimit::ValueBytes { bytes, max });
        }
    }
    Ok(())
}

/// The nesting depth of a value: 0 for a scalar, 1 for an array or object of scalars, and so
/// on. Iterative.
pub fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(items) => {
                deepest = deepest.max(d);
                stack.extend(items.iter().map(|i| (i, d + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(d);
                stack.extend(map.values().map(|i| (i, d + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Whether a value's nesting depth is at most `max`, without walking past the cap.
pub fn within_depth(value: &Value, max: usize) -> bool {
    /// Recursive, at most `max` + 1 levels deep (the caller bounds `max`): no stack to allocate.
    fn walk(v: &Value, d: usize, max: usize) -> bool {
        match v {
            Value::Array(_) | Value::Object(_) if d > max => false,
            Value::Array(items) => items.iter().all(|c| walk(c, d + 1, max)),
            Value::Object(map) => map.values().all(|c| walk(c, d + 1, max)),
            _ => true,
        }
    }
    if max <= MAX_KEPT_DEPTH {
        return walk(value, 1, max);
    }
    let mut stack = vec![(value, 1usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(_) | Value::Object(_) if d > max => return false,
            Value::Array(items) => stack.extend(items.iter().map(|c| (c, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|c| (c, d + 1))),
            _ => {}
        }
    }
    true
}

/// The most levels a kept value may have: stored records wrap values in a few levels of their
/// own (a run's state holds a ledger entry holding an effect holding the arguments), and every
/// record must stay under serde_json's 128-level read limit.
pub const MAX_KEPT_DEPTH: usize = 100;

/// The depth budget of one interpretation: cuts values at `max_nesting_depth` and remembers
/// what it cut, for the fact's warnings.
#[derive(Debug)]
pub struct Cut {
    depth: usize,
    text_bytes: usize,
    cut: BTreeSet<&'static str>,
}

impl Cut {
    /// The budget of `limits`: values keep at most `max_nesting_depth` levels (at most
    /// [`MAX_KEPT_DEPTH`], whatever the configuration), and a part cut off keeps at most
    /// `max_attribute_value_bytes` of its JSON text.
    pub fn new(limits: &Limits) -> Self {
        Self {
            depth: limits.max_nesting_depth.clamp(1, MAX_KEPT_DEPTH),
            text_bytes: limits.max_attribute_value_bytes,
            cut: BTreeSet::new(),
        }
    }

    /// The nesting levels values keep.
    pub fn max_depth(&self) -> usize {
        self.depth
    }

    /// Cuts `value` (named `what` in the warning) to the depth budget.
    pub fn apply(&mut self, what: &'static str, value: &mut Value) {
        if cut_value(value, self.depth, self.text_bytes) > 0 {
            self.cut.insert(what);
        }
    }

    /// Cuts an optional value.
    pub fn apply_opt(&mut self, what: &'static str, value: &mut Option<Value>) {
        if let Some(v) = value {
            self.apply(what, v);
        }
    }

    /// The warnings of the cuts made, one per kind of value cut.
    pub fn warnings(&self) -> Vec<String> {
        self.cut
            .iter()
            .map(|what| {
                format!(
                    "{what} nested deeper than {} levels: the deeper parts are kept as JSON text",
                    self.depth
                )
            })
            .collect()
    }
}

/// Replaces every array or object of `value` that sits deeper than `max` levels by a string
/// holding its JSON text (at most `text_bytes` of it), so `value` keeps at most `max` levels.
/// Returns how many parts were cut. Iterative.
pub fn cut_value(value: &mut Value, max: usize, text_bytes: usize) -> usize {
    /// Recursive, at most `max` + 1 levels deep (the caller bounds `max`): no stack to allocate.
    fn walk(v: &mut Value, d: usize, max: usize, text_bytes: usize) -> usize {
        match v {
            Value::Array(_) | Value::Object(_) if d > max => {
                *v = Value::String(json_text(v, text_bytes));
                1
            }
            Value::Array(items) => items
                .iter_mut()
                .map(|i| walk(i, d + 1, max, text_bytes))
                .sum(),
            Value::Object(map) => map
                .values_mut()
                .map(|i| walk(i, d + 1, max, text_bytes))
                .sum(),
            _ => 0,
        }
    }
    if max <= MAX_KEPT_DEPTH {
        return walk(value, 1, max, text_bytes);
    }
    let mut cuts = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((v, d)) = stack.pop() {
        if !(v.is_array() || v.is_object()) {
            continue;
        }
        if d > max {
            *v = Value::String(json_text(v, text_bytes));
            cuts += 1;
            continue;
        }
        match v {
            Value::Array(items) => stack.extend(items.iter_mut().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values_mut().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    cuts
}

/// The JSON text of a value, cut to at most `max_bytes` (at a character boundary). The values
/// the interpreter holds are at most a few levels deeper than serde_json's parse limit (see
/// `attributes::MAX_BUILD_DEPTH`), so serialising them recursively is safe.
pub fn json_text(value: &Value, max_bytes: usize) -> String {
    let mut out = Bounded {
        bytes: Vec::new(),
        max: max_bytes,
    };
    // An error here only means the text reached its bound.
    let _ = serde_json::to_writer(&mut out, value);
    text_prefix(out.bytes, max_bytes)
}

/// The longest valid UTF-8 prefix of `bytes` of at most `max` bytes.
pub(super) fn text_prefix(mut bytes: Vec<u8>, max: usize) -> String {
    bytes.truncate(max);
    match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).unwrap_or_default()
        }
    }
}

/// A writer that takes at most `max` bytes, then fails.
struct Bounded {
    bytes: Vec<u8>,
    max: usize,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.max.saturating_sub(self.bytes.len());
        if room == 0 {
            return Err(std::io::Error::other("text bound reached"));
        }
        let n = room.min(buf.len());
        self.bytes.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut v = json!("leaf");
        for i in 0..levels {
            v = if i % 2 == 0 {
                json!({ "k": v })
            } else {
                json!([v])
            };
        }
        v
    }

    #[test]
    fn depth_counts_levels() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!([1])), 1);
        assert_eq!(depth(&nested(40)), 40);
        assert!(within_depth(&nested(40), 40));
        assert!(!within_depth(&nested(41), 40));
    }

    #[test]
    fn a_cut_value_keeps_the_cap_and_its_deeper_part_as_text() {
        for levels in [0, 1, 2, 63, 64, 65, 100, 127] {
            let original = nested(levels);
            let mut v = original.clone();
            let cuts = cut_value(&mut v, 64, 1 << 20);
            assert!(depth(&v) <= 64, "{levels}");
            assert_eq!(cuts > 0, levels > 64, "{levels}");
            // Nothing is lost: the text cut off parses back to the part it replaced.
            if levels > 64 {
                let mut at = &v;
                let mut was = &original;
                for _ in 0..64 {
                    (at, was) = match (at, was) {
                        (Value::Object(a), Value::Object(b)) => (&a["k"], &b["k"]),
                        (Value::Array(a), Value::Array(b)) => (&a[0], &b[0]),
                        _ => panic!("shape changed above the cap"),
                    };
                }
                let text = at.as_str().unwrap();
                assert_eq!(&serde_json::from_str::<Value>(text).unwrap(), was);
            } else {
                assert_eq!(v, original);
            }
        }
    }

    #[test]
    fn depth_checks_and_cuts_agree_below_and_above_the_kept_depth() {
        for levels in [0, 1, 5, 99, 100, 101, 120] {
            let v = nested(levels);
            for max in [1, 3, 50, MAX_KEPT_DEPTH, MAX_KEPT_DEPTH + 1, 200] {
                assert_eq!(within_depth(&v, max), depth(&v) <= max, "{levels} {max}");
                let mut cut = v.clone();
                let cuts = cut_value(&mut cut, max, 1 << 20);
                assert_eq!(cuts, usize::from(levels > max), "{levels} {max}");
                assert_eq!(depth(&cut), levels.min(max), "{levels} {max}");
            }
        }
        let mut wide = json!([[[1]], {"a": [[2]], "b": [[3]]}, [[[4]]]]);
        assert_eq!(cut_value(&mut wide, 2, 100), 4);
        assert_eq!(
            wide,
            json!([["[1]"], {"a": "[[2]]", "b": "[[3]]"}, ["[[4]]"]])
        );
    }

    #[test]
    fn cut_text_is_bounded_at_a_character_boundary() {
        let mut v = json!([[["ééééééééé"]]]);
        cut_value(&mut v, 1, 8);
        let text = v[0].as_str().unwrap();
        assert!(text.len() <= 8);
        assert!(text.starts_with("[[\""));
    }
}
