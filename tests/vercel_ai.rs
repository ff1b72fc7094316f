//! End-to-end: the Vercel AI SDK v6 (npm `ai`, `MockLanguageModelV3` from `ai/test`,
//! `experimental_telemetry`) exporting its `ai.*` spans through the stock OTLP/HTTP exporter into
//! the real binary; the `vercel-ai` continuation equals the SDK's own `response.messages` (plus
//! the input), and `generateText({ system, messages })` takes it for a follow-up turn.
//!
//! The node project is tests/node/vercel-ai (`make node-deps` installs it).

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use support::{encode, str_field, truncate, Stepline};

const SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/node/vercel-ai/scenario.mjs"
);

/// A directory holding the scenario next to a `node_modules` link (ES modules resolve packages
/// from the script's directory, not from NODE_PATH).
fn scenario_dir() -> tempfile::TempDir {
    let modules = support::deps::node_modules("vercel-ai");
    let dir = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(&modules, dir.path().join("node_modules")).expect("link");
    std::fs::copy(SCENARIO, dir.path().join("scenario.mjs")).expect("copy scenario");
    dir
}

/// Runs `node scenario.mjs args…` in `dir`; its last stdout line as JSON.
async fn node(dir: &Path, args: &[&str]) -> Value {
    let mut cmd = tokio::process::Command::new("node");
    cmd.current_dir(dir)
        .arg("scenario.mjs")
        .args(args)
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("node scenario timed out")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "node scenario.mjs {args:?} failed: {stderr}"
    );
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"))
}

/// The run of a conversation once it is completed with its three model requests.
async fn completed_run(stepline: &Stepline, conversation: &str) -> Value {
    let list = format!("/v1/runs?conversation_id={}", encode(conversation));
    let runs = stepline
        .wait_for(
            "the Vercel AI SDK run to complete",
            Duration::from_secs(20),
            || {
                let list = list.clone();
                async move {
                    let runs = stepline.get_list(&list, "runs").await;
                    match runs.as_slice() {
                        [r] if r["status"] == "completed" && r["model_request_count"] == 3 => {
                            Ok(runs)
                        }
                        _ => Err(truncate(&Value::Array(runs).to_string(), 2000)),
                    }
                }
            },
        )
        .await;
    runs[0].clone()
}

/// The event kinds that tell the story of a call, in order.
const STORY: &[&str] = &[
    "run_started",
    "model_request_completed",
    "tool_call_completed",
    "tool_call_failed",
    "run_completed",
];

