//! The run explorer (`/ui/`) in a real browser: Debian's Chromium driven headless by Selenium
//! (`tests/python/ui_check.py`) against the real binary, after a real Pydantic AI scenario and a
//! Pydantic AI agent killed mid-tool.
//!
//! Needs `chromium` and `chromium-driver` (`make deps` installs them; run as root this test
//! installs them itself when missing) and the tools venv with Selenium (`make venv-tools`,
//! `STEPLINE_PYTHON_TOOLS`). It skips, saying why, only when Chromium is missing and cannot be
//! installed (not root, outside CI). With `STEPLINE_UI_SCREENSHOTS=1` the screenshots are written
//! to `docs/` (the ones the README shows); otherwise to a temporary directory.

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{
    encode, run_scenario, run_script_with, str_field, truncate, RunningScript, Stepline,
};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The Python of the tools venv (Selenium): `STEPLINE_PYTHON_TOOLS`, or
/// `$HOME/.cache/stepline/venv-tools/bin/python`. Missing → the test fails.
fn python_tools() -> PathBuf {
    let path = match std::env::var_os("STEPLINE_PYTHON_TOOLS") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            let home = std::env::var_os("HOME").unwrap_or_default();
            PathBuf::from(home).join(".cache/stepline/venv-tools/bin/python")
        }
    };
    assert!(
        path.exists(),
        "Python interpreter {} does not exist: the browser tests need the tools venv with Selenium. \
         Run `make test` (it creates it and exports STEPLINE_PYTHON_TOOLS), or set STEPLINE_PYTHON_TOOLS \
         to a python that has tests/python/requirements-tools.txt installed.",
        path.display()
    );
    path
}

/// `true` when Chromium and its driver are there, installing them with apt when missing and we
/// are root; `false` (with the reason printed) when they cannot be had. In CI a missing browser
/// is a failure, never a skip.
fn chromium_ready() -> bool {
    let present = || Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists();
    if present() {
        return true;
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if root {
        eprintln!("ui: {CHROMIUM} or {CHROMEDRIVER} missing; installing chromium chromium-driver with apt");
        let status = Command::new("sh")
            .arg("-c")
            .arg("apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver")
            .status();
        assert!(
            status.as_ref().is_ok_and(|s| s.success()) && present(),
            "apt-get install chromium chromium-driver failed ({status:?})"
        );
        return true;
    }
    let message = format!(
        "SKIPPED: the run explorer's browser tests need {CHROMIUM} and {CHROMEDRIVER}, which are missing \
         and cannot be installed without root; run `sudo apt-get install chromium chromium-driver` \
         (or `make deps` as root)"
    );
    assert!(
        std::env::var_os("CI").is_none(),
        "{message} (CI must run them)"
    );
    eprintln!("{message}");
    false
}

/// Where the screenshots go: `docs/` with `STEPLINE_UI_SCREENSHOTS=1`, else `tmp`.
fn screenshot_dir(tmp: &Path) -> PathBuf {
    if std::env::var("STEPLINE_UI_SCREENSHOTS").is_ok_and(|v| v == "1") {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs")
    } else {
        tmp.to_path_buf()
    }
}

/// Runs ui_check.py with `args`; returns its `UI_CHECK` report or panics with its output.
async fn ui_check(stepline_log: impl Fn() -> String, args: &[&str]) -> Value {
    let run = run_script_with(
        python_tools(),
        "ui_check.py",
        args,
        Duration::from_secs(240),
    )
    .await;
    let line = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("UI_CHECK "))
        .map(str::to_owned);
    match (run.success, line) {
        (true, Some(line)) => serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("UI_CHECK line is not JSON ({e}): {line}")),
        _ => panic!(
            "`{}` failed (exit {:?})\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- stepline log ---\n{}",
            run.command,
            run.code,
            truncate(&run.stdout, 6000),
            truncate(&run.stderr, 12000),
            stepline_log()
        ),
    }
}

