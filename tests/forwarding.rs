//! Forwarding end to end: the real `stepline` binary with `otlp` and `otlphttp` exporters in
//! front of downstream OTLP sinks started by the test (stepline's own receivers on 127.0.0.1:0
//! around a recording sink, or a small axum server answering errors). Checks that what the
//! agent sent arrives unchanged, survives outages and a SIGKILL, that permanent errors are
//! dropped and counted, and that a slow backend turns into retryable answers at the cap.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use stepline::ingest::{ExportOutcome, IngestError};
use stepline::receiver::{serve_grpc, serve_http, ExportSink, ReceiverLimits};
use support::{Options, Stepline};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

// ---------------------------------------------------------------------------------------------
// The downstream: stepline's own OTLP receivers around a recording sink.

#[derive(Default)]
struct Downstream {
    /// When set, every export answers UNAVAILABLE / 503 (a backend that is down or busy).
    refuse: Mutex<bool>,
    /// When set, each export waits for a permit (a slow backend).
    gate: Mutex<Option<Arc<Semaphore>>>,
    traces: Mutex<Vec<ExportTraceServiceRequest>>,
    logs: Mutex<Vec<ExportLogsServiceRequest>>,
    metrics: Mutex<Vec<ExportMetricsServiceRequest>>,
}

impl Downstream {
    async fn admit(&self) -> Result<(), IngestError> {
        let gate = self.gate.lock().unwrap().clone();
        if let Some(gate) = gate {
            let permit = gate.acquire().await;
            if let Ok(permit) = permit {
                permit.forget();
            }
        }
        if *self.refuse.lock().unwrap() {
            return Err(IngestError::ShuttingDown);
        }
        Ok(())
    }
}

impl ExportSink for Downstream {
    async fn export_traces(
        &self,
        request: ExportTraceServiceRequest,
    ) -> Result<ExportOutcome, IngestError> {
        self.admit().await?;
        self.traces.lock().unwrap().push(request);
        Ok(ExportOutcome::default())
    }

    async fn export_logs(
        &self,
        request: ExportLogsServiceRequest,
    ) -> Result<ExportOutcome, IngestError> {
        self.admit().await?;
        self.logs.lock().unwrap().push(request);
        Ok(ExportOutcome::default())
    }

    async fn export_metrics(
        &self,
        request: ExportMetricsServiceRequest,
    ) -> Result<ExportOutcome, IngestError> {
        self.admit().await?;
        self.metrics.lock().unwrap().push(request);
        Ok(ExportOutcome::default())
    }
}

/// A downstream listening for OTLP/gRPC and OTLP/HTTP on free ports.
struct Sinks {
    sink: Arc<Downstream>,
    grpc: std::net::SocketAddr,
    http: std::net::SocketAddr,
}

async fn start_downstream_on(grpc: TcpListener, http: TcpListener) -> Sinks {
    let sink = Arc::new(Downstream::default());
    let limits = ReceiverLimits {
        max_request_bytes: 64 << 20,
        ..Default::default()
    };
    let addresses = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
    tokio::spawn(serve_grpc(
        grpc,
        sink.clone(),
        limits,
        std::future::pending(),
    ));
    tokio::spawn(serve_http(
        http,
        sink.clone(),
        limits,
        std::future::pending(),
    ));
    Sinks {
        sink,
        grpc: addresses.0,
        http: addresses.1,
    }
}

async fn start_downstream() -> Sinks {
    start_downstream_on(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await
}

/// Exporter settings shared by the tests: quick retries so outages end within a test.
fn exporter(kind: &str, endpoint: &str, extra: &str) -> String {
    format!(
        "    endpoint: {endpoint}\n    timeout: 2s\n\
         \x20   retry_on_failure: {{ initial_interval: 100ms, max_interval: 300ms, max_elapsed_time: 0 }}\n{extra}\
         \x20   # {kind}\n"
    )
}

// ---------------------------------------------------------------------------------------------
// What the agent sends.

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        key_strindex: 0,
    }
}

fn resource(name: &str) -> Option<Resource> {
    Some(Resource {
        attributes: vec![kv("service.name", name)],
        ..Default::default()
    })
}

/// A trace request: an agent run with a chat span, and a plain HTTP span.
fn traces(n: u8) -> ExportTraceServiceRequest {
    let trace_id = vec![n; 16];
    let span = |id: u8, parent: u8, name: &str, attributes: Vec<KeyValue>| Span {
        trace_id: trace_id.clone(),
        span_id: vec![id, n, 0, 0, 0, 0, 0, 1],
        parent_span_id: if parent == 0 {
            Vec::new()
        } else {
            vec![parent, n, 0, 0, 0, 0, 0, 1]
        },
        name: name.into(),
        kind: 1,
        start_time_unix_nano: 1_700_000_000_000_000_000 + u64::from(id),
        end_time_unix_nano: 1_700_000_001_000_000_000 + u64::from(id),
        attributes,
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: resource("agent"),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "forwarding-test".into(),
                    version: "1".into(),
                    ..Default::default()
                }),
                spans: vec![
                    span(
                        2,
                        1,
                        "chat model",
                        vec![
                            kv("gen_ai.operation.name", "chat"),
                            kv("gen_ai.request.model", "m"),
                        ],
                    ),
                    span(
                        1,
                        0,
                        "invoke_agent a",
                        vec![
                            kv("gen_ai.operation.name", "invoke_agent"),
                            kv("gen_ai.agent.name", "a"),
                        ],
                    ),
                    span(3, 0, "GET /health", vec![kv("http.request.method", "GET")]),
                ],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// Bytes of padding in the log bodies [`send_grpc`] and [`send_http`] send: enough that their
