//! Deletion on the single writer: starting deletions (a run with its delegate runs, a
//! conversation's runs), the bounded steps that remove what they left, the media candidates'
//! check, and the tombstones' upkeep. Each is applied alone, in its own commit (the writer never
//! groups deletion work with other requests), so it is ordered with ingest.
//!
//! Delegate runs (children started by a tool call of the run) are deleted with their parent: they
//! are part of what the run did. Spans of a run being deleted, or deleted less than
//! [`TOMBSTONE`] ago, are not stored (they are still forwarded); later ones make a new run.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use super::request::{DeleteReply, DeleteWork};
use crate::store::{Store, StoreError, WriteBatch};

/// How long spans of a deleted run are dropped after its deletion finished.
pub const TOMBSTONE: Duration = Duration::from_secs(3600);

/// Most runs one start (a run with its delegates, or a page of a conversation) takes on.
const MAX_STARTED: usize = 4096;

/// Deletions in progress one step looks at.
const STEP_DELETIONS: usize = 64;

/// Stale media index entries dropped per blob per check.
const STALE_PER_CHECK: usize = 1024;

/// Applies one deletion work in its own batch and commits it.
pub(super) fn apply(
    store: &Store,
    work: &DeleteWork,
    now_ns: u64,
) -> Result<DeleteReply, StoreError> {
    let mut batch = store.batch();
    let reply = match work {
        DeleteWork::Run {
            run,
            reason,
            over_before_ns,
        } => {
            let Some(run_id) = store.resolve_run(run)? else {
                return Ok(DeleteReply::Started(Vec::new()));
            };
            if let Some(cutoff) = over_before_ns {
                if !store.over_before(&run_id, *cutoff)? {
                    return Ok(DeleteReply::Started(Vec::new()));
                }
            }
            DeleteReply::Started(begin(store, &mut batch, vec![run_id], reason, now_ns)?)
        }
        DeleteWork::Conversation {
            conversation_id,
            limit,
        } => {
            let limit = (*limit).clamp(1, MAX_STARTED);
            let ids = store.indexed_runs(b'c', conversation_id, limit)?;
            DeleteReply::Started(begin(store, &mut batch, ids, "conversation", now_ns)?)
        }
        DeleteWork::Step { budget } => step(store, &mut batch, *budget, now_ns)?,
        DeleteWork::MediaCheck { limit } => {
            let mut unreferenced = Vec::new();
            for digest in store.media_candidates(*limit)? {
                let check = store.media_referenced(&digest, STALE_PER_CHECK)?;
                let settled: &[[u8; 32]] = if check.referenced { &[digest] } else { &[] };
                batch.settle_media(&check.stale, settled)?;
                if !check.referenced && check.complete {
                    unreferenced.push(digest);
                }
            }
            DeleteReply::Unreferenced(unreferenced)
        }
        DeleteWork::MediaRemoved { digests } => {
            batch.settle_media(&[], digests)?;
            DeleteReply::Done(digests.len())
        }
        DeleteWork::PruneTombstones { cutoff_ns, limit } => {
            let expired = store.expired_tombstones(*cutoff_ns, *limit)?;
            for run_id in &expired {
                batch.forget_tombstone(run_id)?;
            }
            DeleteReply::Done(expired.len())
        }
    };
    if !batch.is_empty() {
        store.commit(batch)?;
    }
    Ok(reply)
}

/// Starts deleting `roots` and, transitively, their delegate runs (at most [`MAX_STARTED`]
/// runs); the runs whose deletion started, roots first.
fn begin(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    roots: Vec<String>,
    reason: &str,
    now_ns: u64,
) -> Result<Vec<String>, StoreError> {
    let mut seen: HashSet<String> = roots.iter().cloned().collect();
    let mut queue: VecDeque<(String, bool)> = roots.into_iter().map(|r| (r, true)).collect();
    let mut started = Vec::new();
    while let Some((run_id, root)) = queue.pop_front() {
        if started.len() >= MAX_STARTED {
            break;
        }
        let why = if root { reason } else { "parent" };
        if !batch.begin_deletion(&run_id, why, now_ns)? {
            continue;
        }
        for child in store.indexed_runs(b'p', &run_id, MAX_STARTED)? {
            if seen.insert(child.clone()) {
                queue.push_back((child, false));
            }
        }
        started.push(run_id);
    }
    Ok(started)
}

/// Removes at most `budget` keys of the deletions in progress, oldest run ids first.
fn step(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    budget: usize,
    now_ns: u64,
) -> Result<DeleteReply, StoreError> {
    let pending = store.pending_deletions(STEP_DELETIONS + 1)?;
    let mut left = budget.max(1);
    let mut finished = Vec::new();
    let mut unfinished = pending.len() > STEP_DELETIONS;
    for mut deletion in pending.into_iter().take(STEP_DELETIONS) {
        if left == 0 {
            unfinished = true;
            break;
        }
        loop {
            let phase = deletion.phase;
            let outcome = batch.deletion_step(&mut deletion, left, now_ns)?;
            left = left.saturating_sub(outcome.removed.max(1));
            if let Some(done) = outcome.finished {
                finished.push(done);
                break;
            }
            // A phase that used up the budget goes on in the next step.
            if deletion.phase == phase || left == 0 {
                unfinished = true;
                break;
            }
        }
    }
    Ok(DeleteReply::Stepped {
        finished,
        pending: unfinished,
    })
}
