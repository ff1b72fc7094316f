//! Issue 13, interpreter side, against the real binary: crafted spans (a 10,000-segment
//! flattened key under both prefixes, and the longest one within the key cap, tool arguments
//! and results nested 127 levels, 150,000
//! attributes on an `operation.details` event, 160,000 tool calls in one response) neither crash
//! nor stall stepline nor poison their run. For each: stepline answers it (a partial-success
//! warning when a span is over a cap), an innocent one-span request sent at the same time is
//! answered within 2 s, the process is still the same one, and the run reads back over the API.

mod support;

use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::Event;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::{json, Value};
use support::Stepline;

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        key_strindex: 0,
    }
}

/// A span of `trace` with id `[id; 8]` under `[parent; 8]` (0: root).
fn span(trace: u8, id: u8, parent: u8, name: &str, start: u64, attrs: Vec<KeyValue>) -> Span {
    let base = 1_700_000_000_000_000_000u64;
    Span {
        trace_id: vec![trace; 16],
        span_id: vec![id; 8],
        parent_span_id: if parent == 0 {
            Vec::new()
        } else {
            vec![parent; 8]
        },
        name: name.into(),
        start_time_unix_nano: base + start * 1_000_000,
        end_time_unix_nano: base + (start + 5) * 1_000_000,
        attributes: attrs,
        ..Default::default()
    }
}

fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource::default()),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The run id stepline gives the run whose agent span is span 1 of `trace`.
fn run_id(trace: u8) -> String {
    format!("{}-{}", hex::encode([trace; 16]), hex::encode([1u8; 8]))
}

/// An ordinary Pydantic AI-shaped run of `trace`: agent (1), model request (2) calling `f`,
/// tool call (3), final model request (4). The crafted span of a case joins it as span 5.
fn base_run(trace: u8) -> Vec<Span> {
    let user = json!({"role": "user", "parts": [{"type": "text", "content": "go"}]});
    let call = json!({"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c1", "name": "f", "arguments": {"x": 1}}]});
    let answer = json!({"role": "user", "parts": [
        {"type": "tool_call_response", "id": "c1", "name": "f", "result": "ok"}]});
    let done = json!({"role": "assistant", "parts": [{"type": "text", "content": "done"}]});
    vec![
        span(
            trace,
            1,
            0,
            "invoke_agent a",
            0,
            vec![
                kv("gen_ai.operation.name", "invoke_agent"),
                kv("gen_ai.agent.name", "a"),
                kv("gen_ai.conversation.id", &format!("hardening-{trace}")),
            ],
        ),
        span(
            trace,
            2,
            1,
            "chat m",
            1,
            vec![
                kv("gen_ai.operation.name", "chat"),
                kv("gen_ai.input.messages", &json!([user]).to_string()),
                kv("gen_ai.output.messages", &json!([call]).to_string()),
            ],
        ),
        span(
            trace,
            3,
            1,
            "execute_tool f",
            2,
            vec![
                kv("gen_ai.operation.name", "execute_tool"),
                kv("gen_ai.tool.name", "f"),
                kv("gen_ai.tool.call.id", "c1"),
                kv("gen_ai.tool.call.arguments", r#"{"x":1}"#),
                kv("gen_ai.tool.call.result", "ok"),
            ],
        ),
        span(
            trace,
            4,
            1,
            "chat m",
            3,
            vec![
                kv("gen_ai.operation.name", "chat"),
                kv(
                    "gen_ai.input.messages",
                    &json!([user, call, answer]).to_string(),
                ),
                kv("gen_ai.output.messages", &json!([done]).to_string()),
            ],
        ),
    ]
}

/// What stepline answered to an OTLP/HTTP protobuf export.
struct Answer {
    status: u16,
    response: Option<ExportTraceServiceResponse>,
    took: Duration,
}

async fn export(stepline: &Stepline, spans: Vec<Span>) -> Answer {
    let body = request(spans).encode_to_vec();
    let start = Instant::now();
    let reply = stepline
        .client()
        .post(format!("{}/v1/traces", stepline.otlp_http_url()))
        .header("content-type", "application/x-protobuf")
        .body(body)
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap_or_else(|e| panic!("export failed: {e}\n{}", stepline.log_tail()));
    let status = reply.status().as_u16();
    let bytes = reply.bytes().await.unwrap_or_default();
    Answer {
        status,
        response: ExportTraceServiceResponse::decode(bytes.as_ref()).ok(),
        took: start.elapsed(),
    }
}

