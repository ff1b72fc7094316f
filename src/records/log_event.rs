//! A legacy GenAI event received as an OTLP log record, as stored under its span (JSON; see
//! [`super::json`]), and its storage order key.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::domain::MessageHash;

/// One legacy GenAI event of a span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEvent {
    /// Trace id (hex).
    pub trace_id: String,
    /// Span id (hex) of the span the event belongs to.
    pub span_id: String,
    /// `gen_ai.message.index`, when given: the event's place in the history.
    pub message_index: Option<i64>,
    /// Time of the record (its own, else when it was observed), nanoseconds since the epoch.
    pub time_ns: u64,
    /// Event name (`gen_ai.user.message`, `gen_ai.choice`, …).
    pub name: String,
    /// The body fields, plus the record's attributes the body lacks.
    pub body: Map<String, Value>,
}

impl LogEvent {
    /// The event's storage key under its span: its order, then a hash so equal events collapse.
    pub fn order_key(&self) -> Vec<u8> {
        let mut key = Vec::with_capacity(48);
        // Events without an index sort after the indexed ones (the choice comes last).
        let index = self
            .message_index
            .map_or(u64::MAX, |i| i as u64 ^ (1 << 63));
        key.extend_from_slice(&index.to_be_bytes());
        key.extend_from_slice(&self.time_ns.to_be_bytes());
        let body = Value::Object(self.body.clone());
        // The hash's hex text, as when hashes were strings (the order of equal keys is kept).
        let mut hex = [0u8; 2 * crate::domain::MESSAGE_HASH_BYTES];
        key.extend_from_slice(
            MessageHash::of(&serde_json::json!([self.name, body]))
                .hex_into(&mut hex)
                .as_bytes(),
        );
        key
    }
}
