//! Writers wait at the memtable budget in stepline, not inside RocksDB.
//!
//! RocksDB's write buffer manager can itself stop writers past its budget (`allow_stall`), but
//! the one flush it starts then is of the column family with the oldest memtable, however
//! small, and nothing starts another while writes stand still: a commit that took the memtables
//! from under seven eighths of the budget (where RocksDB starts flushing) to past all of it stopped
//! every write for 15 s, until the idle task flushed. A flush asked for by hand does not help
//! then either, as it queues behind the stopped writes.
//!
//! So RocksDB's stop is off, and [`wait_under_budget`] runs before each write instead, outside
//! RocksDB's write path: while the memtables (those being flushed included) hold the whole
//! budget, it asks for a flush of the largest memtable not already being flushed, and waits for
//! the memory to be freed. RocksDB still starts its own flushes past seven eighths, and from six
//! eighths on a write asks for a flush of the largest memtable without waiting
//! ([`flush_ahead`]), so the flush has the rest of the budget to finish in.

use std::time::{Duration, Instant};

use rocksdb::{ColumnFamily, FlushOptions, WriteBufferManager, DB};

use super::error::StoreError;

/// Longest a write waits for the memtables to come under their budget. Past it the write goes
/// ahead over the budget (and fails if RocksDB has stopped on an error), rather than waiting
/// on a flush that does not end.
pub const WAIT_LIMIT: Duration = Duration::from_secs(10);
/// How often a waiting writer looks at the memtables' memory again.
const POLL: Duration = Duration::from_millis(1);
/// How long a writer waits on the flushes it asked for before it asks for another.
const ASK_AGAIN: Duration = Duration::from_millis(50);

/// What one wait at the budget did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Waited {
    /// Flushes asked for.
    pub flushes: u32,
    /// Time spent waiting (zero when the memtables were under the budget).
    pub time: Duration,
}

/// Share of the budget past which a write asks for a flush of the largest memtable without
/// waiting for it ([`flush_ahead`]), in eighths: below RocksDB's own seven eighths, whose flush is
/// of the oldest memtable, however small.
pub const FLUSH_AHEAD_EIGHTHS: usize = 6;
/// Least time between two flushes asked for ahead of the budget.
pub const FLUSH_AHEAD_EVERY: Duration = Duration::from_millis(20);

/// Whether the memtables of `buffers` hold [`FLUSH_AHEAD_EIGHTHS`] of their budget or more.
pub fn near_budget(buffers: &WriteBufferManager) -> bool {
    buffers.get_usage() >= buffers.get_buffer_size() / 8 * FLUSH_AHEAD_EIGHTHS
}

/// Asks for a flush of the largest memtable (without waiting) when the memtables are
/// [`near_budget`], so that the flush, which runs at the lowest CPU priority on what ingest
/// leaves, has the rest of the budget to finish in before a write meets the full budget and
/// waits ([`wait_under_budget`]). The caller asks at most once every [`FLUSH_AHEAD_EVERY`]; none
/// is asked for while a memtable is being flushed (under full load that would be a flush of
/// every memtable in turn, each small). Says whether it asked for one.
pub fn flush_ahead(db: &DB, handles: &[&ColumnFamily]) -> Result<bool, StoreError> {
    flush_largest(db, handles, true)
}

/// Waits until the memtables of `db` hold less than the budget of `buffers`, asking for flushes
/// of the largest memtables meanwhile; gives up after [`WAIT_LIMIT`]. `handles` are the column
/// families that may be flushed.
pub fn wait_under_budget(
    db: &DB,
    buffers: &WriteBufferManager,
    handles: &[&ColumnFamily],
) -> Result<Waited, StoreError> {
    let budget = buffers.get_buffer_size();
    if buffers.get_usage() < budget {
        return Ok(Waited::default());
    }
    let start = Instant::now();
    let mut waited = Waited::default();
    let mut asked: Option<Instant> = None;
    while buffers.get_usage() >= budget && start.elapsed() < WAIT_LIMIT {
        if asked.is_none_or(|at| at.elapsed() >= ASK_AGAIN) {
            if flush_largest(db, handles, false)? {
                waited.flushes = waited.flushes.saturating_add(1);
            }
            asked = Some(Instant::now());
        }
        std::thread::sleep(POLL);
    }
    waited.time = start.elapsed();
    Ok(waited)
}

/// Asks for a flush (without waiting for it) of the largest active memtable among `handles`
/// whose column family has no flush pending (of none at all while any has one, when `alone`);
/// says whether there was one.
fn flush_largest(db: &DB, handles: &[&ColumnFamily], alone: bool) -> Result<bool, StoreError> {
    let mut largest: Option<(u64, &ColumnFamily)> = None;
    for handle in handles {
        let pending = db
            .property_int_value_cf(*handle, "rocksdb.num-immutable-mem-table")?
            .unwrap_or(0);
        if pending > 0 {
            if alone {
                return Ok(false);
            }
            continue;
        }
        if let Some(bytes) = active_memtable_bytes(db, handle)? {
            if largest.is_none_or(|(most, _)| bytes > most) {
                largest = Some((bytes, handle));
            }
        }
    }
    let Some((_, handle)) = largest else {
        return Ok(false);
    };
    let mut options = FlushOptions::default();
    options.set_wait(false);
    db.flush_cf_opt(handle, &options)?;
    Ok(true)
}

/// Bytes of the active memtable of `handle`'s column family, none when it holds no writes
/// (flushing it would be a no-op that still waits its turn in the flush queue).
pub fn active_memtable_bytes(db: &DB, handle: &ColumnFamily) -> Result<Option<u64>, StoreError> {
    let entries = db
        .property_int_value_cf(handle, "rocksdb.num-entries-active-mem-table")?
        .unwrap_or(0);
    if entries == 0 {
        return Ok(None);
    }
    Ok(Some(
        db.property_int_value_cf(handle, "rocksdb.cur-size-active-mem-table")?
            .unwrap_or(0),
    ))
}
