//! End-to-end tests of Google ADK (google-adk, telemetry schema v2): the real framework from PyPI
//! (tests/python/venvs/adk.txt) with a scripted `BaseLlm`, exporting traces and logs through the
//! stock OTLP/HTTP exporters into the real `stepline` binary, in both content-capture modes
//! (`SPAN_ONLY`: content on spans; `EVENT_ONLY`: content only in
//! `gen_ai.client.inference.operation.details` log records), and with content capture off.
//!
//! The scripted model gives no function-call ids, as Gemini usually does: ADK then runs the tools
//! under invented `adk-<uuid>` ids while its messages call them `get_weather_0`, so every tool
//! span is joined to its call by name, arguments and order (with a warning). A call after a text
//! part is `book_table_1` in the messages and its response `book_table_0`: stepline pairs them.

mod support;

use std::io::Write;
use std::time::Duration;

use serde_json::{json, Value};
use support::{deps::venv_python, encode, run_script_with, str_field, truncate, Stepline};

/// One message as (role, parts) with every part reduced to what the model sees: text, a call's
/// name and arguments, a response's name and content. Ids and thought signatures are left out:
/// ADK's session events carry its invented `adk-` ids, its telemetry `name_index` ones, and the
/// Gemini format none; the pairing of calls and responses is by position in both.
fn summary(content: &Value) -> Value {
    let parts: Vec<Value> = content["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let call = p.get("function_call").or_else(|| p.get("functionCall"));
            let response = p
                .get("function_response")
                .or_else(|| p.get("functionResponse"));
            if let Some(t) = p.get("text") {
                json!({"text": t})
            } else if let Some(c) = call {
                json!({"call": c["name"], "args": c["args"]})
            } else if let Some(r) = response {
                json!({"response": r["name"], "content": r["response"]})
            } else {
                json!({"other": p})
            }
        })
        .collect();
    json!({"role": content["role"], "parts": parts})
}

async fn adk_run(stepline: &Stepline, session: &str, capture: &str, extra: &[&str]) -> Value {
    let endpoint = stepline.otlp_http_url();
    let mut args = vec![
        "--endpoint",
        &endpoint,
        "--session-id",
        session,
        "--capture",
        capture,
    ];
    args.extend_from_slice(extra);
    let out = run_script_with(
        venv_python("adk"),
        "adk_scenario.py",
        &args,
        Duration::from_secs(180),
    )
    .await
    .json_line();
    assert_eq!(out["export"]["failed_batches"], 0, "{out}");
    out
}

/// The runs of `session`, oldest first, once `count` of them are completed.
async fn completed_runs(stepline: &Stepline, session: &str, count: usize) -> Vec<Value> {
    let list = format!("/v1/runs?conversation_id={}", encode(session));
    let mut runs = stepline
        .wait_for("the ADK runs to complete", Duration::from_secs(30), || {
            let list = list.clone();
            async move {
                let runs = stepline.get_list(&list, "runs").await;
                if runs.len() == count && runs.iter().all(|r| r["status"] == "completed") {
                    Ok(runs)
                } else {
                    Err(truncate(&Value::Array(runs).to_string(), 3000))
                }
            }
        })
        .await;
    runs.sort_by_key(|r| r["started_at"].as_str().unwrap_or("").to_string());
    runs
}

