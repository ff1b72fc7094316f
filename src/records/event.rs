//! The binary form of step-event records (schema 6): a run stores about two and a half per span,
//! so their size counts against everything else it writes (about 43 bytes here, against about
//! 207 as JSON, whose field names, quotes and decimal digits made up most of it).
//!
//! Layout: a format byte (1), a flag byte, the seq (LEB128 varint), the kind (one byte), the
//! time (be64 nanoseconds, from which the RFC 3339 text is made again; or, when the text is not
//! that time's canonical form, the nanoseconds as a varint then the text with its varint
//! length), the span id (8 bytes when it is 16 lowercase hex digits, else varint length and
//! UTF-8), then the tool-call id, tool name and error (varint length and UTF-8). Optional parts
//! are present when their flag is set.
//!
//! Stores of schema 5 and earlier hold events as JSON objects; [`decode`] reads those too (a
//! JSON record starts with `{`, never with the format byte).

use super::codec::{self, put_bytes, put_varint, Reader, RecordError};
use crate::domain::{format_timestamp, timestamp_bytes, EventKind, StepEvent};

/// What a damaged record is called in errors.
const RECORD: &str = "step-event record";

const FORMAT: u8 = 1;
const SPAN: u8 = 1;
const SPAN_TEXT: u8 = 1 << 1;
const TOOL_CALL: u8 = 1 << 2;
const TOOL_NAME: u8 = 1 << 3;
const ERROR: u8 = 1 << 4;
const TEXT_TIME: u8 = 1 << 5;
const KNOWN_FLAGS: u8 = SPAN | SPAN_TEXT | TOOL_CALL | TOOL_NAME | ERROR | TEXT_TIME;

/// The byte a kind is stored as (never renumbered: stored records keep them).
fn kind_byte(kind: EventKind) -> u8 {
    match kind {
        EventKind::RunStarted => 0,
        EventKind::ModelRequestStarted => 1,
        EventKind::ModelRequestCompleted => 2,
        EventKind::ModelRequestFailed => 3,
        EventKind::ToolCallRequested => 4,
        EventKind::ToolCallStarted => 5,
        EventKind::ToolCallCompleted => 6,
        EventKind::ToolCallFailed => 7,
        EventKind::RunCompleted => 8,
        EventKind::RunFailed => 9,
        EventKind::RunAbandoned => 10,
    }
}

/// The kind stored as `byte`.
fn kind_of(byte: u8) -> Option<EventKind> {
    Some(match byte {
        0 => EventKind::RunStarted,
        1 => EventKind::ModelRequestStarted,
        2 => EventKind::ModelRequestCompleted,
        3 => EventKind::ModelRequestFailed,
        4 => EventKind::ToolCallRequested,
        5 => EventKind::ToolCallStarted,
        6 => EventKind::ToolCallCompleted,
        7 => EventKind::ToolCallFailed,
        8 => EventKind::RunCompleted,
        9 => EventKind::RunFailed,
        10 => EventKind::RunAbandoned,
        _ => return None,
    })
}

