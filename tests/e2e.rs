//! End-to-end tests against the real `stepline` binary and real Pydantic AI clients.
//!
//! Each test starts its own stepline (free ports, temporary data directory) and drives it with the
//! Python scripts in `tests/python/` run from the venv named by `STEPLINE_PYTHON` (`make test` sets
//! it up). Everything is checked through the public query API of design.md.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::Duration;

use serde_json::{json, Value};
use support::{
    as_json_value, assert_timestamp, encode, history_differences, run_scenario, run_script,
    str_field, truncate, Options, RunningScript, Scenario, Stepline,
};

// =============================================================================================
// Real client, both transports
// =============================================================================================

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pydantic_ai_over_http() {
    let stepline = Stepline::start().await;
    let scenario = run_scenario(&stepline, "http", "conv-e2e-http").await;
    check_scenario(&stepline, &scenario, "conv-e2e-http").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pydantic_ai_over_grpc() {
    let stepline = Stepline::start().await;
    let scenario = run_scenario(&stepline, "grpc", "conv-e2e-grpc").await;
    check_scenario(&stepline, &scenario, "conv-e2e-grpc").await;
}

/// A tool call the orchestrator's model makes.
struct Call {
    id: &'static str,
    tool: &'static str,
    arguments: &'static str,
    /// Index of the model request that asked for it.
    step: usize,
    /// Expected effect status.
    outcome: &'static str,
}

const fn call(
    id: &'static str,
    tool: &'static str,
    arguments: &'static str,
    step: usize,
    outcome: &'static str,
) -> Call {
    Call {
        id,
        tool,
        arguments,
        step,
        outcome,
    }
}

const CITY: &str = r#"{"city":"Paris"}"#;
const ORCHESTRATOR_CALLS: &[Call] = &[
    call("call_w1", "get_weather", CITY, 0, "completed"),
    call("call_b1", "book_trip", CITY, 0, "failed"),
    call("call_b2", "book_trip", CITY, 1, "completed"),
    call(
        "call_r1",
        "ask_researcher",
        r#"{"question":"Paris?"}"#,
        2,
        "completed",
    ),
];

async fn check_scenario(stepline: &Stepline, scenario: &Scenario, conversation_id: &str) {
    let orchestrator = check_runs(stepline, scenario, conversation_id).await;
    let run_id = str_field(&orchestrator, "run_id").to_string();
    check_orchestrator_events(stepline, &run_id).await;
    check_effects(stepline, &run_id).await;
    check_snapshots(stepline, &run_id).await;
    check_pydantic_continuation(stepline, scenario, &run_id).await;
    check_otel_continuation(stepline, &run_id).await;
}

/// One run per agent invocation, right names, ids, aliases, parent and conversation; the list
/// filters AND-combine and order by started_at. Returns the orchestrator run.
async fn check_runs(stepline: &Stepline, scenario: &Scenario, conversation_id: &str) -> Value {
    let path = format!("/v1/runs?conversation_id={}", encode(conversation_id));
    let runs = stepline.get_list(&path, "runs").await;
    assert_eq!(
        runs.len(),
        1,
        "GET {path}: expected exactly the orchestrator run (the researcher has its own conversation id), got {}",
        Value::Array(runs.clone())
    );
    let orchestrator = runs[0].clone();
    let ctx = format!("GET {path} → {orchestrator}");
    assert_eq!(
        str_field(&orchestrator, "agent_name"),
        "orchestrator",
        "{ctx}"
    );
    assert_eq!(str_field(&orchestrator, "status"), "completed", "{ctx}");
    assert_eq!(
        str_field(&orchestrator, "conversation_id"),
        conversation_id,
        "{ctx}"
    );
    assert!(
        orchestrator.get("parent_run_id").is_none_or(Value::is_null),
        "the orchestrator is a root run, parent_run_id must be null: {ctx}"
    );
    assert!(
        orchestrator.get("error").is_none_or(Value::is_null),
        "a completed run has no error: {ctx}"
    );
    assert_timestamp(&orchestrator, "started_at", &ctx);
    assert_timestamp(&orchestrator, "ended_at", &ctx);
    assert!(
        str_field(&orchestrator, "started_at") <= str_field(&orchestrator, "ended_at"),
        "{ctx}"
    );
    let run_id = str_field(&orchestrator, "run_id").to_string();
    let trace_id = str_field(&orchestrator, "trace_id").to_string();
    assert!(!trace_id.is_empty(), "{ctx}");
    let aliases: Vec<&str> = orchestrator
        .get("aliases")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("run has no `aliases` array: {ctx}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        run_id == scenario.run_id || aliases.contains(&scenario.run_id.as_str()),
        "Pydantic AI's run id {} (gen_ai.agent.call.id) is neither the run_id nor among the aliases: {ctx}",
        scenario.run_id
    );

    // The run resolves by its own id and by the Pydantic AI run id.
    for id in [run_id.as_str(), scenario.run_id.as_str()] {
        let run = stepline.get_ok(&format!("/v1/runs/{}", encode(id))).await;
        assert_eq!(
            str_field(&run, "run_id"),
            run_id,
            "GET /v1/runs/{id} must resolve to the orchestrator run {run_id}; got {run}"
        );
        assert_eq!(str_field(&run, "agent_name"), "orchestrator");
    }

    // The delegate: its own run, nested under the orchestrator.
    let path = format!("/v1/runs?parent_run_id={}", encode(&run_id));
    let children = stepline.get_list(&path, "runs").await;
    assert_eq!(
        children.len(),
        1,
        "GET {path}: expected the researcher run, got {}",
        Value::Array(children.clone())
    );
    let researcher = &children[0];
    let ctx = format!("GET {path} → {researcher}");
    assert_eq!(str_field(researcher, "agent_name"), "researcher", "{ctx}");
    assert_eq!(str_field(researcher, "parent_run_id"), run_id, "{ctx}");
    assert_eq!(str_field(researcher, "status"), "completed", "{ctx}");
    assert_eq!(str_field(researcher, "trace_id"), trace_id, "{ctx}");
    if let Some(conv) = &scenario.delegate_conversation_id {
        assert_eq!(str_field(researcher, "conversation_id"), conv, "{ctx}");
    }
    let researcher_id = str_field(researcher, "run_id").to_string();
    assert_ne!(researcher_id, run_id);
    if let Some(delegate_run_id) = &scenario.delegate_run_id {
        let run = stepline
            .get_ok(&format!("/v1/runs/{}", encode(delegate_run_id)))
            .await;
        assert_eq!(
            str_field(&run, "run_id"),
            researcher_id,
            "GET /v1/runs/{delegate_run_id} (the researcher's Pydantic AI run id) must resolve to {researcher_id}; got {run}"
        );
    }
    let kinds = event_kinds(stepline, &researcher_id).await;
    assert_eq!(
        kinds,
        [
            "run_started",
            "model_request_started",
            "model_request_completed",
            "run_completed"
        ],
        "events of the researcher run {researcher_id}"
    );

    // Filters AND-combine; order is started_at ascending.
    let path = format!("/v1/runs?trace_id={}", encode(&trace_id));
    let in_trace = stepline.get_list(&path, "runs").await;
    let names: Vec<&str> = in_trace
        .iter()
        .map(|r| str_field(r, "agent_name"))
        .collect();
    assert_eq!(
        names,
        ["orchestrator", "researcher"],
        "GET {path}: both runs, ordered by started_at"
    );
    let path = format!(
        "/v1/runs?trace_id={}&agent_name=researcher",
        encode(&trace_id)
    );
    let only = stepline.get_list(&path, "runs").await;
    assert_eq!(only.len(), 1, "GET {path}: {}", Value::Array(only.clone()));
    assert_eq!(str_field(&only[0], "run_id"), researcher_id);
    let path = format!(
        "/v1/runs?conversation_id={}&agent_name=researcher",
        encode(conversation_id)
    );
    let none = stepline.get_list(&path, "runs").await;
    assert!(
        none.is_empty(),
        "GET {path}: filters must AND-combine, got {}",
        Value::Array(none)
    );
    let path = format!(
        "/v1/runs?conversation_id={}&status=completed&agent_name=orchestrator",
        encode(conversation_id)
    );
    let one = stepline.get_list(&path, "runs").await;
    assert_eq!(one.len(), 1, "GET {path}: {}", Value::Array(one.clone()));

    orchestrator
}

async fn events(stepline: &Stepline, run_id: &str) -> Vec<Value> {
    stepline
        .get_list(&format!("/v1/runs/{}/events", encode(run_id)), "events")
        .await
}

async fn event_kinds(stepline: &Stepline, run_id: &str) -> Vec<String> {
    events(stepline, run_id)
        .await
        .iter()
        .map(|e| str_field(e, "kind").to_string())
        .collect()
}

/// Shape of every event, seq strictly increasing, timestamps non-decreasing.
fn check_event_shapes(events: &[Value], ctx: &str) {
    let mut last_seq: Option<u64> = None;
    let mut last_ts = String::new();
    for event in events {
        let seq = event
            .get("seq")
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("{ctx}: event without a numeric seq: {event}"));
        if let Some(prev) = last_seq {
            assert!(seq > prev, "{ctx}: seq not increasing at {event}");
        }
        last_seq = Some(seq);
        assert_timestamp(event, "timestamp", &format!("{ctx}: {event}"));
        let ts = str_field(event, "timestamp").to_string();
        assert!(
            ts >= last_ts,
            "{ctx}: events are not chronological: {ts} after {last_ts} at {event}"
        );
        last_ts = ts;
        // span_id is the span the event comes from. Run events may have none (null) when the
        // agent-run span never arrived (the process died); model and tool events always have one.
        let kind = str_field(event, "kind");
        assert!(
            event.get("span_id").is_some(),
            "{ctx}: event without a span_id field: {event}"
        );
        if !kind.starts_with("run_") {
            str_field(event, "span_id");
        }
        if kind.starts_with("tool_call_") {
            str_field(event, "tool_call_id");
            str_field(event, "tool_name");
        }
    }
}

