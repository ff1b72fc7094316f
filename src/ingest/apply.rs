//! Applying interpreted spans and run decisions to the store: merge facts, resolve lineage,
//! re-derive the touched runs, and write everything into one batch.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::config::SignalKind;
use crate::domain::{MessageHash, Run};
use crate::interpreter::{derive, Abandonment, FactKind, Interpreted, RunMeta, SpanFact};
use crate::store::keys::{self, cf};
use crate::store::{Store, StoreError, WriteBatch};

/// One unit of work for the writer.
pub enum Work {
    /// One accepted export request: its interpreted spans and its outbox entry.
    Received {
        /// Spans interpreted from the request (empty for logs, metrics and non-agent spans).
        spans: Vec<Interpreted>,
        /// The request for the outbox, when some exporter forwards its signal.
        outbox: Option<NewOutboxEntry>,
    },
    /// Declare a run dead.
    Abandon {
        /// Run id or alias.
        run: String,
        /// Why.
        reason: String,
        /// When, nanoseconds since the epoch.
        at_ns: u64,
        /// Only abandon if no new fact arrived since this time (the sweeper's check), else 0.
        silent_since_ns: u64,
    },
}

/// A request to append to the outbox.
pub struct NewOutboxEntry {
    /// Which signal.
    pub signal: SignalKind,
    /// Items in it (spans, log records, data points).
    pub items: u64,
    /// The request, protobuf-encoded.
    pub payload: Vec<u8>,
    /// Assigned by the writer when it reserves the space.
    pub seq: u64,
}

impl NewOutboxEntry {
    /// Bytes the entry counts for against queue caps (as [`crate::store::OutboxEntry::size`]).
    pub fn size(&self) -> u64 {
        self.payload.len() as u64 + 9
    }
}

/// What a unit of work did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Spans stored.
    Stored,
    /// The run is now abandoned.
    Abandoned(String),
    /// The run had already ended (its status).
    AlreadyOver(String, String),
    /// The run came back to life before the sweeper's decision was applied.
    StillActive,
    /// No such run.
    UnknownRun,
}

struct RunWork {
    facts: BTreeMap<String, SpanFact>,
    /// Messages the run already has, so a history repeated by every step is written once.
    known_messages: HashSet<MessageHash>,
    meta: RunMeta,
    old: Option<Run>,
    dirty: bool,
}

/// Merges a group of work items into one write batch and commits it.
pub fn apply_group(store: &Store, works: &[Work], now_ns: u64) -> Result<Vec<Applied>, StoreError> {
    let mut batch = store.batch();
    let mut runs: HashMap<String, RunWork> = HashMap::new();
    let mut span_runs: HashMap<(String, String), String> = HashMap::new();

    // Tool spans first, so a delegate run and its parent tool in the same group link up.
    for work in works {
        if let Work::Received { spans: items, .. } = work {
            for i in items.iter().filter(|i| i.fact.kind == FactKind::ToolCall) {
                let run_id = run_id_of(i);
                let key = (i.fact.trace_id.clone(), i.fact.span_id.clone());
                batch.put_raw(
                    cf::SPAN_RUNS,
                    &keys::span_key(&key.0, &key.1),
                    run_id.as_bytes(),
                );
                span_runs.insert(key, run_id);
            }
        }
    }

    let mut results = Vec::with_capacity(works.len());
    for work in works {
        match work {
            Work::Received {
                spans: items,
                outbox,
            } => {
                for i in items {
                    add_fact(store, &mut batch, &mut runs, &span_runs, i, now_ns)?;
                }
                if let Some(entry) = outbox {
                    batch.put_outbox(entry.seq, entry.signal, entry.items, &entry.payload);
                }
                results.push(Applied::Stored);
            }
            Work::Abandon {
                run,
                reason,
                at_ns,
                silent_since_ns,
            } => {
                let Some(run_id) = store.resolve_run(run)? else {
                    results.push(if runs.contains_key(run) {
                        abandon(store, &mut runs, run, reason, *at_ns, *silent_since_ns)?
                    } else {
                        Applied::UnknownRun
                    });
                    continue;
                };
                results.push(abandon(
                    store,
                    &mut runs,
                    &run_id,
                    reason,
                    *at_ns,
                    *silent_since_ns,
                )?);
            }
        }
    }

    for (run_id, work) in runs.iter().filter(|(_, w)| w.dirty) {
        write_run(&mut batch, run_id, work);
    }
    store.commit(batch)?;
    Ok(results)
}

/// `<trace id>-<agent-run span id>`: the same whether or not the run span ever arrives.
pub fn run_id_of(i: &Interpreted) -> String {
    format!("{}-{}", i.fact.trace_id, i.run_span_id)
}

