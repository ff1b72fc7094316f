//! Fixture-level tests of GenAI-convention producers whose packages are not in the test venvs:
//! spans recorded from the real packages (tests/fixtures/record/, versions in each recording
//! script) are sent as OTLP/JSON, as recorded, into the real `stepline` binary, and the runs, the
//! ledger and the continuation are checked through the query API.
//!
//! - Microsoft Agent Framework (agent-framework-core 1.23.0, ENABLE_SENSITIVE_DATA on): the
//!   convention's parts format on `invoke_agent` / `chat` / `execute_tool`.
//! - AG2 (ag2 1.2.1, TelemetryMiddleware): GenAI span names with OpenAI Chat message dicts in
//!   `gen_ai.input.messages` / `gen_ai.output.messages`, which stepline maps by their shape.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{encode, str_field, truncate, Stepline};

/// Sends every request of a recorded fixture (JSON lines of `{"traces": …}` / `{"logs": …}`).
async fn send_fixture(stepline: &Stepline, name: &str) {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let value: Value = serde_json::from_str(line).expect("fixture line is JSON");
        let (signal, body) = match (value.get("traces"), value.get("logs")) {
            (Some(t), _) => ("traces", t),
            (None, Some(l)) => ("logs", l),
            _ => panic!("fixture line is neither traces nor logs: {line}"),
        };
        let url = format!("{}/v1/{signal}", stepline.otlp_http_url());
        let resp = stepline
            .client()
            .post(&url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("POST fixture");
        assert!(resp.status().is_success(), "{url}: {}", resp.status());
    }
}

async fn the_run(stepline: &Stepline, agent: &str) -> Value {
    let list = format!("/v1/runs?agent_name={agent}");
    let runs = stepline
        .wait_for("the recorded run", Duration::from_secs(20), || {
            let list = list.clone();
            async move {
                let runs = stepline.get_list(&list, "runs").await;
                match runs.as_slice() {
                    [r] if r["status"] == "completed" && r["model_request_count"] == 2 => Ok(runs),
                    _ => Err(truncate(&Value::Array(runs).to_string(), 2000)),
                }
            }
        })
        .await;
    runs[0].clone()
}

/// Both recordings are the same conversation: two parallel calls, then the answer.
async fn check_calc_run(stepline: &Stepline, run: &Value, tool_result_weather: Value) {
    let run_id = str_field(run, "run_id").to_string();
    assert_eq!(run["tool_call_count"], 2, "{run}");
    let effects = stepline
        .get_list(&format!("/v1/runs/{}/effects", encode(&run_id)), "effects")
        .await;
    let got: Vec<Value> = effects
        .iter()
        .map(|e| {
            json!([
                e["tool_call_id"],
                e["tool_name"],
                e["status"],
                e["arguments"]
            ])
        })
        .collect();
    assert_eq!(
        got,
        vec![
            json!(["call_1", "get_weather", "completed", {"city": "Paris"}]),
            json!(["call_2", "add", "completed", {"a": 2, "b": 3}]),
        ],
        "{effects:?}"
    );
    assert_eq!(effects[0]["result"], tool_result_weather, "{effects:?}");

    let cont = stepline
        .get_ok(&format!(
            "/v1/runs/{}/continuation?format=openai-chat",
            encode(&run_id)
        ))
        .await;
    assert_eq!(cont["snapshot"]["state"], "complete", "{cont}");
    let messages: Vec<Value> = cont["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            let calls: Vec<Value> = m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let args = c["function"]["arguments"].as_str().unwrap_or("null");
                    json!([
                        c["id"],
                        c["function"]["name"],
                        serde_json::from_str::<Value>(args).ok()
                    ])
                })
                .collect();
            json!({"role": m["role"], "content": m["content"], "calls": calls,
                   "tool_call_id": m.get("tool_call_id")})
        })
        .collect();
    let roles: Vec<&Value> = messages.iter().map(|m| &m["role"]).collect();
    assert_eq!(
        roles,
        vec!["user", "assistant", "tool", "tool", "assistant"],
        "{cont}"
    );
    assert_eq!(messages[0]["content"], "Weather in Paris, and 2 + 3?");
    assert_eq!(
        messages[1]["calls"],
        json!([["call_1", "get_weather", {"city": "Paris"}], ["call_2", "add", {"a": 2, "b": 3}]])
    );
    assert_eq!(messages[2]["tool_call_id"], "call_1");
    assert_eq!(messages[3]["tool_call_id"], "call_2");
    assert_eq!(messages[4]["content"], "Sunny in Paris; 2 + 3 = 5.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microsoft_agent_framework_fixture() {
    let stepline = Stepline::start().await;
    send_fixture(&stepline, "maf.jsonl").await;
    let run = the_run(&stepline, "calc").await;
    check_calc_run(&stepline, &run, json!("sunny in Paris")).await;
    let cont = stepline
        .get_ok(&format!(
            "/v1/runs/{}/continuation?format=openai-chat",
            encode(str_field(&run, "run_id"))
        ))
        .await;
    assert_eq!(cont["messages"][0]["role"], "system", "{cont}");
    assert_eq!(
        cont["messages"][0]["content"],
        "You check weather and add numbers."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ag2_fixture_chat_shaped_messages() {
    let stepline = Stepline::start().await;
    send_fixture(&stepline, "ag2.jsonl").await;
    let run = the_run(&stepline, "calc").await;
    assert_eq!(run["conversation_id"], "ag2-thread-1", "{run}");
    check_calc_run(&stepline, &run, json!("sunny in Paris")).await;
}
