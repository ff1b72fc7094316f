//! The Python client helpers (`clients/python`) and the Python examples (`examples/python`),
//! end to end: the real `stepline` binary, the real frameworks from PyPI (scripted models, no
//! network to a provider), the stock OTLP exporters, and the package put on the path
//! (`PYTHONPATH=clients/python/src`).
//!
//! - each framework's follow-up turn reads the first turn's history through its helper
//!   (`pydantic_ai_history`, `StepLineSession`, `strands_messages`), and its model sees the first
//!   turn's messages followed by the new prompt;
//! - the typed client's answers equal the API's JSON, and its errors carry status and message;
//! - `pip install --no-deps --target <tmp> clients/python` installs an importable package;
//! - `examples/python/crash_and_resume.py` and `examples/python/in_front_of_a_backend/` run
//!   as a user would run them (the backend is an OTLP/HTTP sink in this test).

mod support;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{encode, history_differences, python, str_field, truncate, Stepline};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// How long one Python script may take (imports of the frameworks are slow on a busy machine).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

fn repo_path(relative: &str) -> PathBuf {
    Path::new(REPO).join(relative)
}

/// `PYTHONPATH` with the client package's sources and the test scripts' shared modules.
fn python_path() -> String {
    format!(
        "{}:{}",
        repo_path("clients/python/src").display(),
        repo_path("tests/python").display()
    )
}

/// What a Python process printed, and how it ended.
struct Ran {
    command: String,
    success: bool,
    stdout: String,
    stderr: String,
}

impl Ran {
    /// The last non-empty stdout line as JSON; panics with both streams if the script failed.
    fn json(&self) -> Value {
        assert!(
            self.success,
            "`{}` failed\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command,
            truncate(&self.stdout, 4000),
            truncate(&self.stderr, 8000)
        );
        let line = self
            .stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default();
        serde_json::from_str(line).unwrap_or_else(|e| {
            panic!(
                "`{}` did not end with a JSON line ({e}): {}\n--- stderr ---\n{}",
                self.command,
                truncate(&self.stdout, 4000),
                truncate(&self.stderr, 4000)
            )
        })
    }
}