fn load<'a>(
    store: &Store,
    runs: &'a mut HashMap<String, RunWork>,
    run_id: &str,
) -> Result<&'a mut RunWork, StoreError> {
    if !runs.contains_key(run_id) {
        let facts: BTreeMap<String, SpanFact> = store
            .facts(run_id)?
            .into_iter()
            .map(|f| (f.span_id.clone(), f))
            .collect();
        let known_messages = facts
            .values()
            .flat_map(|f| [&f.input, &f.output, &f.all_messages])
            .flatten()
            .flatten()
            .map(|r| r.hash.clone())
            .collect();
        let work = RunWork {
            facts,
            known_messages,
            meta: store.run_meta(run_id)?.unwrap_or_default(),
            old: store.run(run_id)?,
            dirty: false,
        };
        runs.insert(run_id.to_string(), work);
    }
    runs.get_mut(run_id).ok_or(StoreError::Corrupt {
        cf: cf::RUNS,
        reason: "run vanished from the work set".into(),
    })
}

fn add_fact(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    runs: &mut HashMap<String, RunWork>,
    span_runs: &HashMap<(String, String), String>,
    i: &Interpreted,
    now_ns: u64,
) -> Result<(), StoreError> {
    let run_id = run_id_of(i);
    let work = load(store, runs, &run_id)?;
    if work.facts.get(&i.fact.span_id) == Some(&i.fact) {
        return Ok(()); // delivered before: nothing changes
    }
    batch.put_json(
        cf::FACTS,
        &keys::run_child(&run_id, &i.fact.span_id),
        &i.fact,
    );
    for (hash, message) in &i.messages {
        if work.known_messages.insert(hash.clone()) {
            batch.put_json(cf::MESSAGES, &keys::run_child(&run_id, &hash.0), message);
        }
    }
    work.facts.insert(i.fact.span_id.clone(), i.fact.clone());
    work.meta.last_seen_ns = now_ns;
    work.dirty = true;

    match i.fact.kind {
        // A delegate run nests in a tool span of its parent run.
        FactKind::AgentRun => {
            if let Some(parent_span) = &i.fact.parent_span_id {
                let trace = &i.fact.trace_id;
                let parent_run = match span_runs.get(&(trace.clone(), parent_span.clone())) {
                    Some(r) => Some(r.clone()),
                    None => store.span_run(trace, parent_span)?,
                };
                match parent_run {
                    Some(parent) => work.meta.parent_run_id = Some(parent),
                    None => {
                        let mut key = keys::span_key(trace, parent_span);
                        key.push(0);
                        key.extend_from_slice(run_id.as_bytes());
                        batch.put_raw(cf::PENDING_PARENTS, &key, b"");
                    }
                }
            }
        }
        FactKind::ToolCall => {
            for (key, child) in store.pending_children(&i.fact.trace_id, &i.fact.span_id)? {
                let child_work = load(store, runs, &child)?;
                child_work.meta.parent_run_id = Some(run_id.clone());
                child_work.dirty = true;
                batch.delete(cf::PENDING_PARENTS, &key);
            }
        }
        FactKind::ModelRequest => {}
    }
    Ok(())
}

fn abandon(
    store: &Store,
    runs: &mut HashMap<String, RunWork>,
    run_id: &str,
    reason: &str,
    at_ns: u64,
    silent_since_ns: u64,
) -> Result<Applied, StoreError> {
    let work = load(store, runs, run_id)?;
    if work.facts.is_empty() {
        return Ok(Applied::UnknownRun);
    }
    if let Some(agent) = work.facts.values().find(|f| f.kind == FactKind::AgentRun) {
        let status = if agent.error.is_some() {
            "failed"
        } else {
            "completed"
        };
        return Ok(Applied::AlreadyOver(run_id.to_string(), status.into()));
    }
    if work.meta.abandoned.is_some() {
        return Ok(Applied::AlreadyOver(run_id.to_string(), "abandoned".into()));
    }
    if silent_since_ns > 0 && work.meta.last_seen_ns > silent_since_ns {
        return Ok(Applied::StillActive);
    }
    work.meta.abandoned = Some(Abandonment {
        at_ns,
        reason: reason.to_string(),
    });
    work.dirty = true;
    Ok(Applied::Abandoned(run_id.to_string()))
}

fn write_run(batch: &mut WriteBatch<'_>, run_id: &str, work: &RunWork) {
    let facts: Vec<SpanFact> = work.facts.values().cloned().collect();
    let derived = derive(run_id, &facts, &work.meta);
    let run = &derived.run;

    let new_index = keys::index_keys(run);
    if let Some(old) = &work.old {
        for key in keys::index_keys(old) {
            if !new_index.contains(&key) {
                batch.delete(cf::RUN_INDEX, &key);
            }
        }
    }
    for key in &new_index {
        batch.put_raw(cf::RUN_INDEX, key, b"");
    }
    for alias in &run.aliases {
        batch.put_raw(cf::ALIASES, alias.as_bytes(), run_id.as_bytes());
    }
    batch.put_json(cf::RUNS, run_id.as_bytes(), run);
    batch.put_json(cf::RUN_META, run_id.as_bytes(), &work.meta);

    let old = work.old.as_ref();
    rewrite_seq(
        batch,
        cf::EVENTS,
        run_id,
        &derived.events,
        old.map_or(0, |r| r.event_count),
    );
    rewrite_seq(
        batch,
        cf::EFFECTS,
        run_id,
        &derived.effects,
        old.map_or(0, |r| r.tool_call_count),
    );
    rewrite_seq(
        batch,
        cf::SNAPSHOTS,
        run_id,
        &derived.snapshots,
        old.map_or(0, |r| r.snapshot_count),
    );
    for message in &derived.new_messages {
        let hash = crate::domain::MessageHash::of(message);
        batch.put_json(cf::MESSAGES, &keys::run_child(run_id, &hash.0), message);
    }
}

