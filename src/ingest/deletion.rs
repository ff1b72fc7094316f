//! Deleting runs through the ingest service: starting deletions (a run, a conversation), the
//! driver that carries them out in bounded writer steps (also those a crash interrupted, found
//! again when the store opens), compacts what they freed, removes blobs no message names any
//! more, and the retention sweep that deletes runs over for longer than
//! `processors.stepline.retention`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::apply::{DeleteReply, DeleteWork, TOMBSTONE};
use super::{now_ns, Ingest, IngestError};
use crate::store::{FinishedDeletion, Store};

/// Keys one writer step removes, unless `STEPLINE_DELETE_BATCH` says otherwise (a test knob).
pub const DELETE_BATCH: usize = 512;

/// Runs of a conversation started per writer turn.
const CONVERSATION_PAGE: usize = 256;

/// Finished deletions compacted together (at the latest).
const COMPACT_EVERY: usize = 256;

/// Media candidates checked per writer turn.
const MEDIA_CHECK: usize = 256;

/// Runs the retention sweep looks at per pass.
const RETENTION_SCAN: usize = 10_000;

/// How often the driver looks for deletions in progress.
const DRIVER_PERIOD: Duration = Duration::from_millis(250);

/// The keys per deletion step: `STEPLINE_DELETE_BATCH` when set to a positive number (tests
/// make it small to stop a deletion in the middle), else [`DELETE_BATCH`].
pub fn delete_batch() -> usize {
    std::env::var("STEPLINE_DELETE_BATCH")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DELETE_BATCH)
}

fn unexpected(reply: DeleteReply) -> IngestError {
    IngestError::Internal(format!("the writer gave another deletion reply: {reply:?}"))
}

fn storage(e: crate::store::StoreError) -> IngestError {
    IngestError::Storage(e.to_string())
}

impl Ingest {
    /// Starts deleting run `run` (an id or alias) and its delegate runs: once this returns they
    /// are hidden, and the driver removes the rest. Gives their ids (empty: no such run).
    pub async fn delete_run(&self, run: &str) -> Result<Vec<String>, IngestError> {
        let work = DeleteWork::Run {
            run: run.to_string(),
            reason: "request".into(),
            over_before_ns: None,
        };
        match self.writer.delete(work).await? {
            DeleteReply::Started(ids) => Ok(ids),
            other => Err(unexpected(other)),
        }
    }

    /// Starts deleting every run of a conversation (and their delegate runs); gives how many.
    pub async fn delete_conversation(&self, conversation_id: &str) -> Result<usize, IngestError> {
        let mut total = 0;
        loop {
            let work = DeleteWork::Conversation {
                conversation_id: conversation_id.to_string(),
                limit: CONVERSATION_PAGE,
            };
            match self.writer.delete(work).await? {
                DeleteReply::Started(ids) if ids.is_empty() => return Ok(total),
                DeleteReply::Started(ids) => total += ids.len(),
                other => return Err(unexpected(other)),
            }
        }
    }

    /// Carries the deletions in progress out, `budget` keys per writer step, until none is
    /// left; then compacts what they freed, forgets them in the caches, removes blobs no
    /// message names any more, and drops old tombstones. Gives how many deletions finished.
    pub async fn advance_deletions(
        &self,
        store: &Arc<Store>,
        budget: usize,
    ) -> Result<usize, IngestError> {
        let mut finished: Vec<FinishedDeletion> = Vec::new();
        let mut count = 0;
        if !store.pending_deletions(1).map_err(storage)?.is_empty() {
            loop {
                match self.writer.delete(DeleteWork::Step { budget }).await? {
                    DeleteReply::Stepped {
                        finished: done,
                        pending,
                    } => {
                        count += done.len();
                        finished.extend(done);
                        if finished.len() >= COMPACT_EVERY {
                            compact(store, std::mem::take(&mut finished)).await?;
                        }
                        if !pending {
                            break;
                        }
                    }
                    other => return Err(unexpected(other)),
                }
            }
        }
        if !finished.is_empty() {
            compact(store, finished).await?;
        }
        self.collect_media(store).await?;
        let cutoff_ns = now_ns().saturating_sub(TOMBSTONE.as_nanos() as u64);
        if !store
            .expired_tombstones(cutoff_ns, 1)
            .map_err(storage)?
            .is_empty()
        {
            let work = DeleteWork::PruneTombstones {
                cutoff_ns,
                limit: 4096,
            };
            self.writer.delete(work).await?;
        }
        Ok(count)
    }