async fn check_orchestrator_events(stepline: &Stepline, run_id: &str) {
    let events = events(stepline, run_id).await;
    let ctx = format!(
        "GET /v1/runs/{run_id}/events → {}",
        truncate(&Value::Array(events.clone()).to_string(), 6000)
    );
    check_event_shapes(&events, &ctx);
    let kinds: Vec<&str> = events.iter().map(|e| str_field(e, "kind")).collect();

    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for k in &kinds {
        *counts.entry(k).or_default() += 1;
    }
    let expected: BTreeMap<&str, usize> = [
        ("run_started", 1),
        ("model_request_started", 4),
        ("model_request_completed", 4),
        ("tool_call_requested", 4),
        ("tool_call_started", 4),
        ("tool_call_completed", 3),
        ("tool_call_failed", 1),
        ("run_completed", 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(counts, expected, "event kinds of the orchestrator; {ctx}");
    assert_eq!(kinds.first(), Some(&"run_started"), "{ctx}");
    assert_eq!(kinds.last(), Some(&"run_completed"), "{ctx}");

    // Model requests alternate started/completed, each pair from one span.
    let model: Vec<usize> = (0..events.len())
        .filter(|&i| kinds[i].starts_with("model_request_"))
        .collect();
    let mut step_bounds = Vec::new(); // (started index, completed index) per step
    for pair in model.chunks(2) {
        let (s, c) = (pair[0], pair[1]);
        assert_eq!(
            (kinds[s], kinds[c]),
            ("model_request_started", "model_request_completed"),
            "model request events must come in started/completed pairs; {ctx}"
        );
        assert_eq!(
            events[s].get("span_id"),
            events[c].get("span_id"),
            "a model request's started and completed events come from the same span; {ctx}"
        );
        step_bounds.push((s, c));
    }

    // Each tool call: requested after its model request, then started, then settled, all before the
    // next model request.
    let position = |kind: &str, id: &str| -> usize {
        let found: Vec<usize> = (0..events.len())
            .filter(|&i| {
                kinds[i] == kind
                    && events[i].get("tool_call_id").and_then(Value::as_str) == Some(id)
            })
            .collect();
        assert_eq!(
            found.len(),
            1,
            "expected exactly one {kind} for {id}; {ctx}"
        );
        found[0]
    };
    for &Call {
        id,
        tool: name,
        step,
        outcome,
        ..
    } in ORCHESTRATOR_CALLS
    {
        let terminal_kind = if outcome == "failed" {
            "tool_call_failed"
        } else {
            "tool_call_completed"
        };
        let r = position("tool_call_requested", id);
        let s = position("tool_call_started", id);
        let t = position(terminal_kind, id);
        for i in [r, s, t] {
            assert_eq!(
                str_field(&events[i], "tool_name"),
                name,
                "tool_name of {id}; {ctx}"
            );
        }
        let (started, _completed) = step_bounds[step];
        let next = step_bounds[step + 1].0;
        assert!(
            started < r && r < s && s < t && t < next,
            "{id}: expected model_request_started(step {step}) < requested < started < {terminal_kind} < next model_request_started, \
             got indexes {started}, {r}, {s}, {t}, {next}; {ctx}"
        );
        assert_eq!(
            events[s].get("span_id"),
            events[t].get("span_id"),
            "{id}: started and settled events come from the same tool span; {ctx}"
        );
        if outcome == "failed" {
            let error = events[t]
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("tool_call_failed for {id} has no error; {ctx}"));
            assert!(
                error.contains("booking system busy") || error.contains("ToolRetryError"),
                "tool_call_failed for {id}: the error should carry the ModelRetry (message or exception type), got {error:?}"
            );
        }
    }
}

async fn check_effects(stepline: &Stepline, run_id: &str) {
    let path = format!("/v1/runs/{}/effects", encode(run_id));
    let effects = stepline.get_list(&path, "effects").await;
    let ctx = format!("GET {path} → {}", Value::Array(effects.clone()));
    assert_eq!(effects.len(), ORCHESTRATOR_CALLS.len(), "{ctx}");
    for &Call {
        id,
        tool: name,
        arguments,
        outcome,
        ..
    } in ORCHESTRATOR_CALLS
    {
        let effect = effects
            .iter()
            .find(|e| e.get("tool_call_id").and_then(Value::as_str) == Some(id))
            .unwrap_or_else(|| panic!("no effect for {id}; {ctx}"));
        assert_eq!(str_field(effect, "tool_name"), name, "{ctx}");
        assert_eq!(str_field(effect, "status"), outcome, "{id}: {ctx}");
        let expected_args: Value = serde_json::from_str(arguments).expect("literal JSON");
        assert_eq!(
            effect.get("arguments").map(as_json_value),
            Some(expected_args),
            "{id}: arguments; {ctx}"
        );
        for key in ["requested_at", "started_at", "ended_at"] {
            assert_timestamp(effect, key, &format!("{id}: {ctx}"));
        }
        assert!(
            str_field(effect, "requested_at") <= str_field(effect, "started_at")
                && str_field(effect, "started_at") <= str_field(effect, "ended_at"),
            "{id}: requested_at <= started_at <= ended_at; {ctx}"
        );
        if outcome == "failed" {
            assert!(
                effect.get("error").is_some_and(|e| !e.is_null()),
                "{id}: a failed effect carries its error; {ctx}"
            );
        } else {
            assert!(
                effect.get("result").is_some_and(|r| !r.is_null()),
                "{id}: a completed effect carries its result; {ctx}"
            );
        }
    }
    let weather = effects
        .iter()
        .find(|e| e.get("tool_call_id").and_then(Value::as_str) == Some("call_w1"))
        .and_then(|e| e.get("result"))
        .map(|r| r.to_string())
        .unwrap_or_default();
    assert!(
        weather.contains("18C in Paris"),
        "call_w1 result should summarise \"18C in Paris\", got {weather}"
    );

    let path = format!("/v1/runs/{}/effects?unresolved=true", encode(run_id));
    let unresolved = stepline.get_list(&path, "effects").await;
    assert!(
        unresolved.is_empty(),
        "GET {path}: every tool call is settled, expected [], got {}",
        Value::Array(unresolved)
    );
}

async fn snapshots(stepline: &Stepline, run_id: &str) -> Vec<Value> {
    stepline
        .get_list(
            &format!("/v1/runs/{}/snapshots", encode(run_id)),
            "snapshots",
        )
        .await
}

async fn check_snapshots(stepline: &Stepline, run_id: &str) {
    let snaps = snapshots(stepline, run_id).await;
    let ctx = format!(
        "GET /v1/runs/{run_id}/snapshots → {}",
        Value::Array(snaps.clone())
    );
    assert!(!snaps.is_empty(), "{ctx}");
    let mut last_seq = None;
    for s in &snaps {
        let seq = s
            .get("seq")
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("snapshot without numeric seq; {ctx}"));
        assert!(last_seq.is_none_or(|p| seq > p), "seq increasing; {ctx}");
        last_seq = Some(seq);
        assert!(s.get("step_index").is_some_and(Value::is_u64), "{ctx}");
        assert!(s.get("message_count").is_some_and(Value::is_u64), "{ctx}");
        assert!(
            ["complete", "interrupted"].contains(&str_field(s, "state")),
            "{ctx}"
        );
        assert!(
            ["observed", "reconstructed"].contains(&str_field(s, "source")),
            "{ctx}"
        );
        assert_timestamp(s, "timestamp", &ctx);
    }
    let last = snaps.last().expect("non-empty");
    assert_eq!(
        str_field(last, "state"),
        "complete",
        "the final snapshot is complete; {ctx}"
    );
    assert_eq!(
        last.get("message_count").and_then(Value::as_u64),
        Some(8),
        "the final snapshot holds the whole history (8 messages); {ctx}"
    );
    // A complete snapshot at each step boundary where every tool call is answered.
    let complete_counts: BTreeSet<u64> = snaps
        .iter()
        .filter(|s| str_field(s, "state") == "complete")
        .filter_map(|s| s.get("message_count").and_then(Value::as_u64))
        .collect();
    for n in [3, 5, 7, 8] {
        assert!(
            complete_counts.contains(&n),
            "expected a complete snapshot with {n} messages (tool results of each step answered); {ctx}"
        );
    }
}

