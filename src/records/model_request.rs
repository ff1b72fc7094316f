//! A run's model requests in short: what a continuation's provenance reads of each model-request
//! fact (span, times, model, tokens, input history tip, output message hashes), kept at ingest
//! next to the fact so provenance is a prefix scan of small records instead of a read of every
//! fact of the run. The same record is what a continuation shows of the model request that
//! produced a message (`continuation::Provenance::models`).
//!
//! Keys (the store's `model_requests` column family, `store::keys::model_request_key`): `run key` `start_ns(be64)` `span id` (text), so a run's requests come in start order,
//! ties by span id. Layout of a record: a format byte (1), a flag byte, the span id (varint
//! length and UTF-8), start and end (varints), then the optional model (length and UTF-8), input
//! and output tokens (varints) and input chain tip (length and bytes), then the count of output
//! messages and each hash (length and bytes).

use super::codec::{self, put_bytes, put_varint, Reader, RecordError};
use super::fact::{FactKind, SpanFact, StoredFact};
use crate::domain::{MessageHash, NodeId};

/// What a damaged record is called in errors.
const RECORD: &str = "model-request record";

const FORMAT: u8 = 1;
const MODEL: u8 = 1;
const INPUT_TOKENS: u8 = 1 << 1;
const OUTPUT_TOKENS: u8 = 1 << 2;
const TIP: u8 = 1 << 3;
const KNOWN_FLAGS: u8 = MODEL | INPUT_TOKENS | OUTPUT_TOKENS | TIP;

/// What provenance reads of one model-request fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRequestRecord {
    /// Span id (hex).
    pub span_id: String,
    /// Start, nanoseconds since the epoch.
    pub start_ns: u64,
    /// End, nanoseconds since the epoch.
    pub end_ns: u64,
    /// Model name.
    pub model: Option<String>,
    /// Input tokens.
    pub input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
    /// The tip of the input history chain (none: no input, or an empty one).
    pub input_tip: Option<NodeId>,
    /// Hashes of the output messages, in order.
    pub output: Vec<MessageHash>,
}

impl ModelRequestRecord {
    /// The record of a stored fact, none when the fact is not a model request.
    pub fn of(stored: &StoredFact) -> Option<ModelRequestRecord> {
        let f = &stored.fact;
        (f.kind == FactKind::ModelRequest).then(|| ModelRequestRecord {
            span_id: f.span_id.clone(),
            start_ns: f.start_ns,
            end_ns: f.end_ns,
            model: f.model.clone(),
            input_tokens: f.input_tokens,
            output_tokens: f.output_tokens,
            input_tip: stored.input_chain.as_ref().and_then(|c| c.tip),
            output: f.output.iter().flatten().map(|r| r.hash).collect(),
        })
    }
}

fn hash_of(bytes: &[u8]) -> Result<MessageHash, RecordError> {
    MessageHash::from_slice(bytes)
        .ok_or_else(|| corrupt(&format!("message hash of {} bytes", bytes.len())))
}

fn node_of(bytes: &[u8]) -> Result<NodeId, RecordError> {
    NodeId::from_slice(bytes).ok_or_else(|| corrupt(&format!("node id of {} bytes", bytes.len())))
}

/// Encodes a model-request record.
pub fn encode(record: &ModelRequestRecord) -> Vec<u8> {
    let mut flags = 0u8;
    for (present, flag) in [
        (record.model.is_some(), MODEL),
        (record.input_tokens.is_some(), INPUT_TOKENS),
        (record.output_tokens.is_some(), OUTPUT_TOKENS),
        (record.input_tip.is_some(), TIP),
    ] {
        if present {
            flags |= flag;
        }
    }
    let mut out = Vec::with_capacity(64 + 17 * record.output.len());
    out.push(FORMAT);
    out.push(flags);
    put_bytes(&mut out, record.span_id.as_bytes());
    put_varint(&mut out, record.start_ns);
    put_varint(&mut out, record.end_ns);
    if let Some(model) = &record.model {
        put_bytes(&mut out, model.as_bytes());
    }
    for n in [record.input_tokens, record.output_tokens]
        .into_iter()
        .flatten()
    {
        put_varint(&mut out, n);
    }
    if let Some(tip) = &record.input_tip {
        put_bytes(&mut out, &tip.0);
    }
    put_varint(&mut out, record.output.len() as u64);
    for hash in &record.output {
        put_bytes(&mut out, &hash.0);
    }
    out
}

