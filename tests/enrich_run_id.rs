//! `enrich_run_id` end to end: the real binary forwards Strands, OpenInference (OpenAI Agents)
//! and OpenLLMetry traces to backends over both exporter kinds, and every span of each run
//! (the agent span and all its children: Strands cycles, OpenInference CHAIN spans, Traceloop
//! task spans, model and tool spans) arrives with `stepline.run_id` = the id `GET /v1/runs`
//! lists for that run; spans of no run arrive without it.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::Event;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use stepline::ingest::{ExportOutcome, IngestError};
use stepline::receiver::{serve_grpc, serve_http, ExportSink, ReceiverLimits};
use support::{encode, Options, Stepline};
use tokio::net::TcpListener;

/// A backend recording the trace requests it receives (logs and metrics are accepted and
/// dropped).
#[derive(Default)]
struct Backend {
    traces: Mutex<Vec<ExportTraceServiceRequest>>,
}

impl ExportSink for Backend {
    async fn export_traces(
        &self,
        request: ExportTraceServiceRequest,
    ) -> Result<ExportOutcome, IngestError> {
        self.traces.lock().unwrap().push(request);
        Ok(ExportOutcome::default())
    }

    async fn export_logs(
        &self,
        _request: ExportLogsServiceRequest,
    ) -> Result<ExportOutcome, IngestError> {
        Ok(ExportOutcome::default())
    }

    async fn export_metrics(
        &self,
        _request: ExportMetricsServiceRequest,
    ) -> Result<ExportOutcome, IngestError> {
        Ok(ExportOutcome::default())
    }
}

impl Backend {
    /// Every span received, by (trace id, span id), with the values of its `stepline.run_id`.
    fn tags(&self) -> HashMap<(Vec<u8>, Vec<u8>), Vec<String>> {
        let traces = self.traces.lock().unwrap();
        traces
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .map(|span| {
                let tags = span
                    .attributes
                    .iter()
                    .filter(|kv| kv.key == "stepline.run_id")
                    .map(
                        |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                            Some(any_value::Value::StringValue(s)) => s.clone(),
                            other => format!("not a string: {other:?}"),
                        },
                    )
                    .collect();
                ((span.trace_id.clone(), span.span_id.clone()), tags)
            })
            .collect()
    }
}

/// A backend serving OTLP/gRPC and OTLP/HTTP on free ports: (backend, gRPC address, HTTP address).
async fn start_backend() -> (Arc<Backend>, std::net::SocketAddr, std::net::SocketAddr) {
    let backend = Arc::new(Backend::default());
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addresses = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
    let limits = ReceiverLimits {
        max_request_bytes: 64 << 20,
        ..Default::default()
    };
    tokio::spawn(serve_grpc(
        grpc,
        backend.clone(),
        limits,
        std::future::pending(),
    ));
    tokio::spawn(serve_http(
        http,
        backend.clone(),
        limits,
        std::future::pending(),
    ));
    (backend, addresses.0, addresses.1)
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        key_strindex: 0,
    }
}

fn event(name: &str, attributes: Vec<KeyValue>) -> Event {
    Event {
        name: name.into(),
        attributes,
        ..Default::default()
    }
}

const T0: u64 = 1_700_000_000_000_000_000;

/// A span of trace `[trace; 16]` with id `[id; 8]`, parent `[parent; 8]` (0: none), running
/// from `at.0` to `at.1` milliseconds after T0.
fn span(trace: u8, id: u8, parent: u8, name: &str, at: (u64, u64), attrs: Vec<KeyValue>) -> Span {
    Span {
        trace_id: vec![trace; 16],
        span_id: vec![id; 8],
        parent_span_id: if parent == 0 {
            Vec::new()
        } else {
            vec![parent; 8]
        },
        name: name.into(),
        kind: 1,
        start_time_unix_nano: T0 + at.0 * 1_000_000,
        end_time_unix_nano: T0 + at.1 * 1_000_000,
        attributes: attrs,
        ..Default::default()
    }
}

/// One producer's request: its trace, its session (conversation), the run's agent span, and
/// the spans of no run.
struct Producer {
    name: &'static str,
    trace: u8,
    session: &'static str,
    run_span: u8,
    spans: Vec<Span>,
    outside: Vec<u8>,
}

