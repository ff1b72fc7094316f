//! Applying a write group: the writer's requests (interpreted spans and log records of received
//! export requests, orphan-log pruning, abandonment) merged into one batch and committed.
//!
//! The group is applied in passes, so that what one request of the group holds is known to all:
//! log records first (a span finds the logs sent with it), grouping spans next (every child
//! resolves to the run above its group), tool and model-request spans next (a delegate run and
//! its parent tool link up), then every request in order. The rooms:
//!
//! - [`request`]: the requests and their typed replies;
//! - [`work_set`]: the runs the group touches, loaded once;
//! - [`facts`]: fact dedupe and content-addressed history writes;
//! - [`lineage`]: grouping spans, delegate links, orphan merges;
//! - [`interactions`]: waiting runs resolved by the answers a later run carries;
//! - [`logs`]: log records, merged into their span's fact, pruned when it never arrives;
//! - [`abandon`]: declaring a run dead;
//! - [`delete`]: deleting runs, in bounded steps, each work in its own commit;
//! - [`persist`]: writing a changed run's derived state (append or full derivation);
//! - [`span_runs`]: the span→run block of a request's outbox entry.

mod abandon;
mod continued_from;
#[cfg(test)]
mod continued_from_tests;
#[cfg(test)]
mod cost_tests;
mod delete;
#[cfg(test)]
mod delete_tests;
mod facts;
mod interactions;
#[cfg(test)]
mod interactions_tests;
mod lineage;
mod logs;
mod persist;
mod request;
mod span_runs;
#[cfg(test)]
mod span_runs_tests;
mod work_set;

use crate::interpreter::{FactKind, Interpreted};
use crate::store::keys::{self, cf};
use crate::store::{AliasClaims, Store, StoreError, WriteBatch, WrittenRun};

pub use delete::TOMBSTONE;
pub use request::{
    AbandonOutcome, Applied, DeleteReply, DeleteWork, PrunedLogs, Stored, SweepOutcome, Work,
};
pub use span_runs::run_block_bound;

pub(super) use continued_from::note_service;

use lineage::{Groups, Links, SpanRuns};
use span_runs::SpanRunList;
use work_set::Runs;

/// The run key a span names by itself: `<trace id>-<run span id>`. For conventions without
/// grouping spans this is the run id; children of a grouping span (Strands' event-loop cycle)
/// name the group, which the writer resolves to the run above it.
pub fn run_id_of(i: &Interpreted) -> String {
    format!("{}-{}", i.fact.trace_id, i.run_span_id)
}

