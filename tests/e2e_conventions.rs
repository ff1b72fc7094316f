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

/// Waits until the runs of a conversation satisfy `done`, and returns them.
async fn conversation_runs(
    stepline: &Stepline,
    conversation: &str,
    what: &str,
    done: fn(&[Value]) -> bool,
) -> Vec<Value> {
    let list = format!("/v1/runs?conversation_id={}", encode(conversation));
    stepline
        .wait_for(what, Duration::from_secs(20), || {
            let list = list.clone();
            async move {
                let runs = stepline.get_list(&list, "runs").await;
                if done(&runs) {
                    Ok(runs)
                } else {
                    Err(truncate(&Value::Array(runs).to_string(), 3000))
                }
            }
        })
        .await
}

/// The run of `agent` among `runs`.
fn run_of<'a>(runs: &'a [Value], agent: &str) -> &'a Value {
    runs.iter()
        .find(|r| r["agent_name"] == agent)
        .unwrap_or_else(|| panic!("no run of agent {agent}: {runs:?}"))
}

/// An OpenAI Responses input item reduced to what a history means (ids, statuses and
/// annotations are the SDK's own bookkeeping), so the SDK's items and stepline's compare.
fn responses_item(item: &Value) -> Value {
    match item["type"].as_str() {
        Some("function_call") => {
            let arguments: Value = item["arguments"]
                .as_str()
                .and_then(|a| serde_json::from_str(a).ok())
                .unwrap_or_else(|| item["arguments"].clone());
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
    items
        .as_array()
        .map(|i| i.iter().map(responses_item).collect())
        .unwrap_or_default()
}

/// OpenAI Agents SDK + OpenInference: parallel calls of one tool, a failing tool and an agent used
/// as a tool (a delegate run), all joined to the model's call ids though the TOOL spans carry none;
/// the continuation is taken back by the SDK as input items.
async fn openai_agents(transport: &str) {
    let stepline = Stepline::start().await;
    let session = format!("openai-agents-{transport}");
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
    ];
    let out = run_script("openai_agents_scenario.py", &args, Duration::from_secs(180))
        .await
        .json_line();
    assert_eq!(out["export"]["failed_batches"], 0, "{out}");
    assert_eq!(out["output"], "The sums are 5 and 2.", "{out}");

    // Two runs in the session: calc, and the helper it called as a tool, nested under it.
    let runs = conversation_runs(&stepline, &session, "the OpenAI Agents runs", |runs| {
        runs.len() == 2
            && runs.iter().all(|r| r["status"] == "completed")
            && runs
                .iter()
                .any(|r| r["agent_name"] == "calc" && r["model_request_count"] == 2)
            && runs.iter().any(|r| !r["parent_run_id"].is_null())
    })
    .await;
    let calc = run_of(&runs, "calc");
    let helper = run_of(&runs, "helper");
    let calc_id = str_field(calc, "run_id").to_string();
    assert_eq!(helper["parent_run_id"], calc["run_id"], "{runs:?}");
    assert!(calc["parent_run_id"].is_null(), "{calc}");
    assert_eq!(helper["model_request_count"], 1, "{helper}");
    assert_eq!(calc["tool_call_count"], 4, "{calc}");
    assert_eq!(calc["input_tokens"], 20, "{calc}");
    assert!(calc.get("warnings").is_none(), "no ambiguous join: {calc}");

    // Every TOOL span joined to its call id, by name and arguments.
    let effects = stepline
        .get_list(&format!("/v1/runs/{}/effects", encode(&calc_id)), "effects")
        .await;
    let by_id = |id: &str| {
        effects
            .iter()
            .find(|e| e["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("no effect {id}: {effects:?}"))
            .clone()
    };
    let add1 = by_id("call_add_1");
    assert_eq!(add1["status"], "completed", "{add1}");
    assert_eq!(add1["arguments"], json!({"a": 2, "b": 3}));
    // The tool returned an int; the span keeps it as a number or as text.
    assert_eq!(add1["result"].to_string().trim_matches('"'), "5", "{add1}");
    let add2 = by_id("call_add_2");
    assert_eq!(add2["status"], "completed", "{add2}");
    assert_eq!(add2["result"].to_string().trim_matches('"'), "2", "{add2}");
    let fail = by_id("call_fail");
    assert_eq!(fail["status"], "failed", "{fail}");
    assert!(!fail["error"].is_null(), "{fail}");
    let delegate = by_id("call_helper");
    assert_eq!(delegate["status"], "completed", "{delegate}");
    assert_eq!(delegate["result"], "helper done", "{delegate}");

    let events = stepline
        .get_list(&format!("/v1/runs/{}/events", encode(&calc_id)), "events")
        .await;
    let kinds: Vec<&str> = events.iter().map(|e| str_field(e, "kind")).collect();
    for kind in [
        "run_started",
        "model_request_completed",
        "tool_call_requested",
        "tool_call_started",
        "tool_call_completed",
        "tool_call_failed",
        "run_completed",
    ] {
        assert!(kinds.contains(&kind), "event {kind} missing: {kinds:?}");
    }
    let failed = events
        .iter()
        .find(|e| e["kind"] == "tool_call_failed")
        .expect("tool_call_failed");
    assert_eq!(failed["tool_call_id"], "call_fail", "{failed}");

    // The continuation in OpenAI Responses format is the SDK's own history.
    let cont = stepline
        .get_ok(&format!(
            "/v1/runs/{}/continuation?format=openai-responses",
            encode(&calc_id)
        ))
        .await;
    assert_eq!(cont["snapshot"]["state"], "complete", "{cont}");
    assert_eq!(cont["instructions"], "You add numbers.", "{cont}");
    // One documented difference: a failed call's output is wrapped as `{"error": ...}` so the
    // model sees it failed (the SDK sent its error text plain).
    let sdk_items: Vec<Value> = responses_items(&out["items"])
        .into_iter()
        .map(|mut item| {
            if item["output"] == "call_fail" {
                item["text"] = json!(json!({"error": item["text"]}).to_string());
            }
            item
        })
        .collect();
    assert_eq!(
        responses_items(&cont["input"]),
        sdk_items,
        "continuation differs from the SDK's to_input_list()"
    );

    // The SDK takes it as input items; the model receives exactly that history.
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(cont.to_string().as_bytes()).expect("write");
    let path = file.path().display().to_string();
    let mut args2 = args.to_vec();
    args2.extend(["--continue-from", &path]);
    let next = run_script(
        "openai_agents_scenario.py",
        &args2,
        Duration::from_secs(180),
    )
    .await
    .json_line();
    assert_eq!(next["output"], "Still 5 and 2.", "{next}");
    let mut expected = sdk_items.clone();
    expected.push(json!({"role": "user", "text": "And once more?"}));
    assert_eq!(
        responses_items(&next["received"]),
        expected,
        "the model did not receive stepline's history"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_agents_openinference_http() {
    openai_agents("http").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_agents_openinference_grpc() {
    openai_agents("grpc").await;
}

/// A Chat Completions message reduced to what a history means.
fn chat_message(message: &Value) -> Value {
    let text = match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    };
    let calls: Vec<Value> = message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let arguments: Value = c["function"]["arguments"]
                .as_str()
                .and_then(|a| serde_json::from_str(a).ok())
                .unwrap_or(Value::Null);
            json!({"id": c["id"], "name": c["function"]["name"], "arguments": arguments})
        })
        .collect();
    json!({"role": message["role"], "text": text, "tool_calls": calls, "tool_call_id": message.get("tool_call_id")})
}

fn chat_messages(messages: &Value) -> Vec<Value> {
    messages
        .as_array()
        .map(|m| m.iter().map(chat_message).collect())
        .unwrap_or_default()
}

/// OpenLLMetry: traceloop-sdk decorators (agent, tool) around a tool-calling loop on an `openai`
/// client instrumented by Traceloop; the session is an association property; the tool spans carry
/// no call id; the openai-chat continuation goes back through the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openllmetry_traceloop_openai() {
    let stepline = Stepline::start().await;
    let session = "openllmetry-1";
    let endpoint = stepline.otlp_http_url();
    let args = [
        "--transport",
        "http",
        "--endpoint",
        &endpoint,
        "--session-id",
        session,
    ];
    let out = run_script("openllmetry_scenario.py", &args, Duration::from_secs(180))
        .await
        .json_line();
    assert_eq!(out["export"]["failed_batches"], 0, "{out}");

    let runs = conversation_runs(&stepline, session, "the OpenLLMetry run", |runs| {
        matches!(runs, [r] if r["status"] == "completed" && r["model_request_count"] == 2
            && r["tool_call_count"] == 2)
    })
    .await;
    let run = &runs[0];
    let run_id = str_field(run, "run_id").to_string();
    assert_eq!(run["agent_name"], "calc", "{run}");
    assert_eq!(run["input_tokens"], 20, "{run}");

    let effects = stepline
        .get_list(&format!("/v1/runs/{}/effects", encode(&run_id)), "effects")
        .await;
    let ids: Vec<&str> = effects
        .iter()
        .map(|e| str_field(e, "tool_call_id"))
        .collect();
    assert_eq!(ids, vec!["call_1", "call_2"], "{effects:?}");
    assert_eq!(effects[0]["arguments"], json!({"a": 2, "b": 3}));
    assert_eq!(effects[0]["result"].to_string().trim_matches('"'), "5");
    assert_eq!(effects[1]["result"].to_string().trim_matches('"'), "2");
    assert!(
        effects.iter().all(|e| e["status"] == "completed"),
        "{effects:?}"
    );

    let events = stepline
        .get_list(&format!("/v1/runs/{}/events", encode(&run_id)), "events")
        .await;
    let started: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "tool_call_started")
        .map(|e| str_field(e, "tool_call_id"))
        .collect();
    assert_eq!(started, vec!["call_1", "call_2"], "{events:?}");
    let kinds: Vec<&str> = events.iter().map(|e| str_field(e, "kind")).collect();
    for kind in [
        "run_started",
        "tool_call_requested",
        "tool_call_completed",
        "run_completed",
    ] {
        assert!(kinds.contains(&kind), "event {kind} missing: {kinds:?}");
    }

    let cont = stepline
        .get_ok(&format!(
            "/v1/runs/{}/continuation?format=openai-chat",
            encode(&run_id)
        ))
        .await;
    assert_eq!(cont["snapshot"]["state"], "complete", "{cont}");
    let expected = chat_messages(&out["messages"]);
    assert_eq!(chat_messages(&cont["messages"]), expected, "{cont}");

    // The client sends it back; the model receives exactly that history.
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(cont.to_string().as_bytes()).expect("write");
    let path = file.path().display().to_string();
    let mut args2 = args.to_vec();
    args2.extend(["--continue-from", &path]);
    let next = run_script("openllmetry_scenario.py", &args2, Duration::from_secs(180))
        .await
        .json_line();
    let mut with_question = expected.clone();
    with_question.push(chat_message(
        &json!({"role": "user", "content": "And once more?"}),
    ));
    assert_eq!(chat_messages(&next["received"]), with_question, "{next}");
}

/// Strands agent as tool: a second agent run inside the tool span is a delegate run of the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strands_delegate_agent_as_tool() {
    let stepline = Stepline::start().await;
    let session = "strands-delegate";
    let endpoint = stepline.otlp_http_url();
    let args = [
        "--transport",
        "http",
        "--endpoint",
        &endpoint,
        "--session-id",
        session,
        "--delegate",
    ];
    let out = run_script("strands_scenario.py", &args, Duration::from_secs(120))
        .await
        .json_line();
    assert_eq!(out["export"]["failed_batches"], 0, "{out}");
    let runs = conversation_runs(&stepline, session, "the Strands runs", |runs| {
        runs.len() == 2
            && runs.iter().all(|r| r["status"] == "completed")
            && runs.iter().any(|r| !r["parent_run_id"].is_null())
    })
    .await;
    let calc = run_of(&runs, "calc");
    let helper = run_of(&runs, "helper");
    assert_eq!(helper["parent_run_id"], calc["run_id"], "{runs:?}");
    assert_eq!(calc["model_request_count"], 2, "{calc}");
    assert_eq!(helper["model_request_count"], 1, "{helper}");
    let calc_id = str_field(calc, "run_id");
    let by_parent = stepline
        .get_list(
            &format!("/v1/runs?parent_run_id={}", encode(calc_id)),
            "runs",
        )
        .await;
    assert_eq!(by_parent.len(), 1, "{by_parent:?}");
    assert_eq!(by_parent[0]["agent_name"], "helper");
    let effects = stepline
        .get_list(&format!("/v1/runs/{}/effects", encode(calc_id)), "effects")
        .await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert_eq!(effects[0]["tool_name"], "ask_helper");
    assert_eq!(effects[0]["status"], "completed", "{effects:?}");
    assert!(
        effects[0]["result"].to_string().contains('5'),
        "{effects:?}"
    );
}