/// Strands Agents (default mode, content in span events): `invoke_agent calc` (1) → cycle (2)
/// → chat (3) asking for `add` + tool (4); → cycle (5) → chat (6). Plus a plain HTTP span (7).
fn strands() -> Producer {
    const T: u8 = 0x51;
    let op = |v: &str| kv("gen_ai.operation.name", v);
    let session = || kv("session.id", "enrich-strands");
    let user = || {
        event(
            "gen_ai.user.message",
            vec![kv("content", r#"[{"text":"add 2 and 3"}]"#)],
        )
    };
    let tool_use = r#"[{"toolUse":{"toolUseId":"t-1","name":"add","input":{"a":2,"b":3}}}]"#;
    let tool_result =
        r#"[{"toolResult":{"toolUseId":"t-1","status":"success","content":[{"text":"5"}]}}]"#;
    let mut chat1 = span(T, 3, 2, "chat", (11, 20), vec![op("chat"), session()]);
    chat1.events = vec![
        user(),
        event(
            "gen_ai.choice",
            vec![kv("message", tool_use), kv("finish_reason", "tool_use")],
        ),
    ];
    let mut tool = span(
        T,
        4,
        2,
        "execute_tool add",
        (25, 30),
        vec![
            op("execute_tool"),
            session(),
            kv("gen_ai.tool.name", "add"),
            kv("gen_ai.tool.call.id", "t-1"),
            kv("gen_ai.tool.status", "success"),
        ],
    );
    tool.events = vec![
        event(
            "gen_ai.tool.message",
            vec![
                kv("role", "tool"),
                kv("content", r#"{"a": 2, "b": 3}"#),
                kv("id", "t-1"),
            ],
        ),
        event(
            "gen_ai.choice",
            vec![kv("message", r#"[{"text": "5"}]"#), kv("id", "t-1")],
        ),
    ];
    let mut chat2 = span(T, 6, 5, "chat", (41, 50), vec![op("chat"), session()]);
    chat2.events = vec![
        user(),
        event("gen_ai.assistant.message", vec![kv("content", tool_use)]),
        event("gen_ai.tool.message", vec![kv("content", tool_result)]),
        event(
            "gen_ai.choice",
            vec![
                kv("message", r#"[{"text":"5"}]"#),
                kv("finish_reason", "end_turn"),
            ],
        ),
    ];
    let cycle = |id, at| {
        span(
            T,
            id,
            1,
            "execute_event_loop_cycle",
            at,
            vec![op("execute_event_loop_cycle"), session()],
        )
    };
    Producer {
        name: "strands",
        trace: T,
        session: "enrich-strands",
        run_span: 1,
        spans: vec![
            chat1,
            tool,
            cycle(2, (10, 35)),
            chat2,
            cycle(5, (40, 55)),
            span(
                T,
                1,
                0,
                "invoke_agent calc",
                (5, 60),
                vec![
                    op("invoke_agent"),
                    session(),
                    kv("gen_ai.agent.name", "calc"),
                ],
            ),
            span(
                T,
                7,
                0,
                "GET /health",
                (1, 2),
                vec![kv("http.request.method", "GET")],
            ),
        ],
        outside: vec![7],
    }
}

/// The OpenAI Agents SDK as OpenInference exports it: `Agent workflow` (AGENT, 1) → task
/// (CHAIN, 2) → `calc` (AGENT, 3) → turn (CHAIN, 4) → response (LLM, 5) asking for `add`,
/// TOOL `add` (6); then turn (CHAIN, 7) → response (LLM, 8). The run is `calc`; the workflow
/// spans above it are left out of the check.
fn openinference() -> Producer {
    const T: u8 = 0x52;
    let kind = |k: &str| kv("openinference.span.kind", k);
    let session = || kv("session.id", "enrich-openinference");
    let chain =
        |id, parent, name: &str, at| span(T, id, parent, name, at, vec![kind("CHAIN"), session()]);
    let llm = |id, parent, at, input: &str, output: &str| {
        span(
            T,
            id,
            parent,
            "response",
            at,
            vec![
                kind("LLM"),
                session(),
                kv("llm.model_name", "gpt-test"),
                kv("llm.token_count.prompt", "10"),
                kv("input.value", input),
                kv("output.value", output),
            ],
        )
    };
    let call = r#"{"type":"function_call","call_id":"c_add","name":"add","arguments":"{\"a\":1}"}"#;
    let history = format!(
        r#"[{{"role":"user","content":"go"}},{call},{{"type":"function_call_output","call_id":"c_add","output":"1"}}]"#
    );
    Producer {
        name: "openinference",
        trace: T,
        session: "enrich-openinference",
        run_span: 3,
        spans: vec![
            span(
                T,
                1,
                0,
                "Agent workflow",
                (1, 99),
                vec![kind("AGENT"), session()],
            ),
            chain(2, 1, "Agent workflow", (2, 98)),
            span(
                T,
                3,
                2,
                "calc",
                (3, 97),
                vec![kind("AGENT"), session(), kv("agent.name", "calc")],
            ),
            chain(4, 3, "turn", (4, 40)),
            llm(
                5,
                4,
                (5, 20),
                r#"[{"role":"user","content":"go"}]"#,
                &format!(r#"{{"instructions":"Add.","output":[{call}]}}"#),
            ),
            span(
                T,
                6,
                4,
                "add",
                (25, 30),
                vec![
                    kind("TOOL"),
                    session(),
                    kv("tool.name", "add"),
                    kv("input.value", r#"{"a":1}"#),
                    kv("output.value", "1"),
                ],
            ),
            chain(7, 3, "turn", (50, 96)),
            llm(
                8,
                7,
                (51, 95),
                &history,
                r#"{"instructions":"Add.","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"1"}]}]}"#,
            ),
        ],
        outside: Vec::new(),
    }
}

/// OpenLLMetry (Traceloop): `calc.agent` (1) → `openai.chat` (2) asking for `add`, `add.tool`
/// (3), and a `step.task` (4) holding the second `openai.chat` (5).
fn openllmetry() -> Producer {
    const T: u8 = 0x53;
    let session = || {
        kv(
            "traceloop.association.properties.session_id",
            "enrich-openllmetry",
        )
    };
    let chat = |id, parent, at, extra: Vec<KeyValue>| {
        let mut attrs = vec![
            session(),
            kv("llm.request.type", "chat"),
            kv("gen_ai.system", "openai"),
            kv("gen_ai.prompt.0.role", "user"),
            kv("gen_ai.prompt.0.content", "2?"),
        ];
        attrs.extend(extra);
        span(T, id, parent, "openai.chat", at, attrs)
    };
    Producer {
        name: "openllmetry",
        trace: T,
        session: "enrich-openllmetry",
        run_span: 1,
        spans: vec![
            span(
                T,
                1,
                0,
                "calc.agent",
                (1, 99),
                vec![
                    session(),
                    kv("traceloop.span.kind", "agent"),
                    kv("traceloop.entity.name", "calc"),
                ],
            ),
            chat(
                2,
                1,
                (2, 20),
                vec![
                    kv("gen_ai.completion.0.role", "assistant"),
                    kv("gen_ai.completion.0.tool_calls.0.id", "t1"),
                    kv("gen_ai.completion.0.tool_calls.0.name", "add"),
                    kv("gen_ai.completion.0.tool_calls.0.arguments", r#"{"a":2}"#),
                ],
            ),
            span(
                T,
                3,
                1,
                "add.tool",
                (25, 30),
                vec![
                    session(),
                    kv("traceloop.span.kind", "tool"),
                    kv("traceloop.entity.name", "add"),
                    kv("traceloop.entity.input", r#"{"args":[],"kwargs":{"a":2}}"#),
                    kv("traceloop.entity.output", "2"),
                ],
            ),
            span(
                T,
                4,
                1,
                "step.task",
                (35, 95),
                vec![session(), kv("traceloop.span.kind", "task")],
            ),
            chat(
                5,
                4,
                (40, 90),
                vec![
                    kv("gen_ai.prompt.1.role", "assistant"),
                    kv("gen_ai.prompt.1.tool_calls.0.id", "t1"),
                    kv("gen_ai.prompt.1.tool_calls.0.name", "add"),
                    kv("gen_ai.prompt.1.tool_calls.0.arguments", r#"{"a":2}"#),
                    kv("gen_ai.prompt.2.role", "tool"),
                    kv("gen_ai.prompt.2.tool_call_id", "t1"),
                    kv("gen_ai.prompt.2.content", "2"),
                    kv("gen_ai.completion.0.role", "assistant"),
                    kv("gen_ai.completion.0.content", "It is 2."),
                ],
            ),
        ],
        outside: Vec::new(),
    }
}

impl Producer {
    fn request(&self) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", self.name)],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: self.spans.clone(),
                    ..Default::default()
                }],
                schema_url: String::new(),
            }],
        }
    }

    /// The run's agent span and every span below it (its children, at any depth).
    fn run_spans(&self) -> Vec<&Span> {
        let mut inside: HashSet<Vec<u8>> = HashSet::from([vec![self.run_span; 8]]);
        // Parents may come after their children: repeat until nothing is added.
        loop {
            let before = inside.len();
            for s in &self.spans {
                if inside.contains(&s.parent_span_id) {
                    inside.insert(s.span_id.clone());
                }
            }
            if inside.len() == before {
                break;
            }
        }
        self.spans
            .iter()
            .filter(|s| inside.contains(&s.span_id))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enrich_run_id_gives_strands_openinference_and_openllmetry_children_their_runs_id() {
    let (over_grpc, grpc, _) = start_backend().await;
    let (over_http, _, http) = start_backend().await;
    let quick = "    retry_on_failure: { initial_interval: 100ms, max_interval: 300ms }\n";
    let stepline = Stepline::start_with(Options {
        exporters: Some(format!(
            "  otlp:\n    endpoint: http://{grpc}\n    enrich_run_id: true\n{quick}\
             \x20 otlphttp:\n    endpoint: http://{http}\n    enrich_run_id: true\n{quick}"
        )),
        pipeline_exporters: Some("[otlp, otlphttp]".into()),
        ..Options::default()
    })
    .await;
    let producers = [strands(), openinference(), openllmetry()];
    let mut client = TraceServiceClient::connect(stepline.otlp_grpc_url())
        .await
        .unwrap();
    for producer in &producers {
        client.export(producer.request()).await.unwrap();
    }

    // One run per producer, as the API lists it.
    let mut run_ids = Vec::new();
    for producer in &producers {
        let list = format!("/v1/runs?conversation_id={}", encode(producer.session));
        let run = stepline
            .wait_for(
                &format!("the {} run", producer.name),
                Duration::from_secs(20),
                || {
                    let list = list.clone();
                    let stepline = &stepline;
                    async move {
                        match stepline.get_list(&list, "runs").await.as_slice() {
                            [run] => Ok(run.clone()),
                            other => Err(format!("{other:?}")),
                        }
                    }
                },
            )
            .await;
        assert_eq!(
            run["trace_id"],
            hex(&[producer.trace; 16]),
            "{}: {run}",
            producer.name
        );
        let run_id = run["run_id"].as_str().unwrap().to_owned();
        run_ids.push(run_id);
    }

    for (backend, kind) in [(&over_grpc, "otlp"), (&over_http, "otlphttp")] {
        let sent: usize = producers.iter().map(|p| p.spans.len()).sum();
        stepline
            .wait_for(
                &format!("every span at the {kind} backend"),
                Duration::from_secs(20),
                || async move {
                    let arrived = backend.tags().len();
                    if arrived == sent {
                        Ok(())
                    } else {
                        Err(format!("{arrived} of {sent} spans"))
                    }
                },
            )
            .await;
        let tags = backend.tags();
        for (producer, run_id) in producers.iter().zip(&run_ids) {
            let run_spans = producer.run_spans();
            assert!(run_spans.len() >= 5, "{}", producer.name);
            for span in run_spans {
                assert_eq!(
                    tags[&(span.trace_id.clone(), span.span_id.clone())],
                    std::slice::from_ref(run_id),
                    "{kind}: {} span {:?} ({})",
                    producer.name,
                    span.name,
                    span.span_id[0]
                );
            }
            for id in &producer.outside {
                let key = (vec![producer.trace; 16], vec![*id; 8]);
                assert!(tags[&key].is_empty(), "{kind}: {} span {id}", producer.name);
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
