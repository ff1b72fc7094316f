//! The OTLP receivers end to end: real servers on 127.0.0.1 port 0, real clients (the
//! tonic-generated OTLP clients and reqwest), and a sink that records what it was handed.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, Gauge, Metric, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use reqwest::header::CONTENT_TYPE;
use reqwest::StatusCode;
use stepline::ingest::{ExportOutcome, IngestError};
use stepline::receiver::{serve_grpc, serve_http, ExportSink, ReceiverLimits};
use tokio::net::TcpListener;
use tonic::codec::CompressionEncoding;

// ---------------------------------------------------------------------------------------------
// The recording sink (a fake of the ingest service, the receivers' collaborator).

/// What the sink answers.
#[derive(Debug, Clone)]
enum Behaviour {
    Accept,
    Partial { rejected: i64, message: String },
    Fail,
}

#[derive(Debug)]
struct RecordingSink {
    behaviour: Mutex<Behaviour>,
    traces: Mutex<Vec<ExportTraceServiceRequest>>,
    logs: Mutex<Vec<ExportLogsServiceRequest>>,
    metrics: Mutex<Vec<ExportMetricsServiceRequest>>,
}

impl RecordingSink {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            behaviour: Mutex::new(Behaviour::Accept),
            traces: Mutex::default(),
            logs: Mutex::default(),
            metrics: Mutex::default(),
        })
    }

    fn set(&self, behaviour: Behaviour) {
        *self.behaviour.lock().unwrap() = behaviour;
    }

    fn outcome(&self) -> Result<ExportOutcome, IngestError> {
        match self.behaviour.lock().unwrap().clone() {
            Behaviour::Accept => Ok(ExportOutcome::default()),
            Behaviour::Partial { rejected, message } => Ok(ExportOutcome { rejected, message }),
            Behaviour::Fail => Err(IngestError::Storage("disk full".into())),
        }
    }

    fn traces(&self) -> Vec<ExportTraceServiceRequest> {
        self.traces.lock().unwrap().clone()
    }

    fn span_names(&self) -> Vec<String> {
        self.traces()
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .map(|s| s.name.clone())
            .collect()
    }
}

impl ExportSink for RecordingSink {
    async fn export_traces(
        &self,
        request: ExportTraceServiceRequest,
    ) -> Result<ExportOutcome, IngestError> {
        let outcome = self.outcome();
        if outcome.is_ok() {
            self.traces.lock().unwrap().push(request);
        }
        outcome
    }

    async fn export_logs(
        &self,
        request: ExportLogsServiceRequest,
    ) -> Result<ExportOutcome, IngestError> {
        let outcome = self.outcome();
        if outcome.is_ok() {
            self.logs.lock().unwrap().push(request);
        }
        outcome
    }

    async fn export_metrics(
        &self,
        request: ExportMetricsServiceRequest,
    ) -> Result<ExportOutcome, IngestError> {
        let outcome = self.outcome();
        if outcome.is_ok() {
            self.metrics.lock().unwrap().push(request);
        }
        outcome
    }
}

// ---------------------------------------------------------------------------------------------
// google.rpc.Status / RetryInfo, as a client decodes them.

#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<ProtoAny>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ProtoAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

// ---------------------------------------------------------------------------------------------
// Fixtures.

const TRACE_ID: [u8; 16] = [
    0x5b, 0x8e, 0xff, 0xf7, 0x98, 0x03, 0x81, 0x03, 0xd2, 0x69, 0xb6, 0x33, 0x81, 0x3f, 0xc6, 0x0c,
];
const SPAN_ID: [u8; 8] = [0xee, 0xe1, 0x9b, 0x7e, 0xc3, 0xc1, 0xb1, 0x74];

