//! The store itself: a [`KvStore`] with the in-memory state kept beside it (run-key mappings,
//! caches, counters), one write batch per commit, and the typed reads the other store modules
//! build on. Opening is in `store::open`; the domain reads and writes are in the modules named
//! after what they read and write.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::activity::{RecentWrites, WrittenRun};
use super::chain_cache::ChainCache;
use super::changes::{ChangeLog, Touched};
use super::column::Cf;
use super::error::StoreError;
use super::history_cache::HistoryCache;
use super::kv::{KvBatch, KvStore};
use super::run_key_cache::{BatchRunKeys, RunKeyCache};
use crate::records::json;

thread_local! {
    /// Time spent in [`Store::write_batch`]'s key-value writes on this thread.
    static WRITING: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// The store: runs, events, snapshots, effects, facts and their indexes, and the outbox, over a
/// [`KvStore`] (RocksDB from [`Store::open`], memory from [`Store::in_memory`]).
pub struct Store {
    /// The key-value store underneath.
    pub(super) kv: Box<dyn KvStore>,
    /// Whether a commit waits until it is durable.
    pub(super) sync: bool,
    /// Bytes of the write batches committed since opening (keys, values and batch framing).
    committed: AtomicU64,
    /// Node ids of recently stored input histories (see [`ChainCache`]).
    pub(super) chains: Mutex<ChainCache>,
    /// Decoded histories of recently read snapshots (see [`super::history_cache`]).
    pub(super) resolved: Mutex<HistoryCache>,
    /// The next free run key (see [`super::run_keys`]).
    pub(super) next_run_key: AtomicU64,
    /// Committed run keys recently used.
    pub(super) run_keys: Mutex<RunKeyCache>,
    /// Runs written recently (see [`super::activity`]).
    pub(super) recent: Mutex<RecentWrites>,
    /// Where recent commits changed each run's ledger and model-request records (see
    /// [`super::changes`]).
    pub(super) changes: Mutex<ChangeLog>,
    /// Claims of an alias another run owns, refused since opening (see [`super::aliases`]).
    pub(super) alias_conflicts: AtomicU64,
    /// Where lineage is looked for (see `store::lineage_index`).
    pub(super) lineage_mode: AtomicU8,
    /// Whether a log record may be stored: false while the store has never held one since it
    /// was opened empty of them, so a span's log records are not looked for (a scan each).
    pub(super) span_logs_stored: AtomicBool,
    /// Whether a run may wait for a tool span as its parent (`pending_parents`): false while the
    /// store has never held such a key since it was opened empty of them, so a tool span's
    /// waiting runs are not looked for (a scan each, at every tool call).
    pub(super) pending_children_stored: AtomicBool,
    /// Whether a run may wait for a snapshot with a given history (the lineage index's `w`
    /// keys): false likewise, so the runs waiting for a history are not looked for (a scan
    /// each, at every snapshot).
    pub(super) lineage_wanted_stored: AtomicBool,
    /// Whether every run with a stored fact has a run meta (see [`super::facts`]): a run with
    /// neither a record nor a meta then has no fact, and its facts are not scanned for.
    pub(super) fact_runs_have_meta: AtomicBool,
}

/// A set of writes committed atomically by [`Store::commit`].
pub struct WriteBatch<'a> {
    pub(super) store: &'a Store,
    pub(super) batch: KvBatch,
    /// Run keys given or taken away by this batch.
    pub(super) run_keys: BatchRunKeys,
}

/// The JSON form of a record for column family `cf`, or why it cannot be stored (it does not
/// serialise, or it would not read back: see [`json::MAX_RECORD_DEPTH`]).
pub fn encode_json<T: Serialize + ?Sized>(cf: Cf, value: &T) -> Result<Vec<u8>, StoreError> {
    json::encode(value).map_err(|e| StoreError::Encode {
        cf,
        reason: e.reason,
    })
}

/// Decodes a JSON record of column family `cf`.
pub(super) fn decode<T: DeserializeOwned>(cf: Cf, bytes: &[u8]) -> Result<T, StoreError> {
    json::decode(bytes).map_err(|e| StoreError::corrupt_json(cf, e))
}

/// Locks one of the store's in-memory caches. A cache whose lock was poisoned (a panic while
/// it was held, caught by the writer) may be half-updated: it is emptied and used again, never
/// left disabled for the rest of the process (every cache here is only a shortcut).
pub(super) fn lock_cache<T: Default>(cache: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    cache.lock().unwrap_or_else(|poisoned| {
        let mut guard = poisoned.into_inner();
        *guard = T::default();
        cache.clear_poison();
        guard
    })
}

