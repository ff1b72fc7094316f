//! Fixture-level tests of the producers of issue 16 that have no end-to-end test: spans recorded
//! from the real packages (LlamaIndex, CrewAI, smolagents, Agno via OpenInference; Mastra via its
//! OTel exporter) with scripted models, committed under `tests/fixtures/` with their versions
//! and recording scripts. Each fixture is posted as OTLP/JSON to the real `stepline` binary and
//! what it derives is read back through the query API: runs, events, the tool-effect ledger and
//! the continuation, compared with the framework's own final message list
//! (`final_messages.json`, written by the same recording).
//!
//! Every recording is the same conversation: two user turns on one session; the first asks for
//! `add(2, 3)` and `multiply(4, 5)` in parallel, then `divide(1, 0)`, which fails, then answers.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use support::{encode, str_field, truncate, Stepline};

fn fixture_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

fn read_json(rel: &str) -> Value {
    let path = fixture_path(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read fixture {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

/// Starts stepline and posts the fixture's spans as OTLP/JSON.
async fn ingest(dir: &str) -> Stepline {
    let stepline = Stepline::start().await;
    let body = std::fs::read(fixture_path(&format!("{dir}/spans.json"))).expect("spans.json");
    let url = format!("{}/v1/traces", stepline.otlp_http_url());
    let resp = stepline
        .client()
        .post(&url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    assert_eq!(status, 200, "POST {dir}/spans.json: {text}");
    stepline
}

/// The conversation's runs once there are `n`, all finished, oldest first.
async fn runs(stepline: &Stepline, conversation: &str, n: usize) -> Vec<Value> {
    let list = format!("/v1/runs?conversation_id={}", encode(conversation));
    let mut runs = stepline
        .wait_for(
            &format!("{n} finished runs of {conversation}"),
            Duration::from_secs(20),
            || {
                let list = list.clone();
                async move {
                    let runs = stepline.get_list(&list, "runs").await;
                    if runs.len() == n && runs.iter().all(|r| r["status"] == "completed") {
                        Ok(runs)
                    } else {
                        Err(truncate(&Value::Array(runs).to_string(), 3000))
                    }
                }
            },
        )
        .await;
    runs.sort_by_key(|r| r["started_ns"].as_u64().unwrap_or_default());
    runs
}

async fn list(stepline: &Stepline, run: &Value, what: &str) -> Vec<Value> {
    let run_id = str_field(run, "run_id");
    stepline
        .get_list(&format!("/v1/runs/{}/{what}", encode(run_id)), what)
        .await
}

async fn continuation(stepline: &Stepline, run: &Value) -> Value {
    let run_id = str_field(run, "run_id");
    stepline
        .get_ok(&format!(
            "/v1/runs/{}/continuation?format=openai-chat",
            encode(run_id)
        ))
        .await
}

/// The effects of the first turn: add and multiply completed with their results, divide failed;
/// `ids` are the call ids expected (in ledger order, which is the model's order).
fn check_calc_effects(effects: &[Value], ids: &[&str]) {
    let names: Vec<&str> = effects.iter().map(|e| str_field(e, "tool_name")).collect();
    assert_eq!(
        names,
        ["add", "multiply", "divide"],
        "{}",
        Value::Array(effects.to_vec())
    );
    let got_ids: Vec<&str> = effects
        .iter()
        .map(|e| e["tool_call_id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(got_ids, ids, "{}", Value::Array(effects.to_vec()));
    for (effect, (args, result)) in effects.iter().zip([
        (json!({"a": 2, "b": 3}), Some("5")),
        (json!({"a": 4, "b": 5}), Some("20")),
        (json!({"a": 1, "b": 0}), None),
    ]) {
        assert_eq!(effect["arguments"], args, "{effect}");
        match result {
            Some(result) => {
                assert_eq!(effect["status"], "completed", "{effect}");
                assert_eq!(
                    effect["result"].to_string().trim_matches('"'),
                    result,
                    "{effect}"
                );
            }
            None => {
                assert_eq!(effect["status"], "failed", "{effect}");
                assert!(
                    effect["error"].to_string().contains("division by zero"),
                    "{effect}"
                );
            }
        }
    }
}

/// Events in order: the run starts first and completes last, each tool call is requested (when
/// a model asked for it) before it starts, and starts before it ends, failing for divide.
fn check_events(events: &[Value], requested: bool) {
    let kinds: Vec<&str> = events.iter().map(|e| str_field(e, "kind")).collect();
    assert_eq!(kinds.first(), Some(&"run_started"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run_completed"), "{kinds:?}");
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seq order: {seqs:?}");
    let times: Vec<u64> = events
        .iter()
        .filter_map(|e| e["time_ns"].as_u64())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "time order: {times:?}"
    );
    for tool in ["add", "multiply", "divide"] {
        let at = |kind: &str| {
            events
                .iter()
                .position(|e| e["kind"] == kind && e["tool_name"] == tool)
        };
        let end = if tool == "divide" {
            "tool_call_failed"
        } else {
            "tool_call_completed"
        };
        let started = at("tool_call_started").unwrap_or_else(|| panic!("{tool}: {kinds:?}"));
        let ended = at(end).unwrap_or_else(|| panic!("{tool} {end}: {kinds:?}"));
        assert!(started < ended, "{tool}: {kinds:?}");
        if requested {
            let asked = at("tool_call_requested").unwrap_or_else(|| panic!("{tool}: {kinds:?}"));
            assert!(asked < started, "{tool}: {kinds:?}");
        }
    }
}

/// A Chat Completions message reduced to what a history means: role (`developer` is `system`),
/// text, tool calls (arguments parsed) and the call a tool message answers.
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
            let arguments = match &c["function"]["arguments"] {
                Value::String(a) => serde_json::from_str(a).unwrap_or(Value::Null),
                other => other.clone(),
            };
            json!({"id": c["id"], "name": c["function"]["name"], "arguments": arguments})
        })
        .collect();
    let role = match message["role"].as_str() {
        Some("developer") => "system",
        Some(role) => role,
        None => "",
    };
    json!({"role": role, "text": text, "tool_calls": calls,
           "tool_call_id": message.get("tool_call_id").cloned().unwrap_or(Value::Null)})
}

fn chat_messages(messages: &Value) -> Vec<Value> {
    messages
        .as_array()
        .map(|m| m.iter().map(chat_message).collect())
        .unwrap_or_default()
}

/// Compares a continuation's messages with the framework's own, message for message.
fn assert_same_history(cont: &Value, expected: Vec<Value>, what: &str) {
    assert_eq!(cont["snapshot"]["state"], "complete", "{what}: {cont}");
    let got = chat_messages(&cont["messages"]);
    if got != expected {
        let detail: Vec<String> = (0..got.len().max(expected.len()))
            .filter(|&i| got.get(i) != expected.get(i))
            .map(|i| {
                format!(
                    "#{i}: stepline {} / {what} {}",
                    got.get(i).map(Value::to_string).unwrap_or_default(),
                    expected.get(i).map(Value::to_string).unwrap_or_default()
                )
            })
            .collect();
        panic!(
            "continuation differs from {what}'s own messages:\n{}",
            detail.join("\n")
        );
    }
}

/// A LlamaIndex `ChatMessage` (`model_dump`) as a Chat Completions message.
fn llamaindex_message(m: &Value) -> Value {
    let blocks = m["blocks"].as_array().cloned().unwrap_or_default();
    let text: String = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
    let calls: Vec<Value> = blocks
        .iter()
        .filter(|b| b["block_type"] == "tool_call")
        .map(|b| {
            json!({"id": b["tool_call_id"], "type": "function",
            "function": {"name": b["tool_name"], "arguments": b["tool_kwargs"].to_string()}})
        })
        .collect();
    let mut out = json!({"role": m["role"], "content": text});
    if !calls.is_empty() {
        out["tool_calls"] = Value::Array(calls);
    }
    if let Some(id) = m["additional_kwargs"].get("tool_call_id") {
        out["tool_call_id"] = id.clone();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamaindex_function_agent() {
    let stepline = ingest("llamaindex").await;
    let runs = runs(&stepline, "llamaindex-session-1", 2).await;
    for run in &runs {
        assert_eq!(run["agent_name"], "FunctionAgent", "{run}");
        assert!(run["continuation_unavailable"].is_null(), "{run}");
    }
    assert_eq!(runs[0]["model_request_count"], 3, "{}", runs[0]);
    assert_eq!(runs[1]["model_request_count"], 1, "{}", runs[1]);

    let effects = list(&stepline, &runs[0], "effects").await;
    check_calc_effects(&effects, &["call_add", "call_mul", "call_div"]);
    check_events(&list(&stepline, &runs[0], "events").await, true);

    // The second turn's continuation is the agent's memory, after its system prompt.
    let memory = read_json("llamaindex/final_messages.json");
    let mut expected = vec![chat_message(
        &json!({"role": "system", "content": "You do arithmetic with tools."}),
    )];
    expected.extend(
        memory
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| chat_message(&llamaindex_message(m))),
    );
    let cont = continuation(&stepline, &runs[1]).await;
    assert_same_history(&cont, expected, "LlamaIndex memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smolagents_tool_calling_agent() {
    let stepline = ingest("smolagents").await;
    let runs = runs(&stepline, "smolagents-session-1", 2).await;
    for run in &runs {
        assert_eq!(run["agent_name"], "calc", "{run}");
    }
    assert_eq!(runs[0]["model_request_count"], 3, "{}", runs[0]);
    // add, multiply, divide and final_answer.
    let effects = list(&stepline, &runs[0], "effects").await;
    assert_eq!(effects.len(), 4, "{}", Value::Array(effects.clone()));
    assert_eq!(effects[3]["tool_name"], "final_answer");
    assert_eq!(effects[3]["tool_call_id"], "call_final_1");
    check_calc_effects(&effects[..3], &["call_add", "call_mul", "call_div"]);
    check_events(&list(&stepline, &runs[0], "events").await, true);

    // smolagents' own record of its last model call, with the roles its tool-calling models
    // send (`tool-call` as assistant, `tool-response` as user).
    let own = read_json("smolagents/final_messages.json");
    let mut expected: Vec<Value> = own
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let mut m = m.clone();
            let role = match m["role"].as_str() {
                Some("tool-call") => "assistant",
                Some("tool-response") => "user",
                Some(other) => other,
                None => "",
            };
            m["role"] = json!(role);
            chat_message(&m)
        })
        .collect();
    // The model's last call was final_answer, which then ran: its result closes the history.
    expected.push(chat_message(
        &json!({"role": "tool", "tool_call_id": "call_final_2",
        "content": "Still 5 and 20."}),
    ));
    let cont = continuation(&stepline, &runs[1]).await;
    assert_same_history(&cont, expected, "smolagents");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agno_agent() {
    let stepline = ingest("agno").await;
    let runs = runs(&stepline, "agno-session-1", 2).await;
    for run in &runs {
        assert_eq!(run["agent_name"], "calc", "{run}");
    }
    assert_eq!(runs[0]["model_request_count"], 3, "{}", runs[0]);
    let effects = list(&stepline, &runs[0], "effects").await;
    check_calc_effects(&effects, &["call_add", "call_mul", "call_div"]);
    check_events(&list(&stepline, &runs[0], "events").await, true);

    // What agno sent the model last (as the scripted server received it), and the answer.
    let own = read_json("agno/final_messages.json");
    let cont = continuation(&stepline, &runs[1]).await;
    assert_same_history(&cont, chat_messages(&own), "Agno");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crewai_with_event_listener() {
    let stepline = ingest("crewai/event_listener").await;
    let runs = runs(&stepline, "crewai-session-1", 2).await;
    for run in &runs {
        assert_eq!(run["agent_name"], "calc", "{run}");
        assert!(run["continuation_unavailable"].is_null(), "{run}");
    }
    assert_eq!(runs[0]["model_request_count"], 3, "{}", runs[0]);
    let effects = list(&stepline, &runs[0], "effects").await;
    check_calc_effects(&effects, &["call_add", "call_mul", "call_div"]);
    check_events(&list(&stepline, &runs[0], "events").await, true);

    // Each kickoff has its own history: what CrewAI passed its LLM last, per kickoff. The
    // openai-chat format sends a failed call's result as `{"error": ...}` (its ledger entry
    // failed), so the model sees that the call failed.
    let own = read_json("crewai/event_listener/final_messages.json");
    for (i, run) in runs.iter().enumerate() {
        let mut expected = chat_messages(&own[i]);
        for m in &mut expected {
            if m["tool_call_id"] == "call_div" {
                m["text"] = json!(json!({"error": m["text"]}).to_string());
            }
        }
        let cont = continuation(&stepline, run).await;
        assert_same_history(&cont, expected, "CrewAI");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crewai_without_llm_spans() {
    let stepline = ingest("crewai/default").await;
    let runs = runs(&stepline, "crewai-session-1", 2).await;
    for run in &runs {
        assert_eq!(run["agent_name"], "calc", "{run}");
        assert_eq!(run["model_request_count"], 0, "{run}");
        assert_eq!(run["snapshot_count"], 0, "{run}");
        let reason = run["continuation_unavailable"].as_str().unwrap_or_default();
        assert!(
            reason.contains("use_event_listener=True"),
            "the reason is given: {run}"
        );
    }
    // The tools ran without a model call to join them to: no call id anywhere.
    let effects = list(&stepline, &runs[0], "effects").await;
    check_calc_effects(&effects, &["", "", ""]);
    check_events(&list(&stepline, &runs[0], "events").await, false);
    assert!(list(&stepline, &runs[1], "effects").await.is_empty());

    let run_id = str_field(&runs[0], "run_id");
    let reply = stepline
        .get(&format!(
            "/v1/runs/{}/continuation?format=openai-chat",
            encode(run_id)
        ))
        .await;
    assert_ne!(reply.status, 200, "no continuation: {}", reply.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mastra_agent() {
    let stepline = ingest("mastra").await;
    let runs = runs(&stepline, "mastra-thread-1", 2).await;
    for run in &runs {
        assert_eq!(run["agent_name"], "calc", "{run}");
    }
    let effects = list(&stepline, &runs[0], "effects").await;
    check_calc_effects(&effects, &["call_add", "call_mul", "call_div"]);
    // Mastra's chat spans lose the tool calls of their answer: the calls are not "requested".
    check_events(&list(&stepline, &runs[0], "events").await, false);
    for run in &runs {
        assert_eq!(
            run["model_request_count"],
            if run == &runs[0] { 3 } else { 1 },
            "{run}"
        );
        let reason = run["continuation_unavailable"].as_str().unwrap_or_default();
        assert!(reason.contains("Mastra"), "the reason is given: {run}");
    }
}