/// An agent-shaped trace: an agent run span and a model request span.
fn trace_request() -> ExportTraceServiceRequest {
    let span = |name: &str, span_id: [u8; 8]| Span {
        trace_id: TRACE_ID.to_vec(),
        span_id: span_id.to_vec(),
        name: name.to_string(),
        start_time_unix_nano: 1_544_712_660_000_000_000,
        end_time_unix_nano: 1_544_712_661_000_000_000,
        attributes: vec![KeyValue {
            key: "gen_ai.operation.name".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue("chat".into())),
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![
                    span("chat gpt-4o", [1, 2, 3, 4, 5, 6, 7, 8]),
                    span("invoke_agent weather", SPAN_ID),
                ],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn logs_request() -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord {
                    severity_text: "INFO".into(),
                    body: Some(AnyValue {
                        value: Some(any_value::Value::StringValue("tool finished".into())),
                    }),
                    trace_id: TRACE_ID.to_vec(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn metrics_request() -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "gen_ai.client.token.usage".into(),
                    data: Some(metric::Data::Gauge(Gauge::default())),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// A trace request whose protobuf encoding is about `bytes` long.
fn big_trace_request(bytes: usize) -> ExportTraceServiceRequest {
    let mut request = trace_request();
    request.resource_spans[0].scope_spans[0].spans[0].name = "x".repeat(bytes);
    request
}

/// opentelemetry-proto/examples/trace.json (OTLP/JSON: hex ids, integer enums).
const TRACE_JSON: &str = r#"{
  "resourceSpans": [{
    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "my.service"}}]},
    "scopeSpans": [{
      "scope": {"name": "my.library", "version": "1.0.0",
        "attributes": [{"key": "my.scope.attribute", "value": {"stringValue": "some scope attribute"}}]},
      "spans": [{
        "traceId": "5B8EFFF798038103D269B633813FC60C",
        "spanId": "EEE19B7EC3C1B174",
        "parentSpanId": "EEE19B7EC3C1B173",
        "name": "I'm a server span",
        "startTimeUnixNano": 1544712660000000000,
        "endTimeUnixNano": 1544712661000000000,
        "kind": 2,
        "attributes": [{"key": "my.span.attr", "value": {"stringValue": "some value"}}]
      }]
    }]
  }]
}"#;

/// Abridged from opentelemetry-proto/examples/logs.json.
const LOGS_JSON: &str = r#"{
  "resourceLogs": [{
    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "my.service"}}]},
    "scopeLogs": [{
      "scope": {"name": "my.library", "version": "1.0.0"},
      "logRecords": [{
        "timeUnixNano": "1544712660300000000",
        "observedTimeUnixNano": 1544712660300000000,
        "severityText": "Information",
        "traceId": "5B8EFFF798038103D269B633813FC60C",
        "spanId": "EEE19B7EC3C1B174",
        "body": {"stringValue": "Example log record"},
        "attributes": [
          {"key": "int.attribute", "value": {"intValue": 10}},
          {"key": "array.attribute", "value": {"arrayValue": {"values": [{"stringValue": "many"}, {"stringValue": "values"}]}}}
        ]
      }]
    }]
  }]
}"#;

/// Abridged from opentelemetry-proto/examples/metrics.json.
const METRICS_JSON: &str = r#"{
  "resourceMetrics": [{
    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "my.service"}}]},
    "scopeMetrics": [{
      "scope": {"name": "my.library", "version": "1.0.0"},
      "metrics": [
        {"name": "my.counter", "unit": "1", "description": "I`m a Counter",
         "sum": {"aggregationTemporality": 1, "isMonotonic": true,
                 "dataPoints": [{"asDouble": 5, "startTimeUnixNano": 1544712660300000000,
                                 "timeUnixNano": 1544712660300000000}]}},
        {"name": "my.gauge", "unit": "1", "description": "I`m a Gauge",
         "gauge": {"dataPoints": [{"asDouble": 10, "timeUnixNano": 1544712660300000000}]}}
      ]
    }]
  }]
}"#;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::encode_all(data, 3).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Servers and clients.

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// A receiver running on 127.0.0.1:0; shuts down when dropped.
struct Running {
    addr: SocketAddr,
    sink: Arc<RecordingSink>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), stepline::receiver::ReceiverError>>>,
}

impl Running {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops the server and waits for it to return.
    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("server did not stop")
                .unwrap()
                .unwrap();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn start(grpc: bool, max_request_bytes: usize) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sink = RecordingSink::new();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
    };
    let limits = ReceiverLimits {
        max_request_bytes,
        ..Default::default()
    };
    let task = if grpc {
        tokio::spawn(serve_grpc(listener, Arc::clone(&sink), limits, shutdown))
    } else {
        tokio::spawn(serve_http(listener, Arc::clone(&sink), limits, shutdown))
    };
    Running {
        addr,
        sink,
        stop: Some(stop),
        task: Some(task),
    }
}

