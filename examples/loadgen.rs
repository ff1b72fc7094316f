//! Load generator for the `stepline` binary: measures OTLP trace ingest throughput with durable
//! acknowledgements.
//!
//! By default it starts `stepline` itself on free loopback ports with a fresh temporary data
//! directory (a `collector.yaml` written next to it, `sync: true`), waits for `/healthz`, sends
//! Pydantic-AI-2.x-shaped agent runs over OTLP/gRPC and/or OTLP/HTTP protobuf from `C`
//! concurrent connections, checks that every request is acknowledged (the server answers only
//! after a durable RocksDB commit), and prints throughput, request latency and bytes on disk per
//! run. With `--grpc` / `--http` (and optionally `--api`, `--data-dir`) it targets an instance that
//! is already running instead. Only loopback addresses are ever targeted. With `--rate` it sends
//! open loop at a fixed number of spans per second (each request at its scheduled time, answered
//! or not) and reports the acknowledgement latency at that load; `benches/peer_bench.py` uses it
//! to measure the latency at half the maximum throughput.
//!
//! The last line printed on stdout is a one-line JSON summary.
//!
//! ```text
//! cargo build --release
//! cargo run --release --example loadgen -- --runs 500
//! cargo run --release --example loadgen -- --transport http --batch-spans 5 --concurrency 8
//! cargo run --release --example loadgen -- --transport grpc --duration 20 --rate 3000
//! ```

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc;
use tonic::codec::CompressionEncoding;
use tonic::transport::{Channel, Endpoint};

/// Upper bound on the number of runs per transport, whatever the options say.
const MAX_RUNS: u64 = 10_000_000;
/// Runs per transport when neither `--runs` nor `--duration` is given.
const DEFAULT_RUNS: u64 = 2_000;
/// Jobs a generator may prepare ahead of its connection.
const JOBS_AHEAD: usize = 4;
/// One megabyte, as used in every MB and MB/s figure printed (decimal).
const MB: f64 = 1_000_000.0;

/// Command line of the load generator.
#[derive(Parser, Debug)]
#[command(
    name = "loadgen",
    about = "Measure stepline OTLP ingest throughput with durable acknowledgements"
)]
struct Args {
    /// `stepline` binary to start. Default: `$CARGO_TARGET_DIR/release/stepline`, then
    /// `target/release/stepline`.
    #[arg(long)]
    bin: Option<PathBuf>,
    /// OTLP/gRPC endpoint (ip:port, loopback only) of an instance that is already running.
    /// Giving `--grpc` or `--http` disables starting a server.
    #[arg(long)]
    grpc: Option<SocketAddr>,
    /// OTLP/HTTP endpoint (ip:port, loopback only) of an instance that is already running.
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Query API endpoint (ip:port, loopback only) of a running instance: health check before
    /// the load and a read-back of one run after it.
    #[arg(long)]
    api: Option<SocketAddr>,
    /// Data directory of a running instance, to measure bytes on disk per run.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Which OTLP transport to load; `both` runs gRPC then HTTP, each with the full run count.
    #[arg(long, value_enum, default_value_t = TransportChoice::Both)]
    transport: TransportChoice,
    /// Concurrent connections (each one sends its requests one after the other).
    #[arg(short, long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    concurrency: u32,
    /// Agent runs to send per transport (default 2000; unbounded up to 10 000 000 when
    /// `--duration` is given).
    #[arg(short, long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    runs: Option<u64>,
    /// Stop each transport's phase after this many seconds (whichever of runs/duration ends
    /// first).
    #[arg(short, long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Model requests per run; every step but the last one calls a tool, so a run has
    /// 2 x steps spans.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=500))]
    steps: u32,
    /// Approximate size in bytes of the user prompt, tool results, final answer and system
    /// instructions (each varies by +-25%).
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u32).range(16..=1_000_000))]
    message_bytes: u32,
    /// Spans per request. 0 = one whole run per request; otherwise each connection cuts its
    /// stream of spans (children in end order, run span last) into requests of this size,
    /// as a BatchSpanProcessor would.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    batch_spans: u32,
    /// Request compression (gRPC message compression / HTTP `Content-Encoding`).
    #[arg(long, value_enum, default_value_t = Compression::None)]
    compression: Compression,
    /// Producer conventions to generate, one phase each per transport (comma-separated):
    /// `pydantic-ai` (GenAI attributes), `strands` (Strands default mode: event-loop cycle spans,
    /// content in span events as Converse blocks), `openinference` (OpenAI Agents SDK via
    /// OpenInference), `openllmetry` (Traceloop, legacy flattened content), `adk` (Google
    /// ADK: workflow span, invented tool ids the messages do not use), `vercel-ai` (the Vercel
    /// AI SDK's `ai.*` spans, provider-prompt history in `ai.prompt.messages`) and/or
    /// `langchain` (LangGraph via OpenInference).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "pydantic-ai")]
    conventions: Vec<Convention>,
    /// Timeout of one export request, in seconds.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    request_timeout: u64,
    /// How long to wait for `/healthz` after starting the server, in seconds.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=600))]
    startup_timeout: u64,
    /// Hard limit on each transport's phase, in seconds.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    time_limit: u64,
    /// Abort a phase after this many failed requests.
    #[arg(long, default_value_t = 1000)]
    max_failures: u64,
    /// Seed of the id and text generator (default: time based, so runs never repeat).
    #[arg(long)]
    seed: Option<u64>,
    /// Keep the temporary directory (config, data, server log) of a started server.
    #[arg(long)]
    keep_data: bool,
    /// Forward the traces to an OTLP sink inside the load generator: the started server gets
    /// an `otlp` (gRPC) or `otlphttp` exporter to it. After the load, waits (bounded by
    /// `--time-limit`) until every acknowledged span reached the sink.
    #[arg(long, value_enum, default_value_t = Forward::None)]
    forward: Forward,
    /// Send plain (non-agent) spans: the same shapes and sizes, with span names and attribute
    /// keys that stepline does not interpret (pass-through only).
    #[arg(long)]
    plain_spans: bool,
    /// Open loop: offer this many spans per second in total (shared evenly by the
    /// connections). Each request leaves at its scheduled time whether or not the earlier ones
    /// were answered, so the latency figures are those of a fixed load, not of a client that
    /// slows down with the server. Without it every connection sends its next request as soon
    /// as the previous one is acknowledged (closed loop, the maximum throughput).
    #[arg(long, value_name = "SPANS_PER_S")]
    rate: Option<f64>,
    /// With `--rate`: requests one connection may have in flight; a request due while this
    /// many are unanswered waits (and its wait shows as schedule lag).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    max_in_flight: u32,
}

/// `--forward` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Forward {
    /// No exporter.
    None,
    /// An `otlp` (gRPC) exporter.
    Grpc,
    /// An `otlphttp` (protobuf) exporter.
    Http,
}

/// The in-process downstream of `--forward`: counts the spans it receives.
#[derive(Default)]
struct CountingSink {
    spans: AtomicU64,
}

impl stepline::receiver::ExportSink for CountingSink {
    async fn export_traces(
        &self,
        request: ExportTraceServiceRequest,
    ) -> Result<stepline::ingest::ExportOutcome, stepline::ingest::IngestError> {
        let spans: usize = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.spans.fetch_add(spans as u64, Ordering::Relaxed);
        Ok(Default::default())
    }

    async fn export_logs(
        &self,
        _request: opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest,
    ) -> Result<stepline::ingest::ExportOutcome, stepline::ingest::IngestError> {
        Ok(Default::default())
    }

    async fn export_metrics(
        &self,
        _request: opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest,
    ) -> Result<stepline::ingest::ExportOutcome, stepline::ingest::IngestError> {
        Ok(Default::default())
    }
}

/// Starts the sink of `--forward` on a free loopback port; returns the exporter YAML.
async fn start_sink(forward: Forward, sink: Arc<CountingSink>) -> Result<Option<String>> {
    if forward == Forward::None {
        return Ok(None);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the sink")?;
    let addr = listener.local_addr().context("sink address")?;
    let limits = stepline::receiver::ReceiverLimits {
        max_request_bytes: 256 << 20,
        ..Default::default()
    };
    let (kind, exporter) = match forward {
        Forward::Grpc => {
            tokio::spawn(stepline::receiver::serve_grpc(
                listener,
                sink,
                limits,
                std::future::pending(),
            ));
            ("otlp", "otlp/sink")
        }
        _ => {
            tokio::spawn(stepline::receiver::serve_http(
                listener,
                sink,
                limits,
                std::future::pending(),
            ));
            ("otlphttp", "otlphttp/sink")
        }
    };
    println!("forwarding to an in-process {kind} sink on {addr}");
    Ok(Some(format!(
        "exporters:\n  {exporter}:\n    endpoint: http://{addr}\n    compression: none\n"
    )))
}

/// CPU time (user + system) a process used so far, in seconds (`/proc/<pid>/stat`, assuming
/// the usual 100 clock ticks per second).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Peak resident set size (`VmHWM`) of a process, in kB.
fn peak_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
}

/// `--transport` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TransportChoice {
    /// OTLP/gRPC only.
    Grpc,
    /// OTLP/HTTP protobuf only.
    Http,
    /// gRPC first, then HTTP.
    Both,
}

/// Producer convention of the generated runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Convention {
    /// Pydantic AI 2.x: GenAI spans with message attributes.
    PydanticAi,
    /// Strands Agents 1.x default mode: run → event-loop cycle → chat/tool, content in span events.
    Strands,
    /// OpenAI Agents SDK via OpenInference: workflow → task → agent → turn → response/tool,
    /// Responses-shaped `input.value`/`output.value` plus flattened messages, tools without ids.
    Openinference,
    /// OpenLLMetry (Traceloop): `agent` span → legacy flattened `openai.chat` and `tool` spans
    /// without ids, session as an association property.
    Openllmetry,
    /// Google ADK (schema v2, `SPAN_ONLY` capture): `invoke_workflow` → `invoke_agent` →
    /// `generate_content` / `execute_tool`, tool results as `user` parts, tool spans under
    /// invented `adk-<uuid>` ids that the messages call `{name}_{index}` (joined by name,
    /// arguments and order), and an `execute_tool (merged)` span per run.
    Adk,
    /// Vercel AI SDK v6 `ai.*` spans: `ai.generateText` → `ai.generateText.doGenerate` (full
    /// provider prompt in `ai.prompt.messages`) and sibling `ai.toolCall` spans with ids.
    VercelAi,
    /// LangGraph via OpenInference: `{agent}` (AGENT, no `agent.name`) → `model` / `tools`
    /// (CHAIN) → LLM (lc-serialised `input.value`, `LLMResult` output, flattened messages) /
    /// TOOL (id only inside the `ToolMessage` of `output.value`), thread as `session.id`.
    Langchain,
}

impl Convention {
    /// Name used in the output.
    fn name(self) -> &'static str {
        match self {
            Convention::PydanticAi => "pydantic-ai",
            Convention::Strands => "strands",
            Convention::Openinference => "openinference",
            Convention::Openllmetry => "openllmetry",
            Convention::Adk => "adk",
            Convention::VercelAi => "vercel-ai",
            Convention::Langchain => "langchain",
        }
    }
}

/// One OTLP transport under load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    /// `TraceService/Export` over HTTP/2.
    Grpc,
    /// `POST /v1/traces` with `application/x-protobuf`.
    Http,
}

impl Transport {
    /// Lower-case name used in the output.
    fn name(self) -> &'static str {
        match self {
            Transport::Grpc => "grpc",
            Transport::Http => "http",
        }
    }
}

/// `--compression` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Compression {
    /// Uncompressed requests.
    None,
    /// gzip.
    Gzip,
    /// zstd.
    Zstd,
}

impl Compression {
    /// Lower-case name used in the output.
    fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }
}

/// Where the load goes.
#[derive(Debug)]
struct Target {
    /// OTLP/gRPC endpoint.
    grpc: Option<SocketAddr>,
    /// OTLP/HTTP endpoint.
    http: Option<SocketAddr>,
    /// Query API endpoint.
    api: Option<SocketAddr>,
    /// Data directory to measure.
    data_dir: Option<PathBuf>,
}

// ---------------------------------------------------------------------------------------------
// Random numbers and synthetic content
// ---------------------------------------------------------------------------------------------

/// SplitMix64: small and fast; good enough for ids and filler text, not cryptographic.
struct Rng(u64);

impl Rng {
    /// A generator started from `seed`.
    fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi.saturating_sub(lo) + 1)
    }

    /// A random element of a non-empty slice.
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next_u64() % items.len() as u64) as usize]
    }

    /// `N` random bytes, never all zero (OTLP treats all-zero ids as invalid).
    fn id<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        for chunk in out.chunks_mut(8) {
            let bytes = self.next_u64().to_be_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        if out.iter().all(|b| *b == 0) {
            out[N - 1] = 1;
        }
        out
    }

    /// A UUIDv7-shaped string (time-ordered prefix), like Pydantic AI's `gen_ai.agent.call.id`.
    fn uuid_v7(&mut self, unix_ms: u64) -> String {
        let a = self.next_u64();
        let b = self.next_u64();
        format!(
            "{:08x}-{:04x}-7{:03x}-{:04x}-{:012x}",
            (unix_ms >> 16) & 0xFFFF_FFFF,
            unix_ms & 0xFFFF,
            a & 0xFFF,
            0x8000 | ((a >> 12) & 0x3FFF),
            b & 0xFFFF_FFFF_FFFF
        )
    }

    /// A UUIDv4-shaped string.
    fn uuid_v4(&mut self) -> String {
        let a = self.next_u64();
        let b = self.next_u64();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xFFFF,
            a & 0xFFF,
            0x8000 | (b >> 50),
            b & 0xFFFF_FFFF_FFFF
        )
    }

    /// An OpenAI-style tool call id (`call_` + 24 alphanumerics).
    fn tool_call_id(&mut self) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let mut id = String::with_capacity(29);
        id.push_str("call_");
        for _ in 0..24 {
            id.push(*self.pick(ALPHABET) as char);
        }
        id
    }

    /// English-looking filler text of about `target` bytes (+-25%), ASCII only.
    fn text(&mut self, target: usize) -> String {
        #[rustfmt::skip]
        const WORDS: &[&str] = &[
            "the", "customer", "order", "shipment", "was", "delayed", "because", "warehouse",
            "inventory", "report", "shows", "that", "invoice", "payment", "refund", "policy",
            "requires", "approval", "from", "manager", "before", "we", "can", "process", "it",
            "please", "check", "status", "of", "account", "and", "summarise", "recent", "tickets",
            "latency", "increased", "after", "deployment", "database", "query", "returned", "rows",
            "with", "missing", "fields", "next", "step", "is", "to", "verify", "address",
            "contact", "support", "team", "escalate", "if", "needed", "according", "documentation",
            "section", "describes", "limits", "for", "requests", "per", "minute", "region",
        ];
        let target = target.max(8);
        let want = target * 3 / 4 + self.range(0, (target / 2) as u64) as usize;
        let mut out = String::with_capacity(want + 16);
        let mut sentence_start = true;
        while out.len() < want {
            if !out.is_empty() {
                out.push(' ');
            }
            let word = *self.pick(WORDS);
            if sentence_start {
                let mut chars = word.chars();
                if let Some(first) = chars.next() {
                    out.push(first.to_ascii_uppercase());
                    out.push_str(chars.as_str());
                }
            } else {
                out.push_str(word);
            }
            sentence_start = self.range(0, 11) == 0;
            if sentence_start {
                out.push('.');
            }
        }
        if !out.ends_with('.') {
            out.push('.');
        }
        out
    }
}