/// Writes records at `0..len` and deletes those left over from a longer earlier derivation.
fn rewrite_seq<T: serde::Serialize>(
    batch: &mut WriteBatch<'_>,
    cf_name: &'static str,
    run_id: &str,
    items: &[T],
    old_len: u32,
) {
    for (n, item) in items.iter().enumerate() {
        batch.put_json(cf_name, &keys::run_seq(run_id, n as u32), item);
    }
    for n in items.len() as u32..old_len {
        batch.delete(cf_name, &keys::run_seq(run_id, n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{EffectStatus, RunStatus};
    use crate::interpreter::interpret_span;
    use crate::test_fixtures::{delegate_scenario as spans, run_id};
    use opentelemetry_proto::tonic::trace::v1::Span;

    fn interpreted(spans: &[Span]) -> Vec<Interpreted> {
        spans.iter().filter_map(interpret_span).collect()
    }

    fn outer_id() -> String {
        run_id(1)
    }

    fn delegate_id() -> String {
        run_id(4)
    }

    #[test]
    fn delegate_links_to_parent_whichever_arrives_first_and_duplicates_change_nothing() {
        for order in [[0usize, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 0, 4, 1, 3]] {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(dir.path(), false).unwrap();
            let all = spans();
            // One span per request, in this order: each request is its own commit.
            for &i in &order {
                apply_group(
                    &store,
                    &[Work::Received {
                        spans: interpreted(&all[i..=i]),
                        outbox: None,
                    }],
                    1,
                )
                .unwrap();
            }
            let delegate = store.run(&delegate_id()).unwrap().unwrap();
            assert_eq!(delegate.parent_run_id, Some(outer_id()), "order {order:?}");
            let outer = store.run(&outer_id()).unwrap().unwrap();
            assert_eq!(outer.status, RunStatus::Completed);
            assert_eq!(store.resolve_run("outer-call").unwrap(), Some(outer_id()));

            let before = (
                store.events(&outer_id()).unwrap(),
                store.effects(&outer_id()).unwrap(),
                store.snapshots(&outer_id()).unwrap(),
            );
            let sst_before = store.run_meta(&outer_id()).unwrap();
            apply_group(
                &store,
                &[Work::Received {
                    spans: interpreted(&all),
                    outbox: None,
                }],
                2,
            )
            .unwrap();
            let after = (
                store.events(&outer_id()).unwrap(),
                store.effects(&outer_id()).unwrap(),
                store.snapshots(&outer_id()).unwrap(),
            );
            assert_eq!(before, after);
            assert_eq!(
                sst_before,
                store.run_meta(&outer_id()).unwrap(),
                "a duplicate must not even touch last_seen"
            );
        }
    }

    #[test]
    fn abandon_marks_unsettled_calls_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), true).unwrap();
            // Only the first model request arrived; the run span never will.
            apply_group(
                &store,
                &[Work::Received {
                    spans: interpreted(&spans()[0..1]),
                    outbox: None,
                }],
                1,
            )
            .unwrap();
            let effects = store.effects(&outer_id()).unwrap();
            assert_eq!(effects[0].status, EffectStatus::Requested);
            let applied = apply_group(
                &store,
                &[Work::Abandon {
                    run: "outer-call".into(),
                    reason: "abandoned by request".into(),
                    at_ns: 500,
                    silent_since_ns: 0,
                }],
                2,
            )
            .unwrap();
            assert_eq!(applied, vec![Applied::Abandoned(outer_id())]);
        }
        let store = Store::open(dir.path(), true).unwrap();
        let run = store.run(&outer_id()).unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Abandoned);
        assert_eq!(
            store.effects(&outer_id()).unwrap()[0].status,
            EffectStatus::UnknownAfterCrash
        );
        let (listed, _) = store
            .list_runs(
                &crate::store::RunFilter {
                    status: Some("abandoned".into()),
                    ..Default::default()
                },
                None,
                10,
            )
            .unwrap();
        assert_eq!(listed.len(), 1);
        let (running, _) = store
            .list_runs(
                &crate::store::RunFilter {
                    status: Some("running".into()),
                    ..Default::default()
                },
                None,
                10,
            )
            .unwrap();
        assert!(
            running.is_empty(),
            "the old status index entry must be gone"
        );
    }
}