async fn start_http(max_request_bytes: usize) -> Running {
    start(false, max_request_bytes).await
}

async fn start_grpc(max_request_bytes: usize) -> Running {
    start(true, max_request_bytes).await
}

/// An HTTP reply, with the body kept for assertions.
struct Reply {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn content_type(&self) -> &str {
        self.headers
            .get(CONTENT_TYPE)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }

    /// The `google.rpc.Status` error body, decoded per its content type.
    fn status_body(&self) -> (i32, String) {
        if self.content_type() == PROTOBUF {
            let status = RpcStatus::decode(self.body.as_slice()).unwrap();
            (status.code, status.message)
        } else {
            assert_eq!(self.content_type(), JSON, "error body content type");
            let value: serde_json::Value = serde_json::from_slice(&self.body).unwrap();
            (
                i32::try_from(value["code"].as_i64().unwrap()).unwrap(),
                value["message"].as_str().unwrap().to_string(),
            )
        }
    }

    fn json(&self) -> serde_json::Value {
        assert_eq!(self.content_type(), JSON);
        serde_json::from_slice(&self.body).unwrap()
    }
}

async fn send(
    method: reqwest::Method,
    url: String,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    let mut request = reqwest::Client::new().request(method, url).body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    Reply {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.bytes().await.unwrap().to_vec(),
    }
}

