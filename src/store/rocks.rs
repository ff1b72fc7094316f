//! The RocksDB implementation of [`KvStore`]: the database on disk, with its tuning (one block
//! cache shared by the column families, small outbox memtables, memtable bloom filters for the
//! column families probed for absent keys).

use std::path::Path;

use rocksdb::{ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteOptions, DB};

use super::column::Cf;
use super::error::StoreError;
use super::kv::{KvBatch, KvStore, Op, Visit};

/// Bytes of the block cache shared by the column families.
pub const BLOCK_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// Memtable size of the outbox column family.
pub const OUTBOX_MEMTABLE_BYTES: usize = 8 * 1024 * 1024;
/// Size of the in-memory bloom filter of a memtable, as a fraction of the memtable's size (64 MiB
/// by default: 640 KiB of filter each), for the column families in [`MEMTABLE_BLOOM_CFS`].
pub const MEMTABLE_BLOOM_RATIO: f64 = 0.01;
/// Column families that ingest probes for keys that are mostly absent (is this fact, message,
/// history node, tool-call count, span or grouping span stored yet?). Their memtables keep a
/// whole-key bloom filter, so such a probe costs a few bit tests instead of a search of a skip
/// list that grows with everything written since the last flush. Memory only: the files on disk
/// are the same.
pub const MEMTABLE_BLOOM_CFS: [Cf; 6] = [
    Cf::Facts,
    Cf::Messages,
    Cf::History,
    Cf::RunState,
    Cf::SpanRuns,
    Cf::GroupSpans,
];

/// A RocksDB database holding every column family of [`Cf`].
pub struct RocksKv {
    db: DB,
}

impl RocksKv {
    /// Opens (creating if needed) the database in `dir` with every column family.
    pub fn open(dir: &Path) -> Result<RocksKv, StoreError> {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.set_compression_type(rocksdb::DBCompressionType::Lz4);
        options.set_bottommost_compression_type(rocksdb::DBCompressionType::Zstd);
        options.increase_parallelism(2);
        // One block cache for every column family, so a continuation's reads of a hot run hit
        // uncompressed blocks.
        let cache = rocksdb::Cache::new_lru_cache(BLOCK_CACHE_BYTES);
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(&cache);
        let descriptors = Cf::NAMED.iter().map(|cf| {
            let mut cf_options = Options::default();
            cf_options.set_block_based_table_factory(&table);
            cf_options.set_compression_type(rocksdb::DBCompressionType::Lz4);
            cf_options.set_bottommost_compression_type(rocksdb::DBCompressionType::Zstd);
            if *cf == Cf::Outbox {
                // Entries live briefly (deleted once sent): small memtables bound the memory the
                // outbox takes to OUTBOX_MEMTABLE_BYTES x 2, whatever the backlog.
                cf_options.set_write_buffer_size(OUTBOX_MEMTABLE_BYTES);
                cf_options.set_max_write_buffer_number(2);
            }
            if MEMTABLE_BLOOM_CFS.contains(cf) {
                cf_options.set_memtable_whole_key_filtering(true);
                cf_options.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
            }
            ColumnFamilyDescriptor::new(cf.name(), cf_options)
        });
        let db = DB::open_cf_descriptors(&options, dir, descriptors)?;
        let kv = RocksKv { db };
        for cf in Cf::EVERY {
            kv.handle(cf)?;
        }
        Ok(kv)
    }

    fn handle(&self, cf: Cf) -> Result<&rocksdb::ColumnFamily, StoreError> {
        self.db
            .cf_handle(cf.name())
            .ok_or(StoreError::MissingColumnFamily(cf))
    }
}

impl KvStore for RocksKv {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .db
            .get_pinned_cf(self.handle(cf)?, key)?
            .map(|v| v.to_vec()))
    }

    fn contains(&self, cf: Cf, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.db.get_pinned_cf(self.handle(cf)?, key)?.is_some())
    }

    fn multi_get(&self, cf: Cf, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        self.db
            .batched_multi_get_cf(self.handle(cf)?, keys, false)
            .into_iter()
            .map(|result| Ok(result?.map(|v| v.to_vec())))
            .collect()
    }

    fn scan(&self, cf: Cf, prefix: &[u8], from: &[u8], visit: Visit<'_>) -> Result<(), StoreError> {
        // The raw iterator lends each key and value instead of copying them out.
        let mut iter = self.db.raw_iterator_cf(self.handle(cf)?);
        iter.seek(from);
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            if !key.starts_with(prefix) || !visit(key, value)? {
                return Ok(());
            }
            iter.next();
        }
        iter.status()?;
        Ok(())
    }

    fn scan_back(
        &self,
        cf: Cf,
        prefix: &[u8],
        from: Option<&[u8]>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        let handle = self.handle(cf)?;
        let mode = match from {
            Some(from) => IteratorMode::From(from, Direction::Reverse),
            None => IteratorMode::End,
        };
        for item in self.db.iterator_cf(handle, mode) {
            let (key, value) = item?;
            if !key.starts_with(prefix) || !visit(&key, &value)? {
                break;
            }
        }
        Ok(())
    }

    fn write(&self, batch: KvBatch, sync: bool) -> Result<u64, StoreError> {
        let mut rocks = rocksdb::WriteBatch::default();
        for op in batch.ops() {
            match op {
                Op::Put { cf, key, value } => rocks.put_cf(self.handle(*cf)?, key, value),
                Op::Delete { cf, key } => rocks.delete_cf(self.handle(*cf)?, key),
                Op::DeleteRange { cf, from, to } => {
                    if from < to {
                        rocks.delete_range_cf(self.handle(*cf)?, from, to)
                    }
                }
            }
        }
        let mut options = WriteOptions::default();
        options.set_sync(sync);
        options.disable_wal(false);
        let bytes = rocks.size_in_bytes() as u64;
        self.db.write_opt(rocks, &options)?;
        Ok(bytes)
    }

    fn flush(&self) -> Result<(), StoreError> {
        for cf in Cf::NAMED {
            self.db.flush_cf(self.handle(cf)?)?;
        }
        Ok(())
    }

    fn compact(&self) -> Result<(), StoreError> {
        for cf in Cf::NAMED {
            self.db
                .compact_range_cf(self.handle(cf)?, None::<&[u8]>, None::<&[u8]>);
        }
        Ok(())
    }

    fn compact_range(&self, cf: Cf, from: &[u8], to: &[u8]) -> Result<(), StoreError> {
        if from < to {
            self.db
                .compact_range_cf(self.handle(cf)?, Some(from), Some(to));
        }
        Ok(())
    }

    fn estimated_keys(&self, cf: Cf) -> Result<u64, StoreError> {
        Ok(self
            .db
            .property_int_value_cf(self.handle(cf)?, "rocksdb.estimate-num-keys")?
            .unwrap_or(0))
    }

    fn live_bytes(&self, cf: Cf) -> u64 {
        self.handle(cf)
            .ok()
            .and_then(|h| {
                self.db
                    .property_int_value_cf(h, "rocksdb.total-sst-files-size")
                    .ok()
                    .flatten()
            })
            .unwrap_or(0)
    }
}
