//! Reads of a run's span facts and the ingest-side records around them: run meta and working
//! state, tool-call counts, span → run links, grouping spans, log events, delegate links.

use serde::de::DeserializeOwned;
use serde_json::Value;

use std::sync::atomic::Ordering;

use super::core::{decode, Store, WriteBatch};
use super::error::StoreError;
use super::keys::{self, cf, Cf};
use crate::domain::{ChainRef, IdMap, MessageHash, MessageRef, MessageShape};
use crate::records::{LogEvent, RunMeta, RunState, SpanFact, StoredFact};

/// Marks ([`Cf::Meta`]) a store in which every run with a stored fact has a run meta (the
/// writer puts one for a run known only from grouping spans too); a store written before is
/// given the missing metas once, when it is opened.
pub(crate) const FACT_RUNS_HAVE_META: &[u8] = b"fact_runs_have_meta";

/// Runs looked at per batch when older stores are given their missing metas.
const META_BATCH: usize = 1_000;

impl Store {
    /// A run's records in a column family keyed by run key (facts, step events, ledger
    /// entries), decoded as `T` (for readers that need only some of a record's fields: serde
    /// skips the others without building them). None for a run without a key.
    pub fn run_records<T: DeserializeOwned>(
        &self,
        cf: Cf,
        run_id: &str,
    ) -> Result<Vec<T>, StoreError> {
        match self.run_key(run_id)? {
            Some(run) => self.scan_json(cf, &run.0),
            None => Ok(Vec::new()),
        }
    }

    /// A run's span facts as stored (histories by reference), in span id order.
    pub fn stored_facts(&self, run_id: &str) -> Result<Vec<StoredFact>, StoreError> {
        self.run_records(cf::FACTS, run_id)
    }

    /// One stored fact of a run.
    pub fn stored_fact(
        &self,
        run_id: &str,
        span_id: &str,
    ) -> Result<Option<StoredFact>, StoreError> {
        match self.run_key(run_id)? {
            Some(run) => self.get_json(cf::FACTS, &keys::fact_key(run, span_id)),
            None => Ok(None),
        }
    }

