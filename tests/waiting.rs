//! End-to-end tests of waiting runs: real Pydantic AI (an approval-required tool, a tool raising
//! `ApprovalRequired`, one raising `CallDeferred`) and real OpenAI Agents (`needs_approval`), run
//! with scripted models through the stock OTLP exporter into the real binary. The first run ends
//! waiting, `/interactions` lists its calls, the framework resumes in a new run (a new process)
//! with the decisions, and the interactions resolve and link both runs.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{encode, run_script, str_field, truncate, Stepline};

/// Waits until `GET /v1/runs/{run}` answers a run whose `status` is `status`.
async fn run_with_status(stepline: &Stepline, run: &str, status: &str) -> Value {
    let path = format!("/v1/runs/{}", encode(run));
    stepline
        .wait_for(
            &format!("run {run} to be {status}"),
            Duration::from_secs(20),
            || {
                let path = path.clone();
                async move {
                    let reply = stepline.get(&path).await;
                    match reply.status {
                        200 if reply.json()["status"] == status => Ok(reply.json().clone()),
                        _ => Err(truncate(&reply.text, 2000)),
                    }
                }
            },
        )
        .await
}

/// The interactions of `run`, by tool-call id.
async fn interactions(stepline: &Stepline, run: &str) -> Vec<Value> {
    stepline
        .get_list(
            &format!("/v1/runs/{}/interactions", encode(run)),
            "interactions",
        )
        .await
}

fn by_id<'a>(list: &'a [Value], id: &str) -> &'a Value {
    list.iter()
        .find(|i| i["tool_call_id"] == id)
        .unwrap_or_else(|| panic!("no interaction {id} in {list:?}"))
}