    /// Removes the blobs whose last naming message was deleted and that no message names now.
    async fn collect_media(&self, store: &Arc<Store>) -> Result<(), IngestError> {
        let Some(media) = &self.media else {
            return Ok(());
        };
        while !store.media_candidates(1).map_err(storage)?.is_empty() {
            let epoch = media.gc_epoch();
            let unreferenced = match self
                .writer
                .delete(DeleteWork::MediaCheck { limit: MEDIA_CHECK })
                .await?
            {
                DeleteReply::Unreferenced(digests) => digests,
                other => return Err(unexpected(other)),
            };
            let gone = media.remove_unreferenced(&unreferenced, &epoch).await?;
            let kept = unreferenced.len() - gone.len();
            if !gone.is_empty() {
                let work = DeleteWork::MediaRemoved { digests: gone };
                self.writer.delete(work).await?;
            }
            // Held by a request (kept for now): the next round looks again.
            if kept > 0 || unreferenced.is_empty() {
                break;
            }
        }
        Ok(())
    }

    /// Starts deleting the runs over for longer than `retention` (at most [`RETENTION_SCAN`]
    /// looked at per call, from `cursor`, which is advanced); gives how many started.
    pub async fn sweep_retention(
        &self,
        store: &Arc<Store>,
        retention: Duration,
        cursor: &mut Option<Vec<u8>>,
    ) -> Result<usize, IngestError> {
        let cutoff_ns = now_ns().saturating_sub(retention.as_nanos() as u64);
        let reader = store.clone();
        let after = cursor.take();
        let (ids, next) = tokio::task::spawn_blocking(move || {
            reader.ended_runs_before(cutoff_ns, after.as_deref(), RETENTION_SCAN)
        })
        .await
        .map_err(|e| IngestError::Internal(e.to_string()))?
        .map_err(storage)?;
        *cursor = next;
        let mut started = 0;
        for run in ids {
            let work = DeleteWork::Run {
                run,
                reason: "retention".into(),
                over_before_ns: Some(cutoff_ns),
            };
            match self.writer.delete(work).await? {
                DeleteReply::Started(ids) => started += ids.len(),
                other => return Err(unexpected(other)),
            }
        }
        Ok(started)
    }
}

/// Compacts the ranges the finished deletions freed and forgets them in the caches (on the
/// blocking pool: a compaction reads and writes files).
async fn compact(store: &Arc<Store>, finished: Vec<FinishedDeletion>) -> Result<(), IngestError> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || {
        store.forget_deleted(&finished);
        store.compact_deleted(&finished)
    })
    .await
    .map_err(|e| IngestError::Internal(e.to_string()))?
    .map_err(storage)
}

/// The deletion driver and the retention sweep, until `stop`: carries out deletions in
/// progress (those a crash interrupted first), and, with `retention`, starts deleting the
/// runs over for longer.
pub async fn run_deletions(
    ingest: Arc<Ingest>,
    store: Arc<Store>,
    retention: Option<Duration>,
    stop: impl Future<Output = ()>,
) {
    let budget = delete_batch();
    let mut ticker = tokio::time::interval(DRIVER_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let retention_period =
        retention.map(|r| (r / 4).clamp(Duration::from_millis(200), Duration::from_secs(60)));
    let mut last_sweep: Option<tokio::time::Instant> = None;
    let mut cursor: Option<Vec<u8>> = None;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = ticker.tick() => {}
        }
        if let (Some(retention), Some(period)) = (retention, retention_period) {
            if last_sweep.is_none_or(|at| at.elapsed() >= period) || cursor.is_some() {
                last_sweep = Some(tokio::time::Instant::now());
                match ingest.sweep_retention(&store, retention, &mut cursor).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(runs = n, "deleting runs past the retention period"),
                    Err(e) => tracing::warn!(error = %e, "retention sweep failed"),
                }
            }
        }
        match ingest.advance_deletions(&store, budget).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(runs = n, "runs deleted"),
            Err(e) => tracing::warn!(error = %e, "deleting runs failed; retrying"),
        }
    }
}
