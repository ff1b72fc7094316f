//! Loading continuations ahead: a run that stopped sending spans (its agent finished, crashed
//! or timed out) is when an orchestrator asks for its continuation, so once a long run has been
//! quiet for [`QUIET`] its latest complete history, effects and provenance are read into the
//! history and context caches, and the answers to the requests for a latest snapshot seen most
//! recently (the formats orchestrators continue with) are rendered and kept. The first
//! continuation request is then answered from memory instead of decoding and rendering the
//! whole history. A history the history cache could not keep (over its byte budget) is not
//! loaded ahead.
//!
//! After a restart the caches are empty and no run has been written yet, so nothing would go
//! quiet: at start the newest running and waiting runs (at most [`AT_OPEN_RUNS`], while the
//! history cache is under half full) are loaded ahead once ([`load_ahead_at_open`]), and the
//! answers to the recent requests kept in the store from before the restart are rendered; an
//! orchestrator resuming them after the restart in a format it asked for before then gets the
//! answer from memory.

use std::sync::Arc;
use std::time::Duration;

use super::context::ContextCache;
use super::history::{load, ContinuationError, History, Selector};
use super::rendered::MediaMode;
use super::respond::Continuations;
use crate::domain::SnapshotState;
use crate::store::{Store, WrittenRun};

/// How long a run must go without a write before its continuation is loaded ahead.
pub const QUIET: Duration = Duration::from_millis(250);

/// Shortest history worth loading ahead: a shorter one is read quickly enough when asked for.
pub const MIN_MESSAGES: u32 = 256;

/// How often quiet runs are looked for.
const TICK: Duration = Duration::from_millis(100);

/// Most runs loaded ahead at start ([`load_ahead_at_open`]).
pub const AT_OPEN_RUNS: usize = 16;

/// Loads the latest complete continuation of a run into the caches when its history has at
/// least `min_messages`; true when it did.
pub fn warm(
    store: &Store,
    contexts: &ContextCache,
    run_id: &str,
    min_messages: u32,
) -> Result<bool, ContinuationError> {
    Ok(warm_history(store, contexts, run_id, min_messages)?.is_some())
}

/// [`warm`], giving the history it loaded.
fn warm_history(
    store: &Store,
    contexts: &ContextCache,
    run_id: &str,
    min_messages: u32,
) -> Result<Option<History>, ContinuationError> {
    let Some(run) = store.run(run_id)? else {
        return Ok(None);
    };
    let latest = store.last_snapshot(run_id, |r| r.meta.state == SnapshotState::Complete)?;
    let Some(latest) = latest.filter(|s| s.meta.message_count >= min_messages) else {
        return Ok(None);
    };
    // Loaded ahead only if the history cache can keep it: a history over the cache's whole
    // budget would be read for nothing (and held in memory while rendered).
    if !store.history_fits_cache(run_id, &latest.history)? {
        tracing::debug!(
            run_id,
            "history too large for the history cache; not loaded ahead"
        );
        return Ok(None);
    }
    let selector = Selector {
        provenance: true,
        ..Selector::default()
    };
    Ok(Some(load(store, contexts, run, selector)?))
}

/// Loads ahead the continuation of `run_id` when its history has at least `min_messages`, then
/// renders and keeps the answers to the requests for a latest snapshot seen most recently
/// ([`RenderedCache::recent_requests`](super::RenderedCache::recent_requests)); true when the
/// run was long enough. A request that cannot be answered (e.g. a blob missing from the media
/// store) is skipped: it gives its error when it is asked for. So is a request for media inline
/// when the history holds blobs: such an answer is not kept.
pub async fn load_ahead(
    continuations: &Arc<Continuations>,
    run_id: &str,
    min_messages: u32,
) -> Result<bool, ContinuationError> {
    let this = continuations.clone();
    let id = run_id.to_string();
    let loaded = tokio::task::spawn_blocking(move || {
        warm_history(this.store(), this.contexts(), &id, min_messages)
            .map(|h| h.map(|h| h.holds_media()))
    })
    .await
    .map_err(|e| ContinuationError::Task(e.to_string()))??;
    let Some(holds_media) = loaded else {
        return Ok(false);
    };
    for request in continuations.rendered().recent_requests() {
        if holds_media && request.media == MediaMode::Inline {
            continue;
        }
        if let Err(e) = continuations.answer(run_id, request).await {
            tracing::debug!(run_id, error = %e, "continuation not rendered ahead");
        }
    }
    Ok(true)
}