#[tokio::test]
async fn pydantic_ai_deferred_tools_wait_and_resume() {
    let stepline = Stepline::start().await;
    let endpoint = stepline.otlp_http_url();
    let conv = "waiting-pydantic-ai";
    let wait = run_script(
        "waiting_pydantic_ai.py",
        &[
            "--phase",
            "wait",
            "--endpoint",
            &endpoint,
            "--conversation-id",
            conv,
        ],
        Duration::from_secs(120),
    )
    .await
    .json_line();
    assert_eq!(wait["export"]["failed_batches"], 0, "{wait}");
    assert_eq!(wait["calls"], serde_json::json!(["call_job"]), "{wait}");
    let alias = str_field(&wait, "run_id").to_string();

    // The run waits; it is listed under status=waiting.
    let run = run_with_status(&stepline, &alias, "waiting").await;
    let run_id = str_field(&run, "run_id").to_string();
    assert!(run["resumed_by_run_id"].is_null(), "{run}");
    let waiting = stepline
        .get_list(
            &format!("/v1/runs?status=waiting&conversation_id={conv}"),
            "runs",
        )
        .await;
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0]["run_id"], run_id.as_str());

    // The ledger: three calls waiting, get_time completed.
    let effects = stepline
        .get_list(&format!("/v1/runs/{}/effects", encode(&run_id)), "effects")
        .await;
    let status = |id: &str| {
        effects
            .iter()
            .find(|e| e["tool_call_id"] == id)
            .map(|e| (e["status"].clone(), e["interaction"].clone()))
    };
    assert_eq!(
        status("call_del"),
        Some(("waiting".into(), "approval".into()))
    );
    assert_eq!(
        status("call_pay"),
        Some(("waiting".into(), "approval".into()))
    );
    assert_eq!(
        status("call_job"),
        Some(("waiting".into(), "external".into()))
    );
    assert_eq!(status("call_time"), Some(("completed".into(), Value::Null)));

    // /interactions lists the three, pending.
    let pending = interactions(&stepline, &run_id).await;
    assert_eq!(pending.len(), 3, "{pending:?}");
    for (id, kind, tool) in [
        ("call_del", "approval", "delete_file"),
        ("call_pay", "approval", "pay"),
        ("call_job", "external", "run_job"),
    ] {
        let i = by_id(&pending, id);
        assert_eq!(i["kind"], kind, "{i}");
        assert_eq!(i["tool_name"], tool, "{i}");
        assert_eq!(i["status"], "pending", "{i}");
        assert!(
            i["decision"].is_null() && i["resolved_by_run_id"].is_null(),
            "{i}"
        );
        assert!(i["requested_at"].is_string(), "{i}");
    }
    assert_eq!(by_id(&pending, "call_del")["arguments"]["path"], "a.txt");

    // The continuation with repair=false: valid up to the deferred calls, which are listed as
    // unresolved (waiting, not crashed). The resume below loads it with Pydantic AI itself.
    let resume = run_script(
        "waiting_pydantic_ai.py",
        &[
            "--phase",
            "resume",
            "--endpoint",
            &endpoint,
            "--conversation-id",
            conv,
            "--api",
            &stepline.api_url(""),
            "--run-id",
            &run_id,
        ],
        Duration::from_secs(120),
    )
    .await
    .json_line();
    assert_eq!(resume["export"]["failed_batches"], 0, "{resume}");
    assert_eq!(
        resume["output"], "done: deleted a.txt; too costly; job ok; noon",
        "{resume}"
    );
    let unresolved = resume["unresolved_effects"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut ids: Vec<&str> = unresolved
        .iter()
        .map(|e| {
            assert_eq!(e["status"], "waiting", "{e}");
            e["tool_call_id"].as_str().unwrap_or_default()
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["call_del", "call_job", "call_pay"], "{resume}");

    // The resumed run resolves the interactions; the waiting run is completed and linked.
    let resumed = run_with_status(&stepline, str_field(&resume, "run_id"), "completed").await;
    let resumed_id = str_field(&resumed, "run_id").to_string();
    assert_ne!(resumed_id, run_id);
    let done = run_with_status(&stepline, &run_id, "completed").await;
    assert_eq!(done["resumed_by_run_id"], resumed_id.as_str(), "{done}");
    let resolved = interactions(&stepline, &run_id).await;
    for (id, status, decision) in [
        ("call_del", "approved", "approved"),
        ("call_pay", "denied", "denied"),
        ("call_job", "completed", "completed"),
    ] {
        let i = by_id(&resolved, id);
        assert_eq!(i["status"], status, "{i}");
        assert_eq!(i["decision"], decision, "{i}");
        assert_eq!(i["resolved_by_run_id"], resumed_id.as_str(), "{i}");
        assert!(i["resolved_at"].is_string(), "{i}");
    }
    let still = stepline
        .get_list(
            &format!("/v1/runs?status=waiting&conversation_id={conv}"),
            "runs",
        )
        .await;
    assert!(still.is_empty(), "{still:?}");
}

#[tokio::test]
async fn openai_agents_approvals_wait_and_resume() {
    let stepline = Stepline::start().await;
    let endpoint = stepline.otlp_http_url();
    let session = "waiting-openai-agents";
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state.json");
    let state = state.to_str().expect("utf-8 path");
    let args = |phase: &'static str| {
        vec![
            "--phase",
            phase,
            "--endpoint",
            endpoint.as_str(),
            "--session-id",
            session,
            "--state",
            state,
        ]
    };
    let wait = run_script(
        "waiting_openai_agents.py",
        &args("wait"),
        Duration::from_secs(120),
    )
    .await
    .json_line();
    assert_eq!(wait["export"]["failed_batches"], 0, "{wait}");
    assert_eq!(
        wait["interruptions"].as_array().map(Vec::len),
        Some(2),
        "{wait}"
    );

    let list = format!("/v1/runs?status=waiting&conversation_id={session}");
    let runs = stepline
        .wait_for(
            "the interrupted run to wait",
            Duration::from_secs(20),
            || {
                let list = list.clone();
                let stepline = &stepline;
                async move {
                    let runs = stepline.get_list(&list, "runs").await;
                    match runs.as_slice() {
                        [_] => Ok(runs),
                        _ => Err(truncate(&Value::Array(runs).to_string(), 2000)),
                    }
                }
            },
        )
        .await;
    let run_id = str_field(&runs[0], "run_id").to_string();
    let pending = interactions(&stepline, &run_id).await;
    assert_eq!(pending.len(), 2, "{pending:?}");
    for (id, tool) in [("call_del", "delete_file"), ("call_pay", "pay")] {
        let i = by_id(&pending, id);
        assert_eq!(
            (&i["kind"], &i["status"], &i["tool_name"]),
            (&"approval".into(), &"pending".into(), &tool.into()),
            "{i}"
        );
    }

    let resume = run_script(
        "waiting_openai_agents.py",
        &args("resume"),
        Duration::from_secs(120),
    )
    .await
    .json_line();
    assert_eq!(resume["export"]["failed_batches"], 0, "{resume}");
    assert_eq!(resume["interruptions"], 0, "{resume}");

    let done = run_with_status(&stepline, &run_id, "completed").await;
    let resumed_id = str_field(&done, "resumed_by_run_id").to_string();
    assert_ne!(resumed_id, run_id);
    let resumed = stepline
        .get_ok(&format!("/v1/runs/{}", encode(&resumed_id)))
        .await;
    assert_eq!(resumed["conversation_id"], session, "{resumed}");
    let resolved = interactions(&stepline, &run_id).await;
    for (id, status) in [("call_del", "approved"), ("call_pay", "denied")] {
        let i = by_id(&resolved, id);
        assert_eq!(
            (&i["status"], &i["decision"]),
            (&status.into(), &status.into()),
            "{i}"
        );
        assert_eq!(i["resolved_by_run_id"], resumed_id.as_str(), "{i}");
    }
}
