//! The narrow key-value interface the store is built on: reads by key, in batches of keys and
//! in key order (forwards and backwards), and an atomic write batch, over the closed set of
//! column families [`Cf`]. Keys order bytewise in every implementation (RocksDB's default
//! comparator), so a prefix is a contiguous range.
//!
//! Implementations: [`crate::store::RocksKv`] (the database on disk) and
//! [`crate::store::MemoryKv`] (a twin in memory, for tests and tools).

use super::column::Cf;
use super::error::StoreError;

/// Visits one `(key, value)` pair of a scan; returns false to stop the scan.
pub type Visit<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> Result<bool, StoreError>;

/// One write of a [`KvBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Sets `key` to `value`.
    Put {
        /// Column family.
        cf: Cf,
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
    /// Removes `key`.
    Delete {
        /// Column family.
        cf: Cf,
        /// Key.
        key: Vec<u8>,
    },
    /// Removes every key from `from` (inclusive) to `to` (exclusive); nothing when `from` is
    /// not below `to`.
    DeleteRange {
        /// Column family.
        cf: Cf,
        /// First key removed.
        from: Vec<u8>,
        /// First key kept after the range.
        to: Vec<u8>,
    },
}

/// Writes applied together, in order (a later write of a key wins), all or none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvBatch {
    ops: Vec<Op>,
}

impl KvBatch {
    /// Sets `key` to `value` in `cf`.
    pub fn put(&mut self, cf: Cf, key: &[u8], value: Vec<u8>) {
        self.ops.push(Op::Put {
            cf,
            key: key.to_vec(),
            value,
        });
    }

    /// Removes `key` from `cf`.
    pub fn delete(&mut self, cf: Cf, key: &[u8]) {
        self.ops.push(Op::Delete {
            cf,
            key: key.to_vec(),
        });
    }

    /// Removes the keys of `cf` from `from` (inclusive) to `to` (exclusive).
    pub fn delete_range(&mut self, cf: Cf, from: &[u8], to: &[u8]) {
        self.ops.push(Op::DeleteRange {
            cf,
            from: from.to_vec(),
            to: to.to_vec(),
        });
    }

    /// The writes, in order.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// The writes, in order, taken out.
    pub fn into_ops(self) -> Vec<Op> {
        self.ops
    }

    /// Number of writes.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when the batch holds no write.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// What a [`KvStore`] holds in memory, in bytes (0 where the backend does not say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvMemory {
    /// Memtables of every column family: the ones taking writes, and the ones being flushed.
    pub memtables: u64,
    /// The budget of all memtables together.
    pub memtable_budget: u64,
    /// The block cache in use (data, index and filter blocks, and memtable reservations when the
    /// memtables are charged to it).
    pub block_cache: u64,
    /// The part of the block cache held by readers or pinned, which cannot be evicted now.
    pub block_cache_pinned: u64,
    /// The block cache's capacity now (lower while idle, see
    /// [`KvStore::divide_block_cache`]).
    pub block_cache_capacity: u64,
    /// Table readers of the open data files, beside the block cache.
    pub table_readers: u64,
    /// Writes that waited for the memtables to come under their budget (since open).
    pub budget_waits: u64,
    /// Microseconds those writes waited, in all.
    pub budget_wait_micros: u64,
    /// Flushes writes asked for ahead of the budget, without waiting (since open).
    pub flushes_ahead: u64,
}

/// An ordered key-value store with column families.
pub trait KvStore: Send + Sync {
    /// The value of `key`, none when absent.
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// True when `key` is present (without copying its value out where the backend can).
    fn contains(&self, cf: Cf, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.get(cf, key)?.is_some())
    }

    /// The values of `keys`, in their order.
    fn multi_get(&self, cf: Cf, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError>;

    /// Visits the pairs whose key starts with `prefix`, in ascending key order, from the first
    /// key at or after `from`, until `visit` returns false or a key does not start with
    /// `prefix` (so a `from` below `prefix` visits nothing).
    fn scan(&self, cf: Cf, prefix: &[u8], from: &[u8], visit: Visit<'_>) -> Result<(), StoreError>;

    /// Visits the pairs whose key starts with `prefix`, in descending key order, from the last
    /// key at or before `from` (the last key of `cf` when none), until `visit` returns false or
    /// a key does not start with `prefix`.
    fn scan_back(
        &self,
        cf: Cf,
        prefix: &[u8],
        from: Option<&[u8]>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError>;

    /// Applies `batch` atomically; `sync` waits until it is durable (fsync of the write-ahead
    /// log). Gives the bytes the backend wrote for it (keys, values and framing).
    fn write(&self, batch: KvBatch, sync: bool) -> Result<u64, StoreError>;

    /// Writes buffered data to data files (a no-op in memory).
    fn flush(&self) -> Result<(), StoreError>;

    /// Writes the memtables that hold writes to data files, so their memory goes back (the
    /// write-ahead log stays until then, so nothing acknowledged is at risk); gives the bytes
    /// the flushed memtables held (0 in memory, where there are none).
    fn flush_memtables(&self) -> Result<u64, StoreError> {
        Ok(0)
    }

    /// Compacts every column family fully (a no-op in memory).
    fn compact(&self) -> Result<(), StoreError>;

    /// Writes a consistent copy of the database to the directory `dir` (which must not exist
    /// yet), its data files hard-linked where the file system allows; false where the backend
    /// keeps no files (in memory).
    fn checkpoint(&self, dir: &std::path::Path) -> Result<bool, StoreError> {
        let _ = dir;
        Ok(false)
    }

    /// Compacts the keys of `cf` from `from` (inclusive) to `to` (exclusive), so the space of
    /// what was deleted there comes back (a no-op in memory, where a delete frees at once).
    fn compact_range(&self, cf: Cf, from: &[u8], to: &[u8]) -> Result<(), StoreError>;

    /// An estimate of the number of keys in `cf` (exact in memory).
    fn estimated_keys(&self, cf: Cf) -> Result<u64, StoreError>;

    /// Bytes of `cf`'s live data files on disk (0 in memory).
    fn live_bytes(&self, cf: Cf) -> u64;

    /// Sets the block cache's capacity to its configured capacity divided by `divisor` (what it
    /// holds past that is evicted, except blocks readers pin); 1 (or 0) gives it all back. A
    /// no-op where there is no block cache.
    fn divide_block_cache(&self, divisor: u64) {
        let _ = divisor;
    }

    /// What the backend holds in memory (all 0 where it does not keep such buffers).
    fn memory(&self) -> KvMemory {
        KvMemory::default()
    }
}