async fn adk(capture: &str) {
    let stepline = Stepline::start().await;
    let session = format!("adk-{}", capture.to_ascii_lowercase());
    let out = adk_run(&stepline, &session, capture, &[]).await;
    let invocations = out["invocations"].as_array().map_or(0, Vec::len);
    assert_eq!(invocations, 2, "two user turns, two invocations: {out}");

    // One run per invocation (the workflow span is not a run), the agent's name, the session.
    let runs = completed_runs(&stepline, &session, 2).await;
    for run in &runs {
        assert_eq!(run["agent_name"], "trip", "{run}");
        assert_eq!(run["conversation_id"], session.as_str(), "{run}");
        assert!(run["parent_run_id"].is_null(), "{run}");
    }
    assert_eq!(runs[0]["model_request_count"], 3, "{}", runs[0]);
    assert_eq!(runs[1]["model_request_count"], 2, "{}", runs[1]);
    let trace = str_field(&runs[0], "trace_id");
    let in_trace = stepline
        .get_list(&format!("/v1/runs?trace_id={trace}"), "runs")
        .await;
    assert_eq!(
        in_trace.len(),
        1,
        "no run for the workflow span: {in_trace:?}"
    );
    // The tool spans' `adk-` ids were joined to the messages' calls, with a warning.
    let warnings = runs[0]["warnings"].to_string();
    assert!(
        warnings.contains("matches no tool call") && warnings.contains("adk-"),
        "{warnings}"
    );

    // Every tool call in the ledger, under the messages' call ids, the failing one failed.
    let effects = |run: &Value| {
        let run_id = str_field(run, "run_id").to_string();
        let stepline = &stepline;
        async move {
            stepline
                .get_list(&format!("/v1/runs/{}/effects", encode(&run_id)), "effects")
                .await
        }
    };
    let first = effects(&runs[0]).await;
    let summary_of = |e: &Value| {
        json!([
            e["tool_call_id"],
            e["tool_name"],
            e["status"],
            e["arguments"]
        ])
    };
    let got: Vec<Value> = first.iter().map(summary_of).collect();
    assert_eq!(
        got,
        vec![
            json!(["get_weather_0", "get_weather", "completed", {"city": "Paris"}]),
            json!(["add_1", "add", "completed", {"a": 2, "b": 3}]),
            json!(["book_table_1", "book_table", "failed", {"party": 4}]),
        ],
        "{first:?}"
    );
    let second = effects(&runs[1]).await;
    let got: Vec<Value> = second.iter().map(summary_of).collect();
    assert_eq!(
        got,
        vec![json!(["get_weather_0", "get_weather", "completed", {"city": "Rome"}])],
        "{second:?}"
    );
    if capture == "SPAN_ONLY" {
        // Results from the tool spans.
        assert_eq!(first[0]["result"], json!({"city": "Paris", "sky": "sunny"}));
        assert_eq!(first[1]["result"], json!({"result": 5}));
        assert_eq!(first[2]["result"], json!({"error": "no table free for 4"}));
        assert_eq!(second[0]["result"], json!({"city": "Rome", "sky": "sunny"}));
    } else {
        // EVENT_ONLY: tool spans carry neither arguments nor results; the arguments are the
        // model's (from the log records) and the results are not on the ledger.
        for e in first.iter().chain(&second) {
            assert!(e["result"].is_null(), "{e}");
        }
    }

    // Events in order: started, the model requests and tool calls, completed.
    for run in &runs {
        let run_id = str_field(run, "run_id");
        let events = stepline
            .get_list(&format!("/v1/runs/{}/events", encode(run_id)), "events")
            .await;
        let kinds: Vec<&str> = events.iter().map(|e| str_field(e, "kind")).collect();
        assert_eq!(kinds.first(), Some(&"run_started"), "{kinds:?}");
        assert_eq!(kinds.last(), Some(&"run_completed"), "{kinds:?}");
        let count = |k: &str| kinds.iter().filter(|x| **x == k).count();
        let tools = if run == &runs[0] { 3 } else { 1 };
        assert_eq!(count("tool_call_requested"), tools, "{kinds:?}");
        let times: Vec<&str> = events.iter().map(|e| str_field(e, "timestamp")).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    }

    // The continuation of the last run is ADK's session, message for message.
    let last = str_field(&runs[1], "run_id");
    let cont = stepline
        .get_ok(&format!(
            "/v1/runs/{}/continuation?format=gemini",
            encode(last)
        ))
        .await;
    assert_eq!(cont["snapshot"]["state"], "complete", "{cont}");
    let session_events: Vec<Value> = out["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| !e["content"].is_null())
        .map(|e| summary(&e["content"]))
        .collect();
    let contents: Vec<Value> = cont["contents"]
        .as_array()
        .into_iter()
        .flatten()
        .map(summary)
        .collect();
    assert_eq!(contents.len(), 10, "{cont}");
    assert_eq!(
        contents, session_events,
        "continuation differs from ADK's session"
    );
    let system = cont["system_instruction"].to_string();
    assert!(system.contains("You plan trips."), "{system}");

    // ADK takes it: a new session made of its contents continues, and the model sees them.
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(cont.to_string().as_bytes()).expect("write");
    let path = file.path().display().to_string();
    let next = adk_run(
        &stepline,
        &format!("{session}-next"),
        capture,
        &["--continue-from", &path],
    )
    .await;
    let received: Vec<Value> = next["received"][0]
        .as_array()
        .into_iter()
        .flatten()
        .map(summary)
        .collect();
    let mut expected = session_events.clone();
    expected.push(json!({"role": "user", "parts": [{"text": "And in Oslo?"}]}));
    assert_eq!(
        received, expected,
        "ADK's model did not see stepline's history"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adk_span_only() {
    adk("SPAN_ONLY").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adk_event_only() {
    adk("EVENT_ONLY").await;
}

/// With content capture off, the runs, their tool calls and the model requests are there, and
/// the continuation is unavailable with a reason that says content capture is off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adk_no_content_is_flagged() {
    let stepline = Stepline::start().await;
    let session = "adk-no-content";
    adk_run(&stepline, session, "NO_CONTENT", &[]).await;
    let runs = completed_runs(&stepline, session, 2).await;
    let run = &runs[0];
    assert_eq!(run["model_request_count"], 3, "{run}");
    assert_eq!(run["tool_call_count"], 3, "{run}");
    let reason = run["continuation_unavailable"].to_string();
    assert!(reason.contains("content capture is off"), "{run}");
    let reply = stepline
        .get(&format!(
            "/v1/runs/{}/continuation?format=gemini",
            encode(str_field(run, "run_id"))
        ))
        .await;
    assert!(reply.status >= 400, "{}", reply.text);
}
