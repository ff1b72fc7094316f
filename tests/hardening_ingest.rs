//! Fault isolation, alias ownership and crash safety of ingest, against the real binary.
//!
//! - A run whose stored record is damaged (overwritten on disk while stepline is stopped): its
//!   later spans are refused permanently (400, not a retryable 503), an innocent request sent
//!   at the same moment commits within 2 s, the run stays listed with the damage, and the
//!   inactivity sweep still abandons another silent run.
//! - An alias (`gen_ai.agent.call.id`) stays with the first run that claimed it.
//! - SIGKILL under load from 4 clients: after a restart every acknowledged span is there, every
//!   run reads back, and every record of the store decodes.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::Value;
use stepline::store::keys::cf;
use stepline::store::{Store, DAMAGED_WARNING};
use support::{Options, Stepline};

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        key_strindex: 0,
    }
}

/// Span ids of one agent trace (Pydantic AI's shape).
const AGENT: u8 = 1;
const CHAT_1: u8 = 2;
const TOOL: u8 = 3;
const CHAT_2: u8 = 4;

/// A trace id from a number.
fn trace_id(n: u64) -> Vec<u8> {
    let mut id = vec![0xab; 8];
    id.extend_from_slice(&n.to_be_bytes());
    id
}

/// The run id stepline gives the agent run of trace `n`.
fn run_of(n: u64) -> String {
    format!("{}-{}", hex::encode(trace_id(n)), hex::encode([AGENT; 8]))
}

fn span(n: u64, id: u8, parent: u8, name: &str, start: u64, attributes: Vec<KeyValue>) -> Span {
    Span {
        trace_id: trace_id(n),
        span_id: vec![id; 8],
        parent_span_id: if parent == 0 { vec![] } else { vec![parent; 8] },
        name: name.into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 1_000,
        attributes,
        ..Default::default()
    }
}

