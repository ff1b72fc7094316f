//! Deleting runs against the real `stepline` binary: `DELETE /v1/runs/{id}` and
//! `DELETE /v1/conversations/{id}` (204, then 404 everywhere, nothing else touched), late spans
//! of a deleted run, disk space back after compaction, media blobs removed only when no run
//! names them (real Pydantic AI through the stock exporter), retention, and a SIGKILL in the
//! middle of deleting a large run.

mod support;

use std::path::Path;
use std::sync::Once;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::Value;
use stepline::store::{Cf, Store};
use support::{run_script, Options, Stepline};

/// Deletion steps of 5 keys (a test knob of the binary), so a large run takes many steps.
fn small_steps() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| std::env::set_var("STEPLINE_DELETE_BATCH", "5"));
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        key_strindex: 0,
    }
}

fn trace_id(n: u64) -> Vec<u8> {
    let mut id = vec![0xde; 8];
    id.extend_from_slice(&n.to_be_bytes());
    id
}

/// The run id of the agent span `span` of trace `n`.
fn run_of(n: u64, span: u8) -> String {
    format!("{}-{}", hex::encode(trace_id(n)), hex::encode([span; 8]))
}

fn span(n: u64, id: u64, parent: u64, name: &str, attributes: Vec<KeyValue>) -> Span {
    // Wall-clock start, so the runs' times are now.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let id8 = |i: u64| -> Vec<u8> {
        if i < 256 {
            vec![i as u8; 8]
        } else {
            i.to_be_bytes().to_vec()
        }
    };
    Span {
        trace_id: trace_id(n),
        span_id: id8(id),
        parent_span_id: if parent == 0 { vec![] } else { id8(parent) },
        name: name.into(),
        start_time_unix_nano: now + id,
        end_time_unix_nano: now + id + 1_000,
        attributes,
        ..Default::default()
    }
}

fn op(v: &str) -> KeyValue {
    kv("gen_ai.operation.name", v)
}

/// A text that does not compress much: `bytes` hex digits from a seed.
fn noise(seed: u64, bytes: usize) -> String {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = String::with_capacity(bytes);
    while out.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_str(&format!("{x:016x}"));
    }
    out.truncate(bytes);
    out
}

/// A model request of the run whose agent span is `agent`, with its own `text` as input.
fn chat(n: u64, id: u64, agent: u64, text: &str) -> Span {
    let input = format!(r#"[{{"role":"user","parts":[{{"type":"text","content":"{text}"}}]}}]"#);
    span(
        n,
        id,
        agent,
        "chat m",
        vec![
            op("chat"),
            kv("gen_ai.input.messages", &input),
            kv(
                "gen_ai.output.messages",
                r#"[{"role":"assistant","parts":[{"type":"text","content":"ok"}]}]"#,
            ),
        ],
    )
}

/// An agent run of trace `n` (span 1, alias `call-<n>`) with one model request, in
/// `conversation` when given, and a delegate run (span 5, under tool span 3) when `delegate`.
fn agent_trace(n: u64, conversation: Option<&str>, delegate: bool) -> Vec<Span> {
    let mut agent = vec![
        op("invoke_agent"),
        kv("gen_ai.agent.name", "a"),
        kv("gen_ai.agent.call.id", &format!("call-{n}")),
    ];
    if let Some(c) = conversation {
        agent.push(kv("gen_ai.conversation.id", c));
    }
    let mut spans = vec![chat(n, 2, 1, &format!("question {n}"))];
    if delegate {
        spans.push(span(
            n,
            3,
            1,
            "execute_tool ask",
            vec![
                op("execute_tool"),
                kv("gen_ai.tool.call.id", "c1"),
                kv("gen_ai.tool.name", "ask"),
                kv("gen_ai.tool.call.result", "a"),
            ],
        ));
        spans.push(span(
            n,
            5,
            3,
            "invoke_agent delegate",
            vec![op("invoke_agent"), kv("gen_ai.agent.name", "delegate")],
        ));
        spans.push(chat(n, 6, 5, &format!("delegate question {n}")));
    }
    spans.push(span(n, 1, 0, "invoke_agent a", agent));
    spans
}

async fn send(stepline: &Stepline, spans: Vec<Span>) {
    let body = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec();
    let response = stepline
        .client()
        .post(format!("{}/v1/traces", stepline.otlp_http_url()))
        .header("content-type", "application/x-protobuf")
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST /v1/traces: {e}\n{}", stepline.log_tail()));
    let status = response.status().as_u16();
    assert_eq!(status, 200, "{}", stepline.log_tail());
}

async fn delete(stepline: &Stepline, path: &str) -> u16 {
    stepline
        .client()
        .delete(stepline.api_url(path))
        .send()
        .await
        .unwrap_or_else(|e| panic!("DELETE {path}: {e}\n{}", stepline.log_tail()))
        .status()
        .as_u16()
}

async fn status(stepline: &Stepline, path: &str) -> u16 {
    stepline.get(path).await.status
}

/// Every read of a run answers 404.
async fn assert_gone(stepline: &Stepline, id: &str) {
    for rest in ["", "/events", "/effects", "/snapshots", "/continuation"] {
        let path = format!("/v1/runs/{id}{rest}");
        assert_eq!(status(stepline, &path).await, 404, "GET {path}");
    }
}

async fn wait_status(stepline: &Stepline, id: &str, want: &'static str) {
    let path = format!("/v1/runs/{id}");
    stepline
        .wait_for(&format!("run {id} {want}"), Duration::from_secs(30), || {
            let path = path.clone();
            async move {
                let reply = stepline.get(&path).await;
                match reply.json.as_ref().and_then(|b| b["status"].as_str()) {
                    Some(s) if s == want => Ok(()),
                    _ => Err(reply.text.clone()),
                }
            }
        })
        .await;
}

/// Waits until no deletion is in progress.
async fn wait_deleted(stepline: &Stepline) {
    stepline
        .wait_for(
            "the deletions to finish",
            Duration::from_secs(120),
            || async {
                let list = stepline.get_list("/v1/deletions", "deletions").await;
                if list.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{} in progress", list.len()))
                }
            },
        )
        .await;
}

