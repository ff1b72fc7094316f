//! `codecs`: the store's record readers on arbitrary bytes, and encode → decode round trips.
//!
//! Input: byte 0 picks the record kind (0 snapshot record, 1 model-request record, 2 and 3 the
//! same built from the input and round-tripped, 5 a step-event record (binary, or the JSON of
//! older stores), 4 and 6-9 a JSON record type); the rest is the record, or the decisions that
//! build one.
//!
//! Invariants: decoding arbitrary bytes gives a record or an error, never a panic; a decoded
//! binary record re-encodes to bytes that decode to the same record; a built record decodes to
//! itself; a JSON record that reads re-serializes to text that reads again.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::domain::{
    ChainRef, MessageHash, NodeId, Run, SnapshotMeta, SnapshotRecord, SnapshotSource,
    SnapshotState, StepEvent, ToolEffect, MESSAGE_HASH_BYTES, NODE_ID_BYTES,
};
use crate::fuzzing::engine::{note, Target};
use crate::fuzzing::Source;
use crate::interpreter::{LogEvent, RunState, StoredFact};
use crate::records::event as event_codec;
use crate::store::model_requests::{self, ModelRequestRecord};
use crate::store::snapshot_codec;

/// The target.
pub const TARGET: Target = Target {
    name: "codecs",
    about: "store::snapshot_codec, store::model_requests, records::event (binary record readers), JSON records",
    run,
    max_len: 4096,
    scale: crate::fuzzing::engine::repeat_bytes,
    probes: crate::fuzzing::engine::no_probes,
    seeds,
};

/// A binary record read from arbitrary bytes (`name`, read by `decode`): it decodes to a record
/// that `encode` writes back to bytes decoding to the same record, or to an error, never a
/// panic. `shape` says what the record holds, for the coverage notes.
fn binary_record<T: PartialEq, E: std::fmt::Display>(
    bytes: &[u8],
    name: &'static str,
    decode: impl Fn(&[u8]) -> Result<T, E>,
    encode: impl Fn(&T) -> Vec<u8>,
    shape: impl Fn(&T) -> (usize, bool),
) {
    match decode(bytes) {
        Ok(record) => {
            note((name, "ok", shape(&record)));
            let again = decode(&encode(&record));
            assert!(
                again.ok().as_ref() == Some(&record),
                "a decoded {name} does not round-trip"
            );
        }
        Err(e) => note((
            name,
            "error",
            e.to_string().chars().take(48).collect::<String>(),
        )),
    }
}

fn snapshot(bytes: &[u8]) {
    binary_record(
        bytes,
        "snapshot record",
        snapshot_codec::decode,
        snapshot_codec::encode,
        |r| {
            (
                usize::from(r.meta.reason.is_some()),
                r.history.tip.is_some(),
            )
        },
    );
}

fn model_request(bytes: &[u8]) {
    binary_record(
        bytes,
        "model-request record",
        model_requests::decode,
        model_requests::encode,
        |r| (r.output.len().min(4), r.model.is_some()),
    );
}

fn hash(src: &mut Source) -> MessageHash {
    let mut h = [0u8; MESSAGE_HASH_BYTES];
    h.iter_mut().for_each(|b| *b = src.byte());
    MessageHash(h)
}

fn node(src: &mut Source) -> NodeId {
    let mut h = [0u8; NODE_ID_BYTES];
    h.iter_mut().for_each(|b| *b = src.byte());
    NodeId(h)
}

fn text(src: &mut Source) -> String {
    match src.below(4) {
        0 => crate::domain::format_timestamp(src.u64()),
        1 => "2026-11-22T10:00:00Z".into(),
        _ => src.text(),
    }
}

fn built_snapshot(src: &mut Source) {
    let record = SnapshotRecord {
        meta: SnapshotMeta {
            seq: src.u64() as u32,
            step_index: src.u64() as u32,
            state: if src.flag() {
                SnapshotState::Interrupted
            } else {
                SnapshotState::Complete
            },
            source: if src.flag() {
                SnapshotSource::Reconstructed
            } else {
                SnapshotSource::Observed
            },
            message_count: src.u64() as u32,
            timestamp: text(src),
            reason: src.flag().then(|| src.text()),
        },
        history: ChainRef {
            tip: src.flag().then(|| node(src)),
            len: src.u64() as u32,
        },
        instructions: src.flag().then(|| hash(src)),
    };
    let back = snapshot_codec::decode(&snapshot_codec::encode(&record));
    match back {
        Ok(back) => assert!(
            back == record,
            "a snapshot record does not round-trip: {record:?} -> {back:?}"
        ),
        Err(e) => panic!("an encoded snapshot record does not decode: {e}"),
    }
}

