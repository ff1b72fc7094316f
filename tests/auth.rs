//! Authentication and transport security against the real binary: TLS on both receivers
//! (certificates made with rcgen; clients trusting that CA), mutual TLS, bearer tokens on the
//! receivers (the `bearertokenauth` extension) and on the query API and `/metrics`, the API's
//! `Host` check, a start refused when a token variable is empty, and the stock Python OTLP
//! exporters through TLS and a token.

mod support;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use stepline::config::TlsConfig;
use stepline::exporter::{client_config, TlsConnector, ALPN_GRPC, ALPN_HTTP};
use tempfile::TempDir;
use tonic::transport::Endpoint;

// ---------------------------------------------------------------------------------------------
// Certificates

/// A CA and the PEM files made with it, in a temporary directory.
struct Pki {
    dir: TempDir,
}

impl Pki {
    /// A CA (`ca.pem`), a server certificate for localhost / 127.0.0.1 (`server.pem`,
    /// `server.key`), a client certificate from the same CA (`client.pem`, `client.key`) and a
    /// client certificate from another CA (`stranger.pem`, `stranger.key`).
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let ca = issuer("stepline test CA");
        let other_ca = issuer("someone else's CA");
        let write = |name: &str, text: String| {
            std::fs::write(dir.path().join(name), text).expect("write a PEM file");
        };
        write("ca.pem", ca.pem());
        let (cert, key) = leaf(&["localhost", "127.0.0.1"], &ca);
        write("server.pem", cert);
        write("server.key", key);
        let (cert, key) = leaf(&["agent.example"], &ca);
        write("client.pem", cert);
        write("client.key", key);
        let (cert, key) = leaf(&["stranger.example"], &other_ca);
        write("stranger.pem", cert);
        write("stranger.key", key);
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A client TLS configuration trusting the CA, with an optional client certificate
    /// (`client` or `stranger`).
    fn client(&self, identity: Option<&str>, alpn: &[&[u8]]) -> rustls::ClientConfig {
        let tls = TlsConfig {
            ca_file: Some(self.path("ca.pem")),
            cert_file: identity.map(|name| self.path(&format!("{name}.pem"))),
            key_file: identity.map(|name| self.path(&format!("{name}.key"))),
            ..TlsConfig::default()
        };
        client_config(&tls, alpn).expect("client TLS configuration")
    }
}

fn issuer(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA")
}

fn leaf(names: &[&str], ca: &CertifiedIssuer<'static, KeyPair>) -> (String, String) {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let params = CertificateParams::new(names).expect("certificate parameters");
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &**ca).expect("certificate");
    (cert.pem(), key.serialize_pem())
}

// ---------------------------------------------------------------------------------------------
// The binary with a configuration of our own

struct Ports {
    grpc: SocketAddr,
    http: SocketAddr,
    api: SocketAddr,
}

fn free_ports() -> Ports {
    let listeners: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    let address = |i: usize| listeners[i].local_addr().expect("local address");
    Ports {
        grpc: address(0),
        http: address(1),
        api: address(2),
    }
}

/// A running stepline started on a configuration written by the test.
struct Running {
    child: Option<Child>,
    ports: Ports,
    tmp: TempDir,
}

impl Running {
    fn log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("stepline.log")).unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The configuration: `grpc` and `http` are the bodies of the two protocol blocks (flow
/// mappings without braces, after the endpoint), `api` the body of `stepline_api` after its
/// endpoint, `extensions` more extensions (YAML lines indented by two) and `listed` the ids
/// added to `service.extensions`.
#[derive(Default)]
struct Yaml<'a> {
    grpc: &'a str,
    http: &'a str,
    api: &'a str,
    extensions: &'a str,
    listed: &'a str,
}

fn config_text(yaml: &Yaml<'_>, ports: &Ports, data: &Path) -> String {
    format!(
        "receivers:\n  otlp:\n    protocols:\n      grpc: {{ endpoint: '{grpc}'{g} }}\n      http: {{ endpoint: '{http}'{h} }}\n\
         processors:\n  stepline:\n\
         extensions:\n  stepline_storage: {{ directory: '{data}' }}\n  stepline_api: {{ endpoint: '{api}'{a} }}\n{extensions}\
         service:\n  extensions: [stepline_storage, stepline_api{listed}]\n  pipelines:\n    traces: {{ receivers: [otlp], processors: [stepline] }}\n",
        grpc = ports.grpc,
        http = ports.http,
        api = ports.api,
        data = data.display(),
        g = prefixed(yaml.grpc),
        h = prefixed(yaml.http),
        a = prefixed(yaml.api),
        extensions = yaml.extensions,
        listed = prefixed(yaml.listed),
    )
}