/// Sends `crafted` and, 20 ms later, an innocent one-span request of another trace; the innocent
/// one must be answered with 200 within 2 s. Returns the crafted request's answer.
async fn export_beside_innocent(stepline: &Stepline, crafted: Vec<Span>, innocent: u8) -> Answer {
    let innocent_span = span(
        innocent,
        1,
        0,
        "invoke_agent innocent",
        0,
        vec![kv("gen_ai.operation.name", "invoke_agent")],
    );
    let (crafted, innocent) = tokio::join!(export(stepline, crafted), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        export(stepline, vec![innocent_span]).await
    });
    assert_eq!(innocent.status, 200, "{}", stepline.log_tail());
    assert!(
        innocent.took < Duration::from_secs(2),
        "an innocent request took {:?} beside a crafted one\n{}",
        innocent.took,
        stepline.log_tail()
    );
    eprintln!(
        "crafted request answered {} in {:?}; innocent one in {:?}",
        crafted.status, crafted.took, innocent.took
    );
    crafted
}

/// The partial-success warning of an accepted request with a span over a cap: nothing rejected,
/// a message that says why.
fn assert_warned(answer: &Answer, what: &str) {
    assert_eq!(answer.status, 200, "{what}");
    let partial = answer
        .response
        .as_ref()
        .and_then(|r| r.partial_success.as_ref())
        .unwrap_or_else(|| panic!("{what}: no partial_success warning"));
    assert_eq!(partial.rejected_spans, 0, "{what}");
    assert!(
        partial.error_message.contains("not interpreted"),
        "{what}: {:?}",
        partial.error_message
    );
    eprintln!("{what}: partial_success {:?}", partial.error_message);
}

/// The process is the one started, and the run of `trace` reads back over the API: the run,
/// its events, effects and continuation answer 200. Returns the run and its effects.
async fn assert_readable(stepline: &Stepline, pid: Option<u32>, trace: u8) -> (Value, Value) {
    assert_eq!(stepline.pid(), pid, "stepline was restarted");
    assert_eq!(stepline.get("/healthz").await.status, 200);
    let id = run_id(trace);
    let run = stepline
        .wait_for("the run to be stored", Duration::from_secs(10), || async {
            let reply = stepline.get(&format!("/v1/runs/{id}")).await;
            match reply.status {
                200 => Ok(reply.json().clone()),
                other => Err(format!("{other}: {}", reply.text)),
            }
        })
        .await;
    stepline.get_ok(&format!("/v1/runs/{id}/events")).await;
    let effects = stepline.get_ok(&format!("/v1/runs/{id}/effects")).await;
    stepline
        .get_ok(&format!("/v1/runs/{id}/continuation"))
        .await;
    (run, effects)
}

