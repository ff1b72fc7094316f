//! The command line over the query API: `stepline runs`, `run`, `events`, `effects`,
//! `snapshots`, `continuation`, `abandon`, `delete` and `tail`. Each command makes blocking HTTP requests
//! (`client`), prints an aligned table for people (`table`) or, with `--json`, the API's JSON
//! unchanged, and exits with a code that says what happened ([`EXIT_CODES`]).

mod client;
mod show;
mod table;
mod tail;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use client::{Api, CliError, Endpoint};

/// The exit codes, as `stepline --help` and the README give them.
pub const EXIT_CODES: &str = "\
Exit codes of the API commands (runs, run, events, effects, snapshots, continuation, abandon,
delete, tail):
  0  ok
  1  usage error, or a request the API refused (400, 409, ...)
  2  not found (404: no such run or snapshot)
  3  unauthorised (401/403: missing or wrong --token / STEPLINE_TOKEN)
  4  cannot connect to the API (--url / STEPLINE_URL)
  5  server error (5xx, or an answer that is not the API's JSON)";

/// Where the API is; every API command takes these.
#[derive(Args, Debug, Clone)]
pub struct Connection {
    /// Base URL of the query API.
    #[arg(long, env = "STEPLINE_URL", default_value = "http://127.0.0.1:4320")]
    url: String,
    /// Bearer token of the API (`extensions.stepline_api.bearer_token`).
    #[arg(long, env = "STEPLINE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// CA certificates (PEM) to trust for an https:// URL (default: the Mozilla roots).
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Seconds to wait for an answer.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Print the API's JSON unchanged instead of a table.
    #[arg(long)]
    json: bool,
}

/// The commands that talk to a running stepline's query API.
#[derive(Subcommand, Debug)]
pub enum ApiCommand {
    /// List runs (oldest first), filtered like `GET /v1/runs`.
    Runs {
        /// Only runs with this status (running, completed, failed, abandoned).
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this agent (`gen_ai.agent.name`).
        #[arg(long)]
        agent_name: Option<String>,
        /// Only runs of this conversation (`gen_ai.conversation.id`).
        #[arg(long)]
        conversation_id: Option<String>,
        /// Only delegate runs started by this run.
        #[arg(long)]
        parent_run_id: Option<String>,
        /// Only runs of this trace (hex).
        #[arg(long)]
        trace_id: Option<String>,
        /// Page size (1 to 1000; the API's default is 100).
        #[arg(long)]
        limit: Option<u32>,
        /// Continue after this page (the `next_cursor` a previous page gave).
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
    /// Show one run (by run id or alias).
    Run {
        /// Run id or alias.
        run_id: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// A run's step events, chronological.
    Events {
        /// Run id or alias.
        run_id: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// A run's tool-effect ledger.
    Effects {
        /// Run id or alias.
        run_id: String,
        /// Only calls whose outcome is not known (requested, started, unknown_after_crash).
        #[arg(long)]
        unresolved: bool,
        #[command(flatten)]
        connection: Connection,
    },
    /// A run's snapshots.
    Snapshots {
        /// Run id or alias.
        run_id: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// The message history to continue a run from, in a provider's format.
    Continuation {
        /// Run id or alias.
        run_id: String,
        /// otel, pydantic-ai, openai-chat, openai-responses, anthropic, gemini or strands.
        #[arg(long, default_value = "otel")]
        format: String,
        /// Continue from this snapshot seq (default: the latest complete one).
        #[arg(long)]
        at: Option<u32>,
        /// Also consider interrupted snapshots for the latest one.
        #[arg(long)]
        include_interrupted: bool,
        /// Close unanswered tool calls with an "interrupted" result.
        #[arg(long)]
        repair: bool,
        /// Media parts inline (default) or as references.
        #[arg(long)]
        media: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
    /// Declare a running run dead now.
    Abandon {
        /// Run id or alias.
        run_id: String,
        /// Why (kept as the run's error).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
    /// Delete a run (and its delegate runs), or with --conversation every run of a
    /// conversation, with everything derived from them.
    Delete {
        /// Run id or alias (not with --conversation).
        #[arg(
            required_unless_present = "conversation",
            conflicts_with = "conversation"
        )]
        run_id: Option<String>,
        /// Delete every run of this conversation instead.
        #[arg(long)]
        conversation: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
    /// Follow new runs and new step events as they arrive (polls the API until interrupted).
    Tail {
        /// Also show the runs (and their events) that exist when tail starts.
        #[arg(long)]
        existing: bool,
        /// Only runs with this status.
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this agent.
        #[arg(long)]
        agent_name: Option<String>,
        /// Only runs of this conversation.
        #[arg(long)]
        conversation_id: Option<String>,
        /// Milliseconds between polls.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        #[command(flatten)]
        connection: Connection,
    },
}

impl ApiCommand {
    fn connection(&self) -> &Connection {
        match self {
            Self::Runs { connection, .. }
            | Self::Run { connection, .. }
            | Self::Events { connection, .. }
            | Self::Effects { connection, .. }
            | Self::Snapshots { connection, .. }
            | Self::Continuation { connection, .. }
            | Self::Abandon { connection, .. }
            | Self::Delete { connection, .. }
            | Self::Tail { connection, .. } => connection,
        }
    }
}

/// Runs `command`, printing its answer on stdout and any error on stderr.
pub fn run(command: ApiCommand) -> ExitCode {
    let connection = command.connection().clone();
    let endpoint = Endpoint {
        url: connection.url.clone(),
        token: connection.token.clone(),
        ca_file: connection.ca_file.clone(),
        timeout: Duration::from_secs(connection.timeout.max(1)),
    };
    let outcome = Api::new(&endpoint).and_then(|api| execute(&api, command, connection.json));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stepline: {e}");
            e.exit_code()
        }
    }
}

/// Path of a run's resource: `/v1/runs/<id><rest>`, the id percent-encoded.
fn run_path(run_id: &str, rest: &str) -> String {
    format!("/v1/runs/{}{rest}", encode_segment(run_id))
}

/// Percent-encodes a path segment (everything but unreserved characters).
fn encode_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Pairs for the query string: the ones with a value.
fn query(pairs: &[(&'static str, Option<String>)]) -> Vec<(&'static str, String)> {
    pairs
        .iter()
        .filter_map(|(k, v)| v.clone().map(|v| (*k, v)))
        .collect()
}

/// Writes `text` to stdout; a closed pipe (`| head`) is not an error.
fn print(text: &[u8]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::Usage(format!("cannot write the output: {e}"))),
    }
}

/// Prints the API's body unchanged (and a newline when it lacks one).
fn print_raw(body: &[u8]) -> Result<(), CliError> {
    print(body)?;
    if !body.ends_with(b"\n") {
        print(b"\n")?;
    }
    Ok(())
}

fn execute(api: &Api, command: ApiCommand, json: bool) -> Result<(), CliError> {
    match command {
        ApiCommand::Runs {
            status,
            agent_name,
            conversation_id,
            parent_run_id,
            trace_id,
            limit,
            cursor,
            ..
        } => {
            let q = query(&[
                ("status", status),
                ("agent_name", agent_name),
                ("conversation_id", conversation_id),
                ("parent_run_id", parent_run_id),
                ("trace_id", trace_id),
                ("limit", limit.map(|l| l.to_string())),
                ("cursor", cursor),
            ]);
            let answer = api.get("/v1/runs", &q)?;
            if json {
                return print_raw(&answer.body);
            }
            let (text, next) = show::runs(&answer.json()?)?;
            print(text.as_bytes())?;
            if let Some(next) = next {
                eprintln!("more runs: add --cursor {next}");
            }
            Ok(())
        }
        ApiCommand::Run { run_id, .. } => {
            let answer = api.get(&run_path(&run_id, ""), &[])?;
            if json {
                return print_raw(&answer.body);
            }
            print(show::run(&answer.json()?)?.as_bytes())
        }
        ApiCommand::Events { run_id, .. } => {
            let answer = api.get(&run_path(&run_id, "/events"), &[])?;
            if json {
                return print_raw(&answer.body);
            }
            print(show::events(&answer.json()?)?.as_bytes())
        }
        ApiCommand::Effects {
            run_id, unresolved, ..
        } => {
            let q = query(&[("unresolved", unresolved.then(|| "true".to_string()))]);
            let answer = api.get(&run_path(&run_id, "/effects"), &q)?;
            if json {
                return print_raw(&answer.body);
            }
            print(show::effects(&answer.json()?)?.as_bytes())
        }
        ApiCommand::Snapshots { run_id, .. } => {
            let answer = api.get(&run_path(&run_id, "/snapshots"), &[])?;
            if json {
                return print_raw(&answer.body);
            }
            print(show::snapshots(&answer.json()?)?.as_bytes())
        }
        ApiCommand::Continuation {
            run_id,
            format,
            at,
            include_interrupted,
            repair,
            media,
            ..
        } => {
            let q = query(&[
                ("format", Some(format)),
                ("at", at.map(|a| a.to_string())),
                (
                    "include_interrupted",
                    include_interrupted.then(|| "true".to_string()),
                ),
                ("repair", repair.then(|| "true".to_string())),
                ("media", media),
            ]);
            let answer = api.get(&run_path(&run_id, "/continuation"), &q)?;
            if json {
                return print_raw(&answer.body);
            }
            print(show::continuation(&answer.json()?)?.as_bytes())
        }
        ApiCommand::Abandon { run_id, reason, .. } => {
            let q = query(&[("reason", reason)]);
            let answer = api.post(&run_path(&run_id, "/abandon"), &q)?;
            if json {
                return print_raw(&answer.body);
            }
            print(show::run(&answer.json()?)?.as_bytes())
        }
        ApiCommand::Delete {
            run_id,
            conversation,
            ..
        } => {
            let (path, what) = match (conversation, run_id) {
                (Some(c), _) => (
                    format!("/v1/conversations/{}", encode_segment(&c)),
                    format!("conversation {c}"),
                ),
                (None, Some(r)) => (run_path(&r, ""), format!("run {r}")),
                (None, None) => {
                    return Err(CliError::Usage("give a run id or --conversation".into()))
                }
            };
            api.delete(&path)?;
            if json {
                return print_raw(b"{}");
            }
            print(format!("deleted {what}\n").as_bytes())
        }
        ApiCommand::Tail {
            existing,
            status,
            agent_name,
            conversation_id,
            interval_ms,
            ..
        } => {
            let filters = query(&[
                ("status", status),
                ("agent_name", agent_name),
                ("conversation_id", conversation_id),
            ]);
            tail::follow(
                api,
                &filters,
                existing,
                Duration::from_millis(interval_ms.max(50)),
                json,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_percent_encoded_as_one_segment() {
        assert_eq!(run_path("a/b c", "/events"), "/v1/runs/a%2Fb%20c/events");
        assert_eq!(run_path("ab-01_x.y~", ""), "/v1/runs/ab-01_x.y~");
        assert_eq!(run_path("é", ""), "/v1/runs/%C3%A9");
    }
}
