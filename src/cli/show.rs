//! How the API's answers are shown to people: tables of runs, events, effects and snapshots, a
//! run as key/value lines, and a continuation as its summary and its messages. Fields missing
//! from an answer show empty; an answer without its list is a server error, never a panic.

use serde_json::Value;

use super::client::CliError;
use super::table::{fields, Table};

/// A field as text: strings as they are, numbers and booleans written out, null or missing empty.
pub fn text(value: &Value, key: &str) -> String {
    match value.get(key) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// The array under `key`, or a server error naming what is missing.
fn list<'a>(answer: &'a Value, key: &str) -> Result<&'a [Value], CliError> {
    answer
        .get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .ok_or_else(|| CliError::Server(format!("the API's answer has no {key:?} list")))
}

/// A run's row of the runs table.
pub fn run_row(run: &Value) -> Vec<String> {
    vec![
        text(run, "run_id"),
        text(run, "agent_name"),
        text(run, "status"),
        text(run, "started_at"),
        text(run, "model_request_count"),
        text(run, "tool_call_count"),
        text(run, "event_count"),
        text(run, "conversation_id"),
    ]
}

/// The columns of the runs table.
pub const RUN_COLUMNS: &[&str] = &[
    "RUN_ID",
    "AGENT",
    "STATUS",
    "STARTED_AT",
    "MODEL_REQUESTS",
    "TOOL_CALLS",
    "EVENTS",
    "CONVERSATION",
];

/// `GET /v1/runs` as a table, and the next page's cursor.
pub fn runs(answer: &Value) -> Result<(String, Option<String>), CliError> {
    let mut table = Table::new(RUN_COLUMNS);
    for run in list(answer, "runs")? {
        table.row(run_row(run));
    }
    let next = answer
        .get("next_cursor")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok((table.render(), next))
}

/// One run as key/value lines.
pub fn run(run: &Value) -> Result<String, CliError> {
    if !run.is_object() {
        return Err(CliError::Server("the API's answer is not a run".into()));
    }
    let aliases = run
        .get("aliases")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let mut pairs = vec![
        ("run_id", text(run, "run_id")),
        ("status", text(run, "status")),
        ("agent_name", text(run, "agent_name")),
        ("conversation_id", text(run, "conversation_id")),
        ("parent_run_id", text(run, "parent_run_id")),
        ("trace_id", text(run, "trace_id")),
        ("aliases", aliases),
        ("started_at", text(run, "started_at")),
        ("ended_at", text(run, "ended_at")),
        ("error", text(run, "error")),
        ("model_requests", text(run, "model_request_count")),
        ("tool_calls", text(run, "tool_call_count")),
        ("snapshots", text(run, "snapshot_count")),
        ("events", text(run, "event_count")),
        ("input_tokens", text(run, "input_tokens")),
        ("output_tokens", text(run, "output_tokens")),
    ];
    // Who started it, its attributes and its rollups, when the server has them.
    for key in [
        "tool_time_ms",
        "model_time_ms",
        "tool_calls_by_status",
        "trigger",
        "attributes",
    ] {
        let shown = text(run, key);
        if !shown.is_empty() && shown != "{}" {
            pairs.push((key, shown));
        }
    }
    let unavailable = text(run, "continuation_unavailable");
    if !unavailable.is_empty() {
        pairs.push(("continuation_unavailable", unavailable));
    }
    if let Some(warnings) = run.get("warnings").and_then(Value::as_array) {
        for w in warnings.iter().filter_map(Value::as_str) {
            pairs.push(("warning", w.to_string()));
        }
    }
    Ok(fields(&pairs))
}

/// The columns of the events table.
pub const EVENT_COLUMNS: &[&str] = &["SEQ", "TIMESTAMP", "KIND", "TOOL", "TOOL_CALL_ID", "ERROR"];

/// An event's row.
pub fn event_row(event: &Value) -> Vec<String> {
    vec![
        text(event, "seq"),
        text(event, "timestamp"),
        text(event, "kind"),
        text(event, "tool_name"),
        text(event, "tool_call_id"),
        text(event, "error"),
    ]
}

/// `GET /v1/runs/{id}/events` as a table.
pub fn events(answer: &Value) -> Result<String, CliError> {
    let mut table = Table::new(EVENT_COLUMNS);
    for event in list(answer, "events")? {
        table.row(event_row(event));
    }
    Ok(table.render())
}