async fn check_pydantic_continuation(stepline: &Stepline, scenario: &Scenario, run_id: &str) {
    let path = format!(
        "/v1/runs/{}/continuation?format=pydantic-ai",
        encode(run_id)
    );
    let body = stepline.get_ok(&path).await;
    let ctx = format!("GET {path} → {}", truncate(&body.to_string(), 6000));
    assert_eq!(str_field(&body, "run_id"), run_id, "{ctx}");
    assert_eq!(str_field(&body, "format"), "pydantic-ai", "{ctx}");
    let snapshot = body
        .get("snapshot")
        .unwrap_or_else(|| panic!("no snapshot; {ctx}"));
    assert_eq!(str_field(snapshot, "state"), "complete", "{ctx}");
    str_field(snapshot, "source");
    assert!(snapshot.get("seq").is_some_and(Value::is_u64), "{ctx}");
    assert!(
        snapshot.get("step_index").is_some_and(Value::is_u64),
        "{ctx}"
    );
    let latest = snapshots(stepline, run_id).await;
    assert_eq!(
        snapshot.get("seq"),
        latest.last().and_then(|s| s.get("seq")),
        "the default continuation is the latest snapshot; {ctx}"
    );
    assert_eq!(body.get("unresolved_effects"), Some(&json!([])), "{ctx}");
    assert!(body.get("warnings").is_some_and(Value::is_array), "{ctx}");
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no messages array; {ctx}"));
    // Omitted timestamps default to "now" in Pydantic AI: stepline must always emit them.
    for (i, m) in messages.iter().enumerate() {
        assert!(
            m.get("timestamp").is_some_and(Value::is_string),
            "message {i} has no timestamp: {m}"
        );
        for part in m
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let kind = part.get("part_kind").and_then(Value::as_str).unwrap_or("");
            if [
                "user-prompt",
                "tool-return",
                "retry-prompt",
                "system-prompt",
            ]
            .contains(&kind)
            {
                assert!(
                    part.get("timestamp").is_some_and(Value::is_string),
                    "message {i}: {kind} part has no timestamp: {part}"
                );
            }
        }
    }

    // Pydantic AI loads it and continues the conversation with it.
    let report = run_script(
        "continue_run.py",
        &["--api", &stepline.api_url(""), "--run-id", run_id],
        Duration::from_secs(120),
    )
    .await
    .json_line();
    assert_eq!(report["validated"], json!(true), "{report}");
    assert_eq!(report["message_count"], json!(8), "{report}");
    assert_eq!(report["model_saw"], json!(9), "{report}");
    assert_eq!(report["history_matches"], json!(true), "{report}");
    assert_eq!(report["last_prompt"], json!("and tomorrow?"), "{report}");

    // And it is the history Pydantic AI reported, message for message, apart from the fields the
    // telemetry does not carry.
    let loaded = report["canonical_messages"]
        .as_array()
        .unwrap_or_else(|| panic!("continue_run.py printed no canonical_messages: {report}"));
    let differences = history_differences(&scenario.all_messages, loaded);
    assert!(
        differences.is_empty(),
        "the pydantic-ai continuation (as loaded by ModelMessagesTypeAdapter) differs from result.all_messages():\n{}",
        differences.join("\n")
    );
}