/// Runs `python <script> <args>` (script relative to the repository) with the package on the
/// path and `env` set, within [`SCRIPT_TIMEOUT`].
async fn run_python(script: &str, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let path = repo_path(script);
    let dir = path
        .parent()
        .expect("a script has a directory")
        .to_path_buf();
    let mut cmd = tokio::process::Command::new(python());
    cmd.arg(&path)
        .args(args)
        .current_dir(dir)
        .env("PYTHONPATH", python_path())
        .env("PYTHONUNBUFFERED", "1")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("STEPLINE_URL")
        .env_remove("STEPLINE_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let command = format!(
        "{} {} {}",
        python().display(),
        path.display(),
        args.join(" ")
    );
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("could not start `{command}`: {e}"));
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("`{command}` did not finish within {SCRIPT_TIMEOUT:?}"))
        .unwrap_or_else(|e| panic!("waiting for `{command}`: {e}"));
    Ran {
        command,
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs the client script `script` against `stepline` (`--endpoint`, `--api`, then `id_flag id`),
/// checks that it exported every batch, and gives its JSON output.
async fn run_client(stepline: &Stepline, script: &str, id_flag: &str, id: &str) -> Value {
    let otlp = stepline.otlp_http_url();
    let api = stepline.api_url("");
    let args: [&str; 6] = ["--endpoint", &otlp, "--api", &api, id_flag, id];
    let out = run_python(script, &args, &[]).await.json();
    assert_exported(&out);
    out
}

fn assert_exported(out: &Value) {
    let export = &out["export"];
    assert!(
        export["failed_batches"] == 0 && export["flushed"] == true && export["ok_batches"] != 0,
        "not every batch was acknowledged by stepline: {export}"
    );
}

fn array(value: &Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Pydantic AI, and the typed client against the API
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pydantic_ai_follow_up_turn_gets_the_history_from_pydantic_ai_history() {
    let stepline = Stepline::start().await;
    let conversation = "clients-pydantic-ai";
    let out = run_client(
        &stepline,
        "tests/python/clients_pydantic_ai.py",
        "--conversation-id",
        conversation,
    )
    .await;

    // The helper gave Pydantic AI's own first turn back (as loaded by ModelMessagesTypeAdapter).
    let turn1 = array(&out["turn1_messages"]);
    let history = array(&out["history"]);
    assert_eq!(
        turn1.len(),
        4,
        "request, tool call, tool return, answer: {out}"
    );
    let differences = history_differences(&turn1, &history);
    assert!(
        differences.is_empty(),
        "pydantic_ai_history differs from the first turn's all_messages():\n{}",
        differences.join("\n")
    );
    assert_eq!(
        out["history_types"],
        json!(["ModelRequest", "ModelResponse"])
    );

    // The second turn's model saw exactly that history, then the new prompt.
    let saw = array(&out["model_saw"]);
    assert_eq!(saw.len(), history.len() + 1, "{out}");
    assert_eq!(saw[..history.len()], history[..], "the model's history");
    assert_eq!(out["second_prompt"], "And tomorrow?");
    assert_eq!(saw[1]["parts"][0]["tool_name"], "get_weather");
    assert_eq!(saw[2]["parts"][0]["content"], "Paris: sunny, 21C");
    assert_eq!(out["output"], "Rain tomorrow.");

    // stepline has both turns in the conversation; the second run's history holds the first.
    let list = format!("/v1/runs?conversation_id={conversation}");
    let runs = stepline
        .wait_for("both turns' runs", Duration::from_secs(20), || async {
            let runs = stepline.get_list(&list, "runs").await;
            if runs.len() == 2 && runs.iter().all(|r| r["status"] == "completed") {
                Ok(runs)
            } else {
                Err(truncate(&Value::Array(runs).to_string(), 2000))
            }
        })
        .await;
    assert_eq!(runs[0]["aliases"][0], out["run_id"], "{runs:?}");
    let second = str_field(&runs[1], "run_id");
    let cont = stepline
        .get_ok(&format!(
            "/v1/runs/{}/continuation?format=pydantic-ai",
            encode(second)
        ))
        .await;
    assert_eq!(array(&cont["messages"]).len(), history.len() + 2, "{cont}");

    // The typed client on the same data.
    let first = str_field(&runs[0], "run_id").to_string();
    typed_client_matches_the_api(&stepline, &first, conversation, &runs).await;
}

/// Checks that every field of a dataclass the client printed equals the API's field (a field
/// the API left out must be the dataclass's empty default).
fn assert_same_fields(client: &Value, api: &Value, what: &str) {
    let Value::Object(fields) = client else {
        panic!("{what}: the client printed {client}, not an object");
    };
    for (key, value) in fields {
        match api.get(key) {
            Some(expected) => assert_eq!(value, expected, "{what}.{key}"),
            None => assert!(
                value.is_null() || *value == json!([]) || *value == json!(0),
                "{what}.{key} is {value}, but the API has no such field: {api}"
            ),
        }
    }
}

fn assert_same_list(client: &Value, api: &[Value], what: &str) {
    let client = array(client);
    assert_eq!(client.len(), api.len(), "{what}: {client:?} vs {api:?}");
    for (i, (c, a)) in client.iter().zip(api).enumerate() {
        assert_same_fields(c, a, &format!("{what}[{i}]"));
    }
}

async fn typed_client_matches_the_api(
    stepline: &Stepline,
    run_id: &str,
    conversation: &str,
    runs: &[Value],
) {
    let out = run_python(
        "tests/python/clients_api.py",
        &[
            "--api",
            &stepline.api_url(""),
            "--run-id",
            run_id,
            "--conversation-id",
            conversation,
        ],
        &[],
    )
    .await
    .json();
    let path = |tail: &str| format!("/v1/runs/{}{tail}", encode(run_id));

    assert_same_fields(&out["run"], &stepline.get_ok(&path("")).await, "run");
    assert_same_list(&out["runs"], runs, "runs");
    let ids: Vec<Value> = runs.iter().map(|r| r["run_id"].clone()).collect();
    assert_eq!(
        array(&out["runs_paged"]),
        ids,
        "runs a page of one at a time"
    );
    assert_eq!(out["runs_limited"], json!([ids[0]]), "runs(limit=1)");
    assert_same_fields(&out["latest"], &runs[1], "latest_run");
    let events = stepline.get_list(&path("/events"), "events").await;
    assert!(events.len() >= 6, "{events:?}");
    assert_same_list(&out["events"], &events, "events");
    let effects = stepline.get_list(&path("/effects"), "effects").await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert_same_list(&out["effects"], &effects, "effects");
    assert_eq!(out["unresolved"], json!([]), "a completed run");
    let snapshots = stepline.get_list(&path("/snapshots"), "snapshots").await;
    assert_same_list(&out["snapshots"], &snapshots, "snapshots");

    // The continuation: envelope in fields, the format's request fields in `fields`.
    let api = stepline
        .get_ok(&path("/continuation?format=openai-chat"))
        .await;
    let cont = &out["continuation"];
    assert_eq!(cont["run_id"], api["run_id"]);
    assert_eq!(cont["format"], "openai-chat");
    assert_same_fields(&cont["snapshot"], &api["snapshot"], "continuation.snapshot");
    assert_eq!(cont["warnings"], api["warnings"]);
    assert_eq!(cont["fields"], json!({"messages": api["messages"]}));
    let at = stepline
        .get_ok(&path("/continuation?format=pydantic-ai&at=1"))
        .await;
    assert_eq!(out["continuation_at"]["snapshot"]["seq"], 1);
    assert_eq!(out["continuation_at"]["fields"]["messages"], at["messages"]);

    let recovery = stepline.get_ok(&path("/recovery")).await;
    let got = &out["recovery"];
    assert_eq!(got["status"], "completed");
    assert_same_fields(
        &got["latest_complete_snapshot"],
        &recovery["latest_complete_snapshot"],
        "recovery.latest_complete_snapshot",
    );
    assert_same_list(
        &got["completed_tools"],
        &array(&recovery["completed_tools"]),
        "recovery.completed_tools",
    );
    assert_eq!(got["unresolved_effects"], json!([]));

    // Errors: the class, the status and stepline's own message.
    let errors = &out["errors"];
    let expect = |case: &str, class: &str, status: Value, needle: &str| {
        let e = &errors[case];
        assert_eq!(e["class"], class, "{case}: {e}");
        assert_eq!(e["status"], status, "{case}: {e}");
        let message = e["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(needle),
            "{case}: {message:?} lacks {needle:?}"
        );
    };
    expect("unknown_run", "NotFound", json!(404), "not found");
    expect(
        "bad_format",
        "BadRequest",
        json!(400),
        "unknown format \"no-such-format\"",
    );
    expect("bad_filter", "BadRequest", json!(400), "\"colour\"");
    expect(
        "abandon_completed",
        "Conflict",
        json!(409),
        "already completed",
    );
    expect("no_server", "ConnectionFailed", Value::Null, "cannot reach");
}

// ---------------------------------------------------------------------------------------------
// OpenAI Agents SDK and Strands
// ---------------------------------------------------------------------------------------------

/// A Responses input item reduced to what a history means (the SDK's ids and statuses, and the
/// spelling of arguments and content, are bookkeeping).
fn responses_item(item: &Value) -> Value {
    match item["type"].as_str() {
        Some("function_call") => {
            let arguments = support::as_json_value(&item["arguments"]);
            json!({"call": item["call_id"], "name": item["name"], "arguments": arguments})
        }
        Some("function_call_output") => json!({"output": item["call_id"], "text": item["output"]}),
        _ => {
            let text = match &item["content"] {
                Value::String(s) => s.clone(),
                Value::Array(blocks) => blocks
                    .iter()
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(""),
                other => other.to_string(),
            };
            json!({"role": item["role"], "text": text})
        }
    }
}

fn responses_items(items: &Value) -> Vec<Value> {
    array(items).iter().map(responses_item).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_agents_session_reads_the_conversation_from_stepline() {
    let stepline = Stepline::start().await;
    let session = "clients-openai-agents";
    let out = run_client(
        &stepline,
        "tests/python/clients_openai_agents.py",
        "--session-id",
        session,
    )
    .await;

    // Turn 1 started from an empty session.
    assert_eq!(
        responses_items(&out["first_input"]),
        vec![json!({"role": "user", "text": "What is 2 + 3?"})]
    );
    // Turn 2's model got turn 1 (as the SDK itself listed it) from the session, then the prompt.
    let turn1 = responses_items(&out["turn1_items"]);
    assert_eq!(turn1.len(), 4, "prompt, call, output, answer: {out}");
    let mut expected = turn1.clone();
    expected.push(json!({"role": "user", "text": "And once more?"}));
    assert_eq!(
        responses_items(&out["second_input"]),
        expected,
        "the second turn's model did not receive the first turn from the session"
    );
    assert_eq!(out["output"], "Still 5.");

    // After the second turn's flush the session reads the second run: both turns.
    expected.push(json!({"role": "assistant", "text": "Still 5."}));
    assert_eq!(responses_items(&out["session_items"]), expected);
    assert_eq!(
        responses_items(&out["limited"]),
        expected[expected.len() - 2..].to_vec(),
        "get_items(limit=2) is the latest two"
    );
    let runs = stepline
        .get_list(&format!("/v1/runs?conversation_id={session}"), "runs")
        .await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(out["session_run_id"], runs[1]["run_id"], "{runs:?}");
    assert_eq!(out["first_run_id"], runs[0]["run_id"], "{runs:?}");
    assert_eq!(
        responses_items(&out["by_run_items"]),
        turn1,
        "a session opened with a run id reads that run"
    );
}

/// A Strands message without the fields Strands keeps for itself (`tracking_id`, `metadata`).
fn converse(messages: &Value) -> Vec<Value> {
    array(messages)
        .iter()
        .map(|m| json!({"role": m["role"], "content": m["content"]}))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strands_follow_up_turn_gets_the_messages_from_strands_messages() {
    let stepline = Stepline::start().await;
    let session = "clients-strands";
    let out = run_client(
        &stepline,
        "tests/python/clients_strands.py",
        "--session-id",
        session,
    )
    .await;

    let turn1 = converse(&out["turn1_messages"]);
    assert_eq!(turn1.len(), 4, "{out}");
    assert_eq!(converse(&out["history"]), turn1, "strands_messages");
    assert_eq!(out["system_prompt"], "You add numbers.");
    let mut expected = turn1;
    expected.push(json!({"role": "user", "content": [{"text": "And once more?"}]}));
    assert_eq!(
        converse(&out["received"]),
        expected,
        "the second turn's model did not receive the first turn"
    );
    assert_eq!(out["output"], "Still 5.");
    let runs = stepline
        .get_list(&format!("/v1/runs?conversation_id={session}"), "runs")
        .await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(out["run_id"], runs[0]["run_id"], "latest_run after turn 1");
}

// ---------------------------------------------------------------------------------------------
// Packaging
// ---------------------------------------------------------------------------------------------

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create directory");
    for entry in std::fs::read_dir(from).expect("read directory") {
        let entry = entry.expect("directory entry");
        let name = entry.file_name();
        let skip = ["build", "__pycache__"].iter().any(|s| name == *s)
            || name.to_string_lossy().ends_with(".egg-info");
        if skip {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

#[test]
fn pip_installs_the_package_from_the_repository() {
    // pip builds in the source tree: build a copy, so the checkout stays clean.
    let tmp = tempfile::tempdir().expect("temp dir");
    let source = tmp.path().join("python");
    copy_tree(&repo_path("clients/python"), &source);
    let site = tmp.path().join("site");
    let install = Command::new(python())
        .args(["-m", "pip", "install", "--quiet", "--no-deps", "--target"])
        .arg(&site)
        .arg(&source)
        .output()
        .expect("run pip");
    assert!(
        install.status.success(),
        "pip install --no-deps --target failed:\n{}\n{}",
        String::from_utf8_lossy(&install.stdout),
        String::from_utf8_lossy(&install.stderr)
    );
    let probe = Command::new(python())
        .args([
            "-c",
            "import json, importlib.metadata as m, stepline_client as s; \
             print(json.dumps({'file': s.__file__, 'version': m.version('stepline-client'), \
             'client': s.StepLine('http://x:1').url, 'session': s.StepLineSession.__name__}))",
        ])
        .env("PYTHONPATH", &site)
        .current_dir(tmp.path())
        .output()
        .expect("run python");
    assert!(
        probe.status.success(),
        "{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let out: Value = serde_json::from_slice(&probe.stdout).expect("probe prints JSON");
    assert!(
        str_field(&out, "file").starts_with(&site.display().to_string()),
        "imported from {out}, not from the install"
    );
    assert_eq!(out["version"], "0.1.0");
    assert_eq!(out["client"], "http://x:1");
    assert_eq!(out["session"], "StepLineSession");
}

// ---------------------------------------------------------------------------------------------
// Examples
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_crash_and_resume_runs() {
    let stepline = Stepline::start().await;
    let conversation = "example-crash";
    let out = run_python(
        "examples/python/crash_and_resume.py",
        &[
            "--otlp",
            &stepline.otlp_http_url(),
            "--api",
            &stepline.api_url(""),
            "--conversation-id",
            conversation,
        ],
        &[],
    )
    .await
    .json();
    assert_eq!(out["status_after_abandon"], "abandoned", "{out}");
    assert_eq!(
        out["unresolved"],
        json!([{"tool_name": "charge_card", "status": "unknown_after_crash",
                "arguments": {"amount_eur": 120, "idempotency_key": "order-ticket-1"}}])
    );
    assert_eq!(out["charges"], 1, "charged once, before the crash: {out}");
    assert_eq!(
        out["history_messages"], 3,
        "prompt, price call, price: {out}"
    );
    assert_eq!(
        out["resumed_model_saw"], 3,
        "the prompt merged into the last request"
    );
    assert_eq!(
        out["resumed_output"],
        "The ticket is paid (120 EUR, charged before the crash)."
    );

    // In stepline: the crashed run abandoned with its call unknown, the resumed run completed
    // in the same conversation, holding the crashed run's settled steps.
    let crashed = str_field(&out, "crashed_run_id");
    let effects = stepline
        .get_list(&format!("/v1/runs/{}/effects", encode(crashed)), "effects")
        .await;
    let charge = effects
        .iter()
        .find(|e| e["tool_name"] == "charge_card")
        .unwrap_or_else(|| panic!("no charge_card effect: {effects:?}"));
    assert_eq!(charge["status"], "unknown_after_crash", "{charge}");
    let resumed = str_field(&out, "resumed_run_id");
    let run = stepline
        .wait_for("the resumed run", Duration::from_secs(20), || async {
            let reply = stepline.get(&format!("/v1/runs/{}", encode(resumed))).await;
            match &reply.json {
                Some(run) if reply.status == 200 && run["status"] == "completed" => Ok(run.clone()),
                _ => Err(reply.text.clone()),
            }
        })
        .await;
    assert_eq!(run["conversation_id"], conversation);
    let cont = stepline
        .get_ok(&format!(
            "/v1/runs/{}/continuation?format=pydantic-ai",
            encode(resumed)
        ))
        .await;
    let text = cont["messages"].to_string();
    assert!(
        text.contains("lookup_price") && text.contains("already charged"),
        "{cont}"
    );
}

/// An OTLP/HTTP backend: records the trace requests it gets (gzip or plain protobuf).
#[derive(Default)]
struct Backend {
    spans: Mutex<Vec<(String, String)>>,
}

async fn start_backend() -> (Arc<Backend>, SocketAddr) {
    use axum::body::Bytes;
    use axum::http::{HeaderMap, StatusCode};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    use std::io::Read;

    let backend = Arc::new(Backend::default());
    let record = backend.clone();
    let traces = move |headers: HeaderMap, body: Bytes| {
        let record = record.clone();
        async move {
            let mut bytes = body.to_vec();
            if headers
                .get("content-encoding")
                .is_some_and(|v| v.as_bytes() == b"gzip")
            {
                let mut plain = Vec::new();
                if flate2::read::GzDecoder::new(&body[..])
                    .read_to_end(&mut plain)
                    .is_err()
                {
                    return StatusCode::BAD_REQUEST;
                }
                bytes = plain;
            }
            let Ok(request) = ExportTraceServiceRequest::decode(&bytes[..]) else {
                return StatusCode::BAD_REQUEST;
            };
            let mut spans = record.spans.lock().expect("backend lock");
            for span in request
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .flat_map(|s| &s.spans)
            {
                spans.push((hex::encode(&span.trace_id), span.name.clone()));
            }
            StatusCode::OK
        }
    };
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(traces))
        .route("/v1/logs", axum::routing::post(|| async { "" }))
        .route("/v1/metrics", axum::routing::post(|| async { "" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the backend");
    let address = listener.local_addr().expect("backend address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (backend, address)
}

/// The binary started with a config file of the repository; SIGKILLed on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// The bearer token the backend example's API is started with.
const API_TOKEN: &str = "example-token";

/// The client without a token, and with a wrong one, gets `Unauthorized` (401) with stepline's
/// message; with the right one, the run.
fn assert_unauthorized_without_the_token(api: &str, run_id: &str) {
    let probe = Command::new(python())
        .args([
            "-c",
            "import json, sys; from stepline_client import StepLine, Unauthorized\n\
             def get(token):\n\
             \x20   try:\n\
             \x20       return StepLine(sys.argv[1], token).run(sys.argv[2]).status\n\
             \x20   except Unauthorized as e:\n\
             \x20       return [e.status, e.message]\n\
             print(json.dumps({'none': get(''), 'wrong': get('nope'), 'right': get(sys.argv[3])}))",
            api,
            run_id,
            API_TOKEN,
        ])
        .env("PYTHONPATH", python_path())
        .env_remove("STEPLINE_TOKEN")
        .output()
        .expect("run python");
    assert!(
        probe.status.success(),
        "{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let out: Value = serde_json::from_slice(&probe.stdout).expect("the probe prints JSON");
    for case in ["none", "wrong"] {
        assert_eq!(out[case][0], 401, "{case}: {out}");
        assert!(
            out[case][1].as_str().is_some_and(|m| !m.is_empty()),
            "{case}: {out}"
        );
    }
    assert_eq!(out["right"], "completed", "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_in_front_of_a_backend_forwards_and_keeps_the_run() {
    let (backend, backend_address) = start_backend().await;
    let data = tempfile::tempdir().expect("data dir");
    let (grpc, http, api) = (free_port(), free_port(), free_port());
    let log = std::fs::File::create(data.path().join("stepline.log")).expect("log file");
    let config = repo_path("examples/python/in_front_of_a_backend/collector.yaml");
    let _stepline = Process(
        Command::new(env!("CARGO_BIN_EXE_stepline"))
            .arg("--config")
            .arg(&config)
            .env("STEPLINE_OTLP_GRPC_ENDPOINT", grpc.to_string())
            .env("STEPLINE_OTLP_HTTP_ENDPOINT", http.to_string())
            .env("STEPLINE_API_ENDPOINT", api.to_string())
            .env("STEPLINE_DATA_DIR", data.path().join("data"))
            .env("BACKEND_OTLP_ENDPOINT", format!("http://{backend_address}"))
            // The example's API takes its token from the environment; the agent's client too.
            .env("STEPLINE_API_TOKEN", API_TOKEN)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("start stepline"),
    );
    let log_tail = || std::fs::read_to_string(data.path().join("stepline.log")).unwrap_or_default();
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let health = client.get(format!("http://{api}/healthz")).send().await;
        if health.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "stepline did not start with {}:\n{}",
            config.display(),
            log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let out = run_python(
        "examples/python/in_front_of_a_backend/agent.py",
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("http://{http}")),
            ("STEPLINE_URL", &format!("http://{api}")),
            ("STEPLINE_TOKEN", API_TOKEN),
        ],
    )
    .await
    .json();
    assert_eq!(out["status"], "completed", "{out}");
    assert_unauthorized_without_the_token(&format!("http://{api}"), str_field(&out, "run_id"));
    assert_eq!(out["model_request_count"], 2, "{out}");
    assert_eq!(out["tool_call_count"], 1, "{out}");
    let exported = out["spans_exported"].as_u64().unwrap_or(0);
    assert!(
        exported >= 4,
        "agent run, two model requests, a tool: {out}"
    );

    // The backend gets every span the agent exported, unchanged (same trace, same names).
    let trace = str_field(&out, "trace_id").to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let names = loop {
        let names: Vec<String> = backend
            .spans
            .lock()
            .expect("backend lock")
            .iter()
            .filter(|(t, _)| *t == trace)
            .map(|(_, n)| n.clone())
            .collect();
        if names.len() as u64 >= exported {
            break names;
        }
        assert!(
            Instant::now() < deadline,
            "the backend got {names:?} of {exported} spans of trace {trace}\n{}",
            log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(names.len() as u64, exported, "{names:?}");
    assert!(names.iter().any(|n| n == "invoke_agent clock"), "{names:?}");
    assert!(
        names.iter().any(|n| n == "execute_tool local_time"),
        "{names:?}"
    );
}
