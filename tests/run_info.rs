//! Who started a run, its attributes and its rollups, end to end: the real binary, configured
//! with `run_attributes: [tenant]`, receives a real Pydantic AI agent's spans (the stock OTLP
//! exporter) whose resource comes from `OTEL_RESOURCE_ATTRIBUTES`, and one run's spans also
//! carry a baggage entry as a span attribute (`tests/python/run_info_pydantic_ai.py`).
//! Everything is checked through the query API, before and after a restart.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{encode, run_script, str_field, Options, Stepline};

const RESOURCE: &str = "stepline.trigger.kind=schedule,stepline.trigger.job=nightly,tenant=acme";

/// Stepline with `processors.stepline.run_attributes: [tenant]`. (The test harness writes the
/// processor as a YAML flow mapping whose first key is the inactivity timeout; the option's
/// text goes in as is, so further keys follow it.)
async fn start() -> Stepline {
    Stepline::start_with(Options {
        inactivity_timeout: "10m, run_attributes: [tenant]".into(),
        ..Options::default()
    })
    .await
}

/// The run a framework run id (an alias) names, once it is over with `tool_calls` entries.
async fn finished_run(stepline: &Stepline, alias: &str, tool_calls: u64) -> Value {
    let path = format!("/v1/runs/{}", encode(alias));
    stepline
        .wait_for(
            &format!("run {alias} completed with {tool_calls} tool calls"),
            Duration::from_secs(30),
            || async {
                let reply = stepline.get(&path).await;
                if reply.status != 200 {
                    return Err(format!("{} {}", reply.status, reply.text));
                }
                let run = reply.json().clone();
                let done = run["status"] == "completed" && run["tool_call_count"] == tool_calls;
                if done {
                    Ok(run)
                } else {
                    Err(run.to_string())
                }
            },
        )
        .await
}

/// The ids of the runs `GET /v1/runs?<query>` lists (following every page).
async fn listed(stepline: &Stepline, query: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page_query = match &cursor {
            Some(c) => format!("{query}&cursor={c}"),
            None => query.to_string(),
        };
        let page = stepline.get_ok(&format!("/v1/runs?{page_query}")).await;
        for run in page["runs"].as_array().cloned().unwrap_or_default() {
            ids.push(str_field(&run, "run_id").to_string());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return ids,
        }
    }
}