fn built_model_request(src: &mut Source) {
    let record = ModelRequestRecord {
        span_id: src.text(),
        start_ns: src.u64(),
        end_ns: src.u64(),
        model: src.flag().then(|| src.text()),
        input_tokens: src.flag().then(|| src.u64()),
        output_tokens: src.flag().then(|| src.u64()),
        input_tip: src.flag().then(|| node(src)),
        output: (0..src.count(1000)).map(|_| hash(src)).collect(),
    };
    match model_requests::decode(&model_requests::encode(&record)) {
        Ok(back) => assert!(back == record, "a model-request record does not round-trip"),
        Err(e) => panic!("an encoded model-request record does not decode: {e}"),
    }
}

fn event(bytes: &[u8]) {
    binary_record(
        bytes,
        "step-event record",
        event_codec::decode,
        event_codec::encode,
        |e| (usize::from(e.span_id.is_some()), e.error.is_some()),
    );
}

fn json_record<T: Serialize + DeserializeOwned>(bytes: &[u8], name: &'static str) {
    match serde_json::from_slice::<T>(bytes) {
        Ok(record) => {
            note((name, "ok"));
            let text = serde_json::to_vec(&record)
                .unwrap_or_else(|e| panic!("a read {name} does not serialize: {e}"));
            if let Err(e) = serde_json::from_slice::<T>(&text) {
                panic!("a read {name} does not read back once written: {e}");
            }
        }
        Err(e) => note((name, format!("{:?}", e.classify()))),
    }
}

fn run(data: &[u8]) {
    let (kind, rest) = match data.split_first() {
        Some((k, rest)) => (*k, rest),
        None => return,
    };
    match kind % 10 {
        0 => snapshot(rest),
        1 => model_request(rest),
        2 => built_snapshot(&mut Source::new(rest)),
        3 => built_model_request(&mut Source::new(rest)),
        4 => json_record::<Run>(rest, "run"),
        5 => event(rest),
        6 => json_record::<ToolEffect>(rest, "effect"),
        7 => json_record::<StoredFact>(rest, "fact"),
        8 => json_record::<RunState>(rest, "run state"),
        _ => json_record::<LogEvent>(rest, "log event"),
    }
}

fn seeds() -> Vec<Vec<u8>> {
    let snap = SnapshotRecord {
        meta: SnapshotMeta {
            seq: 3,
            step_index: 2,
            state: SnapshotState::Interrupted,
            source: SnapshotSource::Reconstructed,
            message_count: 5,
            timestamp: crate::domain::format_timestamp(1_700_000_000_123_456_789),
            reason: Some("tool call c1 unsettled".into()),
        },
        history: ChainRef {
            tip: Some(NodeId([5; NODE_ID_BYTES])),
            len: 5,
        },
        instructions: Some(MessageHash([9; MESSAGE_HASH_BYTES])),
    };
    let req = ModelRequestRecord {
        span_id: "0202020202020202".into(),
        start_ns: 100,
        end_ns: 200,
        model: Some("gpt-4o".into()),
        input_tokens: Some(12),
        output_tokens: None,
        input_tip: Some(NodeId([1; NODE_ID_BYTES])),
        output: vec![MessageHash([2; MESSAGE_HASH_BYTES]); 2],
    };
    vec![
        [vec![0], snapshot_codec::encode(&snap)].concat(),
        [vec![1], model_requests::encode(&req)].concat(),
        vec![2, 1, 2, 3, 4, 5, 6, 7, 8, 9],
        vec![3, 4, 65, 66, 67, 68, 1, 2, 3],
        [vec![4], br#"{"run_id":"r","aliases":[],"status":"running"}"#.to_vec()].concat(),
        [vec![5], br#"{"seq":0,"kind":"run_started","timestamp":"2026-11-22T10:00:00.000000000Z"}"#.to_vec()].concat(),
        [vec![5], event_codec::encode(&StepEvent {
            seq: 4,
            kind: crate::domain::EventKind::ToolCallFailed,
            timestamp: crate::domain::format_timestamp(1_700_000_000_123_456_789),
            span_id: Some("0202020202020202".into()),
            tool_call_id: Some("c1".into()),
            tool_name: Some("lookup".into()),
            error: Some("boom".into()),
            time_ns: 1_700_000_000_123_456_789,
        })].concat(),
        [vec![9], br#"{"trace_id":"07","span_id":"09","message_index":1,"time_ns":12,"name":"gen_ai.user.message","body":{"content":"hi"}}"#.to_vec()].concat(),
    ]
}