/// Wall clock in nanoseconds since the Unix epoch.
fn now_unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// OTLP building blocks
// ---------------------------------------------------------------------------------------------

/// A key/value attribute.
fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// A string attribute.
fn kv_str(key: &str, value: impl Into<String>) -> KeyValue {
    kv(key, any_value::Value::StringValue(value.into()))
}

/// An integer attribute.
fn kv_int(key: &str, value: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(value))
}

/// A string-array attribute.
fn kv_str_array(key: &str, values: &[&str]) -> KeyValue {
    let values = values
        .iter()
        .map(|v| AnyValue {
            value: Some(any_value::Value::StringValue((*v).to_owned())),
        })
        .collect();
    kv(key, any_value::Value::ArrayValue(ArrayValue { values }))
}

/// The resource every generated span is sent under (an instrumented Python agent service).
fn agent_resource() -> Resource {
    Resource {
        attributes: vec![
            kv_str("service.name", "loadgen-agent"),
            kv_str("telemetry.sdk.language", "python"),
            kv_str("telemetry.sdk.name", "opentelemetry"),
            kv_str("telemetry.sdk.version", "1.38.0"),
        ],
        ..Default::default()
    }
}

/// The instrumentation scope Pydantic AI uses.
fn pydantic_ai_scope() -> InstrumentationScope {
    InstrumentationScope {
        name: "pydantic-ai".to_owned(),
        version: "2.0.0".to_owned(),
        ..Default::default()
    }
}

/// Ids and times of one span, relative times in nanoseconds since the run started.
struct SpanShape {
    /// Span id.
    span_id: [u8; 8],
    /// Parent span id, `None` for the run span.
    parent: Option<[u8; 8]>,
    /// Span name.
    name: String,
    /// Span kind.
    kind: SpanKind,
    /// Start, relative to the run start.
    start: u64,
    /// End, relative to the run start.
    end: u64,
}

/// A finished span of a generated run plus the bookkeeping the report needs.
struct GeneratedSpan {
    /// The OTLP span.
    span: Span,
    /// Bytes of message JSON it carries (input/output messages, all_messages).
    message_bytes: u64,
    /// For the run span: the run id (`gen_ai.agent.call.id`).
    root_of: Option<String>,
}

/// Turns a [`SpanShape`] into an OTLP span of `trace_id`, shifted by `offset` nanoseconds.
fn make_span(
    trace_id: &[u8; 16],
    shape: SpanShape,
    offset: u64,
    attributes: Vec<KeyValue>,
) -> Span {
    Span {
        trace_id: trace_id.to_vec(),
        span_id: shape.span_id.to_vec(),
        parent_span_id: shape.parent.map(|p| p.to_vec()).unwrap_or_default(),
        // Sampled, parent known to be local: what the Python SDK sends.
        flags: 0x101,
        name: shape.name,
        kind: shape.kind as i32,
        start_time_unix_nano: offset + shape.start,
        end_time_unix_nano: offset + shape.end,
        attributes,
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Pydantic-AI-shaped runs
// ---------------------------------------------------------------------------------------------

/// Agent names a run is given.
const AGENTS: &[&str] = &[
    "support_agent",
    "research_agent",
    "billing_agent",
    "ops_agent",
];
/// Models and their providers.
const MODELS: &[(&str, &str)] = &[
    ("gpt-4o", "openai"),
    ("gpt-4.1-mini", "openai"),
    ("claude-sonnet-4-5", "anthropic"),
];
/// Tools the model calls.
const TOOLS: &[&str] = &[
    "search_docs",
    "get_order",
    "run_sql",
    "fetch_url",
    "lookup_customer",
    "send_email",
];

/// Arguments object of a call to `tool`, with free text of about `text_bytes`.
fn tool_arguments(rng: &mut Rng, tool: &str, text_bytes: usize) -> serde_json::Value {
    match tool {
        "search_docs" => json!({"query": rng.text(text_bytes), "top_k": rng.range(3, 10)}),
        "get_order" => json!({
            "order_id": format!("ord_{:08}", rng.range(0, 99_999_999)),
            "include_items": true,
            "note": rng.text(text_bytes),
        }),
        "run_sql" => json!({
            "statement": format!(
                "SELECT id, status, note FROM tickets WHERE note LIKE '%{}%' LIMIT {}",
                rng.text(text_bytes),
                rng.range(5, 50)
            ),
        }),
        "fetch_url" => json!({
            "url": format!("https://docs.example.com/kb/{}", rng.range(1, 99_999)),
            "reason": rng.text(text_bytes),
        }),
        "lookup_customer" => json!({
            "email": format!("user{}@example.com", rng.range(1, 999_999)),
            "fields": ["name", "plan", "open_tickets"],
            "context": rng.text(text_bytes),
        }),
        _ => json!({
            "to": format!("user{}@example.com", rng.range(1, 999_999)),
            "subject": rng.text(40),
            "body": rng.text(text_bytes),
        }),
    }
}

/// A message part in the OTel GenAI JSON form (`type` first, as producers write it).
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    /// `{"type":"text","content":...}`.
    Text {
        /// The text.
        content: &'a str,
    },
    /// `{"type":"tool_call","id":...,"name":...,"arguments":{...}}`.
    ToolCall {
        /// Tool call id.
        id: &'a str,
        /// Tool name.
        name: &'a str,
        /// Arguments object.
        arguments: &'a serde_json::Value,
    },
    /// `{"type":"tool_call_response","id":...,"name":...,"result":...}` (Pydantic AI's form).
    ToolCallResponse {
        /// Tool call id.
        id: &'a str,
        /// Tool name.
        name: &'a str,
        /// The tool's return value.
        result: &'a str,
    },
}

/// A chat message in the OTel GenAI JSON form: `{"role":...,"parts":[...],"finish_reason":...}`.
#[derive(Serialize)]
struct ChatMessage<'a> {
    /// `user`, `assistant`, ...
    role: &'a str,
    /// Its parts.
    parts: Vec<Part<'a>>,
    /// Why the model stopped (assistant messages).
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_reason: Option<&'a str>,
}

impl ChatMessage<'_> {
    /// The message as a JSON string.
    fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).context("serialising a chat message")
    }
}

/// `[m1,m2,...]` from already serialised messages.
fn json_array(messages: &[String]) -> String {
    let len: usize = messages.iter().map(|m| m.len() + 1).sum();
    let mut out = String::with_capacity(len + 2);
    out.push('[');
    for (i, message) in messages.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(message);
    }
    out.push(']');
    out
}

/// Builds one agent run as Pydantic AI 2.x exports it: `chat` and `execute_tool` spans under an
/// `invoke_agent` span, children in the order they end, the run span last. The run ends at
/// `now_ns`.
fn build_run(
    rng: &mut Rng,
    steps: usize,
    message_bytes: usize,
    now_ns: u64,
) -> Result<Vec<GeneratedSpan>> {
    const MS: u64 = 1_000_000;
    let trace_id: [u8; 16] = rng.id();
    let root_id: [u8; 8] = rng.id();
    let agent = *rng.pick(AGENTS);
    let (model, provider) = *rng.pick(MODELS);
    let call_id = rng.uuid_v7(now_ns / MS);
    let conversation_id = rng.uuid_v4();
    let instructions = rng.text(message_bytes);
    let system_instructions = serde_json::to_string(&[Part::Text {
        content: &instructions,
    }])
    .context("serialising system instructions")?;

    let mut history: Vec<String> = Vec::with_capacity(2 * steps);
    let prompt = rng.text(message_bytes);
    history.push(
        ChatMessage {
            role: "user",
            parts: vec![Part::Text { content: &prompt }],
            finish_reason: None,
        }
        .to_json()?,
    );

    // Spans with times relative to the run start; shifted once the run's length is known.
    let mut children: Vec<(SpanShape, Vec<KeyValue>, u64)> = Vec::with_capacity(2 * steps);
    let mut t = rng.range(MS, 3 * MS);
    let (mut input_tokens_total, mut output_tokens_total) = (0i64, 0i64);
    let mut final_answer = String::new();

    for step in 0..steps {
        let last = step + 1 == steps;
        let chat_start = t;
        t += rng.range(400 * MS, 2_500 * MS);
        let chat_end = t;

        let input = json_array(&history);
        let tool = *rng.pick(TOOLS);
        let tool_call_id = rng.tool_call_id();
        let arguments = tool_arguments(rng, tool, message_bytes / 4);
        let (assistant, finish_reason) = if last {
            final_answer = rng.text(message_bytes);
            let message = ChatMessage {
                role: "assistant",
                parts: vec![Part::Text {
                    content: &final_answer,
                }],
                finish_reason: Some("stop"),
            };
            (message.to_json()?, "stop")
        } else {
            let message = ChatMessage {
                role: "assistant",
                parts: vec![Part::ToolCall {
                    id: &tool_call_id,
                    name: tool,
                    arguments: &arguments,
                }],
                finish_reason: Some("tool_call"),
            };
            (message.to_json()?, "tool_call")
        };
        let output = format!("[{assistant}]");
        let input_tokens = (input.len() + system_instructions.len()) as i64 / 4;
        let output_tokens = output.len() as i64 / 4;
        input_tokens_total += input_tokens;
        output_tokens_total += output_tokens;
        let message_json_bytes = (input.len() + output.len()) as u64;
        let attributes = vec![
            kv_str("gen_ai.operation.name", "chat"),
            kv_str("gen_ai.provider.name", provider),
            kv_str("gen_ai.system", provider),
            kv_str("gen_ai.request.model", model),
            kv_str("gen_ai.response.model", model),
            kv_str(
                "gen_ai.response.id",
                format!("resp_{:016x}", rng.next_u64()),
            ),
            kv_str("server.address", "api.example.com"),
            kv_str("gen_ai.agent.name", agent),
            kv_str("gen_ai.agent.call.id", call_id.clone()),
            kv_str("gen_ai.conversation.id", conversation_id.clone()),
            kv_str("gen_ai.input.messages", input),
            kv_str("gen_ai.output.messages", output),
            kv_str("gen_ai.system_instructions", system_instructions.clone()),
            kv_int("gen_ai.usage.input_tokens", input_tokens),
            kv_int("gen_ai.usage.output_tokens", output_tokens),
            kv_str_array("gen_ai.response.finish_reasons", &[finish_reason]),
        ];
        let shape = SpanShape {
            span_id: rng.id(),
            parent: Some(root_id),
            name: format!("chat {model}"),
            kind: SpanKind::Client,
            start: chat_start,
            end: chat_end,
        };
        children.push((shape, attributes, message_json_bytes));
        history.push(assistant);

        if !last {
            t += rng.range(MS / 10, 2 * MS);
            let tool_start = t;
            t += rng.range(5 * MS, 800 * MS);
            let tool_end = t;
            let result = rng.text(message_bytes);
            let attributes = vec![
                kv_str("gen_ai.operation.name", "execute_tool"),
                kv_str("gen_ai.tool.name", tool),
                kv_str("gen_ai.tool.call.id", tool_call_id.clone()),
                kv_str("gen_ai.tool.call.arguments", arguments.to_string()),
                kv_str("gen_ai.tool.call.result", result.as_str()),
            ];
            let shape = SpanShape {
                span_id: rng.id(),
                parent: Some(root_id),
                name: format!("execute_tool {tool}"),
                kind: SpanKind::Internal,
                start: tool_start,
                end: tool_end,
            };
            children.push((shape, attributes, 0));
            history.push(
                ChatMessage {
                    role: "user",
                    parts: vec![Part::ToolCallResponse {
                        id: &tool_call_id,
                        name: tool,
                        result: &result,
                    }],
                    finish_reason: None,
                }
                .to_json()?,
            );
            t += rng.range(MS / 10, MS);
        }
    }
    t += rng.range(MS / 2, 2 * MS);
    let run_end = t;
    let offset = now_ns.saturating_sub(run_end);

    let mut spans: Vec<GeneratedSpan> = children
        .into_iter()
        .map(|(shape, attributes, message_bytes)| GeneratedSpan {
            span: make_span(&trace_id, shape, offset, attributes),
            message_bytes,
            root_of: None,
        })
        .collect();

    let all_messages = json_array(&history);
    let all_messages_bytes = all_messages.len() as u64;
    let attributes = vec![
        kv_str("gen_ai.operation.name", "invoke_agent"),
        kv_str("gen_ai.agent.name", agent),
        kv_str("gen_ai.agent.call.id", call_id.clone()),
        kv_str("gen_ai.conversation.id", conversation_id),
        kv_str("model_name", model),
        kv_str("agent_name", agent),
        kv_str("pydantic_ai.all_messages", all_messages),
        kv_str("gen_ai.system_instructions", system_instructions),
        kv_str("final_result", final_answer),
        kv_int("gen_ai.usage.input_tokens", input_tokens_total),
        kv_int("gen_ai.usage.output_tokens", output_tokens_total),
    ];
    let shape = SpanShape {
        span_id: root_id,
        parent: None,
        name: format!("invoke_agent {agent}"),
        kind: SpanKind::Internal,
        start: 0,
        end: run_end,
    };
    spans.push(GeneratedSpan {
        span: make_span(&trace_id, shape, offset, attributes),
        message_bytes: all_messages_bytes,
        root_of: Some(call_id),
    });
    Ok(spans)
}

