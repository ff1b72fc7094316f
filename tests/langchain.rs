//! LangChain / LangGraph end to end, through each of the three telemetry routes LangChain users
//! have (OpenInference, OpenLLMetry, LangSmith's OTel mode): real `langchain.agents.create_agent`
//! (LangGraph) with a scripted GenericFakeChatModel, an InMemorySaver and two user turns on one
//! thread, exporting through the stock OTLP HTTP exporter into the real binary
//! (tests/python/langgraph_scenario.py, venv tests/python/venvs/langchain.txt). Each route must
//! give one run per invocation named after the agent with the thread as conversation, events in
//! order, every tool call in the ledger (the failing one `failed`), and an openai-chat
//! continuation that LangChain reads back as exactly LangGraph's own `state["messages"]` and
//! accepts for a follow-up turn.

mod support;

use std::io::Write;
use std::time::Duration;

use serde_json::{json, Value};
use support::{encode, run_script_with, str_field, truncate, Stepline};

const SYSTEM_PROMPT: &str = "You are a weather and booking assistant.";

/// A tool call: id, tool, arguments, result (`None`: the call failed).
type Call = (&'static str, &'static str, Value, Option<Value>);

/// The tool calls of each turn.
fn expected_calls() -> [Vec<Call>; 2] {
    [
        vec![
            (
                "call_w1",
                "get_weather",
                json!({"city": "Paris"}),
                Some(json!("sunny in Paris")),
            ),
            ("call_a1", "add", json!({"a": 2, "b": 3}), Some(json!("5"))),
            (
                "call_b1",
                "book_table",
                json!({"restaurant": "Chez Nous", "people": 4}),
                None,
            ),
        ],
        vec![(
            "call_w2",
            "get_weather",
            json!({"city": "Rome"}),
            Some(json!("sunny in Rome")),
        )],
    ]
}

