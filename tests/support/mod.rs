//! Shared helpers for the end-to-end tests: start the real `stepline` binary on free ports with a
//! temporary data directory, talk to its query API, and run the real Python clients.
//!
//! Every wait is bounded; every failure message says what was asked and what came back, and ends
//! with the tail of stepline's log.

#![allow(dead_code)]

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, BufReader};

pub mod deps;
pub mod token_api;

/// Where the Python end-to-end scripts live.
pub const SCRIPTS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python");

/// How long stepline may take to answer `/healthz` after start.
const STARTUP_DEADLINE: Duration = Duration::from_secs(60);

/// The Python interpreter of the venv that holds pydantic-ai and the OTLP exporters.
///
/// `STEPLINE_PYTHON`, or `$HOME/.cache/stepline/venv/bin/python`. Missing → the test fails (never skips).
pub fn python() -> PathBuf {
    let path = match std::env::var_os("STEPLINE_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            let home = std::env::var_os("HOME").unwrap_or_default();
            PathBuf::from(home).join(".cache/stepline/venv/bin/python")
        }
    };
    assert!(
        path.exists(),
        "Python interpreter {} does not exist: the end-to-end tests need the venv with pydantic-ai and the \
         OTLP exporters. Run `make test` (it creates the venv and exports STEPLINE_PYTHON), or set \
         STEPLINE_PYTHON to a python that has tests/python/requirements.txt installed.",
        path.display()
    );
    path
}

// ---------------------------------------------------------------------------------------------
// The stepline process
// ---------------------------------------------------------------------------------------------

/// Per-test configuration knobs for the generated collector.yaml.
#[derive(Debug, Clone)]
pub struct Options {
    /// `processors.stepline.inactivity_timeout`.
    pub inactivity_timeout: String,
    /// `receivers.otlp.protocols.http.max_request_body_size` (bytes), when set.
    pub max_request_body_size: Option<u64>,
    /// The `exporters:` section body (YAML, indented by two spaces), when set.
    pub exporters: Option<String>,
    /// The exporter ids every pipeline lists (e.g. `[otlp/a, otlphttp/b]`); `[]` when unset.
    pub pipeline_exporters: Option<String>,
    /// More keys under `service:` (YAML, indented by two spaces), e.g. `telemetry:`.
    pub service_extra: Option<String>,
    /// `extensions.stepline_storage.media` as a YAML flow mapping (e.g. `{url: memory://}`), when set.
    pub media: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            inactivity_timeout: "10m".to_string(),
            max_request_body_size: None,
            exporters: None,
            pipeline_exporters: None,
            service_extra: None,
            media: None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub api: SocketAddr,
}

fn pick_ports() -> Ports {
    // Hold all three listeners at once so the three ports differ, then release them.
    let a = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let b = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let c = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let ports = Ports {
        grpc: a.local_addr().expect("local addr"),
        http: b.local_addr().expect("local addr"),
        api: c.local_addr().expect("local addr"),
    };
    drop((a, b, c));
    ports
}

/// A running `stepline` binary with its own temporary directory (config, log, data).
pub struct Stepline {
    child: Option<Child>,
    pub ports: Ports,
    pub options: Options,
    tmp: TempDir,
    starts: u32,
    http: reqwest::Client,
}

/// What the API answered: status and body (parsed as JSON when it is JSON).
#[derive(Debug, Clone)]
pub struct Reply {
    pub method: &'static str,
    pub url: String,
    pub status: u16,
    pub content_type: String,
    pub text: String,
    pub json: Option<Value>,
}

impl Reply {
    /// The JSON body, or a panic that shows the request and the raw answer.
    pub fn json(&self) -> &Value {
        match &self.json {
            Some(v) => v,
            None => panic!(
                "{} {} answered {} with a body that is not JSON: {:?}",
                self.method,
                self.url,
                self.status,
                truncate(&self.text, 2000)
            ),
        }
    }