/// A span event with string attributes.
fn span_event(
    name: &str,
    time: u64,
    attributes: Vec<KeyValue>,
) -> opentelemetry_proto::tonic::trace::v1::span::Event {
    opentelemetry_proto::tonic::trace::v1::span::Event {
        time_unix_nano: time,
        name: name.into(),
        attributes,
        ..Default::default()
    }
}

/// OTel GenAI message parts as Bedrock Converse content blocks (what Strands records).
fn converse_blocks(parts: &serde_json::Value) -> serde_json::Value {
    let blocks: Vec<serde_json::Value> = parts
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| match p["type"].as_str() {
            Some("tool_call") => json!({"toolUse": {
                "toolUseId": p["id"], "name": p["name"], "input": p["arguments"]
            }}),
            Some("tool_call_response") => {
                let text = match &p["response"] {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                json!({"toolResult": {
                    "toolUseId": p["id"], "status": "success", "content": [{"text": text}]
                }})
            }
            _ => json!({"text": p["content"]}),
        })
        .collect();
    serde_json::Value::Array(blocks)
}

/// Takes an attribute out of a span.
fn take_attribute(span: &mut Span, key: &str) -> Option<String> {
    let index = span.attributes.iter().position(|kv| kv.key == key)?;
    match span.attributes.remove(index).value?.value? {
        any_value::Value::StringValue(s) => Some(s),
        _ => None,
    }
}

/// Rewrites a generated Pydantic-AI-shaped run as Strands Agents (default mode) would emit it:
/// every model request and the tools it asked for under an `execute_event_loop_cycle` span,
/// content as `gen_ai.*.message` / `gen_ai.choice` span events holding Converse blocks, a
/// `session.id` on every span, no run id. The run is identified by stepline's own run id.
fn to_strands(run: Vec<GeneratedSpan>, rng: &mut Rng) -> Result<Vec<GeneratedSpan>> {
    let Some((root, children)) = run.split_last() else {
        return Ok(run);
    };
    let mut root_span = root.span.clone();
    let session = kv_str("session.id", rng.uuid_v4());
    let root_id = root_span.span_id.clone();
    let mut out: Vec<GeneratedSpan> = Vec::with_capacity(children.len() * 3 / 2 + 1);
    let mut cycle: Option<(Vec<u8>, u64, u64)> = None;
    let close_cycle = |cycle: &mut Option<(Vec<u8>, u64, u64)>, out: &mut Vec<GeneratedSpan>| {
        if let Some((id, start, end)) = cycle.take() {
            out.push(GeneratedSpan {
                span: Span {
                    trace_id: root_span.trace_id.clone(),
                    span_id: id,
                    parent_span_id: root_id.clone(),
                    flags: 0x101,
                    name: "execute_event_loop_cycle".into(),
                    kind: SpanKind::Internal as i32,
                    start_time_unix_nano: start,
                    end_time_unix_nano: end + 1,
                    attributes: vec![
                        kv_str("gen_ai.operation.name", "execute_event_loop_cycle"),
                        kv_str("event_loop.cycle_id", format!("{start:x}")),
                        session.clone(),
                    ],
                    ..Default::default()
                },
                message_bytes: 0,
                root_of: None,
            });
        }
    };
    for child in children {
        let mut span = child.span.clone();
        let is_chat = span.name.starts_with("chat");
        if is_chat {
            close_cycle(&mut cycle, &mut out);
            cycle = Some((
                rng.id::<8>().to_vec(),
                span.start_time_unix_nano,
                span.end_time_unix_nano,
            ));
        }
        let Some((cycle_id, _, cycle_end)) = cycle.as_mut() else {
            bail!("a tool span before any model request");
        };
        *cycle_end = (*cycle_end).max(span.end_time_unix_nano);
        span.parent_span_id = cycle_id.clone();
        let (start, end) = (span.start_time_unix_nano, span.end_time_unix_nano);
        let mut events = Vec::new();
        let mut message_bytes = 0u64;
        let mut event = |name: &str, time: u64, attributes: Vec<KeyValue>| {
            for kv in &attributes {
                if let Some(any_value::Value::StringValue(v)) =
                    kv.value.as_ref().and_then(|v| v.value.as_ref())
                {
                    message_bytes += v.len() as u64;
                }
            }
            events.push(span_event(name, time, attributes));
        };
        for key in [
            "gen_ai.agent.call.id",
            "gen_ai.conversation.id",
            "gen_ai.provider.name",
        ] {
            take_attribute(&mut span, key);
        }
        if is_chat {
            let input = take_attribute(&mut span, "gen_ai.input.messages").unwrap_or_default();
            let output = take_attribute(&mut span, "gen_ai.output.messages").unwrap_or_default();
            let system =
                take_attribute(&mut span, "gen_ai.system_instructions").unwrap_or_default();
            let system: serde_json::Value = serde_json::from_str(&system).unwrap_or_default();
            event(
                "gen_ai.system.message",
                start,
                vec![kv_str("content", converse_blocks(&system).to_string())],
            );
            let input: serde_json::Value = serde_json::from_str(&input).context("chat input")?;
            for m in input.as_array().into_iter().flatten() {
                let blocks = converse_blocks(&m["parts"]);
                let name = if blocks.to_string().contains("\"toolResult\"") {
                    "gen_ai.tool.message".to_string()
                } else {
                    format!("gen_ai.{}.message", m["role"].as_str().unwrap_or("user"))
                };
                event(&name, start, vec![kv_str("content", blocks.to_string())]);
            }
            let output: serde_json::Value = serde_json::from_str(&output).context("chat output")?;
            for m in output.as_array().into_iter().flatten() {
                let finish = m["finish_reason"]
                    .as_str()
                    .unwrap_or("end_turn")
                    .to_string();
                event(
                    "gen_ai.choice",
                    end,
                    vec![
                        kv_str("message", converse_blocks(&m["parts"]).to_string()),
                        kv_str("finish_reason", finish),
                    ],
                );
            }
        } else {
            let id = span
                .attributes
                .iter()
                .find(|kv| kv.key == "gen_ai.tool.call.id")
                .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                .and_then(|v| match v {
                    any_value::Value::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            let arguments =
                take_attribute(&mut span, "gen_ai.tool.call.arguments").unwrap_or_default();
            let result = take_attribute(&mut span, "gen_ai.tool.call.result").unwrap_or_default();
            event(
                "gen_ai.tool.message",
                start,
                vec![
                    kv_str("role", "tool"),
                    kv_str("content", arguments),
                    kv_str("id", id.clone()),
                ],
            );
            event(
                "gen_ai.choice",
                end,
                vec![
                    kv_str("message", json!([{"text": result}]).to_string()),
                    kv_str("id", id),
                ],
            );
            span.attributes
                .push(kv_str("gen_ai.tool.status", "success"));
        }
        span.attributes
            .push(kv_str("gen_ai.system", "strands-agents"));
        span.attributes.push(session.clone());
        span.events = events;
        out.push(GeneratedSpan {
            span,
            message_bytes,
            root_of: None,
        });
    }
    close_cycle(&mut cycle, &mut out);
    for key in [
        "pydantic_ai.all_messages",
        "gen_ai.agent.call.id",
        "gen_ai.conversation.id",
        "final_result",
        "gen_ai.system_instructions",
    ] {
        take_attribute(&mut root_span, key);
    }
    root_span.attributes.push(session.clone());
    let run_id = format!(
        "{}-{}",
        hex::encode(&root_span.trace_id),
        hex::encode(&root_span.span_id)
    );
    out.push(GeneratedSpan {
        span: root_span,
        message_bytes: 0,
        root_of: Some(run_id),
    });
    Ok(out)
}

/// A generated run's spans with their canonical content parsed back, for the rewrites below.
struct Canonical {
    /// The run (agent) span, content attributes removed.
    root: Span,
    /// Children in export order, with their parsed input / output messages (model requests) or
    /// arguments / result (tools), content attributes removed.
    children: Vec<(Span, serde_json::Value, serde_json::Value)>,
    /// System instruction text.
    instructions: String,
}

fn canonical(run: Vec<GeneratedSpan>) -> Result<Canonical> {
    let mut spans: Vec<Span> = run.into_iter().map(|g| g.span).collect();
    let Some(mut root) = spans.pop() else {
        bail!("an empty run");
    };
    let system = take_attribute(&mut root, "gen_ai.system_instructions").unwrap_or_default();
    let system: serde_json::Value = serde_json::from_str(&system).unwrap_or_default();
    let instructions = system[0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    root.attributes.clear();
    let mut children = Vec::with_capacity(spans.len());
    for mut span in spans {
        let (a, b) = if span.name.starts_with("chat") {
            let input = take_attribute(&mut span, "gen_ai.input.messages").unwrap_or_default();
            let output = take_attribute(&mut span, "gen_ai.output.messages").unwrap_or_default();
            (
                serde_json::from_str(&input).context("chat input")?,
                serde_json::from_str(&output).context("chat output")?,
            )
        } else {
            let args = take_attribute(&mut span, "gen_ai.tool.call.arguments").unwrap_or_default();
            let result = take_attribute(&mut span, "gen_ai.tool.call.result").unwrap_or_default();
            (
                serde_json::from_str(&args).unwrap_or(serde_json::Value::String(args)),
                serde_json::Value::String(result),
            )
        };
        children.push((span, a, b));
    }
    Ok(Canonical {
        root,
        children,
        instructions,
    })
}

/// A string attribute of a span.
fn attribute(span: &Span, key: &str) -> String {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .and_then(|v| match v {
            any_value::Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// Canonical messages as OpenAI Responses input items.
fn responses_items(messages: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut items = Vec::new();
    for m in messages.as_array().into_iter().flatten() {
        let role = m["role"].as_str().unwrap_or("user");
        for p in m["parts"].as_array().into_iter().flatten() {
            items.push(match p["type"].as_str() {
                Some("tool_call") => json!({"type": "function_call", "call_id": p["id"],
                    "name": p["name"], "arguments": p["arguments"].to_string(), "status": "completed"}),
                Some("tool_call_response") => json!({"type": "function_call_output",
                    "call_id": p["id"], "output": p["result"]}),
                _ if role == "assistant" => json!({"type": "message", "role": "assistant",
                    "status": "completed", "content": [{"type": "output_text", "text": p["content"], "annotations": []}]}),
                _ => json!({"role": role, "content": p["content"]}),
            });
        }
    }
    items
}

/// Canonical messages as flattened Chat-Completions-like attributes: `{prefix}.{i}.{role,
/// content, tool_call_id, tool_calls.{j}.{id,name,arguments}}` under `message_key` / `call_keys`.
fn flattened_messages(
    prefix: &str,
    message_key: &str,
    call_keys: [&str; 3],
    messages: &serde_json::Value,
    out: &mut Vec<KeyValue>,
) {
    let mut i = 0;
    for m in messages.as_array().into_iter().flatten() {
        let role = m["role"].as_str().unwrap_or("user");
        let parts = m["parts"].as_array().cloned().unwrap_or_default();
        let responses: Vec<&serde_json::Value> = parts
            .iter()
            .filter(|p| p["type"] == "tool_call_response")
            .collect();
        for r in &responses {
            out.push(kv_str(&format!("{prefix}.{i}{message_key}.role"), "tool"));
            out.push(kv_str(
                &format!("{prefix}.{i}{message_key}.tool_call_id"),
                r["id"].as_str().unwrap_or(""),
            ));
            out.push(kv_str(
                &format!("{prefix}.{i}{message_key}.content"),
                r["result"].as_str().unwrap_or(""),
            ));
            i += 1;
        }
        if !responses.is_empty() {
            continue;
        }
        out.push(kv_str(&format!("{prefix}.{i}{message_key}.role"), role));
        let text: Vec<&str> = parts.iter().filter_map(|p| p["content"].as_str()).collect();
        if !text.is_empty() {
            out.push(kv_str(
                &format!("{prefix}.{i}{message_key}.content"),
                text.join(""),
            ));
        }
        for (j, call) in parts
            .iter()
            .filter(|p| p["type"] == "tool_call")
            .enumerate()
        {
            let key = |k: &str| format!("{prefix}.{i}{message_key}.tool_calls.{j}.{k}");
            out.push(kv_str(
                &key(call_keys[0]),
                call["id"].as_str().unwrap_or(""),
            ));
            out.push(kv_str(
                &key(call_keys[1]),
                call["name"].as_str().unwrap_or(""),
            ));
            out.push(kv_str(&key(call_keys[2]), call["arguments"].to_string()));
        }
        i += 1;
    }
}

/// Bytes of string attribute values of a span (its message content).
fn string_bytes(span: &Span) -> u64 {
    span.attributes
        .iter()
        .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.len() as u64),
            _ => None,
        })
        .sum()
}

/// A new internal span of the run's trace.
fn child_span(
    trace: &[u8],
    id: Vec<u8>,
    parent: Vec<u8>,
    name: &str,
    start: u64,
    end: u64,
    attributes: Vec<KeyValue>,
) -> Span {
    Span {
        trace_id: trace.to_vec(),
        span_id: id,
        parent_span_id: parent,
        flags: 0x101,
        name: name.into(),
        kind: SpanKind::Internal as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes,
        ..Default::default()
    }
}

/// Rewrites a generated run as the OpenAI Agents SDK exports it through OpenInference:
/// `Agent workflow` (AGENT) → task (CHAIN) → `{agent}` (AGENT) → one `turn` (CHAIN) per model
/// request, holding the `response` (LLM: Responses-shaped `input.value` / `output.value` and the
/// flattened messages) and its TOOL spans, which carry no call id. `session.id` on every span.
fn to_openinference(run: Vec<GeneratedSpan>, rng: &mut Rng) -> Result<Vec<GeneratedSpan>> {
    let c = canonical(run)?;
    let trace = c.root.trace_id.clone();
    let agent = c.root.name.trim_start_matches("invoke_agent ").to_string();
    let session = kv_str("session.id", rng.uuid_v4());
    let kind = |k: &str| kv_str("openinference.span.kind", k);
    let (start, end) = (c.root.start_time_unix_nano, c.root.end_time_unix_nano);
    let workflow_id = rng.id::<8>().to_vec();
    let task_id = rng.id::<8>().to_vec();
    let agent_id = c.root.span_id.clone();
    let mut out = Vec::with_capacity(c.children.len() * 3 / 2 + 3);
    let mut turn: Option<(Vec<u8>, u64, u64)> = None;
    let close = |turn: &mut Option<(Vec<u8>, u64, u64)>, out: &mut Vec<GeneratedSpan>| {
        if let Some((id, s, e)) = turn.take() {
            out.push(GeneratedSpan {
                span: child_span(
                    &trace,
                    id,
                    agent_id.clone(),
                    "turn",
                    s,
                    e + 1,
                    vec![kind("CHAIN"), session.clone()],
                ),
                message_bytes: 0,
                root_of: None,
            });
        }
    };
    for (mut span, a, b) in c.children {
        let is_chat = span.name.starts_with("chat");
        if is_chat {
            close(&mut turn, &mut out);
            turn = Some((
                rng.id::<8>().to_vec(),
                span.start_time_unix_nano,
                span.end_time_unix_nano,
            ));
        }
        let Some((turn_id, _, turn_end)) = turn.as_mut() else {
            bail!("a tool span before any model request");
        };
        *turn_end = (*turn_end).max(span.end_time_unix_nano);
        span.parent_span_id = turn_id.clone();
        let mut attrs = vec![session.clone()];
        if is_chat {
            let model = attribute(&span, "gen_ai.response.model");
            let provider = attribute(&span, "gen_ai.provider.name");
            let tokens = |k: &str| {
                span.attributes
                    .iter()
                    .find(|kv| kv.key == k)
                    .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                        any_value::Value::IntValue(i) => Some(*i),
                        _ => None,
                    })
                    .unwrap_or(0)
            };
            let (input_tokens, output_tokens) = (
                tokens("gen_ai.usage.input_tokens"),
                tokens("gen_ai.usage.output_tokens"),
            );
            attrs.push(kind("LLM"));
            attrs.push(kv_str("llm.model_name", model.clone()));
            attrs.push(kv_str("llm.provider", provider));
            attrs.push(kv_int("llm.token_count.prompt", input_tokens));
            attrs.push(kv_int("llm.token_count.completion", output_tokens));
            attrs.push(kv_str("input.mime_type", "application/json"));
            attrs.push(kv_str(
                "input.value",
                serde_json::Value::Array(responses_items(&a)).to_string(),
            ));
            attrs.push(kv_str("output.mime_type", "application/json"));
            attrs.push(kv_str("output.value", json!({
                "id": format!("resp_{:016x}", rng.next_u64()), "object": "response", "model": model,
                "instructions": c.instructions, "output": responses_items(&b), "status": "completed",
            }).to_string()));
            flattened_messages(
                "llm.input_messages",
                ".message",
                [
                    "tool_call.id",
                    "tool_call.function.name",
                    "tool_call.function.arguments",
                ],
                &a,
                &mut attrs,
            );
            flattened_messages(
                "llm.output_messages",
                ".message",
                [
                    "tool_call.id",
                    "tool_call.function.name",
                    "tool_call.function.arguments",
                ],
                &b,
                &mut attrs,
            );
            span.name = "response".into();
        } else {
            let tool = attribute(&span, "gen_ai.tool.name");
            attrs.push(kind("TOOL"));
            attrs.push(kv_str("tool.name", tool.clone()));
            attrs.push(kv_str("input.value", a.to_string()));
            attrs.push(kv_str("output.value", b.as_str().unwrap_or_default()));
            span.name = tool;
        }
        span.attributes = attrs;
        let message_bytes = string_bytes(&span);
        out.push(GeneratedSpan {
            span,
            message_bytes,
            root_of: None,
        });
    }
    close(&mut turn, &mut out);
    let mut agent_span = c.root;
    agent_span.name = agent.clone();
    agent_span.parent_span_id = task_id.clone();
    agent_span.attributes = vec![
        kind("AGENT"),
        kv_str("agent.name", agent.clone()),
        kv_str("graph.node.id", agent),
        session.clone(),
    ];
    let run_id = format!("{}-{}", hex::encode(&trace), hex::encode(&agent_id));
    out.push(GeneratedSpan {
        span: agent_span,
        message_bytes: 0,
        root_of: None,
    });
    out.push(GeneratedSpan {
        span: child_span(
            &trace,
            task_id,
            workflow_id.clone(),
            "Agent workflow",
            start,
            end + 1,
            vec![kind("CHAIN"), session.clone()],
        ),
        message_bytes: 0,
        root_of: None,
    });
    out.push(GeneratedSpan {
        span: child_span(
            &trace,
            workflow_id,
            Vec::new(),
            "Agent workflow",
            start,
            end + 2,
            vec![kind("AGENT"), session],
        ),
        message_bytes: 0,
        root_of: Some(run_id),
    });
    Ok(out)
}

/// Rewrites a generated run as OpenLLMetry exports it: `{agent}.agent` (traceloop `agent` span)
/// → `openai.chat` spans with the legacy flattened `gen_ai.prompt.{i}.*` / `gen_ai.completion.*`
/// and `{tool}.tool` spans (decorator input/output, no call id); the session as the
/// `session_id` association property on every span.
fn to_openllmetry(run: Vec<GeneratedSpan>, rng: &mut Rng) -> Result<Vec<GeneratedSpan>> {
    let c = canonical(run)?;
    let trace = c.root.trace_id.clone();
    let agent = c.root.name.trim_start_matches("invoke_agent ").to_string();
    let session = kv_str("traceloop.association.properties.session_id", rng.uuid_v4());
    let workflow = kv_str("traceloop.workflow.name", agent.clone());
    let mut out = Vec::with_capacity(c.children.len() + 1);
    for (mut span, a, b) in c.children {
        let mut attrs = vec![
            session.clone(),
            workflow.clone(),
            kv_str("gen_ai.agent.name", agent.clone()),
        ];
        if span.name.starts_with("chat") {
            let model = attribute(&span, "gen_ai.response.model");
            for key in ["gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"] {
                if let Some(kv) = span.attributes.iter().find(|kv| kv.key == key) {
                    let mut kv = kv.clone();
                    kv.key = key
                        .replace("input_tokens", "prompt_tokens")
                        .replace("output_tokens", "completion_tokens");
                    attrs.push(kv);
                }
            }
            attrs.push(kv_str("llm.request.type", "chat"));
            attrs.push(kv_str("gen_ai.system", "openai"));
            attrs.push(kv_str("gen_ai.request.model", model.clone()));
            attrs.push(kv_str("gen_ai.response.model", model));
            let mut prompt = vec![
                json!({"role": "system", "parts": [{"type": "text", "content": c.instructions}]}),
            ];
            prompt.extend(a.as_array().cloned().unwrap_or_default());
            flattened_messages(
                "gen_ai.prompt",
                "",
                ["id", "name", "arguments"],
                &serde_json::Value::Array(prompt),
                &mut attrs,
            );
            flattened_messages(
                "gen_ai.completion",
                "",
                ["id", "name", "arguments"],
                &b,
                &mut attrs,
            );
            span.name = "openai.chat".into();
            span.kind = SpanKind::Client as i32;
        } else {
            let tool = attribute(&span, "gen_ai.tool.name");
            attrs.push(kv_str("traceloop.span.kind", "tool"));
            attrs.push(kv_str("traceloop.entity.name", tool.clone()));
            attrs.push(kv_str(
                "traceloop.entity.input",
                json!({"args": [], "kwargs": a}).to_string(),
            ));
            attrs.push(kv_str(
                "traceloop.entity.output",
                b.as_str().unwrap_or_default(),
            ));
            span.name = format!("{tool}.tool");
        }
        span.attributes = attrs;
        let message_bytes = string_bytes(&span);
        out.push(GeneratedSpan {
            span,
            message_bytes,
            root_of: None,
        });
    }
    let mut root = c.root;
    root.name = format!("{agent}.agent");
    root.attributes = vec![
        session,
        workflow,
        kv_str("traceloop.span.kind", "agent"),
        kv_str("traceloop.entity.name", agent.clone()),
        kv_str("gen_ai.agent.name", agent),
    ];
    let run_id = format!("{}-{}", hex::encode(&trace), hex::encode(&root.span_id));
    out.push(GeneratedSpan {
        span: root,
        message_bytes: 0,
        root_of: Some(run_id),
    });
    Ok(out)
}

/// Canonical messages as LangChain `lc` constructor objects (the form of OpenInference's
/// `input.value` on LangChain LLM spans).
fn lc_messages(messages: &serde_json::Value) -> Vec<serde_json::Value> {
    let lc = |class: &str, kwargs: serde_json::Value| {
        json!({"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", class],
            "kwargs": kwargs})
    };
    let mut out = Vec::new();
    for m in messages.as_array().into_iter().flatten() {
        let role = m["role"].as_str().unwrap_or("user");
        let parts = m["parts"].as_array().cloned().unwrap_or_default();
        let text: String = parts.iter().filter_map(|p| p["content"].as_str()).collect();
        let calls: Vec<serde_json::Value> = parts
            .iter()
            .filter(|p| p["type"] == "tool_call")
            .map(|p| json!({"name": p["name"], "args": p["arguments"], "id": p["id"], "type": "tool_call"}))
            .collect();
        let responses: Vec<&serde_json::Value> = parts
            .iter()
            .filter(|p| p["type"] == "tool_call_response")
            .collect();
        if !responses.is_empty() {
            for r in responses {
                out.push(lc(
                    "ToolMessage",
                    json!({"content": r["result"], "type": "tool",
                    "tool_call_id": r["id"], "status": "success"}),
                ));
            }
            continue;
        }
        out.push(match role {
            "system" => lc("SystemMessage", json!({"content": text, "type": "system"})),
            "assistant" => lc(
                "AIMessage",
                json!({"content": text, "type": "ai", "tool_calls": calls, "invalid_tool_calls": []}),
            ),
            _ => lc("HumanMessage", json!({"content": text, "type": "human"})),
        });
    }
    out
}

