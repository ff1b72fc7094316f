//! Media round trips against the real `stepline` binary: a real Pydantic AI agent sends a large
//! image (`BinaryContent`) in its user prompt through the stock OTLP exporter; the blob must land
//! in the object store (a local directory, or an S3-compatible server started here: `moto` in
//! server mode), the stored messages must hold a reference instead of the base64, continuations
//! must give the original bytes back (`media=inline`) or the reference (`media=reference`), and a
//! deleted blob must give a clear error rather than a different history.

mod support;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use object_store::aws::AmazonS3Builder;
use object_store::ObjectStoreExt;
use serde_json::Value;
use stepline::config::{MediaConfig, MediaLocation};
use stepline::media::{Blob, Media, MediaRef};
use support::{history_differences, python, run_script, Options, Stepline};

/// What `media_scenario.py` prints.
struct MediaRun {
    run_id: String,
    all_messages: Vec<Value>,
    image_base64: String,
    image: Vec<u8>,
    reference: MediaRef,
}

async fn run_media_scenario(stepline: &Stepline) -> MediaRun {
    let run = run_script(
        "media_scenario.py",
        &["--endpoint", &stepline.otlp_http_url()],
        Duration::from_secs(120),
    )
    .await;
    let out = run.json_line();
    let export = &out["export"];
    assert!(
        export["failed_batches"] == 0 && export["flushed"] == true,
        "every span batch must be acknowledged: {export}\n{}",
        stepline.log_tail()
    );
    let image_base64 = out["image_base64"].as_str().unwrap().to_string();
    let image = base64::engine::general_purpose::STANDARD
        .decode(&image_base64)
        .unwrap();
    let reference = MediaRef::of(&image);
    assert_eq!(reference.hex(), out["image_sha256"].as_str().unwrap());
    let run_id = out["run_id"].as_str().unwrap().to_string();
    stepline
        .wait_for("the media run to complete", Duration::from_secs(30), || {
            let path = format!("/v1/runs/{run_id}");
            async move {
                let reply = stepline.get(&path).await;
                match reply.json.as_ref().and_then(|b| b["status"].as_str()) {
                    Some("completed") => Ok(()),
                    _ => Err(reply.text.clone()),
                }
            }
        })
        .await;
    MediaRun {
        run_id,
        all_messages: out["all_messages"].as_array().unwrap().clone(),
        image_base64,
        image,
        reference,
    }
}

/// Every string in `value`.
fn strings(value: &Value) -> Vec<&str> {
    match value {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items.iter().flat_map(strings).collect(),
        Value::Object(map) => map.values().flat_map(strings).collect(),
        _ => Vec::new(),
    }
}

