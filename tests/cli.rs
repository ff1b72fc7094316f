//! The command line (`stepline runs`, `run`, `events`, `effects`, `snapshots`, `continuation`,
//! `abandon`, `tail`) against the real binary: a stepline with a token on its API holds a real
//! Pydantic AI scenario and a crashed agent's run; each command runs as a subprocess and its
//! `--json` output must be the API's answer, its table must show the same rows, and its exit code
//! must say what happened (0 ok, 1 usage, 2 not found, 3 unauthorised, 4 cannot connect).

mod support;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use support::token_api::TokenStepline;
use support::{encode, str_field, truncate, RunningScript};

const TOKEN: &str = "cli-t0ken";

/// `stepline <args>` with no URL or token from the environment.
fn stepline_cli(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stepline"));
    command
        .args(args)
        .env_remove("STEPLINE_URL")
        .env_remove("STEPLINE_TOKEN")
        .stdin(Stdio::null());
    command
}

/// What a command printed and how it exited.
struct Ran {
    shown: String,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn ok(&self) -> &str {
        assert_eq!(
            self.code,
            Some(0),
            "`{}` failed\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.shown,
            truncate(&self.stdout, 3000),
            self.stderr
        );
        &self.stdout
    }

    fn json(&self) -> Value {
        serde_json::from_str(self.ok()).unwrap_or_else(|e| {
            panic!(
                "`{}` --json printed no JSON ({e}):\n{}",
                self.shown,
                truncate(&self.stdout, 3000)
            )
        })
    }
}

