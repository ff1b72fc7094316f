//! The lineage index of continued and forked runs, in the `lineage` column family: which run's
//! snapshot has a given history, which runs wait for one, and which snapshot each run starts
//! from. Histories are content-addressed ([`NodeId`]), so a run's first model request finds the
//! snapshot it starts from with one multi-get of its input's prefixes, never a scan over runs.
//!
//! Keys (a one-byte tag first; run ids are hex and `-`, never `\0`):
//!
//! - `s` scope(16) tip(16) → `started_ns(be64)` run_id: the run that holds a snapshot with this
//!   history (the earliest-started one, when several do);
//! - `w` scope(16) tip(16) run_id → `first_start(be64)` `len(be32)`: a run whose first request
//!   starts with this history and would link to a snapshot of it (out-of-order arrival);
//! - `l` run_id → the run's [`LinkRecord`];
//! - `v` run_id → the run's service (`service.name`, UTF-8);
//! - `c` source_run_id `\0` tip(16) `started_ns(be64)` run_id → (): the runs starting from one
//!   snapshot history of a source, earliest first (the first is its continuation, the others
//!   fork);
//!
//! plus the `f` index of `GET /v1/runs?continued_from=` in `run_index` (see
//! [`keys::CONTINUED_FROM_TAG`]).

use std::sync::atomic::Ordering;

use sha2::{Digest, Sha256};

use super::core::{Store, WriteBatch};
use super::deletion::prefix_end;
use super::error::StoreError;
use super::keys::{self, cf};
use crate::domain::{ContinuedFrom, LineageKind, LineageScope, NodeId, NODE_ID_BYTES};

/// Bytes of a scope key.
pub const SCOPE_BYTES: usize = 16;

/// Where runs are looked for: a truncated SHA-256 of the conversation id or the service name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScopeKey(pub [u8; SCOPE_BYTES]);

impl ScopeKey {
    /// The scope of a run with `conversation` and `service` under `mode` (none: off).
    pub fn of(
        mode: LineageScope,
        conversation: Option<&str>,
        service: Option<&str>,
    ) -> Option<ScopeKey> {
        let (tag, name) = match (mode, conversation) {
            (LineageScope::Off, _) => return None,
            (LineageScope::Conversation, Some(c)) => (b'c', c),
            _ => (b's', service.unwrap_or("")),
        };
        let mut hasher = Sha256::new();
        hasher.update([tag, 0]);
        hasher.update(name.as_bytes());
        let digest = hasher.finalize();
        let mut out = [0u8; SCOPE_BYTES];
        out.copy_from_slice(&digest[..SCOPE_BYTES]);
        Some(ScopeKey(out))
    }
}

/// The snapshot a run starts from, as the index keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSource {
    /// The source run.
    pub run_id: String,
    /// The history's tip.
    pub tip: NodeId,
    /// Messages in the history.
    pub len: u32,
    /// The source's start (orders runs: a source starts before the runs that continue it).
    pub started_ns: u64,
}

/// What the index knows of a run's first model request and the snapshot it starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRecord {
    /// Start of the model request looked up (an earlier one, arriving later, is looked up again).
    pub first_start: u64,
    /// The run's start when it was linked (its position in the child indexes).
    pub own_started: u64,
    /// The scope it was looked up in.
    pub scope: ScopeKey,
    /// The longest match, if any.
    pub source: Option<LinkSource>,
}

const LINK_HEAD: usize = 8 + 8 + SCOPE_BYTES;
const SOURCE_HEAD: usize = NODE_ID_BYTES + 4 + 8;

fn corrupt(reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        cf: cf::LINEAGE,
        reason: reason.into(),
    }
}

fn be64(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(b)
}

fn be32(bytes: &[u8]) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[..4]);
    u32::from_be_bytes(b)
}