/// The continuation checks shared by both stores; `stored_here` when this process stored the
/// blob (its `/metrics` count it).
async fn check_continuations(stepline: &Stepline, run: &MediaRun, stored_here: bool) {
    let base = format!("/v1/runs/{}/continuation", run.run_id);
    let reference = run.reference.to_string();

    // otel (default media=inline): the blob part is exactly what Pydantic AI sent.
    let otel = stepline.get_ok(&format!("{base}?format=otel")).await;
    let blob = otel["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap())
        .find(|p| p["type"] == "blob")
        .unwrap_or_else(|| panic!("no blob part in {otel}"));
    assert_eq!(
        blob,
        &serde_json::json!({"type": "blob", "modality": "image", "mime_type": "image/png",
                            "content": run.image_base64})
    );
    assert_eq!(
        otel,
        stepline
            .get_ok(&format!("{base}?format=otel&media=inline"))
            .await
    );

    // pydantic-ai: the BinaryContent the framework had, byte for byte.
    let pai = stepline.get_ok(&format!("{base}?format=pydantic-ai")).await;
    let binary = pai["messages"][0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["content"].as_array().cloned().unwrap_or_default())
        .find(|c| c["kind"] == "binary")
        .unwrap_or_else(|| panic!("no binary content in {pai}"));
    assert_eq!(binary["data"], run.image_base64.as_str());
    assert_eq!(binary["media_type"], "image/png");

    // Every provider format carries the original bytes (as base64 or a data URL).
    for format in ["openai-chat", "openai-responses", "anthropic", "gemini"] {
        let body = stepline
            .get_ok(&format!("{base}?format={format}&media=inline"))
            .await;
        assert!(
            strings(&body)
                .iter()
                .any(|s| s.ends_with(run.image_base64.as_str())),
            "{format}: the image is not in the continuation"
        );
        assert!(!body.to_string().contains(&reference), "{format}");
    }

    // media=reference: the reference, never the bytes.
    let by_ref = stepline
        .get_ok(&format!("{base}?format=otel&media=reference"))
        .await;
    let text = by_ref.to_string();
    assert!(!text.contains(&run.image_base64[..200]));
    let part = by_ref["messages"][0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "uri")
        .unwrap_or_else(|| panic!("no uri part in {by_ref}"));
    assert_eq!(
        part,
        &serde_json::json!({"type": "uri", "modality": "image", "mime_type": "image/png",
                            "uri": reference, "size": run.image.len()})
    );
    let chat = stepline
        .get_ok(&format!("{base}?format=openai-chat&media=reference"))
        .await;
    assert!(chat.to_string().contains(&reference));

    let bad = stepline.get(&format!("{base}?media=base64")).await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(bad
        .error_message()
        .contains("media must be inline or reference"));

    if stored_here {
        let metrics = stepline.client().get(stepline.api_url("/metrics"));
        let metrics = metrics.send().await.unwrap().text().await.unwrap();
        assert!(
            metrics.contains("stepline_media_stored_total 1\n"),
            "the image is stored once: {metrics}"
        );
        assert!(
            metrics.contains(&format!(
                "stepline_media_stored_bytes_total {}\n",
                run.image.len()
            )),
            "{metrics}"
        );
    }
}

async fn check_missing_blob(stepline: &Stepline, run: &MediaRun) {
    let base = format!("/v1/runs/{}/continuation", run.run_id);
    // The error names stepline's run id (Pydantic AI's run id is one of its aliases).
    let record = stepline.get_ok(&format!("/v1/runs/{}", run.run_id)).await;
    let run_id = record["run_id"].as_str().unwrap();
    for format in ["otel", "pydantic-ai", "anthropic"] {
        let reply = stepline.get(&format!("{base}?format={format}")).await;
        assert_eq!(reply.status, 500, "{format}: {}", reply.text);
        let error = reply.error_message();
        assert!(
            error.starts_with(&format!(
                "{} for run {run_id} is missing from the object store (",
                run.reference
            )),
            "{error}"
        );
    }
    // The references are still there.
    stepline
        .get_ok(&format!("{base}?format=otel&media=reference"))
        .await;
}

/// Scans every column family of the (closed) store: no value holds the image's base64, and some
/// message holds its reference.
fn check_rocksdb_holds_references(data_dir: &Path, run: &MediaRun) {
    let options = rocksdb::Options::default();
    let families = rocksdb::DB::list_cf(&options, data_dir).unwrap();
    let db = rocksdb::DB::open_cf_for_read_only(&options, data_dir, &families, false).unwrap();
    let needle = &run.image_base64.as_bytes()[1000..1064];
    let reference = run.reference.to_string();
    let mut references = 0;
    for family in &families {
        let handle = db.cf_handle(family).unwrap();
        for item in db.iterator_cf(handle, rocksdb::IteratorMode::Start) {
            let (key, value) = item.unwrap();
            assert!(
                !value.windows(needle.len()).any(|w| w == needle),
                "column family {family}, key {:?} holds the image's base64",
                String::from_utf8_lossy(&key)
            );
            if value
                .windows(reference.len())
                .any(|w| w == reference.as_bytes())
            {
                references += 1;
            }
        }
    }
    assert!(references > 0, "no stored value refers to {reference}");
}

/// Times writing a fresh 1 MiB blob to `media` (the figure is printed for the report).
async fn time_one_mib_upload(media: &Media, what: &str) -> Duration {
    let bytes: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let blob = Blob {
        reference: MediaRef::of(&bytes),
        bytes: bytes.into(),
    };
    let started = Instant::now();
    media.save(vec![blob]).await.unwrap();
    let took = started.elapsed();
    eprintln!("media: a 1 MiB blob was written to {what} in {took:?}");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_round_trip_local_directory() {
    // The default: a `media` directory inside the storage directory, 64 KiB threshold.
    let mut stepline = Stepline::start().await;
    let run = run_media_scenario(&stepline).await;
    let hex = run.reference.hex();
    let file = stepline
        .data_dir()
        .join("media/sha256")
        .join(&hex[..2])
        .join(hex);
    assert_eq!(
        std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display())),
        run.image,
        "the blob in the directory is the image"
    );
    check_continuations(&stepline, &run, true).await;

    // Pydantic AI loads the continuation and continues from it; it is the history the agent had,
    // image bytes included (apart from the fields the telemetry never carries).
    let report = run_script(
        "continue_run.py",
        &["--api", &stepline.api_url(""), "--run-id", &run.run_id],
        Duration::from_secs(120),
    )
    .await
    .json_line();
    assert_eq!(report["validated"], true, "{report}");
    assert_eq!(report["history_matches"], true, "{report}");
    let loaded = report["canonical_messages"].as_array().unwrap();
    let differences = history_differences(&run.all_messages, loaded);
    assert!(differences.is_empty(), "{}", differences.join("\n"));

    stepline.terminate(Duration::from_secs(20));
    check_rocksdb_holds_references(&stepline.data_dir(), &run);
    stepline.start_again().await;
    check_continuations(&stepline, &run, false).await;

    std::fs::remove_file(&file).unwrap();
    check_missing_blob(&stepline, &run).await;

    let dir = tempfile::tempdir().unwrap();
    let local = Media::open(
        &MediaConfig {
            threshold: Some(1),
            location: MediaLocation::Directory(dir.path().to_path_buf()),
            options: Default::default(),
            ..Default::default()
        },
        true,
    )
    .unwrap();
    time_one_mib_upload(&local, "a local directory (fsync on)").await;
}