async fn check_call(stepline: &Stepline, dir: &Path, call: &Value) {
    let kind = str_field(call, "kind");
    let tag = if kind == "generate" { "g" } else { "s" };
    let conversation = str_field(call, "conversation_id");
    let run = completed_run(stepline, conversation).await;
    assert_eq!(run["agent_name"], "travel-agent", "{run}");
    assert_eq!(run["conversation_id"], conversation, "{run}");
    assert_eq!(run["tool_call_count"], 3, "{run}");
    assert!(run["parent_run_id"].is_null(), "{run}");
    let run_id = str_field(&run, "run_id").to_string();
    let trace = str_field(&run, "trace_id");
    let in_trace = stepline
        .get_list(&format!("/v1/runs?trace_id={trace}"), "runs")
        .await;
    assert_eq!(in_trace.len(), 1, "one run per call: {in_trace:?}");

    // Events in order. generateText runs a step's tools after its model request ends;
    // streamText runs them while the stream is still open, so its `ai.streamText.doStream`
    // span (and model_request_completed) mostly ends after them.
    let events = stepline
        .get_list(&format!("/v1/runs/{}/events", encode(&run_id)), "events")
        .await;
    let story: Vec<&str> = events
        .iter()
        .map(|e| str_field(e, "kind"))
        .filter(|k| STORY.contains(k))
        .collect();
    // Each group's events in order, in any order within a group: the SDK ends the root span and
    // its last model call's span within microseconds of each other, in either order (seen both
    // ways in CI), and streamText may end a step's `doStream` span before or after a tool of
    // that step rejects (seen both ways in CI). Events follow the timestamps (checked below).
    let expected: &[&[&str]] = if kind == "generate" {
        &[
            &["run_started"],
            &["model_request_completed"],
            &["tool_call_completed", "tool_call_completed"],
            &["model_request_completed"],
            &["tool_call_failed"],
            &["model_request_completed", "run_completed"],
        ]
    } else {
        &[
            &["run_started"],
            &["tool_call_completed", "tool_call_completed"],
            &["model_request_completed"],
            &["tool_call_failed", "model_request_completed"],
            &["model_request_completed", "run_completed"],
        ]
    };
    let wanted: usize = expected.iter().map(|group| group.len()).sum();
    assert_eq!(story.len(), wanted, "{kind}: {events:?}");
    let mut rest = story.as_slice();
    for group in expected {
        let (head, tail) = rest.split_at(group.len());
        let (mut got, mut want) = (head.to_vec(), group.to_vec());
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "{kind}: {events:?}");
        rest = tail;
    }
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let times: Vec<&str> = events.iter().map(|e| str_field(e, "timestamp")).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    // Each call is requested by the model request that asked for it.
    let requested: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "tool_call_requested")
        .map(|e| str_field(e, "tool_call_id"))
        .collect();
    assert_eq!(
        requested,
        [
            format!("{tag}-w1"),
            format!("{tag}-t1"),
            format!("{tag}-b1")
        ],
        "{events:?}"
    );

    // Every tool call in the ledger with its id, arguments and result; the failing one failed.
    let effects = stepline
        .get_list(&format!("/v1/runs/{}/effects", encode(&run_id)), "effects")
        .await;
    let by_id = |id: String| {
        effects
            .iter()
            .find(|e| e["tool_call_id"] == id.as_str())
            .unwrap_or_else(|| panic!("no effect {id}: {effects:?}"))
            .clone()
    };
    assert_eq!(effects.len(), 3, "{effects:?}");
    let weather = by_id(format!("{tag}-w1"));
    assert_eq!(weather["tool_name"], "weather");
    assert_eq!(weather["status"], "completed", "{weather}");
    assert_eq!(weather["arguments"], json!({"city": "Paris"}));
    assert_eq!(
        weather["result"],
        json!({"city": "Paris", "sky": "sunny", "celsius": 21})
    );
    let time = by_id(format!("{tag}-t1"));
    assert_eq!(time["status"], "completed", "{time}");
    assert_eq!(time["result"], "10:30 in Paris");
    let book = by_id(format!("{tag}-b1"));
    assert_eq!(book["status"], "failed", "{book}");
    assert_eq!(book["arguments"], json!({"city": "Paris", "nights": 2}));
    assert!(
        book["error"]
            .as_str()
            .is_some_and(|e| e.contains("no rooms left")),
        "{book}"
    );

    // The continuation is the SDK's own history, message for message.
    let cont = stepline
        .get_ok(&format!(
            "/v1/runs/{}/continuation?format=vercel-ai",
            encode(&run_id)
        ))
        .await;
    assert_eq!(cont["format"], "vercel-ai");
    assert_eq!(cont["snapshot"]["state"], "complete", "{cont}");
    assert_eq!(cont["warnings"], json!([]), "{cont}");
    assert_eq!(cont["system"], call["system"], "{cont}");
    let mut expected = call["input"].as_array().cloned().unwrap_or_default();
    expected.extend(
        call["response_messages"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    let got = cont["messages"].as_array().cloned().unwrap_or_default();
    assert_eq!(got.len(), expected.len(), "{cont}");
    for (n, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "{kind}: message {n} differs");
    }

    // generateText takes it for a follow-up turn; its model receives that history.
    let file = dir.join(format!("continuation-{kind}.json"));
    std::fs::write(&file, cont.to_string()).expect("write continuation");
    let next = node(dir, &["continue", "--file", &file.display().to_string()]).await;
    assert_eq!(next["text"], "Tomorrow is rainy.", "{next}");
    let prompt = next["prompt"].as_array().cloned().unwrap_or_default();
    let roles: Vec<&str> = prompt.iter().map(|m| str_field(m, "role")).collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "user"
        ],
        "{next}"
    );
    assert_eq!(
        prompt[5]["content"][0]["output"]["type"], "error-text",
        "{next}"
    );
    assert_eq!(prompt[3]["content"][0]["output"]["type"], "json", "{next}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vercel_ai_v6_generate_and_stream_continue_in_the_sdk() {
    let stepline = Stepline::start().await;
    let dir = scenario_dir();
    let endpoint = stepline.otlp_http_url();
    let out = node(
        dir.path(),
        &["run", "--endpoint", &endpoint, "--session", "vercel-e2e"],
    )
    .await;
    assert!(
        out["versions"]["ai"]
            .as_str()
            .is_some_and(|v| v.starts_with("6.")),
        "{out}"
    );
    let calls = out["calls"].as_array().cloned().unwrap_or_default();
    assert_eq!(calls.len(), 2, "{out}");
    for call in &calls {
        check_call(&stepline, dir.path(), call).await;
    }
}