fn prefixed(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(", {text}")
    }
}

fn stepline(config: &Path, env: &[(&str, &str)], log: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stepline"));
    command.arg("--config").arg(config).env("RUST_LOG", "info");
    for (name, value) in env {
        command.env(name, value);
    }
    let file = std::fs::File::create(log).expect("create the log");
    command
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("log handle"))
        .stderr(file);
    command
}

/// Starts stepline on `yaml` with `env` and waits until its API answers `/healthz`.
async fn start(yaml: &Yaml<'_>, env: &[(&str, &str)]) -> Running {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let ports = free_ports();
    let config = tmp.path().join("collector.yaml");
    std::fs::write(&config, config_text(yaml, &ports, &tmp.path().join("data")))
        .expect("write the config");
    let child = stepline(&config, env, &tmp.path().join("stepline.log"))
        .spawn()
        .expect("spawn stepline");
    let mut running = Running {
        child: Some(child),
        ports,
        tmp,
    };
    let url = format!("http://{}/healthz", running.ports.api);
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(child) = running.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("stepline exited with {status}:\n{}", running.log());
            }
        }
        if let Ok(reply) = client.get(&url).send().await {
            if reply.status() == 200 {
                return running;
            }
        }
        assert!(
            Instant::now() < deadline,
            "stepline did not answer {url}:\n{}",
            running.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs stepline on `yaml` with `env` (and `extra` arguments), expecting it to stop on its
/// own; its exit code and output.
fn run_to_exit(yaml: &Yaml<'_>, env: &[(&str, &str)], extra: &[&str]) -> (Option<i32>, String) {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let ports = free_ports();
    let config = tmp.path().join("collector.yaml");
    std::fs::write(&config, config_text(yaml, &ports, &tmp.path().join("data")))
        .expect("write the config");
    let log = tmp.path().join("stepline.log");
    let mut child = stepline(&config, env, &log)
        .args(extra)
        .spawn()
        .expect("spawn stepline");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for stepline") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "stepline kept running:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status.code(),
        std::fs::read_to_string(&log).unwrap_or_default(),
    )
}

// ---------------------------------------------------------------------------------------------
// Clients

/// An OTLP trace request with `n` spans (not agent spans: counted, not interpreted).
fn spans(n: usize) -> ExportTraceServiceRequest {
    let span = |i: usize| Span {
        trace_id: vec![7; 16],
        span_id: (i as u64 + 1).to_be_bytes().to_vec(),
        name: format!("auth-test-{i}"),
        start_time_unix_nano: 1_700_000_000_000_000_000,
        end_time_unix_nano: 1_700_000_001_000_000_000,
        ..Span::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (0..n).map(span).collect(),
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
}

fn https_client(tls: rustls::ClientConfig) -> reqwest::Client {
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(10))
        .build()
        .expect("HTTPS client")
}

/// POSTs one span as OTLP/JSON to `url` with an optional `Authorization` value; status,
/// `WWW-Authenticate` and body.
async fn post_json(
    client: &reqwest::Client,
    url: &str,
    authorization: Option<&str>,
) -> Result<(u16, Option<String>, serde_json::Value), reqwest::Error> {
    let body = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "07070707070707070707070707070707", "spanId": "0000000000000001",
        "name": "auth-test", "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001000000000"}]}]}]});
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let reply = request.send().await?;
    let status = reply.status().as_u16();
    let challenge = reply
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap_or_default().to_owned());
    let text = reply.text().await?;
    Ok((
        status,
        challenge,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    ))
}

/// A gRPC trace client over TLS (trusting the test CA, with an optional client identity).
async fn grpc_client(
    pki: &Pki,
    address: SocketAddr,
    identity: Option<&str>,
) -> Result<TraceServiceClient<tonic::transport::Channel>, tonic::transport::Error> {
    let connector = TlsConnector::new(pki.client(identity, ALPN_GRPC), Some("localhost"));
    let channel = Endpoint::from_shared(format!("https://{address}"))
        .expect("endpoint")
        .timeout(Duration::from_secs(10))
        .connect_with_connector(connector)
        .await?;
    Ok(TraceServiceClient::new(channel))
}