impl LinkRecord {
    /// The binary form: first_start, own_started, scope, then optionally tip, len, source
    /// start and source run id.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(LINK_HEAD + SOURCE_HEAD + 64);
        out.extend_from_slice(&self.first_start.to_be_bytes());
        out.extend_from_slice(&self.own_started.to_be_bytes());
        out.extend_from_slice(&self.scope.0);
        if let Some(s) = &self.source {
            out.extend_from_slice(&s.tip.0);
            out.extend_from_slice(&s.len.to_be_bytes());
            out.extend_from_slice(&s.started_ns.to_be_bytes());
            out.extend_from_slice(s.run_id.as_bytes());
        }
        out
    }

    /// Decodes [`LinkRecord::encode`].
    pub fn decode(bytes: &[u8]) -> Result<LinkRecord, String> {
        if bytes.len() < LINK_HEAD
            || (bytes.len() > LINK_HEAD && bytes.len() <= LINK_HEAD + SOURCE_HEAD)
        {
            return Err(format!("link record of {} bytes", bytes.len()));
        }
        let mut scope = [0u8; SCOPE_BYTES];
        scope.copy_from_slice(&bytes[16..LINK_HEAD]);
        let source = if bytes.len() > LINK_HEAD {
            let s = &bytes[LINK_HEAD..];
            let tip = NodeId::from_slice(&s[..NODE_ID_BYTES]).ok_or("link tip")?;
            let run_id = std::str::from_utf8(&s[SOURCE_HEAD..])
                .map_err(|_| "link source is not UTF-8".to_string())?;
            Some(LinkSource {
                run_id: run_id.to_string(),
                tip,
                len: be32(&s[NODE_ID_BYTES..]),
                started_ns: be64(&s[NODE_ID_BYTES + 4..]),
            })
        } else {
            None
        };
        Ok(LinkRecord {
            first_start: be64(bytes),
            own_started: be64(&bytes[8..]),
            scope: ScopeKey(scope),
            source,
        })
    }
}

/// A run waiting for a snapshot with a history its first request starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// The waiting run.
    pub run_id: String,
    /// Start of its first request (the entry is stale when the run looked up an earlier one).
    pub first_start: u64,
    /// Messages in the history.
    pub len: u32,
}

fn scoped(tag: u8, scope: &ScopeKey, tip: &NodeId) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + SCOPE_BYTES + NODE_ID_BYTES + 56);
    k.push(tag);
    k.extend_from_slice(&scope.0);
    k.extend_from_slice(&tip.0);
    k
}

fn run_tagged(tag: u8, run_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + run_id.len());
    k.push(tag);
    k.extend_from_slice(run_id.as_bytes());
    k
}

fn child_prefix(source: &str, tip: Option<&NodeId>) -> Vec<u8> {
    let mut k = run_tagged(b'c', source);
    k.push(0);
    if let Some(tip) = tip {
        k.extend_from_slice(&tip.0);
    }
    k
}

fn child_key(source: &LinkSource, started: u64, run_id: &str) -> Vec<u8> {
    let mut k = child_prefix(&source.run_id, Some(&source.tip));
    k.extend_from_slice(&started.to_be_bytes());
    k.extend_from_slice(run_id.as_bytes());
    k
}

fn list_key(source: &str, started: u64, run_id: &str) -> Vec<u8> {
    let mut k = keys::index_prefix(keys::CONTINUED_FROM_TAG, source);
    k.extend_from_slice(&started.to_be_bytes());
    k.extend_from_slice(run_id.as_bytes());
    k
}

fn decode_holder(value: &[u8]) -> Result<(u64, String), StoreError> {
    if value.len() <= 8 {
        return Err(corrupt(format!("snapshot holder of {} bytes", value.len())));
    }
    let run = std::str::from_utf8(&value[8..]).map_err(|_| corrupt("holder run id"))?;
    Ok((be64(value), run.to_string()))
}

/// Checks one record of the column family (for [`Store::check_readable`]).
pub(super) fn check_record(key: &[u8], value: &[u8]) -> Result<(), String> {
    let scoped_len = 1 + SCOPE_BYTES + NODE_ID_BYTES;
    match key.first() {
        Some(b's') if key.len() == scoped_len => {
            decode_holder(value).map(drop).map_err(|e| e.to_string())
        }
        Some(b'w') if key.len() > scoped_len && value.len() == 12 => Ok(()),
        Some(b'l') => LinkRecord::decode(value).map(drop),
        Some(b'v') => std::str::from_utf8(value)
            .map(drop)
            .map_err(|e| e.to_string()),
        Some(b'c') if value.is_empty() => Ok(()),
        _ => Err("unknown lineage key".into()),
    }
}