fn corrupt(reason: &str) -> RecordError {
    codec::corrupt(RECORD, reason)
}

/// Decodes a model-request record.
pub fn decode(bytes: &[u8]) -> Result<ModelRequestRecord, RecordError> {
    let mut r = Reader::new(bytes, RECORD);
    let flags = r.header(FORMAT, KNOWN_FLAGS)?;
    let span_id = r.text()?;
    let start_ns = r.varint()?;
    let end_ns = r.varint()?;
    let model = r.optional(flags & MODEL != 0, Reader::text)?;
    let input_tokens = r.optional(flags & INPUT_TOKENS != 0, Reader::varint)?;
    let output_tokens = r.optional(flags & OUTPUT_TOKENS != 0, Reader::varint)?;
    let input_tip = r.optional(flags & TIP != 0, |r| node_of(r.bytes()?))?;
    let count = r.varint()?;
    // Each hash takes at least its length byte: a count beyond the bytes left is damage.
    if count > r.remaining() as u64 {
        return Err(corrupt("output count beyond the record"));
    }
    let mut output = Vec::with_capacity(count as usize);
    for _ in 0..count {
        output.push(hash_of(r.bytes()?)?);
    }
    r.finish()?;
    Ok(ModelRequestRecord {
        span_id,
        start_ns,
        end_ns,
        model,
        input_tokens,
        output_tokens,
        input_tip,
        output,
    })
}

/// The start of a fact when it is a model request (the `previous_start` of the store's
/// `WriteBatch::note_fact`).
pub fn request_start(fact: &SpanFact) -> Option<u64> {
    (fact.kind == FactKind::ModelRequest).then_some(fact.start_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ModelRequestRecord {
        ModelRequestRecord {
            span_id: "0102030405060708".into(),
            start_ns: 1_795_860_000_123_456_789,
            end_ns: 1_795_860_001_000_000_000,
            model: Some("gpt-4o-2024-08-06".into()),
            input_tokens: Some(12_345),
            output_tokens: Some(0),
            input_tip: Some(NodeId([1; 16])),
            output: vec![MessageHash([2; 16]), MessageHash([3; 16])],
        }
    }

    #[test]
    fn records_round_trip() {
        let bare = ModelRequestRecord {
            span_id: String::new(),
            start_ns: 0,
            end_ns: u64::MAX,
            model: None,
            input_tokens: None,
            output_tokens: None,
            input_tip: None,
            output: Vec::new(),
        };
        for r in [record(), bare] {
            assert_eq!(decode(&encode(&r)).unwrap(), r);
        }
        let binary = encode(&record()).len();
        assert!(binary <= 112, "{binary} bytes");
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let bytes = encode(&record());
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut unknown = bytes.clone();
        unknown[0] = 9;
        assert!(decode(&unknown)
            .unwrap_err()
            .to_string()
            .contains("format 9"));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        // A huge output count, an overlong varint, an id of the wrong length, an unknown flag.
        let mut r = record();
        r.output.clear();
        let mut huge = encode(&r);
        huge.pop();
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(decode(&huge).is_err());
        assert!(decode(&[
            FORMAT, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
        ])
        .is_err());
        let short_tip = [FORMAT, TIP, 0, 0, 0, 1, 0xff, 0];
        assert!(decode(&short_tip)
            .unwrap_err()
            .to_string()
            .contains("node id of 1 bytes"));
        assert!(decode(&[FORMAT, 1 << 4, 0, 0, 0, 0])
            .unwrap_err()
            .to_string()
            .contains("unknown flags"));
        // Every single-byte change decodes or fails, never panics.
        for at in 0..bytes.len() {
            for value in [0u8, 0x7f, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] = value;
                let _ = decode(&damaged);
            }
        }
    }
}
