//! Memory when idle, against the real `stepline` binary: once ingest has been quiet for the idle
//! task's quiet period, the memtables are flushed, the block cache keeps an eighth of its
//! capacity, and the runtime's workers and the writer thread hand their free memory back (the
//! runtime's park hook and the writer's wait, both only in the binary); the next write gives
//! the block cache its capacity back. The resident memory's anonymous and file-backed parts are
//! gauges of their own.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::Stepline;

/// One span of a run, as OTLP/JSON.
fn trace_request(trace_id: &str, span_id: &str) -> Vec<u8> {
    let attr = |key: &str, value: &str| json!({"key": key, "value": {"stringValue": value}});
    let body: Value = json!({
        "resourceSpans": [{
            "resource": {"attributes": [attr("service.name", "idle-memory-test")]},
            "scopeSpans": [{
                "scope": {"name": "idle-memory-test"},
                "spans": [{
                    "traceId": trace_id,
                    "spanId": span_id,
                    "name": "chat probe-model",
                    "kind": 3,
                    "startTimeUnixNano": "1700000000000000000",
                    "endTimeUnixNano": "1700000001000000000",
                    "attributes": [
                        attr("gen_ai.operation.name", "chat"),
                        attr("gen_ai.request.model", "probe-model"),
                        attr("gen_ai.input.messages",
                             r#"[{"role":"user","parts":[{"type":"text","content":"hello"}]}]"#),
                    ],
                    "status": {}
                }]
            }]
        }]
    });
    serde_json::to_vec(&body).expect("serialise JSON")
}

async fn send(stepline: &Stepline, trace_id: &str, span_id: &str) {
    let reply = stepline
        .client()
        .post(format!("{}/v1/traces", stepline.otlp_http_url()))
        .header("content-type", "application/json")
        .body(trace_request(trace_id, span_id))
        .send()
        .await
        .expect("POST /v1/traces");
    assert_eq!(reply.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_idle_the_block_cache_shrinks_and_every_thread_gives_memory_back_until_the_next_write()
{
    let stepline = Stepline::start().await;
    // Huge pages made before `main` turned them off stay (mimalloc's first, 2 MiB); no more come.
    let huge = stepline
        .metric("stepline_process_resident_huge_page_bytes")
        .await;
    assert!(huge <= 4 << 20, "{huge} bytes in huge pages");
    let full = stepline
        .metric("stepline_rocksdb_block_cache_capacity_bytes")
        .await;
    assert!(full > 0);
    assert!(
        stepline
            .metric("stepline_process_resident_anon_bytes")
            .await
            > 0
    );
    assert!(
        stepline
            .metric("stepline_process_resident_file_bytes")
            .await
            > 0
    );
    assert_eq!(stepline.metric("stepline_idle_shrinks_total").await, 0);
    // Transparent huge pages are off for the process (see stepline::idle::memory).
    if cfg!(target_os = "linux") {
        let pid = stepline.pid().expect("stepline runs");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        assert!(status.contains("THP_enabled:\t0"), "{status}");
    }
    send(
        &stepline,
        "5a1d0e2d3b4a59687766554433221101",
        "00000000000000a1",
    )
    .await;
    // The idle task waits 15 s without writes, then shrinks.
    let collections = stepline
        .wait_for("the idle shrink", Duration::from_secs(60), || async {
            let shrinks = stepline.metric("stepline_idle_shrinks_total").await;
            let collections = stepline
                .metric("stepline_idle_thread_collections_total")
                .await;
            // The writer and at least one runtime worker (the one that runs the idle task
            // parks within a second).
            if shrinks >= 1 && collections >= 2 {
                Ok(collections)
            } else {
                Err(format!(
                    "{shrinks} shrinks, {collections} thread collections"
                ))
            }
        })
        .await;
    assert!(collections >= 2);
    assert_eq!(
        stepline
            .metric("stepline_rocksdb_block_cache_capacity_bytes")
            .await,
        full / 8,
        "an eighth of the block cache while idle"
    );
    assert!(stepline.metric("stepline_idle_last_flushed_bytes").await > 0);
    // A write: the block cache gets its capacity back at the idle task's next look (1 s).
    send(
        &stepline,
        "5a1d0e2d3b4a59687766554433221102",
        "00000000000000a2",
    )
    .await;
    let huge_now = stepline
        .metric("stepline_process_resident_huge_page_bytes")
        .await;
    assert!(huge_now <= huge, "{huge} -> {huge_now} bytes in huge pages");
    stepline
        .wait_for(
            "the block cache's capacity back",
            Duration::from_secs(10),
            || async {
                let capacity = stepline
                    .metric("stepline_rocksdb_block_cache_capacity_bytes")
                    .await;
                if capacity == full {
                    Ok(())
                } else {
                    Err(format!("capacity {capacity}"))
                }
            },
        )
        .await;
}
