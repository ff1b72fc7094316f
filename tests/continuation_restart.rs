//! Continuations across a restart: the runs still active when the service stopped are loaded
//! ahead when it starts again, before anyone asks for them, with their answers in the formats
//! asked for before the restart rendered, and answer as before the restart.

mod support;

use serde_json::{json, Value};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::Stepline;

/// One OTLP/JSON export: a `chat` span of the run aliased `alias` whose input is a history of
/// `messages` messages.
fn long_chat(trace_hex: &str, alias: &str, messages: usize) -> Vec<u8> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let input: Vec<Value> = (0..messages)
        .map(|n| {
            let role = if n % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "parts": [{"type": "text", "content": format!("message {n}")}]})
        })
        .collect();
    let output = json!([{"role": "assistant", "parts": [{"type": "text", "content": "done"}]}]);
    let attr = |k: &str, v: &str| json!({"key": k, "value": {"stringValue": v}});
    let body = json!({
        "resourceSpans": [{
            "resource": {"attributes": [attr("service.name", "stepline-restart")]},
            "scopeSpans": [{
                "scope": {"name": "pydantic-ai", "version": "2.68.0"},
                "spans": [{
                    "traceId": trace_hex,
                    "spanId": "aaa19b7ec3c1b174",
                    "parentSpanId": "eee19b7ec3c1b173",
                    "name": "chat probe-model",
                    "kind": 1,
                    "startTimeUnixNano": (now - 2_000_000).to_string(),
                    "endTimeUnixNano": (now - 1_000_000).to_string(),
                    "attributes": [
                        attr("gen_ai.operation.name", "chat"),
                        attr("gen_ai.request.model", "probe-model"),
                        attr("gen_ai.agent.call.id", alias),
                        attr("gen_ai.input.messages", &Value::Array(input).to_string()),
                        attr("gen_ai.output.messages", &output.to_string()),
                    ],
                    "status": {}
                }]
            }]
        }]
    });
    serde_json::to_vec(&body).expect("serialise JSON")
}

/// The gauge once it is non-zero (zero when it stays zero for `within`).
async fn gauge_once_set(stepline: &Stepline, name: &str, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    loop {
        let value = stepline.metric(name).await;
        if value > 0 || Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_long_run_is_loaded_ahead_at_start_and_answers_as_before() {
    let mut stepline = Stepline::start().await;
    let reply = stepline
        .client()
        .post(format!("{}/v1/traces", stepline.otlp_http_url()))
        .header("content-type", "application/json")
        .body(long_chat(
            "7c1f0e2d3b4a59687766554433221101",
            "restart-run",
            300,
        ))
        .send()
        .await
        .expect("POST /v1/traces");
    assert_eq!(reply.status(), 200);
    let path = "/v1/runs/restart-run/continuation?format=pydantic-ai";
    let before = stepline.get(path).await;
    assert_eq!(before.status, 200, "{}", before.text);
    let run = stepline.get_ok("/v1/runs/restart-run").await;
    assert_eq!(run["status"], "running", "{run}");

    stepline.restart().await;
    // Nothing asked since the start: the history reaches the cache by the load ahead at start.
    let held = gauge_once_set(
        &stepline,
        "stepline_history_cache_messages",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        held, 301,
        "the active run's latest history, loaded ahead at start"
    );
    // The format asked for before the restart was kept: its answer is rendered ahead too.
    let rendered = gauge_once_set(
        &stepline,
        "stepline_rendered_cache_bytes",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        rendered,
        before.text.len() as u64,
        "the pydantic-ai answer, rendered ahead at start"
    );
    let after = stepline.get(path).await;
    assert_eq!(after.status, 200, "{}", after.text);
    assert_eq!(
        after.text, before.text,
        "the same answer as before the restart"
    );
    assert_eq!(
        stepline.metric("stepline_history_cache_messages").await,
        301,
        "served from the history loaded ahead, not read again"
    );
    assert_eq!(
        stepline.metric("stepline_rendered_cache_bytes").await,
        rendered,
        "served from the answer rendered ahead"
    );
}