/// `python -m moto.server` on a free port, killed on drop.
struct Moto {
    child: Child,
    endpoint: String,
    _log: tempfile::NamedTempFile,
}

impl Moto {
    async fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new(python())
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("start moto.server with the test venv's python");
        let mut moto = Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            _log: log,
        };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while client.get(&moto.endpoint).send().await.is_err() {
            let output = || std::fs::read_to_string(moto._log.path()).unwrap_or_default();
            if let Ok(Some(status)) = moto.child.try_wait() {
                panic!(
                    "`{} -m moto.server` exited with {status} (is moto[server] from \
                     tests/python/requirements.txt installed? `make test` does it):\n{}",
                    python().display(),
                    output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "moto.server did not answer on {} within 60 s:\n{}",
                moto.endpoint,
                output()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        moto
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.endpoint)
    }

    /// The store options stepline and the test use for this server.
    fn options(&self) -> Vec<(&'static str, String)> {
        vec![
            ("endpoint", self.endpoint.clone()),
            ("allow_http", "true".into()),
            ("region", "us-east-1".into()),
            ("access_key_id", "test".into()),
            ("secret_access_key", "test".into()),
        ]
    }

    /// A client of `bucket` (signed requests, as S3 wants).
    fn bucket(&self, bucket: &str) -> object_store::aws::AmazonS3 {
        let mut builder = AmazonS3Builder::new().with_bucket_name(bucket);
        for (key, value) in self.options() {
            builder = builder.with_config(key.parse().unwrap(), value);
        }
        builder.build().unwrap()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_round_trip_s3_compatible_server() {
    let moto = Moto::start().await;
    let http = reqwest::Client::new();
    let created = http.put(moto.url("stepline-media")).send().await.unwrap();
    assert!(created.status().is_success(), "create bucket: {created:?}");

    let options = moto
        .options()
        .iter()
        .map(|(k, v)| format!("{k}: \"{v}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let options = format!("{{{options}}}");
    let mut stepline = Stepline::start_with(Options {
        media: Some(format!(
            "{{url: \"s3://stepline-media/agents/media\", threshold: 64KiB, options: {options}}}"
        )),
        ..Options::default()
    })
    .await;
    let run = run_media_scenario(&stepline).await;
    let hex = run.reference.hex();
    let bucket = moto.bucket("stepline-media");
    let object = object_store::path::Path::from(format!("agents/media/sha256/{}/{hex}", &hex[..2]));
    let stored = bucket
        .get(&object)
        .await
        .unwrap_or_else(|e| panic!("GET {object}: {e}"));
    assert_eq!(
        stored.bytes().await.unwrap().as_ref(),
        run.image.as_slice(),
        "the object in the bucket is the image"
    );
    assert!(
        !stepline.data_dir().join("media").exists(),
        "nothing goes to the local directory when a bucket is configured"
    );
    check_continuations(&stepline, &run, true).await;

    stepline.terminate(Duration::from_secs(20));
    check_rocksdb_holds_references(&stepline.data_dir(), &run);
    stepline.start_again().await;

    bucket.delete(&object).await.unwrap();
    check_missing_blob(&stepline, &run).await;

    let s3 = Media::open(
        &MediaConfig {
            threshold: Some(1),
            location: MediaLocation::S3 {
                bucket: "stepline-media".into(),
                prefix: "bench".into(),
            },
            options: moto
                .options()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            ..Default::default()
        },
        true,
    )
    .unwrap();
    time_one_mib_upload(&s3, "moto (S3 over local HTTP)").await;
}

/// An OTLP/JSON request with one model-request span whose input holds a `size`-byte blob.
fn model_request_with_blob(size: usize) -> (String, String) {
    let data = base64::engine::general_purpose::STANDARD.encode(vec![7u8; size]);
    let input = serde_json::json!([{"role": "user", "parts": [
        {"type": "text", "content": "look"},
        {"type": "blob", "modality": "image", "mime_type": "image/png", "content": data},
    ]}]);
    let body = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "chat m",
        "kind": 3,
        "startTimeUnixNano": "1763800000000000000",
        "endTimeUnixNano": "1763800001000000000",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.input.messages", "value": {"stringValue": input.to_string()}},
        ],
    }]}]}]});
    (body.to_string(), data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_store_failure_is_a_retryable_refusal() {
    let stepline = Stepline::start().await;
    // The media directory becomes a file: no blob can be written under it.
    let media_dir = stepline.data_dir().join("media");
    std::fs::remove_dir_all(&media_dir).unwrap();
    std::fs::write(&media_dir, b"not a directory").unwrap();

    let (body, data) = model_request_with_blob(70 * 1024);
    let url = format!("{}/v1/traces", stepline.otlp_http_url());
    let send = || {
        stepline
            .client()
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
    };
    let refused = send().await.unwrap();
    assert_eq!(refused.status(), 503, "a failed blob write is retryable");
    assert!(refused.headers().contains_key("retry-after"));
    let status = refused.text().await.unwrap();
    assert!(
        status.contains("the media store file://") && status.contains("retry later"),
        "{status}"
    );
    let runs = stepline.get_list("/v1/runs", "runs").await;
    assert!(
        runs.is_empty(),
        "nothing is stored when the blob is not: {runs:?}"
    );

    // The store is back: the client's retry is accepted and the history is whole.
    std::fs::remove_file(&media_dir).unwrap();
    std::fs::create_dir(&media_dir).unwrap();
    let accepted = send().await.unwrap();
    assert_eq!(accepted.status(), 200, "{}", accepted.text().await.unwrap());
    let runs = stepline.get_list("/v1/runs", "runs").await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run_id = runs[0]["run_id"].as_str().unwrap();
    let history = stepline
        .get_ok(&format!(
            "/v1/runs/{run_id}/continuation?include_interrupted=true"
        ))
        .await;
    assert_eq!(history["messages"][0]["parts"][1]["content"], data.as_str());
}
