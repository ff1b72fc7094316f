//! Tests of `client`: one attempt against a real local backend, the bytes it receives, and
//! the helpers (Retry-After, compression).

use std::sync::{Arc, Mutex};

use super::*;

#[test]
fn retry_after_forms() {
    assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after("soon"), None);
}

#[test]
fn compression_round_trips() {
    let body = Bytes::from_static(b"hello hello hello");
    let (gz, encoding) = compress(body.clone(), Compression::Gzip).unwrap();
    assert_eq!(encoding, Some("gzip"));
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut out).unwrap();
    assert_eq!(out, body);
    let (zs, _) = compress(body.clone(), Compression::Zstd).unwrap();
    assert_eq!(zstd::decode_all(&zs[..]).unwrap(), body);
}

/// A backend recording what arrives at `POST /v1/traces` (content type and raw body) and
/// answering 200 with an empty response.
struct RecordingBackend {
    base: String,
    received: Received,
}

/// The requests a [`RecordingBackend`] got: (content type, body).
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

async fn recording_backend() -> RecordingBackend {
    let received: Received = Arc::default();
    let store = received.clone();
    let app = axum::Router::new().route(
        Traces::HTTP_PATH,
        axum::routing::post(move |headers: HeaderMap, body: bytes::Bytes| {
            let store = store.clone();
            async move {
                let content_type = headers
                    .get(CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                store.lock().unwrap().push((content_type, body.to_vec()));
                ([(CONTENT_TYPE, PROTOBUF_CONTENT_TYPE)], Vec::<u8>::new())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    RecordingBackend { base, received }
}

fn http_exporter(
    endpoint: &str,
    protocol: ExporterProtocol,
    enrich_run_id: bool,
) -> ExporterConfig {
    ExporterConfig {
        id: "otlphttp".into(),
        protocol,
        endpoint: endpoint.into(),
        tls: None,
        headers: Vec::new(),
        compression: Compression::None,
        timeout: Duration::from_secs(5),
        retry: crate::config::RetryConfig::default(),
        queue_size_bytes: 1 << 20,
        when_full: crate::config::WhenFull::Refuse,
        num_consumers: 1,
        batch: None,
        enrich_run_id,
        signals: vec![SignalKind::Traces],
    }
}

/// A trace entry whose agent span (1) and its Strands cycle (2) belong to run `r-1`, and
/// whose plain span (3) belongs to none. The payload is protobuf no re-encoding would
/// reproduce byte for byte (an unknown field at the end), so untouched bytes are told apart.
fn entry() -> (OutboxEntry, Vec<u8>) {
    use crate::test_fixtures::{kv, request, span, TRACE};
    let spans = vec![
        span(
            1,
            0,
            "invoke_agent calc",
            1,
            vec![kv("gen_ai.operation.name", "invoke_agent")],
        ),
        span(
            2,
            1,
            "execute_event_loop_cycle",
            2,
            vec![kv("gen_ai.operation.name", "execute_event_loop_cycle")],
        ),
        span(3, 0, "GET /health", 3, vec![]),
    ];
    let mut payload = request(spans).encode_to_vec();
    // Field 15, varint 1: unknown to ExportTraceServiceRequest, dropped by a decode/encode.
    payload.extend_from_slice(&[0x78, 0x01]);
    let mut entry = OutboxEntry::new(SignalKind::Traces, 3, payload.clone());
    entry.span_runs = [1u8, 2]
        .map(|id| crate::outbox::SpanRun {
            trace_id: TRACE,
            span_id: [id; 8],
            run_id: "r-1".into(),
        })
        .to_vec();
    (entry, payload)
}

fn run_ids(body: &[u8]) -> Vec<(String, Vec<String>)> {
    let request = ExportTraceServiceRequest::decode(body).unwrap();
    request.resource_spans[0].scope_spans[0]
        .spans
        .iter()
        .map(|s| {
            let tags = s
                .attributes
                .iter()
                .filter(|kv| kv.key == super::super::enrich::RUN_ID_ATTRIBUTE)
                .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(v) => {
                        Some(v.clone())
                    }
                    _ => None,
                })
                .collect();
            (s.name.clone(), tags)
        })
        .collect()
}

#[tokio::test]
async fn without_enrichment_the_received_bytes_go_out_untouched() {
    let backend = recording_backend().await;
    let (entry, payload) = entry();
    let client = Client::new(&http_exporter(
        &backend.base,
        ExporterProtocol::HttpProtobuf,
        false,
    ))
    .unwrap();
    assert_eq!(
        client.send(&entry).await.unwrap(),
        PartialSuccess::default()
    );
    let received = backend.received.lock().unwrap().clone();
    assert_eq!(
        received,
        [(PROTOBUF_CONTENT_TYPE.to_owned(), payload.clone())]
    );

    // Enrichment on, but the writer resolved no span: still the received bytes.
    let mut bare = entry.clone();
    bare.span_runs.clear();
    let client = Client::new(&http_exporter(
        &backend.base,
        ExporterProtocol::HttpProtobuf,
        true,
    ))
    .unwrap();
    client.send(&bare).await.unwrap();
    assert_eq!(backend.received.lock().unwrap()[1].1, payload);
}

#[tokio::test]
async fn enrichment_tags_the_spans_of_the_entrys_span_runs() {
    let backend = recording_backend().await;
    let (entry, _) = entry();
    let want = vec![
        ("invoke_agent calc".to_owned(), vec!["r-1".to_owned()]),
        (
            "execute_event_loop_cycle".to_owned(),
            vec!["r-1".to_owned()],
        ),
        ("GET /health".to_owned(), vec![]),
    ];
    let client = Client::new(&http_exporter(
        &backend.base,
        ExporterProtocol::HttpProtobuf,
        true,
    ))
    .unwrap();
    client.send(&entry).await.unwrap();
    let (content_type, body) = backend.received.lock().unwrap()[0].clone();
    assert_eq!(content_type, PROTOBUF_CONTENT_TYPE);
    assert_eq!(run_ids(&body), want);

    // OTLP/JSON carries the same tags.
    let client = Client::new(&http_exporter(
        &backend.base,
        ExporterProtocol::HttpJson,
        true,
    ))
    .unwrap();
    client.send(&entry).await.unwrap();
    let (content_type, body) = backend.received.lock().unwrap()[1].clone();
    assert_eq!(content_type, JSON_CONTENT_TYPE);
    let request: ExportTraceServiceRequest = serde_json::from_slice(&body).unwrap();
    assert_eq!(run_ids(&request.encode_to_vec()), want);
}

/// A gRPC backend (stepline's own receiver) recording the protobuf bytes of every trace
/// request as they arrived, after decompression.
#[derive(Default)]
struct EncodedSink(Mutex<Vec<Vec<u8>>>);

impl crate::receiver::ExportSink for EncodedSink {
    async fn export_traces(
        &self,
        _request: ExportTraceServiceRequest,
    ) -> Result<crate::ingest::ExportOutcome, crate::ingest::IngestError> {
        Ok(Default::default())
    }

    async fn export_logs(
        &self,
        _request: opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest,
    ) -> Result<crate::ingest::ExportOutcome, crate::ingest::IngestError> {
        Ok(Default::default())
    }

    async fn export_metrics(
        &self,
        _request: opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest,
    ) -> Result<crate::ingest::ExportOutcome, crate::ingest::IngestError> {
        Ok(Default::default())
    }

    async fn export_traces_encoded(
        &self,
        _request: ExportTraceServiceRequest,
        encoded: Option<bytes::Bytes>,
    ) -> Result<crate::ingest::ExportOutcome, crate::ingest::IngestError> {
        let encoded = encoded.map(|b| b.to_vec()).unwrap_or_default();
        self.0.lock().unwrap().push(encoded);
        Ok(Default::default())
    }
}

fn grpc_exporter(endpoint: &str, compression: Compression, enrich_run_id: bool) -> ExporterConfig {
    ExporterConfig {
        id: "otlp".into(),
        protocol: ExporterProtocol::Grpc,
        compression,
        ..http_exporter(endpoint, ExporterProtocol::Grpc, enrich_run_id)
    }
}

/// stepline's own gRPC receiver on a free port, answering from `sink`: its `http://` endpoint.
async fn grpc_receiver<S: crate::receiver::ExportSink>(sink: Arc<S>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(crate::receiver::serve_grpc(
        listener,
        sink,
        crate::receiver::ReceiverLimits::default(),
        std::future::pending(),
    ));
    endpoint
}

#[tokio::test]
async fn grpc_sends_the_stored_bytes_as_the_message_and_merges_by_concatenation() {
    let sink = Arc::new(EncodedSink::default());
    let endpoint = grpc_receiver(sink.clone()).await;
    let (entry, payload) = entry();

    // Byte for byte, unknown field included, with and without compression.
    for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
        let client = Client::new(&grpc_exporter(&endpoint, compression, false)).unwrap();
        assert_eq!(
            client.send(&entry).await.unwrap(),
            PartialSuccess::default()
        );
    }
    assert_eq!(*sink.0.lock().unwrap(), vec![payload.clone(); 3]);

    // Two entries merged: the concatenation, which decodes as both requests' resource spans.
    let client = Client::new(&grpc_exporter(&endpoint, Compression::None, true)).unwrap();
    let mut plain = entry.clone();
    plain.span_runs.clear();
    let mut body = client.body_of(&plain).unwrap().to_vec();
    let enriched = client.body_of(&entry).unwrap();
    assert_ne!(
        enriched.as_ref(),
        payload.as_slice(),
        "enriched entries are re-encoded"
    );
    body.extend_from_slice(&enriched);
    client
        .send_body(SignalKind::Traces, body.clone().into())
        .await
        .unwrap();
    let received = sink.0.lock().unwrap()[3].clone();
    assert_eq!(received, body);
    let merged = ExportTraceServiceRequest::decode(received.as_slice()).unwrap();
    assert_eq!(merged.resource_spans.len(), 2);
    let tags = |i: usize| {
        run_ids(
            &ExportTraceServiceRequest {
                resource_spans: vec![merged.resource_spans[i].clone()],
            }
            .encode_to_vec(),
        )
    };
    assert!(tags(0).iter().all(|(_, ids)| ids.is_empty()));
    assert_eq!(tags(1)[0].1, ["r-1"]);
}

#[tokio::test]
async fn grpc_parts_arrive_as_their_concatenation_with_and_without_compression() {
    let sink = Arc::new(EncodedSink::default());
    let endpoint = grpc_receiver(sink.clone()).await;
    let (_, payload) = entry();
    // Parts larger than an HTTP/2 frame (16 KiB), an empty one, and a small one.
    // Whole copies of the request: concatenated, they decode as one.
    let big = payload.repeat(200 * 1024 / payload.len() + 1);
    let parts = vec![
        Bytes::from(payload.clone()),
        Bytes::new(),
        Bytes::from(big.clone()),
        Bytes::from(payload.clone()),
    ];
    let want = [payload.clone(), big, payload.clone()].concat();
    for compression in [Compression::None, Compression::Gzip] {
        let client = Client::new(&grpc_exporter(&endpoint, compression, false)).unwrap();
        assert_eq!(
            client
                .send_parts(SignalKind::Traces, parts.clone())
                .await
                .unwrap(),
            PartialSuccess::default()
        );
    }
    let received = sink.0.lock().unwrap().clone();
    assert_eq!(received.len(), 2);
    assert!(received.iter().all(|r| *r == want), "byte for byte");
}

/// A gRPC backend (stepline's own receiver) refusing every trace request with `error`.
struct RefusingSink(fn() -> crate::ingest::IngestError);

impl crate::receiver::ExportSink for RefusingSink {
    async fn export_traces(
        &self,
        _request: ExportTraceServiceRequest,
    ) -> Result<crate::ingest::ExportOutcome, crate::ingest::IngestError> {
        Err((self.0)())
    }

    async fn export_logs(
        &self,
        _request: opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest,
    ) -> Result<crate::ingest::ExportOutcome, crate::ingest::IngestError> {
        Err((self.0)())
    }

    async fn export_metrics(
        &self,
        _request: opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest,
    ) -> Result<crate::ingest::ExportOutcome, crate::ingest::IngestError> {
        Err((self.0)())
    }

    async fn export_traces_encoded(
        &self,
        _request: ExportTraceServiceRequest,
        _encoded: Option<bytes::Bytes>,
    ) -> Result<crate::ingest::ExportOutcome, crate::ingest::IngestError> {
        Err((self.0)())
    }
}

/// The refusal of one send, as (status, message, retryable, retry_after).
fn refusal(error: ExportError) -> (String, String, bool, Option<Duration>) {
    match error {
        ExportError::Refused {
            status,
            message,
            retryable,
            retry_after,
        } => (status, message, retryable, retry_after),
        other => panic!("not a refusal: {other:?}"),
    }
}

#[tokio::test]
async fn uncompressed_grpc_answers_the_same_errors_as_the_tonic_path() {
    let (entry, _) = entry();
    let statuses = [
        (
            (|| crate::ingest::IngestError::ShuttingDown) as fn() -> crate::ingest::IngestError,
            "gRPC Unavailable",
            true,
        ),
        (
            || crate::ingest::IngestError::Rejected("bad".into()),
            "gRPC InvalidArgument",
            false,
        ),
    ];
    for (error, status, retryable) in statuses {
        let endpoint = grpc_receiver(Arc::new(RefusingSink(error))).await;
        let mut answers = Vec::new();
        for compression in [Compression::None, Compression::Gzip] {
            let client = Client::new(&grpc_exporter(&endpoint, compression, false)).unwrap();
            answers.push(refusal(client.send(&entry).await.unwrap_err()));
        }
        assert_eq!(answers[0], answers[1]);
        assert_eq!(answers[0].0, status);
        assert_eq!(answers[0].2, retryable);
        assert_eq!(
            answers[0].3.is_some(),
            retryable,
            "RetryInfo when retryable"
        );
    }

    // Nobody listening: the same (retryable) refusal either way.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut answers = Vec::new();
    for compression in [Compression::None, Compression::Gzip] {
        let client = Client::new(&grpc_exporter(&endpoint, compression, false)).unwrap();
        answers.push(refusal(client.send(&entry).await.unwrap_err()));
    }
    assert_eq!(answers[0], answers[1]);
    assert!(answers[0].2, "{:?}", answers[0]);
}