/// Merges a group of work items into one write batch and commits it. One reply per work item,
/// in order, each of its kind.
///
/// An error names the run (and span) it met, when it met one ([`StoreError::InRun`]);
/// [`StoreError::is_retryable`] tells a RocksDB failure from a record that cannot be read or
/// written, and [`StoreError::damaged_run`] a run whose stored records could not be read.
/// Nothing is written unless everything applied.
pub fn apply_group(store: &Store, works: &[Work], now_ns: u64) -> Result<Vec<Applied>, StoreError> {
    // Deletion work commits alone (the writer never groups it; should a caller, each work of
    // the group is applied in order, one commit each).
    if works.iter().any(|w| matches!(w, Work::Delete(_))) {
        if let [Work::Delete(work)] = works {
            return Ok(vec![Applied::Deletion(delete::apply(store, work, now_ns)?)]);
        }
        let mut out = Vec::with_capacity(works.len());
        for work in works {
            out.extend(apply_group(store, std::slice::from_ref(work), now_ns)?);
        }
        return Ok(out);
    }
    let mut batch = store.batch();
    // Spans of a run being deleted (or deleted a short while ago) are not stored.
    let mut deleted = Deleted::default();
    let mut runs = Runs::new();
    let mut claims = AliasClaims::default();
    let mut lineage = continued_from::Group::default();

    // Log records first, so a span of this group finds the logs sent with it.
    let logs = logs::put_logs(
        &mut batch,
        works.iter().flat_map(|work| match work {
            Work::Received { logs, .. } => logs.as_slice(),
            _ => &[],
        }),
    )?;
    let received = || {
        works.iter().flat_map(|work| match work {
            Work::Received { spans, .. } => spans.as_slice(),
            _ => &[],
        })
    };

    // Grouping spans next, so every child in this group resolves to the run above its group.
    let mut groups = Groups::default();
    for i in received().filter(|i| crate::interpreter::groups_children(&i.fact)) {
        groups.record(&mut batch, i)?;
    }

    // Tool spans next, so a delegate run and its parent tool in the same group link up.
    let mut span_runs = SpanRuns::new();
    for i in
        received().filter(|i| matches!(i.fact.kind, FactKind::ToolCall | FactKind::ModelRequest))
    {
        let run_id = groups.run_id(store, i)?;
        if deleted.blocks(store, &run_id, now_ns)? {
            continue;
        }
        let key = (i.fact.trace_id.clone(), i.fact.span_id.clone());
        batch.put_raw(
            cf::SPAN_RUNS,
            &keys::span_key(&key.0, &key.1),
            run_id.as_bytes(),
        )?;
        span_runs.insert(key, run_id);
    }
    let links = Links {
        span_runs: &span_runs,
        groups: &groups,
    };

    let mut results = Vec::with_capacity(works.len());
    // The outbox entries of received requests, with the runs resolved for their spans: put once
    // every request is applied, when it is known which runs are shown.
    let mut entries = Vec::new();
    for work in works {
        results.push(match work {
            Work::Received {
                spans,
                logs: events,
                outbox,
            } => {
                let mut resolved = SpanRunList::default();
                for i in spans {
                    #[cfg(test)]
                    fault::maybe_panic(&i.fact.span_id);
                    let span = Some(i.fact.span_id.as_str());
                    let run_id = groups
                        .run_id(store, i)
                        .map_err(|e| e.in_run(&run_id_of(i), span))?;
                    let in_run = |e: StoreError| e.in_run(&run_id, span);
                    if deleted.blocks(store, &run_id, now_ns).map_err(in_run)? {
                        continue;
                    }
                    let with_content = logs::with_logs(store, &logs, i).map_err(in_run)?;
                    let i = with_content.as_ref().unwrap_or(i);
                    store_fact(store, &mut batch, &mut runs, links, &run_id, i, now_ns)
                        .map_err(in_run)?;
                    if crate::interpreter::groups_children(&i.fact) {
                        let orphan = format!("{}-{}", i.fact.trace_id, i.fact.span_id);
                        lineage::merge_run(store, &mut batch, &mut runs, &orphan, &run_id)
                            .map_err(in_run)?;
                        if orphan != run_id {
                            claims.release_run(&orphan);
                        }
                    }
                    resolved.note(&i.fact.trace_id, &i.fact.span_id, &run_id);
                }
                // Logs of a span that arrived earlier rebuild that span's content.
                for (run_id, i) in logs::rebuilt_by_logs(store, &mut runs, links, &logs, events)? {
                    if deleted.blocks(store, &run_id, now_ns)? {
                        continue;
                    }
                    store_fact(store, &mut batch, &mut runs, links, &run_id, &i, now_ns)
                        .map_err(|e| e.in_run(&run_id, Some(&i.fact.span_id)))?;
                }
                if let Some(entry) = outbox {
                    entries.push((results.len(), entry, resolved));
                }
                Applied::Stored(Stored { outbox_bytes: None })
            }
            Work::PruneLogs { records } => {
                Applied::PrunedLogs(PrunedLogs(logs::prune(store, &mut batch, links, records)?))
            }
            Work::Abandon {
                run,
                reason,
                at_ns,
                silent_since_ns,
            } => Applied::Abandon(abandon::abandon_run(
                store,
                &mut runs,
                run,
                reason,
                *at_ns,
                *silent_since_ns,
            )?),
            // Applied alone, above.
            Work::Delete(work) => Applied::Deletion(delete::apply(store, work, now_ns)?),
        });
    }

    // A span whose fact is in a run known only from grouping spans is in no run (yet).
    for (at, entry, resolved) in entries {
        let shown = |run_id: &str| runs.get(run_id).is_some_and(|w| w.shown());
        let bytes = resolved.put(&mut batch, entry, shown)?;
        results[at] = Applied::Stored(Stored {
            outbox_bytes: Some(bytes),
        });
    }

    // A run known only from grouping spans is not a run (yet): nothing to show for it. Runs are
    // written in the order the group first touched them.
    let mut dirty: Vec<(usize, String)> = runs
        .iter()
        .filter(|(_, w)| w.dirty && w.shown())
        .map(|(id, w)| (w.order, id.clone()))
        .collect();
    dirty.sort_unstable();
    let dirty: Vec<String> = dirty.into_iter().map(|(_, id)| id).collect();
    // A run known only from grouping spans gets its meta all the same: every run with a fact
    // has one, so a run with neither is known to have no fact (its facts are not scanned for).
    for (run_id, work) in runs.iter().filter(|(_, w)| w.dirty && !w.shown()) {
        batch.put_json(cf::RUN_META, run_id.as_bytes(), &work.meta)?;
    }
    // The answers this group's requests carry, for the waiting runs it derives.
    let answers = interactions::group_answers(&runs);
    let mut written = Vec::with_capacity(dirty.len());
    for run_id in dirty {
        let longest_history = persist::write_run(
            store,
            &mut batch,
            &mut runs,
            &mut persist::GroupLinks {
                claims: &mut claims,
                lineage: &mut lineage,
                answers: &answers,
            },
            &run_id,
            now_ns,
        )
        .map_err(|e| e.in_run(&run_id, None))?;
        written.push(WrittenRun {
            run_id,
            longest_history,
        });
    }
    store.commit_runs(batch, &written)?;
    store.note_alias_conflicts(claims.conflicts());
    Ok(results)
}