impl WriteBatch<'_> {
    /// Records that `run_id` (started at `started`) holds a snapshot with history `tip`.
    pub fn put_lineage_holder(
        &mut self,
        scope: &ScopeKey,
        tip: &NodeId,
        started: u64,
        run_id: &str,
    ) -> Result<(), StoreError> {
        let mut value = started.to_be_bytes().to_vec();
        value.extend_from_slice(run_id.as_bytes());
        self.put_raw(cf::LINEAGE, &scoped(b's', scope, tip), &value)
    }

    /// Records that run `w.run_id` would link to a snapshot with history `tip`.
    pub fn put_lineage_wanted(
        &mut self,
        scope: &ScopeKey,
        tip: &NodeId,
        w: &Wanted,
    ) -> Result<(), StoreError> {
        let mut key = scoped(b'w', scope, tip);
        key.extend_from_slice(w.run_id.as_bytes());
        let mut value = w.first_start.to_be_bytes().to_vec();
        value.extend_from_slice(&w.len.to_be_bytes());
        // From now on the store looks for the runs waiting for a history.
        self.store
            .lineage_wanted_stored
            .store(true, Ordering::Release);
        self.put_raw(cf::LINEAGE, &key, &value)
    }

    /// Keeps a run's service.
    pub fn put_lineage_service(&mut self, run_id: &str, service: &str) -> Result<(), StoreError> {
        self.put_raw(cf::LINEAGE, &run_tagged(b'v', run_id), service.as_bytes())
    }

    /// Replaces a run's link (`old`: the one stored, whose child keys are removed).
    pub fn put_lineage_link(
        &mut self,
        run_id: &str,
        old: Option<&LinkRecord>,
        link: &LinkRecord,
    ) -> Result<(), StoreError> {
        if let Some(s) = old.and_then(|o| o.source.as_ref().map(|s| (o, s))) {
            let (o, s) = s;
            self.delete(cf::LINEAGE, &child_key(s, o.own_started, run_id))?;
            self.delete(cf::RUN_INDEX, &list_key(&s.run_id, o.own_started, run_id))?;
        }
        if let Some(s) = &link.source {
            self.put_raw(cf::LINEAGE, &child_key(s, link.own_started, run_id), b"")?;
            self.put_raw(
                cf::RUN_INDEX,
                &list_key(&s.run_id, link.own_started, run_id),
                b"",
            )?;
        }
        self.put_raw(cf::LINEAGE, &run_tagged(b'l', run_id), &link.encode())
    }
}

impl WriteBatch<'_> {
    /// Removes the entries of history node `tip` that name the deleted run `run_id`: the
    /// snapshot holder (when the run holds it) and the run's wanted entry.
    pub(super) fn delete_lineage_node(
        &mut self,
        scope: &ScopeKey,
        tip: &NodeId,
        run_id: &str,
    ) -> Result<(), StoreError> {
        let holder = scoped(b's', scope, tip);
        if let Some(value) = self.store.kv.get(cf::LINEAGE, &holder)? {
            if value.get(8..) == Some(run_id.as_bytes()) {
                self.delete(cf::LINEAGE, &holder)?;
            }
        }
        let mut wanted = scoped(b'w', scope, tip);
        wanted.extend_from_slice(run_id.as_bytes());
        self.delete(cf::LINEAGE, &wanted)
    }

    /// Removes what the lineage index keeps of the deleted run `run_id` under its id: its link
    /// (and the child and list keys it put under its source), its service, and the child and
    /// list keys of the runs that start from its snapshots (their links then name no run, which
    /// readers show as no `continued_from`).
    pub(super) fn delete_lineage_of(&mut self, run_id: &str) -> Result<(), StoreError> {
        if let Ok(Some(link)) = self.store.lineage_link(run_id) {
            if let Some(s) = &link.source {
                self.delete(cf::LINEAGE, &child_key(s, link.own_started, run_id))?;
                self.delete(
                    cf::RUN_INDEX,
                    &list_key(&s.run_id, link.own_started, run_id),
                )?;
            }
        }
        self.delete(cf::LINEAGE, &run_tagged(b'l', run_id))?;
        self.delete(cf::LINEAGE, &run_tagged(b'v', run_id))?;
        let children = child_prefix(run_id, None);
        self.delete_range(cf::LINEAGE, &children, &prefix_end(&children));
        let listed = keys::index_prefix(keys::CONTINUED_FROM_TAG, run_id);
        self.delete_range(cf::RUN_INDEX, &listed, &prefix_end(&listed));
        Ok(())
    }
}

impl Store {
    /// Where runs are looked for when a new run may continue one.
    pub fn lineage_scope(&self) -> LineageScope {
        match self.lineage_mode.load(Ordering::Relaxed) {
            1 => LineageScope::Service,
            2 => LineageScope::Off,
            _ => LineageScope::Conversation,
        }
    }

    /// Sets [`Store::lineage_scope`] (`processors.stepline.lineage_scope`).
    pub fn set_lineage_scope(&self, scope: LineageScope) {
        let mode = match scope {
            LineageScope::Conversation => 0,
            LineageScope::Service => 1,
            LineageScope::Off => 2,
        };
        self.lineage_mode.store(mode, Ordering::Relaxed);
    }

    /// A run's link record.
    pub fn lineage_link(&self, run_id: &str) -> Result<Option<LinkRecord>, StoreError> {
        match self.kv.get(cf::LINEAGE, &run_tagged(b'l', run_id))? {
            Some(bytes) => LinkRecord::decode(&bytes).map(Some).map_err(corrupt),
            None => Ok(None),
        }
    }