    /// A run's span facts with their histories resolved, in span id order (reads every fact,
    /// history node and message of the run).
    pub fn facts(&self, run_id: &str) -> Result<Vec<SpanFact>, StoreError> {
        let stored = self.stored_facts(run_id)?;
        if stored.iter().all(|s| {
            s.input_chain.is_none() && s.all_messages_chain.is_none() && s.instructions.is_none()
        }) {
            return Ok(stored.into_iter().map(|s| s.fact).collect());
        }
        let nodes = self.run_nodes(run_id)?;
        // The bodies of the instructions the facts name (each kept once).
        let mut instructions: IdMap<MessageHash, Option<Value>> = stored
            .iter()
            .filter_map(|s| s.instructions)
            .map(|hash| (hash, None))
            .collect();
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
                if let Some(slot) = instructions.get_mut(&hash) {
                    *slot = Some(body);
                }
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
                if let Some(hash) = &s.instructions {
                    let body = instructions.get(hash).cloned().flatten();
                    fact.system_instructions =
                        Some(body.ok_or_else(|| StoreError::MissingMessage {
                            run_id: run_id.to_string(),
                            hash: hash.to_string(),
                        })?);
                }
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

    /// True when a run with neither a record nor a meta has no fact stored (every run with a
    /// fact has a meta in this store): its facts need not be scanned for.
    pub fn fact_runs_have_meta(&self) -> bool {
        self.fact_runs_have_meta.load(Ordering::Acquire)
    }

    /// Gives every run with a stored fact but no meta a default meta (a store written before
    /// the writer put metas for runs known only from grouping spans), in batches, then marks the
    /// store; once per store. Rerunning after an interruption finds fewer runs without one.
    pub(super) fn give_fact_runs_meta(&self) -> Result<(), StoreError> {
        if !self.kv.contains(Cf::Meta, FACT_RUNS_HAVE_META)? {
            let mut from: Vec<u8> = Vec::new();
            loop {
                let mut run_ids: Vec<Vec<u8>> = Vec::new();
                self.scan(cf::FACTS, b"", &from, |key, _| {
                    // A key without a run id is read by no one: it has no run to give meta.
                    let Some((run_id, _)) = keys::split_run_id_key(key) else {
                        return Ok(true);
                    };
                    let run_id = run_id.as_bytes();
                    if run_ids.last().map(Vec::as_slice) != Some(run_id) {
                        if run_ids.len() == META_BATCH {
                            return Ok(false);
                        }
                        run_ids.push(run_id.to_vec());
                    }
                    Ok(true)
                })?;
                let Some(last) = run_ids.last() else { break };
                // Keys of the next run sort after `<last run id> \x01` (a run id has no NUL).
                from = last.clone();
                from.push(1);
                let mut batch = self.batch();
                for run_id in &run_ids {
                    if !self.kv.contains(cf::RUN_META, run_id)? {
                        batch.put_json(cf::RUN_META, run_id, &RunMeta::default())?;
                    }
                }
                let full = run_ids.len() == META_BATCH;
                self.write_batch(batch, self.sync)?;
                if !full {
                    break;
                }
            }
            let mut done = self.batch();
            done.put_raw(Cf::Meta, FACT_RUNS_HAVE_META, b"")?;
            self.write_batch(done, self.sync)?;
        }
        self.fact_runs_have_meta.store(true, Ordering::Release);
        Ok(())
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
        match self.kv.get(cf::RUN_STATE, &keys::run_child(run_id, id))? {
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
        self.get_text(cf::SPAN_RUNS, &keys::span_key(trace_id, span_id))
    }

    /// The parent span of a grouping span, if `trace_id span_id` is one.
    pub fn group_parent(
        &self,
        trace_id: &str,
        span_id: &str,
    ) -> Result<Option<String>, StoreError> {
        self.get_text(cf::GROUP_SPANS, &keys::span_key(trace_id, span_id))
    }

    /// The legacy GenAI events received as log records for one span, in their order.
    pub fn span_logs(&self, trace_id: &str, span_id: &str) -> Result<Vec<LogEvent>, StoreError> {
        if !self.span_logs_stored.load(Ordering::Acquire) {
            return Ok(Vec::new());
        }
        let mut prefix = keys::span_key(trace_id, span_id);
        prefix.push(0);
        self.scan_json(cf::SPAN_LOGS, &prefix)
    }

    /// Notes whether the store holds a log record (when it is opened).
    pub(super) fn note_stored_span_logs(&self) -> Result<(), StoreError> {
        if self.holds_any(cf::SPAN_LOGS, b"")? {
            self.span_logs_stored.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Notes whether the store holds a run waiting for a tool span (when it is opened).
    pub(super) fn note_stored_pending_children(&self) -> Result<(), StoreError> {
        if self.holds_any(cf::PENDING_PARENTS, b"")? {
            self.pending_children_stored.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Whether column family `cf` holds a key starting with `prefix`.
    pub(super) fn holds_any(&self, cf: Cf, prefix: &[u8]) -> Result<bool, StoreError> {
        let mut any = false;
        self.scan(cf, prefix, prefix, |_, _| {
            any = true;
            Ok(false)
        })?;
        Ok(any)
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
    pub fn keys_with_prefix(&self, cf: Cf, prefix: &[u8]) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut out = Vec::new();
        self.scan(cf, prefix, prefix, |k, _| {
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
        if !self.pending_children_stored.load(Ordering::Acquire) {
            return Ok(Vec::new());
        }
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
}

impl WriteBatch<'_> {
    /// Puts the key of a run waiting for a tool span as its parent (`trace span \0 run_id`);
    /// from now on the store looks for a tool span's waiting runs.
    pub fn put_pending_child(&mut self, key: &[u8]) -> Result<(), StoreError> {
        self.store
            .pending_children_stored
            .store(true, Ordering::Release);
        self.put_raw(cf::PENDING_PARENTS, key, b"")
    }

    /// Puts a log record of a span (JSON) under `key` (`trace span \0 order key`); from now on
    /// the store looks for a span's log records.
    pub fn put_span_log(&mut self, key: &[u8], event: &LogEvent) -> Result<(), StoreError> {
        self.store.span_logs_stored.store(true, Ordering::Release);
        self.put_json(cf::SPAN_LOGS, key, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{FactKind, SCHEMA_VERSION};
    use crate::store::kv::KvBatch;

    /// A grouping span's fact as schema 4 stored it (instructions inline, when it has them).
    fn stored_v4(span: &str, instructions: &Value) -> Vec<u8> {
        let mut fact = SpanFact::new(FactKind::Group, "t".into(), span.into(), "cycle".into());
        fact.system_instructions = Some(instructions.clone());
        let stored = StoredFact {
            fact,
            instructions: None,
            input_chain: None,
            all_messages_chain: None,
        };
        serde_json::to_vec(&stored).unwrap()
    }

    /// Runs waiting for a tool span, or for a snapshot with a history, are looked for only once
    /// the store may hold one: they are found as soon as the first is put, and after a restart.
    #[test]
    fn waiting_runs_are_found_once_the_first_is_put_and_after_a_restart() {
        use crate::domain::NodeId;
        use crate::store::{ScopeKey, Wanted};
        let dir = tempfile::tempdir().unwrap();
        let trace = "ab".repeat(16);
        let (scope, tip) = (ScopeKey([3; 16]), NodeId([4; 16]));
        let wanted = Wanted {
            run_id: "child-run".into(),
            first_start: 7,
            len: 2,
        };
        let child_key = |span: &str, run: &str| {
            let mut key = keys::span_key(&trace, span);
            key.push(0);
            key.extend_from_slice(run.as_bytes());
            key
        };
        {
            let store = Store::open(dir.path(), false).unwrap();
            assert!(!store.pending_children_stored.load(Ordering::Acquire));
            assert!(!store.lineage_wanted_stored.load(Ordering::Acquire));
            assert!(store.pending_children(&trace, "span-1").unwrap().is_empty());
            assert!(store.lineage_wanted(&scope, &tip).unwrap().is_empty());
            let mut batch = store.batch();
            batch
                .put_pending_child(&child_key("span-1", "child-run"))
                .unwrap();
            batch.put_lineage_wanted(&scope, &tip, &wanted).unwrap();
            store.commit(batch).unwrap();
            assert_eq!(
                store.pending_children(&trace, "span-1").unwrap(),
                vec![(child_key("span-1", "child-run"), "child-run".to_string())]
            );
            assert_eq!(
                store.lineage_wanted(&scope, &tip).unwrap(),
                vec![wanted.clone()]
            );
        }
        let reopened = Store::open(dir.path(), false).unwrap();
        assert_eq!(
            reopened.pending_children(&trace, "span-1").unwrap(),
            vec![(child_key("span-1", "child-run"), "child-run".to_string())]
        );
        assert!(reopened
            .pending_children(&trace, "span-2")
            .unwrap()
            .is_empty());
        assert_eq!(reopened.lineage_wanted(&scope, &tip).unwrap(), vec![wanted]);
    }

    #[test]
    fn a_store_written_before_gets_a_meta_for_every_run_with_a_fact_once() {
        let dir = tempfile::tempdir().unwrap();
        let inline = serde_json::json!([{"type": "text", "content": "be brief"}]);
        {
            let store = Store::open(dir.path(), false).unwrap();
            assert!(store.fact_runs_have_meta());
            // As schema 4 left them: a run known only from grouping spans (facts, no meta), a
            // run with a meta, facts with their instructions inline.
            let mut batch = KvBatch::default();
            for (run, span) in [("t-a", "g1"), ("t-a", "g2"), ("t-b", "g1")] {
                let key = keys::run_child(run, span);
                batch.put(cf::FACTS, &key, stored_v4(span, &inline));
            }
            let meta = RunMeta {
                last_seen_ns: 7,
                ..RunMeta::default()
            };
            batch.put(cf::RUN_META, b"t-b", serde_json::to_vec(&meta).unwrap());
            // A key without a run id before its `\0`: it names no run to give a meta.
            batch.put(cf::FACTS, b"\0g3", stored_v4("g3", &inline));
            batch.delete(Cf::Meta, FACT_RUNS_HAVE_META);
            batch.put(Cf::Meta, b"schema_version", b"4".to_vec());
            store.kv().write(batch, true).unwrap();
        }
        let store = Store::open(dir.path(), false).unwrap();
        assert!(store.fact_runs_have_meta());
        assert_eq!(store.run_meta("t-a").unwrap(), Some(RunMeta::default()));
        assert_eq!(store.run_meta("t-b").unwrap().unwrap().last_seen_ns, 7);
        assert_eq!(store.run_meta("t-c").unwrap(), None);
        assert_eq!(
            store.run_meta("").unwrap(),
            None,
            "no meta for a key without a run id"
        );
        assert_eq!(
            store.kv().get(Cf::Meta, b"schema_version").unwrap(),
            Some(SCHEMA_VERSION.to_string().into_bytes())
        );
        // Facts of schema 4 read back with their instructions inline.
        let facts = store.facts("t-a").unwrap();
        assert_eq!(facts.len(), 2);
        assert!(facts
            .iter()
            .all(|f| f.system_instructions.as_ref() == Some(&inline)));
        assert_eq!(store.check_readable().unwrap(), Vec::new());
        drop(store);
        // Once: the mark stays, nothing is looked at again.
        let store = Store::open(dir.path(), false).unwrap();
        assert!(store.kv().contains(Cf::Meta, FACT_RUNS_HAVE_META).unwrap());
    }
}
