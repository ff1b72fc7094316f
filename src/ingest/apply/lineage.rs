//! Lineage: which run a fact belongs to and how runs link up. Grouping spans (Strands' cycles,
//! OpenInference's CHAIN, Traceloop's task) resolve their children to the run above them; a
//! delegate run links to the run of the tool span it nests in; children stored before their
//! grouping span arrived (an orphan run) are merged into the run above it.

use std::cell::RefCell;
use std::collections::HashMap;

use super::facts::write_fact;
use super::work_set::{load, load_full, Runs};
use crate::domain::MessageHash;
use crate::interpreter::{FactKind, Interpreted};
use crate::store::keys::{self, cf};
use crate::store::{Store, StoreError, WriteBatch};

/// The tool and model-request spans of a write group, by `(trace id, span id)`: the run each
/// was resolved to.
pub(super) type SpanRuns = HashMap<(String, String), String>;

/// What links a fact to other runs: tool spans' runs and grouping spans known to this group.
#[derive(Clone, Copy)]
pub(super) struct Links<'a> {
    /// The runs of this group's tool and model-request spans.
    pub(super) span_runs: &'a SpanRuns,
    /// This group's grouping spans.
    pub(super) groups: &'a Groups,
}

/// Grouping spans known to this write group (the store knows the earlier ones).
#[derive(Default)]
pub(super) struct Groups {
    /// The span each grouping span of this group names as its run key, by `(trace, span)`.
    parents: HashMap<(String, String), String>,
    /// What the store said of spans not in `parents`, by `(trace, span)`: every span of a run
    /// names the same run key span, so the store is asked once per run, not once per span
    /// (the store does not change while the group is applied).
    stored: RefCell<HashMap<(String, String), Option<String>>>,
}

/// Deepest nesting of grouping spans followed when resolving a run.
const MAX_GROUP_DEPTH: usize = 64;

impl Groups {
    /// Records grouping span `i` (stored, and known to the rest of this group).
    pub(super) fn record(
        &mut self,
        batch: &mut WriteBatch<'_>,
        i: &Interpreted,
    ) -> Result<(), StoreError> {
        let key = (i.fact.trace_id.clone(), i.fact.span_id.clone());
        batch.put_raw(
            cf::GROUP_SPANS,
            &keys::span_key(&key.0, &key.1),
            i.run_span_id.as_bytes(),
        )?;
        self.parents.insert(key, i.run_span_id.clone());
        Ok(())
    }

    /// The run of a fact: its run key span, followed up through grouping spans, so children of a
    /// group land in the run above it once the group is known, whatever the arrival order.
    pub(super) fn run_id(&self, store: &Store, i: &Interpreted) -> Result<String, StoreError> {
        self.follow(store, &i.fact.trace_id, i.run_span_id.clone())
    }

    /// A run id recorded earlier (`trace-span`), followed up through grouping spans known since.
    pub(super) fn resolve(&self, store: &Store, run_id: &str) -> Result<String, StoreError> {
        match run_id.split_once('-') {
            Some((trace, span)) => self.follow(store, trace, span.to_string()),
            None => Ok(run_id.to_string()),
        }
    }

    /// The first span at or above `span` that is not a grouping span.
    pub(super) fn above(
        &self,
        store: &Store,
        trace: &str,
        span: &str,
    ) -> Result<String, StoreError> {
        let run_id = self.follow(store, trace, span.to_string())?;
        Ok(run_id
            .split_once('-')
            .map_or(run_id.clone(), |(_, s)| s.to_string()))
    }