async fn check_otel_continuation(stepline: &Stepline, run_id: &str) {
    let path = format!("/v1/runs/{}/continuation?format=otel", encode(run_id));
    let body = stepline.get_ok(&path).await;
    let ctx = format!("GET {path} → {}", truncate(&body.to_string(), 6000));
    assert_eq!(str_field(&body, "format"), "otel", "{ctx}");
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no messages; {ctx}"));
    let roles: Vec<&str> = messages.iter().map(|m| str_field(m, "role")).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant"
        ],
        "{ctx}"
    );
    let call_ids: Vec<&str> = messages
        .iter()
        .flat_map(|m| m["parts"].as_array().into_iter().flatten())
        .filter(|p| p["type"] == "tool_call")
        .filter_map(|p| p["id"].as_str())
        .collect();
    assert_eq!(
        call_ids,
        ["call_w1", "call_b1", "call_b2", "call_r1"],
        "{ctx}"
    );
    let answered: Vec<&str> = messages
        .iter()
        .flat_map(|m| m["parts"].as_array().into_iter().flatten())
        .filter(|p| p["type"] == "tool_call_response")
        .filter_map(|p| p["id"].as_str())
        .collect();
    assert_eq!(
        answered,
        ["call_w1", "call_b1", "call_b2", "call_r1"],
        "{ctx}"
    );
    let instructions = body
        .get("system_instructions")
        .unwrap_or_else(|| panic!("no system_instructions; {ctx}"));
    assert!(
        instructions.as_array().is_some_and(|parts| parts
            .iter()
            .any(|p| p["type"] == "text" && p["content"] == "You plan trips.")),
        "system_instructions should hold the text part \"You plan trips.\"; {ctx}"
    );
}

// =============================================================================================
// Crash
// =============================================================================================

struct CrashedRun {
    run_id: String,
    pydantic_run_id: String,
    agent: RunningScript,
}

