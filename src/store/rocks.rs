//! The RocksDB store: opening with a schema check, reads for the API, one durable write batch
//! per commit.

use std::path::Path;

use rocksdb::{ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteOptions, DB};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::error::StoreError;
use super::keys::{self, cf, RunFilter};
use super::snapshot_codec;

use crate::domain::{
    ChainRef, EffectOutcome, IdMap, MessageHash, MessageRef, MessageShape, Run, SnapshotRecord,
    StepEvent, ToolEffect,
};
use crate::interpreter::{LogEvent, RunMeta, RunState, SpanFact, StoredFact};

/// The schema version this build writes. Opening a database with a higher one fails; one of
/// [`MIGRATED_SCHEMA`] is migrated on opening, an older one is refused.
pub const SCHEMA_VERSION: u32 = 4;
/// The oldest schema version migrated on opening: 3 lacks the model-request records (4), which
/// are written from its facts.
pub const MIGRATED_SCHEMA: u32 = 3;
const SCHEMA_KEY: &[u8] = b"schema_version";
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
pub const MEMTABLE_BLOOM_CFS: [&str; 6] = [
    cf::FACTS,
    cf::MESSAGES,
    cf::HISTORY,
    cf::RUN_STATE,
    cf::SPAN_RUNS,
    cf::GROUP_SPANS,
];

/// The RocksDB store.
pub struct Store {
    pub(super) db: DB,
    pub(super) sync: bool,
    /// Bytes of the write batches committed since opening (keys, values and batch framing).
    committed: std::sync::atomic::AtomicU64,
    /// Node ids of recently stored input histories (see [`super::history::ChainCache`]).
    pub(super) chains: std::sync::Mutex<super::history::ChainCache>,
    /// Decoded histories of recently read snapshots (see [`super::history_cache`]).
    pub(super) resolved: std::sync::Mutex<super::history_cache::HistoryCache>,
    /// The next free run key (see [`super::run_keys`]).
    pub(super) next_run_key: std::sync::atomic::AtomicU64,
    /// Committed run keys recently used.
    pub(super) run_keys: std::sync::Mutex<super::run_keys::RunKeyCache>,
    /// Runs written recently (see [`super::activity`]).
    pub(super) recent: std::sync::Mutex<super::activity::RecentWrites>,
    /// Claims of an alias another run owns, refused since opening (see [`super::aliases`]).
    pub(super) alias_conflicts: std::sync::atomic::AtomicU64,
}

/// A set of writes committed atomically by [`Store::commit`].
pub struct WriteBatch<'a> {
    pub(super) store: &'a Store,
    pub(super) batch: rocksdb::WriteBatch,
    /// Run keys given or taken away by this batch.
    pub(super) run_keys: super::run_keys::BatchRunKeys,
}

/// Deepest nesting of arrays and objects a stored JSON record may have: serde_json refuses to
/// read a document nested 128 levels or more, so a deeper record would be written and never read
/// back. [`WriteBatch::put_json`] refuses to write one.
pub const MAX_RECORD_DEPTH: usize = 127;

/// How deep the arrays and objects of a JSON document nest (0 for a scalar); one pass over its
/// bytes.
pub fn json_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The JSON form of a record for column family `cf_name`, or why it cannot be stored (it does
/// not serialise, or it would not read back).
pub fn encode_json<T: Serialize + ?Sized>(
    cf_name: &'static str,
    value: &T,
) -> Result<Vec<u8>, StoreError> {
    let bytes = serde_json::to_vec(value).map_err(|e| StoreError::Encode {
        cf: cf_name,
        reason: e.to_string(),
    })?;
    let depth = json_depth(&bytes);
    if depth > MAX_RECORD_DEPTH {
        return Err(StoreError::Encode {
            cf: cf_name,
            reason: format!(
                "the record nests {depth} levels deep, more than the {MAX_RECORD_DEPTH} a stored record may (it could not be read back)"
            ),
        });
    }
    Ok(bytes)
}

/// The handle of a column family to write to; an unknown one is an error, never a write
/// silently dropped.
fn write_handle<'s>(
    store: &'s Store,
    cf_name: &'static str,
) -> Result<&'s rocksdb::ColumnFamily, StoreError> {
    store
        .db
        .cf_handle(cf_name)
        .ok_or(StoreError::UnknownColumnFamily(cf_name))
}