impl WriteBatch<'_> {
    /// Puts a JSON-encoded value; a value that does not serialise, or would not read back
    /// (see [`json::MAX_RECORD_DEPTH`]), is an error and nothing is written.
    pub fn put_json<T: Serialize + ?Sized>(
        &mut self,
        cf: Cf,
        key: &[u8],
        value: &T,
    ) -> Result<(), StoreError> {
        let bytes = encode_json(cf, value)?;
        self.batch.put(cf, key, bytes);
        Ok(())
    }

    /// Puts raw bytes.
    pub fn put_raw(&mut self, cf: Cf, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.batch.put(cf, key, value.to_vec());
        Ok(())
    }

    /// Deletes the keys from `from` (inclusive) to `to` (exclusive).
    pub(super) fn delete_range(&mut self, cf: Cf, from: &[u8], to: &[u8]) {
        self.batch.delete_range(cf, from, to);
    }

    /// Deletes a key.
    pub fn delete(&mut self, cf: Cf, key: &[u8]) -> Result<(), StoreError> {
        self.batch.delete(cf, key);
        Ok(())
    }

    /// Number of operations in the batch.
    pub fn len(&self) -> usize {
        self.batch.len()
    }

    /// True when the batch holds nothing.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }
}

impl Store {
    /// A store over `kv` with empty caches; `next_run_key` is set by the opener.
    pub(super) fn assemble(kv: Box<dyn KvStore>, sync: bool) -> Store {
        Store {
            kv,
            sync,
            committed: AtomicU64::new(0),
            chains: Mutex::new(Default::default()),
            resolved: Mutex::new(Default::default()),
            next_run_key: AtomicU64::new(0),
            run_keys: Mutex::new(Default::default()),
            recent: Mutex::new(Default::default()),
            changes: Mutex::new(Default::default()),
            alias_conflicts: AtomicU64::new(0),
            lineage_mode: AtomicU8::new(0),
            span_logs_stored: AtomicBool::new(false),
            pending_children_stored: AtomicBool::new(false),
            lineage_wanted_stored: AtomicBool::new(false),
            fact_runs_have_meta: AtomicBool::new(false),
        }
    }

    /// Starts a write batch.
    pub fn batch(&self) -> WriteBatch<'_> {
        WriteBatch {
            store: self,
            batch: KvBatch::default(),
            run_keys: Default::default(),
        }
    }

    /// Commits a batch atomically, with the WAL on and fsync when configured.
    pub fn commit(&self, batch: WriteBatch<'_>) -> Result<(), StoreError> {
        self.commit_runs(batch, &[])
    }

    /// Commits a batch that wrote the derived state of `runs` (recorded as recently written
    /// once the commit succeeded).
    pub fn commit_runs(
        &self,
        batch: WriteBatch<'_>,
        runs: &[WrittenRun],
    ) -> Result<(), StoreError> {
        self.write_batch(batch, self.sync)?;
        lock_cache(&self.recent).note(runs);
        Ok(())
    }

    /// Writes a batch (durably when `sync`), then applies its run keys to the cache and notes
    /// where it changed runs' ledgers and model-request records (also when the write failed: a
    /// reader then only reads those again).
    pub(super) fn write_batch(&self, batch: WriteBatch<'_>, sync: bool) -> Result<(), StoreError> {
        let touched = Touched::of(batch.batch.ops());
        let started = Instant::now();
        let written = self.kv.write(batch.batch, sync);
        WRITING.with(|spent| spent.set(spent.get().saturating_add(started.elapsed())));
        if let Some(touched) = touched {
            lock_cache(&self.changes).note(touched);
        }
        let bytes = written?;
        lock_cache(&self.run_keys).settle(batch.run_keys);
        self.committed.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Time this thread has spent in the key-value store's writes of batches (the WAL, its
    /// sync, the memtables), since it started: the difference across a call tells that call's
    /// share (the writer's `rocksdb_write` stage).
    pub fn writing_on_this_thread() -> Duration {
        WRITING.with(Cell::get)
    }

    /// Bytes of the write batches committed since the store was opened (for reporting).
    pub fn committed_bytes(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }

    /// The key-value store underneath.
    pub fn kv(&self) -> &dyn KvStore {
        self.kv.as_ref()
    }

    /// A JSON record.
    pub(super) fn get_json<T: DeserializeOwned>(
        &self,
        cf: Cf,
        key: &[u8],
    ) -> Result<Option<T>, StoreError> {
        match self.kv.get(cf, key)? {
            Some(bytes) => decode(cf, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// A UTF-8 text value (none when absent or not UTF-8).
    pub(super) fn get_text(&self, cf: Cf, key: &[u8]) -> Result<Option<String>, StoreError> {
        Ok(self
            .kv
            .get(cf, key)?
            .and_then(|v| String::from_utf8(v).ok()))
    }

    /// Visits `(key, value)` pairs whose key starts with `prefix`, in key order, from `start`
    /// (a key at or after the prefix) until `visit` returns false.
    pub(super) fn scan(
        &self,
        cf: Cf,
        prefix: &[u8],
        start: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.kv.scan(cf, prefix, start, &mut visit)
    }

    /// The JSON records whose key starts with `prefix`, in key order.
    pub(super) fn scan_json<T: DeserializeOwned>(
        &self,
        cf: Cf,
        prefix: &[u8],
    ) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::new();
        self.scan(cf, prefix, prefix, |_, v| {
            out.push(decode(cf, v)?);
            Ok(true)
        })?;
        Ok(out)
    }
}