/// The rollups of `run` agree with its ledger: the counts by status add up to the entries and
/// match their statuses, and the tool time is the sum of the entries' durations (so at least
/// each of them).
fn check_rollups(run: &Value, effects: &[Value]) {
    let count = |status: &str| effects.iter().filter(|e| e["status"] == status).count() as u64;
    let by_status = &run["tool_calls_by_status"];
    assert_eq!(by_status["completed"], count("completed"), "{run}");
    assert_eq!(by_status["failed"], count("failed"), "{run}");
    let total: u64 = ["completed", "failed", "unresolved"]
        .iter()
        .map(|k| by_status[k].as_u64().unwrap_or(u64::MAX))
        .sum();
    assert_eq!(total, effects.len() as u64, "{run}");
    assert_eq!(run["tool_call_count"], effects.len() as u64);
    let tool_time = run["tool_time_ms"].as_u64().expect("tool_time_ms");
    let mut sum = 0;
    for e in effects {
        let ms = e["duration_ms"]
            .as_u64()
            .unwrap_or_else(|| panic!("every call ran in a tool span: {e}"));
        assert!(
            ms <= tool_time,
            "{ms} ms of {e} over tool_time_ms {tool_time}"
        );
        sum += ms;
    }
    assert_eq!(tool_time, sum, "{run}");
    assert!(run["model_time_ms"].as_u64().is_some(), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_attributes_and_rollups_from_a_real_pydantic_ai_agent() {
    let mut stepline = start().await;
    let report = run_script(
        "run_info_pydantic_ai.py",
        &[
            "--transport",
            "http",
            "--endpoint",
            &stepline.otlp_http_url(),
            "--resource-attributes",
            RESOURCE,
        ],
        Duration::from_secs(120),
    )
    .await
    .json_line();
    assert_eq!(report["export"]["failed_batches"], 0, "{report}");
    assert_eq!(report["resource"]["tenant"], "acme", "{report}");
    let tools_alias = str_field(&report, "tools_run_id").to_string();
    let plain_alias = str_field(&report, "plain_run_id").to_string();

    let tools = finished_run(&stepline, &tools_alias, 3).await;
    let plain = finished_run(&stepline, &plain_alias, 0).await;
    let tools_id = str_field(&tools, "run_id").to_string();
    let plain_id = str_field(&plain, "run_id").to_string();

    // Who started them: the resource's kind and job for both, the baggage's user for the first.
    assert_eq!(
        tools["trigger"],
        json!({"kind": "schedule", "meta": {"job": "nightly", "user": "alice"}}),
        "{tools}"
    );
    assert_eq!(
        plain["trigger"],
        json!({"kind": "schedule", "meta": {"job": "nightly"}}),
        "{plain}"
    );
    // Only the configured attribute is copied (service.name and the rest are not).
    assert_eq!(tools["attributes"], json!({"tenant": "acme"}));
    assert_eq!(plain["attributes"], json!({"tenant": "acme"}));

    // Rollups: lookup (ok, ~30 ms), book (ModelRetry: failed), book again (ok, ~20 ms).
    let effects = stepline
        .get_list(
            &format!("/v1/runs/{}/effects", encode(&tools_id)),
            "effects",
        )
        .await;
    check_rollups(&tools, &effects);
    assert_eq!(tools["tool_calls_by_status"]["completed"], 2, "{tools}");
    assert_eq!(tools["tool_calls_by_status"]["failed"], 1, "{tools}");
    let lookup = effects
        .iter()
        .find(|e| e["tool_name"] == "lookup")
        .expect("the lookup call is in the ledger");
    assert!(
        lookup["duration_ms"].as_u64().unwrap_or(0) >= 30,
        "{lookup}"
    );
    assert!(tools["tool_time_ms"].as_u64().unwrap_or(0) >= 50, "{tools}");
    assert_eq!(plain["tool_time_ms"], 0);
    assert_eq!(
        plain["tool_calls_by_status"],
        json!({"completed": 0, "failed": 0, "unresolved": 0})
    );

    // Filters: by attribute (an index), AND-combined with min_tool_calls (a bounded scan).
    let both = listed(&stepline, "attr.tenant=acme").await;
    assert!(
        both.contains(&tools_id) && both.contains(&plain_id),
        "{both:?}"
    );
    assert_eq!(
        listed(&stepline, "attr.tenant=other").await,
        Vec::<String>::new()
    );
    assert_eq!(
        listed(&stepline, "attr.tenant=acme&attr.absent=x").await,
        Vec::<String>::new()
    );
    assert_eq!(
        listed(&stepline, "attr.tenant=acme&min_tool_calls=1").await,
        std::slice::from_ref(&tools_id)
    );
    assert_eq!(
        listed(&stepline, "min_tool_calls=3").await,
        std::slice::from_ref(&tools_id)
    );
    assert_eq!(
        listed(&stepline, "min_tool_calls=4").await,
        Vec::<String>::new()
    );
    let all = listed(&stepline, "min_tool_calls=0&limit=1").await;
    assert!(
        all.contains(&tools_id) && all.contains(&plain_id),
        "{all:?}"
    );

    // Bad filters are a 400 naming the problem.
    for (query, says) in [
        ("min_tool_calls=-1", "min_tool_calls"),
        ("min_tool_calls=lots", "min_tool_calls"),
        ("attr.=acme", "attr.<key>"),
        ("tenant=acme", "unknown query parameter"),
    ] {
        let reply = stepline.get(&format!("/v1/runs?{query}")).await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.text);
        assert!(reply.text.contains(says), "{query}: {}", reply.text);
    }

    // All of it is stored with the run: the same after a restart.
    stepline.restart().await;
    let again = stepline
        .get_ok(&format!("/v1/runs/{}", encode(&tools_id)))
        .await;
    assert_eq!(again, tools);
    assert_eq!(
        listed(&stepline, "attr.tenant=acme&min_tool_calls=1").await,
        [tools_id]
    );
}
