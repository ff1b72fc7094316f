//! Key layout. Keys are byte strings ordered so that a run's records, and runs in start order,
//! are prefix scans. Run ids are hex and `-`, so `\0` separates components. The column families
//! that grow with a run's history (messages, history nodes, snapshots) key a run by its short
//! [`RunKey`] instead of its id, with binary hashes after it.

use crate::domain::{MessageHash, NodeId, Run, MESSAGE_HASH_BYTES, NODE_ID_BYTES};

/// Column families and what they hold.
pub mod cf {
    /// run_id → run record.
    pub const RUNS: &str = "runs";
    /// run_id \0 seq(be32) → step event.
    pub const EVENTS: &str = "events";
    /// run key seq(be32) → snapshot record (metadata and history chain tip, binary: see
    /// `store::snapshot_codec`).
    pub const SNAPSHOTS: &str = "snapshots";
    /// run_id \0 index(be32) → tool effect.
    pub const EFFECTS: &str = "effects";
    /// run_id \0 span_id → span fact.
    pub const FACTS: &str = "facts";
    /// run_id → run meta (lineage, abandonment, last activity).
    pub const RUN_META: &str = "run_meta";
    /// run key message hash (binary) → message body, canonical JSON (each distinct message once
    /// per run).
    pub const MESSAGES: &str = "messages";
    /// run key node id (binary) → history chain node (see `store::history`).
    pub const HISTORY: &str = "history";
    /// run_id → the run's [`super::RunKey`] (be64).
    pub const RUN_KEYS: &str = "run_keys";
    /// run_id → the run's working state for incremental derivation.
    pub const RUN_STATE: &str = "run_state";
    /// alias → run_id.
    pub const ALIASES: &str = "aliases";
    /// Secondary run indexes (see [`super::index_keys`]).
    pub const RUN_INDEX: &str = "run_index";
    /// trace_id span_id of a tool or model-request span → run_id (to link delegate runs to their
    /// parent, and log records to the run of their span).
    pub const SPAN_RUNS: &str = "span_runs";
    /// trace_id span_id \0 child run_id → () : the delegate runs of a tool span, recorded whether
    /// or not the tool span has arrived (and kept, so a link follows a re-keyed tool).
    pub const PENDING_PARENTS: &str = "pending_parents";
    /// seq(be64) → outbox entry: signal(u8) items(be64) OTLP protobuf request.
    pub const OUTBOX: &str = "outbox";
    /// exporter id → done seq(be64) in-flight seq(be64).
    pub const OUTBOX_CURSORS: &str = "outbox_cursors";
    /// trace_id span_id of a grouping span (Strands' event-loop cycle) → its parent span id, so
    /// children keyed by the group resolve to the run above it.
    pub const GROUP_SPANS: &str = "group_spans";
    /// trace_id span_id \0 order key → a legacy GenAI event received as an OTLP log record.
    pub const SPAN_LOGS: &str = "span_logs";
    /// run key start_ns(be64) span_id → model-request record (binary: see
    /// `store::model_requests`).
    pub const MODEL_REQUESTS: &str = "model_requests";
    /// run_id → why the run's records could not be read (UTF-8 text; see `store::damage`).
    pub const DAMAGED: &str = "damaged";
    /// All column families besides `default` (which holds the schema version).
    pub const ALL: &[&str] = &[
        RUNS,
        EVENTS,
        SNAPSHOTS,
        EFFECTS,
        FACTS,
        RUN_META,
        MESSAGES,
        ALIASES,
        RUN_INDEX,
        SPAN_RUNS,
        PENDING_PARENTS,
        OUTBOX,
        OUTBOX_CURSORS,
        GROUP_SPANS,
        SPAN_LOGS,
        HISTORY,
        RUN_STATE,
        RUN_KEYS,
        MODEL_REQUESTS,
        DAMAGED,
    ];
}

/// A run's short key in the column families that grow with its history: a number the store gives
/// the run when it first writes one of its messages, nodes or snapshots (never reused), so those
/// keys carry 8 bytes instead of the run id's 49.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RunKey(pub [u8; 8]);

impl RunKey {
    /// The key of the `n`-th run given one.
    pub fn of(n: u64) -> RunKey {
        RunKey(n.to_be_bytes())
    }

    /// Its number.
    pub fn number(self) -> u64 {
        u64::from_be_bytes(self.0)
    }
}