/// Rewrites a generated run as LangGraph's `create_agent` exports it through OpenInference:
/// `{agent}` (AGENT: the name contains "agent", and LangChain never sets `agent.name`) → one
/// `model` CHAIN per model request holding the chat model's LLM span (`input.value` as batches of
/// lc messages, `output.value` as an `LLMResult`, plus the flattened messages) and one `tools`
/// CHAIN per tool call holding its TOOL span (`output.value` a `ToolMessage` with the call id);
/// the thread as `session.id` and in `metadata` on every span.
fn to_langchain(run: Vec<GeneratedSpan>, rng: &mut Rng) -> Result<Vec<GeneratedSpan>> {
    let c = canonical(run)?;
    let trace = c.root.trace_id.clone();
    let agent = format!("{}_agent", c.root.name.trim_start_matches("invoke_agent "));
    let thread = rng.uuid_v4();
    let session = kv_str("session.id", thread.clone());
    let metadata = |node: &str| {
        kv_str(
            "metadata",
            json!({"ls_integration": "langchain_create_agent", "lc_agent_name": agent,
                "thread_id": thread, "langgraph_node": node})
            .to_string(),
        )
    };
    let kind = |k: &str| kv_str("openinference.span.kind", k);
    let root_id = c.root.span_id.clone();
    let mut out = Vec::with_capacity(c.children.len() * 2 + 1);
    for (mut span, a, b) in c.children {
        let node_id = rng.id::<8>().to_vec();
        let is_chat = span.name.starts_with("chat");
        let node = if is_chat { "model" } else { "tools" };
        out.push(GeneratedSpan {
            span: child_span(
                &trace,
                node_id.clone(),
                root_id.clone(),
                node,
                span.start_time_unix_nano.saturating_sub(1),
                span.end_time_unix_nano + 1,
                vec![kind("CHAIN"), session.clone(), metadata(node)],
            ),
            message_bytes: 0,
            root_of: None,
        });
        span.parent_span_id = node_id;
        let mut attrs = vec![session.clone(), metadata(node)];
        if is_chat {
            let mut prompt = vec![
                json!({"role": "system", "parts": [{"type": "text", "content": c.instructions}]}),
            ];
            prompt.extend(a.as_array().cloned().unwrap_or_default());
            let prompt = serde_json::Value::Array(prompt);
            attrs.push(kind("LLM"));
            attrs.push(kv_str("llm.provider", "openai"));
            attrs.push(kv_str(
                "llm.model_name",
                attribute(&span, "gen_ai.response.model"),
            ));
            attrs.push(kv_str("input.mime_type", "application/json"));
            attrs.push(kv_str(
                "input.value",
                json!({"messages": [lc_messages(&prompt)]}).to_string(),
            ));
            let reply = lc_messages(&b).into_iter().next().unwrap_or_default();
            attrs.push(kv_str("output.mime_type", "application/json"));
            attrs.push(kv_str(
                "output.value",
                json!({"generations": [[{"text": "", "type": "ChatGeneration", "message": reply}]],
                    "llm_output": null, "type": "LLMResult"})
                .to_string(),
            ));
            let call_keys = [
                "tool_call.id",
                "tool_call.function.name",
                "tool_call.function.arguments",
            ];
            flattened_messages(
                "llm.input_messages",
                ".message",
                call_keys,
                &prompt,
                &mut attrs,
            );
            flattened_messages("llm.output_messages", ".message", call_keys, &b, &mut attrs);
            span.name = "ChatOpenAI".into();
        } else {
            let tool = attribute(&span, "gen_ai.tool.name");
            let id = attribute(&span, "gen_ai.tool.call.id");
            attrs.push(kind("TOOL"));
            attrs.push(kv_str("tool.name", tool.clone()));
            attrs.push(kv_str("input.value", a.to_string()));
            attrs.push(kv_str(
                "output.value",
                json!({"type": "tool", "data": {"content": b, "type": "tool", "name": tool,
                    "tool_call_id": id, "status": "success"}})
                .to_string(),
            ));
            span.name = tool;
        }
        span.attributes = attrs;
        let message_bytes = string_bytes(&span);
        out.push(GeneratedSpan {
            span,
            message_bytes,
            root_of: None,
        });
    }
    let mut root = c.root;
    root.name = agent.clone();
    root.attributes = vec![kind("AGENT"), session, metadata("")];
    let run_id = format!("{}-{}", hex::encode(&trace), hex::encode(&root.span_id));
    out.push(GeneratedSpan {
        span: root,
        message_bytes: 0,
        root_of: Some(run_id),
    });
    Ok(out)
}

