//! The RocksDB implementation of [`KvStore`]: the database on disk, with its tuning. RocksDB's
//! memory is bounded by two budgets: [`MEMTABLE_BUDGET_BYTES`] over the memtables of every
//! column family (one write buffer manager), and [`BLOCK_CACHE_BYTES`], one block cache shared
//! by the column families that also holds their index and filter blocks (so table readers do not
//! grow with the data on disk), with at most [`open_files::table_files_open`] table files open.
//! Memtable bloom filters serve the column families probed for absent keys.

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, Direction, IteratorMode, Options,
    WriteBufferManager, WriteOptions, DB,
};

use super::column::Cf;
use super::error::StoreError;
use super::kv::{KvBatch, KvMemory, KvStore, Op, Visit};
use super::memtable_budget;
use super::open_files;

/// Bytes of the block cache shared by the column families: data blocks, and the index and
/// filter blocks of every table file.
pub const BLOCK_CACHE_BYTES: usize = 16 * 1024 * 1024;
/// Bytes of all memtables together, over every column family: from six eighths of it a write
/// asks for a flush of the largest memtable ([`memtable_budget::flush_ahead`]), past seven
/// eighths RocksDB flushes the column family with the oldest memtable (which also lets the
/// oldest write-ahead log go), and writers wait while the memtables (those being flushed
/// included) hold all of it, in [`memtable_budget::wait_under_budget`], which asks for flushes
/// of the largest memtables (RocksDB's own wait is off: it could stop every write for 15 s,
/// examples/README.md, "Writes that stand still for 15 s").
/// 48 MiB: with the receivers' connections no longer held back by Nagle's algorithm, agent load
/// commits faster, and at 64 MiB the peak of a 10-minute agent soak reached 155 MB (137.9 MB at
/// 48 MiB, for 8-12% fewer agent spans per CPU-second; see examples/README.md).
pub const MEMTABLE_BUDGET_BYTES: usize = 48 * 1024 * 1024;
/// Memtable size of each column family: small, so that a memtable's arena blocks (an eighth of
/// it each) stay small beside [`MEMTABLE_BUDGET_BYTES`] while a column family is written.
pub const MEMTABLE_BYTES: usize = 16 * 1024 * 1024;
/// Memtable size of the outbox column family.
pub const OUTBOX_MEMTABLE_BYTES: usize = 8 * 1024 * 1024;
/// Bytes of write-ahead log kept before the column families holding the oldest one are flushed:
/// bounds the log on disk when some column families are written rarely (without it, a column
/// family written once kept every later log alive: gigabytes within minutes of agent load).
pub const MAX_WAL_BYTES: u64 = 4 * MEMTABLE_BUDGET_BYTES as u64;
/// Target size of a table file written by compaction. A file's index block is built in memory
/// until the file is finished: at RocksDB's default of 64 MiB, the index builders of two
/// compactions at once held 16 MB under agent load, the largest transient besides the
/// memtables and the block cache.
pub const TABLE_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Index entries between restart points of an index block: the keys in between are stored as
/// their difference from the key before (RocksDB's default, 1, stores every key whole).
/// Neighbouring keys share long prefixes (a run id's 49 bytes, a trace id's 32 hex digits), so
/// index blocks shrink, both while a table file is built and in the block cache.
pub const INDEX_RESTART_INTERVAL: i32 = 16;
/// Uncompressed bytes of a data block of a table file (RocksDB's default is 4 KiB). Every data
/// block has an entry in its file's index, which the block cache holds while the file is read:
/// a quarter of the entries at 16 KiB. With the index and filter blocks no longer pinned (see
/// [`table_options`]), agent spans per CPU-second rose 6-7 % in alternating matrix runs
/// (examples/README.md, "Index and filter blocks of flushed files, and table files that only grow
/// in number").
pub const TABLE_BLOCK_BYTES: usize = 16 * 1024;
/// Size of the in-memory bloom filter of a memtable, as a fraction of the memtable's size
/// ([`MEMTABLE_BYTES`]: 160 KiB of filter each), for the column families in
/// [`PROBED_CFS`].
pub const MEMTABLE_BLOOM_RATIO: f64 = 0.01;
/// Bits per key of the bloom filters in the table files of [`PROBED_CFS`] (about 1% false
/// positives). Older files without a filter read as before.
pub const BLOOM_BITS_PER_KEY: f64 = 10.0;
/// Column families that ingest probes for keys that are mostly absent (is this fact, message,
/// history node, tool-call count, span or grouping span stored yet?). Their memtables keep a
/// whole-key bloom filter, so such a probe costs a few bit tests instead of a search of a skip
/// list, and so do their table files ([`BLOOM_BITS_PER_KEY`]), so that it need not read an index
/// and a data block of every level-0 file the small memtables leave.
pub const PROBED_CFS: [Cf; 6] = [
    Cf::Facts,
    Cf::Messages,
    Cf::History,
    Cf::RunState,
    Cf::SpanRuns,
    Cf::GroupSpans,
];

/// Column families that ingest probes once per run or per snapshot for keys mostly absent (has
/// this run a record, a meta record, a short key, an alias, a lineage link yet? does a run hold
/// a snapshot with this history?): their table files keep the bloom filters of [`PROBED_CFS`],
/// their memtables none. A memtable's filter takes a block of the memtable budget (about 1 MiB)
/// from the moment the memtable exists, written or not.
pub const FILTERED_CFS: [Cf; 5] = [Cf::Runs, Cf::RunMeta, Cf::RunKeys, Cf::Aliases, Cf::Lineage];

/// Column families keyed by a run's short key first, which only grows from run to run: the
/// files a flush writes seldom overlap the ones before and are moved down whole, not rewritten,
/// so they are compressed when flushed. The others (keyed by run id or trace id) have their
/// flushed files merged by compaction, which compresses what it writes: they are flushed
/// uncompressed. Facts, events and ledger entries joined these in schema 7: at steady state
/// (10,000 agent runs) 20 % more agent spans per CPU-second, and 8 % fewer table bytes
/// (examples/README.md, "Facts, events and ledger entries under the run key").
pub const APPEND_ONLY_CFS: [Cf; 7] = [
    Cf::Facts,
    Cf::Effects,
    Cf::Events,
    Cf::Messages,
    Cf::History,
    Cf::Snapshots,
    Cf::ModelRequests,
];