async fn export_grpc(
    client: &mut TraceServiceClient<tonic::transport::Channel>,
    authorization: Option<&str>,
) -> Result<(), tonic::Status> {
    let mut request = tonic::Request::new(spans(1));
    if let Some(value) = authorization {
        request
            .metadata_mut()
            .insert("authorization", value.parse().expect("metadata value"));
    }
    client.export(request).await.map(|_| ())
}

/// `otelcol_receiver_accepted_spans_total` from `/metrics`.
async fn accepted_spans(running: &Running, authorization: Option<&str>) -> u64 {
    let mut request = reqwest::Client::new().get(format!("http://{}/metrics", running.ports.api));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let text = request
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .find(|line| line.starts_with("otelcol_receiver_accepted_spans_total"))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no accepted span counter in:\n{text}"))
}

const OTLP_TOKEN: &str = "otlp-t0ken-0123456789";

fn token_extension() -> String {
    "  bearertokenauth:\n    token: ${env:TEST_OTLP_TOKEN}\n".to_owned()
}

// ---------------------------------------------------------------------------------------------
// Tests

#[tokio::test]
async fn receivers_over_tls_require_the_bearer_token() {
    let pki = Pki::new();
    let tls = format!(
        "tls: {{ cert_file: '{}', key_file: '{}' }}, auth: {{ authenticator: bearertokenauth }}",
        pki.path("server.pem").display(),
        pki.path("server.key").display()
    );
    let extensions = token_extension();
    let running = start(
        &Yaml {
            grpc: &tls,
            http: &tls,
            extensions: &extensions,
            listed: "bearertokenauth",
            ..Yaml::default()
        },
        &[("TEST_OTLP_TOKEN", OTLP_TOKEN)],
    )
    .await;

    // OTLP/HTTP over TLS.
    let https = https_client(pki.client(None, ALPN_HTTP));
    let url = format!("https://localhost:{}/v1/traces", running.ports.http.port());
    let (status, challenge, body) = post_json(&https, &url, None).await.expect("HTTPS POST");
    assert_eq!(status, 401, "{body}");
    assert_eq!(challenge.as_deref(), Some("Bearer"));
    assert_eq!(
        body["code"], 16,
        "UNAUTHENTICATED in the google.rpc.Status: {body}"
    );
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("missing Authorization header"),
        "{message}"
    );
    let (status, _, body) = post_json(&https, &url, Some("Bearer not-the-token"))
        .await
        .expect("HTTPS POST");
    assert_eq!(status, 401);
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("invalid token"),
        "{body}"
    );
    let right = format!("Bearer {OTLP_TOKEN}");
    let lowercase = format!("bearer {OTLP_TOKEN}");
    for authorization in [&right, &lowercase] {
        let (status, _, body) = post_json(&https, &url, Some(authorization))
            .await
            .expect("HTTPS POST");
        assert_eq!(status, 200, "{authorization}: {body}\n{}", running.log());
    }
    // Plain text on the TLS port gets nothing.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let plain_url = format!("http://127.0.0.1:{}/v1/traces", running.ports.http.port());
    assert!(
        post_json(&plain, &plain_url, Some(&right)).await.is_err(),
        "a plain-text request must not be served"
    );

    // OTLP/gRPC over TLS.
    let mut grpc = grpc_client(&pki, running.ports.grpc, None)
        .await
        .expect("gRPC over TLS connects");
    let status = export_grpc(&mut grpc, None).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert!(
        status.message().contains("missing Authorization header"),
        "{status:?}"
    );
    let status = export_grpc(&mut grpc, Some("Bearer wrong"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated);
    assert!(status.message().contains("invalid token"), "{status:?}");
    export_grpc(&mut grpc, Some(&right))
        .await
        .unwrap_or_else(|e| panic!("right token refused: {e:?}\n{}", running.log()));
    export_grpc(&mut grpc, Some(&format!("BEARER {OTLP_TOKEN}")))
        .await
        .expect("upper-case scheme");

    // Exactly the four authenticated requests got in (one span each).
    assert_eq!(accepted_spans(&running, None).await, 4);
}