/// Starts crash_agent.py, waits until its tool hangs and stepline shows step 1, then SIGKILLs it.
async fn crash_agent_mid_tool(stepline: &Stepline, conversation_id: &str) -> CrashedRun {
    let endpoint = stepline.otlp_http_url();
    let mut agent = RunningScript::spawn(
        "crash_agent.py",
        &[
            "--transport",
            "http",
            "--endpoint",
            &endpoint,
            "--conversation-id",
            conversation_id,
        ],
    )
    .await;
    let marker = agent
        .wait_for_line("TOOL_STARTED", Duration::from_secs(120))
        .await;
    let marker: Value = serde_json::from_str(&marker)
        .unwrap_or_else(|e| panic!("TOOL_STARTED marker is not JSON ({e}): {marker}"));
    let pydantic_run_id = str_field(&marker, "run_id").to_string();

    // Step 1 (chat, lookup_price) and the chat that asked for charge_card are exported by the 100 ms
    // batch processor while the tool blocks.
    let path = format!("/v1/runs?conversation_id={}", encode(conversation_id));
    let run_id = stepline
        .wait_for(
            "the crashed run with step-1 events and the charge_card request",
            Duration::from_secs(30),
            || async {
                let reply = stepline.get(&path).await;
                let runs = reply
                    .json
                    .as_ref()
                    .and_then(|b| b.get("runs"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let Some(run) = runs.first() else {
                    return Err(format!("GET {path} → {} {}", reply.status, reply.text));
                };
                let run_id = str_field(run, "run_id").to_string();
                let evs = events(stepline, &run_id).await;
                let has = |kind: &str, id: &str| {
                    evs.iter()
                        .any(|e| e["kind"] == kind && e["tool_call_id"].as_str() == Some(id))
                };
                if has("tool_call_completed", "call_fast1")
                    && has("tool_call_requested", "call_slow1")
                {
                    Ok(run_id)
                } else {
                    Err(format!("events of {run_id}: {}", Value::Array(evs)))
                }
            },
        )
        .await;
    agent.kill().await;
    CrashedRun {
        run_id,
        pydantic_run_id,
        agent,
    }
}

/// What must hold right after the crash, before abandon or timeout.
async fn check_crashed_run(stepline: &Stepline, crashed: &CrashedRun, expect_running: bool) {
    let run_id = &crashed.run_id;
    let run = stepline
        .get_ok(&format!("/v1/runs/{}", encode(&crashed.pydantic_run_id)))
        .await;
    assert_eq!(
        str_field(&run, "run_id"),
        run_id,
        "the Pydantic AI run id (from the child spans' gen_ai.agent.call.id) resolves to the run even though the run span never arrived: {run}"
    );
    assert_eq!(str_field(&run, "agent_name"), "payments", "{run}");
    if expect_running {
        assert_eq!(
            str_field(&run, "status"),
            "running",
            "the agent was killed mid-tool: the run is not completed; {run}"
        );
    }
    assert_ne!(str_field(&run, "status"), "completed", "{run}");

    let evs = events(stepline, run_id).await;
    let ctx = format!(
        "GET /v1/runs/{run_id}/events → {}",
        Value::Array(evs.clone())
    );
    check_event_shapes(&evs, &ctx);
    let kinds: Vec<&str> = evs.iter().map(|e| str_field(e, "kind")).collect();
    for kind in ["run_completed", "run_failed"] {
        assert!(!kinds.contains(&kind), "unexpected {kind}; {ctx}");
    }
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "model_request_completed")
            .count(),
        2,
        "both model requests (step 1 and the one asking for charge_card) were exported; {ctx}"
    );
    for (kind, id) in [
        ("tool_call_requested", "call_fast1"),
        ("tool_call_started", "call_fast1"),
        ("tool_call_completed", "call_fast1"),
        ("tool_call_requested", "call_slow1"),
    ] {
        assert!(
            evs.iter()
                .any(|e| e["kind"] == kind && e["tool_call_id"].as_str() == Some(id)),
            "missing {kind} for {id}; {ctx}"
        );
    }
    assert!(
        !evs.iter()
            .any(|e| e["tool_call_id"].as_str() == Some("call_slow1")
                && (e["kind"] == "tool_call_completed" || e["kind"] == "tool_call_failed")),
        "call_slow1 never finished; {ctx}"
    );

    // The latest complete continuation stops at the last settled step.
    let path = format!(
        "/v1/runs/{}/continuation?format=pydantic-ai",
        encode(run_id)
    );
    let body = stepline.get_ok(&path).await;
    let ctx = format!("GET {path} → {}", truncate(&body.to_string(), 6000));
    assert_eq!(str_field(&body["snapshot"], "state"), "complete", "{ctx}");
    let messages = body["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("no messages; {ctx}"));
    let kinds: Vec<&str> = messages.iter().map(|m| str_field(m, "kind")).collect();
    assert_eq!(
        kinds,
        ["request", "response", "request"],
        "prompt, the lookup_price call, its return; {ctx}"
    );
    let text = body["messages"].to_string();
    assert!(
        text.contains("call_fast1") && !text.contains("call_slow1"),
        "the complete continuation answers call_fast1 and does not contain the in-flight call_slow1; {ctx}"
    );
    if expect_running {
        let unresolved: Vec<&str> = body["unresolved_effects"]
            .as_array()
            .unwrap_or_else(|| panic!("no unresolved_effects array; {ctx}"))
            .iter()
            .filter_map(|e| e.get("tool_call_id").and_then(Value::as_str))
            .collect();
        assert_eq!(
            unresolved,
            ["call_slow1"],
            "the continuation names the in-flight call as unresolved; {ctx}"
        );
    }
    // Pydantic AI loads it and can continue from it.
    let report = run_script(
        "continue_run.py",
        &["--api", &stepline.api_url(""), "--run-id", run_id],
        Duration::from_secs(120),
    )
    .await
    .json_line();
    assert_eq!(report["message_count"], json!(3), "{report}");
    assert_eq!(report["history_matches"], json!(true), "{report}");

    if expect_running {
        // The interrupted snapshot is there on request.
        let path = format!(
            "/v1/runs/{}/continuation?format=pydantic-ai&include_interrupted=true",
            encode(run_id)
        );
        let body = stepline.get_ok(&path).await;
        let ctx = format!("GET {path} → {}", truncate(&body.to_string(), 6000));
        assert_eq!(
            str_field(&body["snapshot"], "state"),
            "interrupted",
            "{ctx}"
        );
        assert!(
            body["messages"].to_string().contains("call_slow1"),
            "the interrupted continuation holds the charge_card call; {ctx}"
        );

        // The ledger: call_fast1 settled, call_slow1 unresolved.
        let path = format!("/v1/runs/{}/effects?unresolved=true", encode(run_id));
        let unresolved = stepline.get_list(&path, "effects").await;
        let ctx = format!("GET {path} → {}", Value::Array(unresolved.clone()));
        assert_eq!(unresolved.len(), 1, "{ctx}");
        assert_eq!(
            str_field(&unresolved[0], "tool_call_id"),
            "call_slow1",
            "{ctx}"
        );
        assert_eq!(
            str_field(&unresolved[0], "tool_name"),
            "charge_card",
            "{ctx}"
        );
        assert!(
            ["requested", "started"].contains(&str_field(&unresolved[0], "status")),
            "{ctx}"
        );
        assert_eq!(
            unresolved[0].get("arguments").map(as_json_value),
            Some(json!({"amount_eur": 120})),
            "{ctx}"
        );
    }
    let effects = stepline
        .get_list(&format!("/v1/runs/{}/effects", encode(run_id)), "effects")
        .await;
    let fast = effects
        .iter()
        .find(|e| e["tool_call_id"] == "call_fast1")
        .unwrap_or_else(|| {
            panic!(
                "no effect for call_fast1: {}",
                Value::Array(effects.clone())
            )
        });
    assert_eq!(str_field(fast, "status"), "completed", "{fast}");
}

/// After abandon or timeout: the run is over and the in-flight call is unknown_after_crash.
async fn check_after_crash_settled(stepline: &Stepline, run_id: &str) {
    let run = stepline
        .get_ok(&format!("/v1/runs/{}", encode(run_id)))
        .await;
    assert_eq!(str_field(&run, "status"), "abandoned", "{run}");
    assert_timestamp(&run, "ended_at", &run.to_string());
    let effects = stepline
        .get_list(&format!("/v1/runs/{}/effects", encode(run_id)), "effects")
        .await;
    let ctx = format!(
        "GET /v1/runs/{run_id}/effects → {}",
        Value::Array(effects.clone())
    );
    let status_of = |id: &str| {
        effects
            .iter()
            .find(|e| e["tool_call_id"] == id)
            .map(|e| str_field(e, "status").to_string())
            .unwrap_or_else(|| panic!("no effect for {id}; {ctx}"))
    };
    assert_eq!(status_of("call_slow1"), "unknown_after_crash", "{ctx}");
    assert_eq!(status_of("call_fast1"), "completed", "{ctx}");
    let kinds = event_kinds(stepline, run_id).await;
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("run_abandoned"),
        "the last event of an abandoned run: {kinds:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_mid_tool() {
    let stepline = Stepline::start().await;
    let crashed = crash_agent_mid_tool(&stepline, "conv-e2e-crash").await;
    check_crashed_run(&stepline, &crashed, true).await;

    let path = format!("/v1/runs/{}/abandon", encode(&crashed.run_id));
    let reply = stepline.post(&path).await;
    assert!(
        (200..300).contains(&reply.status),
        "POST {path} answered {}: {}",
        reply.status,
        reply.text
    );
    check_after_crash_settled(&stepline, &crashed.run_id).await;
    let path = format!(
        "/v1/runs/{}/effects?unresolved=true",
        encode(&crashed.run_id)
    );
    let still = stepline.get_list(&path, "effects").await;
    assert!(
        still
            .iter()
            .all(|e| e["status"] != "requested" && e["status"] != "started"),
        "after abandon nothing is requested/started any more: GET {path} → {}",
        Value::Array(still)
    );
    drop(crashed.agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_mid_tool_inactivity_timeout() {
    let stepline = Stepline::start_with(Options {
        inactivity_timeout: "2s".into(),
        ..Options::default()
    })
    .await;
    let crashed = crash_agent_mid_tool(&stepline, "conv-e2e-timeout").await;
    // The sweeper may already have acted (2 s of silence while the tool blocked): do not require
    // "running" here, only what holds either way.
    check_crashed_run(&stepline, &crashed, false).await;
    let path = format!("/v1/runs/{}", encode(&crashed.run_id));
    stepline
        .wait_for(
            "the inactivity sweeper to mark the silent run abandoned",
            Duration::from_secs(30),
            || async {
                let reply = stepline.get(&path).await;
                match reply.json.as_ref().and_then(|b| b["status"].as_str()) {
                    Some("abandoned") => Ok(()),
                    _ => Err(format!("GET {path} → {} {}", reply.status, reply.text)),
                }
            },
        )
        .await;
    check_after_crash_settled(&stepline, &crashed.run_id).await;
    drop(crashed.agent);
}

// =============================================================================================
// Restart
// =============================================================================================

/// Everything the API says about the runs of one conversation, endpoint by endpoint.
async fn api_view(stepline: &Stepline, conversation_id: &str) -> BTreeMap<String, Value> {
    let mut view = BTreeMap::new();
    let list_path = format!("/v1/runs?conversation_id={}", encode(conversation_id));
    let list = stepline.get_ok(&list_path).await;
    let mut run_ids: Vec<String> = list["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| str_field(r, "run_id").to_string())
        .collect();
    view.insert("GET /v1/runs?conversation_id=…".to_string(), list);
    // The delegates of those runs.
    for id in run_ids.clone() {
        let path = format!("/v1/runs?parent_run_id={}", encode(&id));
        let children = stepline.get_ok(&path).await;
        for child in children["runs"].as_array().into_iter().flatten() {
            run_ids.push(str_field(child, "run_id").to_string());
        }
        view.insert(format!("GET {path}"), children);
    }
    assert_eq!(run_ids.len(), 2, "orchestrator + researcher expected");
    for id in &run_ids {
        let id = encode(id);
        for path in [
            format!("/v1/runs/{id}"),
            format!("/v1/runs/{id}/events"),
            format!("/v1/runs/{id}/effects"),
            format!("/v1/runs/{id}/effects?unresolved=true"),
            format!("/v1/runs/{id}/snapshots"),
            format!("/v1/runs/{id}/continuation?format=pydantic-ai"),
            format!("/v1/runs/{id}/continuation?format=otel"),
        ] {
            let body = stepline.get_ok(&path).await;
            view.insert(format!("GET {path}"), body);
        }
    }
    view
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_acknowledged_data() {
    let mut stepline = Stepline::start().await;
    let scenario = run_scenario(&stepline, "http", "conv-e2e-restart").await;
    let before = api_view(&stepline, "conv-e2e-restart").await;
    let orchestrator = before["GET /v1/runs?conversation_id=…"]["runs"][0].clone();
    assert_eq!(
        str_field(&orchestrator, "status"),
        "completed",
        "{orchestrator}"
    );

    stepline.restart().await; // SIGKILL, then start on the same directory
    let after = api_view(&stepline, "conv-e2e-restart").await;
    let mut differences = Vec::new();
    for (endpoint, value) in &before {
        match after.get(endpoint) {
            Some(v) if v == value => {}
            Some(v) => differences.push(format!(
                "{endpoint}\n  before: {}\n  after:  {}",
                truncate(&value.to_string(), 3000),
                truncate(&v.to_string(), 3000)
            )),
            None => differences.push(format!("{endpoint}: missing after restart")),
        }
    }
    assert!(
        differences.is_empty(),
        "API answers changed across SIGKILL + restart:\n{}\n--- stepline log ---\n{}",
        differences.join("\n"),
        stepline.log_tail()
    );
    // The alias still resolves.
    let run = stepline
        .get_ok(&format!("/v1/runs/{}", encode(&scenario.run_id)))
        .await;
    assert_eq!(run["run_id"], orchestrator["run_id"], "{run}");
}

// =============================================================================================
// Bad input against the binary
// =============================================================================================

/// One Pydantic-AI-shaped chat span as OTLP/JSON (what the Python HTTP exporter would send in JSON).
fn chat_span_json(conversation_id: &str, call_id: &str, trace_hex: &str, pad: &str) -> Vec<u8> {
    let input = r#"[{"role":"user","parts":[{"type":"text","content":"hello"}]}]"#;
    let output = r#"[{"role":"assistant","parts":[{"type":"text","content":"hi"}]}]"#;
    let attr = |k: &str, v: &str| json!({"key": k, "value": {"stringValue": v}});
    chat_request_json(
        trace_hex,
        "eee19b7ec3c1b174",
        vec![attr("service.name", "stepline-e2e-probe"), attr("pad", pad)],
        vec![
            attr("gen_ai.agent.name", "probe"),
            attr("gen_ai.agent.call.id", call_id),
            attr("gen_ai.conversation.id", conversation_id),
            attr("gen_ai.provider.name", "function"),
            attr("gen_ai.input.messages", input),
            attr("gen_ai.output.messages", output),
        ],
    )
}

/// An OTLP/JSON request with one Pydantic-AI-scoped `chat` span that ended a millisecond ago,
/// with the resource attributes and span attributes given (besides the operation and model).
fn chat_request_json(
    trace_hex: &str,
    span_hex: &str,
    resource: Vec<Value>,
    attributes: Vec<Value>,
) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let attr = |k: &str, v: &str| json!({"key": k, "value": {"stringValue": v}});
    let mut attrs = vec![
        attr("gen_ai.operation.name", "chat"),
        attr("gen_ai.request.model", "probe-model"),
    ];
    attrs.extend(attributes);
    let body = json!({
        "resourceSpans": [{
            "resource": {"attributes": resource},
            "scopeSpans": [{
                "scope": {"name": "pydantic-ai", "version": "2.68.0"},
                "spans": [{
                    "traceId": trace_hex,
                    "spanId": span_hex,
                    "parentSpanId": "eee19b7ec3c1b173",
                    "name": "chat probe-model",
                    "kind": 1,
                    "startTimeUnixNano": (now - 2_000_000).to_string(),
                    "endTimeUnixNano": (now - 1_000_000).to_string(),
                    "attributes": attrs,
                    "status": {}
                }]
            }]
        }]
    });
    serde_json::to_vec(&body).expect("serialise JSON")
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).expect("gzip in memory");
    enc.finish().expect("gzip in memory")
}

/// google.rpc.Status, the error body of OTLP/HTTP (protobuf encoding).
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

struct OtlpReply {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

async fn post_traces(
    stepline: &Stepline,
    content_type: &str,
    encoding: Option<&str>,
    body: Vec<u8>,
) -> OtlpReply {
    let len = body.len();
    try_post_traces(stepline, content_type, encoding, body)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "POST /v1/traces ({content_type}, {encoding:?}, {len} bytes) failed: {e}\n{}",
                stepline.log_tail()
            )
        })
}

async fn try_post_traces(
    stepline: &Stepline,
    content_type: &str,
    encoding: Option<&str>,
    body: Vec<u8>,
) -> Result<OtlpReply, String> {
    let url = format!("{}/v1/traces", stepline.otlp_http_url());
    let mut req = stepline
        .client()
        .post(&url)
        .header("content-type", content_type)
        .body(body);
    if let Some(enc) = encoding {
        req = req.header("content-encoding", enc);
    }
    let resp = req.send().await.map_err(|e| format!("{e:?}"))?;
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
    Ok(OtlpReply {
        status,
        content_type,
        body,
    })
}

/// The error message of an OTLP/HTTP error reply, in JSON or protobuf encoding.
fn otlp_error_message(reply: &OtlpReply, what: &str) -> String {
    let text = String::from_utf8_lossy(&reply.body).to_string();
    let message = if reply.content_type.contains("json") {
        serde_json::from_slice::<Value>(&reply.body)
            .ok()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
    } else if reply.content_type.contains("protobuf") {
        <RpcStatus as prost::Message>::decode(reply.body.as_slice())
            .ok()
            .map(|s| s.message)
    } else {
        Some(text.clone())
    };
    match message {
        Some(m) if !m.trim().is_empty() => m,
        _ => panic!(
            "{what}: answered {} ({}) without an error message: {:?}",
            reply.status,
            reply.content_type,
            truncate(&text, 1000)
        ),
    }
}

/// The message must say what is wrong: it names at least one of `words` (case-insensitive).
fn assert_mentions(message: &str, words: &[&str], what: &str) {
    let lower = message.to_lowercase();
    assert!(
        words.iter().any(|w| lower.contains(w)),
        "{what}: the error message should say what is wrong (mention one of {words:?}), got {message:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_against_binary() {
    const LIMIT: u64 = 1024 * 1024;
    let stepline = Stepline::start_with(Options {
        max_request_body_size: Some(LIMIT),
        ..Options::default()
    })
    .await;
    let trace = "5b8efff798038103d269b633813fc60c";

    // A good request first, so there is a run to ask bad questions about.
    let good = chat_span_json("conv-e2e-probe", "probe-call-1", trace, "");
    let reply = post_traces(&stepline, "application/json", None, good.clone()).await;
    assert_eq!(
        reply.status,
        200,
        "a valid OTLP/JSON request: {}",
        String::from_utf8_lossy(&reply.body)
    );

    // Garbage protobuf: a length prefix of 16 with one byte behind it.
    let reply = post_traces(
        &stepline,
        "application/x-protobuf",
        None,
        vec![0x0a, 0x10, 0x01],
    )
    .await;
    assert_eq!(reply.status, 400, "garbage protobuf");
    let msg = otlp_error_message(&reply, "garbage protobuf");
    eprintln!("garbage protobuf → 400: {msg}");
    assert_mentions(&msg, &["protobuf", "decode"], "garbage protobuf");
    assert!(
        reply.content_type.contains("protobuf"),
        "the reply is in the request's encoding (protobuf), got {:?}",
        reply.content_type
    );

    // Invalid JSON.
    let reply = post_traces(
        &stepline,
        "application/json",
        None,
        br#"{"resourceSpans": [ {"#.to_vec(),
    )
    .await;
    assert_eq!(reply.status, 400, "invalid JSON");
    assert!(
        reply.content_type.contains("json"),
        "the reply is in the request's encoding (JSON), got {:?}",
        reply.content_type
    );
    let msg = otlp_error_message(&reply, "invalid JSON");
    eprintln!("invalid JSON → 400: {msg}");
    assert_mentions(&msg, &["json"], "invalid JSON");

    // Truncated gzip.
    let mut truncated = gzip(&good);
    truncated.truncate(truncated.len() / 2);
    let reply = post_traces(&stepline, "application/json", Some("gzip"), truncated).await;
    assert_eq!(reply.status, 400, "truncated gzip");
    let msg = otlp_error_message(&reply, "truncated gzip");
    eprintln!("truncated gzip → 400: {msg}");
    assert_mentions(&msg, &["gzip", "decompress", "deflate"], "truncated gzip");

    // Oversized: a valid request of 16 MiB (more than socket buffers hold) gzip-compressed to a few KiB (the limit applies after
    // decompression); the same body uncompressed is sent at the end.
    let pad = "x".repeat(16 * LIMIT as usize);
    let big = chat_span_json("conv-e2e-big", "probe-call-big", trace, &pad);
    let compressed = gzip(&big);
    let compressed_len = compressed.len();
    assert!((compressed_len as u64) < LIMIT);
    let reply = post_traces(&stepline, "application/json", Some("gzip"), compressed).await;
    assert_eq!(
        reply.status, 413,
        "a 16 MiB body gzip-compressed to {compressed_len} bytes: the limit applies after decompression"
    );
    let msg = otlp_error_message(&reply, "oversized gzip body");
    eprintln!("oversized → 413: {msg}");
    assert_mentions(&msg, &["limit", "too large", "exceeds"], "oversized body");

    // Wrong content type.
    let reply = post_traces(&stepline, "text/plain", None, b"hello".to_vec()).await;
    assert_eq!(reply.status, 415, "text/plain");
    let msg = otlp_error_message(&reply, "wrong content type");
    assert_mentions(
        &msg,
        &["content-type", "content type", "text/plain"],
        "wrong content type",
    );

    // Wrong method.
    let url = format!("{}/v1/traces", stepline.otlp_http_url());
    let resp = stepline
        .client()
        .get(&url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    let allow = resp
        .headers()
        .get("allow")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let reply = OtlpReply {
        status,
        content_type: resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string(),
        body: resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default(),
    };
    assert_eq!(status, 405, "GET {url}");
    assert!(
        allow.contains("POST"),
        "405 should carry Allow: POST, got {allow:?}"
    );
    let msg = otlp_error_message(&reply, "wrong method");
    assert_mentions(&msg, &["method", "post"], "wrong method");

    // Query API: unknown run → 404 with {"error": …} on every run endpoint.
    for path in [
        "/v1/runs/no-such-run",
        "/v1/runs/no-such-run/events",
        "/v1/runs/no-such-run/effects",
        "/v1/runs/no-such-run/snapshots",
        "/v1/runs/no-such-run/continuation?format=otel",
    ] {
        let reply = stepline.get(path).await;
        assert_eq!(reply.status, 404, "GET {path}: {}", reply.text);
        assert_mentions(&reply.error_message(), &["not found", "no-such-run"], path);
    }
    let reply = stepline.post("/v1/runs/no-such-run/abandon").await;
    assert_eq!(
        reply.status, 404,
        "POST /v1/runs/no-such-run/abandon: {}",
        reply.text
    );
    reply.error_message();

    // Bad parameters → 400 with {"error": …}.
    let runs = stepline
        .get_list("/v1/runs?conversation_id=conv-e2e-probe", "runs")
        .await;
    assert_eq!(
        runs.len(),
        1,
        "the valid request made one run: {}",
        Value::Array(runs.clone())
    );
    let run_id = encode(str_field(&runs[0], "run_id"));
    for path in [
        format!("/v1/runs/{run_id}/continuation?format=nope"),
        format!("/v1/runs/{run_id}/effects?unresolved=maybe"),
    ] {
        let reply = stepline.get(&path).await;
        assert_eq!(reply.status, 400, "GET {path}: {}", reply.text);
        let msg = reply.error_message();
        eprintln!("GET {path} → 400: {msg}");
    }

    // Nothing of the rejected requests was stored, and the server still serves.
    let big_runs = stepline
        .get_list("/v1/runs?conversation_id=conv-e2e-big", "runs")
        .await;
    assert!(
        big_runs.is_empty(),
        "rejected requests must not be stored: {}",
        Value::Array(big_runs)
    );
    let again = chat_span_json("conv-e2e-probe-2", "probe-call-2", trace, "");
    let reply = post_traces(&stepline, "application/json", Some("gzip"), gzip(&again)).await;
    assert_eq!(
        reply.status,
        200,
        "a valid gzip request after the bad ones: {}",
        String::from_utf8_lossy(&reply.body)
    );
    let runs = stepline
        .get_list("/v1/runs?conversation_id=conv-e2e-probe-2", "runs")
        .await;
    assert_eq!(runs.len(), 1, "{}", Value::Array(runs.clone()));
    let health = stepline.get("/healthz").await;
    assert_eq!(health.status, 200);

    // Oversized and uncompressed: the limit is visible in Content-Length. Last, because it is where
    // the server's early answer races the client's upload; sent several times so a lost answer
    // shows up here rather than now and then.
    for attempt in 1..=10 {
        let reply = try_post_traces(&stepline, "application/json", None, big.clone())
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "a 16 MiB body with a 1 MiB limit (attempt {attempt}): reqwest got no HTTP answer but {e}. \
                     The receiver answers from Content-Length and closes the connection without reading the \
                     body, so a hyper-based client (reqwest, the Rust OTLP exporter) fails writing the body and \
                     sees a transport error instead of the non-retryable 413 (Python's urllib3 happens to read \
                     the early answer). Expected: the 413 reaches the client, e.g. read and discard the body \
                     (bounded) before answering."
                )
            });
        assert_eq!(reply.status, 413, "a 16 MiB body with a 1 MiB limit");
        let msg = otlp_error_message(&reply, "oversized body");
        assert_mentions(&msg, &["limit", "too large", "exceeds"], "oversized body");
    }
    let reply = post_traces(&stepline, "application/json", None, good).await;
    assert_eq!(
        reply.status, 200,
        "still serving after the oversized bodies"
    );
}

