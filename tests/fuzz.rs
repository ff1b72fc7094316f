//! Fuzzing in the test suite (see `src/fuzzing/` and the README's "Fuzzing" section).
//!
//! For every target: replay `fuzz/regressions/<target>/*` and `fuzz/corpus/<target>/*`, time
//! the largest inputs and the size probes against ×8 versions, then mutate for
//! `STEPLINE_FUZZ_SECONDS` (default 5) with a fixed seed plus the time. Each target runs in a
//! child process (this test binary again, test `fuzz_child`), so a stack overflow is reported
//! with its input instead of killing the suite. `STEPLINE_FUZZ_TARGET=a,b` runs only those
//! targets; `STEPLINE_FUZZ_OPEN=1` also replays the known-open failures in
//! `fuzz/regressions/<target>/open/` and runs the open size probes (reported, not failed);
//! `STEPLINE_FUZZ_SEED` fixes the seed.

use std::path::{Path, PathBuf};
use std::process::Command;

use stepline::fuzzing::engine::{self, fuzz_root, supervise, Options, Report};

/// The command that starts a fuzz child: this binary, running only [`fuzz_child`].
fn child_command() -> Command {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("fuzz"));
    let mut cmd = Command::new(exe);
    cmd.args(["fuzz_child", "--exact", "--nocapture", "--test-threads=1"]);
    cmd
}

/// Entry point of the fuzz children; does nothing in a normal test run.
#[test]
fn fuzz_child() {
    engine::child_main();
}

fn options(root: &Path, seconds: f64, seed: u64) -> Options {
    Options {
        root: root.to_path_buf(),
        seconds,
        seed,
        open: std::env::var("STEPLINE_FUZZ_OPEN").is_ok_and(|v| v == "1"),
        time_check: true,
        save_new: 0,
        skip: Vec::new(),
    }
}

#[test]
fn every_target_survives_its_regressions_corpus_and_a_bounded_run() {
    if std::env::var_os("STEPLINE_FUZZ_CHILD").is_some() {
        return;
    }
    let seconds: f64 = std::env::var("STEPLINE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let seed = std::env::var("STEPLINE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            0x5EED_0000 ^ now
        });
    let only: Option<Vec<String>> = std::env::var("STEPLINE_FUZZ_TARGET")
        .ok()
        .map(|s| s.split(',').map(str::to_string).collect());
    let root = fuzz_root();
    eprintln!(
        "fuzz: seed {seed}, {seconds}s per target, root {}",
        root.display()
    );
    let mut problems = Vec::new();
    let mut ran = 0;
    for target in stepline::fuzzing::all_targets() {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| n == target.name))
        {
            continue;
        }
        let report = supervise(&target, &options(&root, seconds, seed), &child_command);
        eprint!("{}", report.summary());
        assert!(
            report.replayed > 0 || only.is_some(),
            "{}: nothing replayed: fuzz/corpus/{} is empty",
            target.name,
            target.name
        );
        problems.extend(report.problems());
        ran += 1;
    }
    assert!(ran > 0, "no target matched STEPLINE_FUZZ_TARGET");
    assert!(
        problems.is_empty(),
        "fuzzing found:\n{}",
        problems.join("\n")
    );
}