/// Canonical messages as the Vercel AI SDK's provider prompt (`ai.prompt.messages`).
fn vercel_prompt(messages: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for m in messages.as_array().into_iter().flatten() {
        let role = m["role"].as_str().unwrap_or("user");
        let mut content = Vec::new();
        let mut results = Vec::new();
        for p in m["parts"].as_array().into_iter().flatten() {
            match p["type"].as_str() {
                Some("tool_call") => content.push(json!({"type": "tool-call",
                    "toolCallId": p["id"], "toolName": p["name"], "input": p["arguments"]})),
                Some("tool_call_response") => {
                    let value = if p["result"].is_null() {
                        &p["response"]
                    } else {
                        &p["result"]
                    };
                    let kind = if value.is_string() { "text" } else { "json" };
                    results.push(json!({"type": "tool-result", "toolCallId": p["id"],
                        "toolName": p["name"], "output": {"type": kind, "value": value}}));
                }
                _ => content.push(json!({"type": "text", "text": p["content"]})),
            }
        }
        if !results.is_empty() {
            out.push(json!({"role": "tool", "content": results}));
        }
        if !content.is_empty() {
            out.push(json!({"role": role, "content": content}));
        }
    }
    out
}

/// The Vercel AI SDK v6 (`experimental_telemetry`): `ai.generateText` root,
/// `ai.generateText.doGenerate` per step with the full provider prompt, `ai.toolCall` siblings
/// with ids; the conversation id as `ai.telemetry.metadata.sessionId`.
fn to_vercel_ai(run: Vec<GeneratedSpan>, rng: &mut Rng) -> Result<Vec<GeneratedSpan>> {
    let c = canonical(run)?;
    let trace = c.root.trace_id.clone();
    let agent = c.root.name.trim_start_matches("invoke_agent ").to_string();
    let session = kv_str("ai.telemetry.metadata.sessionId", rng.uuid_v4());
    let function = kv_str("ai.telemetry.functionId", agent.clone());
    let mut out = Vec::with_capacity(c.children.len() + 1);
    for (mut span, a, b) in c.children {
        let mut attrs = vec![session.clone(), function.clone()];
        if span.name.starts_with("chat") {
            let model = attribute(&span, "gen_ai.response.model");
            for (key, name) in [
                ("gen_ai.usage.input_tokens", "ai.usage.inputTokens"),
                ("gen_ai.usage.output_tokens", "ai.usage.outputTokens"),
            ] {
                if let Some(kv) = span.attributes.iter().find(|kv| kv.key == key) {
                    let mut kv = kv.clone();
                    kv.key = name.into();
                    attrs.push(kv);
                }
            }
            attrs.push(kv_str("ai.operationId", "ai.generateText.doGenerate"));
            attrs.push(kv_str("ai.model.provider", "openai.chat"));
            attrs.push(kv_str("ai.model.id", model.clone()));
            attrs.push(kv_str("ai.response.model", model));
            let mut prompt = vec![json!({"role": "system", "content": c.instructions})];
            prompt.extend(vercel_prompt(&a));
            attrs.push(kv_str(
                "ai.prompt.messages",
                serde_json::Value::Array(prompt).to_string(),
            ));
            let parts = b[0]["parts"].as_array().cloned().unwrap_or_default();
            let text: Vec<&str> = parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["content"].as_str())
                .collect();
            let calls: Vec<serde_json::Value> = parts
                .iter()
                .filter(|p| p["type"] == "tool_call")
                .map(|p| {
                    json!({"toolCallId": p["id"], "toolName": p["name"],
                    "input": p["arguments"].to_string()})
                })
                .collect();
            if !text.is_empty() {
                attrs.push(kv_str("ai.response.text", text.join("")));
            }
            let finish = if calls.is_empty() {
                "stop"
            } else {
                "tool-calls"
            };
            if !calls.is_empty() {
                attrs.push(kv_str(
                    "ai.response.toolCalls",
                    serde_json::Value::Array(calls).to_string(),
                ));
            }
            attrs.push(kv_str("ai.response.finishReason", finish));
            span.name = "ai.generateText.doGenerate".into();
            span.kind = SpanKind::Internal as i32;
        } else {
            attrs.push(kv_str("ai.operationId", "ai.toolCall"));
            attrs.push(kv_str(
                "ai.toolCall.name",
                attribute(&span, "gen_ai.tool.name"),
            ));
            attrs.push(kv_str(
                "ai.toolCall.id",
                attribute(&span, "gen_ai.tool.call.id"),
            ));
            attrs.push(kv_str("ai.toolCall.args", a.to_string()));
            attrs.push(kv_str("ai.toolCall.result", b.to_string()));
            span.name = "ai.toolCall".into();
        }
        span.attributes = attrs;
        let message_bytes = string_bytes(&span);
        out.push(GeneratedSpan {
            span,
            message_bytes,
            root_of: None,
        });
    }
    let mut root = c.root;
    root.name = "ai.generateText".into();
    root.attributes = vec![
        session,
        function,
        kv_str("ai.operationId", "ai.generateText"),
    ];
    let run_id = format!("{}-{}", hex::encode(&trace), hex::encode(&root.span_id));
    out.push(GeneratedSpan {
        span: root,
        message_bytes: 0,
        root_of: Some(run_id),
    });
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

/// A request body ready for one transport.
enum Payload {
    /// The message tonic encodes (and compresses, when asked).
    Grpc(ExportTraceServiceRequest),
    /// Encoded (and compressed, when asked) protobuf body.
    Http(Vec<u8>),
}

/// One export request plus what it carries.
struct Job {
    /// The request.
    payload: Payload,
    /// What it carries (counted once it is acknowledged).
    counts: JobCounts,
    /// Whether its last span is a run span (a connection only stops at such a boundary).
    ends_at_run_boundary: bool,
}

/// What one export request carries.
struct JobCounts {
    /// Spans in it.
    spans: u64,
    /// Run spans in it (runs that are complete once it is acknowledged).
    runs: u64,
    /// Bytes of message JSON in it.
    message_bytes: u64,
    /// Encoded protobuf size, before compression.
    payload_bytes: u64,
    /// Run id of the last run span in it.
    last_run_id: Option<String>,
}

/// What the generators need to know.
#[derive(Clone, Copy)]
struct Workload {
    /// Transport the jobs are for.
    transport: Transport,
    /// Model requests per run.
    steps: usize,
    /// Approximate size of a text message.
    message_bytes: usize,
    /// Spans per request, 0 = one run per request.
    batch_spans: usize,
    /// Request compression.
    compression: Compression,
    /// Runs to generate in total (over all connections).
    total_runs: u64,
    /// Disguise the spans so stepline does not interpret them.
    plain_spans: bool,
    /// Producer convention of the runs.
    convention: Convention,
}

/// Compresses an HTTP body.
/// ADK's message form of a GenAI message: tool-call ids become `{name}_{index}` (index of the
/// part in its message, as ADK falls back to when the model gives none), and tool results are
/// `{type: tool_call_response, id, response: {result}}` in a `user` message.
fn adk_message(message: &serde_json::Value) -> serde_json::Value {
    let mut out = message.clone();
    if let Some(parts) = out.get_mut("parts").and_then(|p| p.as_array_mut()) {
        for (index, part) in parts.iter_mut().enumerate() {
            let name = part["name"].as_str().unwrap_or("").to_string();
            match part["type"].as_str() {
                Some("tool_call") => part["id"] = json!(format!("{name}_{index}")),
                Some("tool_call_response") => {
                    let result = part["result"].take();
                    *part = json!({"type": "tool_call_response", "id": format!("{name}_{index}"),
                                   "response": {"result": result}});
                }
                _ => {}
            }
        }
    }
    if let Some(map) = out.as_object_mut() {
        if map.get("finish_reason").is_some() {
            map.insert("finish_reason".into(), json!(""));
        }
    }
    out
}

/// Rewrites a generated Pydantic-AI-shaped run as Google ADK (schema v2, `SPAN_ONLY`) emits it:
/// an `invoke_workflow` root over the `invoke_agent` span, `generate_content` spans with ADK's
/// message form ([`adk_message`]), `execute_tool` spans under `adk-<uuid>` ids, and the
/// `execute_tool (merged)` span ADK adds for parallel calls.
fn to_adk(run: Vec<GeneratedSpan>, rng: &mut Rng) -> Result<Vec<GeneratedSpan>> {
    let c = canonical(run)?;
    let trace = c.root.trace_id.clone();
    let agent = c.root.name.trim_start_matches("invoke_agent ").to_string();
    let session = kv_str("gen_ai.conversation.id", rng.uuid_v4());
    let invocation = kv_str(
        "gcp.vertex.agent.invocation_id",
        format!("e-{}", rng.uuid_v4()),
    );
    let workflow_id: [u8; 8] = rng.id();
    let system = serde_json::to_string(&[Part::Text {
        content: &c.instructions,
    }])
    .context("serialising system instructions")?;
    let convert = |v: &serde_json::Value| -> serde_json::Value {
        json!(v
            .as_array()
            .into_iter()
            .flatten()
            .map(adk_message)
            .collect::<Vec<_>>())
    };
    let mut out = Vec::with_capacity(c.children.len() + 3);
    let mut merged = None;
    for (mut span, a, b) in c.children {
        let message_bytes;
        if span.name.starts_with("chat") {
            let model = attribute(&span, "gen_ai.request.model");
            let (input, output) = (convert(&a).to_string(), convert(&b).to_string());
            message_bytes = (input.len() + output.len()) as u64;
            let mut attrs = vec![
                kv_str("gen_ai.operation.name", "generate_content"),
                kv_str("gen_ai.request.model", model.clone()),
                kv_str("gen_ai.agent.name", agent.clone()),
                session.clone(),
                kv_str("gcp.vertex.agent.event_id", rng.uuid_v4()),
                invocation.clone(),
                kv_str("gen_ai.provider.name", "gcp.gemini"),
                kv_str("gen_ai.input.messages", input),
                kv_str("gen_ai.system_instructions", system.clone()),
                kv_str("gen_ai.output.messages", output),
            ];
            for key in ["gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"] {
                if let Some(kv) = span.attributes.iter().find(|kv| kv.key == key) {
                    attrs.push(kv.clone());
                }
            }
            span.name = format!("generate_content {model}");
            span.kind = SpanKind::Internal as i32;
            span.attributes = attrs;
        } else {
            message_bytes = 0;
            let tool = span.name.trim_start_matches("execute_tool ").to_string();
            let result = json!({"result": b}).to_string();
            span.attributes = vec![
                kv_str("gen_ai.operation.name", "execute_tool"),
                kv_str("gen_ai.tool.description", format!("The {tool} tool.")),
                kv_str("gen_ai.tool.name", tool),
                kv_str("gen_ai.tool.type", "FunctionTool"),
                kv_str("gen_ai.agent.name", agent.clone()),
                kv_str("gen_ai.tool.call.id", format!("adk-{}", rng.uuid_v4())),
                kv_str("gcp.vertex.agent.event_id", rng.uuid_v4()),
                kv_str("gen_ai.tool.call.arguments", a.to_string()),
                kv_str("gen_ai.tool.call.result", result),
            ];
            if merged.is_none() {
                let event = rng.uuid_v4();
                let mut m = span.clone();
                m.span_id = rng.id::<8>().to_vec();
                m.name = "execute_tool (merged)".into();
                m.start_time_unix_nano = span.end_time_unix_nano;
                m.end_time_unix_nano = span.end_time_unix_nano;
                m.attributes = vec![
                    kv_str("gen_ai.operation.name", "execute_tool"),
                    kv_str("gen_ai.tool.name", "(merged tools)"),
                    kv_str("gen_ai.tool.description", "(merged tools)"),
                    kv_str("gen_ai.tool.call.id", event.clone()),
                    kv_str("gcp.vertex.agent.event_id", event),
                ];
                merged = Some(m);
            }
        }
        out.push(GeneratedSpan {
            span,
            message_bytes,
            root_of: None,
        });
        if let Some(m) = merged.as_mut().filter(|m| !m.name.is_empty()) {
            out.push(GeneratedSpan {
                span: std::mem::take(m),
                message_bytes: 0,
                root_of: None,
            });
        }
    }
    let mut root = c.root;
    let (start, end) = (root.start_time_unix_nano, root.end_time_unix_nano);
    let run_id = format!("{}-{}", hex::encode(&trace), hex::encode(&root.span_id));
    root.parent_span_id = workflow_id.to_vec();
    root.attributes = vec![
        kv_str("gen_ai.operation.name", "invoke_agent"),
        kv_str("gen_ai.agent.description", format!("The {agent} agent.")),
        kv_str("gen_ai.agent.name", agent.clone()),
        session.clone(),
    ];
    out.push(GeneratedSpan {
        span: root,
        message_bytes: 0,
        root_of: None,
    });
    let workflow = Span {
        trace_id: trace,
        span_id: workflow_id.to_vec(),
        name: format!("invoke_workflow {agent}"),
        kind: SpanKind::Internal as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes: vec![
            kv_str("gen_ai.operation.name", "invoke_workflow"),
            session,
            kv_str("gen_ai.workflow.name", agent),
        ],
        ..Default::default()
    };
    // The workflow span comes last: the run (its agent span) is complete with it.
    out.push(GeneratedSpan {
        span: workflow,
        message_bytes: 0,
        root_of: Some(run_id),
    });
    Ok(out)
}

