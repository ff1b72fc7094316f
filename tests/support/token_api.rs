//! The real `stepline` binary with a bearer token on its query API (the shared `Stepline` starts
//! it without one), for the OpenAPI and command-line tests: free ports, a temporary data
//! directory, a real Pydantic AI scenario to load, and the binary's own path to run commands.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use super::{run_script, truncate};

/// A stepline whose `/v1` routes take `Authorization: Bearer <token>`.
pub struct TokenStepline {
    child: Option<Child>,
    tmp: TempDir,
    /// The query API's address.
    pub api: SocketAddr,
    /// The OTLP/HTTP receiver's address.
    pub otlp_http: SocketAddr,
    /// The API's token.
    pub token: String,
}

fn free_ports() -> [SocketAddr; 3] {
    let listeners: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    let address = |i: usize| listeners[i].local_addr().expect("local address");
    [address(0), address(1), address(2)]
}

impl TokenStepline {
    /// Starts the binary with `token` on the API and waits until `/healthz` answers 200.
    pub async fn start(token: &str) -> Self {
        let mut last = String::new();
        for _attempt in 0..3 {
            let tmp = tempfile::Builder::new()
                .prefix("stepline-token-api-")
                .tempdir()
                .expect("temporary directory");
            let [grpc, http, api] = free_ports();
            let config = format!(
                "receivers:\n  otlp:\n    protocols:\n      grpc: {{ endpoint: {grpc} }}\n      http: {{ endpoint: {http} }}\n\
                 processors:\n  stepline: {{ inactivity_timeout: 10m }}\n\
                 extensions:\n  stepline_storage: {{ directory: {dir}, sync: true }}\n  stepline_api: {{ endpoint: {api}, bearer_token: {token} }}\n\
                 service:\n  extensions: [stepline_storage, stepline_api]\n  pipelines:\n\
                 \x20   traces: {{ receivers: [otlp], processors: [stepline], exporters: [] }}\n",
                dir = tmp.path().join("data").display(),
            );
            let config_path = tmp.path().join("collector.yaml");
            std::fs::write(&config_path, config).expect("write collector.yaml");
            let log = File::create(tmp.path().join("stepline.log")).expect("create the log");
            let child = Command::new(env!("CARGO_BIN_EXE_stepline"))
                .arg("--config")
                .arg(&config_path)
                .env("RUST_LOG", "info")
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("clone the log handle"))
                .stderr(log)
                .spawn()
                .expect("spawn the stepline binary");
            let mut me = Self {
                child: Some(child),
                tmp,
                api,
                otlp_http: http,
                token: token.to_string(),
            };
            match me.wait_healthy().await {
                Ok(()) => return me,
                Err(reason) => last = format!("{reason}\n--- log ---\n{}", me.log()),
            }
        }
        panic!("stepline did not become healthy: {last}");
    }

    async fn wait_healthy(&mut self) -> Result<(), String> {
        let url = self.url("/healthz");
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                return Err(format!("stepline exited during start-up with {status}"));
            }
            if let Ok(reply) = client.get(&url).send().await {
                if reply.status() == 200 {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!("{url} did not answer 200 within 60 s"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The API's base URL.
    pub fn base(&self) -> String {
        format!("http://{}", self.api)
    }

    /// The URL of an API path.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.api)
    }

    /// The binary's log so far (cut to its last 6,000 characters).
    pub fn log(&self) -> String {
        let text =
            std::fs::read_to_string(self.tmp.path().join("stepline.log")).unwrap_or_default();
        let start = text.len().saturating_sub(6000);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        text[start..].to_string()
    }

    /// `GET path` with the token: status and body as JSON (null when it is not JSON).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let reply = reqwest::Client::new()
            .get(self.url(path))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = reply.status().as_u16();
        let text = reply.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Runs tests/python/agent_scenario.py (a real Pydantic AI orchestrator with a delegate)
    /// over OTLP/HTTP with `conversation_id`; returns the orchestrator's and the delegate's run
    /// ids once stepline has both runs completed.
    pub async fn load_scenario(&self, conversation_id: &str) -> (String, String) {
        let endpoint = format!("http://{}", self.otlp_http);
        let run = run_script(
            "agent_scenario.py",
            &[
                "--transport",
                "http",
                "--endpoint",
                &endpoint,
                "--conversation-id",
                conversation_id,
            ],
            Duration::from_secs(180),
        )
        .await;
        let line = run.json_line();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, body) = self
                .get(&format!("/v1/runs?conversation_id={conversation_id}"))
                .await;
            let runs = body["runs"].as_array().cloned().unwrap_or_default();
            let done = runs.iter().all(|r| r["status"] == "completed");
            if let (Some(orchestrator), true) = (runs.first(), done) {
                let delegate = line["delegate_run_id"].as_str().unwrap_or_default();
                let (_, delegate_run) = self.get(&format!("/v1/runs/{delegate}")).await;
                if let Some(delegate) = delegate_run["run_id"].as_str() {
                    let orchestrator = orchestrator["run_id"].as_str().unwrap_or_default();
                    return (orchestrator.to_string(), delegate.to_string());
                }
            }
            assert!(
                Instant::now() < deadline,
                "the scenario's runs did not complete in stepline: {}\n--- stepline log ---\n{}",
                truncate(&body.to_string(), 3000),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for TokenStepline {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The path of the Python with the OpenAPI tools (openapi-spec-validator, schemathesis):
/// `STEPLINE_PYTHON_TOOLS`, or `$HOME/.cache/stepline/venv-tools/bin/python`. Missing → the test
/// fails (never skips).
pub fn tools_python() -> PathBuf {
    let path = match std::env::var_os("STEPLINE_PYTHON_TOOLS") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/stepline/venv-tools/bin/python"),
    };
    assert!(
        path.exists(),
        "Python interpreter {} does not exist: the OpenAPI tests need openapi-spec-validator and \
         schemathesis (tests/python/requirements-tools.txt). Run `make test` (it builds the venv \
         and exports STEPLINE_PYTHON_TOOLS).",
        path.display()
    );
    path
}
