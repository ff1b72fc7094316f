//! Smoke test of the peer bench (`benches/peer_bench.py smoke`): 2-second loads against the
//! real `stepline` binary and Rotel (PyPI `rotel`), checking that the bench's plumbing works:
//! both servers acknowledged spans, the matrix, latency (open loop via `loadgen --rate`) and soak
//! figures are in its JSON summary, and no process it started outlives it. Skips only when
//! Rotel cannot be installed (the bench exits with 77, e.g. without network).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The bench's exit status when Rotel cannot be installed.
const EXIT_SKIP: i32 = 77;

/// The cargo target directory the test binary's `stepline` was built in.
fn target_dir() -> PathBuf {
    let stepline = Path::new(env!("CARGO_BIN_EXE_stepline"));
    stepline
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .expect("CARGO_BIN_EXE_stepline is <target>/release/stepline")
}

/// Builds `examples/loadgen` into the same target directory (`cargo test --tests` does not).
/// The variables cargo sets for a test are removed first: a build script that watches one of
/// them (ring's watches `CARGO_MANIFEST_DIR`) would otherwise rebuild half the dependency tree
/// here and again at the next build from a shell.
fn build_loadgen(target: &Path) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        let name_str = name.to_string_lossy();
        if name_str == "CARGO" || (name_str.starts_with("CARGO_") && name_str != "CARGO_HOME") {
            command.env_remove(&name);
        }
    }
    let status = command
        .args(["build", "--release", "--example", "loadgen"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", target)
        .status()
        .expect("running cargo build --example loadgen");
    assert!(status.success(), "cargo build --example loadgen failed");
}

/// A number at `pointer` in `value`, or a failure naming it.
fn number(value: &Value, pointer: &str) -> f64 {
    value
        .pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{pointer} is not a number in {value}"))
}

/// Whether a process started by the bench still runs (a reused pid running something else
/// does not count).
fn still_running(pid: u64) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|cmdline| {
            let cmdline = String::from_utf8_lossy(&cmdline);
            ["rotel", "stepline", "loadgen"]
                .iter()
                .any(|name| cmdline.contains(name))
        })
        .unwrap_or(false)
}

#[test]
fn smoke_mode_measures_both_servers_and_cleans_up() {
    let target = target_dir();
    build_loadgen(&target);
    let dir = tempfile::tempdir().expect("temporary directory");
    let json_path = dir.path().join("smoke.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peer_bench.py");
    let started = Instant::now();
    let output = Command::new("python3")
        .arg(&script)
        .arg("smoke")
        .arg("--free-ports")
        .arg("--target-dir")
        .arg(&target)
        .arg("--json")
        .arg(&json_path)
        .env_remove("PORT_OFFSET")
        .output()
        .expect("running benches/peer_bench.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(EXIT_SKIP) {
        eprintln!("SKIPPED: the peer bench cannot install Rotel here: {stdout}{stderr}");
        return;
    }
    assert!(
        output.status.success(),
        "peer bench smoke failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        started.elapsed() < Duration::from_secs(300),
        "the smoke mode should take well under 5 minutes"
    );
    let summary: Value = serde_json::from_slice(
        &std::fs::read(&json_path).expect("the bench wrote its JSON summary"),
    )
    .expect("the JSON summary parses");

    // Matrix: one cell, both servers acknowledged spans and were measured from the outside.
    assert!(
        stdout.contains("x spans/s"),
        "the matrix table is printed:\n{stdout}"
    );
    let cell = &summary["matrix"][0];
    for server in ["rotel", "stepline"] {
        let r = &cell[server];
        assert!(
            number(r, "/spans") > 0.0,
            "{server} acknowledged no spans: {r}"
        );
        assert_eq!(number(r, "/failed_requests"), 0.0, "{server}: {r}");
        assert!(number(r, "/server_cpu_s") > 0.0, "{server}: {r}");
        assert!(number(r, "/spans_per_cpu_s") > 0.0, "{server}: {r}");
        assert!(number(r, "/peak_rss_mb") > 1.0, "{server}: {r}");
    }
    let ratio = number(cell, "/ratio/spans_per_s");
    let expected = number(cell, "/stepline/spans_per_s") / number(cell, "/rotel/spans_per_s");
    assert!(
        (ratio - expected).abs() < 0.01,
        "ratio {ratio} vs {expected}"
    );
    assert_eq!(
        number(cell, "/stepline/forwarded_spans"),
        number(cell, "/stepline/spans"),
        "stepline forwarded every acknowledged span to the sink: {}",
        cell["stepline"]["metrics"]
    );

    // Latency: the maximum, then an open loop at half of it that does not exceed its rate.
    let latency = summary["latency"].as_array().expect("latency results");
    assert_eq!(latency.len(), 2, "stepline and rotel: {latency:?}");
    for entry in latency {
        let max = number(entry, "/max/spans_per_s");
        let offered = number(entry, "/open_loop/open_loop/offered_spans_per_s");
        assert!(max > 0.0, "{entry}");
        assert!(
            (offered - max / 2.0).abs() <= 0.1 + max * 0.001,
            "offered {offered} is half of {max}"
        );
        let acked = number(entry, "/open_loop/spans_per_s");
        assert!(number(entry, "/open_loop/spans") > 0.0, "{entry}");
        assert!(
            acked <= offered * 1.25 + 200.0,
            "the open loop keeps to its rate: {acked} acknowledged spans/s at {offered} offered"
        );
        let p50 = number(entry, "/open_loop/latency_ms/p50");
        let p99 = number(entry, "/open_loop/latency_ms/p99");
        assert!(p50 > 0.0 && p99 >= p50, "{entry}");
        number(entry, "/open_loop/open_loop/schedule_lag_ms/p99");
    }
    assert!(latency
        .iter()
        .any(|e| e["server"] == "stepline" && e["p99_within_goal"].is_boolean()));

    // Soak: samples over the load and the idle period, RSS of both, stepline's cache gauges.
    let soak = &summary["soak"];
    let samples = soak["samples"].as_array().expect("soak samples");
    assert!(samples.len() >= 4, "{samples:?}");
    assert!(samples.iter().any(|s| s["phase"] == "load"));
    assert!(samples.iter().any(|s| s["phase"] == "idle"));
    for sample in samples {
        assert!(number(sample, "/stepline_rss_mb") > 1.0, "{sample}");
        assert!(number(sample, "/rotel_rss_mb") > 1.0, "{sample}");
    }
    assert!(samples.iter().any(|s| s["stepline_metrics"]
        .as_object()
        .is_some_and(|m| m.keys().any(|k| k.starts_with("stepline_cache_bytes{")))));
    for server in ["stepline", "rotel"] {
        let s = &soak["servers"][server];
        assert!(number(s, "/spans") > 0.0, "{server}: {s}");
        number(s, "/slope_last_half_mb_per_min");
        assert!(s["grew"].is_boolean(), "{server}: {s}");
    }

    // Nothing the bench started is left running.
    let pids = summary["started_pids"].as_array().expect("started_pids");
    assert!(
        pids.len() >= 5,
        "sink, servers and load generators: {pids:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let running: Vec<u64> = pids
            .iter()
            .filter_map(Value::as_u64)
            .filter(|pid| still_running(*pid))
            .collect();
        if running.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "processes the bench started still run: {running:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
