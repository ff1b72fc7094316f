//! Loading continuations ahead: a run that stopped sending spans (its agent finished, crashed
//! or timed out) is when an orchestrator asks for its continuation, so once a long run has been
//! quiet for [`QUIET`] its latest complete history, effects and provenance are read into the
//! history and context caches. The first continuation request is then served from memory
//! instead of decoding the whole history from the store.

use std::sync::Arc;
use std::time::Duration;

use super::context::ContextCache;
use super::history::{load, ContinuationError, Selector};
use crate::domain::SnapshotState;
use crate::store::Store;

/// How long a run must go without a write before its continuation is loaded ahead.
pub const QUIET: Duration = Duration::from_millis(250);

/// Shortest history worth loading ahead: a shorter one is read quickly enough when asked for.
pub const MIN_MESSAGES: u32 = 256;

/// How often quiet runs are looked for.
const TICK: Duration = Duration::from_millis(100);

/// Loads the latest complete continuation of a run into the caches when its history has at
/// least `min_messages`; true when it did.
pub fn warm(
    store: &Store,
    contexts: &ContextCache,
    run_id: &str,
    min_messages: u32,
) -> Result<bool, ContinuationError> {
    let Some(run) = store.run(run_id)? else {
        return Ok(false);
    };
    let latest = store.last_snapshot(run_id, |r| r.meta.state == SnapshotState::Complete)?;
    if latest.is_none_or(|s| s.meta.message_count < min_messages) {
        return Ok(false);
    }
    let selector = Selector {
        provenance: true,
        ..Selector::default()
    };
    load(store, contexts, run, selector)?;
    Ok(true)
}

/// Loads ahead the continuations of the long runs that went quiet; returns how many.
pub fn warm_quiet_runs(
    store: &Store,
    contexts: &ContextCache,
    quiet: Duration,
    min_messages: u32,
) -> usize {
    warm_runs(store, contexts, store.take_quiet_runs(quiet), min_messages)
}

/// Loads ahead the continuations of those of `runs` that are long enough; returns how many.
fn warm_runs(
    store: &Store,
    contexts: &ContextCache,
    runs: Vec<String>,
    min_messages: u32,
) -> usize {
    let mut warmed = 0;
    for run_id in runs {
        match warm(store, contexts, &run_id, min_messages) {
            Ok(true) => warmed += 1,
            Ok(false) => {}
            Err(e) => tracing::debug!(run_id, error = %e, "continuation prefetch failed"),
        }
    }
    warmed
}

/// Runs until `stop` completes: every [`TICK`], loads ahead the continuations of the long runs
/// quiet for [`QUIET`].
pub async fn run(
    store: Arc<Store>,
    contexts: Arc<ContextCache>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {}
        }
        let due = store.take_quiet_runs(QUIET);
        if due.is_empty() {
            continue;
        }
        let (store, contexts) = (store.clone(), contexts.clone());
        let warmed =
            tokio::task::spawn_blocking(move || warm_runs(&store, &contexts, due, MIN_MESSAGES))
                .await
                .unwrap_or(0);
        if warmed > 0 {
            tracing::debug!(runs = warmed, "continuations loaded ahead");
        }
    }
}