/// Column families keyed by a run id or a trace id, whose flushed files compaction merges: the
/// lineage index and span runs (with the facts, effects and events keyed by run id before
/// schema 7, 3.7 of compaction's 4.3 s of CPU per 20 s of agent load; examples/README.md,
/// "Level-0 compactions that wait for eight files"). Their keys are spread over the whole key space, so each flushed file
/// overlaps all of the level below, and each compaction out of level 0 writes that level
/// again: it waits for [`MERGED_L0_TRIGGER`] flushed files, not RocksDB's 4.
pub const MERGED_CFS: [Cf; 2] = [Cf::Lineage, Cf::SpanRuns];
/// Level-0 files of a column family in [`MERGED_CFS`] that start a compaction: twice as many
/// flushed bytes per rewrite of the level below. RocksDB slows writes at 20 and stops them at
/// 36, as for the others.
pub const MERGED_L0_TRIGGER: i32 = 8;
/// Bytes a flush or a compaction writes to a table file before RocksDB starts writing them
/// back to the disk (`bytes_per_sync`), so a finished file is never megabytes of dirty pages
/// handed to the disk at once. Each commit's `fdatasync` of the write-ahead log waits for the
/// data queued on the disk before it: a 12 MB flush of facts written back at its end held
/// acknowledgements up for 20-50 ms (examples/README.md, "Acknowledgements held up by
/// flushes"). 256 KiB measured alike.
pub const BACKGROUND_SYNC_BYTES: u64 = 1024 * 1024;
/// Bytes per second that flushes and compactions may write together (RocksDB's rate limiter,
/// writes only): on a disk that takes about 250 MB/s, a flush written at full speed fills its
/// queue for tens of milliseconds. Agent load at full speed on two cores flushed and compacted
/// about 22 MB/s (336 MB of table files in 15 s).
pub const BACKGROUND_WRITE_BYTES_PER_SEC: i64 = 100 * 1024 * 1024;
/// How often the rate limiter hands out its bytes: every 10 ms, so at most about 1 MiB at once
/// (RocksDB's default of 100 ms would let a whole 10 MiB burst through).
pub const BACKGROUND_WRITE_REFILL_MICROS: i64 = 10_000;

/// A RocksDB database holding every column family of [`Cf`], with the block cache and write
/// buffer manager it was opened with (kept for [`KvStore::memory`]).
pub struct RocksKv {
    db: DB,
    cache: Cache,
    cache_capacity: usize,
    /// The block cache's capacity now: `cache_capacity`, or less while idle.
    cache_capacity_now: AtomicUsize,
    write_buffers: WriteBufferManager,
    /// Writes that waited at the memtable budget, and their wait in microseconds.
    budget_waits: AtomicU64,
    budget_wait_micros: AtomicU64,
    /// When a write last asked for a flush ahead of the budget
    /// ([`memtable_budget::flush_ahead`]).
    flushed_ahead: std::sync::Mutex<Option<std::time::Instant>>,
    /// Flushes asked for ahead of the budget.
    flushes_ahead: AtomicU64,
}

impl RocksKv {
    /// Opens (creating if needed) the database in `dir` with every column family, keeping at
    /// most [`open_files::table_files_open`] table files open for the process's limit on
    /// descriptors.
    pub fn open(dir: &Path) -> Result<RocksKv, StoreError> {
        Self::open_keeping(dir, open_files::table_files_open(open_files::limit()))
    }