async fn post(server: &Running, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Reply {
    send(reqwest::Method::POST, server.url(path), headers, body).await
}

async fn trace_client(server: &Running) -> TraceServiceClient<tonic::transport::Channel> {
    TraceServiceClient::connect(server.url("")).await.unwrap()
}

// ---------------------------------------------------------------------------------------------
// OTLP/HTTP.

#[tokio::test]
async fn http_protobuf_success_for_all_signals() {
    let server = start_http(1024 * 1024).await;

    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", PROTOBUF)],
        trace_request().encode_to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.content_type(), PROTOBUF);
    let response = ExportTraceServiceResponse::decode(reply.body.as_slice()).unwrap();
    assert_eq!(response.partial_success, None);
    assert_eq!(server.sink.traces(), vec![trace_request()]);
    assert_eq!(
        server.sink.span_names(),
        ["chat gpt-4o", "invoke_agent weather"]
    );

    let reply = post(
        &server,
        "/v1/logs",
        &[("content-type", PROTOBUF)],
        logs_request().encode_to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    ExportLogsServiceResponse::decode(reply.body.as_slice()).unwrap();
    assert_eq!(*server.sink.logs.lock().unwrap(), vec![logs_request()]);

    let reply = post(
        &server,
        "/v1/metrics",
        &[("content-type", PROTOBUF)],
        metrics_request().encode_to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    ExportMetricsServiceResponse::decode(reply.body.as_slice()).unwrap();
    assert_eq!(
        *server.sink.metrics.lock().unwrap(),
        vec![metrics_request()]
    );

    server.shutdown().await;
}

#[tokio::test]
async fn http_json_success_for_all_signals_with_hex_ids() {
    let server = start_http(1024 * 1024).await;

    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", "application/json; charset=utf-8")],
        TRACE_JSON.into(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json(), serde_json::json!({}));
    let traces = server.sink.traces();
    let span = &traces[0].resource_spans[0].scope_spans[0].spans[0];
    assert_eq!(span.trace_id, TRACE_ID);
    assert_eq!(span.span_id, SPAN_ID);
    assert_eq!(span.name, "I'm a server span");
    assert_eq!(span.kind, 2);
    assert_eq!(span.end_time_unix_nano, 1_544_712_661_000_000_000);

    let reply = post(
        &server,
        "/v1/logs",
        &[("content-type", JSON)],
        LOGS_JSON.into(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json(), serde_json::json!({}));
    let logs = server.sink.logs.lock().unwrap().clone();
    let record = &logs[0].resource_logs[0].scope_logs[0].log_records[0];
    assert_eq!(record.trace_id, TRACE_ID);
    assert_eq!(record.time_unix_nano, 1_544_712_660_300_000_000);
    assert_eq!(
        record.body.as_ref().unwrap().value,
        Some(any_value::Value::StringValue("Example log record".into()))
    );
    assert_eq!(
        record.attributes[0].value.as_ref().unwrap().value,
        Some(any_value::Value::IntValue(10))
    );

    let reply = post(
        &server,
        "/v1/metrics",
        &[("content-type", JSON)],
        METRICS_JSON.into(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let metrics = server.sink.metrics.lock().unwrap().clone();
    let names: Vec<_> = metrics[0].resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(names, ["my.counter", "my.gauge"]);

    server.shutdown().await;
}

#[tokio::test]
async fn http_gzip_and_zstd_bodies() {
    let server = start_http(1024 * 1024).await;
    let proto = trace_request().encode_to_vec();

    for (encoding, body) in [("gzip", gzip(&proto)), ("zstd", zstd(&proto))] {
        let reply = post(
            &server,
            "/v1/traces",
            &[("content-type", PROTOBUF), ("content-encoding", encoding)],
            body,
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "{encoding}");
    }
    for (encoding, body) in [
        ("gzip", gzip(TRACE_JSON.as_bytes())),
        ("zstd", zstd(TRACE_JSON.as_bytes())),
        ("identity", TRACE_JSON.as_bytes().to_vec()),
    ] {
        let reply = post(
            &server,
            "/v1/traces",
            &[("content-type", JSON), ("content-encoding", encoding)],
            body,
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "{encoding}");
        assert_eq!(reply.json(), serde_json::json!({}));
    }
    let traces = server.sink.traces();
    assert_eq!(traces.len(), 5);
    assert_eq!(traces[0], trace_request());
    assert_eq!(traces[1], trace_request());
    assert_eq!(
        traces[4].resource_spans[0].scope_spans[0].spans[0].trace_id,
        TRACE_ID
    );
}

#[tokio::test]
async fn http_partial_success_is_passed_through() {
    let server = start_http(1024 * 1024).await;
    server.sink.set(Behaviour::Partial {
        rejected: 1,
        message: "span without a trace id".into(),
    });

    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", JSON)],
        TRACE_JSON.into(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let json = reply.json();
    assert_eq!(json["partialSuccess"]["rejectedSpans"], 1);
    assert_eq!(
        json["partialSuccess"]["errorMessage"],
        "span without a trace id"
    );

    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", PROTOBUF)],
        trace_request().encode_to_vec(),
    )
    .await;
    let response = ExportTraceServiceResponse::decode(reply.body.as_slice()).unwrap();
    let partial = response.partial_success.unwrap();
    assert_eq!(partial.rejected_spans, 1);
    assert_eq!(partial.error_message, "span without a trace id");

    let reply = post(
        &server,
        "/v1/logs",
        &[("content-type", JSON)],
        LOGS_JSON.into(),
    )
    .await;
    assert_eq!(reply.json()["partialSuccess"]["rejectedLogRecords"], 1);
    let reply = post(
        &server,
        "/v1/metrics",
        &[("content-type", JSON)],
        METRICS_JSON.into(),
    )
    .await;
    assert_eq!(reply.json()["partialSuccess"]["rejectedDataPoints"], 1);
}

#[tokio::test]
async fn http_bad_requests_get_clear_errors_and_the_server_keeps_serving() {
    let limit = 64 * 1024;
    let server = start_http(limit).await;
    let proto = trace_request().encode_to_vec();

    // Garbage protobuf: 400, google.rpc.Status in protobuf.
    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", PROTOBUF)],
        b"\x0a\xff\xff\xff\xff\x0f garbage".to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.content_type(), PROTOBUF);
    let (code, message) = reply.status_body();
    assert_eq!(code, tonic::Code::InvalidArgument as i32);
    assert!(
        message.starts_with("invalid protobuf ExportTraceServiceRequest: "),
        "{message}"
    );

    // Invalid JSON: 400, google.rpc.Status in JSON.
    let reply = post(
        &server,
        "/v1/logs",
        &[("content-type", JSON)],
        b"{\"resourceLogs\": [".to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let (code, message) = reply.status_body();
    assert_eq!(code, 3);
    assert_eq!(
        message,
        "invalid JSON ExportLogsServiceRequest: at resourceLogs: EOF while parsing a list at line 1 column 18"
    );

    // Bad hex id: the message says where.
    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", JSON)],
        br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"not hex"}]}]}]}"#.to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let (_, message) = reply.status_body();
    assert!(
        message.starts_with(
            "invalid JSON ExportTraceServiceRequest: at resourceSpans[0].scopeSpans[0].spans[0].traceId: "
        ),
        "{message}"
    );

    // Truncated gzip and zstd: 400.
    let compressed = gzip(&proto);
    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", PROTOBUF), ("content-encoding", "gzip")],
        compressed[..compressed.len() - 4].to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.status_body().1,
        "invalid gzip body: unexpected end of file"
    );
    let compressed = zstd(&proto);
    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", JSON), ("content-encoding", "zstd")],
        compressed[..compressed.len() / 2].to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.status_body().1, "invalid zstd body: incomplete frame");

    // A small gzip body that inflates past the limit: 413.
    let bomb = gzip(&vec![b' '; 10 * limit]);
    assert!(bomb.len() < limit);
    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", JSON), ("content-encoding", "gzip")],
        bomb,
    )
    .await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    let (code, message) = reply.status_body();
    assert_eq!(code, tonic::Code::ResourceExhausted as i32);
    assert_eq!(
        message,
        "request body exceeds the limit of 65536 bytes after gzip decompression"
    );
    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", PROTOBUF), ("content-encoding", "zstd")],
        zstd(&big_trace_request(2 * limit).encode_to_vec()),
    )
    .await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        reply.status_body().1,
        "request body exceeds the limit of 65536 bytes after zstd decompression"
    );

    // A body over the limit on the wire: 413.
    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", PROTOBUF)],
        big_trace_request(limit + 100).encode_to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        reply.status_body().1,
        "request body exceeds the limit of 65536 bytes"
    );

    // Wrong or missing content type: 415, listing the accepted types, answered in JSON.
    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", "text/plain")],
        proto.clone(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (code, message) = reply.status_body();
    assert_eq!(code, tonic::Code::InvalidArgument as i32);
    assert_eq!(
        message,
        "unsupported Content-Type \"text/plain\": use application/x-protobuf or application/json"
    );
    let reply = post(&server, "/v1/traces", &[], proto.clone()).await;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(
        reply.status_body().1,
        "missing Content-Type header: use application/x-protobuf or application/json"
    );

    // Unknown content encoding: 415.
    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", PROTOBUF), ("content-encoding", "br")],
        proto.clone(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(
        reply.status_body().1,
        "unsupported Content-Encoding \"br\": use gzip, zstd or identity"
    );

    // Other methods: 405 with Allow: POST.
    for method in [
        reqwest::Method::GET,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
    ] {
        let reply = send(method.clone(), server.url("/v1/metrics"), &[], Vec::new()).await;
        assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        assert_eq!(reply.headers.get("allow").unwrap(), "POST");
        assert_eq!(
            reply.status_body().1,
            format!("method {method} is not allowed on /v1/metrics: use POST")
        );
    }

    // Unknown path: 404.
    let reply = post(
        &server,
        "/v1/spans",
        &[("content-type", PROTOBUF)],
        proto.clone(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.content_type(), PROTOBUF);
    assert_eq!(
        reply.status_body().1,
        "no OTLP endpoint at /v1/spans: use /v1/traces, /v1/logs or /v1/metrics"
    );

    assert!(server.sink.traces().is_empty());
    assert!(server.sink.logs.lock().unwrap().is_empty());

    // After all that, a good request is still served.
    let reply = post(&server, "/v1/traces", &[("content-type", PROTOBUF)], proto).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(server.sink.traces(), vec![trace_request()]);

    server.shutdown().await;
}

#[tokio::test]
async fn http_sink_failure_is_503_with_retry_after() {
    let server = start_http(1024 * 1024).await;
    server.sink.set(Behaviour::Fail);

    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", PROTOBUF)],
        trace_request().encode_to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.headers.get("retry-after").unwrap(), "1");
    let (code, message) = reply.status_body();
    assert_eq!(code, tonic::Code::Unavailable as i32);
    assert_eq!(message, "storage unavailable: disk full");

    let reply = post(
        &server,
        "/v1/metrics",
        &[("content-type", JSON)],
        METRICS_JSON.into(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.headers.get("retry-after").unwrap(), "1");
    assert_eq!(reply.status_body().1, "storage unavailable: disk full");

    server.sink.set(Behaviour::Accept);
    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", JSON)],
        TRACE_JSON.into(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
}

// ---------------------------------------------------------------------------------------------
// OTLP/gRPC.

#[tokio::test]
async fn grpc_success_for_all_signals_and_compressions() {
    let server = start_grpc(1024 * 1024).await;

    let mut plain = trace_client(&server).await;
    let response = plain.export(trace_request()).await.unwrap();
    assert_eq!(response.get_ref().partial_success, None);

    for encoding in [CompressionEncoding::Gzip, CompressionEncoding::Zstd] {
        let mut client = trace_client(&server)
            .await
            .send_compressed(encoding)
            .accept_compressed(encoding);
        let response = client.export(trace_request()).await.unwrap();
        // The reply is compressed the way the client accepts.
        let expected = match encoding {
            CompressionEncoding::Gzip => "gzip",
            _ => "zstd",
        };
        assert_eq!(response.metadata().get("grpc-encoding").unwrap(), expected);
        assert_eq!(response.get_ref().partial_success, None);
    }
    assert_eq!(server.sink.traces(), vec![trace_request(); 3]);
    assert_eq!(
        server.sink.span_names()[..2],
        ["chat gpt-4o", "invoke_agent weather"]
    );
    assert_eq!(
        server.sink.traces()[2].resource_spans[0].scope_spans[0].spans[1].trace_id,
        TRACE_ID
    );

    let mut logs = LogsServiceClient::connect(server.url(""))
        .await
        .unwrap()
        .send_compressed(CompressionEncoding::Gzip);
    logs.export(logs_request()).await.unwrap();
    assert_eq!(*server.sink.logs.lock().unwrap(), vec![logs_request()]);

    let mut metrics = MetricsServiceClient::connect(server.url(""))
        .await
        .unwrap()
        .send_compressed(CompressionEncoding::Zstd);
    metrics.export(metrics_request()).await.unwrap();
    assert_eq!(
        *server.sink.metrics.lock().unwrap(),
        vec![metrics_request()]
    );

    server.shutdown().await;
}

#[tokio::test]
async fn grpc_partial_success_is_passed_through() {
    let server = start_grpc(1024 * 1024).await;
    server.sink.set(Behaviour::Partial {
        rejected: 2,
        message: "two spans without ids".into(),
    });
    let response = trace_client(&server)
        .await
        .export(trace_request())
        .await
        .unwrap();
    let partial = response.into_inner().partial_success.unwrap();
    assert_eq!(partial.rejected_spans, 2);
    assert_eq!(partial.error_message, "two spans without ids");

    let response = MetricsServiceClient::connect(server.url(""))
        .await
        .unwrap()
        .export(metrics_request())
        .await
        .unwrap();
    let partial = response.into_inner().partial_success.unwrap();
    assert_eq!(partial.rejected_data_points, 2);
}

#[tokio::test]
async fn grpc_oversized_is_resource_exhausted_not_out_of_range() {
    let limit = 64 * 1024;
    let server = start_grpc(limit).await;

    // Over the limit on the wire (tonic's OUT_OF_RANGE, rewritten).
    let err = trace_client(&server)
        .await
        .export(big_trace_request(limit + 100))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert_eq!(
        err.message(),
        "request message exceeds the limit of 65536 bytes"
    );
    assert!(err.details().is_empty(), "no RetryInfo: not retryable");

    // Small on the wire, over the limit once decompressed.
    for encoding in [CompressionEncoding::Gzip, CompressionEncoding::Zstd] {
        let err = trace_client(&server)
            .await
            .send_compressed(encoding)
            .export(big_trace_request(4 * limit))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
        assert!(err.message().contains("65536 bytes"), "{}", err.message());
        assert!(err.details().is_empty());
    }

    // The server still serves a good request.
    trace_client(&server)
        .await
        .export(trace_request())
        .await
        .unwrap();
    assert_eq!(server.sink.traces(), vec![trace_request()]);
    server.shutdown().await;
}

#[tokio::test]
async fn grpc_sink_failure_is_unavailable_with_retry_info() {
    let server = start_grpc(1024 * 1024).await;
    server.sink.set(Behaviour::Fail);

    let err = trace_client(&server)
        .await
        .export(trace_request())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert_eq!(err.message(), "storage unavailable: disk full");
    let status = RpcStatus::decode(err.details()).unwrap();
    assert_eq!(status.code, tonic::Code::Unavailable as i32);
    assert_eq!(status.details.len(), 1);
    assert_eq!(
        status.details[0].type_url,
        "type.googleapis.com/google.rpc.RetryInfo"
    );
    let info = RetryInfo::decode(status.details[0].value.as_slice()).unwrap();
    assert_eq!(
        info.retry_delay,
        Some(ProtoDuration {
            seconds: 1,
            nanos: 0
        })
    );

    let err = LogsServiceClient::connect(server.url(""))
        .await
        .unwrap()
        .export(logs_request())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);

    server.sink.set(Behaviour::Accept);
    trace_client(&server)
        .await
        .export(trace_request())
        .await
        .unwrap();
    server.shutdown().await;
}

/// The body is drained (bounded) before the 413, so a client still uploading reads the answer
/// instead of a reset connection.
#[tokio::test]
async fn http_body_far_over_the_limit_gets_413_not_a_reset() {
    let server = start_http(64 * 1024).await;
    for size in [1_000_000usize, 20_000_000] {
        let reply = post(
            &server,
            "/v1/traces",
            &[("content-type", PROTOBUF)],
            vec![0u8; size],
        )
        .await;
        assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            reply.status_body().1,
            "request body exceeds the limit of 65536 bytes"
        );
    }
    let reply = post(
        &server,
        "/v1/traces",
        &[("content-type", PROTOBUF)],
        trace_request().encode_to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
}

/// Sends one hand-framed gRPC request and returns the status the server answered with.
async fn raw_grpc(
    server: &Running,
    path: &str,
    encoding: Option<&str>,
    frame: Vec<u8>,
) -> tonic::Status {
    use http_body_util::BodyExt;

    let channel = tonic::transport::Endpoint::from_shared(server.url(""))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut request = http::Request::builder()
        .method("POST")
        .uri(server.url(path))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(encoding) = encoding {
        request = request.header("grpc-encoding", encoding);
    }
    let body = tonic::body::Body::new(http_body_util::Full::new(bytes::Bytes::from(frame)));
    let response = tower::ServiceExt::oneshot(channel, request.body(body).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    if let Some(status) = tonic::Status::from_header_map(&parts.headers) {
        return status; // trailers-only response
    }
    let collected = body.collect().await.unwrap();
    tonic::Status::from_header_map(collected.trailers().unwrap()).unwrap()
}

/// A gRPC length-prefixed message.
fn grpc_frame(compressed: bool, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![u8::from(compressed)];
    frame.extend(u32::try_from(payload.len()).unwrap().to_be_bytes());
    frame.extend(payload);
    frame
}

const TRACE_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

#[tokio::test]
async fn grpc_undecodable_requests_are_invalid_argument() {
    let server = start_grpc(1024 * 1024).await;

    let status = raw_grpc(
        &server,
        TRACE_EXPORT,
        None,
        grpc_frame(false, b"\x0a\xff\xff\xff\xff\x0f garbage"),
    )
    .await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status
            .message()
            .starts_with("invalid request: failed to decode Protobuf message"),
        "{}",
        status.message()
    );

    let compressed = gzip(&trace_request().encode_to_vec());
    let status = raw_grpc(
        &server,
        TRACE_EXPORT,
        Some("gzip"),
        grpc_frame(true, &compressed[..compressed.len() / 2]),
    )
    .await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status
            .message()
            .starts_with("invalid request: Error decompressing"),
        "{}",
        status.message()
    );

    let status = raw_grpc(
        &server,
        "/opentelemetry.proto.collector.trace.v1.TraceService/Nope",
        None,
        grpc_frame(false, &[]),
    )
    .await;
    assert_eq!(status.code(), tonic::Code::Unimplemented);

    assert!(server.sink.traces().is_empty());
    let status = raw_grpc(
        &server,
        TRACE_EXPORT,
        Some("gzip"),
        grpc_frame(true, &compressed),
    )
    .await;
    assert_eq!(status.code(), tonic::Code::Ok, "{status:?}");
    assert_eq!(server.sink.traces(), vec![trace_request()]);
    server.shutdown().await;
}
