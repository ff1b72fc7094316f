//! The stored forms of the run-state records: a state written by the schema-4 build (named
//! parts as tuples) reads back into the named structs and is written again byte for byte.

use super::*;
use crate::domain::{EffectStatus, NodeId};
use serde_json::json;

/// A state in the exact JSON form the build before the fold wrote (schema 4): sort keys, indexed
/// entries, the snapshot mark and the instructions as arrays, fields in declaration order.
fn v4_state(tip: &str, hash: &str) -> String {
    let entry = r#"{"effect":{"tool_call_id":"c2","tool_name":"work","status":"requested","arguments":{"k":1},"requested_at":"1970-01-01T00:00:00.000001010Z","started_at":null,"ended_at":null,"result":null,"error":null,"idempotency_key":null,"occurrence":0,"span_id":null},"request_step":1,"requested_ns":1010,"ended_ns":null}"#;
    [
        r#"{"last_model":[1000,"00000000000000a2"],"last_tool":[920,"00000000000000a1"],"#,
        r#""last_event_ns":1010,"models":2,"ledger_len":3,"#,
        &format!(r#""unbound":[[2,{entry}]],"last_step":[[2,{entry}]],"standalone":false,"#),
        &format!(r#""last_full":{{"history":{{"tip":"{tip}","len":4}},"#),
        r#""walk":{"index":4,"open":["c2"]},"end_ns":1010},"#,
        &format!(r#""fixed":[5,[{{"tip":"{tip}","len":4}},"interrupted"]],"has_complete":true,"#),
        &format!(r#""instructions":["{hash}",null],"#),
        r#""tool_return_form":{"role":"user","result_key":"result"}}"#,
    ]
    .concat()
}

#[test]
fn a_schema_4_state_reads_back_named_and_is_written_unchanged() {
    let hash = crate::domain::MessageHash::of(&json!({"instructions": "be brief"}));
    let tip = NodeId::child(None, &hash);
    let text = v4_state(&tip.to_string(), &hash.to_string());
    let state: RunState = serde_json::from_str(&text).unwrap();
    assert_eq!(
        state.last_model,
        Some(SortKey {
            start_ns: 1000,
            span_id: "00000000000000a2".into()
        })
    );
    assert_eq!(state.last_tool.as_ref().map(|k| k.start_ns), Some(920));
    assert_eq!(state.unbound.len(), 1);
    assert_eq!(state.unbound[0].index, 2);
    assert_eq!(
        state.unbound[0].entry.effect.status,
        EffectStatus::Requested
    );
    assert_eq!(state.fixed.next_seq, 5);
    let last = state.fixed.last.as_ref().unwrap();
    assert_eq!(last.history.tip, Some(tip));
    assert_eq!(last.state, SnapshotState::Interrupted);
    assert_eq!(state.instructions.model, Some(hash));
    assert_eq!(state.instructions.agent, None);
    assert_eq!(state.instructions.effective(), Some(hash));
    assert_eq!(serde_json::to_string(&state).unwrap(), text);
}

#[test]
fn sort_keys_order_by_start_then_span_id() {
    let k = |s: u64, id: &str| SortKey {
        start_ns: s,
        span_id: id.into(),
    };
    assert!(k(1, "b") < k(2, "a"));
    assert!(k(2, "a") < k(2, "b"));
    assert_eq!(serde_json::to_string(&k(7, "x")).unwrap(), r#"[7,"x"]"#);
}

#[test]
fn run_meta_written_before_revisions_reads_back() {
    let meta: RunMeta = serde_json::from_str(
        r#"{"parent_run_id":null,"abandoned":{"at_ns":5,"reason":"abandoned by request"},"last_seen_ns":3}"#,
    )
    .unwrap();
    assert_eq!(meta.revision, 0);
    assert_eq!(meta.abandoned.unwrap().at_ns, 5);
}