    /// `trace-<span>` for the span reached from `key` by following grouping spans up (at most
    /// [`MAX_GROUP_DEPTH`] of them, so a cycle of groups ends).
    fn follow(&self, store: &Store, trace: &str, mut key: String) -> Result<String, StoreError> {
        let trace = &trace.to_string();
        for _ in 0..MAX_GROUP_DEPTH {
            let at = (trace.clone(), key.clone());
            let parent = match self.parents.get(&at) {
                Some(p) => Some(p.clone()),
                None => self.stored_parent(store, at)?,
            };
            match parent {
                Some(p) if p != key => key = p,
                _ => break,
            }
        }
        Ok(format!("{trace}-{key}"))
    }
}

impl Groups {
    /// The stored parent of grouping span `at`, asked of the store once per group.
    fn stored_parent(
        &self,
        store: &Store,
        at: (String, String),
    ) -> Result<Option<String>, StoreError> {
        if let Some(known) = self.stored.borrow().get(&at) {
            return Ok(known.clone());
        }
        let parent = store.group_parent(&at.0, &at.1)?;
        self.stored.borrow_mut().insert(at, parent.clone());
        Ok(parent)
    }
}

/// Moves the facts stored under `from` (children of a grouping span that arrived before it) into
/// the run `into`, and deletes everything stored for `from`.
pub(super) fn merge_run(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    runs: &mut Runs,
    from: &str,
    into: &str,
) -> Result<(), StoreError> {
    if from == into {
        return Ok(());
    }
    load_full(store, runs, from)?;
    let Some(orphan) = runs.remove(from) else {
        return Ok(());
    };
    let facts = orphan.all.clone().unwrap_or_default();
    if facts.is_empty() {
        return Ok(());
    }
    load_full(store, runs, into)?;
    for fact in facts.values() {
        let input = fact.input.as_deref().map(Vec::as_slice);
        let hashes: Vec<MessageHash> =
            [input, fact.output.as_deref(), fact.all_messages.as_deref()]
                .into_iter()
                .flatten()
                .flatten()
                .map(|r| r.hash)
                .collect();
        let values = store
            .messages(from, &hashes)
            .map_err(|e| e.in_run(from, Some(&fact.span_id)))?;
        let bodies: Vec<(MessageHash, serde_json::Value)> =
            hashes.into_iter().zip(values).collect();
        if matches!(fact.kind, FactKind::ToolCall | FactKind::ModelRequest) {
            batch.put_raw(
                cf::SPAN_RUNS,
                &keys::span_key(&fact.trace_id, &fact.span_id),
                into.as_bytes(),
            )?;
        }
        let target = load_full(store, runs, into)?;
        write_fact(store, batch, into, target, fact, &bodies)?;
        target.note_calls(fact);
        target.add(fact.clone());
        target.full = true;
    }
    let target = load_full(store, runs, into)?;
    target.meta.last_seen_ns = target.meta.last_seen_ns.max(orphan.meta.last_seen_ns);
    if target.meta.parent_run_id.is_none() {
        target.meta.parent_run_id = orphan.meta.parent_run_id.clone();
    }
    target.dirty = true;
    for fact in facts.values() {
        if fact.kind == FactKind::ToolCall {
            relink_children(store, runs, &fact.trace_id, &fact.span_id, into)?;
        }
    }

    // Forget the orphan run: its call counts, and everything under its run key.
    for key in store.keys_with_prefix(cf::RUN_STATE, &keys::run_prefix(from))? {
        batch.delete(cf::RUN_STATE, &key)?;
    }
    batch.delete_run_history(from)?;
    if let Some(old) = &orphan.old {
        for key in keys::index_keys(old) {
            batch.delete(cf::RUN_INDEX, &key)?;
        }
    }
    batch.delete(cf::RUNS, from.as_bytes())?;
    batch.delete(cf::RUN_META, from.as_bytes())?;
    batch.delete(cf::RUN_STATE, from.as_bytes())?;
    batch.delete(cf::DAMAGED, from.as_bytes())?;
    Ok(())
}