/// requests are stored packed (see `stepline::outbox`), so a backlog read back from the store
/// after a restart is unpacked on its way out.
const LOG_BODY: usize = 2048;

fn logs(n: u8, body_len: usize) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: resource("agent"),
            scope_logs: vec![ScopeLogs {
                log_records: (0..2)
                    .map(|i| LogRecord {
                        time_unix_nano: 1_700_000_000_000_000_000 + i,
                        severity_number: 9,
                        severity_text: "INFO".into(),
                        body: Some(AnyValue {
                            value: Some(any_value::Value::StringValue(format!(
                                "log {n}.{i} {}",
                                "x".repeat(body_len)
                            ))),
                        }),
                        attributes: vec![kv("n", &n.to_string())],
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn metrics(n: u8) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: resource("agent"),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "queue.depth".into(),
                    unit: "1".into(),
                    data: Some(metric::Data::Gauge(Gauge {
                        data_points: vec![NumberDataPoint {
                            time_unix_nano: 1_700_000_000_000_000_000,
                            value: Some(number_data_point::Value::AsInt(i64::from(n))),
                            attributes: vec![kv("n", &n.to_string())],
                            ..Default::default()
                        }],
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

async fn send_grpc(stepline: &Stepline, n: u8) {
    let url = stepline.otlp_grpc_url();
    TraceServiceClient::connect(url.clone())
        .await
        .unwrap()
        .export(traces(n))
        .await
        .unwrap();
    LogsServiceClient::connect(url.clone())
        .await
        .unwrap()
        .export(logs(n, LOG_BODY))
        .await
        .unwrap();
    MetricsServiceClient::connect(url)
        .await
        .unwrap()
        .export(metrics(n))
        .await
        .unwrap();
}

/// POSTs a protobuf request to stepline's OTLP/HTTP receiver; returns the response.
async fn post(stepline: &Stepline, path: &str, body: Vec<u8>) -> reqwest::Response {
    stepline
        .client()
        .post(format!("{}{path}", stepline.otlp_http_url()))
        .header("content-type", "application/x-protobuf")
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn send_http(stepline: &Stepline, n: u8) {
    for (path, body) in [
        ("/v1/traces", traces(n).encode_to_vec()),
        ("/v1/logs", logs(n, LOG_BODY).encode_to_vec()),
        ("/v1/metrics", metrics(n).encode_to_vec()),
    ] {
        let response = post(stepline, path, body).await;
        assert_eq!(response.status(), 200, "{path}");
    }
}

async fn wait_until(what: &str, timeout: Duration, stepline: &Stepline, probe: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !probe() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n--- stepline log ---\n{}",
            stepline.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The value of `name{exporter="id"}` once it reaches `want`, or its last value after 10 s: an
/// exporter counts a request after the downstream answers, so it may lag what the sink holds.
async fn settled_metric(stepline: &Stepline, name: &str, exporter: &str, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let value = metric(stepline, name, exporter).await;
        if value == want || Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The value of `name{exporter="id"}` in `/metrics`.
async fn metric(stepline: &Stepline, name: &str, exporter: &str) -> u64 {
    let text = stepline
        .client()
        .get(stepline.api_url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = format!("{name}{{exporter=\"{exporter}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("{prefix} not in /metrics:\n{text}"))
}

fn every_sent_arrived(sink: &Downstream, sent: &[u8]) -> bool {
    let traces = sink.traces.lock().unwrap();
    let logs = sink.logs.lock().unwrap();
    let metrics = sink.metrics.lock().unwrap();
    sent.iter().all(|n| {
        traces.contains(&self::traces(*n))
            && logs.contains(&self::logs(*n, LOG_BODY))
            && metrics.contains(&self::metrics(*n))
    })
}

// ---------------------------------------------------------------------------------------------
// Tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_every_signal_unchanged_over_both_exporter_kinds() {
    let grpc_sink = start_downstream().await;
    let proto_sink = start_downstream().await;
    let json_sink = start_downstream().await;
    let exporters = [
        // One request in flight at a time: strict arrival order.
        format!(
            "  otlp/grpc:\n{}",
            exporter(
                "grpc",
                &format!("http://{}", grpc_sink.grpc),
                "    compression: zstd\n    headers: { x-tenant: t1 }\n\
                 \x20   sending_queue: { num_consumers: 1 }\n"
            )
        ),
        format!(
            "  otlphttp/proto:\n{}",
            exporter("http", &format!("http://{}", proto_sink.http), "")
        ),
        format!(
            "  otlphttp/json:\n{}",
            exporter(
                "json",
                &format!("http://{}", json_sink.http),
                "    encoding: json\n    compression: none\n"
            )
        ),
    ];
    let stepline = Stepline::start_with(Options {
        exporters: Some(exporters.concat()),
        pipeline_exporters: Some("[otlp/grpc, otlphttp/proto, otlphttp/json]".into()),
        ..Options::default()
    })
    .await;

    send_grpc(&stepline, 1).await;
    send_http(&stepline, 2).await;
    send_grpc(&stepline, 3).await;

    for (name, sinks) in [
        ("otlp/grpc", &grpc_sink),
        ("otlphttp/proto", &proto_sink),
        ("otlphttp/json", &json_sink),
    ] {
        let sink = &sinks.sink;
        wait_until(name, Duration::from_secs(10), &stepline, || {
            sink.metrics.lock().unwrap().len() == 3
        })
        .await;
        // Exactly once, decoded requests equal to what the agent sent; in order with one
        // consumer (with several, requests may overtake each other, as in the Collector).
        let mut received = (
            sink.traces.lock().unwrap().clone(),
            sink.logs.lock().unwrap().clone(),
            sink.metrics.lock().unwrap().clone(),
        );
        if name != "otlp/grpc" {
            received
                .0
                .sort_by_key(|r| r.resource_spans[0].scope_spans[0].spans[0].trace_id.clone());
            received.1.sort_by_key(|r| format!("{r:?}"));
            received.2.sort_by_key(|r| format!("{r:?}"));
        }
        assert_eq!(received.0, [traces(1), traces(2), traces(3)], "{name}");
        let sent = [logs(1, LOG_BODY), logs(2, LOG_BODY), logs(3, LOG_BODY)];
        assert_eq!(received.1, sent, "{name}");
        assert_eq!(received.2, [metrics(1), metrics(2), metrics(3)], "{name}");
        assert_eq!(
            settled_metric(&stepline, "otelcol_exporter_sent_spans_total", name, 9).await,
            9
        );
        assert_eq!(
            settled_metric(
                &stepline,
                "otelcol_exporter_sent_log_records_total",
                name,
                6
            )
            .await,
            6
        );
        assert_eq!(
            settled_metric(
                &stepline,
                "otelcol_exporter_sent_metric_points_total",
                name,
                3
            )
            .await,
            3
        );
        assert_eq!(
            metric(&stepline, "otelcol_exporter_queue_size", name).await,
            0
        );
    }
    // The agent spans were interpreted on the way through, and /metrics shows the store.
    let runs = stepline.get_list("/v1/runs", "runs").await;
    assert_eq!(runs.len(), 3);
    let text = stepline
        .client()
        .get(stepline.api_url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for gauge in [
        "stepline_runs ",
        "stepline_runs_running 0",
        "stepline_snapshots ",
        "stepline_tool_effects ",
        "otelcol_receiver_refused_metric_points_total 0",
    ] {
        assert!(
            text.lines().any(|line| line.starts_with(gauge)),
            "{gauge} not in {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enrichment_adds_the_run_id_to_agent_spans_only() {
    let sinks = start_downstream().await;
    let stepline = Stepline::start_with(Options {
        exporters: Some(format!(
            "  otlp:\n{}",
            exporter(
                "grpc",
                &format!("http://{}", sinks.grpc),
                "    enrich_run_id: true\n"
            )
        )),
        pipeline_exporters: Some("[otlp]".into()),
        ..Options::default()
    })
    .await;
    send_grpc(&stepline, 7).await;
    let sink = &sinks.sink;
    wait_until(
        "the enriched trace",
        Duration::from_secs(10),
        &stepline,
        || !sink.traces.lock().unwrap().is_empty(),
    )
    .await;
    let received = sink.traces.lock().unwrap()[0].clone();
    let run_id = stepline.get_list("/v1/runs", "runs").await[0]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    for span in &received.resource_spans[0].scope_spans[0].spans {
        let tag = span
            .attributes
            .iter()
            .find(|kv| kv.key == "stepline.run_id")
            .and_then(|kv| kv.value.clone());
        let expected = (span.name != "GET /health").then(|| AnyValue {
            value: Some(any_value::Value::StringValue(run_id.clone())),
        });
        assert_eq!(tag, expected, "{}", span.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downstream_outage_then_recovery_delivers_everything_acknowledged() {
    let sinks = start_downstream().await;
    *sinks.sink.refuse.lock().unwrap() = true;
    let stepline = Stepline::start_with(Options {
        exporters: Some(format!(
            "  otlphttp:\n{}",
            exporter("http", &format!("http://{}", sinks.http), "")
        )),
        pipeline_exporters: Some("[otlphttp]".into()),
        ..Options::default()
    })
    .await;
    for n in 1..=4 {
        send_http(&stepline, n).await;
    }
    // Refused (503 + Retry-After) and retried: still queued.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(metric(&stepline, "otelcol_exporter_queue_size", "otlphttp").await > 0);
    assert!(metric(&stepline, "stepline_exporter_retries_total", "otlphttp").await > 0);
    assert!(sinks.sink.traces.lock().unwrap().is_empty());

    *sinks.sink.refuse.lock().unwrap() = false;
    let sink = &sinks.sink;
    wait_until("the backlog", Duration::from_secs(15), &stepline, || {
        every_sent_arrived(sink, &[1, 2, 3, 4])
    })
    .await;
    assert_eq!(
        metric(
            &stepline,
            "otelcol_exporter_send_failed_spans_total",
            "otlphttp"
        )
        .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlog_survives_sigkill_and_goes_out_after_restart() {
    // The backend's ports are reserved but nothing listens yet: connections are refused.
    let grpc = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (grpc_addr, http_addr) = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
    drop((grpc, http));
    let exporters = format!(
        "  otlp:\n{}  otlphttp:\n{}",
        exporter("grpc", &format!("http://{grpc_addr}"), ""),
        exporter("http", &format!("http://{http_addr}"), "")
    );
    let mut stepline = Stepline::start_with(Options {
        exporters: Some(exporters),
        pipeline_exporters: Some("[otlp, otlphttp]".into()),
        ..Options::default()
    })
    .await;
    for n in 1..=3 {
        send_grpc(&stepline, n).await;
    }
    send_http(&stepline, 4).await;
    assert!(metric(&stepline, "otelcol_exporter_queue_size", "otlp").await > 0);

    stepline.kill();
    let sinks = start_downstream_on(
        TcpListener::bind(grpc_addr).await.unwrap(),
        TcpListener::bind(http_addr).await.unwrap(),
    )
    .await;
    stepline.start_again().await;
    let sink = &sinks.sink;
    wait_until(
        "the backlog after the restart",
        Duration::from_secs(15),
        &stepline,
        || every_sent_arrived(sink, &[1, 2, 3, 4]) && sink.traces.lock().unwrap().len() >= 8,
    )
    .await;
    // Each exporter delivered the four requests of each signal at least once.
    assert!(sink.traces.lock().unwrap().len() >= 8);
    for id in ["otlp", "otlphttp"] {
        let deadline = Instant::now() + Duration::from_secs(5);
        while metric(&stepline, "otelcol_exporter_queue_size", id).await > 0 {
            assert!(Instant::now() < deadline, "{id} queue not drained");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_errors_are_dropped_and_counted_and_the_pipeline_moves_on() {
    // A backend that answers 400 to the first request sent to stepline and accepts the rest
    // (recognised by content: the exporter may send queued requests concurrently, in any order).
    let seen = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(Mutex::new(Vec::<ExportLogsServiceRequest>::new()));
    let app = {
        let (seen, accepted) = (seen.clone(), accepted.clone());
        axum::Router::new().route(
            "/v1/logs",
            axum::routing::post(move |body: axum::body::Bytes| {
                let (seen, accepted) = (seen.clone(), accepted.clone());
                async move {
                    seen.fetch_add(1, Ordering::SeqCst);
                    match ExportLogsServiceRequest::decode(body.as_ref()) {
                        Ok(request) if request == logs(1, 8) => {
                            (http::StatusCode::BAD_REQUEST, Vec::new())
                        }
                        Ok(request) => {
                            accepted.lock().unwrap().push(request);
                            (http::StatusCode::OK, Vec::new())
                        }
                        Err(_) => (http::StatusCode::UNPROCESSABLE_ENTITY, Vec::new()),
                    }
                }
            }),
        )
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let stepline = Stepline::start_with(Options {
        exporters: Some(format!(
            "  otlphttp/strict:\n{}",
            exporter(
                "http",
                &format!("http://{address}"),
                "    compression: none\n"
            )
        )),
        pipeline_exporters: Some("[otlphttp/strict]".into()),
        ..Options::default()
    })
    .await;
    for n in 1..=3 {
        let response = post(&stepline, "/v1/logs", logs(n, 8).encode_to_vec()).await;
        assert_eq!(response.status(), 200);
    }
    wait_until(
        "the two later requests",
        Duration::from_secs(10),
        &stepline,
        || accepted.lock().unwrap().len() == 2,
    )
    .await;
    let mut got = accepted.lock().unwrap().clone();
    got.sort_by_key(|r| r.encode_to_vec());
    let mut want = vec![logs(2, 8), logs(3, 8)];
    want.sort_by_key(|r| r.encode_to_vec());
    assert_eq!(got, want);
    assert_eq!(seen.load(Ordering::SeqCst), 3, "the 400 was not retried");
    let id = "otlphttp/strict";
    assert_eq!(
        metric(
            &stepline,
            "otelcol_exporter_send_failed_log_records_total",
            id
        )
        .await,
        2
    );
    assert_eq!(
        settled_metric(&stepline, "otelcol_exporter_sent_log_records_total", id, 4).await,
        4
    );
    assert_eq!(
        metric(&stepline, "otelcol_exporter_queue_size", id).await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_backend_fills_the_queue_to_its_cap_and_clients_get_retryable_answers() {
    let sinks = start_downstream().await;
    let gate = Arc::new(Semaphore::new(0));
    *sinks.sink.gate.lock().unwrap() = Some(gate.clone());
    const CAP: u64 = 20_000;
    let stepline = Stepline::start_with(Options {
        exporters: Some(format!(
            "  otlp/slow:\n{}",
            exporter(
                "grpc",
                &format!("http://{}", sinks.grpc),
                &format!("    timeout: 30s\n    sending_queue: {{ queue_size_bytes: {CAP} }}\n")
            )
            .replace("    timeout: 2s\n", "")
        )),
        pipeline_exporters: Some("[otlp/slow]".into()),
        ..Options::default()
    })
    .await;

    // Each request is ~2 KB; the backend takes none of them until the gate opens.
    let mut accepted = Vec::new();
    let mut refused = None;
    for n in 1..=40u8 {
        let response = post(&stepline, "/v1/logs", logs(n, 1000).encode_to_vec()).await;
        match response.status().as_u16() {
            200 => accepted.push(n),
            503 => {
                refused = Some(response);
                break;
            }
            other => panic!("unexpected status {other}"),
        }
    }
    let refused = refused.expect("the queue never filled");
    assert!(refused.headers().contains_key("retry-after"));
    assert!(accepted.len() >= 5, "{accepted:?}");
    let id = "otlp/slow";
    let queued = metric(&stepline, "otelcol_exporter_queue_size", id).await;
    assert!(queued <= CAP, "{queued} bytes queued over a {CAP}-byte cap");
    assert_eq!(
        metric(&stepline, "otelcol_exporter_queue_capacity", id).await,
        CAP
    );
    assert_eq!(
        metric(
            &stepline,
            "otelcol_exporter_enqueue_failed_log_records_total",
            id
        )
        .await,
        2
    );
    // Trace requests too; their spans count as refused.
    let mut trace_refused = false;
    for n in 50..60 {
        let response = post(&stepline, "/v1/traces", traces(n).encode_to_vec()).await;
        if response.status() == 503 {
            trace_refused = true;
            break;
        }
    }
    assert!(trace_refused, "no trace request was refused at the cap");
    let text = stepline
        .client()
        .get(stepline.api_url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.lines()
            .any(|line| line == "otelcol_receiver_refused_spans_total 3"),
        "{text}"
    );
    // gRPC clients get UNAVAILABLE, which OTLP clients retry.
    let status = LogsServiceClient::connect(stepline.otlp_grpc_url())
        .await
        .unwrap()
        .export(logs(99, 1000))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    // Both refused log requests (HTTP and gRPC, two records each) are counted.
    let text = stepline
        .client()
        .get(stepline.api_url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.lines()
            .any(|line| line == "otelcol_receiver_refused_log_records_total 4"),
        "{text}"
    );

    // Memory stays bounded while the backend takes nothing (the backlog waits on disk).
    if let Some(pid) = stepline.pid() {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let peak_kb: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        assert!(peak_kb < 256 * 1024, "peak RSS {peak_kb} kB");
    }

    // The backend catches up: everything acknowledged arrives, and new requests are taken.
    gate.add_permits(1000);
    let sink = &sinks.sink;
    let expected: Vec<_> = accepted.iter().map(|n| logs(*n, 1000)).collect();
    wait_until(
        "the queued requests",
        Duration::from_secs(10),
        &stepline,
        || {
            let logs = sink.logs.lock().unwrap();
            logs.len() == expected.len() && expected.iter().all(|e| logs.contains(e))
        },
    )
    .await;
    let response = post(&stepline, "/v1/logs", logs(100, 1000).encode_to_vec()).await;
    assert_eq!(response.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_outbox_within_the_deadline() {
    let sinks = start_downstream().await;
    let mut stepline = Stepline::start_with(Options {
        exporters: Some(format!(
            "  otlp:\n{}",
            exporter("grpc", &format!("http://{}", sinks.grpc), "")
        )),
        pipeline_exporters: Some("[otlp]".into()),
        ..Options::default()
    })
    .await;
    for n in 1..=5 {
        send_grpc(&stepline, n).await;
    }
    let status = stepline
        .terminate(Duration::from_secs(10))
        .expect("stepline was running");
    assert!(status.success(), "{status:?}\n{}", stepline.log_tail());
    assert!(every_sent_arrived(&sinks.sink, &[1, 2, 3, 4, 5]));
}

// ---------------------------------------------------------------------------------------------
// TLS: a CA, certificates and a TLS front for the downstream, all made by the test.

/// A certificate authority made for one test.
fn test_ca(name: &str) -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap()
}

/// A leaf certificate for `names`, signed by `ca`: (certificate PEM, key PEM).
fn test_leaf(
    ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    names: &[&str],
    client: bool,
) -> (String, String) {
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    params.extended_key_usages = vec![if client {
        rcgen::ExtendedKeyUsagePurpose::ClientAuth
    } else {
        rcgen::ExtendedKeyUsagePurpose::ServerAuth
    }];
    let key = rcgen::KeyPair::generate().unwrap();
    let certificate = params.signed_by(&key, ca).unwrap();
    (certificate.pem(), key.serialize_pem())
}

/// A TLS front for a plain-text downstream at `backend`: terminates TLS with the given server
/// certificate (and requires a client certificate from `client_ca` when set), then pipes the
/// bytes through. Returns its address.
async fn tls_front(
    backend: std::net::SocketAddr,
    (cert, key): &(String, String),
    client_ca: Option<&str>,
) -> std::net::SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for certificate in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(certificate.unwrap()).unwrap();
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A failed handshake is the client's to report.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_mutual_tls_deliver_over_both_exporter_kinds() {
    let pki = tempfile::tempdir().unwrap();
    let ca = test_ca("stepline test CA");
    let ca_file = pki.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let (client_cert, client_key) = test_leaf(&ca, &["stepline"], true);
    let (cert_file, key_file) = (pki.path().join("client.pem"), pki.path().join("client.key"));
    std::fs::write(&cert_file, client_cert).unwrap();
    std::fs::write(&key_file, client_key).unwrap();

    // gRPC: mutual TLS, certificate for 127.0.0.1. HTTP: a certificate for another name only.
    let grpc_sinks = start_downstream().await;
    let http_sinks = start_downstream().await;
    let grpc_front = tls_front(
        grpc_sinks.grpc,
        &test_leaf(&ca, &["127.0.0.1"], false),
        Some(&ca.pem()),
    )
    .await;
    let http_front = tls_front(
        http_sinks.http,
        &test_leaf(&ca, &["sink.test"], false),
        None,
    )
    .await;
    let exporters = format!(
        "  otlp/tls:\n{}  otlphttp/tls:\n{}",
        // Scheme-less: TLS, as in the Collector.
        exporter(
            "grpc",
            &grpc_front.to_string(),
            &format!(
                "    tls: {{ ca_file: {}, cert_file: {}, key_file: {} }}\n",
                ca_file.display(),
                cert_file.display(),
                key_file.display()
            )
        ),
        exporter(
            "http",
            &format!("https://{http_front}"),
            &format!(
                "    tls: {{ ca_file: {}, server_name_override: sink.test }}\n",
                ca_file.display()
            )
        ),
    );
    let stepline = Stepline::start_with(Options {
        exporters: Some(exporters),
        pipeline_exporters: Some("[otlp/tls, otlphttp/tls]".into()),
        ..Options::default()
    })
    .await;
    send_grpc(&stepline, 1).await;
    send_http(&stepline, 2).await;
    for (id, sinks) in [("otlp/tls", &grpc_sinks), ("otlphttp/tls", &http_sinks)] {
        let sink = &sinks.sink;
        wait_until(id, Duration::from_secs(15), &stepline, || {
            every_sent_arrived(sink, &[1, 2])
        })
        .await;
        assert_eq!(
            settled_metric(&stepline, "otelcol_exporter_sent_spans_total", id, 6).await,
            6
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_an_unknown_ca_or_no_client_certificate_fails_logged_and_counted() {
    let pki = tempfile::tempdir().unwrap();
    let (ca, other) = (test_ca("backend CA"), test_ca("some other CA"));
    let other_file = pki.path().join("other.pem");
    std::fs::write(&other_file, other.pem()).unwrap();
    let ca_file = pki.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let sinks = start_downstream().await;
    let server = test_leaf(&ca, &["127.0.0.1"], false);
    let plain_tls = tls_front(sinks.grpc, &server, None).await;
    let mutual = tls_front(sinks.http, &server, Some(&ca.pem())).await;
    let exporters = format!(
        "  otlp/wrong_ca:\n{}  otlphttp/no_client_cert:\n{}",
        exporter(
            "grpc",
            &format!("https://{plain_tls}"),
            &format!("    tls: {{ ca_file: {} }}\n", other_file.display())
        ),
        exporter(
            "http",
            &format!("https://{mutual}"),
            &format!("    tls: {{ ca_file: {} }}\n", ca_file.display())
        ),
    );
    let stepline = Stepline::start_with(Options {
        exporters: Some(exporters),
        pipeline_exporters: Some("[otlp/wrong_ca, otlphttp/no_client_cert]".into()),
        ..Options::default()
    })
    .await;
    send_grpc(&stepline, 1).await;
    for id in ["otlp/wrong_ca", "otlphttp/no_client_cert"] {
        let deadline = Instant::now() + Duration::from_secs(10);
        while metric(&stepline, "stepline_exporter_retries_total", id).await == 0 {
            assert!(Instant::now() < deadline, "{id}: no failed attempt counted");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(metric(&stepline, "otelcol_exporter_queue_size", id).await > 0);
    }
    let log = stepline.log_tail();
    assert!(
        log.contains("otlp/wrong_ca") && log.contains("UnknownIssuer"),
        "the certificate error is not logged:\n{log}"
    );
    assert!(
        log.contains("otlphttp/no_client_cert"),
        "the handshake failure is not logged:\n{log}"
    );
    assert!(sinks.sink.traces.lock().unwrap().is_empty());
}

#[test]
fn unusable_tls_files_are_configuration_errors_with_their_path() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let config = dir.path().join("collector.yaml");
    std::fs::write(
        &config,
        format!(
            "exporters:\n  otlp/a:\n    endpoint: https://127.0.0.1:1\n    tls: {{ ca_file: {dir}/missing.pem }}\n\
             \x20 otlphttp/b:\n    endpoint: https://127.0.0.1:2\n    tls: {{ cert_file: {pem}, key_file: {pem} }}\n\
             service:\n  pipelines:\n    traces: {{ receivers: [otlp], exporters: [otlp/a, otlphttp/b] }}\n\
             receivers:\n  otlp:\n    protocols: {{ grpc: {{}} }}\n",
            dir = dir.path().display(),
            pem = not_pem.display()
        ),
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_stepline"))
        .arg("--config")
        .arg(&config)
        .arg("--validate-config")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let file = config.display();
    for expected in [
        format!(
            "{file}: exporters.otlp/a.tls.ca_file: cannot read {}/missing.pem",
            dir.path().display()
        ),
        format!(
            "{file}: exporters.otlphttp/b.tls.cert_file: no PEM certificate in {}",
            not_pem.display()
        ),
    ] {
        assert!(stderr.contains(&expected), "{expected}\nnot in:\n{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_oldest_makes_room_at_the_cap_instead_of_refusing() {
    let sinks = start_downstream().await;
    let gate = Arc::new(Semaphore::new(0));
    *sinks.sink.gate.lock().unwrap() = Some(gate.clone());
    const CAP: u64 = 20_000;
    let stepline = Stepline::start_with(Options {
        exporters: Some(format!(
            "  otlp/lossy:\n{}",
            exporter(
                "grpc",
                &format!("http://{}", sinks.grpc),
                &format!(
                    "    timeout: 30s\n    sending_queue: {{ queue_size_bytes: {CAP}, \
                     when_full: drop_oldest, num_consumers: 1 }}\n"
                )
            )
            .replace("    timeout: 2s\n", "")
        )),
        pipeline_exporters: Some("[otlp/lossy]".into()),
        ..Options::default()
    })
    .await;
    // ~2 KB each: four times the cap, all taken.
    for n in 1..=40u8 {
        let response = post(&stepline, "/v1/logs", logs(n, 1000).encode_to_vec()).await;
        assert_eq!(response.status(), 200, "request {n} refused");
    }
    let id = "otlp/lossy";
    let queued = metric(&stepline, "otelcol_exporter_queue_size", id).await;
    assert!(queued <= CAP, "{queued} bytes queued over a {CAP}-byte cap");
    let dropped = metric(
        &stepline,
        "stepline_exporter_dropped_oldest_log_records_total",
        id,
    )
    .await;
    assert!(dropped >= 40, "only {dropped} log records dropped");
    assert_eq!(
        metric(
            &stepline,
            "otelcol_exporter_enqueue_failed_log_records_total",
            id
        )
        .await,
        0
    );
    assert!(stepline
        .log_tail()
        .contains("dropped the oldest unsent entries"));

    // The backend catches up: the request in flight and the newest ones arrive, the dropped
    // ones never do, and every log record is either delivered or counted as dropped.
    gate.add_permits(1000);
    let sink = &sinks.sink;
    wait_until(
        "the kept requests",
        Duration::from_secs(10),
        &stepline,
        || sink.logs.lock().unwrap().contains(&logs(40, 1000)),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let received = sink.logs.lock().unwrap().clone();
    assert!(
        received.contains(&logs(1, 1000)),
        "the request in flight was dropped"
    );
    assert!(
        !received.contains(&logs(2, 1000)),
        "the oldest queued request was not dropped"
    );
    assert_eq!(received.len() as u64 * 2 + dropped, 80);
    assert_eq!(
        metric(&stepline, "otelcol_exporter_queue_size", id).await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_traces_go_to_the_configured_endpoint_and_are_flushed_on_sigterm() {
    let backend = start_downstream().await;
    let telemetry = start_downstream().await;
    let mut stepline = Stepline::start_with(Options {
        exporters: Some(format!(
            "  otlp:\n{}",
            exporter("grpc", &format!("http://{}", backend.grpc), "")
        )),
        pipeline_exporters: Some("[otlp]".into()),
        service_extra: Some(format!(
            "  shutdown_timeout: 3s\n  telemetry:\n    traces:\n      processors:\n\
             \x20       - batch:\n            exporter:\n              otlp: {{ protocol: grpc, endpoint: http://{} }}\n",
            telemetry.grpc
        )),
        ..Options::default()
    })
    .await;
    send_grpc(&stepline, 1).await;
    let sink = &backend.sink;
    wait_until(
        "the forwarded requests",
        Duration::from_secs(10),
        &stepline,
        || every_sent_arrived(sink, &[1]),
    )
    .await;
    let status = stepline
        .terminate(Duration::from_secs(10))
        .expect("stepline was running");
    assert!(status.success(), "{status:?}\n{}", stepline.log_tail());
    let log = stepline.log_tail();
    assert!(
        log.lines()
            .any(|line| line.contains("sending what is left") && line.contains("3s")),
        "{log}"
    );
    // One `stepline.export` span per forwarded request, from service.name = stepline.
    let received = telemetry.sink.traces.lock().unwrap().clone();
    let spans: Vec<_> = received
        .iter()
        .flat_map(|r| &r.resource_spans)
        .filter(|r| {
            r.resource
                .as_ref()
                .is_some_and(|res| res.attributes.contains(&kv("service.name", "stepline")))
        })
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .filter(|s| s.name == "stepline.export")
        .collect();
    assert_eq!(spans.len(), 3, "{received:?}");
    assert!(spans
        .iter()
        .all(|s| s.attributes.contains(&kv("exporter", "otlp"))));
}

/// The requests `ns` merged into one: their `resource_*` lists appended, in order.
fn merged_traces(ns: &[u8]) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: ns.iter().flat_map(|n| traces(*n).resource_spans).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batching_merges_entries_into_fewer_requests_and_delivers_every_item() {
    let grpc_sink = start_downstream().await;
    let http_sink = start_downstream().await;
    let traces_len = traces(1).encoded_len();
    // gRPC: batches of at least 9 items (three trace requests of 3 spans), else after 4 s.
    // HTTP: batches by bytes, at most two trace requests each, else after 4 s.
    let exporters = [
        format!(
            "  otlp/batched:\n{}",
            exporter(
                "grpc",
                &format!("http://{}", grpc_sink.grpc),
                "    sending_queue: { num_consumers: 1, batch: { flush_timeout: 4s, min_size: 9 } }\n"
            )
        ),
        format!(
            "  otlphttp/batched:\n{}",
            exporter(
                "http",
                &format!("http://{}", http_sink.http),
                &format!(
                    "    compression: none\n    sending_queue: {{ num_consumers: 1, batch: \
                     {{ flush_timeout: 4s, sizer: bytes, min_size: {min}, max_size: {max} }} }}\n",
                    min = 2 * traces_len,
                    max = 2 * traces_len + 1,
                )
            )
        ),
    ];
    let stepline = Stepline::start_with(Options {
        exporters: Some(exporters.concat()),
        pipeline_exporters: Some("[otlp/batched, otlphttp/batched]".into()),
        ..Options::default()
    })
    .await;
    for n in 1..=3 {
        send_grpc(&stepline, n).await;
    }

    // gRPC: the three trace requests went out as one, at min_size; logs (6 records) and
    // metrics (3 points) stay below it and go out merged at the flush timeout.
    let sink = &grpc_sink.sink;
    wait_until(
        "merged logs and metrics",
        Duration::from_secs(10),
        &stepline,
        || !sink.logs.lock().unwrap().is_empty() && !sink.metrics.lock().unwrap().is_empty(),
    )
    .await;
    assert_eq!(*sink.traces.lock().unwrap(), [merged_traces(&[1, 2, 3])]);
    let logs = ExportLogsServiceRequest {
        resource_logs: (1..=3)
            .flat_map(|n| logs(n, LOG_BODY).resource_logs)
            .collect(),
    };
    assert_eq!(*sink.logs.lock().unwrap(), [logs]);
    let metrics = ExportMetricsServiceRequest {
        resource_metrics: (1..=3).flat_map(|n| metrics(n).resource_metrics).collect(),
    };
    assert_eq!(*sink.metrics.lock().unwrap(), [metrics]);

    // HTTP: two traces requests reach min_size together; the third would pass max_size, so it
    // waits for the flush timeout alone.
    let sink = &http_sink.sink;
    wait_until(
        "the batched traces",
        Duration::from_secs(10),
        &stepline,
        || sink.traces.lock().unwrap().len() == 2,
    )
    .await;
    assert_eq!(
        *sink.traces.lock().unwrap(),
        [merged_traces(&[1, 2]), merged_traces(&[3])]
    );

    // Delivered = acknowledged, and nothing is left.
    for name in ["otlp/batched", "otlphttp/batched"] {
        assert_eq!(
            settled_metric(&stepline, "otelcol_exporter_sent_spans_total", name, 9).await,
            9,
            "{name}"
        );
        assert_eq!(
            settled_metric(
                &stepline,
                "otelcol_exporter_sent_log_records_total",
                name,
                6
            )
            .await,
            6,
            "{name}"
        );
        assert_eq!(
            settled_metric(&stepline, "otelcol_exporter_queue_size", name, 0).await,
            0,
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_backlog_survives_an_outage_and_a_sigkill() {
    let sinks = start_downstream().await;
    *sinks.sink.refuse.lock().unwrap() = true;
    let options = Options {
        exporters: Some(format!(
            "  otlp:\n{}",
            exporter(
                "grpc",
                &format!("http://{}", sinks.grpc),
                "    sending_queue: { batch: { flush_timeout: 50ms, min_size: 4 } }\n"
            )
        )),
        pipeline_exporters: Some("[otlp]".into()),
        ..Options::default()
    };
    let mut stepline = Stepline::start_with(options).await;
    for n in 1..=4 {
        send_grpc(&stepline, n).await;
    }
    // Refused and retried in batches; then the process dies with all of it unsent.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(metric(&stepline, "stepline_exporter_retries_total", "otlp").await > 0);
    stepline.kill();
    stepline.restart().await;
    *sinks.sink.refuse.lock().unwrap() = false;
    let sink = &sinks.sink;
    wait_until("the backlog", Duration::from_secs(15), &stepline, || {
        let received = sink.traces.lock().unwrap();
        let spans: Vec<_> = received
            .iter()
            .flat_map(|r| &r.resource_spans)
            .cloned()
            .collect();
        (1..=4).all(|n| traces(n).resource_spans.iter().all(|r| spans.contains(r)))
    })
    .await;
    // After the restart everything was sent again in batches: at least one request held more
    // than one of the agent's requests.
    assert!(sink
        .traces
        .lock()
        .unwrap()
        .iter()
        .any(|r| r.resource_spans.len() > 1));
    assert_eq!(
        metric(
            &stepline,
            "otelcol_exporter_send_failed_spans_total",
            "otlp"
        )
        .await,
        0
    );
}
