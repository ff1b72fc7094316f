//! Memory hardening against the real `stepline` binary: requests are counted before they are
//! decoded (a 16 KB gzip body of 8 M empty spans is refused over OTLP/HTTP protobuf and JSON and
//! over OTLP/gRPC without the process growing), an innocent request sent meanwhile is answered
//! promptly, the caches report their byte budgets, and a media reference forged by a sender is
//! never resolved.

mod support;

use std::io::Write;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::{Buf, BufMut, Bytes};
use serde_json::{json, Value};
use support::{Options, Stepline};
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Empty spans in the bomb: 2 bytes each on the wire, 16 MB in all.
const BOMB_SPANS: usize = 8 * 1024 * 1024;

/// Peak resident memory the process may reach while refusing the bombs.
const MAX_PEAK_RSS: u64 = 1 << 30;

fn push_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// `ExportTraceServiceRequest` with one resource, one scope and `spans` empty spans, encoded by
/// hand (building it with prost would take gigabytes here too).
fn empty_span_bomb(spans: usize) -> Vec<u8> {
    let mut scope = Vec::with_capacity(2 * spans + 16);
    scope.push(0x12); // ResourceSpans.scope_spans
    push_varint(&mut scope, 2 * spans as u64);
    for _ in 0..spans {
        scope.extend_from_slice(&[0x12, 0x00]); // ScopeSpans.spans, empty
    }
    let mut body = vec![0x0a]; // ExportTraceServiceRequest.resource_spans
    push_varint(&mut body, scope.len() as u64);
    body.extend_from_slice(&scope);
    body
}

/// The same bomb in OTLP/JSON: `{}` per span.
fn empty_span_bomb_json(spans: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(3 * spans + 64);
    body.extend_from_slice(br#"{"resourceSpans":[{"scopeSpans":[{"spans":["#);
    for i in 0..spans {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(b"{}");
    }
    body.extend_from_slice(b"]}]}]}");
    body
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes).expect("gzip in memory");
    enc.finish().expect("gzip in memory")
}

/// `VmHWM` (peak resident set) of a process, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("VmHWM in /proc/<pid>/status")
}

/// A gRPC codec that sends and receives message bytes as they are, so the test can send a
/// request it never builds as structs.
#[derive(Default, Clone)]
struct RawCodec;

struct RawEncoder;
struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// Sends `message` to the trace service over gRPC, gzip-compressed.
async fn grpc_export(stepline: &Stepline, message: Bytes) -> Result<Bytes, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(stepline.otlp_grpc_url())
        .expect("gRPC endpoint")
        .connect()
        .await
        .expect("connect to the gRPC receiver");
    let mut grpc = tonic::client::Grpc::new(channel)
        .send_compressed(CompressionEncoding::Gzip)
        .max_encoding_message_size(usize::MAX);
    grpc.ready().await.expect("gRPC channel ready");
    let path = http::uri::PathAndQuery::from_static(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    );
    grpc.unary(tonic::Request::new(message), path, RawCodec)
        .await
        .map(tonic::Response::into_inner)
}