    /// `{"error": "<message>"}` — the message, or a panic.
    pub fn error_message(&self) -> String {
        match self.json().get("error") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            other => panic!(
                "{} {} answered {} without a non-empty {{\"error\": ...}} body (error field: {:?}); body: {}",
                self.method,
                self.url,
                self.status,
                other,
                truncate(&self.text, 2000)
            ),
        }
    }
}

impl Stepline {
    /// Starts stepline with default options.
    pub async fn start() -> Self {
        Self::start_with(Options::default()).await
    }

    /// Starts stepline with the given options, in a fresh temporary directory.
    pub async fn start_with(options: Options) -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("stepline-e2e-")
            .tempdir()
            .expect("create a temporary directory for stepline");
        let mut me = Self {
            child: None,
            ports: pick_ports(),
            options,
            tmp,
            starts: 0,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("build reqwest client"),
        };
        me.launch().await;
        me
    }

    pub fn data_dir(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    fn config_path(&self) -> PathBuf {
        self.tmp
            .path()
            .join(format!("collector-{}.yaml", self.starts))
    }

    fn log_path(&self) -> PathBuf {
        self.tmp.path().join("stepline.log")
    }

    fn config_yaml(&self) -> String {
        let http_limit = match self.options.max_request_body_size {
            Some(n) => format!(", max_request_body_size: {n}"),
            None => String::new(),
        };
        let exporters = match &self.options.exporters {
            Some(body) => format!("exporters:\n{body}"),
            None => String::new(),
        };
        let used = self.options.pipeline_exporters.as_deref().unwrap_or("[]");
        let service_extra = self.options.service_extra.as_deref().unwrap_or("");
        let media = match &self.options.media {
            Some(flow) => format!(", media: {flow}"),
            None => String::new(),
        };
        format!(
            "{exporters}receivers:\n  otlp:\n    protocols:\n      grpc: {{ endpoint: {grpc} }}\n      http: {{ endpoint: {http}{http_limit} }}\n\
             processors:\n  stepline: {{ inactivity_timeout: {timeout} }}\n\
             extensions:\n  stepline_storage: {{ directory: {dir}, sync: true{media} }}\n  stepline_api: {{ endpoint: {api} }}\n\
             service:\n{service_extra}  extensions: [stepline_storage, stepline_api]\n  pipelines:\n\
             \x20   traces: {{ receivers: [otlp], processors: [stepline], exporters: {used} }}\n\
             \x20   logs: {{ receivers: [otlp], processors: [stepline], exporters: {used} }}\n\
             \x20   metrics: {{ receivers: [otlp], processors: [stepline], exporters: {used} }}\n",
            grpc = self.ports.grpc,
            http = self.ports.http,
            api = self.ports.api,
            timeout = self.options.inactivity_timeout,
            dir = self.data_dir().display(),
        )
    }

    /// Writes the config and starts the binary; retries with new ports if it dies at start-up
    /// (another process may have taken a port between picking and binding).
    async fn launch(&mut self) {
        let mut last_failure = String::new();
        for _attempt in 0..3 {
            self.starts += 1;
            let config = self.config_path();
            std::fs::write(&config, self.config_yaml()).expect("write collector.yaml");
            let log = File::options()
                .create(true)
                .append(true)
                .open(self.log_path())
                .expect("open stepline log");
            let log_err = log.try_clone().expect("clone log handle");
            let child = Command::new(env!("CARGO_BIN_EXE_stepline"))
                .arg("--config")
                .arg(&config)
                .env(
                    "RUST_LOG",
                    std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
                )
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log_err)
                .spawn()
                .expect("spawn the stepline binary");
            self.child = Some(child);
            match self.wait_healthy().await {
                Ok(()) => return,
                Err(reason) => {
                    last_failure = reason;
                    self.kill();
                    if !last_failure.contains("exited") {
                        break;
                    }
                    self.ports = pick_ports();
                }
            }
        }
        panic!(
            "stepline did not become healthy: {last_failure}\nconfig:\n{}\n--- stepline log ---\n{}",
            self.config_yaml(),
            self.log_tail()
        );
    }

    async fn wait_healthy(&mut self) -> Result<(), String> {
        let url = self.api_url("/healthz");
        let deadline = Instant::now() + STARTUP_DEADLINE;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("stepline exited during start-up with {status}"));
                }
            }
            if let Ok(resp) = self.http.get(&url).send().await {
                if resp.status().as_u16() == 200 {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "GET {url} did not answer 200 within {STARTUP_DEADLINE:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILL (std's `Child::kill` sends SIGKILL on Unix) and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then wait (up to `timeout`) for the process to exit; SIGKILL if it does not.
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        child.wait().ok()
    }

    /// Starts again (after [`Stepline::kill`] or [`Stepline::terminate`]) on the same data
    /// directory, on fresh ports.
    pub async fn start_again(&mut self) {
        self.kill();
        self.ports = pick_ports();
        self.launch().await;
    }

    /// The process id of the running binary.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL and start again on the same data directory (on fresh ports).
    pub async fn restart(&mut self) {
        self.kill();
        self.ports = pick_ports();
        self.launch().await;
    }

    /// The last part of stepline's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let start = text.len().saturating_sub(6000);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        text[start..].to_string()
    }

    pub fn api_url(&self, path: &str) -> String {
        format!("http://{}{}", self.ports.api, path)
    }

    /// Base URL of the OTLP/HTTP receiver (the script appends /v1/traces).
    pub fn otlp_http_url(&self) -> String {
        format!("http://{}", self.ports.http)
    }

    /// URL of the OTLP/gRPC receiver.
    pub fn otlp_grpc_url(&self) -> String {
        format!("http://{}", self.ports.grpc)
    }

    pub fn client(&self) -> &reqwest::Client {
        &self.http
    }

    async fn reply(&self, method: &'static str, url: String, resp: reqwest::Response) -> Reply {
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = resp.text().await.unwrap_or_default();
        let json = serde_json::from_str(&text).ok();
        Reply {
            method,
            url,
            status,
            content_type,
            text,
            json,
        }
    }

    /// A value from `/metrics`: the first line that starts with `series` and a space (a
    /// series with labels is named with them, e.g. `name{cache="history"}`).
    pub async fn metric(&self, series: &str) -> u64 {
        let reply = self.get("/metrics").await;
        assert_eq!(reply.status, 200, "/metrics: {}", reply.text);
        reply
            .text
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in /metrics:\n{}", reply.text))
    }

    /// `GET` an API path; any status.
    pub async fn get(&self, path: &str) -> Reply {
        let url = self.api_url(path);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url} failed: {e}\n{}", self.log_tail()));
        self.reply("GET", url, resp).await
    }

    /// `POST` an API path with an empty body; any status.
    pub async fn post(&self, path: &str) -> Reply {
        let url = self.api_url(path);
        let resp = self
            .http
            .post(&url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {url} failed: {e}\n{}", self.log_tail()));
        self.reply("POST", url, resp).await
    }

    /// `GET` an API path and require 200 + JSON.
    pub async fn get_ok(&self, path: &str) -> Value {
        let reply = self.get(path).await;
        assert_eq!(
            reply.status,
            200,
            "GET {} answered {} (expected 200): {}\n--- stepline log ---\n{}",
            reply.url,
            reply.status,
            truncate(&reply.text, 3000),
            self.log_tail()
        );
        reply.json().clone()
    }

    /// `GET` a list endpoint and return the array under `key` (e.g. "runs", "events").
    pub async fn get_list(&self, path: &str, key: &str) -> Vec<Value> {
        let body = self.get_ok(path).await;
        match body.get(key) {
            Some(Value::Array(items)) => items.clone(),
            other => panic!(
                "GET {path}: expected {{\"{key}\": [...]}}, the {key:?} field is {other:?}; body: {}",
                truncate(&body.to_string(), 3000)
            ),
        }
    }

    /// Polls `probe` every 100 ms until it returns `Some`, or panics after `timeout` with `what`
    /// and the last thing seen.
    pub async fn wait_for<T, F, Fut>(&self, what: &str, timeout: Duration, mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match probe().await {
                Ok(v) => return v,
                Err(seen) => seen,
            };
            if Instant::now() > deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {what}; last seen: {last}\n--- stepline log ---\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Stepline {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------------------------
// Python clients
// ---------------------------------------------------------------------------------------------

/// Output of a finished Python script.
pub struct ScriptRun {
    pub command: String,
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl ScriptRun {
    /// The last non-empty stdout line parsed as JSON; panics with both streams if the script failed.
    pub fn json_line(&self) -> Value {
        assert!(
            self.success,
            "`{}` failed with exit code {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command,
            self.code,
            truncate(&self.stdout, 4000),
            truncate(&self.stderr, 8000)
        );
        let line = self
            .stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_else(|| {
                panic!(
                    "`{}` printed nothing on stdout; stderr:\n{}",
                    self.command,
                    truncate(&self.stderr, 8000)
                )
            });
        serde_json::from_str(line).unwrap_or_else(|e| {
            panic!(
                "`{}` printed a last line that is not JSON ({e}): {}",
                self.command,
                truncate(line, 2000)
            )
        })
    }
}

/// The Python interpreter of the separate venv with Pydantic AI 1.x
/// (tests/python/requirements-pydantic-ai-1.txt): `STEPLINE_PYTHON_PYDANTIC_AI_1`, or
/// `$HOME/.cache/stepline/venv-pydantic-ai-1/bin/python`. Missing → the test fails.
pub fn python_pydantic_ai_1() -> PathBuf {
    let path = match std::env::var_os("STEPLINE_PYTHON_PYDANTIC_AI_1") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            let home = std::env::var_os("HOME").unwrap_or_default();
            PathBuf::from(home).join(".cache/stepline/venv-pydantic-ai-1/bin/python")
        }
    };
    assert!(
        path.exists(),
        "Python interpreter {} does not exist: run `make test` (it builds the Pydantic AI 1.x venv and \
         exports STEPLINE_PYTHON_PYDANTIC_AI_1).",
        path.display()
    );
    path
}

fn script_command(script: &str, args: &[&str]) -> (tokio::process::Command, String) {
    script_command_with(python(), script, args)
}

fn script_command_with(
    python: PathBuf,
    script: &str,
    args: &[&str],
) -> (tokio::process::Command, String) {
    let path = Path::new(SCRIPTS_DIR).join(script);
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(&path)
        .args(args)
        .current_dir(SCRIPTS_DIR)
        .env("PYTHONUNBUFFERED", "1")
        // Keep the clients off any collector configured in the developer's environment.
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let shown = format!("{} {} {}", python.display(), path.display(), args.join(" "));
    (cmd, shown)
}

/// Runs a script to completion within `timeout`.
pub async fn run_script(script: &str, args: &[&str], timeout: Duration) -> ScriptRun {
    run_script_with(python(), script, args, timeout).await
}

/// Runs a script with the given interpreter to completion within `timeout`.
pub async fn run_script_with(
    python: PathBuf,
    script: &str,
    args: &[&str],
    timeout: Duration,
) -> ScriptRun {
    let (mut cmd, shown) = script_command_with(python, script, args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("could not start `{shown}`: {e}"));
    let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => panic!("waiting for `{shown}` failed: {e}"),
        // Dropping the future drops the child, which is killed (kill_on_drop).
        Err(_) => panic!("`{shown}` did not finish within {timeout:?}"),
    };
    ScriptRun {
        command: shown,
        success: output.status.success(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A Python script left running (the crash agent). Killed with SIGKILL on drop.
pub struct RunningScript {
    pub command: String,
    child: tokio::process::Child,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    stderr_path: PathBuf,
    _stderr_dir: TempDir,
    pub seen: Vec<String>,
}

impl RunningScript {
    pub async fn spawn(script: &str, args: &[&str]) -> Self {
        let (mut cmd, shown) = script_command(script, args);
        let dir = tempfile::tempdir().expect("temp dir for script stderr");
        let stderr_path = dir.path().join("stderr.txt");
        let stderr = File::create(&stderr_path).expect("create stderr file");
        cmd.stdout(Stdio::piped()).stderr(stderr);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("could not start `{shown}`: {e}"));
        let stdout = child.stdout.take().expect("stdout of the child is piped");
        Self {
            command: shown,
            child,
            stdout: BufReader::new(stdout).lines(),
            stderr_path,
            _stderr_dir: dir,
            seen: Vec::new(),
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Reads stdout lines until one starts with `prefix`; returns the rest of that line.
    pub async fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let next = tokio::time::timeout_at(deadline, self.stdout.next_line()).await;
            match next {
                Ok(Ok(Some(line))) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_string();
                    }
                    self.seen.push(line);
                }
                Ok(Ok(None)) => panic!(
                    "`{}` closed stdout before printing {prefix:?}; stdout: {:?}\n--- stderr ---\n{}",
                    self.command,
                    self.seen,
                    truncate(&self.stderr(), 8000)
                ),
                Ok(Err(e)) => panic!("reading stdout of `{}`: {e}", self.command),
                Err(_) => panic!(
                    "`{}` did not print {prefix:?} within {timeout:?}; stdout: {:?}\n--- stderr ---\n{}",
                    self.command,
                    self.seen,
                    truncate(&self.stderr(), 8000)
                ),
            }
        }
    }

    /// SIGKILL and reap.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

/// What `agent_scenario.py` prints.
#[derive(Debug, Clone, Deserialize)]
pub struct Scenario {
    pub run_id: String,
    pub conversation_id: String,
    pub delegate_run_id: Option<String>,
    pub delegate_conversation_id: Option<String>,
    pub output: String,
    pub all_messages: Vec<Value>,
    pub export: ExportStats,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ExportStats {
    pub ok_batches: u64,
    pub failed_batches: u64,
    pub exported_spans: u64,
    pub flushed: bool,
}

/// Spans the scenario produces: orchestrator run + 4 chats + 4 tools, researcher run + 1 chat.
pub const SCENARIO_SPANS: u64 = 11;

/// Runs `agent_scenario.py` against `stepline` over `transport` ("http" or "grpc") and checks that
/// every span was exported and acknowledged.
pub async fn run_scenario(stepline: &Stepline, transport: &str, conversation_id: &str) -> Scenario {
    let endpoint = match transport {
        "http" => stepline.otlp_http_url(),
        "grpc" => stepline.otlp_grpc_url(),
        other => panic!("unknown transport {other}"),
    };
    let run = run_script(
        "agent_scenario.py",
        &[
            "--transport",
            transport,
            "--endpoint",
            &endpoint,
            "--conversation-id",
            conversation_id,
        ],
        Duration::from_secs(180),
    )
    .await;
    let value = run.json_line();
    let scenario: Scenario = serde_json::from_value(value.clone()).unwrap_or_else(|e| {
        panic!(
            "agent_scenario.py printed an unexpected shape ({e}): {}",
            truncate(&value.to_string(), 2000)
        )
    });
    assert!(
        scenario.export.failed_batches == 0
            && scenario.export.flushed
            && scenario.export.exported_spans == SCENARIO_SPANS,
        "the OTLP {transport} exporter did not get every span acknowledged by stepline: {:?} \
         (expected {SCENARIO_SPANS} spans, 0 failed batches)\n--- agent stderr ---\n{}\n--- stepline log ---\n{}",
        scenario.export,
        truncate(&run.stderr, 6000),
        stepline.log_tail()
    );
    assert_eq!(scenario.output, "Booked. Weather 18C.");
    assert_eq!(
        scenario.all_messages.len(),
        8,
        "Pydantic AI itself reported an unexpected history"
    );
    scenario
}

// ---------------------------------------------------------------------------------------------
// Pydantic AI history comparison
// ---------------------------------------------------------------------------------------------

/// Fields of Pydantic AI's `ModelMessage` JSON that the telemetry does not carry, so a history
/// rebuilt from spans cannot reproduce them. Found by comparing stepline's continuation with
/// `result.all_messages()`; keep in sync with the README.
///
/// - message and part `timestamp`: spans carry start/end times of the model request and the tool,
///   not the instants Pydantic AI stamps on each message and part.
/// - response `model_id`: the string the model was selected by; spans carry only the model name.
///
/// Both sides are compared after a Pydantic AI load/dump round trip, so fields left out at their
/// default (null, 0, "complete") compare equal. Usage beyond input/output tokens (cache, audio,
/// reasoning) is not carried either, but it is 0 for the FunctionModel, so it is still compared.
pub const UNCARRIED_MESSAGE_FIELDS: &[&str] = &["timestamp", "model_id"];
pub const UNCARRIED_PART_FIELDS: &[&str] = &["timestamp"];

/// Removes the fields listed above from a Pydantic AI message.
pub fn strip_uncarried(message: &Value) -> Value {
    let mut message = message.clone();
    if let Value::Object(map) = &mut message {
        for key in UNCARRIED_MESSAGE_FIELDS {
            map.remove(*key);
        }
        if let Some(Value::Array(parts)) = map.get_mut("parts") {
            for part in parts {
                if let Value::Object(part) = part {
                    for key in UNCARRIED_PART_FIELDS {
                        part.remove(*key);
                    }
                }
            }
        }
    }
    message
}

/// Compares two Pydantic AI histories message by message after [`strip_uncarried`]; returns a
/// description of every difference (empty when equal).
pub fn history_differences(expected: &[Value], actual: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    if expected.len() != actual.len() {
        out.push(format!(
            "message count: expected {} (Pydantic AI's all_messages), got {} (continuation)",
            expected.len(),
            actual.len()
        ));
    }
    for (i, (e, a)) in expected.iter().zip(actual).enumerate() {
        let (e, a) = (strip_uncarried(e), strip_uncarried(a));
        if e != a {
            out.push(format!(
                "message {i} differs:\n{}\n  expected: {}\n  got:      {}",
                field_differences(&e, &a, &format!("[{i}]")).join("\n"),
                e,
                a
            ));
        }
    }
    out
}

fn field_differences(e: &Value, a: &Value, path: &str) -> Vec<String> {
    match (e, a) {
        (Value::Object(em), Value::Object(am)) => {
            let mut out = Vec::new();
            for (k, ev) in em {
                match am.get(k) {
                    Some(av) => out.extend(field_differences(ev, av, &format!("{path}.{k}"))),
                    None => out.push(format!("  {path}.{k}: expected {ev}, missing")),
                }
            }
            for (k, av) in am {
                if !em.contains_key(k) {
                    out.push(format!("  {path}.{k}: not expected, got {av}"));
                }
            }
            out
        }
        (Value::Array(ea), Value::Array(aa)) if ea.len() == aa.len() => ea
            .iter()
            .zip(aa)
            .enumerate()
            .flat_map(|(i, (ev, av))| field_differences(ev, av, &format!("{path}[{i}]")))
            .collect(),
        _ if e == a => Vec::new(),
        _ => vec![format!("  {path}: expected {e}, got {a}")],
    }
}

// ---------------------------------------------------------------------------------------------
// Small assertions on API values
// ---------------------------------------------------------------------------------------------

/// `value[key]` as a string, or a panic naming the object.
pub fn str_field<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_else(|| {
        panic!(
            "expected a string field {key:?} in {}",
            truncate(&value.to_string(), 2000)
        )
    })
}

/// RFC 3339 UTC with nanoseconds, fixed width: `2026-11-22T10:00:00.123456789Z`.
pub fn assert_timestamp(value: &Value, key: &str, context: &str) {
    let ts = str_field(value, key);
    let b = ts.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.into_iter().all(|i| b[i].is_ascii_digit());
    let ok = b.len() == 30
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'.'
        && digits(20..29)
        && b[29] == b'Z';
    assert!(
        ok,
        "{context}: {key} = {ts:?} is not RFC 3339 UTC with nanoseconds (e.g. 2026-11-22T10:00:00.123456789Z)"
    );
}

/// A JSON value that may be a JSON-encoded string (arguments are sometimes re-serialised).
pub fn as_json_value(value: &Value) -> Value {
    match value {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| value.clone()),
        other => other.clone(),
    }
}

pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &s[..end], s.len())
}

/// Percent-encodes a path segment or query value (ids here are UUIDs and simple names, but be safe).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