#[tokio::test]
async fn mutual_tls_refuses_clients_without_a_certificate_from_the_ca() {
    let pki = Pki::new();
    let tls = format!(
        "tls: {{ cert_file: '{}', key_file: '{}', client_ca_file: '{}' }}",
        pki.path("server.pem").display(),
        pki.path("server.key").display(),
        pki.path("ca.pem").display()
    );
    let running = start(
        &Yaml {
            grpc: &tls,
            http: &tls,
            ..Yaml::default()
        },
        &[],
    )
    .await;
    let url = format!("https://localhost:{}/v1/traces", running.ports.http.port());

    for identity in [None, Some("stranger")] {
        let client = https_client(pki.client(identity, ALPN_HTTP));
        let outcome = post_json(&client, &url, None).await;
        assert!(
            outcome.is_err(),
            "HTTP client with {identity:?} was served: {outcome:?}"
        );
        let refused = match grpc_client(&pki, running.ports.grpc, identity).await {
            Err(_) => true,
            Ok(mut client) => export_grpc(&mut client, None).await.is_err(),
        };
        assert!(refused, "gRPC client with {identity:?} was served");
    }

    let client = https_client(pki.client(Some("client"), ALPN_HTTP));
    let (status, _, body) = post_json(&client, &url, None).await.expect("mTLS POST");
    assert_eq!(status, 200, "{body}");
    let mut grpc = grpc_client(&pki, running.ports.grpc, Some("client"))
        .await
        .expect("gRPC with a client certificate");
    export_grpc(&mut grpc, None).await.expect("mTLS export");
    assert_eq!(accepted_spans(&running, None).await, 2);
}

#[tokio::test]
async fn api_checks_host_token_and_metrics_token() {
    let running = start(
        &Yaml {
            api: "bearer_token: api-t0ken, metrics_bearer_token: m3trics",
            ..Yaml::default()
        },
        &[],
    )
    .await;
    let client = reqwest::Client::new();
    let api = running.ports.api;
    let get = |path: &str, host: &str, authorization: Option<&str>| {
        let mut request = client
            .get(format!("http://{api}{path}"))
            .header("host", host);
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        async move {
            let reply = request.send().await.expect("API request");
            let status = reply.status().as_u16();
            (status, reply.text().await.unwrap_or_default())
        }
    };
    let port = api.port();
    let local = format!("localhost:{port}");

    // DNS rebinding: a page on evil.example re-pointed at 127.0.0.1 sends its own Host.
    for host in ["evil.example", &format!("evil.example:{port}")] {
        let (status, body) = get("/v1/runs", host, Some("Bearer api-t0ken")).await;
        assert_eq!(status, 403, "{host}: {body}");
        assert!(body.contains("is not allowed"), "{body}");
        assert_eq!(get("/healthz", host, None).await.0, 403);
    }
    for host in [
        local.as_str(),
        "localhost",
        &format!("127.0.0.1:{port}"),
        &format!("[::1]:{port}"),
    ] {
        let (status, body) = get("/v1/runs", host, Some("bearer api-t0ken")).await;
        assert_eq!(status, 200, "{host}: {body}");
    }

    let (status, body) = get("/v1/runs", &local, None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        get("/v1/runs", &local, Some("Bearer api-t0ke")).await.0,
        401
    );
    assert_eq!(
        get("/v1/runs", &local, Some("BEARER api-t0ken")).await.0,
        200
    );

    let (status, body) = get("/metrics", &local, None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        get("/metrics", &local, Some("Bearer api-t0ken")).await.0,
        401
    );
    let (status, body) = get("/metrics", &local, Some("Bearer m3trics")).await;
    assert_eq!(status, 200);
    assert!(body.contains("otelcol_receiver_accepted_spans"), "{body}");
}