impl WriteBatch<'_> {
    /// Puts a JSON-encoded value; a value that does not serialise, or would not read back
    /// (see [`MAX_RECORD_DEPTH`]), is an error and nothing is written.
    pub fn put_json<T: Serialize + ?Sized>(
        &mut self,
        cf_name: &'static str,
        key: &[u8],
        value: &T,
    ) -> Result<(), StoreError> {
        let bytes = encode_json(cf_name, value)?;
        let handle = write_handle(self.store, cf_name)?;
        self.batch.put_cf(handle, key, bytes);
        Ok(())
    }

    /// Puts raw bytes.
    pub fn put_raw(
        &mut self,
        cf_name: &'static str,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), StoreError> {
        let handle = write_handle(self.store, cf_name)?;
        self.batch.put_cf(handle, key, value);
        Ok(())
    }

    /// Puts raw bytes in the `default` column family.
    pub(super) fn put_default(&mut self, key: &[u8], value: &[u8]) {
        self.batch.put(key, value);
    }

    /// Deletes the keys from `from` (inclusive) to `to` (exclusive).
    pub(super) fn delete_range(
        &mut self,
        cf_name: &'static str,
        from: &[u8],
        to: &[u8],
    ) -> Result<(), StoreError> {
        let handle = write_handle(self.store, cf_name)?;
        self.batch.delete_range_cf(handle, from, to);
        Ok(())
    }

    /// Puts a snapshot record of a run.
    pub fn put_snapshot(
        &mut self,
        run_id: &str,
        record: &SnapshotRecord,
    ) -> Result<(), StoreError> {
        let run = self.run_key(run_id)?;
        let key = keys::snapshot_key(run, record.meta.seq);
        self.put_raw(cf::SNAPSHOTS, &key, &snapshot_codec::encode(record))
    }

    /// Deletes a snapshot record of a run.
    pub fn delete_snapshot(&mut self, run_id: &str, seq: u32) -> Result<(), StoreError> {
        let run = self.run_key(run_id)?;
        self.delete(cf::SNAPSHOTS, &keys::snapshot_key(run, seq))
    }

    /// Deletes a key.
    pub fn delete(&mut self, cf_name: &'static str, key: &[u8]) -> Result<(), StoreError> {
        let handle = write_handle(self.store, cf_name)?;
        self.batch.delete_cf(handle, key);
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
    /// Opens (creating if needed) the database in `dir`. `sync` makes every commit fsync the WAL.
    pub fn open(dir: &Path, sync: bool) -> Result<Store, StoreError> {
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
        let descriptors = cf::ALL.iter().map(|name| {
            let mut cf_options = Options::default();
            cf_options.set_block_based_table_factory(&table);
            cf_options.set_compression_type(rocksdb::DBCompressionType::Lz4);
            cf_options.set_bottommost_compression_type(rocksdb::DBCompressionType::Zstd);
            if *name == cf::OUTBOX {
                // Entries live briefly (deleted once sent): small memtables bound the memory the
                // outbox takes to OUTBOX_MEMTABLE_BYTES x 2, whatever the backlog.
                cf_options.set_write_buffer_size(OUTBOX_MEMTABLE_BYTES);
                cf_options.set_max_write_buffer_number(2);
            }
            if MEMTABLE_BLOOM_CFS.contains(name) {
                cf_options.set_memtable_whole_key_filtering(true);
                cf_options.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
            }
            ColumnFamilyDescriptor::new(*name, cf_options)
        });
        let db = DB::open_cf_descriptors(&options, dir, descriptors)?;
        let store = Store {
            db,
            sync,
            committed: std::sync::atomic::AtomicU64::new(0),
            chains: std::sync::Mutex::new(Default::default()),
            resolved: std::sync::Mutex::new(Default::default()),
            next_run_key: std::sync::atomic::AtomicU64::new(0),
            run_keys: std::sync::Mutex::new(Default::default()),
            recent: std::sync::Mutex::new(Default::default()),
            alias_conflicts: std::sync::atomic::AtomicU64::new(0),
        };
        let migrate = store.check_schema(dir)?;
        store.next_run_key.store(
            store.stored_next_run_key()?,
            std::sync::atomic::Ordering::SeqCst,
        );
        if migrate {
            store.migrate_model_requests((SCHEMA_KEY, SCHEMA_VERSION.to_string().as_bytes()))?;
        }
        Ok(store)
    }

    /// Checks the schema version on disk (writing it in a new store); true when the store is to
    /// be migrated.
    fn check_schema(&self, dir: &Path) -> Result<bool, StoreError> {
        match self.db.get(SCHEMA_KEY)? {
            Some(bytes) => {
                let found = std::str::from_utf8(&bytes)
                    .ok()
                    .and_then(|s| s.parse::<u32>().ok())
                    .ok_or_else(|| StoreError::Corrupt {
                        cf: "default",
                        reason: "schema version is not a number".into(),
                    })?;
                if found < MIGRATED_SCHEMA {
                    return Err(StoreError::OlderSchema {
                        path: dir.display().to_string(),
                        found,
                        supported: SCHEMA_VERSION,
                    });
                }
                if found > SCHEMA_VERSION {
                    return Err(StoreError::NewerSchema {
                        path: dir.display().to_string(),
                        found,
                        supported: SCHEMA_VERSION,
                    });
                }
                Ok(found < SCHEMA_VERSION)
            }
            None => {
                let mut options = WriteOptions::default();
                options.set_sync(true);
                self.db
                    .put_opt(SCHEMA_KEY, SCHEMA_VERSION.to_string(), &options)?;
                Ok(false)
            }
        }
    }

    /// Starts a write batch.
    pub fn batch(&self) -> WriteBatch<'_> {
        WriteBatch {
            store: self,
            batch: rocksdb::WriteBatch::default(),
            run_keys: Default::default(),
        }
    }

    /// Commits a batch atomically, with the WAL on and fsync when configured.
    pub fn commit(&self, batch: WriteBatch<'_>) -> Result<(), StoreError> {
        self.commit_runs(batch, &[])
    }

    /// Commits a batch that wrote the derived state of `runs` (recorded as recently written
    /// once the commit succeeded).
    pub fn commit_runs(&self, batch: WriteBatch<'_>, runs: &[String]) -> Result<(), StoreError> {
        let mut options = WriteOptions::default();
        options.set_sync(self.sync);
        options.disable_wal(false);
        let bytes = batch.batch.size_in_bytes() as u64;
        self.db.write_opt(batch.batch, &options)?;
        self.settle_run_keys(batch.run_keys);
        self.note_written(runs.iter().map(String::as_str));
        self.committed
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Bytes of the write batches committed since the store was opened (for reporting).
    pub fn committed_bytes(&self) -> u64 {
        self.committed.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn handle(&self, name: &'static str) -> Result<&rocksdb::ColumnFamily, StoreError> {
        self.db.cf_handle(name).ok_or(StoreError::Corrupt {
            cf: name,
            reason: "column family missing".into(),
        })
    }

    fn get_json<T: DeserializeOwned>(
        &self,
        name: &'static str,
        key: &[u8],
    ) -> Result<Option<T>, StoreError> {
        let handle = self.handle(name)?;
        match self.db.get_pinned_cf(handle, key)? {
            Some(bytes) => decode(name, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Visits `(key, value)` pairs whose key starts with `prefix`, in key order, from `start`
    /// (a key at or after the prefix) until `visit` returns false.
    pub(super) fn scan(
        &self,
        name: &'static str,
        prefix: &[u8],
        start: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let handle = self.handle(name)?;
        // The raw iterator lends each key and value instead of copying them out.
        let mut iter = self.db.raw_iterator_cf(handle);
        iter.seek(start);
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            if !key.starts_with(prefix) || !visit(key, value)? {
                return Ok(());
            }
            iter.next();
        }
        iter.status()?;
        Ok(())
    }

    fn scan_json<T: DeserializeOwned>(
        &self,
        name: &'static str,
        prefix: &[u8],
    ) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::new();
        self.scan(name, prefix, prefix, |_, v| {
            out.push(decode(name, v)?);
            Ok(true)
        })?;
        Ok(out)
    }

    /// A run by its id, for readers: a run marked damaged (see [`super::damage`]) carries a
    /// `damaged: <reason>` warning, and a run whose record cannot be decoded is given as a
    /// placeholder that says so, so one damaged run never hides the others.
    pub fn run(&self, run_id: &str) -> Result<Option<Run>, StoreError> {
        self.readable_run(run_id, 0)
    }

    /// [`Store::run`], with the start (from an index position) for a placeholder.
    fn readable_run(&self, run_id: &str, started_ns: u64) -> Result<Option<Run>, StoreError> {
        let damage = self.damage(run_id)?;
        match self.run_record(run_id) {
            Ok(Some(mut run)) => {
                if let Some(reason) = damage {
                    run.warnings.push(super::damage::warning(&reason));
                }
                Ok(Some(run))
            }
            Ok(None) => Ok(None),
            Err(e) if !e.is_retryable() => Ok(Some(super::damage::placeholder(
                run_id,
                started_ns,
                &damage.unwrap_or_else(|| e.to_string()),
            ))),
            Err(e) => Err(e),
        }
    }

    /// A run's stored record as written (the writer's read: no damage warnings, and a record
    /// that cannot be decoded is an error).
    pub fn run_record(&self, run_id: &str) -> Result<Option<Run>, StoreError> {
        self.get_json(cf::RUNS, run_id.as_bytes())
    }

    /// Resolves a run id or an alias (e.g. `gen_ai.agent.call.id`) to a run id.
    pub fn resolve_run(&self, id_or_alias: &str) -> Result<Option<String>, StoreError> {
        let runs = self.handle(cf::RUNS)?;
        if self
            .db
            .get_pinned_cf(runs, id_or_alias.as_bytes())?
            .is_some()
        {
            return Ok(Some(id_or_alias.to_string()));
        }
        let aliases = self.handle(cf::ALIASES)?;
        Ok(self
            .db
            .get_cf(aliases, id_or_alias.as_bytes())?
            .and_then(|v| String::from_utf8(v).ok()))
    }

    /// Runs passing `filter`, in start order, after `cursor` (a value from a previous page),
    /// at most `limit`; with the cursor of the next page when there is one.
    pub fn list_runs(
        &self,
        filter: &RunFilter,
        cursor: Option<&[u8]>,
        limit: usize,
    ) -> Result<(Vec<Run>, Option<Vec<u8>>), StoreError> {
        let (tag, value) = filter.index();
        let prefix = keys::index_prefix(tag, value);
        let mut start = prefix.clone();
        if let Some(c) = cursor {
            start.extend_from_slice(c);
            start.push(0); // strictly after the cursor position
        }
        let mut runs = Vec::new();
        let mut next = None;
        self.scan(cf::RUN_INDEX, &prefix, &start, |key, _| {
            let position = &key[prefix.len()..];
            let Some(run_id) = position.get(8..).and_then(|b| std::str::from_utf8(b).ok()) else {
                return Ok(true);
            };
            let started_ns = position
                .get(..8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_be_bytes);
            if let Some(run) = self.readable_run(run_id, started_ns)? {
                if filter.matches(&run) {
                    if runs.len() == limit {
                        next = Some(keys::index_position(&runs[runs.len() - 1]));
                        return Ok(false);
                    }
                    runs.push(run);
                }
            }
            Ok(true)
        })?;
        Ok((runs, next))
    }

    /// A run's step events, chronological.
    pub fn events(&self, run_id: &str) -> Result<Vec<StepEvent>, StoreError> {
        self.scan_json(cf::EVENTS, &keys::run_prefix(run_id))
    }

    /// A run's tool-effect ledger.
    pub fn effects(&self, run_id: &str) -> Result<Vec<ToolEffect>, StoreError> {
        self.scan_json(cf::EFFECTS, &keys::run_prefix(run_id))
    }

    /// A run's tool-effect ledger as a continuation reads it: how each entry ended, in request
    /// order, and the whole entries of the unresolved calls (the others' arguments, results and
    /// times are skipped, not built).
    pub fn effect_outcomes(
        &self,
        run_id: &str,
    ) -> Result<(Vec<EffectOutcome>, Vec<ToolEffect>), StoreError> {
        self.effect_outcomes_with(run_id, |_| None)
    }

    /// [`Store::effect_outcomes`], first asking `known` about each entry's stored bytes (called
    /// once per entry, in request order): an outcome it gives is taken instead of decoding the
    /// entry, so a caller that read the ledger before decodes only what changed since.
    pub fn effect_outcomes_with(
        &self,
        run_id: &str,
        mut known: impl FnMut(&[u8]) -> Option<EffectOutcome>,
    ) -> Result<(Vec<EffectOutcome>, Vec<ToolEffect>), StoreError> {
        let prefix = keys::run_prefix(run_id);
        let (mut outcomes, mut unresolved) = (Vec::new(), Vec::new());
        self.scan(cf::EFFECTS, &prefix, &prefix, |_, v| {
            let outcome: EffectOutcome = match known(v) {
                Some(outcome) => outcome,
                None => decode(cf::EFFECTS, v)?,
            };
            if outcome.status.is_unresolved() {
                unresolved.push(decode(cf::EFFECTS, v)?);
            }
            outcomes.push(outcome);
            Ok(true)
        })?;
        Ok((outcomes, unresolved))
    }

    /// A run's snapshots, in order.
    pub fn snapshots(&self, run_id: &str) -> Result<Vec<SnapshotRecord>, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        self.scan(cf::SNAPSHOTS, &run.0, &run.0, |_, v| {
            out.push(snapshot_codec::decode(v)?);
            Ok(true)
        })?;
        Ok(out)
    }

    /// One snapshot record of a run.
    pub fn snapshot(&self, run_id: &str, seq: u32) -> Result<Option<SnapshotRecord>, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(None);
        };
        let handle = self.handle(cf::SNAPSHOTS)?;
        match self
            .db
            .get_pinned_cf(handle, keys::snapshot_key(run, seq))?
        {
            Some(bytes) => snapshot_codec::decode(&bytes).map(Some),
            None => Ok(None),
        }
    }

    /// The run's last snapshot record that passes `keep`, reading backwards from the last one
    /// (so the latest snapshot of a long run costs one or two reads, not a scan).
    pub fn last_snapshot(
        &self,
        run_id: &str,
        keep: impl Fn(&SnapshotRecord) -> bool,
    ) -> Result<Option<SnapshotRecord>, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(None);
        };
        let handle = self.handle(cf::SNAPSHOTS)?;
        let start = keys::snapshot_key(run, u32::MAX);
        for item in self
            .db
            .iterator_cf(handle, IteratorMode::From(&start, Direction::Reverse))
        {
            let (key, value) = item?;
            if !key.starts_with(&run.0) {
                break;
            }
            let record = snapshot_codec::decode(&value)?;
            if keep(&record) {
                return Ok(Some(record));
            }
        }
        Ok(None)
    }

    /// A run's records in a per-run column family, decoded as `T` (for readers that need only
    /// some of a record's fields: serde skips the others without building them).
    pub fn run_records<T: DeserializeOwned>(
        &self,
        name: &'static str,
        run_id: &str,
    ) -> Result<Vec<T>, StoreError> {
        self.scan_json(name, &keys::run_prefix(run_id))
    }

    /// A run's span facts as stored (histories by reference), in span id order.
    pub fn stored_facts(&self, run_id: &str) -> Result<Vec<StoredFact>, StoreError> {
        self.scan_json(cf::FACTS, &keys::run_prefix(run_id))
    }

    /// One stored fact of a run.
    pub fn stored_fact(
        &self,
        run_id: &str,
        span_id: &str,
    ) -> Result<Option<StoredFact>, StoreError> {
        self.get_json(cf::FACTS, &keys::run_child(run_id, span_id))
    }

    /// A run's span facts with their histories resolved, in span id order (reads every fact,
    /// history node and message of the run).
    pub fn facts(&self, run_id: &str) -> Result<Vec<SpanFact>, StoreError> {
        let stored = self.stored_facts(run_id)?;
        if stored
            .iter()
            .all(|s| s.input_chain.is_none() && s.all_messages_chain.is_none())
        {
            return Ok(stored.into_iter().map(|s| s.fact).collect());
        }
        let nodes = self.run_nodes(run_id)?;
        let mut shapes: IdMap<MessageHash, MessageShape> = IdMap::default();
        if let Some(run) = self.run_key(run_id)? {
            self.scan(cf::MESSAGES, &run.0, &run.0, |k, v| {
                let hash = MessageHash::from_slice(&k[run.0.len()..]).ok_or_else(|| {
                    StoreError::Corrupt {
                        cf: cf::MESSAGES,
                        reason: format!("message key of {} bytes", k.len()),
                    }
                })?;
                let body: Value = decode(cf::MESSAGES, v)?;
                shapes.insert(hash, MessageShape::of(&body));
                Ok(true)
            })?;
        }
        let refs = |chain: &ChainRef| -> Result<Vec<MessageRef>, StoreError> {
            nodes
                .resolve(chain)?
                .into_iter()
                .map(|hash| match shapes.get(&hash) {
                    Some(shape) => Ok(MessageRef {
                        shape: shape.clone(),
                        hash,
                    }),
                    None => Err(StoreError::MissingMessage {
                        run_id: run_id.to_string(),
                        hash: hash.to_string(),
                    }),
                })
                .collect()
        };
        stored
            .into_iter()
            .map(|s| {
                let mut fact = s.fact;
                if let Some(chain) = &s.input_chain {
                    fact.input = Some(std::sync::Arc::new(refs(chain)?));
                }
                if let Some(chain) = &s.all_messages_chain {
                    fact.all_messages = Some(refs(chain)?);
                }
                Ok(fact)
            })
            .collect()
    }

    /// A run's meta.
    pub fn run_meta(&self, run_id: &str) -> Result<Option<RunMeta>, StoreError> {
        self.get_json(cf::RUN_META, run_id.as_bytes())
    }

    /// The working state a run's last derivation left for appending to it.
    pub fn run_state(&self, run_id: &str) -> Result<Option<RunState>, StoreError> {
        self.get_json(cf::RUN_STATE, run_id.as_bytes())
    }

    /// How many ledger entries of the run have tool-call id `id`.
    pub fn call_count(&self, run_id: &str, id: &str) -> Result<u32, StoreError> {
        let handle = self.handle(cf::RUN_STATE)?;
        match self.db.get_pinned_cf(handle, keys::run_child(run_id, id))? {
            None => Ok(0),
            Some(bytes) => <[u8; 4]>::try_from(&bytes[..])
                .map(u32::from_be_bytes)
                .map_err(|_| StoreError::Corrupt {
                    cf: cf::RUN_STATE,
                    reason: format!("call count of {id:?} is {} bytes", bytes.len()),
                }),
        }
    }

    /// The run a tool span belongs to.
    pub fn span_run(&self, trace_id: &str, span_id: &str) -> Result<Option<String>, StoreError> {
        let handle = self.handle(cf::SPAN_RUNS)?;
        Ok(self
            .db
            .get_cf(handle, keys::span_key(trace_id, span_id))?
            .and_then(|v| String::from_utf8(v).ok()))
    }

    /// The parent span of a grouping span, if `trace_id span_id` is one.
    pub fn group_parent(
        &self,
        trace_id: &str,
        span_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let handle = self.handle(cf::GROUP_SPANS)?;
        Ok(self
            .db
            .get_cf(handle, keys::span_key(trace_id, span_id))?
            .and_then(|v| String::from_utf8(v).ok()))
    }

    /// The legacy GenAI events received as log records for one span, in their order.
    pub fn span_logs(&self, trace_id: &str, span_id: &str) -> Result<Vec<LogEvent>, StoreError> {
        let mut prefix = keys::span_key(trace_id, span_id);
        prefix.push(0);
        self.scan_json(cf::SPAN_LOGS, &prefix)
    }

    /// Stored log records timed at or before `cutoff_ns` whose span has not arrived as a model
    /// request or tool call: `(key, trace id, span id)`, from at most `scan_limit` records read.
    /// Records that cannot be decoded count as orphans.
    pub fn orphan_logs(
        &self,
        cutoff_ns: u64,
        scan_limit: usize,
    ) -> Result<Vec<(Vec<u8>, String, String)>, StoreError> {
        let mut out = Vec::new();
        let mut read = 0usize;
        self.scan(cf::SPAN_LOGS, b"", b"", |k, v| {
            read += 1;
            match serde_json::from_slice::<LogEvent>(v) {
                Ok(e) if e.time_ns > cutoff_ns => {}
                Ok(e) => {
                    if self.span_run(&e.trace_id, &e.span_id)?.is_none() {
                        out.push((k.to_vec(), e.trace_id, e.span_id));
                    }
                }
                Err(_) => out.push((k.to_vec(), String::new(), String::new())),
            }
            Ok(read < scan_limit)
        })?;
        Ok(out)
    }

    /// All keys of column family `name` that start with `prefix`.
    pub fn keys_with_prefix(
        &self,
        name: &'static str,
        prefix: &[u8],
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut out = Vec::new();
        self.scan(name, prefix, prefix, |k, _| {
            out.push(k.to_vec());
            Ok(true)
        })?;
        Ok(out)
    }

    /// Delegate runs of the tool span `trace_id span_id`: (key, child run id).
    pub fn pending_children(
        &self,
        trace_id: &str,
        span_id: &str,
    ) -> Result<Vec<(Vec<u8>, String)>, StoreError> {
        let mut prefix = keys::span_key(trace_id, span_id);
        prefix.push(0);
        let mut out = Vec::new();
        self.scan(cf::PENDING_PARENTS, &prefix, &prefix, |k, _| {
            if let Ok(child) = std::str::from_utf8(&k[prefix.len()..]) {
                out.push((k.to_vec(), child.to_string()));
            }
            Ok(true)
        })?;
        Ok(out)
    }

    /// Ids of runs whose status is `running`.
    pub fn running_run_ids(&self) -> Result<Vec<String>, StoreError> {
        let prefix = keys::index_prefix(b's', "running");
        let mut out = Vec::new();
        self.scan(cf::RUN_INDEX, &prefix, &prefix, |k, _| {
            if let Some(id) = k
                .get(prefix.len() + 8..)
                .and_then(|b| std::str::from_utf8(b).ok())
            {
                out.push(id.to_string());
            }
            Ok(true)
        })?;
        Ok(out)
    }

    /// Bytes of the keys and values of a column family before compression (a full scan, for
    /// reporting and benchmarks).
    pub fn logical_bytes(&self, cf_name: &'static str) -> Result<u64, StoreError> {
        let handle = self.handle(cf_name)?;
        let mut total = 0u64;
        for item in self.db.iterator_cf(handle, rocksdb::IteratorMode::Start) {
            let (k, v) = item?;
            total += (k.len() + v.len()) as u64;
        }
        Ok(total)
    }

    /// RocksDB's estimate of the number of keys in a column family (cheap; for `/metrics`).
    pub fn estimated_keys(&self, cf_name: &'static str) -> Result<u64, StoreError> {
        let handle = self.handle(cf_name)?;
        Ok(self
            .db
            .property_int_value_cf(handle, "rocksdb.estimate-num-keys")?
            .unwrap_or(0))
    }

    /// Flushes the memtables to data files (for reporting disk use).
    pub fn flush(&self) -> Result<(), StoreError> {
        for name in cf::ALL {
            self.db.flush_cf(self.handle(name)?)?;
        }
        Ok(())
    }

    /// Compacts every column family fully (for reporting disk use after compaction).
    pub fn compact(&self) -> Result<(), StoreError> {
        for name in cf::ALL {
            self.db
                .compact_range_cf(self.handle(name)?, None::<&[u8]>, None::<&[u8]>);
        }
        Ok(())
    }

    /// Bytes on disk of one column family's live data files (for reporting).
    pub fn cf_live_bytes(&self, name: &'static str) -> u64 {
        self.db
            .cf_handle(name)
            .and_then(|h| {
                self.db
                    .property_int_value_cf(h, "rocksdb.total-sst-files-size")
                    .ok()
                    .flatten()
            })
            .unwrap_or(0)
    }

    /// Approximate bytes on disk of the live data files (for reporting).
    pub fn live_bytes(&self) -> u64 {
        cf::ALL
            .iter()
            .filter_map(|name| self.db.cf_handle(name))
            .filter_map(|h| {
                self.db
                    .property_int_value_cf(h, "rocksdb.total-sst-files-size")
                    .ok()
                    .flatten()
            })
            .sum()
    }
}