async fn langgraph_route(route: &str) {
    let stepline = Stepline::start().await;
    let python = support::deps::venv_python("langchain");
    let thread = format!("lg-{route}");
    let endpoint = stepline.otlp_http_url();
    let args = [
        "--route",
        route,
        "--endpoint",
        endpoint.as_str(),
        "--thread",
        thread.as_str(),
    ];
    let out = run_script_with(
        python.clone(),
        "langgraph_scenario.py",
        &args,
        Duration::from_secs(240),
    )
    .await
    .json_line();
    assert_eq!(out["export"]["failed_batches"], 0, "{out}");
    let state = out["state"].as_array().cloned().unwrap_or_default();
    assert_eq!(state.len(), 11, "LangGraph's own history: {out}");

    // One run per graph invocation, both on the thread, in order.
    let list = format!("/v1/runs?conversation_id={}", encode(&thread));
    let mut runs = stepline
        .wait_for("both LangGraph runs", Duration::from_secs(30), || {
            let list = list.clone();
            let stepline = &stepline;
            async move {
                let runs = stepline.get_list(&list, "runs").await;
                let done = runs.len() == 2
                    && runs.iter().all(|r| {
                        r["status"] == "completed" && r["continuation_unavailable"].is_null()
                    })
                    && runs
                        .iter()
                        .map(|r| r["model_request_count"].as_u64())
                        .sum::<Option<u64>>()
                        == Some(5);
                if done {
                    Ok(runs)
                } else {
                    Err(truncate(&Value::Array(runs).to_string(), 3000))
                }
            }
        })
        .await;
    runs.sort_by_key(|r| str_field(r, "started_at").to_string());
    for (run, calls) in runs.iter().zip(expected_calls()) {
        assert_eq!(run["agent_name"], "weather_agent", "{route}: {run}");
        assert!(run["parent_run_id"].is_null(), "{route}: {run}");
        assert_eq!(run["tool_call_count"], calls.len(), "{route}: {run}");
        assert!(
            run["warnings"].as_array().is_none_or(Vec::is_empty),
            "{route}: {run}"
        );
        let run_id = encode(str_field(run, "run_id"));

        // Every tool call in the ledger with its id, arguments and result.
        let effects = stepline
            .get_list(&format!("/v1/runs/{run_id}/effects"), "effects")
            .await;
        assert_eq!(effects.len(), calls.len(), "{route}: {effects:?}");
        for (effect, (id, name, args, result)) in effects.iter().zip(&calls) {
            assert_eq!(effect["tool_call_id"], *id, "{route}: {effect}");
            assert_eq!(effect["tool_name"], *name, "{route}: {effect}");
            assert_eq!(effect["arguments"], *args, "{route}: {effect}");
            match result {
                Some(result) => {
                    assert_eq!(effect["status"], "completed", "{route}: {effect}");
                    assert_eq!(effect["result"], *result, "{route}: {effect}");
                }
                None => {
                    assert_eq!(effect["status"], "failed", "{route}: {effect}");
                    assert_eq!(effect["error"], "no table for 4 at Chez Nous", "{route}");
                }
            }
        }

        // Events in order: start; each call requested, then started, then settled; end.
        let events = stepline
            .get_list(&format!("/v1/runs/{run_id}/events"), "events")
            .await;
        let kinds: Vec<&str> = events.iter().map(|e| str_field(e, "kind")).collect();
        assert_eq!(kinds.first(), Some(&"run_started"), "{route}: {kinds:?}");
        assert_eq!(kinds.last(), Some(&"run_completed"), "{route}: {kinds:?}");
        let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{route}: {seqs:?}");
        for (id, _, _, result) in &calls {
            let at = |kind: &str| {
                events
                    .iter()
                    .position(|e| e["kind"] == kind && e["tool_call_id"] == *id)
                    .unwrap_or_else(|| panic!("{route}: no {kind} for {id}: {kinds:?}"))
            };
            let settled = if result.is_some() {
                "tool_call_completed"
            } else {
                "tool_call_failed"
            };
            let (requested, started, ended) = (
                at("tool_call_requested"),
                at("tool_call_started"),
                at(settled),
            );
            assert!(
                requested < started && started < ended,
                "{route} {id}: {kinds:?}"
            );
        }
    }

    // The latest run's continuation is LangGraph's own state, message for message (after the
    // system prompt, which LangGraph keeps out of its state), as LangChain itself reads it.
    let last = encode(str_field(&runs[1], "run_id"));
    let cont = stepline
        .get_ok(&format!("/v1/runs/{last}/continuation?format=openai-chat"))
        .await;
    assert_eq!(cont["snapshot"]["state"], "complete", "{route}: {cont}");
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(cont.to_string().as_bytes()).expect("write");
    let path = file.path().display().to_string();
    let next = run_script_with(
        python,
        "langgraph_scenario.py",
        &["--route", route, "--continue-from", &path],
        Duration::from_secs(240),
    )
    .await
    .json_line();
    let continued = next["continued"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        continued.first(),
        Some(&json!({"type": "system", "content": SYSTEM_PROMPT})),
        "{route}: {cont}"
    );
    assert_eq!(&continued[1..], &state[..], "{route}: {cont}");

    // LangGraph takes it for a follow-up turn.
    let follow = next["follow_up"].as_array().cloned().unwrap_or_default();
    assert_eq!(follow.len(), continued.len() + 2, "{route}: {next}");
    assert_eq!(
        &follow[..continued.len()],
        &continued[..],
        "{route}: {next}"
    );
    assert_eq!(
        follow.last(),
        Some(&json!({"type": "ai", "content": "Still sunny."})),
        "{route}: {next}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langgraph_via_openinference() {
    langgraph_route("openinference").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langgraph_via_openllmetry() {
    langgraph_route("openllmetry").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langgraph_via_langsmith_otel_mode() {
    langgraph_route("langsmith").await;
}