fn compress(body: Vec<u8>, compression: Compression) -> Result<Vec<u8>> {
    match compression {
        Compression::None => Ok(body),
        Compression::Gzip => {
            use std::io::Write;
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            encoder
                .write_all(&body)
                .context("gzip-compressing a request")?;
            encoder.finish().context("gzip-compressing a request")
        }
        Compression::Zstd => zstd::bulk::compress(&body, 3).context("zstd-compressing a request"),
    }
}

/// Packs spans into one export request for `workload.transport`.
fn make_job(spans: Vec<GeneratedSpan>, workload: &Workload) -> Result<Job> {
    let ends_at_run_boundary = spans.last().is_some_and(|s| s.root_of.is_some());
    let span_count = spans.len() as u64;
    let (mut runs, mut message_bytes, mut last_run_id) = (0, 0, None);
    let otlp_spans: Vec<Span> = spans
        .into_iter()
        .map(|generated| {
            message_bytes += generated.message_bytes;
            if let Some(run_id) = generated.root_of {
                runs += 1;
                last_run_id = Some(run_id);
            }
            let mut span = generated.span;
            if workload.plain_spans {
                span.name = format!("op {}", span.name);
                for attribute in &mut span.attributes {
                    attribute.key = format!("app.{}", attribute.key);
                }
            }
            span
        })
        .collect();
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(agent_resource()),
            scope_spans: vec![ScopeSpans {
                scope: Some(pydantic_ai_scope()),
                spans: otlp_spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let payload_bytes = request.encoded_len() as u64;
    let payload = match workload.transport {
        Transport::Grpc => Payload::Grpc(request),
        Transport::Http => Payload::Http(compress(request.encode_to_vec(), workload.compression)?),
    };
    Ok(Job {
        payload,
        counts: JobCounts {
            spans: span_count,
            runs,
            message_bytes,
            payload_bytes,
            last_run_id,
        },
        ends_at_run_boundary,
    })
}

/// Generator of one connection (runs on the blocking pool so building runs stays off the
/// request path): claims run numbers from `next_run` until `total_runs` are taken, and hands
/// requests to its connection until that connection hangs up.
fn generate(
    workload: Workload,
    next_run: Arc<AtomicU64>,
    seed: u64,
    jobs: mpsc::Sender<Job>,
) -> Result<()> {
    let mut rng = Rng::new(seed);
    let mut pending: Vec<GeneratedSpan> = Vec::new();
    loop {
        if next_run.fetch_add(1, Ordering::Relaxed) >= workload.total_runs {
            break;
        }
        let mut run = build_run(
            &mut rng,
            workload.steps,
            workload.message_bytes,
            now_unix_nanos(),
        )?;
        run = match workload.convention {
            Convention::PydanticAi => run,
            Convention::Strands => to_strands(run, &mut rng)?,
            Convention::Openinference => to_openinference(run, &mut rng)?,
            Convention::Openllmetry => to_openllmetry(run, &mut rng)?,
            Convention::Adk => to_adk(run, &mut rng)?,
            Convention::VercelAi => to_vercel_ai(run, &mut rng)?,
            Convention::Langchain => to_langchain(run, &mut rng)?,
        };
        if workload.batch_spans == 0 {
            if jobs.blocking_send(make_job(run, &workload)?).is_err() {
                return Ok(());
            }
            continue;
        }
        pending.extend(run);
        while pending.len() >= workload.batch_spans {
            let rest = pending.split_off(workload.batch_spans);
            let chunk = std::mem::replace(&mut pending, rest);
            if jobs.blocking_send(make_job(chunk, &workload)?).is_err() {
                return Ok(());
            }
        }
    }
    if !pending.is_empty() {
        // A closed channel here only means the connection already stopped.
        let _ = jobs.blocking_send(make_job(pending, &workload)?);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Connections
// ---------------------------------------------------------------------------------------------

/// Why a request was not acknowledged.
struct Failure {
    /// Short category (`grpc Unavailable`, `http 503`, `timeout`, ...), used for counting.
    kind: String,
    /// Details of one occurrence.
    detail: String,
}

/// One connection to the server (cloned for concurrent requests in the open loop: a gRPC
/// channel multiplexes them, the HTTP client opens more connections).
#[derive(Clone)]
enum Connection {
    /// A dedicated HTTP/2 channel.
    Grpc(TraceServiceClient<Channel>),
    /// A dedicated HTTP/1.1 client (one pooled connection).
    Http {
        /// The client.
        client: reqwest::Client,
        /// `http://host:port/v1/traces`.
        url: String,
        /// `Content-Encoding` header value.
        content_encoding: Option<&'static str>,
    },
}

impl Connection {
    /// Opens a connection of `transport` to `addr`; an HTTP client keeps up to `idle`
    /// connections open between requests.
    async fn open(
        transport: Transport,
        addr: SocketAddr,
        compression: Compression,
        timeout: Duration,
        idle: usize,
    ) -> Result<Self> {
        match transport {
            Transport::Grpc => {
                let channel = Endpoint::from_shared(format!("http://{addr}"))
                    .context("building the gRPC endpoint")?
                    .connect_timeout(Duration::from_secs(5))
                    .timeout(timeout)
                    .tcp_nodelay(true)
                    .connect()
                    .await
                    .with_context(|| format!("connecting to OTLP/gRPC at {addr}"))?;
                let mut client = TraceServiceClient::new(channel);
                client = match compression {
                    Compression::None => client,
                    Compression::Gzip => client.send_compressed(CompressionEncoding::Gzip),
                    Compression::Zstd => client.send_compressed(CompressionEncoding::Zstd),
                };
                Ok(Connection::Grpc(client))
            }
            Transport::Http => {
                let client = reqwest::Client::builder()
                    .no_proxy()
                    .pool_max_idle_per_host(idle)
                    .tcp_nodelay(true)
                    .connect_timeout(Duration::from_secs(5))
                    .timeout(timeout)
                    .build()
                    .context("building the HTTP client")?;
                let content_encoding = match compression {
                    Compression::None => None,
                    Compression::Gzip => Some("gzip"),
                    Compression::Zstd => Some("zstd"),
                };
                Ok(Connection::Http {
                    client,
                    url: format!("http://{addr}/v1/traces"),
                    content_encoding,
                })
            }
        }
    }

    /// Sends one request; `Ok` only for a success answer without rejected spans.
    async fn send(&mut self, payload: Payload) -> Result<(), Failure> {
        match (self, payload) {
            (Connection::Grpc(client), Payload::Grpc(request)) => {
                let response = client.export(request).await.map_err(|status| Failure {
                    kind: format!("grpc {:?}", status.code()),
                    detail: status.message().to_owned(),
                })?;
                check_partial_success(response.into_inner().partial_success)
            }
            (
                Connection::Http {
                    client,
                    url,
                    content_encoding,
                },
                Payload::Http(body),
            ) => {
                let mut request = client
                    .post(url.as_str())
                    .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
                    .body(body);
                if let Some(encoding) = content_encoding {
                    request = request.header(reqwest::header::CONTENT_ENCODING, *encoding);
                }
                let response = request.send().await.map_err(http_failure)?;
                let status = response.status();
                let content_type = response
                    .headers()
                    .get(reqwest::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let body = response.bytes().await.map_err(http_failure)?;
                if !status.is_success() {
                    let shown = &body[..body.len().min(300)];
                    return Err(Failure {
                        kind: format!("http {}", status.as_u16()),
                        detail: String::from_utf8_lossy(shown).into_owned(),
                    });
                }
                if content_type.contains("protobuf") {
                    let decoded =
                        ExportTraceServiceResponse::decode(body.as_ref()).map_err(|e| Failure {
                            kind: "bad response body".to_owned(),
                            detail: e.to_string(),
                        })?;
                    check_partial_success(decoded.partial_success)
                } else if content_type.contains("json") && !body.is_empty() {
                    check_json_partial_success(&body)
                } else {
                    Ok(())
                }
            }
            _ => Err(Failure {
                kind: "internal".to_owned(),
                detail: "payload built for the other transport".to_owned(),
            }),
        }
    }
}

/// Classifies a reqwest error.
fn http_failure(error: reqwest::Error) -> Failure {
    let kind = if error.is_timeout() {
        "http timeout"
    } else if error.is_connect() {
        "http connect"
    } else {
        "http transport"
    };
    Failure {
        kind: kind.to_owned(),
        detail: error.to_string(),
    }
}

/// A partial success with rejected spans is a failure.
fn check_partial_success(partial: Option<ExportTracePartialSuccess>) -> Result<(), Failure> {
    match partial {
        Some(p) if p.rejected_spans > 0 => Err(Failure {
            kind: "partial success".to_owned(),
            detail: format!("{} spans rejected: {}", p.rejected_spans, p.error_message),
        }),
        _ => Ok(()),
    }
}

/// The same check for an OTLP/JSON answer (`partialSuccess.rejectedSpans`, number or string).
fn check_json_partial_success(body: &[u8]) -> Result<(), Failure> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| Failure {
        kind: "bad response body".to_owned(),
        detail: e.to_string(),
    })?;
    let partial = &value["partialSuccess"];
    let rejected = match &partial["rejectedSpans"] {
        serde_json::Value::Number(n) => n.as_i64().unwrap_or(0),
        serde_json::Value::String(s) => s.parse().unwrap_or(0),
        _ => 0,
    };
    if rejected > 0 {
        return Err(Failure {
            kind: "partial success".to_owned(),
            detail: format!("{rejected} spans rejected: {}", partial["errorMessage"]),
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------------------------

/// Count and one example of a failure kind.
#[derive(Debug, Default)]
struct FailureCount {
    /// Occurrences.
    count: u64,
    /// Detail of the first occurrence.
    example: String,
}

/// Counters of one connection, merged per phase.
#[derive(Default)]
struct Stats {
    /// Acknowledged requests.
    ok_requests: u64,
    /// Failed requests.
    failed_requests: u64,
    /// Spans in acknowledged requests.
    spans: u64,
    /// Runs whose run span was acknowledged.
    runs: u64,
    /// Message JSON bytes in acknowledged requests.
    message_bytes: u64,
    /// Encoded protobuf bytes of acknowledged requests.
    payload_bytes: u64,
    /// Latency of every acknowledged request, microseconds.
    latencies_us: Vec<u64>,
    /// Open loop: how late each request left after its scheduled time, microseconds.
    lags_us: Vec<u64>,
    /// Failures by kind.
    failures: BTreeMap<String, FailureCount>,
    /// Id of one acknowledged run (to read it back).
    last_run_id: Option<String>,
    /// Stopped by `--duration` / `--time-limit`.
    hit_deadline: bool,
    /// Stopped by `--max-failures`.
    aborted: bool,
}

impl Stats {
    /// Adds another connection's counters.
    fn merge(&mut self, other: Stats) {
        self.ok_requests += other.ok_requests;
        self.failed_requests += other.failed_requests;
        self.spans += other.spans;
        self.runs += other.runs;
        self.message_bytes += other.message_bytes;
        self.payload_bytes += other.payload_bytes;
        self.latencies_us.extend(other.latencies_us);
        self.lags_us.extend(other.lags_us);
        for (kind, failure) in other.failures {
            let entry = self.failures.entry(kind).or_default();
            if entry.count == 0 {
                entry.example = failure.example;
            }
            entry.count += failure.count;
        }
        if other.last_run_id.is_some() {
            self.last_run_id = other.last_run_id;
        }
        self.hit_deadline |= other.hit_deadline;
        self.aborted |= other.aborted;
    }

    /// Counts the answer to one request that took `latency`.
    fn record(
        &mut self,
        result: Result<(), Failure>,
        latency: Duration,
        counts: JobCounts,
        failures: &AtomicU64,
    ) {
        match result {
            Ok(()) => {
                self.latencies_us.push(latency.as_micros() as u64);
                self.ok_requests += 1;
                self.spans += counts.spans;
                self.runs += counts.runs;
                self.message_bytes += counts.message_bytes;
                self.payload_bytes += counts.payload_bytes;
                if counts.last_run_id.is_some() {
                    self.last_run_id = counts.last_run_id;
                }
            }
            Err(failure) => {
                failures.fetch_add(1, Ordering::Relaxed);
                self.failed_requests += 1;
                let entry = self.failures.entry(failure.kind).or_default();
                if entry.count == 0 {
                    entry.example = failure.detail;
                }
                entry.count += 1;
            }
        }
    }
}

/// Sends the jobs of one connection until its generator is done, the deadline passes (at a run
/// boundary) or too many requests failed.
async fn drive_connection(
    mut connection: Connection,
    mut jobs: mpsc::Receiver<Job>,
    deadline: Instant,
    failures: Arc<AtomicU64>,
    max_failures: u64,
) -> Stats {
    let mut stats = Stats::default();
    let mut at_run_boundary = true;
    while let Some(job) = jobs.recv().await {
        if at_run_boundary && Instant::now() >= deadline {
            stats.hit_deadline = true;
            break;
        }
        if failures.load(Ordering::Relaxed) >= max_failures {
            stats.aborted = true;
            break;
        }
        at_run_boundary = job.ends_at_run_boundary;
        let started = Instant::now();
        let result = connection.send(job.payload).await;
        stats.record(result, started.elapsed(), job.counts, &failures);
    }
    stats
}

/// The schedule of one open-loop connection.
#[derive(Clone, Copy)]
struct OpenLoop {
    /// When its first request is due.
    first_send: Instant,
    /// Its share of `--rate`, spans per second.
    spans_per_s: f64,
    /// Requests it may have unanswered at once.
    max_in_flight: usize,
}

/// What an open-loop request task hands back: its answer, its latency, how late it left and
/// what it carried.
type Answered = (Result<(), Failure>, Duration, Duration, JobCounts);

/// Counts one finished open-loop request task (a panicked task counts as a failed request).
fn record_answered(
    stats: &mut Stats,
    joined: Result<Answered, tokio::task::JoinError>,
    failures: &AtomicU64,
) {
    match joined {
        Ok((result, latency, lag, counts)) => {
            stats.lags_us.push(lag.as_micros() as u64);
            stats.record(result, latency, counts, failures);
        }
        Err(error) => {
            let counts = JobCounts {
                spans: 0,
                runs: 0,
                message_bytes: 0,
                payload_bytes: 0,
                last_run_id: None,
            };
            let failure = Failure {
                kind: "internal".to_owned(),
                detail: format!("request task failed: {error}"),
            };
            stats.record(Err(failure), Duration::ZERO, counts, failures);
        }
    }
}

/// Sends the jobs of one connection on a fixed schedule (open loop): each request leaves when
/// its predecessor's spans have used up their share of the rate, without waiting for answers
/// (up to `schedule.max_in_flight` unanswered). Stops like [`drive_connection`].
async fn drive_open_loop(
    connection: Connection,
    mut jobs: mpsc::Receiver<Job>,
    schedule: OpenLoop,
    deadline: Instant,
    failures: Arc<AtomicU64>,
    max_failures: u64,
) -> Stats {
    let mut stats = Stats::default();
    let mut in_flight: tokio::task::JoinSet<Answered> = tokio::task::JoinSet::new();
    let mut next_send = schedule.first_send;
    let mut at_run_boundary = true;
    while let Some(job) = jobs.recv().await {
        if at_run_boundary && next_send.max(Instant::now()) >= deadline {
            stats.hit_deadline = true;
            break;
        }
        if failures.load(Ordering::Relaxed) >= max_failures {
            stats.aborted = true;
            break;
        }
        at_run_boundary = job.ends_at_run_boundary;
        tokio::time::sleep_until(tokio::time::Instant::from_std(next_send)).await;
        while let Some(joined) = in_flight.try_join_next() {
            record_answered(&mut stats, joined, &failures);
        }
        while in_flight.len() >= schedule.max_in_flight {
            match in_flight.join_next().await {
                Some(joined) => record_answered(&mut stats, joined, &failures),
                None => break,
            }
        }
        let scheduled = next_send;
        next_send += Duration::from_secs_f64(job.counts.spans as f64 / schedule.spans_per_s);
        let mut connection = connection.clone();
        in_flight.spawn(async move {
            let sent = Instant::now();
            let result = connection.send(job.payload).await;
            let lag = sent.saturating_duration_since(scheduled);
            (result, sent.elapsed(), lag, job.counts)
        });
    }
    while let Some(joined) = in_flight.join_next().await {
        record_answered(&mut stats, joined, &failures);
    }
    stats
}

/// Result of loading one transport.
struct PhaseReport {
    /// The transport.
    transport: Transport,
    /// The producer convention of the runs.
    convention: Convention,
    /// Merged counters.
    stats: Stats,
    /// Wall time from the first request to the last answer.
    elapsed: Duration,
    /// Open loop: the spans per second offered (`--rate`).
    offered_spans_per_s: Option<f64>,
}

/// Percentile of sorted microsecond samples in milliseconds (nearest rank), 0 without samples.
fn percentile_ms(sorted: &[u64], quantile: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((quantile * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1000.0
}

impl PhaseReport {
    /// Latency percentile in milliseconds (nearest rank), 0 without samples.
    fn latency_ms(&self, quantile: f64) -> f64 {
        percentile_ms(&self.stats.latencies_us, quantile)
    }

    /// Open loop: percentile of how late requests left, in milliseconds.
    fn lag_ms(&self, quantile: f64) -> f64 {
        percentile_ms(&self.stats.lags_us, quantile)
    }

    /// The open-loop part of the machine-readable form (null for a closed loop).
    fn open_loop_json(&self) -> serde_json::Value {
        match self.offered_spans_per_s {
            None => serde_json::Value::Null,
            Some(offered) => json!({
                "offered_spans_per_s": round3(offered),
                "schedule_lag_ms": {
                    "p50": round3(self.lag_ms(0.50)),
                    "p99": round3(self.lag_ms(0.99)),
                    "max": round3(self.lag_ms(1.0)),
                },
            }),
        }
    }

    /// `count` per second of elapsed time.
    fn rate(&self, count: u64) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            count as f64 / secs
        } else {
            0.0
        }
    }

    /// The machine-readable form.
    fn to_json(&self) -> serde_json::Value {
        let s = &self.stats;
        let failures: serde_json::Map<String, serde_json::Value> = s
            .failures
            .iter()
            .map(|(kind, f)| (kind.clone(), json!(f.count)))
            .collect();
        json!({
            "transport": self.transport.name(),
            "convention": self.convention.name(),
            "runs": s.runs,
            "spans": s.spans,
            "requests": s.ok_requests,
            "failed_requests": s.failed_requests,
            "failures": failures,
            "elapsed_s": round3(self.elapsed.as_secs_f64()),
            "runs_per_s": round3(self.rate(s.runs)),
            "spans_per_s": round3(self.rate(s.spans)),
            "requests_per_s": round3(self.rate(s.ok_requests)),
            "message_json_bytes": s.message_bytes,
            "message_json_mb_per_s": round3(self.rate(s.message_bytes) / MB),
            "otlp_payload_bytes": s.payload_bytes,
            "otlp_payload_mb_per_s": round3(self.rate(s.payload_bytes) / MB),
            "latency_ms": {
                "p50": round3(self.latency_ms(0.50)),
                "p99": round3(self.latency_ms(0.99)),
                "max": round3(self.latency_ms(1.0)),
            },
            "open_loop": self.open_loop_json(),
            "stopped_by_deadline": s.hit_deadline,
            "aborted_after_failures": s.aborted,
        })
    }
}

/// Rounds to three decimals for the JSON summary.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Loads one transport: `concurrency` connections, each fed by its own generator.
async fn run_phase(
    transport: Transport,
    convention: Convention,
    addr: SocketAddr,
    args: &Args,
    total_runs: u64,
    phase_limit: Duration,
    seed: u64,
) -> Result<PhaseReport> {
    let workload = Workload {
        transport,
        steps: args.steps as usize,
        message_bytes: args.message_bytes as usize,
        batch_spans: args.batch_spans as usize,
        compression: args.compression,
        total_runs,
        plain_spans: args.plain_spans,
        convention,
    };
    let timeout = Duration::from_secs(args.request_timeout);
    let next_run = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));

    let mut generators = Vec::new();
    let mut queues = Vec::new();
    for index in 0..u64::from(args.concurrency) {
        let (sender, receiver) = mpsc::channel(JOBS_AHEAD);
        let next_run = Arc::clone(&next_run);
        let seed = seed ^ (index + 1).wrapping_mul(0xA076_1D64_78BD_642F);
        generators.push(tokio::task::spawn_blocking(move || {
            generate(workload, next_run, seed, sender)
        }));
        queues.push(receiver);
    }
    let idle = if args.rate.is_some() {
        args.max_in_flight as usize
    } else {
        1
    };
    let mut connections = Vec::new();
    for _ in 0..args.concurrency {
        connections.push(Connection::open(transport, addr, args.compression, timeout, idle).await?);
    }

    let started = Instant::now();
    let deadline = started + phase_limit;
    let connection_count = f64::from(args.concurrency);
    // Open loop: the connections' schedules are staggered over one request interval.
    let spans_per_request = if args.batch_spans > 0 {
        f64::from(args.batch_spans)
    } else {
        2.0 * f64::from(args.steps)
    };
    let drivers: Vec<_> = connections
        .into_iter()
        .zip(queues)
        .enumerate()
        .map(|(index, (connection, queue))| {
            let failures = Arc::clone(&failures);
            match args.rate {
                Some(rate) => {
                    let spans_per_s = rate / connection_count;
                    let offset = spans_per_request / spans_per_s * index as f64 / connection_count;
                    let schedule = OpenLoop {
                        first_send: started + Duration::from_secs_f64(offset.min(60.0)),
                        spans_per_s,
                        max_in_flight: args.max_in_flight as usize,
                    };
                    tokio::spawn(drive_open_loop(
                        connection,
                        queue,
                        schedule,
                        deadline,
                        failures,
                        args.max_failures,
                    ))
                }
                None => tokio::spawn(drive_connection(
                    connection,
                    queue,
                    deadline,
                    failures,
                    args.max_failures,
                )),
            }
        })
        .collect();
    let mut stats = Stats::default();
    for driver in drivers {
        stats.merge(driver.await.context("a connection task panicked")?);
    }
    let elapsed = started.elapsed();
    for generator in generators {
        generator.await.context("a generator task panicked")??;
    }
    stats.latencies_us.sort_unstable();
    stats.lags_us.sort_unstable();
    Ok(PhaseReport {
        transport,
        convention,
        stats,
        elapsed,
        offered_spans_per_s: args.rate,
    })
}

/// Sizes of the files under a directory.
#[derive(Debug, Default, Clone, Copy)]
struct DiskUsage {
    /// Sum of file lengths.
    bytes: u64,
    /// Sum of allocated blocks.
    allocated: u64,
    /// Number of files.
    files: u64,
    /// Bytes in RocksDB write-ahead logs (`NNNNNN.log`).
    wal_bytes: u64,
    /// Bytes in RocksDB tables (`*.sst`, `*.blob`).
    table_bytes: u64,
}

/// Walks `dir` and sums its file sizes (files that vanish during the walk, e.g. compacted SST
/// files, are skipped).
fn disk_usage(dir: &Path) -> Result<DiskUsage> {
    use std::os::unix::fs::MetadataExt;
    let mut usage = DiskUsage::default();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let entries = match std::fs::read_dir(&path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && path != dir => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        for entry in entries {
            let entry = entry.with_context(|| format!("reading {}", path.display()))?;
            let metadata = match entry.path().symlink_metadata() {
                Ok(metadata) => metadata,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("stat {}", entry.path().display()))
                }
            };
            if metadata.is_dir() {
                stack.push(entry.path());
            } else if metadata.is_file() {
                usage.bytes += metadata.len();
                usage.allocated += metadata.blocks() * 512;
                usage.files += 1;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.ends_with(".log") {
                    usage.wal_bytes += metadata.len();
                } else if name.ends_with(".sst") || name.ends_with(".blob") {
                    usage.table_bytes += metadata.len();
                }
            }
        }
    }
    Ok(usage)
}

// ---------------------------------------------------------------------------------------------
// The server under test
// ---------------------------------------------------------------------------------------------

/// A `stepline` process started by the load generator.
struct Server {
    /// The process (killed if dropped while still running).
    child: tokio::process::Child,
    /// Its combined stdout/stderr.
    log_path: PathBuf,
}

impl Server {
    /// Stops the server: SIGTERM, then SIGKILL after 10 s. Returns how it ended.
    async fn stop(mut self) -> Result<String> {
        if let Some(pid) = self.child.id() {
            // Ask for a clean shutdown of exactly this process; fall through to SIGKILL if
            // `kill` is unavailable.
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        match tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await {
            Ok(status) => Ok(format!(
                "exited ({})",
                status.context("waiting for stepline to exit")?
            )),
            Err(_) => {
                self.child.kill().await.context("killing stepline")?;
                Ok("killed after 10 s without exiting on SIGTERM".to_owned())
            }
        }
    }
}

/// The `stepline` binary to start.
fn resolve_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        if !path.is_file() {
            bail!("--bin {} is not a file", path.display());
        }
        return Ok(path.to_path_buf());
    }
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(dir).join("release").join("stepline"));
    }
    candidates.push(PathBuf::from("target/release/stepline"));
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .with_context(|| {
            format!(
                "no stepline binary at {}; run `cargo build --release` or pass --bin",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            )
        })
}