/// The runs of a group whose spans are dropped because of a deletion, looked up once each.
#[derive(Default)]
struct Deleted(std::collections::HashMap<String, bool>);

impl Deleted {
    /// True when spans of `run_id` are not stored (see [`Store::blocks_ingest`]).
    fn blocks(&mut self, store: &Store, run_id: &str, now_ns: u64) -> Result<bool, StoreError> {
        if let Some(known) = self.0.get(run_id) {
            return Ok(*known);
        }
        let ttl = TOMBSTONE.as_nanos() as u64;
        let blocked = store.blocks_ingest(run_id, now_ns, ttl)?;
        self.0.insert(run_id.to_string(), blocked);
        Ok(blocked)
    }
}

/// Adds fact `i` to run `run_id` and, when it changed the run, links it to the other runs.
fn store_fact(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    runs: &mut Runs,
    links: Links<'_>,
    run_id: &str,
    i: &Interpreted,
    now_ns: u64,
) -> Result<(), StoreError> {
    if facts::add_fact(store, batch, runs, run_id, i, now_ns)? {
        lineage::link(store, batch, runs, links, run_id, i)?;
    }
    Ok(())
}

/// Fault injection for the writer's tests: a panic while applying a chosen span.
#[cfg(test)]
pub(super) mod fault {
    use std::cell::RefCell;

    thread_local! {
        static PANIC_ON_SPAN: RefCell<Option<String>> = const { RefCell::new(None) };
    }

    /// From now on, on this thread, applying span `span_id` panics (none: never).
    pub fn panic_on(span_id: Option<&str>) {
        PANIC_ON_SPAN.with(|p| *p.borrow_mut() = span_id.map(str::to_string));
    }

    pub(super) fn maybe_panic(span_id: &str) {
        let hit = PANIC_ON_SPAN.with(|p| p.borrow().as_deref() == Some(span_id));
        assert!(!hit, "injected panic while applying span {span_id}");
    }
}

#[cfg(test)]
mod tests;
