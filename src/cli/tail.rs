//! `stepline tail`: follows new runs and new step events by polling the API. Each poll lists the
//! runs (every page); a run not seen before is printed with all its events, a run whose
//! `event_count` grew gets the events past the ones already printed.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};

use super::client::{Api, CliError};
use super::show::{event_row, text};
use super::{print, run_path};

/// Page size used to list the runs.
const PAGE: &str = "1000";

/// Polls until an error (or the process is stopped), printing each new run and event as a line:
/// a tab-separated line for people, `{"run": …}` / `{"run_id": …, "event": …}` with `json`.
pub fn follow(
    api: &Api,
    filters: &[(&'static str, String)],
    existing: bool,
    interval: Duration,
    json: bool,
) -> Result<(), CliError> {
    // Events printed per run.
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut first = true;
    loop {
        for run in list_all(api, filters)? {
            let id = text(&run, "run_id");
            let count = run.get("event_count").and_then(Value::as_u64).unwrap_or(0);
            let printed = match seen.get(&id) {
                Some(&printed) => printed,
                None if first && !existing => {
                    seen.insert(id, count);
                    continue;
                }
                None => {
                    print_run(&run, json)?;
                    0
                }
            };
            if count > printed || !seen.contains_key(&id) {
                let printed = print_events(api, &id, printed, json)?;
                seen.insert(id, printed);
            }
        }
        first = false;
        std::thread::sleep(interval);
    }
}

/// Every run the filters select, page by page.
fn list_all(api: &Api, filters: &[(&'static str, String)]) -> Result<Vec<Value>, CliError> {
    let mut runs = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut query: Vec<(&str, String)> = filters.to_vec();
        query.push(("limit", PAGE.to_string()));
        if let Some(c) = &cursor {
            query.push(("cursor", c.clone()));
        }
        let page = api.get("/v1/runs", &query)?.json()?;
        let Some(list) = page.get("runs").and_then(Value::as_array) else {
            return Err(CliError::Server(
                "the API's answer has no \"runs\" list".into(),
            ));
        };
        runs.extend(list.iter().cloned());
        match page.get("next_cursor").and_then(Value::as_str) {
            Some(next) if cursor.as_deref() != Some(next) => cursor = Some(next.to_string()),
            _ => return Ok(runs),
        }
    }
}

fn print_run(run: &Value, json: bool) -> Result<(), CliError> {
    let line = if json {
        json!({ "run": run }).to_string()
    } else {
        [
            "run".to_string(),
            text(run, "started_at"),
            text(run, "run_id"),
            text(run, "agent_name"),
            text(run, "status"),
        ]
        .join("\t")
    };
    print(format!("{line}\n").as_bytes())
}

/// Prints the run's events from the `from`-th on; returns how many events the run has.
fn print_events(api: &Api, run_id: &str, from: u64, json: bool) -> Result<u64, CliError> {
    let answer = match api.get(&run_path(run_id, "/events"), &[]) {
        Ok(answer) => answer.json()?,
        // Gone between the listing and now (e.g. pruned): nothing to print.
        Err(CliError::NotFound(_)) => return Ok(from),
        Err(e) => return Err(e),
    };
    let events = answer
        .get("events")
        .and_then(Value::as_array)
        .ok_or_else(|| CliError::Server("the API's answer has no \"events\" list".into()))?;
    for event in events
        .iter()
        .skip(usize::try_from(from).unwrap_or(usize::MAX))
    {
        let line = if json {
            json!({ "run_id": run_id, "event": event }).to_string()
        } else {
            let mut cells = vec!["event".to_string(), run_id.to_string()];
            cells.extend(event_row(event));
            cells.join("\t").trim_end().to_string()
        };
        print(format!("{line}\n").as_bytes())?;
    }
    Ok((events.len() as u64).max(from))
}