/// `n` distinct free loopback ports (all listeners are held until every port is chosen).
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").context("finding a free port"))
        .collect::<Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .context("reading a port number")
        })
        .collect()
}

/// The last `lines` lines of a log file, for error messages.
fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// A health-check / read-back HTTP client.
fn api_client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .context("building the API client")
}

/// Polls `GET /healthz` until it answers 200, the process exits, or `timeout` passes.
async fn wait_healthy(
    api: SocketAddr,
    mut server: Option<&mut Server>,
    timeout: Duration,
) -> Result<()> {
    let client = api_client()?;
    let url = format!("http://{api}/healthz");
    let started = Instant::now();
    loop {
        if let Some(server) = server.as_deref_mut() {
            if let Some(status) = server
                .child
                .try_wait()
                .context("checking the stepline process")?
            {
                bail!(
                    "stepline exited during startup ({status}); last log lines:\n{}",
                    log_tail(&server.log_path, 40)
                );
            }
        }
        let last = match client.get(&url).send().await {
            Ok(response) if response.status() == reqwest::StatusCode::OK => return Ok(()),
            Ok(response) => format!("status {}", response.status()),
            Err(e) => e.to_string(),
        };
        if started.elapsed() >= timeout {
            let tail = server
                .map(|s| format!("; last log lines:\n{}", log_tail(&s.log_path, 40)))
                .unwrap_or_default();
            bail!(
                "{url} did not answer 200 within {} s ({last}){tail}",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts `stepline` on free ports with a fresh data directory under `dir`.
async fn start_server(
    binary: &Path,
    dir: &Path,
    startup_timeout: Duration,
    exporters: Option<String>,
) -> Result<(Server, Target)> {
    let ports = free_ports(3)?;
    let grpc: SocketAddr = ([127, 0, 0, 1], ports[0]).into();
    let http: SocketAddr = ([127, 0, 0, 1], ports[1]).into();
    let api: SocketAddr = ([127, 0, 0, 1], ports[2]).into();
    let data_dir = dir.join("data");
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    // A JSON string is a valid YAML double-quoted scalar, whatever the path contains.
    let data_dir_yaml = serde_json::to_string(&data_dir.display().to_string())
        .context("quoting the data directory")?;
    let traces_exporters = match &exporters {
        Some(yaml) => yaml
            .lines()
            .nth(1)
            .map(|line| format!("[{}]", line.trim().trim_end_matches(':')))
            .unwrap_or_else(|| "[]".into()),
        None => "[]".into(),
    };
    let exporters = exporters.unwrap_or_default();
    let config = format!(
        "{exporters}receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: {grpc} }}
      http: {{ endpoint: {http} }}
processors:
  stepline: {{}}
extensions:
  stepline_storage: {{ directory: {data_dir_yaml}, sync: true }}
  stepline_api: {{ endpoint: {api} }}
service:
  extensions: [stepline_storage, stepline_api]
  pipelines:
    traces: {{ receivers: [otlp], processors: [stepline], exporters: {traces_exporters} }}
"
    );
    let config_path = dir.join("collector.yaml");
    std::fs::write(&config_path, config)
        .with_context(|| format!("writing {}", config_path.display()))?;
    let log_path = dir.join("stepline.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let log_err = log
        .try_clone()
        .with_context(|| format!("opening {}", log_path.display()))?;
    let child = tokio::process::Command::new(binary)
        .arg("--config")
        .arg(&config_path)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let mut server = Server { child, log_path };
    wait_healthy(api, Some(&mut server), startup_timeout).await?;
    let target = Target {
        grpc: Some(grpc),
        http: Some(http),
        api: Some(api),
        data_dir: Some(data_dir),
    };
    Ok((server, target))
}

/// Reads one acknowledged run back through the query API: `GET /v1/runs/{id}`.
async fn read_back(api: SocketAddr, run_id: &str) -> serde_json::Value {
    let url = format!("http://{api}/v1/runs/{run_id}");
    let answer = async {
        let response = api_client()?
            .get(&url)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().await.unwrap_or(serde_json::Value::Null);
        anyhow::Ok((status, body))
    }
    .await;
    match answer {
        Ok((status, body)) => json!({
            "run_id": run_id,
            "http_status": status,
            "run_status": body.get("status").cloned().unwrap_or(serde_json::Value::Null),
            "model_requests": body.get("model_request_count").cloned()
                .or_else(|| body.get("counts").cloned())
                .unwrap_or(serde_json::Value::Null),
        }),
        Err(e) => json!({"run_id": run_id, "error": format!("{e:#}")}),
    }
}

// ---------------------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------------------

/// Checks that an endpoint given on the command line is a loopback address.
fn require_loopback(name: &str, addr: Option<SocketAddr>) -> Result<()> {
    match addr {
        Some(a) if !a.ip().is_loopback() => {
            bail!("--{name} {a}: the load generator only targets loopback addresses")
        }
        _ => Ok(()),
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    require_loopback("grpc", args.grpc)?;
    require_loopback("http", args.http)?;
    require_loopback("api", args.api)?;
    let transports: Vec<Transport> = match args.transport {
        TransportChoice::Grpc => vec![Transport::Grpc],
        TransportChoice::Http => vec![Transport::Http],
        TransportChoice::Both => vec![Transport::Grpc, Transport::Http],
    };
    let duration = match args.duration {
        Some(d) if !(d.is_finite() && d > 0.0) => bail!("--duration must be a positive number"),
        Some(d) => Some(Duration::from_secs_f64(d.min(86_400.0))),
        None => None,
    };
    let time_limit = Duration::from_secs(args.time_limit);
    let phase_limit = duration.map_or(time_limit, |d| d.min(time_limit));
    let total_runs = match (args.runs, duration) {
        (Some(runs), _) => runs.min(MAX_RUNS),
        (None, Some(_)) => MAX_RUNS,
        (None, None) => DEFAULT_RUNS,
    };
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            bail!("--rate must be a positive number of spans per second");
        }
    }
    let seed = args
        .seed
        .unwrap_or_else(|| now_unix_nanos() ^ (u64::from(std::process::id()) << 32));

    // The server: started here, or already running.
    let external = args.grpc.is_some() || args.http.is_some();
    if external && args.forward != Forward::None {
        bail!("--forward configures the server it starts; it cannot be used with --grpc/--http");
    }
    let sink = Arc::new(CountingSink::default());
    let exporters = start_sink(args.forward, sink.clone()).await?;
    let mut temp_dir = None;
    let mut server = None;
    let target = if external {
        let target = Target {
            grpc: args.grpc,
            http: args.http,
            api: args.api,
            data_dir: args.data_dir.clone(),
        };
        if let Some(api) = target.api {
            wait_healthy(api, None, Duration::from_secs(args.startup_timeout)).await?;
        }
        target
    } else {
        let binary = resolve_binary(args.bin.as_deref())?;
        let dir = tempfile::Builder::new()
            .prefix("stepline-loadgen-")
            .tempdir()
            .context("creating a temporary directory")?;
        let (started, target) = start_server(
            &binary,
            dir.path(),
            Duration::from_secs(args.startup_timeout),
            exporters,
        )
        .await?;
        println!(
            "started {} (pid {}) in {}",
            binary.display(),
            started.child.id().unwrap_or(0),
            dir.path().display()
        );
        server = Some(started);
        temp_dir = Some(dir);
        target
    };
    for transport in &transports {
        let missing = match transport {
            Transport::Grpc => target.grpc.is_none(),
            Transport::Http => target.http.is_none(),
        };
        if missing {
            bail!(
                "--transport needs a {} endpoint: pass --{} too",
                transport.name(),
                transport.name()
            );
        }
    }
    let disk_before = match &target.data_dir {
        Some(dir) => Some(disk_usage(dir)?),
        None => None,
    };

    let spans_per_run = 2 * u64::from(args.steps);
    println!(
        "target grpc={} http={} api={} | up to {} runs per transport{}, {} steps ({} spans/run), \
         ~{} B messages, {} connections, {}, compression {}, seed {}",
        target.grpc.map_or("-".to_owned(), |a| a.to_string()),
        target.http.map_or("-".to_owned(), |a| a.to_string()),
        target.api.map_or("-".to_owned(), |a| a.to_string()),
        total_runs,
        duration.map_or(String::new(), |d| format!(" or {:.1} s", d.as_secs_f64())),
        args.steps,
        spans_per_run,
        args.message_bytes,
        args.concurrency,
        if args.batch_spans == 0 {
            "one run per request".to_owned()
        } else {
            format!("{} spans per request", args.batch_spans)
        },
        args.compression.name(),
        seed,
    );

    let forwarding_started = Instant::now();
    let mut reports = Vec::new();
    let mut phase = 0u64;
    for transport in &transports {
        let addr = match transport {
            Transport::Grpc => target.grpc,
            Transport::Http => target.http,
        }
        .context("endpoint checked above")?;
        for convention in &args.conventions {
            phase += 1;
            let phase_seed = seed.wrapping_add(phase << 48);
            let report = run_phase(
                *transport,
                *convention,
                addr,
                &args,
                total_runs,
                phase_limit,
                phase_seed,
            )
            .await
            .with_context(|| format!("loading {} {}", transport.name(), convention.name()))?;
            reports.push(report);
        }
    }

    println!();
    println!(
        "{:<9} {:<11} {:>8} {:>9} {:>8} {:>6} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8} {:>8} {:>8}",
        "transport",
        "convention",
        "runs",
        "spans",
        "requests",
        "failed",
        "elapsed_s",
        "spans/s",
        "req/s",
        "msgMB/s",
        "otlpMB/s",
        "p50_ms",
        "p99_ms",
        "max_ms"
    );
    for r in &reports {
        let s = &r.stats;
        println!(
            "{:<9} {:<11} {:>8} {:>9} {:>8} {:>6} {:>9.2} {:>9.0} {:>8.1} {:>9.2} {:>9.2} {:>8.2} {:>8.2} {:>8.2}",
            r.transport.name(),
            r.convention.name(),
            s.runs,
            s.spans,
            s.ok_requests,
            s.failed_requests,
            r.elapsed.as_secs_f64(),
            r.rate(s.spans),
            r.rate(s.ok_requests),
            r.rate(s.message_bytes) / MB,
            r.rate(s.payload_bytes) / MB,
            r.latency_ms(0.50),
            r.latency_ms(0.99),
            r.latency_ms(1.0),
        );
        for (kind, failure) in &s.failures {
            println!(
                "  failures {kind}: {} (e.g. {})",
                failure.count, failure.example
            );
        }
        if let Some(offered) = r.offered_spans_per_s {
            println!(
                "  open loop: {offered:.0} spans/s offered; requests left late by p50 {:.2} ms, \
                 p99 {:.2} ms, max {:.2} ms (latency is from the moment each request left)",
                r.lag_ms(0.50),
                r.lag_ms(0.99),
                r.lag_ms(1.0)
            );
        }
        if s.hit_deadline {
            println!("  stopped by the duration/time limit");
        }
        if s.aborted {
            println!("  aborted after {} failed requests", args.max_failures);
        }
    }

    // Forwarding: wait until the sink has every acknowledged span.
    let acked_spans: u64 = reports.iter().map(|r| r.stats.spans).sum();
    let mut forwarding_json = serde_json::Value::Null;
    if args.forward != Forward::None {
        let deadline = Instant::now() + time_limit;
        while sink.spans.load(Ordering::Relaxed) < acked_spans && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let load_time: f64 = reports.iter().map(|r| r.elapsed.as_secs_f64()).sum();
        let received = sink.spans.load(Ordering::Relaxed);
        let caught_up = forwarding_started.elapsed().as_secs_f64();
        println!(
            "forwarded: {received} of {acked_spans} acknowledged spans reached the sink; \
             {:.0} spans/s end to end ({caught_up:.2} s from the first request until the sink \
             had them all; load phases took {load_time:.2} s)",
            received as f64 / caught_up.max(1e-9)
        );
        forwarding_json = json!({
            "exporter": match args.forward { Forward::Grpc => "otlp", _ => "otlphttp" },
            "acked_spans": acked_spans,
            "received_spans": received,
            "end_to_end_s": round3(caught_up),
            "end_to_end_spans_per_s": round3(received as f64 / caught_up.max(1e-9)),
        });
    }
    let peak_rss = server
        .as_ref()
        .and_then(|s| s.child.id())
        .and_then(peak_rss_kb);
    if let Some(kb) = peak_rss {
        println!("stepline peak RSS (VmHWM): {:.1} MB", kb as f64 / 1024.0);
    }
    let server_cpu_s = server
        .as_ref()
        .and_then(|s| s.child.id())
        .and_then(cpu_seconds);
    if let Some(cpu) = server_cpu_s {
        println!(
            "stepline CPU time: {cpu:.2} s = {:.0} acknowledged spans per CPU-second",
            acked_spans as f64 / cpu.max(1e-9)
        );
    }

    // Read one acknowledged run back (shows whether acknowledged data is queryable).
    let mut read_backs = Vec::new();
    if let Some(api) = target.api {
        for r in &reports {
            if let Some(run_id) = &r.stats.last_run_id {
                let answer = read_back(api, run_id).await;
                println!("read back ({}): {answer}", r.transport.name());
                read_backs.push(answer);
            }
        }
    }

    // Disk: live, then (for a server started here) after it stopped.
    let disk_live = match &target.data_dir {
        Some(dir) => Some(disk_usage(dir)?),
        None => None,
    };
    let mut shutdown = None;
    if let Some(server) = server.take() {
        shutdown = Some(server.stop().await?);
    }
    let disk_final = match &target.data_dir {
        Some(dir) => Some(disk_usage(dir)?),
        None => None,
    };
    let total_runs_acked: u64 = reports.iter().map(|r| r.stats.runs).sum();
    let per_run = |bytes: u64| {
        if total_runs_acked > 0 {
            bytes as f64 / total_runs_acked as f64
        } else {
            0.0
        }
    };
    let mut disk_json = serde_json::Value::Null;
    if let (Some(dir), Some(before), Some(live), Some(end)) =
        (&target.data_dir, disk_before, disk_live, disk_final)
    {
        if let Some(how) = &shutdown {
            println!("stepline {how}");
        }
        println!(
            "disk: {} = {} bytes in {} files ({:.2} MB, allocated {:.2} MB) for {} runs \
             = {:.0} bytes/run (WAL {:.0}, tables {:.0}); live before shutdown {:.0} bytes/run; \
             {} bytes at start",
            dir.display(),
            end.bytes,
            end.files,
            end.bytes as f64 / MB,
            end.allocated as f64 / MB,
            total_runs_acked,
            per_run(end.bytes),
            per_run(end.wal_bytes),
            per_run(end.table_bytes),
            per_run(live.bytes),
            before.bytes,
        );
        disk_json = json!({
            "data_dir": dir.display().to_string(),
            "bytes": end.bytes,
            "allocated_bytes": end.allocated,
            "files": end.files,
            "wal_bytes": end.wal_bytes,
            "table_bytes": end.table_bytes,
            "bytes_per_run": round3(per_run(end.bytes)),
            "live_bytes": live.bytes,
            "live_bytes_per_run": round3(per_run(live.bytes)),
            "bytes_at_start": before.bytes,
            "delta_bytes_per_run": round3(per_run(end.bytes.saturating_sub(before.bytes))),
        });
    }
    if let Some(dir) = temp_dir {
        if args.keep_data {
            println!("kept {}", dir.keep().display());
        }
    }

    let failed: u64 = reports.iter().map(|r| r.stats.failed_requests).sum();
    let summary = json!({
        "loadgen": "stepline",
        "ok": failed == 0,
        "config": {
            "steps": args.steps,
            "spans_per_run": spans_per_run,
            "message_bytes": args.message_bytes,
            "concurrency": args.concurrency,
            "batch_spans": args.batch_spans,
            "compression": args.compression.name(),
            "runs_per_transport": total_runs,
            "duration_s": duration.map(|d| d.as_secs_f64()),
            "rate_spans_per_s": args.rate,
            "max_in_flight": args.rate.map(|_| args.max_in_flight),
            "seed": seed,
        },
        "transports": reports.iter().map(PhaseReport::to_json).collect::<Vec<_>>(),
        "runs": total_runs_acked,
        "failed_requests": failed,
        "disk": disk_json,
        "read_back": read_backs,
        "server": shutdown,
        "forwarding": forwarding_json,
        "peak_rss_kb": peak_rss,
        "server_cpu_s": server_cpu_s,
        "plain_spans": args.plain_spans,
    });
    println!("{summary}");
    if failed > 0 {
        bail!("{failed} requests were not acknowledged");
    }
    Ok(())
}