/// A Pydantic AI agent killed inside its `charge_card` tool (crash_agent.py), then abandoned:
/// returns the run id once the API shows `call_slow1` as `unknown_after_crash`.
async fn crashed_run(stepline: &Stepline) -> String {
    let mut agent = RunningScript::spawn(
        "crash_agent.py",
        &[
            "--transport",
            "http",
            "--endpoint",
            &stepline.otlp_http_url(),
            "--conversation-id",
            "conv-ui-crash",
        ],
    )
    .await;
    agent
        .wait_for_line("TOOL_STARTED", Duration::from_secs(120))
        .await;
    let path = "/v1/runs?conversation_id=conv-ui-crash";
    let run_id = stepline
        .wait_for(
            "the crashed run with the charge_card request",
            Duration::from_secs(30),
            || async {
                let reply = stepline.get(path).await;
                let run_id = reply
                    .json
                    .as_ref()
                    .and_then(|b| b["runs"][0]["run_id"].as_str());
                let Some(run_id) = run_id.map(str::to_owned) else {
                    return Err(format!("GET {path} → {} {}", reply.status, reply.text));
                };
                let effects = stepline
                    .get(&format!("/v1/runs/{}/effects", encode(&run_id)))
                    .await;
                if effects.text.contains("call_slow1") && effects.text.contains("call_fast1") {
                    Ok(run_id)
                } else {
                    Err(format!("effects of {run_id}: {}", effects.text))
                }
            },
        )
        .await;
    agent.kill().await;
    let reply = stepline
        .post(&format!("/v1/runs/{}/abandon", encode(&run_id)))
        .await;
    assert_eq!(
        reply.status, 200,
        "abandon answered {}: {}",
        reply.status, reply.text
    );
    run_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_explorer_in_chromium() {
    if !chromium_ready() {
        return;
    }
    let stepline = Stepline::start().await;
    let scenario = run_scenario(&stepline, "http", "conv-ui").await;
    let delegate = scenario
        .delegate_run_id
        .clone()
        .expect("the scenario's researcher run");
    let orchestrator = stepline
        .get_ok(&format!("/v1/runs/{}", encode(&scenario.run_id)))
        .await;
    let orchestrator = str_field(&orchestrator, "run_id").to_string();
    let delegate = stepline
        .get_ok(&format!("/v1/runs/{}", encode(&delegate)))
        .await;
    let delegate = str_field(&delegate, "run_id").to_string();
    let crashed = crashed_run(&stepline).await;

    let tmp = tempfile::tempdir().expect("temporary directory");
    let shots = screenshot_dir(tmp.path());
    let ui = stepline.api_url("/ui/");
    let api = stepline.api_url("");
    let otlp = stepline.otlp_http_url();
    let runs = format!("{orchestrator},{delegate},{crashed}");
    let shots_arg = shots.display().to_string();
    let report = ui_check(
        || stepline.log_tail(),
        &[
            "--ui",
            &ui,
            "--api",
            &api,
            "--otlp",
            &otlp,
            "--runs",
            &runs,
            "--orchestrator",
            &orchestrator,
            "--delegate",
            &delegate,
            "--crashed",
            &crashed,
            "--unresolved-call",
            "call_slow1",
            "--settled-call",
            "call_fast1",
            "--screenshots",
            &shots_arg,
            "--chromium",
            CHROMIUM,
            "--chromedriver",
            CHROMEDRIVER,
        ],
    )
    .await;
    let checks = report["checks"].as_array().cloned().unwrap_or_default();
    eprintln!("ui checks: {}", Value::Array(checks.clone()));
    assert!(
        checks.len() >= 7,
        "ui_check.py reported too few checks: {report}"
    );
    for name in ["ui-runs.png", "ui-run.png", "ui-continuation.png"] {
        let bytes = std::fs::read(shots.join(name)).unwrap_or_default();
        assert!(
            bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
            "screenshot {name}: {} bytes",
            bytes.len()
        );
    }
}

/// A stepline whose API requires a bearer token (tests/support has no option for one).
struct TokenStepline {
    child: Child,
    api: String,
    otlp: String,
    tmp: tempfile::TempDir,
}

impl TokenStepline {
    async fn start(token: &str) -> Self {
        let tmp = tempfile::tempdir().expect("temporary directory");
        // Hold the three listeners at once so the ports differ, then let stepline have them.
        let listeners: Vec<TcpListener> = (0..3)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
            .collect();
        let port = |i: usize| listeners[i].local_addr().expect("a bound port");
        let (grpc, http, api) = (port(0), port(1), port(2));
        drop(listeners);
        let config = tmp.path().join("collector.yaml");
        std::fs::write(
            &config,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      grpc: {{ endpoint: {grpc} }}\n      http: {{ endpoint: {http} }}\n\
                 processors:\n  stepline: {{}}\n\
                 extensions:\n  stepline_storage: {{ directory: {dir} }}\n  stepline_api: {{ endpoint: {api}, bearer_token: {token} }}\n\
                 service:\n  extensions: [stepline_storage, stepline_api]\n  pipelines:\n\
                 \x20   traces: {{ receivers: [otlp], processors: [stepline], exporters: [] }}\n\
                 \x20   logs: {{ receivers: [otlp], processors: [stepline], exporters: [] }}\n\
                 \x20   metrics: {{ receivers: [otlp], processors: [stepline], exporters: [] }}\n",
                dir = tmp.path().join("data").display(),
            ),
        )
        .expect("write collector.yaml");
        let log = std::fs::File::create(tmp.path().join("stepline.log")).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_stepline"))
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("start stepline");
        let me = Self {
            child,
            api: format!("http://{api}"),
            otlp: format!("http://{http}"),
            tmp,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let client = reqwest::Client::new();
        loop {
            let health = client.get(format!("{}/healthz", me.api)).send().await;
            if health.is_ok_and(|r| r.status() == 200) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "stepline did not answer /healthz: {}",
                me.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        me
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("stepline.log")).unwrap_or_default()
    }
}

impl Drop for TokenStepline {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_explorer_asks_for_the_api_token() {
    if !chromium_ready() {
        return;
    }
    let stepline = TokenStepline::start("ui-s3cret").await;
    // The page itself is served without the token; the data is not.
    let client = reqwest::Client::new();
    let page = client
        .get(format!("{}/ui/", stepline.api))
        .send()
        .await
        .expect("GET /ui/");
    assert_eq!(page.status(), 200);
    let runs = client
        .get(format!("{}/v1/runs", stepline.api))
        .send()
        .await
        .expect("GET /v1/runs");
    assert_eq!(runs.status(), 401);

    let tmp = tempfile::tempdir().expect("temporary directory");
    let ui = format!("{}/ui/", stepline.api);
    let shots = tmp.path().display().to_string();
    let report = ui_check(
        || stepline.log(),
        &[
            "--only-token",
            "--token",
            "ui-s3cret",
            "--ui",
            &ui,
            "--api",
            &stepline.api,
            "--otlp",
            &stepline.otlp,
            "--screenshots",
            &shots,
            "--chromium",
            CHROMIUM,
            "--chromedriver",
            CHROMEDRIVER,
        ],
    )
    .await;
    assert_eq!(
        report["checks"].as_array().map(Vec::len),
        Some(2),
        "token prompt and an authorised data request: {report}"
    );
}