/// `GET /v1/runs/{id}/effects` as a table.
pub fn effects(answer: &Value) -> Result<String, CliError> {
    let mut table = Table::new(&[
        "TOOL_CALL_ID",
        "TOOL",
        "STATUS",
        "REQUESTED_AT",
        "ENDED_AT",
        "ARGUMENTS",
        "ERROR",
    ]);
    for effect in list(answer, "effects")? {
        let arguments = match effect.get("arguments") {
            None | Some(Value::Null) => String::new(),
            Some(v) => v.to_string(),
        };
        table.row(vec![
            text(effect, "tool_call_id"),
            text(effect, "tool_name"),
            text(effect, "status"),
            text(effect, "requested_at"),
            text(effect, "ended_at"),
            arguments,
            text(effect, "error"),
        ]);
    }
    Ok(table.render())
}

/// `GET /v1/runs/{id}/snapshots` as a table.
pub fn snapshots(answer: &Value) -> Result<String, CliError> {
    let mut table = Table::new(&[
        "SEQ",
        "STEP",
        "STATE",
        "SOURCE",
        "MESSAGES",
        "TIMESTAMP",
        "REASON",
    ]);
    for s in list(answer, "snapshots")? {
        table.row(vec![
            text(s, "seq"),
            text(s, "step_index"),
            text(s, "state"),
            text(s, "source"),
            text(s, "message_count"),
            text(s, "timestamp"),
            text(s, "reason"),
        ]);
    }
    Ok(table.render())
}

/// Fields of the continuation's envelope (the rest are the format's own).
const ENVELOPE: &[&str] = &[
    "run_id",
    "format",
    "snapshot",
    "unresolved_effects",
    "warnings",
    "repaired",
];

/// A continuation: its summary as key/value lines, then the format's fields as indented JSON.
pub fn continuation(answer: &Value) -> Result<String, CliError> {
    let Some(map) = answer.as_object() else {
        return Err(CliError::Server(
            "the API's answer is not a continuation".into(),
        ));
    };
    let empty = Value::Null;
    let snapshot = answer.get("snapshot").unwrap_or(&empty);
    let mut pairs = vec![
        ("run_id", text(answer, "run_id")),
        ("format", text(answer, "format")),
        (
            "snapshot",
            format!(
                "seq {} (step {}, {}, {}), {} messages, {}",
                text(snapshot, "seq"),
                text(snapshot, "step_index"),
                text(snapshot, "state"),
                text(snapshot, "source"),
                text(snapshot, "message_count"),
                text(snapshot, "timestamp"),
            ),
        ),
    ];
    let strings = |key: &str| -> Vec<Value> {
        answer
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    for effect in strings("unresolved_effects") {
        pairs.push((
            "unresolved",
            format!(
                "{} {} ({})",
                text(&effect, "tool_name"),
                text(&effect, "tool_call_id"),
                text(&effect, "status")
            ),
        ));
    }
    for call in strings("repaired") {
        pairs.push((
            "repaired",
            format!(
                "{} {}",
                text(&call, "tool_name"),
                text(&call, "tool_call_id")
            ),
        ));
    }
    for warning in strings("warnings") {
        pairs.push(("warning", warning.as_str().unwrap_or_default().to_string()));
    }
    let mut out = fields(&pairs);
    let own: serde_json::Map<String, Value> = map
        .iter()
        .filter(|(k, _)| !ENVELOPE.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.push('\n');
    out.push_str(&serde_json::to_string_pretty(&own).unwrap_or_default());
    out.push('\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_without_their_list_are_server_errors() {
        assert!(matches!(runs(&json!({})), Err(CliError::Server(_))));
        assert!(matches!(events(&json!([1])), Err(CliError::Server(_))));
        assert!(matches!(run(&json!("x")), Err(CliError::Server(_))));
        assert!(matches!(continuation(&json!(3)), Err(CliError::Server(_))));
    }

    #[test]
    fn trigger_attributes_and_rollups_are_shown_when_present() {
        let shown = run(&json!({
            "run_id": "r",
            "trigger": {"kind": "schedule", "meta": {"job": "nightly"}},
            "attributes": {"tenant": "acme"},
            "tool_time_ms": 50,
        }))
        .unwrap();
        assert!(shown.contains(r#"trigger:"#), "{shown}");
        assert!(
            shown.contains(r#"{"kind":"schedule","meta":{"job":"nightly"}}"#),
            "{shown}"
        );
        assert!(shown.contains(r#"{"tenant":"acme"}"#), "{shown}");
        assert!(shown.contains("tool_time_ms:"), "{shown}");
        let bare = run(&json!({"run_id": "r", "attributes": {}, "trigger": null})).unwrap();
        assert!(
            !bare.contains("trigger") && !bare.contains("attributes"),
            "{bare}"
        );
    }

    #[test]
    fn missing_and_odd_fields_show_as_text() {
        let e = json!({"seq": 3, "kind": "run_started", "error": null, "tool_name": ["x"]});
        assert_eq!(
            event_row(&e),
            vec!["3", "", "run_started", "[\"x\"]", "", ""]
        );
    }
}
