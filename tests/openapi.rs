//! The OpenAPI 3.1 document of the query API against the real binary: it is served at
//! `/v1/openapi.json` behind the API's token, it validates (openapi-spec-validator), and
//! schemathesis, run from it against the live binary holding a real Pydantic AI scenario, finds no
//! input that gives a 5xx and no answer that does not match the document.
//!
//! The tools run from the venv named by `STEPLINE_PYTHON_TOOLS` (`make test` builds it from
//! tests/python/requirements-tools.txt); the scenario from the one named by `STEPLINE_PYTHON`.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::Value;
use support::token_api::{tools_python, TokenStepline};
use support::truncate;

const TOKEN: &str = "openapi-t0ken";

/// The operations the API has, as (method, path).
const OPERATIONS: &[(&str, &str)] = &[
    ("get", "/healthz"),
    ("get", "/v1/openapi.json"),
    ("get", "/v1/runs"),
    ("get", "/v1/runs/{run_id}"),
    ("get", "/v1/runs/{run_id}/events"),
    ("get", "/v1/runs/{run_id}/effects"),
    ("get", "/v1/runs/{run_id}/snapshots"),
    ("get", "/v1/runs/{run_id}/continuation"),
    ("get", "/v1/runs/{run_id}/recovery"),
    ("post", "/v1/runs/{run_id}/abandon"),
];

/// Runs a tool of the tools venv in `dir` (schemathesis keeps a cache in its working
/// directory); returns (success, stdout + stderr).
fn tool(dir: &Path, program: &str, args: &[&str]) -> (bool, String) {
    let python = tools_python();
    let bin = python.parent().map(|p| p.join(program)).unwrap_or_default();
    let output = Command::new(&bin)
        .args(args)
        .env("NO_COLOR", "1")
        .env("SCHEMATHESIS_HOOKS", "")
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_validates_and_schemathesis_finds_nothing() {
    let stepline = TokenStepline::start(TOKEN).await;
    let (orchestrator, delegate) = stepline.load_scenario("conv-openapi").await;

    // Behind the token, like every /v1 route.
    let client = reqwest::Client::new();
    let anonymous = client
        .get(stepline.url("/v1/openapi.json"))
        .send()
        .await
        .expect("GET /v1/openapi.json");
    assert_eq!(anonymous.status(), 401);
    let body: Value = anonymous.json().await.expect("the 401 answer is JSON");
    assert!(body["error"].is_string(), "{body}");

    let (status, document) = stepline.get("/v1/openapi.json").await;
    assert_eq!(status, 200, "{document}");
    assert_eq!(document["openapi"], "3.1.0");
    for (method, path) in OPERATIONS {
        let operation = &document["paths"][path][method];
        assert!(operation.is_object(), "{method} {path} is not described");
        let responses = &operation["responses"];
        for code in ["200", "403"] {
            assert!(responses[code].is_object(), "{method} {path}: no {code}");
        }
        if path.starts_with("/v1/") {
            assert!(responses["401"].is_object(), "{method} {path}: no 401");
            let error = &responses["401"]["content"]["application/json"]["schema"]["$ref"];
            assert_eq!(error, "#/components/schemas/ErrorBody", "{method} {path}");
        }
        if path.contains("{run_id}") {
            assert!(responses["404"].is_object(), "{method} {path}: no 404");
            assert!(responses["400"].is_object(), "{method} {path}: no 400");
        }
    }
    assert!(document["paths"]["/v1/runs/{run_id}/abandon"]["post"]["responses"]["409"].is_object());
    let variants = document["components"]["schemas"]["Continuation"]["oneOf"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(variants, 8, "one continuation shape per format");

    let dir = tempfile::tempdir().expect("temporary directory");
    let served = dir.path().join("openapi.json");
    std::fs::write(&served, document.to_string()).expect("write the document");
    let (ok, output) = tool(
        dir.path(),
        "openapi-spec-validator",
        &[served.to_str().unwrap_or_default()],
    );
    assert!(ok, "openapi-spec-validator rejects the document:\n{output}");

    // The fuzzer's copy names the scenario's runs as examples of `run_id`, so the examples phase
    // reaches real runs (random ids mostly find nothing); the document itself stays generic.
    // Abandoning and deleting get the delegate run, so the orchestrator reads back at the end.
    let mut fuzzed = document.clone();
    if let Some(paths) = fuzzed["paths"].as_object_mut() {
        for (path, item) in paths.iter_mut() {
            for (method, operation) in item.as_object_mut().into_iter().flat_map(|o| o.iter_mut()) {
                let example = if path.ends_with("/abandon") || method == "delete" {
                    &delegate
                } else {
                    &orchestrator
                };
                let parameters = operation
                    .get_mut("parameters")
                    .and_then(Value::as_array_mut);
                for parameter in parameters.into_iter().flatten() {
                    if parameter["name"] == "run_id" {
                        parameter["example"] = Value::String(example.clone());
                    }
                }
            }
        }
    }
    let fuzzed_path = dir.path().join("fuzzed.json");
    std::fs::write(&fuzzed_path, fuzzed.to_string()).expect("write the fuzzer's document");
    // Every operation but the deletions first (they would delete what the others read), then
    // the deletions on their own.
    let fuzz = |methods: &str| {
        let report = dir.path().join(format!("report-{methods}"));
        let started = Instant::now();
        let (ok, output) = tool(
            dir.path(),
            "schemathesis",
            &[
                "run",
                fuzzed_path.to_str().unwrap_or_default(),
                "--url",
                &stepline.base(),
                "--header",
                &format!("Authorization: Bearer {TOKEN}"),
                "--checks",
                "all",
                "--max-examples",
                "25",
                "--seed",
                "18",
                "--workers",
                "2",
                if methods == "DELETE" {
                    "--include-method"
                } else {
                    "--exclude-method"
                },
                "DELETE",
                "--report-dir",
                report.to_str().unwrap_or_default(),
            ],
        );
        let took = started.elapsed();
        assert!(
            ok,
            "schemathesis found failures (in {took:?}):\n{}\n--- stepline log ---\n{}",
            truncate(&output, 20000),
            stepline.log()
        );
        // Every phase ran clean: no phase or check is marked failed.
        assert!(
            output.contains("Test cases:") && !output.contains('\u{274c}'),
            "schemathesis did not report a clean run:\n{}",
            truncate(&output, 8000)
        );
        eprintln!(
            "schemathesis ({methods}): {took:?}\n{}",
            output.lines().rev().take(12).collect::<Vec<_>>().join("\n")
        );
    };
    fuzz("reads and writes");

    // Nothing the fuzzer sent hurt the stored data: the scenario's run reads back the same.
    let (status, run) = stepline.get(&format!("/v1/runs/{orchestrator}")).await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["status"], "completed");

    fuzz("DELETE");
}