/// The runs an orchestrator may resume after a restart: the newest waiting runs, then the
/// newest running ones, at most `limit` (index order is start order, so the newest are last).
fn active_runs(store: &Store, limit: usize) -> Result<Vec<String>, ContinuationError> {
    let mut out: Vec<String> = Vec::new();
    for ids in [store.waiting_run_ids()?, store.running_run_ids()?] {
        for id in ids.into_iter().rev() {
            if out.len() == limit {
                return Ok(out);
            }
            out.push(id);
        }
    }
    Ok(out)
}

/// Loads ahead, once at start, the continuations of the newest waiting and running runs (at
/// most [`AT_OPEN_RUNS`] runs of at least `min_messages`, and only while the history cache is
/// under half full, so the load ahead never evicts what it loaded); how many it loaded.
pub async fn load_ahead_at_open(
    continuations: &Arc<Continuations>,
    min_messages: u32,
) -> Result<usize, ContinuationError> {
    let this = continuations.clone();
    let runs = tokio::task::spawn_blocking(move || active_runs(this.store(), AT_OPEN_RUNS))
        .await
        .map_err(|e| ContinuationError::Task(e.to_string()))??;
    let mut loaded = 0;
    for run_id in runs {
        let (held, budget) = continuations.store().history_cache_bytes();
        if held >= budget / 2 {
            break;
        }
        if load_ahead(continuations, &run_id, min_messages).await? {
            loaded += 1;
        }
    }
    Ok(loaded)
}

/// Whether a quiet run may have a history worth loading ahead: a run whose last write knew all
/// its snapshots (see [`WrittenRun::longest_history`]) and found them all shorter than
/// [`MIN_MESSAGES`] is not read at all.
fn may_be_long(run: &WrittenRun) -> bool {
    run.longest_history.is_none_or(|n| n >= MIN_MESSAGES)
}

/// Runs until `stop` completes: first loads ahead the runs active at start
/// ([`load_ahead_at_open`]), then every [`TICK`] the continuations of the long runs quiet for
/// [`QUIET`].
pub async fn run(continuations: Arc<Continuations>, stop: impl std::future::Future<Output = ()>) {
    tokio::pin!(stop);
    tokio::select! {
        _ = &mut stop => return,
        loaded = load_ahead_at_open(&continuations, MIN_MESSAGES) => match loaded {
            Ok(0) => {}
            Ok(runs) => tracing::debug!(runs, "continuations of active runs loaded ahead at start"),
            Err(e) => tracing::debug!(error = %e, "continuation prefetch at start failed"),
        },
    }
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {}
        }
        let due = continuations.store().take_quiet_runs(QUIET);
        let mut loaded = 0;
        for WrittenRun { run_id, .. } in due.into_iter().filter(may_be_long) {
            match load_ahead(&continuations, &run_id, MIN_MESSAGES).await {
                Ok(true) => loaded += 1,
                Ok(false) => {}
                Err(e) => tracing::debug!(run_id, error = %e, "continuation prefetch failed"),
            }
        }
        if loaded > 0 {
            tracing::debug!(runs = loaded, "continuations loaded ahead");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_runs_known_to_be_short_are_not_read() {
        let noted = |longest_history| WrittenRun {
            longest_history,
            ..WrittenRun::of("r")
        };
        assert!(may_be_long(&noted(None)), "not known: read");
        assert!(may_be_long(&noted(Some(MIN_MESSAGES))));
        assert!(!may_be_long(&noted(Some(MIN_MESSAGES - 1))));
        assert!(!may_be_long(&noted(Some(0))));
    }
}