/// Locks one of the store's in-memory caches. A cache whose lock was poisoned (a panic while
/// it was held, caught by the writer) may be half-updated: it is emptied and used again, never
/// left disabled for the rest of the process (every cache here is only a shortcut).
pub(super) fn lock_cache<T: Default>(cache: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    cache.lock().unwrap_or_else(|poisoned| {
        let mut guard = poisoned.into_inner();
        *guard = T::default();
        cache.clear_poison();
        guard
    })
}

pub(super) fn decode<T: DeserializeOwned>(
    cf_name: &'static str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        cf: cf_name,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_schema_is_refused_with_a_clear_message() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), true).unwrap();
            store.db.put(SCHEMA_KEY, "99").unwrap();
        }
        let err = Store::open(dir.path(), true).err().unwrap();
        let text = err.to_string();
        assert!(text.contains("schema version 99"), "{text}");
        assert!(text.contains("upgrade stepline"), "{text}");
        // A layout older than 3 is refused too (not migrated: history storage changed in 2 and
        // 3; 3 is migrated, see `continuation::context`).
        for version in ["1", "2"] {
            let old = tempfile::tempdir().unwrap();
            {
                let store = Store::open(old.path(), true).unwrap();
                store.db.put(SCHEMA_KEY, version).unwrap();
            }
            let text = Store::open(old.path(), true).err().unwrap().to_string();
            assert!(
                text.contains(&format!("schema version {version}")),
                "{text}"
            );
            assert!(text.contains("older"), "{text}");
        }
        // The current version reopens fine.
        let dir2 = tempfile::tempdir().unwrap();
        drop(Store::open(dir2.path(), true).unwrap());
        Store::open(dir2.path(), true).unwrap();
    }

    /// A JSON array nested `depth` levels.
    fn nested(depth: usize) -> Value {
        let mut v = Value::from(1);
        for _ in 0..depth {
            v = Value::Array(vec![v]);
        }
        v
    }

    #[test]
    fn a_record_that_would_not_read_back_is_refused_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), false).unwrap();
        // The deepest record allowed reads back.
        let deepest = nested(MAX_RECORD_DEPTH);
        let mut batch = store.batch();
        batch.put_json(cf::RUN_META, b"deep", &deepest).unwrap();
        store.commit(batch).unwrap();
        let read: Value = store.get_json(cf::RUN_META, b"deep").unwrap().unwrap();
        assert_eq!(read, deepest);
        assert_eq!(
            json_depth(&serde_json::to_vec(&read).unwrap()),
            MAX_RECORD_DEPTH
        );
        // One more level would not: refused with a permanent error, nothing written.
        let too_deep = nested(MAX_RECORD_DEPTH + 1);
        assert!(serde_json::from_slice::<Value>(&serde_json::to_vec(&too_deep).unwrap()).is_err());
        let mut batch = store.batch();
        let error = batch
            .put_json(cf::RUN_META, b"deeper", &too_deep)
            .unwrap_err();
        assert!(!error.is_retryable(), "{error}");
        assert!(batch.is_empty());
        // Brackets inside strings do not count.
        assert_eq!(json_depth(br#"{"a":"[[[[\"{{"}"#), 1);
        // A write to a column family the database does not have is an error.
        let mut batch = store.batch();
        assert!(matches!(
            batch.put_raw("no-such-cf", b"k", b"v"),
            Err(StoreError::UnknownColumnFamily("no-such-cf"))
        ));
        assert!(batch.delete("no-such-cf", b"k").is_err());
    }
}