/// POSTs an OTLP/HTTP trace request; returns the status and the body as text.
async fn http_export(
    stepline: &Stepline,
    content_type: &str,
    gzipped: bool,
    body: Vec<u8>,
) -> (u16, String) {
    let mut request = stepline
        .client()
        .post(format!("{}/v1/traces", stepline.otlp_http_url()))
        .header("content-type", content_type)
        .body(body);
    if gzipped {
        request = request.header("content-encoding", "gzip");
    }
    let reply = request.send().await.expect("POST /v1/traces");
    let status = reply.status().as_u16();
    let body = reply.bytes().await.unwrap_or_default();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// [`http_export`], sent again (as OTLP clients do) while it is answered 503: all decoding
/// slots busy with the other bombs.
async fn http_export_retrying(
    stepline: &Stepline,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, String) {
    for _ in 0..20 {
        let reply = http_export(stepline, content_type, true, body.clone()).await;
        if reply.0 != 503 {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("still busy after 20 tries");
}

/// [`grpc_export`], sent again while it is answered UNAVAILABLE.
async fn grpc_export_retrying(stepline: &Stepline, message: Bytes) -> Result<Bytes, tonic::Status> {
    for _ in 0..20 {
        match grpc_export(stepline, message.clone()).await {
            Err(status) if status.code() == tonic::Code::Unavailable => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
    panic!("still busy after 20 tries");
}

/// An OTLP/JSON request with one model-request span of conversation `conversation`, whose input
/// holds `parts` in a user message.
fn chat_span(trace_hex: &str, conversation: &str, parts: Value) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let input = json!([{"role": "user", "parts": parts}]);
    let output = json!([{"role": "assistant", "parts": [{"type": "text", "content": "ok"}]}]);
    let attr = |k: &str, v: &str| json!({"key": k, "value": {"stringValue": v}});
    let body = json!({"resourceSpans": [{"scopeSpans": [{
        "scope": {"name": "pydantic-ai", "version": "2.68.0"},
        "spans": [{
            "traceId": trace_hex,
            "spanId": "eee19b7ec3c1b174",
            "parentSpanId": "eee19b7ec3c1b173",
            "name": "chat probe-model",
            "kind": 1,
            "startTimeUnixNano": (now - 2_000_000).to_string(),
            "endTimeUnixNano": (now - 1_000_000).to_string(),
            "attributes": [
                attr("gen_ai.operation.name", "chat"),
                attr("gen_ai.request.model", "probe-model"),
                attr("gen_ai.conversation.id", conversation),
                attr("gen_ai.input.messages", &input.to_string()),
                attr("gen_ai.output.messages", &output.to_string()),
            ],
        }]
    }]}]});
    serde_json::to_vec(&body).expect("serialise JSON")
}

/// The run id of the one run of `conversation`.
async fn run_of(stepline: &Stepline, conversation: &str) -> String {
    let runs = stepline
        .get_list(&format!("/v1/runs?conversation_id={conversation}"), "runs")
        .await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0]["run_id"].as_str().expect("run_id").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn span_bombs_are_refused_before_decoding_and_memory_stays_bounded() {
    let stepline = Stepline::start().await;
    let pid = stepline.pid().expect("stepline pid");
    let raw = empty_span_bomb(BOMB_SPANS);
    let compressed = gzip(&raw);
    assert!(
        compressed.len() < 64 * 1024,
        "a 16 MB bomb compresses to {} bytes",
        compressed.len()
    );
    let json_compressed = gzip(&empty_span_bomb_json(BOMB_SPANS));
    let before = peak_rss(pid);

    // The bombs, three over each path, all at once.
    let (s, proto_body, json_body, raw_body) = (&stepline, &compressed, &json_compressed, &raw);
    let round = move || async move {
        tokio::join!(
            http_export_retrying(s, "application/x-protobuf", proto_body.clone()),
            http_export_retrying(s, "application/json", json_body.clone()),
            grpc_export_retrying(s, Bytes::from(raw_body.clone())),
        )
    };
    let started = Instant::now();
    let (r1, r2, r3) = tokio::join!(round(), round(), round());
    eprintln!("9 bombs refused in {:?}", started.elapsed());
    for ((http_status, http_body), (json_status, json_body), grpc) in [r1, r2, r3] {
        assert_eq!(http_status, 413, "{http_body}");
        assert_eq!(json_status, 413, "{json_body}");
        for body in [&http_body, &json_body] {
            assert!(
                body.contains(&format!("{BOMB_SPANS} spans"))
                    && body.contains("65536")
                    && body.contains("processors.stepline.limits.max_spans_per_request"),
                "the refusal names the count, the cap and the key: {body}"
            );
        }
        let status = grpc.expect_err("the gRPC bomb is refused");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert!(
            status.message().contains("max_spans_per_request"),
            "{status:?}"
        );
        assert!(
            status.details().is_empty(),
            "no RetryInfo: the client must not retry"
        );
    }
    let peak = peak_rss(pid);
    assert!(
        peak < MAX_PEAK_RSS,
        "peak RSS {peak} bytes (was {before} before the bombs)"
    );
    eprintln!(
        "peak RSS while refusing 9 bombs of {BOMB_SPANS} spans: {} MiB (before: {} MiB)",
        peak >> 20,
        before >> 20
    );

    // Bombs and an innocent request at the same moment: the innocent one is answered in time.
    let innocent = chat_span(
        "1c1f0e2d3b4a59687766554433221100",
        "innocent",
        json!([
            {"type": "text", "content": "hello"}
        ]),
    );
    let bomb = move || http_export_retrying(s, "application/x-protobuf", proto_body.clone());
    let grpc_bomb = move || grpc_export_retrying(s, Bytes::from(raw_body.clone()));
    let innocent_request = async {
        // Let the bombs reach the server first.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let started = Instant::now();
        let reply = http_export(&stepline, "application/json", false, innocent).await;
        (reply, started.elapsed())
    };
    let (b1, b2, b3, g1, ((status, body), took)) =
        tokio::join!(bomb(), bomb(), bomb(), grpc_bomb(), innocent_request);
    assert_eq!(status, 200, "{body}");
    assert!(
        took < Duration::from_secs(2),
        "the innocent request took {took:?}"
    );
    for (status, body) in [b1, b2, b3] {
        assert_eq!(status, 413, "{body}");
    }
    assert_eq!(
        g1.expect_err("refused").code(),
        tonic::Code::ResourceExhausted
    );
    eprintln!("innocent request answered in {took:?} beside four bombs");
    let peak = peak_rss(pid);
    assert!(peak < MAX_PEAK_RSS, "peak RSS {peak} bytes");
    let run = run_of(&stepline, "innocent").await;
    assert!(!run.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_and_budgets_come_from_the_config() {
    // The generated config has `stepline: { inactivity_timeout: <this> }`: the other keys ride
    // along in the same flow mapping.
    let options = Options {
        inactivity_timeout: "10m, limits: { max_spans_per_request: 3 }, \
                             memory: { cache_budget: 100MiB, history: 7MiB }"
            .into(),
        ..Options::default()
    };
    let stepline = Stepline::start_with(options).await;
    let spans: Vec<Value> = (0..4)
        .map(|i| json!({"traceId": "2c1f0e2d3b4a59687766554433221100", "spanId": format!("000000000000000{i}"), "name": "s"}))
        .collect();
    let body = json!({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).to_string();
    let (status, text) = http_export(&stepline, "application/json", false, body.into()).await;
    assert_eq!(status, 413, "{text}");
    assert!(
        text.contains(
            "request holds 4 spans, over the limit of 3 per request \
                       (processors.stepline.limits.max_spans_per_request)"
        ),
        "{text}"
    );

    let history = "stepline_cache_budget_bytes{cache=\"history\"}";
    assert_eq!(stepline.metric(history).await, 7 << 20);
    let rendered = "stepline_cache_budget_bytes{cache=\"rendered\"}";
    assert_eq!(stepline.metric(rendered).await, (100 << 20) / 5);
    for cache in stepline::api::CACHE_LABELS {
        let used = stepline
            .metric(&format!("stepline_cache_bytes{{cache=\"{cache}\"}}"))
            .await;
        let budget = stepline
            .metric(&format!("stepline_cache_budget_bytes{{cache=\"{cache}\"}}"))
            .await;
        assert!(used <= budget, "{cache}: {used} > {budget}");
    }
    // The existing gauges keep their names.
    stepline.metric("stepline_history_cache_messages").await;
    stepline.metric("stepline_rendered_cache_bytes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_media_reference_is_never_resolved() {
    let stepline = Stepline::start().await;
    // Someone else's run stores an image (over the 64 KiB threshold) in the media store.
    let secret = vec![42u8; 70 * 1024];
    let secret_text = base64::engine::general_purpose::STANDARD.encode(&secret);
    let theirs = chat_span(
        "3c1f0e2d3b4a59687766554433221100",
        "theirs",
        json!([
            {"type": "blob", "modality": "image", "mime_type": "image/png", "content": secret_text}
        ]),
    );
    let (status, body) = http_export(&stepline, "application/json", false, theirs).await;
    assert_eq!(status, 200, "{body}");
    let their_run = run_of(&stepline, "theirs").await;
    let their_view = stepline
        .get_ok(&format!(
            "/v1/runs/{their_run}/continuation?include_interrupted=true&media=reference"
        ))
        .await;
    let reference = their_view["messages"][0]["parts"][0]["uri"]
        .as_str()
        .unwrap_or_else(|| panic!("the blob was stored as a reference: {their_view}"))
        .to_string();
    assert!(reference.starts_with("media+sha256://"), "{reference}");

    // A sender who knows the hash sends a part shaped like a stored reference.
    let forged = json!({"type": "blob", "modality": "image", "mime_type": "image/png",
                        "content": reference, "size": secret.len()});
    let mine = chat_span("4c1f0e2d3b4a59687766554433221100", "mine", json!([forged]));
    let (status, body) = http_export(&stepline, "application/json", false, mine).await;
    assert_eq!(status, 200, "{body}");
    let my_run = run_of(&stepline, "mine").await;
    for media in ["inline", "reference"] {
        let view = stepline
            .get_ok(&format!(
                "/v1/runs/{my_run}/continuation?include_interrupted=true&media={media}"
            ))
            .await;
        let part = &view["messages"][0]["parts"][0];
        assert_eq!(part["type"], "uri", "media={media}: {view}");
        assert_eq!(part["uri"], json!(reference), "the URI the sender gave");
        assert!(
            !view.to_string().contains(&secret_text[..64]),
            "media={media}: the blob's bytes were resolved into a forged history"
        );
    }
    // The owner still gets the bytes back.
    let restored = stepline
        .get_ok(&format!(
            "/v1/runs/{their_run}/continuation?include_interrupted=true"
        ))
        .await;
    assert_eq!(
        restored["messages"][0]["parts"][0]["content"],
        json!(secret_text)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_answer_over_its_media_limit_points_to_references() {
    let options = Options {
        media: Some("{max_inline_bytes: 100KiB}".into()),
        ..Options::default()
    };
    let stepline = Stepline::start_with(options).await;
    let parts: Vec<Value> = (0..2u8)
        .map(|i| {
            let data = base64::engine::general_purpose::STANDARD.encode(vec![i; 70 * 1024]);
            json!({"type": "blob", "modality": "image", "mime_type": "image/png", "content": data})
        })
        .collect();
    let body = chat_span(
        "5c1f0e2d3b4a59687766554433221100",
        "big",
        Value::Array(parts),
    );
    let (status, text) = http_export(&stepline, "application/json", false, body).await;
    assert_eq!(status, 200, "{text}");
    let run = run_of(&stepline, "big").await;
    let base = format!("/v1/runs/{run}/continuation?include_interrupted=true");
    let refused = stepline.get(&base).await;
    assert_eq!(refused.status, 413, "{}", refused.text);
    let message = refused.error_message();
    assert!(
        message.contains("media=reference") && message.contains("max_inline_bytes"),
        "{message}"
    );
    let by_reference = stepline.get_ok(&format!("{base}&media=reference")).await;
    assert_eq!(by_reference["messages"][0]["parts"][1]["type"], "uri");
}

/// An OTLP/JSON request with one model-request span of conversation `conversation` whose input
/// is `messages` messages of about `bytes_each` bytes.
fn long_chat_span(
    trace_hex: &str,
    conversation: &str,
    messages: usize,
    bytes_each: usize,
) -> Vec<u8> {
    let parts: Vec<Value> = (0..messages)
        .map(|n| json!({"type": "text", "content": format!("{n:06} {}", "x".repeat(bytes_each))}))
        .collect();
    // One message per part, alternating roles, so the history is `messages` long.
    let input: Vec<Value> = parts
        .into_iter()
        .enumerate()
        .map(|(n, part)| {
            let role = if n % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "parts": [part]})
        })
        .collect();
    let mut body: Value =
        serde_json::from_slice(&chat_span(trace_hex, conversation, json!([]))).expect("JSON");
    let attributes = body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
        .as_array_mut()
        .expect("attributes");
    for attribute in attributes.iter_mut() {
        if attribute["key"] == "gen_ai.input.messages" {
            attribute["value"]["stringValue"] = json!(Value::Array(input.clone()).to_string());
        }
    }
    serde_json::to_vec(&body).expect("serialise JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_cache_stays_within_its_byte_budget() {
    let budget: u64 = 4 << 20;
    let options = Options {
        inactivity_timeout: "10m, memory: { history: 4MiB, rendered: 1MiB }".into(),
        ..Options::default()
    };
    let stepline = Stepline::start_with(options).await;
    let pid = stepline.pid().expect("pid");
    let history_bytes = "stepline_cache_bytes{cache=\"history\"}";
    assert_eq!(
        stepline
            .metric("stepline_cache_budget_bytes{cache=\"history\"}")
            .await,
        budget
    );

    // One run whose history alone is over the budget (300 messages of 20 KB): quiet, it is not
    // loaded ahead; read, it is answered but not kept.
    let big = long_chat_span("6c1f0e2d3b4a59687766554433221100", "too-big", 300, 20_000);
    let (status, text) = http_export(&stepline, "application/json", false, big).await;
    assert_eq!(status, 200, "{text}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(stepline.metric(history_bytes).await, 0, "not loaded ahead");
    assert_eq!(stepline.metric("stepline_history_cache_messages").await, 0);
    let run = run_of(&stepline, "too-big").await;
    let view = stepline
        .get_ok(&format!(
            "/v1/runs/{run}/continuation?include_interrupted=true"
        ))
        .await;
    assert_eq!(view["messages"].as_array().map(Vec::len), Some(301));
    assert_eq!(stepline.metric(history_bytes).await, 0, "not kept either");

    // 24 runs of about 1 MB each, every one read: the cache holds what fits, never more.
    for i in 0..24u32 {
        let trace = format!("{:08x}1f0e2d3b4a5968776655443322110{}", i, i % 10);
        let body = long_chat_span(&trace[..32], &format!("run-{i}"), 260, 4_000);
        let (status, text) = http_export(&stepline, "application/json", false, body).await;
        assert_eq!(status, 200, "{text}");
    }
    let mut peak_held = 0;
    for i in 0..24u32 {
        let run = run_of(&stepline, &format!("run-{i}")).await;
        stepline
            .get_ok(&format!(
                "/v1/runs/{run}/continuation?include_interrupted=true"
            ))
            .await;
        let held = stepline.metric(history_bytes).await;
        assert!(
            held <= budget,
            "history cache holds {held} bytes over its {budget}"
        );
        peak_held = peak_held.max(held);
    }
    assert!(peak_held > budget / 2, "the budget is used: {peak_held}");
    for cache in stepline::api::CACHE_LABELS {
        let used = stepline
            .metric(&format!("stepline_cache_bytes{{cache=\"{cache}\"}}"))
            .await;
        let limit = stepline
            .metric(&format!("stepline_cache_budget_bytes{{cache=\"{cache}\"}}"))
            .await;
        assert!(used <= limit, "{cache}: {used} > {limit}");
        eprintln!("cache {cache}: {used} of {limit} bytes");
    }
    eprintln!(
        "peak RSS after 24 runs of ~1 MB read: {} MiB",
        peak_rss(pid) >> 20
    );
}