/// One model request whose input is a history of `messages` plain text messages.
fn long_chat_span_json(trace_hex: &str, messages: usize) -> Vec<u8> {
    let input: Vec<Value> = (0..messages)
        .map(|n| {
            let role = if n % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "parts": [{"type": "text", "content": format!("message {n}")}]})
        })
        .collect();
    let output = json!([{"role": "assistant", "parts": [{"type": "text", "content": "done"}]}]);
    let attr = |k: &str, v: &str| json!({"key": k, "value": {"stringValue": v}});
    chat_request_json(
        trace_hex,
        "aaa19b7ec3c1b174",
        vec![attr("service.name", "stepline-e2e-long")],
        vec![
            attr("gen_ai.agent.call.id", "long-run"),
            attr("gen_ai.input.messages", &Value::Array(input).to_string()),
            attr("gen_ai.output.messages", &output.to_string()),
        ],
    )
}

/// `stepline_history_cache_messages` from `/metrics`.
async fn history_cache_messages(stepline: &Stepline) -> u64 {
    stepline.metric("stepline_history_cache_messages").await
}

/// A long run that stops sending spans has its continuation loaded into memory, and rendered in
/// the format asked for most recently, before anyone asks for it; the requests that follow are
/// served from what was loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_long_run_is_loaded_ahead() {
    let stepline = Stepline::start().await;
    assert_eq!(history_cache_messages(&stepline).await, 0);
    assert_eq!(stepline.metric("stepline_rendered_cache_bytes").await, 0);
    // A request in the Anthropic format (for a run not there yet): the format is noted as one
    // orchestrators continue with.
    let early = stepline
        .get("/v1/runs/long-run/continuation?format=anthropic")
        .await;
    assert_eq!(early.status, 404, "{}", early.text);
    let body = long_chat_span_json("7c1f0e2d3b4a59687766554433221100", 300);
    let reply = post_traces(&stepline, "application/json", None, body).await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );

    // No continuation has been asked for: the history reaches the cache by the prefetch.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut held = 0;
    while std::time::Instant::now() < deadline {
        held = history_cache_messages(&stepline).await;
        if held > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(held, 301, "the run's latest history, loaded ahead");
    let mut rendered = 0;
    while std::time::Instant::now() < deadline && rendered == 0 {
        rendered = stepline.metric("stepline_rendered_cache_bytes").await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(rendered > 0, "the Anthropic answer, rendered ahead");

    let anthropic = stepline
        .get_ok("/v1/runs/long-run/continuation?format=anthropic")
        .await;
    let turns = anthropic["messages"].as_array().expect("messages");
    // The last two messages are both the assistant's: one Anthropic turn.
    assert_eq!(turns.len(), 300);
    assert_eq!(turns[299]["content"][1]["text"], "done");
    assert_eq!(
        stepline.metric("stepline_rendered_cache_bytes").await,
        rendered,
        "the answer rendered ahead, not rendered again"
    );

    let continuation = stepline
        .get_ok("/v1/runs/long-run/continuation?format=otel")
        .await;
    let messages = continuation["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 301);
    assert_eq!(messages[300]["parts"][0]["content"], "done");
    assert_eq!(
        history_cache_messages(&stepline).await,
        301,
        "served from the history loaded ahead, not read again"
    );
}
