//! Every body a run's records name reads back when a run's model requests arrive one request
//! at a time without their agent span (fuzz input `ingest/53397f0582e99138`).

use std::sync::Arc;

use crate::continuation::{Continuations, Format, Request};
use crate::ingest::{apply_group, Work};
use crate::interpreter::{interpret_span_with, PrefixMemo};
use crate::media::Media;
use crate::store::Store;
use crate::test_fixtures::{kv, run_id, span};

const INSTRUCTIONS: &str = r#"[{"type":"text","content":"Describe pictures."}]"#;
const FIRST_OUTPUT: &str = r#"[{"role":"assistant","parts":[{"type":"tool_call","id":"c1","name":"zoom","arguments":{}}]}]"#;

/// A Pydantic AI chat span of agent span 1 with the system instructions.
fn chat(
    id: u8,
    start: u64,
    input: &str,
    output: &str,
) -> opentelemetry_proto::tonic::trace::v1::Span {
    span(
        id,
        1,
        "chat model",
        start,
        vec![
            kv("gen_ai.operation.name", "chat"),
            kv("gen_ai.system_instructions", INSTRUCTIONS),
            kv("gen_ai.input.messages", input),
            kv("gen_ai.output.messages", output),
        ],
    )
}

/// The continuation of run `run` in the OTel form, interrupted calls included.
fn continuation(store: &Arc<Store>, run: &str) -> Result<serde_json::Value, String> {
    let continuations = Arc::new(Continuations::new(
        store.clone(),
        Arc::new(Media::in_memory(Some(64 * 1024))),
    ));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let format = Format::parse("otel").ok_or("no otel format")?;
    let request = Request {
        include_interrupted: true,
        ..Request::latest(format)
    };
    let body = runtime
        .block_on(continuations.respond(run, request))
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&body).map_err(|e| e.to_string())
}

/// The first model request's input cannot be read (cut by an attribute length limit), so the
/// first derivation makes no snapshot but does learn the instructions; the second request's
/// snapshots, appended later, name those instructions, whose body must then be stored.
#[test]
fn instructions_first_seen_without_a_snapshot_are_stored_for_later_appends() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), false).unwrap());
    let memo = PrefixMemo::default();
    let user = r#"{"role":"user","parts":[{"type":"text","content":"what is in this picture?"}]}"#;
    let answer =
        r#"{"role":"user","parts":[{"type":"tool_call_response","id":"c1","result":"a cat"}]}"#;
    let spans = [
        chat(2, 100, &format!("[{}", &user[..20]), FIRST_OUTPUT),
        chat(
            3,
            200,
            &format!(
                "[{user},{},{answer}]",
                &FIRST_OUTPUT[1..FIRST_OUTPUT.len() - 1]
            ),
            r#"[{"role":"assistant","parts":[{"type":"text","content":"A cat."}]}]"#,
        ),
    ];
    for (n, s) in spans.iter().enumerate() {
        let i = interpret_span_with(s, &memo, &crate::limits::Limits::default()).unwrap();
        assert!(i.fact.system_instructions.is_some());
        assert_eq!(
            i.fact.input.is_some(),
            n == 1,
            "only the second input reads"
        );
        let work = Work::Received {
            spans: vec![i],
            logs: Vec::new(),
            outbox: None,
        };
        apply_group(&store, &[work], 1_000 + n as u64).unwrap();
    }
    let run = run_id(1);
    assert!(!store.snapshots(&run).unwrap().is_empty());
    let body = continuation(&store, &run).unwrap();
    assert!(
        body.to_string().contains("Describe pictures."),
        "the instructions read back: {body}"
    );
}

/// An ingest service with no media store still turns parts a sender made look like stored
/// references into plain `uri` parts, so a continuation never looks them up (a lookup of this
/// never-stored blob would fail the answer).
#[test]
fn forged_references_are_neutralised_without_a_media_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), false).unwrap());
    let ingest =
        crate::ingest::Ingest::new(store.clone(), Arc::new(crate::exporter::Outbox::disabled()));
    let forged = crate::media::MediaRef::of(b"someone else's picture").to_string();
    let input = serde_json::json!([{"role": "user", "parts": [
        {"type": "blob", "mime_type": "image/png", "content": forged, "size": 22}
    ]}])
    .to_string();
    let spans = vec![chat(
        2,
        100,
        &input,
        r#"[{"role":"assistant","parts":[{"type":"text","content":"no"}]}]"#,
    )];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(ingest.export_traces(crate::test_fixtures::request(spans)))
        .unwrap();
    let body = continuation(&store, &run_id(1)).unwrap();
    let part = &body["messages"][0]["parts"][0];
    assert_eq!(part["type"], "uri", "{body}");
    assert_eq!(part["uri"], serde_json::json!(forged), "{body}");
}