#[test]
fn an_empty_token_variable_refuses_the_start() {
    let yaml = Yaml {
        api: "bearer_token: '${env:TEST_API_TOKEN}'",
        ..Yaml::default()
    };
    for env in [&[][..], &[("TEST_API_TOKEN", "")][..]] {
        let (code, output) = run_to_exit(&yaml, env, &[]);
        assert_eq!(code, Some(2), "{output}");
        assert!(
            output.contains(
                "extensions.stepline_api.bearer_token: ${env:TEST_API_TOKEN} is empty \
                 (TEST_API_TOKEN unset or empty)"
            ),
            "{output}"
        );
    }
    // The receivers' token too.
    let extensions = token_extension();
    let receiver = Yaml {
        http: "auth: { authenticator: bearertokenauth }",
        extensions: &extensions,
        listed: "bearertokenauth",
        ..Yaml::default()
    };
    let (code, output) = run_to_exit(&receiver, &[], &["--validate-config"]);
    assert_eq!(code, Some(2), "{output}");
    assert!(
        output.contains("extensions.bearertokenauth.token: ${env:TEST_OTLP_TOKEN} is empty"),
        "{output}"
    );
    let (code, output) = run_to_exit(
        &receiver,
        &[("TEST_OTLP_TOKEN", "x")],
        &["--validate-config"],
    );
    assert_eq!(code, Some(0), "{output}");
    // An unreadable certificate is named by its key, by --validate-config as at start.
    let tls = Yaml {
        grpc: "tls: { cert_file: /nonexistent/server.pem, key_file: /nonexistent/server.key }",
        ..Yaml::default()
    };
    for extra in [&["--validate-config"][..], &[][..]] {
        let (code, output) = run_to_exit(&tls, &[], extra);
        assert_eq!(code, Some(2), "{output}");
        assert!(
            output.contains(
                "receivers.otlp.protocols.grpc.tls.cert_file: cannot read /nonexistent/server.pem"
            ),
            "{output}"
        );
    }
}

#[tokio::test]
async fn allow_no_auth_lets_an_empty_token_variable_start_without_a_token() {
    let running = start(
        &Yaml {
            api: "bearer_token: '${env:TEST_API_TOKEN}', allow_no_auth: true",
            ..Yaml::default()
        },
        &[],
    )
    .await;
    let reply = reqwest::get(format!("http://{}/v1/runs", running.ports.api))
        .await
        .expect("GET /v1/runs");
    assert_eq!(reply.status(), 200);
}

/// The stock Python OTLP exporters (HTTP and gRPC), configured only through the standard
/// environment variables, export through TLS with the token; with a wrong token they fail.
#[tokio::test]
async fn python_otlp_exporters_through_tls_and_a_token() {
    let pki = Pki::new();
    let tls = format!(
        "tls: {{ cert_file: '{}', key_file: '{}' }}, auth: {{ authenticator: bearertokenauth }}",
        pki.path("server.pem").display(),
        pki.path("server.key").display()
    );
    let extensions = token_extension();
    let running = start(
        &Yaml {
            grpc: &tls,
            http: &tls,
            extensions: &extensions,
            listed: "bearertokenauth",
            ..Yaml::default()
        },
        &[("TEST_OTLP_TOKEN", OTLP_TOKEN)],
    )
    .await;
    let script = r#"
import json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
if sys.argv[1] == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
else:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

results = []

class Recording(SpanExporter):
    def __init__(self, inner):
        self.inner = inner
    def export(self, spans):
        result = self.inner.export(spans)
        results.append(result.name)
        return result
    def shutdown(self):
        self.inner.shutdown()

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(Recording(OTLPSpanExporter())))
provider.get_tracer("auth-test").start_span("python-span").end()
provider.shutdown()
print(json.dumps(results))
"#;
    let mut exported = 0;
    for (protocol, endpoint) in [
        (
            "http",
            format!("https://localhost:{}/v1/traces", running.ports.http.port()),
        ),
        (
            "grpc",
            format!("https://localhost:{}", running.ports.grpc.port()),
        ),
    ] {
        for (token, expected) in [(OTLP_TOKEN, "SUCCESS"), ("wrong", "FAILURE")] {
            let output = Command::new(support::python())
                .arg("-c")
                .arg(script)
                .arg(protocol)
                .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint)
                .env("OTEL_EXPORTER_OTLP_CERTIFICATE", pki.path("ca.pem"))
                .env(
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    format!("authorization=Bearer%20{token}"),
                )
                .env("OTEL_EXPORTER_OTLP_TIMEOUT", "10")
                // requests lets these override the exporter's own CA file (psf/requests#3829).
                .env_remove("REQUESTS_CA_BUNDLE")
                .env_remove("CURL_CA_BUNDLE")
                .output()
                .expect("run python");
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "{protocol}: {stdout}\n{stderr}");
            let results: Vec<String> = stdout
                .lines()
                .rev()
                .find_map(|line| serde_json::from_str(line).ok())
                .unwrap_or_else(|| panic!("{protocol}: no result line in {stdout}\n{stderr}"));
            assert_eq!(results, [expected], "{protocol} with {token}: {stderr}");
            if expected == "SUCCESS" {
                exported += 1;
            }
        }
    }
    assert_eq!(accepted_spans(&running, None).await, exported);
}
