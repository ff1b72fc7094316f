//! Lineage end to end: real Pydantic AI (FunctionModel) through the stock OTLP exporter into the
//! real binary. A run continued with `message_history=` from stepline's pydantic-ai continuation
//! is linked as `continuation`, one started from an earlier snapshot (`at=`) as `fork`, runs that
//! only share a system prompt are not linked, and the continuation after three turns gives each
//! earlier request its own instructions and each earlier response its own model name and usage,
//! as Pydantic AI's own `all_messages()` has them.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{encode, history_differences, run_script, truncate, Stepline};

/// The stepline run id of a run named by one of its aliases (Pydantic AI's `run_id`).
async fn run_of(stepline: &Stepline, alias: &str) -> Value {
    stepline
        .get_ok(&format!("/v1/runs/{}", encode(alias)))
        .await
}

async fn id_of(stepline: &Stepline, alias: &str) -> String {
    let run = run_of(stepline, alias).await;
    run["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("run {alias} has no run_id: {run}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pydantic_ai_continuations_and_forks_are_linked_and_earlier_turns_keep_their_own_instructions(
) {
    let stepline = Stepline::start().await;
    let script = run_script(
        "lineage_pydantic_ai.py",
        &[
            "--endpoint",
            &stepline.otlp_http_url(),
            "--api",
            &stepline.api_url(""),
            "--service",
            "lineage-e2e",
        ],
        Duration::from_secs(240),
    )
    .await;
    let report = script.json_line();
    let ctx = format!(
        "report: {}\n--- stepline log ---\n{}",
        truncate(&report.to_string(), 4000),
        stepline.log_tail()
    );
    assert_eq!(report["export"]["failed_batches"], json!(0), "{ctx}");

    let alias = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let turns: Vec<String> = report["turns"]
        .as_array()
        .unwrap_or_else(|| panic!("no turns; {ctx}"))
        .iter()
        .map(alias)
        .collect();
    let mut ids = Vec::new();
    for t in &turns {
        ids.push(id_of(&stepline, t).await);
    }
    let fork = id_of(&stepline, &alias(&report["fork"])).await;

    // (a) Turns 1 and 2 continue the run before them, from its latest snapshot.
    for n in 1..3 {
        let run = run_of(&stepline, &turns[n]).await;
        let source = stepline
            .get_ok(&format!("/v1/runs/{}/snapshots", encode(&ids[n - 1])))
            .await;
        let last = source["snapshots"]
            .as_array()
            .and_then(|s| s.last())
            .map(|s| s["seq"].clone())
            .unwrap_or_else(|| panic!("turn {} has no snapshots; {ctx}", n - 1));
        assert_eq!(
            run["continued_from"],
            json!({"run_id": ids[n - 1], "snapshot_seq": last, "kind": "continuation"}),
            "turn {n}: {run}; {ctx}"
        );
    }
    assert!(
        run_of(&stepline, &turns[0])
            .await
            .get("continued_from")
            .is_none(),
        "turn 0 starts a conversation; {ctx}"
    );

    // (b) The run started from turn 0's snapshot before the answer is a fork of it.
    let forked = stepline
        .get_ok(&format!("/v1/runs/{}", encode(&fork)))
        .await;
    assert_eq!(
        forked["continued_from"],
        json!({"run_id": ids[0], "snapshot_seq": report["fork_at"], "kind": "fork"}),
        "fork: {forked}; {ctx}"
    );

    // The runs continuing turn 0, by index.
    let listed = stepline
        .get_list(
            &format!("/v1/runs?continued_from={}", encode(&ids[0])),
            "runs",
        )
        .await;
    let mut listed: Vec<&str> = listed.iter().filter_map(|r| r["run_id"].as_str()).collect();
    listed.sort_unstable();
    let mut expected = vec![ids[1].as_str(), fork.as_str()];
    expected.sort_unstable();
    assert_eq!(listed, expected, "{ctx}");
    let listed = stepline
        .get_list(
            &format!("/v1/runs?continued_from={}", encode(&ids[2])),
            "runs",
        )
        .await;
    assert!(listed.is_empty(), "nothing continues turn 2: {listed:?}");

    // (c) Runs that share only a system prompt (and one a whole first question) are unrelated.
    for plain in report["plain"]
        .as_array()
        .unwrap_or_else(|| panic!("no plain runs; {ctx}"))
    {
        let run = run_of(&stepline, &alias(plain)).await;
        assert!(
            run.get("continued_from").is_none(),
            "an unrelated run was linked: {run}; {ctx}"
        );
        let id = run["run_id"].as_str().unwrap_or_default();
        let listed = stepline
            .get_list(&format!("/v1/runs?continued_from={}", encode(id)), "runs")
            .await;
        assert!(listed.is_empty(), "a run continues {id}: {listed:?}");
    }

    // (d) After three turns every earlier request has its own instructions, every earlier
    // response its own model name and usage: the continuation is Pydantic AI's own history.
    let per_turn = |n: usize| Value::String(format!("Turn {n}"));
    assert_eq!(
        report["instructions"]["pydantic"],
        json!([
            per_turn(0),
            per_turn(0),
            per_turn(1),
            per_turn(1),
            per_turn(2),
            per_turn(2)
        ]),
        "{ctx}"
    );
    assert_eq!(
        report["instructions"]["stepline"], report["instructions"]["pydantic"],
        "{ctx}"
    );
    assert_eq!(
        report["model_names"]["stepline"], report["model_names"]["pydantic"],
        "{ctx}"
    );
    let list = |key: &str| {
        report[key]
            .as_array()
            .cloned()
            .unwrap_or_else(|| panic!("no {key}; {ctx}"))
    };
    let differences = history_differences(&list("all_messages"), &list("continuation"));
    assert!(
        differences.is_empty(),
        "the continuation after turn 2 differs from Pydantic AI's all_messages():\n{}",
        differences.join("\n")
    );
}