/// Links a fact just added to run `run_id` to the other runs: a delegate run to the run of the
/// tool span it nests in, a tool span to the delegates waiting on it, a grouping span's waiting
/// delegates to the span above it.
pub(super) fn link(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    runs: &mut Runs,
    links: Links<'_>,
    run_id: &str,
    i: &Interpreted,
) -> Result<(), StoreError> {
    match i.fact.kind {
        // A delegate run nests in a tool span of its parent run.
        FactKind::AgentRun => {
            if let Some(parent_span) = &i.fact.parent_span_id {
                let trace = &i.fact.trace_id;
                // Through grouping spans between the tool and the delegate (OpenInference's task).
                let parent_span = &links.groups.above(store, trace, parent_span)?;
                if let Some(parent) = links.run_of_span(store, trace, parent_span)? {
                    load(store, runs, run_id)?.meta.parent_run_id = Some(parent);
                }
                // Kept after the link is made, so it follows the tool when the tool's run is
                // re-keyed (a tool under a grouping span that arrives later).
                let mut key = keys::span_key(trace, parent_span);
                key.push(0);
                key.extend_from_slice(run_id.as_bytes());
                batch.put_pending_child(&key)?;
            }
        }
        FactKind::ToolCall => {
            relink_children(store, runs, &i.fact.trace_id, &i.fact.span_id, run_id)?;
        }
        // Delegates that arrived before this group wait on it: they now wait on (or link to) the
        // span above it.
        FactKind::Group => {
            if let Some(above) = &i.fact.parent_span_id {
                forward_children(
                    store,
                    batch,
                    runs,
                    links,
                    &i.fact.trace_id,
                    &i.fact.span_id,
                    above,
                )?;
            }
        }
        FactKind::ModelRequest => {
            super::interactions::note_answers(store, batch, runs, run_id, &i.fact)?;
        }
    }
    Ok(())
}

impl Links<'_> {
    /// The run of tool (or model-request) span `trace span`: resolved in this group, or stored
    /// earlier and followed up through the grouping spans known since.
    fn run_of_span(
        &self,
        store: &Store,
        trace: &str,
        span: &str,
    ) -> Result<Option<String>, StoreError> {
        match self.span_runs.get(&(trace.to_string(), span.to_string())) {
            Some(r) => Ok(Some(r.clone())),
            None => match store.span_run(trace, span)? {
                Some(r) => Ok(Some(self.groups.resolve(store, &r)?)),
                None => Ok(None),
            },
        }
    }
}

/// Re-registers the delegate runs waiting on grouping span `span` under the span `above` it, and
/// links them when `above` is a tool span already known.
fn forward_children(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    runs: &mut Runs,
    links: Links<'_>,
    trace: &str,
    span: &str,
    above: &str,
) -> Result<(), StoreError> {
    let children = store.pending_children(trace, span)?;
    if children.is_empty() {
        return Ok(());
    }
    let target = links.groups.above(store, trace, above)?;
    let parent_run = links.run_of_span(store, trace, &target)?;
    for (_, child) in children {
        let mut key = keys::span_key(trace, &target);
        key.push(0);
        key.extend_from_slice(child.as_bytes());
        batch.put_pending_child(&key)?;
        if let Some(parent) = &parent_run {
            let work = load(store, runs, &child)?;
            if work.meta.parent_run_id.as_ref() != Some(parent) {
                work.meta.parent_run_id = Some(parent.clone());
                work.dirty = true;
            }
        }
    }
    Ok(())
}

/// Points the delegate runs of tool span `trace span` at `run_id`.
fn relink_children(
    store: &Store,
    runs: &mut Runs,
    trace: &str,
    span: &str,
    run_id: &str,
) -> Result<(), StoreError> {
    for (_, child) in store.pending_children(trace, span)? {
        let child_work = load(store, runs, &child)?;
        if child_work.meta.parent_run_id.as_deref() != Some(run_id) {
            child_work.meta.parent_run_id = Some(run_id.to_string());
            child_work.dirty = true;
        }
    }
    Ok(())
}