fn run(mut command: Command) -> Ran {
    let shown = format!("{command:?}");
    let Output {
        status,
        stdout,
        stderr,
    } = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    Ran {
        shown,
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// `stepline <args> --url <api> --token <token>`.
fn cli(stepline: &TokenStepline, args: &[&str]) -> Ran {
    let mut command = stepline_cli(args);
    command.args(["--url", &stepline.base(), "--token", TOKEN]);
    run(command)
}

/// Asserts the table's header has `columns` and that each column starts at the same offset in
/// the header and in every row (aligned columns); returns the rows split into cells.
fn table(text: &str, columns: &[&str]) -> Vec<Vec<String>> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let names: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(names, columns, "table header:\n{text}");
    // Each column's offset, searched after the previous one (TOOL follows TOOL_CALL_ID).
    let mut offsets: Vec<usize> = Vec::new();
    for c in columns {
        let from = offsets.last().map_or(0, |o| o + 1);
        let at = header[from..]
            .find(&format!(" {c}"))
            .map(|i| from + i + 1)
            .or_else(|| header.starts_with(c).then_some(0));
        offsets.push(at.unwrap_or_else(|| panic!("no column {c} in {header:?}")));
    }
    let mut rows = Vec::new();
    for line in lines {
        let chars: Vec<char> = line.chars().collect();
        let mut cells = Vec::new();
        for (i, &start) in offsets.iter().enumerate() {
            // A cell starts at its column's offset, after a separator (or the line's start).
            let end = offsets
                .get(i + 1)
                .copied()
                .unwrap_or(chars.len())
                .min(chars.len());
            if start > 0 && start <= chars.len() {
                assert!(
                    chars[start - 1] == ' ',
                    "column {} is not aligned in {line:?}\n{text}",
                    columns[i]
                );
            }
            let cell: String = chars.get(start..end).unwrap_or_default().iter().collect();
            cells.push(cell.trim().to_string());
        }
        rows.push(cells);
    }
    rows
}

/// A tail running in the background, its stdout lines sent to a channel.
struct Tail {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Tail {
    fn start(stepline: &TokenStepline) -> Self {
        let mut command = stepline_cli(&["tail", "--interval-ms", "200"]);
        command
            .env("STEPLINE_URL", stepline.base())
            .env("STEPLINE_TOKEN", TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = command.spawn().expect("start stepline tail");
        let stdout = child.stdout.take().expect("tail's stdout is piped");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line for which `wanted` holds.
    fn wait_for(&mut self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if wanted(&line) => return line,
                Ok(line) => self.seen.push(line),
                Err(_) => panic!(
                    "tail printed no line with {what} within 30 s; it printed:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_answer_like_the_api() {
    let stepline = TokenStepline::start(TOKEN).await;
    // Started before any run exists: what it prints arrived while it ran.
    let mut tail = Tail::start(&stepline);
    let (orchestrator, delegate) = stepline.load_scenario("conv-cli").await;

    let line = tail.wait_for("the orchestrator's run", |l| {
        l.starts_with("run\t") && l.contains(&orchestrator)
    });
    assert!(line.contains("orchestrator"), "{line}");
    tail.wait_for("the orchestrator's run_completed event", |l| {
        l.starts_with(&format!("event\t{orchestrator}\t")) && l.contains("run_completed")
    });
    tail.wait_for("the delegate's run", |l| {
        l.starts_with("run\t") && l.contains(&delegate)
    });

    // runs: --json is the API's answer; the table has the same runs in the same order.
    let (_, api_runs) = stepline.get("/v1/runs").await;
    assert_eq!(cli(&stepline, &["runs", "--json"]).json(), api_runs);
    let shown = cli(&stepline, &["runs"]);
    let rows = table(
        shown.ok(),
        &[
            "RUN_ID",
            "AGENT",
            "STATUS",
            "STARTED_AT",
            "MODEL_REQUESTS",
            "TOOL_CALLS",
            "EVENTS",
            "CONVERSATION",
        ],
    );
    let listed = api_runs["runs"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), listed.len(), "{}", shown.stdout);
    for (row, run) in rows.iter().zip(&listed) {
        assert_eq!(row[0], str_field(run, "run_id"));
        assert_eq!(row[2], str_field(run, "status"));
        assert_eq!(row[4], run["model_request_count"].to_string());
        assert_eq!(row[6], run["event_count"].to_string());
    }
    // Filters go to the API.
    let filtered = cli(
        &stepline,
        &[
            "runs",
            "--conversation-id",
            "conv-cli",
            "--status",
            "completed",
            "--limit",
            "1",
            "--json",
        ],
    )
    .json();
    let (_, api_filtered) = stepline
        .get("/v1/runs?conversation_id=conv-cli&status=completed&limit=1")
        .await;
    assert_eq!(filtered, api_filtered);
    assert_eq!(filtered["runs"][0]["run_id"], orchestrator.as_str());

    // run: by id and by alias.
    let (_, api_run) = stepline.get(&format!("/v1/runs/{orchestrator}")).await;
    assert_eq!(
        cli(&stepline, &["run", &orchestrator, "--json"]).json(),
        api_run
    );
    let shown = cli(&stepline, &["run", &orchestrator]);
    let text = shown.ok();
    for (key, value) in [
        ("run_id", orchestrator.as_str()),
        ("status", "completed"),
        ("agent_name", "orchestrator"),
        ("conversation_id", "conv-cli"),
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{key}:")) && l.trim_end().ends_with(value)),
            "no {key}: {value} in\n{text}"
        );
    }
    let (_, delegate_run) = stepline.get(&format!("/v1/runs/{delegate}")).await;
    assert_eq!(delegate_run["parent_run_id"], orchestrator.as_str());

    // events.
    let path = format!("/v1/runs/{orchestrator}/events");
    let (_, api_events) = stepline.get(&path).await;
    assert_eq!(
        cli(&stepline, &["events", &orchestrator, "--json"]).json(),
        api_events
    );
    let shown = cli(&stepline, &["events", &orchestrator]);
    let rows = table(
        shown.ok(),
        &["SEQ", "TIMESTAMP", "KIND", "TOOL", "TOOL_CALL_ID", "ERROR"],
    );
    let events = api_events["events"].as_array().cloned().unwrap_or_default();
    assert!(events.len() >= 10, "{api_events}");
    assert_eq!(rows.len(), events.len());
    for (row, event) in rows.iter().zip(&events) {
        assert_eq!(row[0], event["seq"].to_string());
        assert_eq!(row[2], str_field(event, "kind"));
        assert_eq!(row[3], event["tool_name"].as_str().unwrap_or_default());
    }

    // effects, all and unresolved.
    let (_, api_effects) = stepline
        .get(&format!("/v1/runs/{orchestrator}/effects"))
        .await;
    assert_eq!(
        cli(&stepline, &["effects", &orchestrator, "--json"]).json(),
        api_effects
    );
    let shown = cli(&stepline, &["effects", &orchestrator]);
    let rows = table(
        shown.ok(),
        &[
            "TOOL_CALL_ID",
            "TOOL",
            "STATUS",
            "REQUESTED_AT",
            "ENDED_AT",
            "ARGUMENTS",
            "ERROR",
        ],
    );
    let mut statuses: Vec<(String, String)> =
        rows.iter().map(|r| (r[0].clone(), r[2].clone())).collect();
    statuses.sort();
    assert_eq!(
        statuses,
        [
            ("call_b1", "failed"),
            ("call_b2", "completed"),
            ("call_r1", "completed"),
            ("call_w1", "completed"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string())),
        "{}",
        shown.stdout
    );

    // snapshots.
    let (_, api_snapshots) = stepline
        .get(&format!("/v1/runs/{orchestrator}/snapshots"))
        .await;
    assert_eq!(
        cli(&stepline, &["snapshots", &orchestrator, "--json"]).json(),
        api_snapshots
    );

    // continuation: the API's answer for the format and snapshot asked.
    for (format, at) in [
        ("pydantic-ai", None),
        ("openai-chat", Some("1")),
        ("otel", None),
    ] {
        let mut args = vec![
            "continuation",
            orchestrator.as_str(),
            "--format",
            format,
            "--json",
        ];
        let mut path = format!("/v1/runs/{orchestrator}/continuation?format={format}");
        if let Some(at) = at {
            args.extend(["--at", at]);
            path.push_str(&format!("&at={at}"));
        }
        let (status, api_answer) = stepline.get(&path).await;
        assert_eq!(status, 200, "{api_answer}");
        assert_eq!(cli(&stepline, &args).json(), api_answer, "{format}");
    }
    let shown = cli(
        &stepline,
        &["continuation", &orchestrator, "--format", "pydantic-ai"],
    );
    let text = shown.ok();
    assert!(
        text.lines()
            .any(|l| l.starts_with("format:") && l.ends_with("pydantic-ai")),
        "{text}"
    );
    let (_, api_answer) = stepline
        .get(&format!(
            "/v1/runs/{orchestrator}/continuation?format=pydantic-ai"
        ))
        .await;
    let body_start = text.find("\n{").map_or(text.len(), |i| i + 1);
    let shown_fields: Value = serde_json::from_str(&text[body_start..])
        .unwrap_or_else(|e| panic!("the continuation's messages are not JSON ({e}):\n{text}"));
    assert_eq!(shown_fields["messages"], api_answer["messages"]);

    // A crashed agent: its run is running with an unresolved call, and abandon ends it.
    let endpoint = format!("http://{}", stepline.otlp_http);
    let mut agent = RunningScript::spawn(
        "crash_agent.py",
        &[
            "--transport",
            "http",
            "--endpoint",
            &endpoint,
            "--conversation-id",
            "conv-cli-crash",
        ],
    )
    .await;
    agent
        .wait_for_line("TOOL_STARTED", Duration::from_secs(120))
        .await;
    let crashed = tail.wait_for("the crashed agent's run", |l| {
        l.starts_with("run\t") && !l.contains(&orchestrator) && !l.contains(&delegate)
    });
    let crashed = crashed.split('\t').nth(2).unwrap_or_default().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let effects = cli(&stepline, &["effects", &crashed, "--unresolved", "--json"]).json();
        let ids: Vec<&str> = effects["effects"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["tool_call_id"].as_str())
            .collect();
        if ids == ["call_slow1"] {
            let (_, api) = stepline
                .get(&format!("/v1/runs/{crashed}/effects?unresolved=true"))
                .await;
            assert_eq!(effects, api);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the crashed run's unresolved calls: {effects}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    agent.kill().await;
    let abandoned = cli(
        &stepline,
        &["abandon", &crashed, "--reason", "worker lost", "--json"],
    )
    .json();
    assert_eq!(abandoned["status"], "abandoned", "{abandoned}");
    assert!(
        abandoned["error"]
            .as_str()
            .is_some_and(|e| e.contains("worker lost")),
        "{abandoned}"
    );
    let (_, api_run) = stepline
        .get(&format!("/v1/runs/{}", encode(&crashed)))
        .await;
    assert_eq!(api_run["status"], "abandoned");
    tail.wait_for("the crashed run's run_abandoned event", |l| {
        l.starts_with(&format!("event\t{crashed}\t")) && l.contains("run_abandoned")
    });
    // Abandoning it again is refused (409): a request the API refused exits 1.
    let again = cli(&stepline, &["abandon", &crashed]);
    assert_eq!(again.code, Some(1), "{}", again.stderr);
    assert!(
        again.stderr.contains("already abandoned"),
        "{}",
        again.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_say_what_happened() {
    let stepline = TokenStepline::start(TOKEN).await;

    // 0: an empty store lists no runs; URL and token from the environment.
    let mut command = stepline_cli(&["runs", "--json"]);
    command
        .env("STEPLINE_URL", stepline.base())
        .env("STEPLINE_TOKEN", TOKEN);
    let listed = run(command).json();
    assert_eq!(listed["runs"], Value::Array(Vec::new()));

    // 2: not found.
    let missing = cli(&stepline, &["run", "no-such-run"]);
    assert_eq!(missing.code, Some(2), "{}", missing.stderr);
    assert!(missing.stderr.contains("not found"), "{}", missing.stderr);
    assert!(missing.stdout.is_empty());
    let missing = cli(&stepline, &["continuation", "no/such run", "--json"]);
    assert_eq!(missing.code, Some(2), "{}", missing.stderr);

    // 3: no token, a wrong one.
    let anonymous = run(stepline_cli(&["runs", "--url", &stepline.base()]));
    assert_eq!(anonymous.code, Some(3), "{}", anonymous.stderr);
    let wrong = run(stepline_cli(&[
        "events",
        "x",
        "--url",
        &stepline.base(),
        "--token",
        "not-it",
    ]));
    assert_eq!(wrong.code, Some(3), "{}", wrong.stderr);
    assert!(wrong.stderr.contains("401"), "{}", wrong.stderr);

    // 4: nothing listens.
    let closed = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let nobody = run(stepline_cli(&[
        "runs",
        "--url",
        &format!("http://{closed}"),
    ]));
    assert_eq!(nobody.code, Some(4), "{}", nobody.stderr);
    assert!(
        nobody.stderr.contains("cannot connect"),
        "{}",
        nobody.stderr
    );

    // 1: what the API refuses (400), and usage errors of the command line itself.
    let refused = cli(&stepline, &["runs", "--status", "sleeping"]);
    assert_eq!(refused.code, Some(1), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("status must be one of"),
        "{}",
        refused.stderr
    );
    for args in [&["runs", "--bogus"][..], &["frobnicate"][..], &["run"][..]] {
        let usage = run(stepline_cli(args));
        assert_eq!(usage.code, Some(1), "{args:?}: {}", usage.stderr);
    }
    let bad_url = run(stepline_cli(&["runs", "--url", "ftp://x"]));
    assert_eq!(bad_url.code, Some(1), "{}", bad_url.stderr);

    // --help documents the exit codes and exits 0.
    let help = run(stepline_cli(&["--help"]));
    assert_eq!(help.code, Some(0));
    for line in [
        "2  not found",
        "3  unauthorised",
        "4  cannot connect",
        "5  server error",
    ] {
        assert!(
            help.stdout.contains(line),
            "--help lacks {line:?}:\n{}",
            help.stdout
        );
    }
}
