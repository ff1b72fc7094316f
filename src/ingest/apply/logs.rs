//! Log records (legacy GenAI events): stored by span, merged into their model request's fact
//! (whichever arrives first), and pruned when their span never arrives.

use std::collections::{HashMap, HashSet};

use crate::interpreter::{with_log_content, FactKind, Interpreted, LogEvent, SharedMessages};
use crate::store::keys::{self, cf};
use crate::store::{Store, StoreError, WriteBatch};

use super::lineage::Links;
use super::work_set::{load_full, Runs};

/// The log records of a write group, by `(trace id, span id)`.
pub(super) type GroupLogs = HashMap<(String, String), Vec<LogEvent>>;

/// Stores log records of a write group, and returns them by span for the group's spans.
pub(super) fn put_logs<'e>(
    batch: &mut WriteBatch<'_>,
    events: impl IntoIterator<Item = &'e LogEvent>,
) -> Result<GroupLogs, StoreError> {
    let mut logs = GroupLogs::new();
    for e in events {
        let mut key = keys::span_key(&e.trace_id, &e.span_id);
        key.push(0);
        key.extend_from_slice(&e.order_key());
        batch.put_span_log(&key, e)?;
        logs.entry((e.trace_id.clone(), e.span_id.clone()))
            .or_default()
            .push(e.clone());
    }
    Ok(logs)
}

/// The facts of spans that arrived before `events` (stored, or earlier in this group), rebuilt
/// with the content of their log records, each with its run id. Spans not arrived yet are
/// passed by: their records wait for them.
pub(super) fn rebuilt_by_logs(
    store: &Store,
    runs: &mut Runs,
    links: Links<'_>,
    logs: &GroupLogs,
    events: &[LogEvent],
) -> Result<Vec<(String, Interpreted)>, StoreError> {
    let mut done: HashSet<(String, String)> = HashSet::new();
    let mut rebuilt = Vec::new();
    for e in events {
        let key = (e.trace_id.clone(), e.span_id.clone());
        if !done.insert(key.clone()) {
            continue;
        }
        let run_id = match links.span_runs.get(&key) {
            Some(r) => r.clone(),
            None => match store.span_run(&key.0, &key.1)? {
                Some(r) => links.groups.resolve(store, &r)?,
                None => continue, // the span has not arrived yet
            },
        };
        let in_run = |e: StoreError| e.in_run(&run_id, Some(&key.1));
        let work = load_full(store, runs, &run_id).map_err(in_run)?;
        let Some(fact) = work.all.as_ref().and_then(|a| a.get(&key.1)).cloned() else {
            continue;
        };
        let i = Interpreted {
            run_span_id: String::new(),
            fact,
            messages: Vec::new(),
            shared: SharedMessages::default(),
        };
        let i = with_logs(store, logs, &i).map_err(in_run)?.unwrap_or(i);
        rebuilt.push((run_id, i));
    }
    Ok(rebuilt)
}

/// Deletes the log records of `records` (`(key, trace id, span id)`) whose span has not
/// arrived (neither stored nor in this group); returns how many.
pub(super) fn prune(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    links: Links<'_>,
    records: &[(Vec<u8>, String, String)],
) -> Result<usize, StoreError> {
    let mut pruned = 0;
    for (key, trace, span) in records {
        let arrived = links.span_runs.contains_key(&(trace.clone(), span.clone()))
            || (!trace.is_empty() && store.span_run(trace, span)?.is_some());
        if !arrived {
            batch.delete(cf::SPAN_LOGS, key)?;
            pruned += 1;
        }
    }
    Ok(pruned)
}

/// A model-request fact with the content of its span's log records (stored and in this group);
/// none when there are no log records for it (the fact is used as it is).
pub(super) fn with_logs(
    store: &Store,
    logs: &GroupLogs,
    i: &Interpreted,
) -> Result<Option<Interpreted>, StoreError> {
    if i.fact.kind != FactKind::ModelRequest {
        return Ok(None);
    }
    let mut events = store.span_logs(&i.fact.trace_id, &i.fact.span_id)?;
    if let Some(local) = logs.get(&(i.fact.trace_id.clone(), i.fact.span_id.clone())) {
        // One set of the order keys held, not a scan of the events per record.
        let mut held: HashSet<Vec<u8>> = events.iter().map(LogEvent::order_key).collect();
        for e in local {
            if held.insert(e.order_key()) {
                events.push(e.clone());
            }
        }
    }
    if events.is_empty() {
        return Ok(None);
    }
    let (fact, bodies) = with_log_content(&i.fact, &events);
    let mut messages = i.messages.clone();
    messages.extend(bodies);
    let mut item = Interpreted {
        run_span_id: i.run_span_id.clone(),
        fact,
        messages,
        shared: i.shared.clone(),
    };
    // Bodies rebuilt from log events do not pass the media offload, which neutralises parts
    // a sender made look like stored references: do it here.
    crate::media::neutralise_interpreted(&mut item);
    Ok(Some(item))
}
