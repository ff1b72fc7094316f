//! The binary form of snapshot records: a run stores about two per step, so their size counts
//! against the history they describe (about 30 bytes here, against about 200 as JSON).
//!
//! Layout: a format byte (1), a flag byte, then as LEB128 varints the seq, step index, message
//! count and chain length; the time (be64 nanoseconds, or a varint length and the text when
//! the text is not the canonical form of a nanosecond time); the chain tip (16 bytes); the
//! instructions' message hash (varint length and bytes); the reason (varint length and UTF-8).
//! Optional parts are present when their flag is set.

use super::codec::{self, put_bytes, put_varint, Reader, RecordError};
use crate::domain::{
    format_timestamp, parse_timestamp, ChainRef, MessageHash, NodeId, SnapshotMeta, SnapshotRecord,
    SnapshotSource, SnapshotState,
};

/// What a damaged record is called in errors.
const RECORD: &str = "snapshot record";

const FORMAT: u8 = 1;
const INTERRUPTED: u8 = 1;
const RECONSTRUCTED: u8 = 1 << 1;
const TIP: u8 = 1 << 2;
const REASON: u8 = 1 << 3;
const INSTRUCTIONS: u8 = 1 << 4;
const TEXT_TIME: u8 = 1 << 5;
const KNOWN_FLAGS: u8 = INTERRUPTED | RECONSTRUCTED | TIP | REASON | INSTRUCTIONS | TEXT_TIME;

/// Encodes a snapshot record.
pub fn encode(record: &SnapshotRecord) -> Vec<u8> {
    let meta = &record.meta;
    let nanos = parse_timestamp(&meta.timestamp);
    let mut flags = 0u8;
    if meta.state == SnapshotState::Interrupted {
        flags |= INTERRUPTED;
    }
    if meta.source == SnapshotSource::Reconstructed {
        flags |= RECONSTRUCTED;
    }
    if record.history.tip.is_some() {
        flags |= TIP;
    }
    if meta.reason.is_some() {
        flags |= REASON;
    }
    if record.instructions.is_some() {
        flags |= INSTRUCTIONS;
    }
    if nanos.is_none() {
        flags |= TEXT_TIME;
    }
    let mut out = Vec::with_capacity(48);
    out.push(FORMAT);
    out.push(flags);
    for n in [
        meta.seq,
        meta.step_index,
        meta.message_count,
        record.history.len,
    ] {
        put_varint(&mut out, u64::from(n));
    }
    match nanos {
        Some(ns) => out.extend_from_slice(&ns.to_be_bytes()),
        None => put_bytes(&mut out, meta.timestamp.as_bytes()),
    }
    if let Some(tip) = &record.history.tip {
        put_bytes(&mut out, &tip.0);
    }
    if let Some(hash) = &record.instructions {
        put_bytes(&mut out, &hash.0);
    }
    if let Some(reason) = &meta.reason {
        put_bytes(&mut out, reason.as_bytes());
    }
    out
}

fn corrupt(reason: &str) -> RecordError {
    codec::corrupt(RECORD, reason)
}

/// Decodes a snapshot record.
pub fn decode(bytes: &[u8]) -> Result<SnapshotRecord, RecordError> {
    let mut r = Reader::new(bytes, RECORD);
    let flags = r.header(FORMAT, KNOWN_FLAGS)?;
    let seq = r.u32()?;
    let step_index = r.u32()?;
    let message_count = r.u32()?;
    let len = r.u32()?;
    let timestamp = if flags & TEXT_TIME != 0 {
        r.text()?
    } else {
        let ns: [u8; 8] = r.take(8)?.try_into().map_err(|_| corrupt("time"))?;
        format_timestamp(u64::from_be_bytes(ns))
    };
    let tip = r.optional(flags & TIP != 0, |r| {
        NodeId::from_slice(r.bytes()?).ok_or_else(|| corrupt("tip node id"))
    })?;
    let instructions = r.optional(flags & INSTRUCTIONS != 0, |r| {
        MessageHash::from_slice(r.bytes()?).ok_or_else(|| corrupt("instructions message hash"))
    })?;
    let reason = r.optional(flags & REASON != 0, Reader::text)?;
    r.finish()?;
    Ok(SnapshotRecord {
        meta: SnapshotMeta {
            seq,
            step_index,
            state: if flags & INTERRUPTED != 0 {
                SnapshotState::Interrupted
            } else {
                SnapshotState::Complete
            },
            source: if flags & RECONSTRUCTED != 0 {
                SnapshotSource::Reconstructed
            } else {
                SnapshotSource::Observed
            },
            message_count,
            timestamp,
            reason,
        },
        history: ChainRef { tip, len },
        instructions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::MessageRef;
    use serde_json::json;

    fn record(reason: Option<&str>, timestamp: String, with_tip: bool) -> SnapshotRecord {
        let messages = [MessageRef::of(&json!({"role": "user", "parts": []}))];
        SnapshotRecord {
            meta: SnapshotMeta {
                seq: 300,
                step_index: 150,
                state: if reason.is_some() {
                    SnapshotState::Interrupted
                } else {
                    SnapshotState::Complete
                },
                source: SnapshotSource::Reconstructed,
                message_count: 1,
                timestamp,
                reason: reason.map(str::to_string),
            },
            history: if with_tip {
                ChainRef::of(&messages)
            } else {
                ChainRef { tip: None, len: 0 }
            },
            instructions: with_tip.then(|| MessageHash::of(&json!([{"type": "text"}]))),
        }
    }

    #[test]
    fn records_round_trip_in_a_few_bytes() {
        for r in [
            record(None, format_timestamp(1_795_860_000_123_456_789), true),
            record(
                Some("tool calls [\"c1\"] are not answered yet"),
                format_timestamp(0),
                true,
            ),
            record(None, "not a time".into(), false),
            record(None, "2026-11-28T10:00:00Z".into(), false),
        ] {
            let bytes = encode(&r);
            assert_eq!(decode(&bytes).unwrap(), r);
        }
        let complete = encode(&record(None, format_timestamp(1), true));
        assert!(complete.len() <= 52, "{} bytes", complete.len());
        let json = serde_json::to_vec(&record(None, format_timestamp(1), true)).unwrap();
        assert!(
            json.len() > 3 * complete.len(),
            "{} vs {}",
            json.len(),
            complete.len()
        );
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let bytes = encode(&record(Some("why"), format_timestamp(5), true));
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut unknown = bytes.clone();
        unknown[0] = 9;
        assert!(decode(&unknown)
            .unwrap_err()
            .to_string()
            .contains("format 9"));
        let mut flagged = bytes.clone();
        flagged[1] |= 1 << 7;
        assert!(decode(&flagged)
            .unwrap_err()
            .to_string()
            .contains("unknown flags"));
        let mut longer = bytes;
        longer.push(0);
        assert!(decode(&longer).is_err());
        assert!(decode(&[
            FORMAT, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
        ])
        .is_err());
    }

    #[test]
    fn ids_of_the_wrong_length_are_errors() {
        for (flag, len) in [(TIP, 15), (TIP, 17), (INSTRUCTIONS, 15), (INSTRUCTIONS, 0)] {
            let mut bytes = vec![FORMAT, flag, 0, 0, 0, 0];
            bytes.extend_from_slice(&1u64.to_be_bytes());
            bytes.push(len);
            bytes.extend(std::iter::repeat_n(7u8, usize::from(len)));
            assert!(decode(&bytes).is_err(), "flag {flag} length {len}");
        }
    }
}