/// A scratch fuzz root holding `files` (path under the root → bytes).
fn scratch_root(name: &str, files: &[(&str, &[u8])]) -> PathBuf {
    let root =
        std::env::temp_dir().join(format!("stepline-fuzz-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for (path, bytes) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    root
}

/// Runs the engine's `selftest` target (planted bugs) on `root`; the time check only when
/// `seconds` is 0.
fn selftest(root: &Path, seconds: f64) -> Report {
    let target = stepline::fuzzing::target("selftest").unwrap();
    let options = Options {
        time_check: seconds == 0.0,
        ..options(root, seconds, 7)
    };
    supervise(&target, &options, &child_command)
}

/// The engine finds a planted panic from a corpus one mutation away, saves the input under
/// `regressions/`, and a later run replays it and fails on it.
#[test]
fn a_planted_panic_is_found_saved_and_replayed() {
    if std::env::var_os("STEPLINE_FUZZ_CHILD").is_some() {
        return;
    }
    let root = scratch_root("panic", &[("corpus/selftest/a", b"BUF")]);
    let report = selftest(&root, 3.0);
    let found: Vec<_> = report
        .failures
        .iter()
        .filter(|f| f.kind == "panic")
        .collect();
    assert_eq!(found.len(), 1, "{}", report.summary());
    assert!(
        found[0].message.starts_with("planted bug @ "),
        "{}",
        found[0].message
    );
    assert!(!found[0].known_open);
    let saved = std::fs::read(&found[0].input).unwrap();
    assert!(saved.starts_with(b"BUG"), "{saved:?}");
    assert!(report.runs > 100, "{}", report.summary());

    // Replayed next time, from regressions/, as a failure naming the file.
    let again = selftest(&root, 0.0);
    assert!(
        again
            .failures
            .iter()
            .any(|f| f.input == found[0].input && f.kind == "panic"),
        "{}",
        again.summary()
    );
    assert!(!again.problems().is_empty());
    let _ = std::fs::remove_dir_all(&root);
}

/// A stack overflow kills the child; the parent saves the input and reports an abort. Marked
/// known open (`open/KNOWN` lists `abort`), it is saved under `open/` and is not a problem.
#[test]
fn a_stack_overflow_is_caught_by_the_parent() {
    if std::env::var_os("STEPLINE_FUZZ_CHILD").is_some() {
        return;
    }
    let root = scratch_root("abort", &[("corpus/selftest/a", b"DEEQ")]);
    let report = selftest(&root, 10.0);
    let abort = report
        .failures
        .iter()
        .find(|f| f.kind == "abort")
        .unwrap_or_else(|| panic!("no abort found: {}", report.summary()));
    assert!(abort.message.contains("signal"), "{}", abort.message);
    let saved = std::fs::read(&abort.input).unwrap_or_else(|e| panic!("{e}: {}", report.summary()));
    assert!(saved.starts_with(b"DEEP"), "{saved:?}");
    assert!(!report.problems().is_empty());
    let _ = std::fs::remove_dir_all(&root);

    let root = scratch_root(
        "abort-open",
        &[
            ("corpus/selftest/a", b"DEEQ"),
            ("regressions/selftest/open/KNOWN", b"# planted\nabort\n"),
        ],
    );
    let report = selftest(&root, 10.0);
    let abort = report.failures.iter().find(|f| f.kind == "abort").unwrap();
    assert!(abort.known_open, "{}", report.summary());
    assert!(abort.input.contains("/open/"), "{}", abort.input);
    assert!(report.problems().is_empty(), "{:?}", report.problems());
    let _ = std::fs::remove_dir_all(&root);
}

/// The size-scaled check flags a quadratic probe and passes the linear corpus input.
#[test]
fn a_quadratic_probe_is_flagged() {
    if std::env::var_os("STEPLINE_FUZZ_CHILD").is_some() {
        return;
    }
    let root = scratch_root("time", &[("corpus/selftest/a", &[b'x'; 64])]);
    // Timings on two cores shared with the other tests of this file: a run that recorded no
    // timing of the probe, or whose ×16 confirmation was disturbed (both seen in CI under
    // load), is tried again, at most three times.
    let mut report = selftest(&root, 0.0);
    for _ in 0..2 {
        if report
            .time_checks
            .iter()
            .any(|t| t.input.starts_with("probe quadratic") && t.flagged)
        {
            break;
        }
        eprintln!(
            "probe not timed or not flagged, trying again: {}",
            report.summary()
        );
        report = selftest(&root, 0.0);
    }
    let quad = report
        .time_checks
        .iter()
        .find(|t| t.input.starts_with("probe quadratic"))
        .unwrap_or_else(|| panic!("no probe timing: {}", report.summary()));
    assert!(quad.flagged, "{}", report.summary());
    assert!(quad.ratio > 32.0, "{}", report.summary());
    let linear = report
        .time_checks
        .iter()
        .find(|t| t.input.starts_with("corpus/"))
        .unwrap();
    assert!(!linear.flagged, "{}", report.summary());
    let _ = std::fs::remove_dir_all(&root);
}