/// The spans of one agent run of trace `n` with alias `call`: a model request that calls a
/// tool, the tool, a second model request that answers with `answer`, and the run span.
fn agent_trace(n: u64, call: &str, answer: &str) -> Vec<Span> {
    let op = |v: &str| kv("gen_ai.operation.name", v);
    let t0 = 1_700_000_000_000_000_000 + n * 1_000_000;
    let user = format!(r#"{{"role":"user","parts":[{{"type":"text","content":"question {n}"}}]}}"#);
    let call_part = r#"{"role":"assistant","parts":[{"type":"tool_call","id":"c1","name":"lookup","arguments":{"q":"x"}}]}"#;
    let result_part =
        r#"{"role":"user","parts":[{"type":"tool_call_response","id":"c1","response":"42"}]}"#;
    vec![
        span(
            n,
            CHAT_1,
            AGENT,
            "chat m",
            t0 + 100,
            vec![
                op("chat"),
                kv("gen_ai.agent.call.id", call),
                kv("gen_ai.input.messages", &format!("[{user}]")),
                kv("gen_ai.output.messages", &format!("[{call_part}]")),
            ],
        ),
        span(
            n,
            TOOL,
            AGENT,
            "execute_tool lookup",
            t0 + 2_000,
            vec![
                op("execute_tool"),
                kv("gen_ai.tool.call.id", "c1"),
                kv("gen_ai.tool.name", "lookup"),
                kv("gen_ai.tool.call.result", "42"),
            ],
        ),
        span(
            n,
            CHAT_2,
            AGENT,
            "chat m",
            t0 + 4_000,
            vec![
                op("chat"),
                kv("gen_ai.agent.call.id", call),
                kv(
                    "gen_ai.input.messages",
                    &format!("[{user},{call_part},{result_part}]"),
                ),
                kv(
                    "gen_ai.output.messages",
                    &format!(
                        r#"[{{"role":"assistant","parts":[{{"type":"text","content":"{answer}"}}]}}]"#
                    ),
                ),
            ],
        ),
        span(
            n,
            AGENT,
            0,
            "invoke_agent a",
            t0,
            vec![
                op("invoke_agent"),
                kv("gen_ai.agent.name", "a"),
                kv("gen_ai.agent.call.id", call),
            ],
        ),
    ]
}

fn request(spans: Vec<Span>) -> Vec<u8> {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// POSTs spans to OTLP/HTTP as protobuf: the status and the body (a protobuf `Status` on
/// errors, whose message is readable as text), or the transport error.
async fn send(
    client: &reqwest::Client,
    otlp: &str,
    spans: Vec<Span>,
) -> Result<(u16, String), String> {
    let response = client
        .post(format!("{otlp}/v1/traces"))
        .header("content-type", "application/x-protobuf")
        .body(request(spans))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response.bytes().await.map_err(|e| e.to_string())?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

async fn send_ok(stepline: &Stepline, spans: Vec<Span>) {
    let (status, body) = send(stepline.client(), &stepline.otlp_http_url(), spans)
        .await
        .unwrap_or_else(|e| panic!("POST /v1/traces failed: {e}\n{}", stepline.log_tail()));
    assert_eq!(status, 200, "{body}\n{}", stepline.log_tail());
}

/// Opens the stopped binary's store in this process.
fn open_store(stepline: &Stepline) -> Store {
    Store::open(&stepline.data_dir(), true).expect("open the store of the stopped binary")
}

fn warnings(run: &Value) -> Vec<String> {
    run["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_damaged_run_is_refused_permanently_and_blocks_nothing() {
    let mut stepline = Stepline::start_with(Options {
        inactivity_timeout: "3s".into(),
        ..Default::default()
    })
    .await;
    // Run 1 (to be damaged) and run 2 (to go silent): one model request each, no end.
    let (damaged, silent, innocent) = (1u64, 2u64, 3u64);
    send_ok(&stepline, agent_trace(damaged, "call-d", "a")[..1].to_vec()).await;
    send_ok(&stepline, agent_trace(silent, "call-s", "a")[..1].to_vec()).await;
    assert!(stepline.terminate(Duration::from_secs(20)).is_some());

    // Garbage over run 1's meta, which the writer reads for every span of the run.
    {
        let store = open_store(&stepline);
        let mut batch = store.batch();
        batch
            .put_raw(cf::RUN_META, run_of(damaged).as_bytes(), b"\x00garbage{")
            .unwrap();
        store.commit(batch).unwrap();
    }
    stepline.start_again().await;

    // A later span of the damaged run and an innocent request, at the same moment.
    let client = stepline.client().clone();
    let otlp = stepline.otlp_http_url();
    let started = Instant::now();
    let (bad, good) = tokio::join!(
        send(
            &client,
            &otlp,
            agent_trace(damaged, "call-d", "a")[1..2].to_vec()
        ),
        async {
            let answer = send(&client, &otlp, agent_trace(innocent, "call-i", "fine")).await;
            (answer, started.elapsed())
        },
    );
    let (status, body) = bad.expect("the damaged run's span is answered");
    assert_eq!(status, 400, "permanent, not retryable: {body}");
    assert!(body.contains(&run_of(damaged)), "names the run: {body}");
    let (answer, took) = good;
    assert_eq!(answer.expect("the innocent request is answered").0, 200);
    assert!(
        took < Duration::from_secs(2),
        "innocent request took {took:?}"
    );
    // Refused again, the same way, when retried.
    let (status, _) = send(
        &client,
        &otlp,
        agent_trace(damaged, "call-d", "a")[1..2].to_vec(),
    )
    .await
    .unwrap();
    assert_eq!(status, 400);

    // The run is listed, with its damage; the innocent run reads back in full.
    let runs = stepline.get_list("/v1/runs?limit=100", "runs").await;
    let listed = runs
        .iter()
        .find(|r| r["run_id"] == run_of(damaged))
        .unwrap_or_else(|| panic!("the damaged run is not listed: {runs:?}"));
    assert!(
        warnings(listed)
            .iter()
            .any(|w| w.starts_with(DAMAGED_WARNING) && w.contains(cf::RUN_META.name())),
        "{listed}"
    );
    let run = stepline
        .get_ok(&format!("/v1/runs/{}", run_of(damaged)))
        .await;
    assert!(warnings(&run)[0].starts_with(DAMAGED_WARNING), "{run}");
    let fine = stepline
        .get_ok(&format!("/v1/runs/{}", run_of(innocent)))
        .await;
    assert_eq!(fine["status"], "completed", "{fine}");

    // The sweep passes the damaged run by and still abandons the silent one.
    let path = format!("/v1/runs/{}", run_of(silent));
    stepline
        .wait_for(
            "the silent run to be abandoned",
            Duration::from_secs(20),
            || {
                let stepline = &stepline;
                let path = path.clone();
                async move {
                    let run = stepline.get_ok(&path).await;
                    if run["status"] == "abandoned" {
                        Ok(())
                    } else {
                        Err(run.to_string())
                    }
                }
            },
        )
        .await;
    assert_eq!(stepline.get("/healthz").await.status, 200);

    // Nothing but the record we damaged fails to read back.
    assert!(stepline.terminate(Duration::from_secs(20)).is_some());
    let unreadable = open_store(&stepline).check_readable().unwrap();
    assert_eq!(unreadable.len(), 1, "{unreadable:?}");
    assert_eq!(unreadable[0].cf, cf::RUN_META);
    assert_eq!(unreadable[0].key, run_of(damaged).into_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_alias_cannot_be_taken_over_by_another_run() {
    let mut stepline = Stepline::start().await;
    // Separate requests: the first run claims the alias; the second carries it too.
    send_ok(&stepline, agent_trace(10, "shared-call", "first answer")).await;
    send_ok(&stepline, agent_trace(11, "shared-call", "second answer")).await;
    // In one request: the run that comes first in it keeps the alias.
    let mut both = agent_trace(12, "one-request-call", "first answer");
    both.extend(agent_trace(13, "one-request-call", "second answer"));
    send_ok(&stepline, both).await;

    for (alias, owner, claimant) in [("shared-call", 10, 11), ("one-request-call", 12, 13)] {
        let run = stepline.get_ok(&format!("/v1/runs/{alias}")).await;
        assert_eq!(run["run_id"], run_of(owner), "{alias}: {run}");
        let continuation = stepline
            .get_ok(&format!("/v1/runs/{alias}/continuation?format=otel"))
            .await;
        let text = continuation["messages"].to_string();
        assert!(text.contains("first answer"), "{alias}: {text}");
        assert!(!text.contains("second answer"), "{alias}: {text}");
        let second = stepline
            .get_ok(&format!("/v1/runs/{}", run_of(claimant)))
            .await;
        assert!(
            warnings(&second)
                .iter()
                .any(|w| w.contains(alias) && w.contains(&run_of(owner))),
            "{alias}: {second}"
        );
        assert!(warnings(&run).is_empty(), "{run}");
    }
    // Still so after a restart.
    stepline.restart().await;
    let run = stepline.get_ok("/v1/runs/shared-call").await;
    assert_eq!(run["run_id"], run_of(10));
    assert!(stepline.terminate(Duration::from_secs(20)).is_some());
    assert_eq!(open_store(&stepline).check_readable().unwrap(), Vec::new());
}

/// What one client had acknowledged, per trace: spans by id.
type Acked = BTreeMap<u64, Vec<u8>>;

/// Sends agent traces until `stop` (or until stepline stops answering): half in one request,
/// half as the first model request then the rest. Returns the spans answered 200.
async fn client_load(client_no: u64, otlp: String, stop: Arc<AtomicBool>) -> Acked {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let mut acked = Acked::new();
    for k in 0..100_000u64 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let n = 1_000 + client_no * 100_000 + k;
        let spans = agent_trace(n, &format!("call-{n}"), "done");
        let requests: Vec<Vec<Span>> = if k % 2 == 0 {
            vec![spans]
        } else {
            vec![spans[..1].to_vec(), spans[1..].to_vec()]
        };
        for request in requests {
            let ids: Vec<u8> = request.iter().map(|s| s.span_id[0]).collect();
            match send(&client, &otlp, request).await {
                Ok((200, _)) => acked.entry(n).or_default().extend(ids),
                Ok((status, body)) => panic!("client {client_no}: {status} {body}"),
                // Killed mid-request: not acknowledged.
                Err(_) => return acked,
            }
        }
    }
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_span_survives_sigkill_under_load() {
    let mut stepline = Stepline::start().await;
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|c| tokio::spawn(client_load(c, stepline.otlp_http_url(), stop.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(4)).await;
    stepline.kill(); // SIGKILL, mid-stream
    stop.store(true, Ordering::Relaxed);
    let mut acked = Acked::new();
    for client in clients {
        acked.extend(client.await.expect("client task"));
    }
    let spans: usize = acked.values().map(Vec::len).sum();
    println!(
        "acknowledged before SIGKILL: {spans} spans of {} traces",
        acked.len()
    );
    assert!(acked.len() >= 20, "too little load to test: {spans} spans");

    stepline.start_again().await;
    for (n, ids) in &acked {
        let run_id = run_of(*n);
        // A request committed just before the kill may have lost only its answer: what was
        // acknowledged is there, maybe more.
        let run = stepline.get_ok(&format!("/v1/runs/{run_id}")).await;
        let models = ids
            .iter()
            .filter(|id| [CHAT_1, CHAT_2].contains(id))
            .count() as u64;
        let stored = run["model_request_count"].as_u64().unwrap_or(0);
        assert!(stored >= models, "{models} acknowledged: {run}");
        assert_eq!(
            run["tool_call_count"], 1,
            "the model asked for one call: {run}"
        );
        if ids.contains(&AGENT) {
            assert_eq!(run["status"], "completed", "{run}");
        }
        let effects = stepline
            .get_list(&format!("/v1/runs/{run_id}/effects"), "effects")
            .await;
        assert_eq!(effects.len(), 1, "{effects:?}");
        if ids.contains(&TOOL) {
            assert_eq!(effects[0]["status"], "completed", "{effects:?}");
        }
        for path in ["events", "snapshots"] {
            stepline.get_ok(&format!("/v1/runs/{run_id}/{path}")).await;
        }
        stepline
            .get_ok(&format!(
                "/v1/runs/{run_id}/continuation?format=otel&include_interrupted=true"
            ))
            .await;
        let alias = stepline.get_ok(&format!("/v1/runs/call-{n}")).await;
        assert_eq!(alias["run_id"], run_id);
    }
    assert!(stepline.terminate(Duration::from_secs(20)).is_some());
    assert_eq!(open_store(&stepline).check_readable().unwrap(), Vec::new());
}