/// The 8 bytes a span id of 16 lowercase hex digits stands for (how every span id the
/// interpreter makes is written), if it is one: an upper-case digit would not read back as
/// written.
fn hex8(text: &str) -> Option<[u8; 8]> {
    if text.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut out = [0u8; 8];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

/// Encodes a step event. The record reads back as the same event, `time_ns` included.
pub fn encode(event: &StepEvent) -> Vec<u8> {
    let canonical_time = timestamp_bytes(event.time_ns) == event.timestamp.as_bytes();
    let span = event.span_id.as_deref().map(|s| (s, hex8(s)));
    let mut flags = 0u8;
    match span {
        Some((_, Some(_))) => flags |= SPAN,
        Some((_, None)) => flags |= SPAN | SPAN_TEXT,
        None => {}
    }
    for (present, flag) in [
        (event.tool_call_id.is_some(), TOOL_CALL),
        (event.tool_name.is_some(), TOOL_NAME),
        (event.error.is_some(), ERROR),
        (!canonical_time, TEXT_TIME),
    ] {
        if present {
            flags |= flag;
        }
    }
    let texts = [&event.tool_call_id, &event.tool_name, &event.error];
    let text_bytes: usize = texts
        .iter()
        .filter_map(|t| t.as_ref())
        .map(String::len)
        .sum();
    let mut out = Vec::with_capacity(32 + text_bytes);
    out.push(FORMAT);
    out.push(flags);
    put_varint(&mut out, u64::from(event.seq));
    out.push(kind_byte(event.kind));
    if canonical_time {
        out.extend_from_slice(&event.time_ns.to_be_bytes());
    } else {
        put_varint(&mut out, event.time_ns);
        put_bytes(&mut out, event.timestamp.as_bytes());
    }
    match span {
        Some((_, Some(raw))) => out.extend_from_slice(&raw),
        Some((text, None)) => put_bytes(&mut out, text.as_bytes()),
        None => {}
    }
    for text in texts.into_iter().flatten() {
        put_bytes(&mut out, text.as_bytes());
    }
    out
}

fn corrupt(reason: &str) -> RecordError {
    codec::corrupt(RECORD, reason)
}

/// Decodes a step-event record: the binary form, or the JSON of schema 5 and earlier (whose
/// `time_ns` was not stored and reads as 0).
pub fn decode(bytes: &[u8]) -> Result<StepEvent, RecordError> {
    if bytes.first() == Some(&b'{') {
        return super::json::decode(bytes);
    }
    let mut r = Reader::new(bytes, RECORD);
    let flags = r.header(FORMAT, KNOWN_FLAGS)?;
    let seq = r.u32()?;
    let kind = kind_of(r.byte()?).ok_or_else(|| corrupt("unknown event kind"))?;
    let (time_ns, timestamp) = if flags & TEXT_TIME != 0 {
        let ns = r.varint()?;
        (ns, r.text()?)
    } else {
        let ns: [u8; 8] = r.take(8)?.try_into().map_err(|_| corrupt("time"))?;
        let ns = u64::from_be_bytes(ns);
        (ns, format_timestamp(ns))
    };
    let span_id = r.optional(flags & SPAN != 0, |r| {
        if flags & SPAN_TEXT != 0 {
            r.text()
        } else {
            r.take(8).map(hex::encode)
        }
    })?;
    if flags & SPAN_TEXT != 0 && flags & SPAN == 0 {
        return Err(corrupt("span text flag without a span"));
    }
    let tool_call_id = r.optional(flags & TOOL_CALL != 0, Reader::text)?;
    let tool_name = r.optional(flags & TOOL_NAME != 0, Reader::text)?;
    let error = r.optional(flags & ERROR != 0, Reader::text)?;
    r.finish()?;
    Ok(StepEvent {
        seq,
        kind,
        timestamp,
        span_id,
        tool_call_id,
        tool_name,
        error,
        time_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KINDS: [EventKind; 11] = [
        EventKind::RunStarted,
        EventKind::ModelRequestStarted,
        EventKind::ModelRequestCompleted,
        EventKind::ModelRequestFailed,
        EventKind::ToolCallRequested,
        EventKind::ToolCallStarted,
        EventKind::ToolCallCompleted,
        EventKind::ToolCallFailed,
        EventKind::RunCompleted,
        EventKind::RunFailed,
        EventKind::RunAbandoned,
    ];

    fn event(kind: EventKind, time_ns: u64) -> StepEvent {
        StepEvent {
            seq: 41,
            kind,
            timestamp: format_timestamp(time_ns),
            span_id: Some("4cb985d58b4ea63e".into()),
            tool_call_id: Some("call_2bT3IyFe4ZdjPJn5TVLczIW1".into()),
            tool_name: Some("send_email".into()),
            error: None,
            time_ns,
        }
    }

    #[test]
    fn every_kind_round_trips_in_a_third_of_its_json() {
        for kind in KINDS {
            assert_eq!(kind_of(kind_byte(kind)), Some(kind));
            let e = event(kind, 1_795_930_050_784_668_808);
            let bytes = encode(&e);
            assert_eq!(decode(&bytes).unwrap(), e);
            let json = serde_json::to_vec(&e).unwrap();
            assert!(
                bytes.len() * 5 < json.len() * 2,
                "{} vs {}",
                bytes.len(),
                json.len()
            );
        }
        let plain = StepEvent {
            tool_call_id: None,
            tool_name: None,
            ..event(EventKind::RunStarted, 1)
        };
        assert!(encode(&plain).len() <= 20, "{}", encode(&plain).len());
    }

    #[test]
    fn odd_times_and_span_ids_are_kept_as_text() {
        for (timestamp, span) in [
            ("2026-11-28T10:00:00Z", Some("4CB985D58B4EA63E")),
            ("not a time", Some("short")),
            ("", None),
        ] {
            let e = StepEvent {
                timestamp: timestamp.into(),
                span_id: span.map(str::to_string),
                error: Some("boom \"quoted\"".into()),
                ..event(EventKind::ToolCallFailed, 7)
            };
            assert_eq!(decode(&encode(&e)).unwrap(), e);
        }
    }

    #[test]
    fn json_events_of_older_stores_read_back() {
        let mut e = event(EventKind::ToolCallRequested, 1_795_930_050_784_668_808);
        let json = serde_json::to_vec(&e).unwrap();
        e.time_ns = 0; // never stored as JSON
        assert_eq!(decode(&json).unwrap(), e);
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let bytes = encode(&event(EventKind::ToolCallCompleted, 5));
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut kind = bytes.clone();
        kind[3] = 200;
        assert!(decode(&kind).unwrap_err().to_string().contains("kind"));
        let mut flags = bytes;
        flags[1] = SPAN_TEXT;
        assert!(decode(&flags).is_err());
    }

    proptest! {
        #[test]
        fn any_event_round_trips(
            seq in any::<u32>(),
            kind in 0usize..11,
            time_ns in any::<u64>(),
            text_time in proptest::option::of(".{0,40}"),
            span in proptest::option::of(prop_oneof!["[0-9a-f]{16}", ".{0,24}"]),
            call in proptest::option::of(".{0,40}"),
            tool in proptest::option::of(".{0,40}"),
            error in proptest::option::of(".{0,80}"),
        ) {
            let e = StepEvent {
                seq,
                kind: KINDS[kind],
                timestamp: text_time.unwrap_or_else(|| format_timestamp(time_ns)),
                span_id: span,
                tool_call_id: call,
                tool_name: tool,
                error,
                time_ns,
            };
            prop_assert_eq!(decode(&encode(&e)).unwrap(), e);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&bytes);
        }
    }
}
