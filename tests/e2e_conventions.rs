//! End-to-end tests of the producers besides Pydantic AI 2.x: each runs the real framework from
//! PyPI (with a scripted model, no network to a provider), exporting through the real OTLP
//! exporter into the real `stepline` binary, and checks the result through the query API.

mod support;

use std::io::Write;
use std::time::Duration;

use serde_json::{json, Value};
use support::{
    encode, python_pydantic_ai_1, run_script, run_script_with, str_field, truncate, Stepline,
};

/// A Strands message without the fields Strands keeps for itself (`tracking_id`, `metadata`).
fn converse(message: &Value) -> Value {
    json!({"role": message["role"], "content": message["content"]})
}

async fn strands(mode: &str, transport: &str) {
    let stepline = Stepline::start().await;
    let session = format!("strands-{mode}");
    let endpoint = if transport == "grpc" {
        stepline.otlp_grpc_url()
    } else {
        stepline.otlp_http_url()
    };
    let args = [
        "--transport",
        transport,
        "--endpoint",
        &endpoint,
        "--session-id",
        &session,
        "--mode",
        mode,
    ];
    let out = run_script("strands_scenario.py", &args, Duration::from_secs(120))
        .await
        .json_line();
    assert_eq!(out["export"]["failed_batches"], 0, "{out}");
    let messages: Vec<Value> = out["messages"]
        .as_array()
        .map(|m| m.iter().map(converse).collect())
        .unwrap_or_default();
    assert_eq!(messages.len(), 4, "{out}");

    // One run, completed, in the session's conversation; the cycles are not runs.
    let list = format!("/v1/runs?conversation_id={}", encode(&session));
    let runs = stepline
        .wait_for(
            "the Strands run to complete",
            Duration::from_secs(20),
            || {
                let list = list.clone();
                let stepline = &stepline;
                async move {
                    let runs = stepline.get_list(&list, "runs").await;
                    match runs.as_slice() {
                        [r] if r["status"] == "completed" && r["model_request_count"] == 2 => {
                            Ok(runs)
                        }
                        _ => Err(truncate(&Value::Array(runs).to_string(), 2000)),
                    }
                }
            },
        )
        .await;
    let run = &runs[0];
    let run_id = str_field(run, "run_id").to_string();
    assert_eq!(run["agent_name"], "calc");
    assert_eq!(run["tool_call_count"], 1);
    assert!(run["parent_run_id"].is_null(), "{run}");
    let trace = str_field(run, "trace_id");
    let in_trace = stepline
        .get_list(&format!("/v1/runs?trace_id={trace}"), "runs")
        .await;
    assert_eq!(in_trace.len(), 1, "no run per cycle: {in_trace:?}");

    // The tool effect, completed, with its arguments and result.
    let effects = stepline
        .get_list(&format!("/v1/runs/{}/effects", encode(&run_id)), "effects")
        .await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    let effect = &effects[0];
    assert_eq!(effect["tool_call_id"], "tooluse_1");
    assert_eq!(effect["tool_name"], "add");
    assert_eq!(effect["status"], "completed", "{effect}");
    assert_eq!(effect["arguments"], json!({"a": 2, "b": 3}), "{effect}");
    assert!(effect["result"].to_string().contains('5'), "{effect}");

    let events = stepline
        .get_list(&format!("/v1/runs/{}/events", encode(&run_id)), "events")
        .await;
    let kinds: Vec<&str> = events.iter().map(|e| str_field(e, "kind")).collect();
    for kind in [
        "run_started",
        "model_request_completed",
        "tool_call_requested",
        "tool_call_completed",
        "run_completed",
    ] {
        assert!(kinds.contains(&kind), "event {kind} missing: {kinds:?}");
    }

    // The continuation is Strands' own history.
    let cont = stepline
        .get_ok(&format!(
            "/v1/runs/{}/continuation?format=strands",
            encode(&run_id)
        ))
        .await;
    assert_eq!(cont["snapshot"]["state"], "complete", "{cont}");
    assert_eq!(cont["system_prompt"], "You add numbers.", "{cont}");
    assert_eq!(
        cont["messages"],
        Value::Array(messages.clone()),
        "continuation differs from Strands' own messages"
    );

    // Strands takes it: a new agent continues from it, and its model sees exactly that history.
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(cont.to_string().as_bytes()).expect("write");
    let path = file.path().display().to_string();
    let mut args2 = args.to_vec();
    args2.extend(["--continue-from", &path]);
    let next = run_script("strands_scenario.py", &args2, Duration::from_secs(120))
        .await
        .json_line();
    let mut expected = messages.clone();
    expected.push(json!({"role": "user", "content": [{"text": "And once more?"}]}));
    let received: Vec<Value> = next["received"]
        .as_array()
        .map(|m| m.iter().map(converse).collect())
        .unwrap_or_default();
    assert_eq!(
        received, expected,
        "the model did not receive stepline's history"
    );
    stepline
        .wait_for("the continued run", Duration::from_secs(20), || {
            let list = list.clone();
            let stepline = &stepline;
            async move {
                let runs = stepline.get_list(&list, "runs").await;
                if runs.len() == 2 && runs.iter().all(|r| r["status"] == "completed") {
                    Ok(())
                } else {
                    Err(truncate(&Value::Array(runs).to_string(), 2000))
                }
            }
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strands_default_mode_span_events() {
    strands("default", "http").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strands_latest_experimental_events() {
    strands("latest", "grpc").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strands_attributes_only() {
    strands("attributes", "http").await;
}

/// Pydantic AI 1.x with instrumentation `version`: one run, its tool effect, and a continuation
/// that Pydantic AI 1.x loads and continues from.
async fn pydantic_ai_1(version: &str, event_mode: &str) {
    let stepline = Stepline::start().await;
    let endpoint = stepline.otlp_http_url();
    let args = [
        "--transport",
        "http",
        "--endpoint",
        &endpoint,
        "--version",
        version,
        "--event-mode",
        event_mode,
    ];
    let out = run_script_with(
        python_pydantic_ai_1(),
        "pydantic_ai_1x_scenario.py",
        &args,
        Duration::from_secs(120),
    )
    .await
    .json_line();
    assert_eq!(out["export"]["failed_batches"], 0, "{out}");
    let runs = stepline
        .wait_for("the Pydantic AI 1.x run", Duration::from_secs(20), || {
            let stepline = &stepline;
            async move {
                let runs = stepline
                    .get_list("/v1/runs?agent_name=weather", "runs")
                    .await;
                match runs.as_slice() {
                    [r] if r["status"] == "completed" && r["model_request_count"] == 2 => Ok(runs),
                    _ => Err(truncate(&Value::Array(runs).to_string(), 2000)),
                }
            }
        })
        .await;
    let run_id = str_field(&runs[0], "run_id").to_string();
    let effects = stepline
        .get_list(&format!("/v1/runs/{}/effects", encode(&run_id)), "effects")
        .await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert_eq!(effects[0]["tool_call_id"], "call_1");
    assert_eq!(effects[0]["status"], "completed", "{:?}", effects[0]);
    assert_eq!(effects[0]["arguments"], json!({"city": "Paris"}));
    assert_eq!(effects[0]["result"], "18C in Paris");

    let cont = stepline
        .get_ok(&format!(
            "/v1/runs/{}/continuation?format=pydantic-ai",
            encode(&run_id)
        ))
        .await;
    assert_eq!(cont["snapshot"]["state"], "complete", "{cont}");
    let expected = out["all_messages"].as_array().cloned().unwrap_or_default();
    let got = cont["messages"].as_array().cloned().unwrap_or_default();
    let parts = |messages: &[Value]| -> Vec<Value> {
        messages
            .iter()
            .map(|m| {
                let parts: Vec<Value> = m["parts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        json!({
                            "part_kind": p["part_kind"],
                            "content": p.get("content"),
                            "tool_name": p.get("tool_name"),
                            "tool_call_id": p.get("tool_call_id"),
                            "args": p.get("args"),
                        })
                    })
                    .collect();
                json!({"kind": m["kind"], "parts": parts})
            })
            .collect()
    };
    assert_eq!(
        parts(&expected),
        parts(&got),
        "continuation differs from all_messages"
    );

    // Pydantic AI 1.x loads it as message_history and its model sees that history.
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(cont.to_string().as_bytes()).expect("write");
    let path = file.path().display().to_string();
    let mut args2 = args.to_vec();
    args2.extend(["--continue-from", &path]);
    let next = run_script_with(
        python_pydantic_ai_1(),
        "pydantic_ai_1x_scenario.py",
        &args2,
        Duration::from_secs(120),
    )
    .await
    .json_line();
    let received = next["received"].as_array().cloned().unwrap_or_default();
    assert_eq!(received.len(), expected.len() + 1, "{next}");
    assert_eq!(parts(&received[..expected.len()]), parts(&expected));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pydantic_ai_1x_instrumentation_version_1_events_attribute() {
    pydantic_ai_1("1", "attributes").await;
}

/// The legacy events as OTLP log records, correlated to their chat spans by trace and span id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pydantic_ai_1x_legacy_events_as_otlp_logs() {
    pydantic_ai_1("1", "logs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pydantic_ai_1x_instrumentation_version_2() {
    pydantic_ai_1("2", "attributes").await;
}