fn run_ids(runs: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = runs
        .iter()
        .map(|r| r["run_id"].as_str().unwrap_or_default().to_string())
        .collect();
    ids.sort();
    ids
}

/// Bytes of the files directly in `dir` (the RocksDB files; the media directory is a
/// subdirectory and not counted).
fn rocksdb_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_run_and_conversation_answer_404_and_nothing_else_goes() {
    small_steps();
    let stepline = Stepline::start().await;
    // Conversation c-1: runs 1 (with a delegate run) and 2; conversation c-2: run 3; run 4 none.
    send(&stepline, agent_trace(1, Some("c-1"), true)).await;
    send(&stepline, agent_trace(2, Some("c-1"), false)).await;
    send(&stepline, agent_trace(3, Some("c-2"), false)).await;
    send(&stepline, agent_trace(4, None, true)).await;
    for n in 1..=4 {
        wait_status(&stepline, &run_of(n, 1), "completed").await;
    }
    let delegate = run_of(4, 5);
    wait_status(&stepline, &delegate, "completed").await;
    let all = run_ids(&stepline.get_list("/v1/runs", "runs").await);
    assert_eq!(all.len(), 6, "{all:?}");

    // One run, by its alias: the run and its delegate run go.
    assert_eq!(delete(&stepline, "/v1/runs/call-4").await, 204);
    assert_gone(&stepline, &run_of(4, 1)).await;
    assert_gone(&stepline, &delegate).await;
    assert_eq!(status(&stepline, "/v1/runs/call-4").await, 404, "the alias");
    assert_eq!(delete(&stepline, "/v1/runs/call-4").await, 404, "again");
    assert_eq!(
        delete(&stepline, &format!("/v1/runs/{}", run_of(4, 1))).await,
        404
    );
    let left = run_ids(&stepline.get_list("/v1/runs", "runs").await);
    assert_eq!(left.len(), 4, "{left:?}");

    // A conversation: its runs (and the delegate of run 1) go, the others stay.
    assert_eq!(delete(&stepline, "/v1/conversations/c-1").await, 204);
    for id in [run_of(1, 1), run_of(1, 5), run_of(2, 1)] {
        assert_gone(&stepline, &id).await;
    }
    let left = run_ids(&stepline.get_list("/v1/runs", "runs").await);
    assert_eq!(left, vec![run_of(3, 1)]);
    assert!(stepline
        .get_list("/v1/runs?conversation_id=c-1", "runs")
        .await
        .is_empty());
    assert_eq!(
        stepline
            .get_list("/v1/runs?conversation_id=c-2", "runs")
            .await
            .len(),
        1
    );
    // A conversation without runs: 204 as well (nothing stored for it, as asked).
    assert_eq!(delete(&stepline, "/v1/conversations/never-seen").await, 204);
    assert_eq!(delete(&stepline, "/v1/runs/no-such-run?x=1").await, 400);
    wait_deleted(&stepline).await;

    // The survivor answers in full.
    let survivor = run_of(3, 1);
    assert_eq!(
        status(&stepline, &format!("/v1/runs/{survivor}/continuation")).await,
        200
    );
    assert_eq!(status(&stepline, "/v1/runs/call-3").await, 200);

    // Late spans of a deleted run are accepted (and forwarded) but do not bring it back.
    send(&stepline, agent_trace(2, Some("c-1"), false)).await;
    assert_gone(&stepline, &run_of(2, 1)).await;
    assert!(stepline
        .get_list("/v1/runs?conversation_id=c-1", "runs")
        .await
        .is_empty());
    let deletions = stepline.get_ok("/v1/deletions").await;
    assert_eq!(deletions["deletions"], serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_space_comes_back_after_deleting_a_large_run() {
    small_steps();
    let mut stepline = Stepline::start().await;
    // One large run: 1200 model requests with 16 KiB of their own each (~19 MiB of text), and
    // a small run that stays.
    for batch in 0..12u64 {
        let spans = (0..100u64)
            .map(|i| {
                let id = 1000 + batch * 100 + i;
                chat(1, id, 1, &noise(id, 16 * 1024))
            })
            .collect();
        send(&stepline, spans).await;
    }
    send(&stepline, agent_trace(1, None, false)).await;
    send(&stepline, agent_trace(2, None, false)).await;
    let big = run_of(1, 1);
    wait_status(&stepline, &big, "completed").await;
    wait_status(&stepline, &run_of(2, 1), "completed").await;
    // A restart flushes what the write-ahead log holds into data files.
    stepline.restart().await;
    let before = rocksdb_bytes(&stepline.data_dir());

    assert_eq!(delete(&stepline, &format!("/v1/runs/{big}")).await, 204);
    assert_gone(&stepline, &big).await;
    wait_deleted(&stepline).await;
    // The freed ranges are compacted once the deletion finished: the files shrink.
    let dir = stepline.data_dir();
    let after = stepline
        .wait_for("the space to come back", Duration::from_secs(120), || {
            let dir = dir.clone();
            async move {
                let now = rocksdb_bytes(&dir);
                if now * 3 < before {
                    Ok(now)
                } else {
                    Err(format!("{now} bytes, {before} before"))
                }
            }
        })
        .await;
    eprintln!(
        "deletion: RocksDB directory {before} bytes before, {after} after deleting the large run"
    );
    // And it stays so across a restart.
    stepline.restart().await;
    let restarted = rocksdb_bytes(&stepline.data_dir());
    assert!(
        restarted * 3 < before,
        "{restarted} bytes after a restart, {before} before"
    );
    assert_eq!(
        status(&stepline, &format!("/v1/runs/{}", run_of(2, 1))).await,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_in_the_middle_of_a_deletion_is_finished_after_restart() {
    small_steps();
    let mut stepline = Stepline::start().await;
    for batch in 0..6u64 {
        let spans = (0..250u64)
            .map(|i| {
                let id = 1000 + batch * 250 + i;
                chat(7, id, 1, &format!("step {id}"))
            })
            .collect();
        send(&stepline, spans).await;
    }
    send(&stepline, agent_trace(7, Some("c-7"), false)).await;
    send(&stepline, agent_trace(8, Some("c-7"), false)).await;
    let big = run_of(7, 1);
    wait_status(&stepline, &big, "completed").await;
    wait_status(&stepline, &run_of(8, 1), "completed").await;

    assert_eq!(delete(&stepline, &format!("/v1/runs/{big}")).await, 204);
    let pending = stepline.get_list("/v1/deletions", "deletions").await;
    assert_eq!(pending.len(), 1, "the deletion is under way: {pending:?}");
    assert_eq!(pending[0]["run_id"], big.as_str());
    stepline.kill();

    stepline.start_again().await;
    // Hidden from the first answer on, finished in the background.
    assert_gone(&stepline, &big).await;
    assert_eq!(status(&stepline, "/v1/runs/call-7").await, 404);
    assert_eq!(
        run_ids(
            &stepline
                .get_list("/v1/runs?conversation_id=c-7", "runs")
                .await
        ),
        vec![run_of(8, 1)]
    );
    wait_deleted(&stepline).await;
    assert_gone(&stepline, &big).await;

    // No key of the run is left in any column family (the store read in this process).
    stepline.terminate(Duration::from_secs(10));
    let store = Store::open(&stepline.data_dir(), false).unwrap();
    let trace = hex::encode(trace_id(7));
    let run_key = store.run_key(&big).unwrap();
    assert_eq!(run_key, None, "its run key is gone");
    for cf in Cf::EVERY {
        if matches!(cf, Cf::Outbox | Cf::Deletions) {
            continue; // nothing is forwarded here; the tombstone names the run by design
        }
        let mut left = Vec::new();
        store
            .kv()
            .scan(cf, b"", b"", &mut |k, v| {
                let text = String::from_utf8_lossy(k);
                if text.contains(&big)
                    || (text.contains(&trace) && !text.contains(&run_of(8, 1)))
                    || String::from_utf8_lossy(v) == big
                {
                    left.push(text.into_owned());
                }
                Ok(true)
            })
            .unwrap();
        assert!(
            left.is_empty(),
            "{cf} keeps {} keys of the run: {:?}",
            left.len(),
            &left[..left.len().min(5)]
        );
    }
    assert!(store.check_readable().unwrap().is_empty());
    assert!(store.run(&run_of(8, 1)).unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_old_ended_runs_and_not_running_ones() {
    small_steps();
    // `processors.stepline` is written as `{ inactivity_timeout: <this> }`.
    let stepline = Stepline::start_with(Options {
        inactivity_timeout: "10m, retention: 2s".into(),
        ..Options::default()
    })
    .await;
    send(&stepline, agent_trace(11, None, false)).await;
    // A run still going: a model request without its run span.
    send(&stepline, vec![chat(12, 2, 1, "still thinking")]).await;
    wait_status(&stepline, &run_of(11, 1), "completed").await;
    wait_status(&stepline, &run_of(12, 1), "running").await;
    stepline
        .wait_for(
            "retention to delete the ended run",
            Duration::from_secs(30),
            || async {
                match status(&stepline, &format!("/v1/runs/{}", run_of(11, 1))).await {
                    404 => Ok(()),
                    s => Err(format!("{s}")),
                }
            },
        )
        .await;
    assert_gone(&stepline, &run_of(11, 1)).await;
    wait_deleted(&stepline).await;
    // Well past the retention, the running run is still there.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        run_ids(&stepline.get_list("/v1/runs", "runs").await),
        vec![run_of(12, 1)]
    );
}

/// What `media_scenario.py` prints that this test needs: the run (its alias) and the blob.
async fn media_run(stepline: &Stepline, size: usize) -> (String, String) {
    let run = run_script(
        "media_scenario.py",
        &[
            "--endpoint",
            &stepline.otlp_http_url(),
            "--size",
            &size.to_string(),
        ],
        Duration::from_secs(120),
    )
    .await;
    let out = run.json_line();
    assert_eq!(
        out["export"]["failed_batches"],
        0,
        "{}",
        stepline.log_tail()
    );
    let id = out["run_id"].as_str().unwrap().to_string();
    wait_status(stepline, &id, "completed").await;
    (id, out["image_sha256"].as_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_blobs_go_with_the_last_run_that_names_them() {
    small_steps();
    let stepline = Stepline::start().await;
    let blob = |hex: &str| {
        stepline
            .data_dir()
            .join("media/sha256")
            .join(&hex[..2])
            .join(hex)
    };
    // Run a alone names its image; runs b and c name the same (other) image.
    let (a, only_a) = media_run(&stepline, 96 * 1024).await;
    let (b, shared) = media_run(&stepline, 100 * 1024).await;
    let (c, shared_too) = media_run(&stepline, 100 * 1024).await;
    assert_eq!(shared, shared_too);
    assert_ne!(only_a, shared);
    assert!(blob(&only_a).is_file() && blob(&shared).is_file());

    assert_eq!(delete(&stepline, &format!("/v1/runs/{a}")).await, 204);
    stepline
        .wait_for(
            "the blob only run a named to go",
            Duration::from_secs(60),
            || async {
                if blob(&only_a).exists() {
                    Err("still there".to_string())
                } else {
                    Ok(())
                }
            },
        )
        .await;
    assert!(blob(&shared).is_file(), "b and c still name it");

    assert_eq!(delete(&stepline, &format!("/v1/runs/{b}")).await, 204);
    wait_deleted(&stepline).await;
    // Another pass of the driver sees the candidate, still named by c.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(blob(&shared).is_file(), "c still names it");
    let reply = stepline
        .get(&format!("/v1/runs/{c}/continuation?format=pydantic-ai"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    assert_eq!(delete(&stepline, &format!("/v1/runs/{c}")).await, 204);
    stepline
        .wait_for(
            "the shared blob to go with its last run",
            Duration::from_secs(60),
            || async {
                if blob(&shared).exists() {
                    Err("still there".to_string())
                } else {
                    Ok(())
                }
            },
        )
        .await;
}