/// Alternating objects and arrays, `levels` deep.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_spans_neither_crash_stall_nor_poison() {
    let stepline = Stepline::start().await;
    let pid = stepline.pid();

    // 1. A flattened key of 10,000 segments, under both prefixes (OpenLLMetry, OpenInference).
    let path = vec!["a"; 10_000].join(".");
    for (trace, key, kind) in [
        (
            11u8,
            format!("gen_ai.prompt.0.{path}"),
            kv("llm.request.type", "chat"),
        ),
        (
            12u8,
            format!("llm.input_messages.0.message.{path}"),
            kv("openinference.span.kind", "LLM"),
        ),
    ] {
        let mut spans = base_run(trace);
        spans.push(span(trace, 5, 1, "crafted", 4, vec![kind, kv(&key, "x")]));
        let answer = export_beside_innocent(&stepline, spans, 100 + trace).await;
        assert_warned(&answer, "a 10,000-segment key");
        assert_readable(&stepline, pid, trace).await;
    }

    // 1b. The longest flattened paths within the key cap (about 2,000 segments) are read:
    // their structure is capped, the span interpreted, the run readable.
    for (trace, prefix, kind) in [
        (16u8, "gen_ai.prompt.1", kv("llm.request.type", "chat")),
        (
            17u8,
            "llm.input_messages.1.message",
            kv("openinference.span.kind", "LLM"),
        ),
    ] {
        let segments = (4_096 - prefix.len() - 1) / 2;
        let key = format!("{prefix}.{}", vec!["a"; segments].join("."));
        assert!(key.len() <= 4_096);
        let mut spans = base_run(trace);
        let first = if prefix.starts_with("gen_ai") {
            kv("gen_ai.prompt.0.content", "hi")
        } else {
            kv("llm.input_messages.0.message.content", "hi")
        };
        spans.push(span(
            trace,
            5,
            1,
            "crafted",
            4,
            vec![kind, first, kv(&key, "x")],
        ));
        let answer = export_beside_innocent(&stepline, spans, 100 + trace).await;
        assert_eq!(answer.status, 200);
        let partial = answer.response.and_then(|r| r.partial_success);
        assert!(partial.is_none(), "{segments} segments: {partial:?}");
        assert_readable(&stepline, pid, trace).await;
    }

    // 2. Tool arguments and results nested 127 levels (parsed: under serde_json's 128), on the
    // tool span and in the model's tool call.
    let trace = 13u8;
    let deep = nested(127).to_string();
    let mut spans = base_run(trace);
    // The message around the call adds 4 levels: 123 + 4 is what serde_json still parses.
    let deep_call = json!([{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c2", "name": "g", "arguments": nested(123)}]}])
    .to_string();
    spans.push(span(
        trace,
        5,
        1,
        "chat m",
        4,
        vec![
            kv("gen_ai.operation.name", "chat"),
            kv(
                "gen_ai.input.messages",
                r#"[{"role":"user","parts":[{"type":"text","content":"again"}]}]"#,
            ),
            kv("gen_ai.output.messages", &deep_call),
            kv("gen_ai.system_instructions", &deep),
        ],
    ));
    spans.push(span(
        trace,
        6,
        1,
        "execute_tool g",
        5,
        vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "g"),
            kv("gen_ai.tool.call.id", "c2"),
            kv("gen_ai.tool.call.arguments", &deep),
            kv("gen_ai.tool.call.result", &deep),
        ],
    ));
    let answer = export_beside_innocent(&stepline, spans, 113).await;
    assert_eq!(answer.status, 200, "127-deep arguments");
    let (run, effects) = assert_readable(&stepline, pid, trace).await;
    let warnings = run["warnings"].to_string();
    assert!(
        warnings.contains("nested deeper"),
        "run warnings: {warnings}"
    );
    let effects = effects["effects"].as_array().cloned().unwrap_or_default();
    let g = effects
        .iter()
        .find(|e| e["tool_call_id"] == "c2")
        .unwrap_or_else(|| panic!("no effect c2 in {effects:?}"));
    // Kept: the levels under the cap as structure, the rest as its JSON text.
    assert!(g["arguments"]["k"][0]["k"][0]["k"].is_array(), "{g}");
    assert!(g["result"].to_string().contains(r#"\"k\""#));
    // Later spans of the run are still taken (no 503 for the run).
    let later = span(
        trace,
        7,
        1,
        "execute_tool h",
        6,
        vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "h"),
            kv("gen_ai.tool.call.id", "c3"),
        ],
    );
    assert_eq!(export(&stepline, vec![later]).await.status, 200);
    assert_readable(&stepline, pid, trace).await;

    // 3. 150,000 attributes on an operation.details event.
    let trace = 14u8;
    let mut spans = base_run(trace);
    let mut details = span(
        trace,
        5,
        1,
        "chat m",
        4,
        vec![kv("gen_ai.operation.name", "chat")],
    );
    details.events = vec![Event {
        name: "gen_ai.client.inference.operation.details".into(),
        time_unix_nano: details.start_time_unix_nano,
        attributes: (0..150_000).map(|i| kv(&format!("k{i}"), "v")).collect(),
        ..Default::default()
    }];
    spans.push(details);
    let answer = export_beside_innocent(&stepline, spans, 114).await;
    assert_warned(&answer, "150,000 event attributes");
    assert_readable(&stepline, pid, trace).await;

    // 4. 160,000 tool calls in one response.
    let trace = 15u8;
    let mut spans = base_run(trace);
    let parts: Vec<Value> = (0..160_000)
        .map(|i| json!({"type": "tool_call", "id": format!("c{i}"), "name": "f", "arguments": {}}))
        .collect();
    spans.push(span(
        trace,
        5,
        1,
        "chat m",
        4,
        vec![
            kv("gen_ai.operation.name", "chat"),
            kv(
                "gen_ai.input.messages",
                r#"[{"role":"user","parts":[{"type":"text","content":"again"}]}]"#,
            ),
            kv(
                "gen_ai.output.messages",
                &json!([{"role": "assistant", "parts": parts}]).to_string(),
            ),
        ],
    ));
    let answer = export_beside_innocent(&stepline, spans, 115).await;
    assert_warned(&answer, "160,000 tool calls");
    assert_readable(&stepline, pid, trace).await;
}