/// `run key` `hash` (binary): a message body.
pub fn message_key(run: RunKey, hash: &MessageHash) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + MESSAGE_HASH_BYTES);
    k.extend_from_slice(&run.0);
    k.extend_from_slice(&hash.0);
    k
}

/// `run key` `node id` (binary): a history node.
pub fn node_key(run: RunKey, id: &NodeId) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + NODE_ID_BYTES);
    k.extend_from_slice(&run.0);
    k.extend_from_slice(&id.0);
    k
}

/// `run key` `seq(be32)`: a snapshot record.
pub fn snapshot_key(run: RunKey, seq: u32) -> Vec<u8> {
    let mut k = run.0.to_vec();
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// `run_id \0`: the prefix of all of a run's records in a per-run column family.
pub fn run_prefix(run_id: &str) -> Vec<u8> {
    let mut k = run_id.as_bytes().to_vec();
    k.push(0);
    k
}

/// `run_id \0 n(be32)`.
pub fn run_seq(run_id: &str, n: u32) -> Vec<u8> {
    let mut k = run_prefix(run_id);
    k.extend_from_slice(&n.to_be_bytes());
    k
}

/// `run_id \0 name`.
pub fn run_child(run_id: &str, name: &str) -> Vec<u8> {
    let mut k = run_prefix(run_id);
    k.extend_from_slice(name.as_bytes());
    k
}

/// `trace_id span_id` (hex).
pub fn span_key(trace_id: &str, span_id: &str) -> Vec<u8> {
    format!("{trace_id}{span_id}").into_bytes()
}

/// Filters of `GET /v1/runs`, AND-combined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// `conversation_id=`
    pub conversation_id: Option<String>,
    /// `parent_run_id=`
    pub parent_run_id: Option<String>,
    /// `agent_name=`
    pub agent_name: Option<String>,
    /// `status=`
    pub status: Option<String>,
    /// `trace_id=`
    pub trace_id: Option<String>,
}

impl RunFilter {
    /// True when the run passes every filter.
    pub fn matches(&self, run: &Run) -> bool {
        fn eq(want: &Option<String>, have: Option<&str>) -> bool {
            want.as_deref().is_none_or(|w| have == Some(w))
        }
        eq(&self.conversation_id, run.conversation_id.as_deref())
            && eq(&self.parent_run_id, run.parent_run_id.as_deref())
            && eq(&self.agent_name, run.agent_name.as_deref())
            && eq(&self.status, Some(run.status.as_str()))
            && eq(&self.trace_id, Some(run.trace_id.as_str()))
    }

    /// The most selective index to scan: its tag and value (`t` and empty for all runs).
    pub fn index(&self) -> (u8, &str) {
        let pick = [
            (b'c', &self.conversation_id),
            (b'p', &self.parent_run_id),
            (b'r', &self.trace_id),
            (b'a', &self.agent_name),
            (b's', &self.status),
        ];
        pick.iter()
            .find_map(|(tag, v)| v.as_deref().map(|v| (*tag, v)))
            .unwrap_or((b't', ""))
    }
}

/// The prefix of an index: `tag \0 value \0`.
pub fn index_prefix(tag: u8, value: &str) -> Vec<u8> {
    let mut k = vec![tag, 0];
    k.extend_from_slice(value.as_bytes());
    k.push(0);
    k
}

/// The position of a run in every index: `started_ns(be64) run_id`.
pub fn index_position(run: &Run) -> Vec<u8> {
    let mut k = run.started_ns.to_be_bytes().to_vec();
    k.extend_from_slice(run.run_id.as_bytes());
    k
}

/// Every index key of a run: chronological, and one per filterable field it has.
pub fn index_keys(run: &Run) -> Vec<Vec<u8>> {
    let position = index_position(run);
    let mut fields: Vec<(u8, &str)> = vec![
        (b't', ""),
        (b's', run.status.as_str()),
        (b'r', &run.trace_id),
    ];
    if let Some(v) = &run.conversation_id {
        fields.push((b'c', v));
    }
    if let Some(v) = &run.parent_run_id {
        fields.push((b'p', v));
    }
    if let Some(v) = &run.agent_name {
        fields.push((b'a', v));
    }
    fields
        .into_iter()
        .map(|(tag, value)| {
            let mut k = index_prefix(tag, value);
            k.extend_from_slice(&position);
            k
        })
        .collect()
}
