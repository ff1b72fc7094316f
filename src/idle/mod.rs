//! The idle task: once nothing has been written for [`QUIET`], it gives memory back. It
//! flushes the memtables holding writes (their memory is released; the write-ahead log kept
//! them durable until then, so nothing acknowledged is at risk), trims the caches only ingest
//! uses (the chain cache and the interpreter's prefix memo) to an [`IDLE_SHARE`] of their
//! budgets (after that long without writes no entry is hotter than another), forgets the run
//! keys the store caches (a later write or read looks its run's up again), limits RocksDB's
//! block cache to an [`IDLE_SHARE`] of its capacity until the next write, and hands the
//! allocators' free memory back to the OS ([`memory`]): glibc's (RocksDB's), mimalloc's of this
//! thread, and, by asking them, mimalloc's of the runtime's workers and of the writer thread.
//! The continuation caches stay as they are: they serve the next continuation of a quiet run.
//! It runs once per quiet period, and hands free memory back again a few times after it (what
//! the flush set off, compactions and the tables they open, frees memory later); see
//! examples/README.md, "Memory when idle", for what holds the rest. [`IdleCounters`] say when
//! it ran and what it released.

pub mod memory;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::ingest::Ingest;
use crate::store::{Store, StoreError};
use memory::{ask_threads_to_collect, release_free_memory, ProcessMemory};

/// How long nothing is written before the idle task runs.
pub const QUIET: Duration = Duration::from_secs(15);

/// Each trimmed cache keeps entries up to this share of its budget (one eighth).
pub const IDLE_SHARE: usize = 8;

/// Hands the free memory of both allocators back: this thread's and, at their next chance,
/// every other thread's that collects when asked (see [`memory`]).
fn release_everywhere() {
    release_free_memory();
    ask_threads_to_collect();
}

/// Times free memory is handed back again after a shrink, one `quiet` apart, while it stays
/// quiet (background work the flush set off frees memory after the shrink).
const LATER_RELEASES: u32 = 8;

/// What the idle task did since the start, for `/metrics`.
#[derive(Debug, Default)]
pub struct IdleCounters {
    /// Times it ran.
    pub shrinks: AtomicU64,
    /// When it last ran, in seconds since the Unix epoch (0 before it ever ran).
    pub last_shrink_unix_seconds: AtomicU64,
    /// Resident bytes the last run gave back (resident memory before it less after it).
    pub last_released_bytes: AtomicU64,
    /// Memtable bytes the last run flushed.
    pub last_flushed_bytes: AtomicU64,
}

/// The process's idle counters (one idle task per process).
pub static COUNTERS: IdleCounters = IdleCounters {
    shrinks: AtomicU64::new(0),
    last_shrink_unix_seconds: AtomicU64::new(0),
    last_released_bytes: AtomicU64::new(0),
    last_flushed_bytes: AtomicU64::new(0),
};

/// What one run of the idle task did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shrink {
    /// Bytes of the memtables flushed.
    pub flushed_bytes: u64,
    /// Estimated bytes dropped from the chain cache, the prefix memo and the run-key cache.
    pub trimmed_cache_bytes: u64,
    /// Resident memory before, when the platform says.
    pub resident_before: Option<u64>,
    /// Resident memory after, when the platform says.
    pub resident_after: Option<u64>,
}

/// A fingerprint of the writes so far: it changes whenever ingest takes or refuses anything,
/// or anything else (deletions, sweeps, the API) writes to the memtables.
fn activity(store: &Store, ingest: &Ingest) -> (u64, u64) {
    let c = ingest.counters();
    let counted = [
        &c.accepted_spans,
        &c.refused_spans,
        &c.accepted_log_records,
        &c.refused_log_records,
        &c.accepted_metric_points,
        &c.refused_metric_points,
        &c.rejected_requests,
    ]
    .iter()
    .fold(0u64, |sum, counter| {
        sum.wrapping_add(counter.load(Ordering::Relaxed))
    });
    (counted, store.kv().memory().memtables)
}

