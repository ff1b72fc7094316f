//! Sizes and upkeep of the store, for reporting and benchmarks.

use super::core::Store;
use super::error::StoreError;
use super::keys::{cf, Cf};

impl Store {
    /// Bytes of the keys and values of a column family before compression (a full scan, for
    /// reporting and benchmarks).
    pub fn logical_bytes(&self, cf: Cf) -> Result<u64, StoreError> {
        let mut total = 0u64;
        self.scan(cf, b"", b"", |k, v| {
            total += (k.len() + v.len()) as u64;
            Ok(true)
        })?;
        Ok(total)
    }

    /// The backend's estimate of the number of keys in a column family (cheap; for `/metrics`).
    pub fn estimated_keys(&self, cf: Cf) -> Result<u64, StoreError> {
        self.kv.estimated_keys(cf)
    }

    /// Flushes the memtables to data files (for reporting disk use).
    pub fn flush(&self) -> Result<(), StoreError> {
        self.kv.flush()
    }

    /// Writes a consistent copy of the store to the directory `dir` (which must not exist yet),
    /// its data files hard-linked where the file system allows, while the store stays open: a
    /// copy to open beside it (benchmarks that must not change the store they measure). False
    /// for a store in memory, which has no files to copy.
    pub fn checkpoint(&self, dir: &std::path::Path) -> Result<bool, StoreError> {
        self.kv.checkpoint(dir)
    }

    /// Compacts every column family fully (for reporting disk use after compaction).
    pub fn compact(&self) -> Result<(), StoreError> {
        self.kv.compact()
    }

    /// Bytes on disk of one column family's live data files (for reporting).
    pub fn cf_live_bytes(&self, cf: Cf) -> u64 {
        self.kv.live_bytes(cf)
    }

    /// Approximate bytes on disk of the live data files (for reporting).
    pub fn live_bytes(&self) -> u64 {
        cf::ALL.iter().map(|cf| self.kv.live_bytes(*cf)).sum()
    }
}