    /// Opens the database in `dir`, keeping at most `table_files` table files open.
    fn open_keeping(dir: &Path, table_files: i32) -> Result<RocksKv, StoreError> {
        // One block cache for every column family, so a continuation's reads of a hot run hit
        // uncompressed blocks.
        let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
        let write_buffers =
            WriteBufferManager::new_write_buffer_manager(MEMTABLE_BUDGET_BYTES, false);
        let table = table_options(&cache, false);
        let probed = table_options(&cache, true);
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.increase_parallelism(2);
        options.set_env(&background_env()?);
        options.set_bytes_per_sync(BACKGROUND_SYNC_BYTES);
        options.set_ratelimiter(
            BACKGROUND_WRITE_BYTES_PER_SEC,
            BACKGROUND_WRITE_REFILL_MICROS,
            10,
        );
        options.set_write_buffer_manager(&write_buffers);
        options.set_max_total_wal_size(MAX_WAL_BYTES);
        options.set_max_open_files(table_files);
        // The column family options of the default column family ([`Cf::Meta`]).
        set_column_family_options(&mut options, Cf::Meta, &table, &probed);
        let descriptors = Cf::NAMED
            .iter()
            .map(|cf| {
                let mut cf_options = column_family_base(*cf)?;
                set_column_family_options(&mut cf_options, *cf, &table, &probed);
                Ok(ColumnFamilyDescriptor::new(cf.name(), cf_options))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let db = DB::open_cf_descriptors(&options, dir, descriptors)?;
        let kv = RocksKv {
            db,
            cache,
            cache_capacity: BLOCK_CACHE_BYTES,
            cache_capacity_now: AtomicUsize::new(BLOCK_CACHE_BYTES),
            write_buffers,
            budget_waits: AtomicU64::new(0),
            budget_wait_micros: AtomicU64::new(0),
            flushed_ahead: std::sync::Mutex::new(None),
            flushes_ahead: AtomicU64::new(0),
        };
        for cf in Cf::EVERY {
            kv.handle(cf)?;
        }
        Ok(kv)
    }

    /// Waits while the memtables hold their whole budget (see [`memtable_budget`]), and counts
    /// the wait.
    fn wait_under_memtable_budget(&self) -> Result<(), StoreError> {
        if !memtable_budget::near_budget(&self.write_buffers) {
            return Ok(());
        }
        let handles = || {
            Cf::EVERY
                .iter()
                .map(|cf| self.handle(*cf))
                .collect::<Result<Vec<_>, _>>()
        };
        if self.write_buffers.get_usage() < self.write_buffers.get_buffer_size() {
            // A lock poisoned by a panic holds only a time: it is used as it is.
            let mut last = self
                .flushed_ahead
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if last.is_some_and(|at| at.elapsed() < memtable_budget::FLUSH_AHEAD_EVERY) {
                return Ok(());
            }
            *last = Some(std::time::Instant::now());
            if memtable_budget::flush_ahead(&self.db, &handles()?)? {
                self.flushes_ahead.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(());
        }
        let handles = handles()?;
        let waited = memtable_budget::wait_under_budget(&self.db, &self.write_buffers, &handles)?;
        if !waited.time.is_zero() {
            self.budget_waits.fetch_add(1, Ordering::Relaxed);
            let micros = u64::try_from(waited.time.as_micros()).unwrap_or(u64::MAX);
            self.budget_wait_micros.fetch_add(micros, Ordering::Relaxed);
        }
        if waited.time >= memtable_budget::WAIT_LIMIT {
            tracing::warn!(
                flushes = waited.flushes,
                "memtables still over their budget after {:?}; writing anyway",
                waited.time
            );
        }
        Ok(())
    }

    fn handle(&self, cf: Cf) -> Result<&rocksdb::ColumnFamily, StoreError> {
        self.db
            .cf_handle(cf.name())
            .ok_or(StoreError::MissingColumnFamily(cf))
    }

    /// The sum of an integer property over every column family (those that do not answer count
    /// 0).
    fn sum_property(&self, property: &str) -> u64 {
        Cf::EVERY
            .iter()
            .filter_map(|cf| self.handle(*cf).ok())
            .filter_map(|h| self.db.property_int_value_cf(h, property).ok().flatten())
            .fold(0u64, u64::saturating_add)
    }
}

/// RocksDB's environment with its flush and compaction threads at the lowest CPU priority
/// (nice 19): on two cores they shared the CPU with the writer and the receivers, and a flush's
/// tens of milliseconds of CPU showed in the acknowledgements' p99. They run on what the
/// ingest path leaves; when that is nothing, the writers wait at the memtable budget and so
/// leave them the CPU. The environment is the process's one default, so every database opened
/// shares its threads.
fn background_env() -> Result<rocksdb::Env, StoreError> {
    let mut env = rocksdb::Env::new()?;
    env.lower_thread_pool_cpu_priority();
    env.lower_high_priority_thread_pool_cpu_priority();
    Ok(env)
}

/// Bytes of RocksDB's encoding of `batch`: a 12-byte header, and per write a tag, a column
/// family id and the length-prefixed key and value (each varint at most 5 bytes).
fn batch_bytes(batch: &KvBatch) -> usize {
    const PER_OP: usize = 1 + 5 + 5 + 5;
    batch.ops().iter().fold(12, |bytes, op| {
        let payload = match op {
            Op::Put { key, value, .. } => key.len() + value.len(),
            Op::Delete { key, .. } => key.len(),
            Op::DeleteRange { from, to, .. } => from.len() + to.len(),
        };
        bytes.saturating_add(PER_OP + payload)
    })
}

/// Where the memtables of the column families keyed by a run's short key first
/// ([`APPEND_ONLY_CFS`]) start looking for an insert's place: where the last key of the same run
/// key went. A write batch puts a run's records one after another, most with keys that follow
/// the last, so an insert walks the few keys near that place instead of the whole memtable's
/// skip list from its top. The option is not in RocksDB's C API: it is set from its options
/// string (`rocksdb.FixedPrefix.8`: the first eight bytes, the run key).
const RUN_KEY_INSERT_HINT: &str =
    "memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.8";

/// The options the options of column family `cf` are set on: RocksDB's defaults, with
/// [`RUN_KEY_INSERT_HINT`] for the column families keyed by run key.
fn column_family_base(cf: Cf) -> Result<Options, StoreError> {
    let mut options = Options::default();
    if APPEND_ONLY_CFS.contains(&cf) {
        return Ok(options.get_options_from_string(RUN_KEY_INSERT_HINT)?);
    }
    Ok(options)
}

/// Sets the options of column family `cf` on `options`: compression, memtable and table file
/// sizes, and `probed` tables with memtable bloom filters for [`PROBED_CFS`] (`table` for the
/// others).
fn set_column_family_options(
    options: &mut Options,
    cf: Cf,
    table: &BlockBasedOptions,
    probed: &BlockBasedOptions,
) {
    options.set_target_file_size_base(TABLE_FILE_BYTES);
    options.set_write_buffer_size(MEMTABLE_BYTES);
    if cf == Cf::Outbox {
        // Entries live briefly (deleted once sent): small memtables bound the memory the outbox
        // takes to OUTBOX_MEMTABLE_BYTES x 2, whatever the backlog.
        options.set_write_buffer_size(OUTBOX_MEMTABLE_BYTES);
        options.set_max_write_buffer_number(2);
        // Entries are the received requests, deleted within moments of being sent: compressing
        // the few that reach a table file (and decompressing them to read or compact them) cost
        // a fifth of the CPU of 500-span pass-through.
        options.set_compression_type(rocksdb::DBCompressionType::None);
        options.set_bottommost_compression_type(rocksdb::DBCompressionType::None);
    } else {
        // LZ4 at every level. While the store is under a few GB every compaction writes the
        // bottom level (RocksDB sizes levels from the bottom up), so zstd there compressed
        // nearly all that compaction wrote: a tenth of the CPU of agent-span ingest. With LZ4,
        // 17 % more agent spans per CPU-second and 28 % more table bytes per span (1,432
        // against 1,122; zstd at level -3: 1,398 bytes and 6 % more spans per CPU-second).
        options.set_compression_type(rocksdb::DBCompressionType::Lz4);
        options.set_bottommost_compression_type(rocksdb::DBCompressionType::Lz4);
        if MERGED_CFS.contains(&cf) {
            options.set_level_zero_file_num_compaction_trigger(MERGED_L0_TRIGGER);
        }
        if !APPEND_ONLY_CFS.contains(&cf) {
            // Level 0 (what a flush writes) uncompressed: the first compaction reads it back
            // and writes it again, compressed, so compressing it at the flush was done twice.
            use rocksdb::DBCompressionType::{Lz4, None};
            options.set_compression_per_level(&[None, Lz4, Lz4, Lz4, Lz4, Lz4, Lz4]);
        }
    }
    if PROBED_CFS.contains(&cf) {
        options.set_block_based_table_factory(probed);
        options.set_memtable_whole_key_filtering(true);
        options.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
    } else if FILTERED_CFS.contains(&cf) {
        options.set_block_based_table_factory(probed);
    } else {
        options.set_block_based_table_factory(table);
    }
}

/// Block-based table options over the shared `cache`: index and filter blocks live in the block
/// cache, within its budget, instead of beside it in every open table file, and none is pinned
/// there. Pinned "level-0" blocks were those of every file a flush wrote, for the file's life:
/// the column families keyed by run have keys that only grow, so their flushed files are moved
/// down whole and stay, and under agent load their blocks held nearly all the block cache (16.4
/// MB pinned of 16 MiB after 10 minutes, under load and when idle, growing with the store);
/// `bloom` adds a whole-key filter to each file.
fn table_options(cache: &Cache, bloom: bool) -> BlockBasedOptions {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_cache_index_and_filter_blocks(true);
    table.set_cache_index_and_filter_blocks_with_high_priority(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(false);
    table.set_index_block_restart_interval(INDEX_RESTART_INTERVAL);
    table.set_block_size(TABLE_BLOCK_BYTES);
    if bloom {
        table.set_bloom_filter(BLOOM_BITS_PER_KEY, false);
        table.set_optimize_filters_for_memory(true);
    }
    table
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
        // Sized once: growing the batch's buffer by doubling copied it several times per commit
        // and, past glibc's mmap threshold, faulted in fresh pages at every step.
        let mut rocks = rocksdb::WriteBatch::with_capacity_bytes(batch_bytes(&batch));
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
        self.wait_under_memtable_budget()?;
        self.db.write_opt(rocks, &options)?;
        Ok(bytes)
    }

    fn flush(&self) -> Result<(), StoreError> {
        for cf in Cf::NAMED {
            self.db.flush_cf(self.handle(cf)?)?;
        }
        Ok(())
    }

    fn flush_memtables(&self) -> Result<u64, StoreError> {
        // Only the column families whose active memtable holds writes.
        let mut flushed = 0u64;
        for cf in Cf::EVERY {
            let handle = self.handle(cf)?;
            if let Some(bytes) = memtable_budget::active_memtable_bytes(&self.db, handle)? {
                flushed = flushed.saturating_add(bytes);
                self.db.flush_cf(handle)?;
            }
        }
        Ok(flushed)
    }

    fn compact(&self) -> Result<(), StoreError> {
        for cf in Cf::NAMED {
            self.db
                .compact_range_cf(self.handle(cf)?, None::<&[u8]>, None::<&[u8]>);
        }
        Ok(())
    }

    fn checkpoint(&self, dir: &Path) -> Result<bool, StoreError> {
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(dir)?;
        Ok(true)
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

    fn divide_block_cache(&self, divisor: u64) {
        let divisor = usize::try_from(divisor.max(1)).unwrap_or(usize::MAX);
        let capacity = self.cache_capacity / divisor;
        if self.cache_capacity_now.swap(capacity, Ordering::Relaxed) != capacity {
            // The handle is shared: setting the capacity through a clone sets the cache's
            // (RocksDB's cache takes its own lock for it).
            self.cache.clone().set_capacity(capacity);
        }
    }

    fn memory(&self) -> KvMemory {
        KvMemory {
            memtables: self.sum_property("rocksdb.size-all-mem-tables"),
            memtable_budget: self.write_buffers.get_buffer_size() as u64,
            block_cache: self.cache.get_usage() as u64,
            block_cache_pinned: self.cache.get_pinned_usage() as u64,
            block_cache_capacity: self.cache_capacity_now.load(Ordering::Relaxed) as u64,
            table_readers: self.sum_property("rocksdb.estimate-table-readers-mem"),
            budget_waits: self.budget_waits.load(Ordering::Relaxed),
            budget_wait_micros: self.budget_wait_micros.load(Ordering::Relaxed),
            flushes_ahead: self.flushes_ahead.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of the write-ahead logs in `dir`.
    fn wal_bytes(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
            .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
            .sum()
    }

    /// `bytes` (a multiple of 8) of xorshift output, which does not compress.
    fn incompressible(state: &mut u64, bytes: usize) -> Vec<u8> {
        (0..bytes / 8)
            .flat_map(|_| {
                *state ^= *state << 13;
                *state ^= *state >> 7;
                *state ^= *state << 17;
                state.to_le_bytes()
            })
            .collect()
    }

    /// Writes `mib` incompressible values of 1 MiB to `cf` in one batch, keyed `first` on.
    fn put_mib(kv: &RocksKv, state: &mut u64, cf: Cf, mib: usize, first: u32) {
        let mut batch = KvBatch::default();
        for i in 0..mib as u32 {
            batch.put(
                cf,
                &(first + i).to_be_bytes(),
                incompressible(state, 1 << 20),
            );
        }
        kv.write(batch, false).unwrap();
    }

    /// The nice value of each of this process's threads named `name`.
    fn nice_of_threads(name: &str) -> Vec<i64> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| task.ok())
            .filter(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|comm| comm.trim() == name)
            })
            .filter_map(|task| {
                let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
                // Fields after the parenthesised name: state is the 3rd field, nice the 19th.
                let after_name = &stat[stat.rfind(')')? + 2..];
                after_name.split(' ').nth(16)?.parse().ok()
            })
            .collect()
    }

    #[test]
    fn a_checkpoint_is_a_copy_to_open_beside_the_store_and_write_apart() {
        let dir = tempfile::tempdir().unwrap();
        let kv = RocksKv::open(dir.path()).unwrap();
        let mut batch = KvBatch::default();
        batch.put(Cf::Runs, b"kept", b"1".to_vec());
        kv.write(batch, true).unwrap();
        let copy = dir.path().join("copy");
        assert!(kv.checkpoint(&copy).unwrap());
        let copied = RocksKv::open(&copy).unwrap();
        assert_eq!(copied.get(Cf::Runs, b"kept").unwrap(), Some(b"1".to_vec()));
        let mut batch = KvBatch::default();
        batch.put(Cf::Runs, b"only-in-copy", b"2".to_vec());
        copied.write(batch, true).unwrap();
        assert_eq!(kv.get(Cf::Runs, b"only-in-copy").unwrap(), None);
        assert!(!crate::store::MemoryKv::default().checkpoint(&copy).unwrap());
    }

    #[test]
    fn flushes_and_compactions_write_back_as_they_go_at_the_lowest_cpu_priority() {
        let dir = tempfile::tempdir().unwrap();
        let kv = RocksKv::open(dir.path()).unwrap();
        let mut state = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2 {
            let mut batch = KvBatch::default();
            for n in 0..64u64 {
                batch.put(
                    Cf::Facts,
                    &n.to_be_bytes(),
                    incompressible(&mut state, 4096),
                );
            }
            kv.write(batch, false).unwrap();
            kv.flush_memtables().unwrap();
        }
        kv.compact().unwrap();
        // A pool's threads lower their priority when they take their next job: the flushes
        // and the compaction ran on them.
        let (high, low) = (
            nice_of_threads("rocksdb:high"),
            nice_of_threads("rocksdb:low"),
        );
        assert!(
            !high.is_empty() && !low.is_empty(),
            "threads {high:?} {low:?}"
        );
        assert!(high.contains(&19), "flush threads {high:?}");
        assert!(low.contains(&19), "compaction threads {low:?}");
        // The options RocksDB persisted: table files written back every MiB.
        let options: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("OPTIONS-"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .collect();
        let line = format!("  bytes_per_sync={BACKGROUND_SYNC_BYTES}\n");
        assert!(!options.is_empty());
        assert!(options.iter().all(|o| o.contains(&line)), "{options:?}");
    }

    #[test]
    fn flushes_write_no_faster_than_the_background_rate() {
        let dir = tempfile::tempdir().unwrap();
        let kv = RocksKv::open(dir.path()).unwrap();
        // 24 MiB that does not compress, in two column families flushed uncompressed: under
        // the memtable budget, so nothing is flushed before it is asked for.
        let mut state = 0x2545_f491_4f6c_dd1d;
        let (cfs, per_cf) = ([Cf::Facts, Cf::Events], 12u64 << 20);
        for cf in cfs {
            for chunk in 0..per_cf / (1 << 20) {
                let mut batch = KvBatch::default();
                for n in 0..16u64 {
                    let key = (chunk * 16 + n).to_be_bytes();
                    batch.put(cf, &key, incompressible(&mut state, 64 * 1024));
                }
                kv.write(batch, false).unwrap();
            }
        }
        let started = std::time::Instant::now();
        let flushed = kv.flush_memtables().unwrap();
        let took = started.elapsed();
        assert!(flushed >= 2 * per_cf, "flushed {flushed} bytes");
        // The rate limiter lets about 1 MiB through every 10 ms: at least 0.24 s for 24 MiB
        // (a disk of 250 MB/s takes 0.1 s). Less than 0.2 s means no limiter.
        let least = (2 * per_cf) as f64 / BACKGROUND_WRITE_BYTES_PER_SEC as f64;
        assert!(
            took.as_secs_f64() >= least * 0.8,
            "flushed {flushed} bytes in {took:?}, under {least} s"
        );
    }

    #[test]
    fn table_files_are_compressed_where_they_stay_and_the_outbox_never() {
        let dir = tempfile::tempdir().unwrap();
        let kv = RocksKv::open(dir.path()).unwrap();
        // 2 MiB of text that compresses well, in a column family whose flushed files are merged
        // by compaction (span runs), in one whose files are moved down whole (messages), and in the
        // outbox. Two flushes, of the even keys then the odd ones: the files overlap, as those
        // of run ids do, so compaction merges them (a lone file would be moved down whole, as
        // it is).
        let value = b"{\"role\":\"user\",\"content\":\"the same words again\"}".repeat(64);
        let keys = (2 << 20) / value.len();
        let cfs = [Cf::SpanRuns, Cf::Messages, Cf::Outbox];
        for odd in [0, 1] {
            let mut batch = KvBatch::default();
            for n in (odd..keys as u64).step_by(2) {
                for cf in cfs {
                    batch.put(cf, &n.to_be_bytes(), value.clone());
                }
            }
            kv.write(batch, false).unwrap();
            kv.flush_memtables().unwrap();
        }
        let raw = (keys * value.len()) as u64;
        let on_disk = || cfs.map(|cf| kv.live_bytes(cf));
        // Flushed: span runs as they are (compaction compresses them), messages compressed, the
        // outbox as it is.
        let [span_runs, messages, outbox] = on_disk();
        assert!(
            span_runs >= raw,
            "span runs {span_runs} bytes on disk for {raw}"
        );
        assert!(messages < raw / 4, "messages {messages} bytes for {raw}");
        assert!(outbox >= raw, "outbox {outbox} bytes on disk for {raw}");
        kv.compact().unwrap();
        let [span_runs, messages, outbox] = on_disk();
        assert!(
            span_runs < raw / 4,
            "span runs {span_runs} bytes once compacted"
        );
        assert!(
            messages < raw / 4,
            "messages {messages} bytes once compacted"
        );
        assert!(outbox >= raw, "outbox {outbox} bytes once compacted");
        for n in [0, keys as u64 - 1] {
            for cf in cfs {
                assert_eq!(kv.get(cf, &n.to_be_bytes()).unwrap().unwrap(), value);
            }
        }
    }

    #[test]
    fn run_keyed_column_families_insert_from_the_run_keys_last_place_and_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let kv = RocksKv::open(dir.path()).unwrap();
        // The hint is set on the column families keyed by run key, and only on them.
        let options = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| e.file_name().to_string_lossy().starts_with("OPTIONS-"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .unwrap();
        let hinted = options.matches(RUN_KEY_INSERT_HINT).count();
        assert_eq!(hinted, APPEND_ONLY_CFS.len());
        // Keys of several run keys, each run's in and out of order, with keys shorter than a
        // run key among them (outside the hint's domain), in batches: all read back, sorted.
        let mut written = std::collections::BTreeSet::new();
        for round in 0..4u64 {
            let mut batch = KvBatch::default();
            for run in [3u64, 1, 2] {
                for seq in [5u32, 1, 9, 2] {
                    let mut key = run.to_be_bytes().to_vec();
                    key.extend_from_slice(&(seq + 10 * round as u32).to_be_bytes());
                    batch.put(Cf::Events, &key, key.clone());
                    written.insert(key);
                }
            }
            let short = vec![round as u8; 3];
            batch.put(Cf::Events, &short, short.clone());
            written.insert(short);
            kv.write(batch, false).unwrap();
        }
        let mut read = Vec::new();
        kv.scan(Cf::Events, b"", b"", &mut |key, value| {
            assert_eq!(key, value);
            read.push(key.to_vec());
            Ok(true)
        })
        .unwrap();
        assert_eq!(read, written.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn merged_column_families_compact_level_0_at_eight_files_the_others_at_four() {
        let dir = tempfile::tempdir().unwrap();
        let kv = RocksKv::open(dir.path()).unwrap();
        let level_0 = |cf: Cf| {
            let handle = kv.handle(cf).unwrap();
            kv.db
                .property_int_value_cf(handle, "rocksdb.num-files-at-level0")
                .unwrap()
                .unwrap()
        };
        let written: Vec<Cf> = MERGED_CFS.into_iter().chain([Cf::Runs]).collect();
        // Waits (10 s at most) until RocksDB has no compaction to run or running.
        let settled = || {
            let started = std::time::Instant::now();
            while started.elapsed() < std::time::Duration::from_secs(10) {
                let pending: u64 = written
                    .iter()
                    .copied()
                    .map(|cf| {
                        let handle = kv.handle(cf).unwrap();
                        let pending = "rocksdb.compaction-pending";
                        kv.db.property_int_value_cf(handle, pending).unwrap()
                    })
                    .map(Option::unwrap_or_default)
                    .sum();
                let running = "rocksdb.num-running-compactions";
                let busy = pending + kv.db.property_int_value(running).unwrap().unwrap_or(0);
                if busy == 0 {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            panic!("compactions still pending after 10 s");
        };
        let flush = |n: u64| {
            // Keys spread over the key space, as run ids are: each file overlaps the others.
            let mut batch = KvBatch::default();
            for key in 0..100u64 {
                let key = (key * 7_919 + n).to_be_bytes();
                for cf in &written {
                    batch.put(*cf, &key, vec![n as u8; 100]);
                }
            }
            kv.write(batch, false).unwrap();
            kv.flush_memtables().unwrap();
        };
        for n in 0..7 {
            flush(n);
        }
        settled();
        // Seven flushed files wait in level 0 of each merged one; the others were compacted
        // at four.
        for cf in MERGED_CFS {
            assert_eq!(level_0(cf), 7, "{cf:?}");
        }
        assert!(
            level_0(Cf::Runs) < 4,
            "runs: {} level-0 files",
            level_0(Cf::Runs)
        );
        flush(7);
        settled();
        assert!(
            level_0(Cf::SpanRuns) < 8,
            "span runs: {} level-0 files",
            level_0(Cf::SpanRuns)
        );
        assert_eq!(
            kv.get(Cf::SpanRuns, &7u64.to_be_bytes()).unwrap(),
            Some(vec![7; 100])
        );
    }

    #[test]
    fn a_key_absent_from_a_probed_column_family_is_answered_by_its_filters() {
        use rocksdb::{PerfContext, PerfMetric, PerfStatsLevel};
        let dir = tempfile::tempdir().unwrap();
        let kv = RocksKv::open(dir.path()).unwrap();
        // Those ingest probes for a new run (its record, meta record, short key, aliases and
        // lineage) have filters in their table files, not in their memtables.
        let filtered = [Cf::Runs, Cf::RunMeta, Cf::RunKeys, Cf::Aliases, Cf::Lineage];
        assert_eq!(FILTERED_CFS, filtered);
        for cf in PROBED_CFS.into_iter().chain(FILTERED_CFS) {
            // One flushed file of 100 keys, and 100 more in the memtable.
            for file in 0..2u8 {
                let mut batch = KvBatch::default();
                for n in 0..100u8 {
                    batch.put(cf, &[b'r', file, n], vec![n; 40]);
                }
                kv.write(batch, false).unwrap();
                if file == 0 {
                    kv.db.flush_cf(kv.handle(cf).unwrap()).unwrap();
                }
            }
            assert_eq!(kv.get(cf, &[b'r', 0, 7]).unwrap(), Some(vec![7; 40]));
            // An absent key: the file's filter says so (and the memtable's, where it has one),
            // and no block of the file is looked at.
            rocksdb::perf::set_perf_stats(PerfStatsLevel::EnableCount);
            let mut perf = PerfContext::default();
            perf.reset();
            assert_eq!(kv.get(cf, &[b'r', 2, 7]).unwrap(), None);
            let skipped = (
                perf.metric(PerfMetric::BloomMemtableMissCount),
                perf.metric(PerfMetric::BloomSstMissCount),
            );
            rocksdb::perf::set_perf_stats(PerfStatsLevel::Disable);
            let memtable = u64::from(PROBED_CFS.contains(&cf));
            assert_eq!(skipped, (memtable, 1), "{cf:?}: {}", perf.report(true));
        }
    }

    #[test]
    fn a_write_past_the_memtable_budget_does_not_stop_the_writes_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let kv = std::sync::Arc::new(RocksKv::open(dir.path()).unwrap());
        let mut state = 7u64;
        let mut put = |cf: Cf, mib: usize, first: u32| put_mib(&kv, &mut state, cf, mib, first);
        // The oldest memtable holds a few bytes: the others are flushed once, so theirs are
        // newer.
        let mut meta = KvBatch::default();
        meta.put(Cf::Meta, b"oldest", b"x".to_vec());
        kv.write(meta, false).unwrap();
        for cf in [
            Cf::Events,
            Cf::Effects,
            Cf::Facts,
            Cf::Snapshots,
            Cf::Messages,
            Cf::Runs,
        ] {
            let mut first = KvBatch::default();
            first.put(cf, b"first", b"x".to_vec());
            kv.write(first, false).unwrap();
            kv.db.flush_cf(kv.handle(cf).unwrap()).unwrap();
        }
        // Four column families fill to 32 MiB, under the seven eighths of the 48 MiB budget
        // where RocksDB starts a flush (and each well under its own 16 MiB memtable).
        for cf in [Cf::Events, Cf::Effects, Cf::Facts, Cf::Snapshots] {
            for mib in 0..8 {
                put(cf, 1, mib);
            }
        }
        // One write of 12 MiB takes them past the whole budget.
        put(Cf::Messages, 12, 0);
        assert!(
            kv.write_buffers.get_usage() >= kv.write_buffers.get_buffer_size(),
            "the memtables hold {} bytes, under the budget",
            kv.write_buffers.get_usage()
        );
        // The next write waits for a flush it asks for, not for the idle task: the flush RocksDB
        // starts past seven eighths is of the oldest memtable (the few bytes above), which leaves
        // the memtables over the budget, and RocksDB's own wait at the budget waited for nothing
        // else.
        let (done, finished) = std::sync::mpsc::channel();
        let writer = kv.clone();
        std::thread::spawn(move || {
            let mut batch = KvBatch::default();
            batch.put(Cf::Runs, b"next", b"write".to_vec());
            let _ = done.send(writer.write(batch, false).is_ok());
        });
        let answered = finished.recv_timeout(std::time::Duration::from_secs(30));
        assert_eq!(
            answered,
            Ok(true),
            "the write after the budget was passed did not finish within 30 s"
        );
        // It waited for the flush it asked for, and that flush brought the memtables under the
        // budget.
        let memory = kv.memory();
        assert_eq!(memory.budget_waits, 1, "{memory:?}");
        assert!(memory.budget_wait_micros > 0, "{memory:?}");
        assert!(
            memory.memtables < MEMTABLE_BUDGET_BYTES as u64,
            "{memory:?}"
        );
    }

    #[test]
    fn a_write_near_the_memtable_budget_asks_for_a_flush_of_the_largest_memtable_and_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let kv = RocksKv::open(dir.path()).unwrap();
        let mut state = 11u64;
        let mut put = |cf: Cf, mib: usize, first: u32| put_mib(&kv, &mut state, cf, mib, first);
        // 32 MiB of values (about 39 MB with the memtables' arenas): past six eighths of the
        // 48 MiB budget and under the seven eighths where RocksDB flushes on its own. Facts
        // hold the largest memtable.
        put(Cf::Facts, 12, 0);
        put(Cf::Events, 10, 0);
        put(Cf::Effects, 10, 0);
        let budget = kv.write_buffers.get_buffer_size();
        let usage = kv.write_buffers.get_usage();
        assert!(
            usage >= budget / 8 * memtable_budget::FLUSH_AHEAD_EIGHTHS && usage < budget / 8 * 7,
            "the memtables hold {usage} bytes of {budget}"
        );
        assert_eq!(kv.memory().flushes_ahead, 0);
        // The next write asks for a flush and does not wait for it.
        let mut next = KvBatch::default();
        next.put(Cf::Runs, b"next", b"write".to_vec());
        kv.write(next, false).unwrap();
        let memory = kv.memory();
        assert_eq!(memory.flushes_ahead, 1, "{memory:?}");
        assert_eq!(memory.budget_waits, 0, "{memory:?}");
        // The flush was of facts, the largest memtable: it leaves the memtables well under six
        // eighths.
        let facts = kv.handle(Cf::Facts).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while kv.write_buffers.get_usage() >= budget / 8 * memtable_budget::FLUSH_AHEAD_EIGHTHS {
            assert!(
                std::time::Instant::now() < deadline,
                "no flush brought the memtables under six eighths within 30 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(
            memtable_budget::active_memtable_bytes(&kv.db, facts).unwrap(),
            None,
            "facts' memtable was not the one flushed"
        );
        let events = kv.handle(Cf::Events).unwrap();
        assert!(memtable_budget::active_memtable_bytes(&kv.db, events)
            .unwrap()
            .is_some());
    }

    #[test]
    fn compaction_writes_small_table_files_with_compact_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let kv = RocksKv::open(dir.path()).unwrap();
        // 40 MiB that does not compress, one 4 KiB value (one data block) per key, and keys
        // that share a 48-byte prefix as a run's or a trace's keys do. Keys are written out of
        // order, so that the files flushed overlap and compaction merges them (files that do
        // not overlap are moved down whole).
        let value_bytes = 4096;
        let keys = (40 << 20) / value_bytes;
        let key = |n: usize| [[b'r'; 48].as_slice(), &(n as u64).to_be_bytes()].concat();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for chunk in 0..keys / 1024 {
            let mut batch = KvBatch::default();
            for n in chunk * 1024..(chunk + 1) * 1024 {
                let value = incompressible(&mut state, value_bytes);
                batch.put(Cf::Messages, &key(n * 7919 % keys), value);
            }
            kv.write(batch, false).unwrap();
        }
        kv.compact().unwrap();
        let files: Vec<_> = kv
            .db
            .live_files()
            .unwrap()
            .into_iter()
            .filter(|f| f.column_family_name == Cf::Messages.name())
            .collect();
        assert!(files.len() >= 3, "{} table files for 40 MiB", files.len());
        for file in &files {
            assert!(
                file.size as u64 <= TABLE_FILE_BYTES + (1 << 20),
                "{} is {} bytes",
                file.name,
                file.size
            );
        }
        // Whole keys in the index would take 56 bytes and more per data block.
        let properties = kv
            .db
            .property_value_cf(
                kv.handle(Cf::Messages).unwrap(),
                "rocksdb.aggregated-table-properties",
            )
            .unwrap()
            .unwrap();
        // "key=value; key=value; ...", the index's key naming how it is encoded.
        let field = |name: &str| -> u64 {
            properties
                .split(';')
                .filter_map(|part| part.trim().split_once('='))
                .find(|(key, _)| key.starts_with(name))
                .and_then(|(_, value)| value.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {properties}"))
        };
        let (blocks, index) = (field("# data blocks"), field("index block size"));
        // A data block holds TABLE_BLOCK_BYTES of values (four here), so an index has a
        // quarter of the entries it had with RocksDB's 4 KiB blocks.
        let per_block = (TABLE_BLOCK_BYTES / value_bytes) as u64;
        assert!(
            blocks * per_block >= keys as u64 && blocks <= keys as u64 / 3,
            "{blocks} data blocks for {keys} keys of {value_bytes} bytes"
        );
        assert!(
            index < blocks * 24,
            "{index} index bytes for {blocks} data blocks"
        );
        // Every key reads back after the compaction.
        let all: Vec<Vec<u8>> = (0..keys).map(key).collect();
        for (n, value) in kv.multi_get(Cf::Messages, &all).unwrap().iter().enumerate() {
            let len = value.as_ref().map(Vec::len);
            assert_eq!(len, Some(value_bytes), "key {n}");
        }
    }

    #[test]
    fn a_batch_is_sized_for_what_rocksdb_encodes_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let kv = RocksKv::open(dir.path()).unwrap();
        let mut batch = KvBatch::default();
        batch.put(Cf::Outbox, &[7; 9], vec![1; 300_000]);
        for i in 0..200u32 {
            batch.put(Cf::Facts, &i.to_be_bytes(), vec![2; i as usize]);
        }
        batch.delete(Cf::Facts, &5u32.to_be_bytes());
        batch.delete_range(Cf::Messages, b"a", b"b");
        let estimate = batch_bytes(&batch);
        let written = kv.write(batch, true).unwrap();
        assert!(estimate >= written as usize, "{estimate} < {written}");
        assert!(
            estimate <= written as usize + 16 * 203,
            "{estimate} far over {written}"
        );
        assert_eq!(kv.get(Cf::Outbox, &[7; 9]).unwrap().unwrap().len(), 300_000);
        assert_eq!(
            kv.get(Cf::Facts, &199u32.to_be_bytes())
                .unwrap()
                .unwrap()
                .len(),
            199
        );
        assert_eq!(kv.get(Cf::Facts, &5u32.to_be_bytes()).unwrap(), None);
    }

    #[test]
    fn memtables_and_logs_stay_within_their_budgets_and_memory_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let kv = RocksKv::open(dir.path()).unwrap();
        let empty = kv.memory();
        assert_eq!(empty.memtable_budget, MEMTABLE_BUDGET_BYTES as u64);
        assert_eq!(empty.block_cache_capacity, BLOCK_CACHE_BYTES as u64);
        // One write to a column family that is not written again: before the budgets, its
        // memtable kept every later write-ahead log alive.
        let mut once = KvBatch::default();
        once.put(Cf::Aliases, b"alias", b"run".to_vec());
        kv.write(once, false).unwrap();
        // Four times the memtable budget (and twice the log budget), in values that do not
        // compress, spread over three column families.
        let value_bytes = 256 * 1024;
        let total = 4 * MEMTABLE_BUDGET_BYTES;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut peak_memtables = 0;
        for n in 0..total / value_bytes {
            let value = incompressible(&mut state, value_bytes);
            let cf = [Cf::Messages, Cf::Events, Cf::History][n % 3];
            let mut batch = KvBatch::default();
            batch.put(cf, &(n as u64).to_be_bytes(), value);
            kv.write(batch, false).unwrap();
            peak_memtables = peak_memtables.max(kv.memory().memtables);
        }
        let memory = kv.memory();
        assert!(memory.memtables > 0, "{memory:?}");
        // Writers wait at the budget; a write may pass it by its own size and an arena block.
        let slack = (MEMTABLE_BUDGET_BYTES / 4) as u64;
        assert!(
            peak_memtables <= MEMTABLE_BUDGET_BYTES as u64 + slack,
            "memtables peaked at {peak_memtables}"
        );
        let wal = wal_bytes(dir.path());
        assert!(
            wal <= MAX_WAL_BYTES + MEMTABLE_BUDGET_BYTES as u64,
            "{wal} bytes of write-ahead log"
        );
        // Everything written reads back, from memtables or table files.
        assert_eq!(
            kv.get(Cf::Aliases, b"alias").unwrap(),
            Some(b"run".to_vec())
        );
        let last = (total / value_bytes - 1) as u64;
        let cf = [Cf::Messages, Cf::Events, Cf::History][last as usize % 3];
        assert_eq!(
            kv.get(cf, &last.to_be_bytes()).unwrap().map(|v| v.len()),
            Some(value_bytes)
        );
        assert!(kv.memory().block_cache <= BLOCK_CACHE_BYTES as u64);
        // The in-memory twin keeps no such buffers.
        assert_eq!(
            crate::store::MemoryKv::new().memory(),
            crate::store::kv::KvMemory::default()
        );
    }

    /// Descriptors of this process open on table files in `dir`.
    #[cfg(target_os = "linux")]
    fn table_files_open_in(dir: &Path) -> usize {
        let dir = dir.canonicalize().unwrap();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
            .filter(|target| target.parent() == Some(dir.as_path()))
            .filter(|target| target.extension().is_some_and(|e| e == "sst"))
            .count()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn table_files_past_those_kept_open_hold_no_descriptor_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let kept = 64;
        let kv = RocksKv::open_keeping(dir.path(), kept).unwrap();
        // Keys that only grow, as in the column families keyed by run: each flushed file is
        // moved down whole, not merged, so the files only grow in number.
        let flushes = 160u64;
        let value = |n: u64| vec![(n % 251) as u8; 64];
        for flush in 0..flushes {
            let mut batch = KvBatch::default();
            for n in flush * 8..flush * 8 + 8 {
                batch.put(Cf::History, &n.to_be_bytes(), value(n));
            }
            kv.write(batch, false).unwrap();
            kv.db.flush_cf(kv.handle(Cf::History).unwrap()).unwrap();
        }
        let tables = kv
            .db
            .live_files()
            .unwrap()
            .into_iter()
            .filter(|f| f.column_family_name == Cf::History.name())
            .count();
        assert!(tables > 2 * kept as usize, "{tables} table files");
        for n in 0..flushes * 8 {
            assert_eq!(
                kv.get(Cf::History, &n.to_be_bytes()).unwrap(),
                Some(value(n)),
                "key {n}"
            );
        }
        // Every file was read, and at most `kept` stay open.
        let open = table_files_open_in(dir.path());
        assert!(open <= kept as usize, "{open} of {tables} table files open");
    }

    #[test]
    fn flushed_table_files_pin_nothing_in_the_block_cache() {
        let dir = tempfile::tempdir().unwrap();
        let kv = RocksKv::open(dir.path()).unwrap();
        // Three flushes of a probed column family (index and filter blocks in each file), below
        // the files that start a compaction (eight in facts): three level-0 files.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let keys = 2048u64;
        for file in 0..3u64 {
            let mut batch = KvBatch::default();
            for n in 0..keys {
                let key = (file * keys + n).to_be_bytes();
                batch.put(Cf::Facts, &key, incompressible(&mut state, 512));
            }
            kv.write(batch, false).unwrap();
            kv.db.flush_cf(kv.handle(Cf::Facts).unwrap()).unwrap();
        }
        for n in 0..3 * keys {
            assert!(kv.get(Cf::Facts, &n.to_be_bytes()).unwrap().is_some());
        }
        // Their index and filter blocks were read into the block cache, and none stays pinned
        // there: pinned, those of every file flushed stayed for the file's life (also once
        // moved down out of level 0 whole), and a divided cache could not let them go.
        let memory = kv.memory();
        assert!(memory.block_cache > 0, "{memory:?}");
        // (87 bytes stay held here: less than any index or filter block of these files.)
        assert!(memory.block_cache_pinned < 1024, "{memory:?}");
        kv.divide_block_cache(1024);
        let idle = kv.memory();
        assert!(idle.block_cache <= idle.block_cache_capacity, "{idle:?}");
    }

    #[test]
    fn the_block_cache_can_be_divided_and_given_back_its_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let kv = RocksKv::open(dir.path()).unwrap();
        // 24 MiB of values that do not compress, in data files.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let keys = 6 * 1024u64;
        for n in 0..keys {
            let value = incompressible(&mut state, 4096);
            let mut batch = KvBatch::default();
            batch.put(Cf::Events, &n.to_be_bytes(), value);
            kv.write(batch, false).unwrap();
        }
        kv.flush().unwrap();
        let read_all = || {
            for n in 0..keys {
                assert_eq!(
                    kv.get(Cf::Events, &n.to_be_bytes())
                        .unwrap()
                        .map(|v| v.len()),
                    Some(4096)
                );
            }
        };
        read_all();
        let full = kv.memory();
        assert_eq!(full.block_cache_capacity, BLOCK_CACHE_BYTES as u64);
        assert!(full.block_cache > BLOCK_CACHE_BYTES as u64 / 2, "{full:?}");
        // Divided: what it holds past the new capacity is evicted (but for pinned blocks).
        kv.divide_block_cache(8);
        let idle = kv.memory();
        assert_eq!(idle.block_cache_capacity, BLOCK_CACHE_BYTES as u64 / 8);
        assert!(
            idle.block_cache <= idle.block_cache_capacity + idle.block_cache_pinned,
            "{idle:?}"
        );
        // Dividing again divides the configured capacity, not the current one.
        kv.divide_block_cache(8);
        assert_eq!(
            kv.memory().block_cache_capacity,
            BLOCK_CACHE_BYTES as u64 / 8
        );
        // Reads still work, within the small capacity.
        read_all();
        let small = kv.memory();
        assert!(
            small.block_cache <= small.block_cache_capacity + small.block_cache_pinned,
            "{small:?}"
        );
        // Given back: the cache fills up again.
        kv.divide_block_cache(1);
        assert_eq!(kv.memory().block_cache_capacity, BLOCK_CACHE_BYTES as u64);
        read_all();
        assert!(kv.memory().block_cache > BLOCK_CACHE_BYTES as u64 / 2);
        kv.divide_block_cache(0);
        assert_eq!(kv.memory().block_cache_capacity, BLOCK_CACHE_BYTES as u64);
    }
}