/// Flushes, trims and releases once (see the module docs); blocking (a flush waits for its
/// data files to be written). Counted in [`COUNTERS`].
pub fn shrink(store: &Store, ingest: &Ingest) -> Result<Shrink, StoreError> {
    let resident_before = ProcessMemory::read().map(|m| m.resident);
    let flushed_bytes = store.kv().flush_memtables()?;
    let (chain_before, chain_budget) = store.chain_cache_bytes();
    store.set_chain_cache_budget(chain_budget / IDLE_SHARE);
    store.set_chain_cache_budget(chain_budget);
    let chain_dropped = chain_before.saturating_sub(store.chain_cache_bytes().0);
    let memo = ingest.prefix_memo();
    let memo_dropped = memo.trim(memo.budget() / IDLE_SHARE);
    let run_keys_dropped = store.forget_run_keys();
    store.kv().divide_block_cache(IDLE_SHARE as u64);
    release_everywhere();
    let resident_after = ProcessMemory::read().map(|m| m.resident);
    let done = Shrink {
        flushed_bytes,
        trimmed_cache_bytes: (chain_dropped + memo_dropped + run_keys_dropped) as u64,
        resident_before,
        resident_after,
    };
    let released = match (resident_before, resident_after) {
        (Some(before), Some(after)) => before.saturating_sub(after),
        _ => 0,
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    COUNTERS.shrinks.fetch_add(1, Ordering::Relaxed);
    COUNTERS
        .last_shrink_unix_seconds
        .store(now, Ordering::Relaxed);
    COUNTERS
        .last_released_bytes
        .store(released, Ordering::Relaxed);
    COUNTERS
        .last_flushed_bytes
        .store(flushed_bytes, Ordering::Relaxed);
    Ok(done)
}

/// Runs [`shrink`] once whenever nothing has been written for `quiet` (checked every quarter
/// of it, at most every second), until `stop`. After a run it waits for writes to start and
/// stop again before the next, handing free memory back again every `quiet` meanwhile (at most
/// [`LATER_RELEASES`] times).
pub async fn run(
    store: Arc<Store>,
    ingest: Arc<Ingest>,
    quiet: Duration,
    stop: impl Future<Output = ()>,
) {
    let period = (quiet / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    let mut last = activity(&store, &ingest);
    let mut quiet_since = tokio::time::Instant::now();
    let mut shrunk = false;
    // Releases after the shrink in this quiet period, and when the last one ran.
    let mut releases = 0;
    let mut released_at = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = ticker.tick() => {}
        }
        let now = activity(&store, &ingest);
        if now != last {
            last = now;
            quiet_since = tokio::time::Instant::now();
            if shrunk {
                // Writes again: the block cache gets its capacity back.
                store.kv().divide_block_cache(1);
            }
            shrunk = false;
            continue;
        }
        if shrunk {
            // What the flush set off (compactions, new table readers) frees its memory after
            // the shrink: give it back too, every `quiet` for a while.
            if releases < LATER_RELEASES && released_at.elapsed() >= quiet {
                releases += 1;
                released_at = tokio::time::Instant::now();
                let _ = tokio::task::spawn_blocking(release_everywhere).await;
            }
            continue;
        }
        if quiet_since.elapsed() < quiet {
            continue;
        }
        let (s, i) = (store.clone(), ingest.clone());
        match tokio::task::spawn_blocking(move || shrink(&s, &i)).await {
            Ok(Ok(done)) => tracing::info!(
                flushed_bytes = done.flushed_bytes,
                trimmed_cache_bytes = done.trimmed_cache_bytes,
                resident_before = done.resident_before,
                resident_after = done.resident_after,
                "idle: memory given back"
            ),
            Ok(Err(e)) => tracing::warn!(error = %e, "idle: flushing the memtables failed"),
            Err(e) => tracing::warn!(error = %e, "idle: the shrink task failed"),
        }
        shrunk = true;
        releases = 0;
        released_at = tokio::time::Instant::now();
        // The flush changed the memtables: what they hold now is the quiet state.
        last = activity(&store, &ingest);
    }
}

/// The idle counters and the collection asks are process-wide: one test at a time uses them.
#[cfg(test)]
pub(crate) static TEST_SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[cfg(test)]
mod tests;