    /// A run's service, when one of its model requests named it.
    pub fn lineage_service(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        match self.kv.get(cf::LINEAGE, &run_tagged(b'v', run_id))? {
            Some(bytes) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| corrupt("service is not UTF-8")),
            None => Ok(None),
        }
    }

    /// The run holding a snapshot with each history (`started_ns`, run id), in one multi-get.
    pub fn lineage_holders(
        &self,
        scope: &ScopeKey,
        tips: &[NodeId],
    ) -> Result<Vec<Option<(u64, String)>>, StoreError> {
        let keys: Vec<Vec<u8>> = tips.iter().map(|t| scoped(b's', scope, t)).collect();
        self.kv
            .multi_get(cf::LINEAGE, &keys)?
            .into_iter()
            .map(|v| v.as_deref().map(decode_holder).transpose())
            .collect()
    }

    /// Notes whether the store holds a run waiting for a history (when it is opened).
    pub(super) fn note_stored_lineage_wanted(&self) -> Result<(), StoreError> {
        if self.holds_any(cf::LINEAGE, b"w")? {
            self.lineage_wanted_stored.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// The runs waiting for a snapshot with history `tip` (none looked for while the store has
    /// held none since it was opened).
    pub fn lineage_wanted(
        &self,
        scope: &ScopeKey,
        tip: &NodeId,
    ) -> Result<Vec<Wanted>, StoreError> {
        if !self.lineage_wanted_stored.load(Ordering::Acquire) {
            return Ok(Vec::new());
        }
        let prefix = scoped(b'w', scope, tip);
        let mut out = Vec::new();
        self.scan(cf::LINEAGE, &prefix, &prefix, |key, value| {
            let run =
                std::str::from_utf8(&key[prefix.len()..]).map_err(|_| corrupt("wanted run id"))?;
            if value.len() != 12 {
                return Err(corrupt("wanted entry"));
            }
            out.push(Wanted {
                run_id: run.to_string(),
                first_start: be64(value),
                len: be32(&value[8..]),
            });
            Ok(true)
        })?;
        Ok(out)
    }

    /// The run that first started from snapshot history `tip` of `source`.
    fn first_child(&self, source: &str, tip: &NodeId) -> Result<Option<String>, StoreError> {
        let prefix = child_prefix(source, Some(tip));
        let mut first = None;
        self.scan(cf::LINEAGE, &prefix, &prefix, |key, _| {
            first = key
                .get(prefix.len() + 8..)
                .and_then(|b| std::str::from_utf8(b).ok())
                .map(str::to_string);
            Ok(false)
        })?;
        Ok(first)
    }

    /// The snapshot a run starts from, read from its link: the source's last snapshot with
    /// that history, `continuation` when it is the source's latest and no run that started
    /// earlier starts from it too, else `fork`. None when the run is linked to none (or the
    /// source no longer has the snapshot).
    pub fn continued_from(&self, run_id: &str) -> Result<Option<ContinuedFrom>, StoreError> {
        let Some(source) = self.lineage_link(run_id)?.and_then(|l| l.source) else {
            return Ok(None);
        };
        let Some(run) = self.run_key(&source.run_id)? else {
            return Ok(None);
        };
        // Backwards from the source's last snapshot: the first one read is the latest.
        let start = keys::snapshot_key(run, u32::MAX);
        let mut latest_tip = None;
        let mut found = None;
        self.kv
            .scan_back(cf::SNAPSHOTS, &run.0, Some(&start), &mut |_, value| {
                let record = crate::records::snapshot::decode(value)
                    .map_err(|e| StoreError::corrupt(cf::SNAPSHOTS, e))?;
                let tip = record.history.tip;
                if latest_tip.is_none() {
                    latest_tip = Some(tip);
                }
                if tip == Some(source.tip) {
                    found = Some(record.meta.seq);
                    return Ok(false);
                }
                Ok(true)
            })?;
        let Some(seq) = found else {
            return Ok(None);
        };
        let latest = latest_tip == Some(Some(source.tip));
        let first = self.first_child(&source.run_id, &source.tip)?;
        let kind = if latest && first.as_deref() == Some(run_id) {
            LineageKind::Continuation
        } else {
            LineageKind::Fork
        };
        Ok(Some(ContinuedFrom {
            run_id: source.run_id,
            snapshot_seq: seq,
            kind,
        }))
    }
}

#[cfg(test)]
impl Store {
    /// Every key and value of a column family (tests compare index contents).
    pub(crate) fn dump(&self, cf: super::Cf) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        self.scan(cf, b"", b"", |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })
        .unwrap_or_default();
        out
    }
}
