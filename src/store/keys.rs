//! Key layout. Keys are byte strings ordered so that a run's records, and runs in start order,
//! are prefix scans. Run ids are hex and `-`, so `\0` separates components. The column families
//! that grow with a run's history (facts, step events, ledger entries, messages, history nodes,
//! snapshots, model-request records) key a run by its short [`RunKey`] instead of its id, with
//! the record's own part after it: their keys grow from run to run, so what a flush writes
//! seldom overlaps what is stored and compaction moves it down instead of rewriting it.

pub use super::column::Cf;
use crate::domain::{MessageHash, NodeId, Run, MESSAGE_HASH_BYTES, NODE_ID_BYTES};

/// The column families by their former constant names (see [`Cf`] for what each holds).
pub mod cf {
    use super::Cf;

    /// [`Cf::Runs`].
    pub const RUNS: Cf = Cf::Runs;
    /// [`Cf::Events`].
    pub const EVENTS: Cf = Cf::Events;
    /// [`Cf::Snapshots`].
    pub const SNAPSHOTS: Cf = Cf::Snapshots;
    /// [`Cf::Effects`].
    pub const EFFECTS: Cf = Cf::Effects;
    /// [`Cf::Facts`].
    pub const FACTS: Cf = Cf::Facts;
    /// [`Cf::RunMeta`].
    pub const RUN_META: Cf = Cf::RunMeta;
    /// [`Cf::Messages`].
    pub const MESSAGES: Cf = Cf::Messages;
    /// [`Cf::History`].
    pub const HISTORY: Cf = Cf::History;
    /// [`Cf::RunKeys`].
    pub const RUN_KEYS: Cf = Cf::RunKeys;
    /// [`Cf::RunState`].
    pub const RUN_STATE: Cf = Cf::RunState;
    /// [`Cf::Aliases`].
    pub const ALIASES: Cf = Cf::Aliases;
    /// [`Cf::RunIndex`].
    pub const RUN_INDEX: Cf = Cf::RunIndex;
    /// [`Cf::SpanRuns`].
    pub const SPAN_RUNS: Cf = Cf::SpanRuns;
    /// [`Cf::PendingParents`].
    pub const PENDING_PARENTS: Cf = Cf::PendingParents;
    /// [`Cf::Outbox`].
    pub const OUTBOX: Cf = Cf::Outbox;
    /// [`Cf::OutboxCursors`].
    pub const OUTBOX_CURSORS: Cf = Cf::OutboxCursors;
    /// [`Cf::GroupSpans`].
    pub const GROUP_SPANS: Cf = Cf::GroupSpans;
    /// [`Cf::SpanLogs`].
    pub const SPAN_LOGS: Cf = Cf::SpanLogs;
    /// [`Cf::ModelRequests`].
    pub const MODEL_REQUESTS: Cf = Cf::ModelRequests;
    /// [`Cf::Damaged`].
    pub const DAMAGED: Cf = Cf::Damaged;
    /// [`Cf::Lineage`].
    pub const LINEAGE: Cf = Cf::Lineage;
    /// All column families besides `default` ([`Cf::Meta`]).
    pub const ALL: &[Cf] = &Cf::NAMED;
}

/// A run's short key in the column families that grow with its history: a number the store gives
/// the run when it first writes one of its facts, events, ledger entries, messages, nodes or
/// snapshots (never reused), so those keys carry 8 bytes instead of the run id's 49.
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
    run_key_seq(run, seq)
}

/// `run key` `start_ns(be64)` `span id`: a model-request record.
pub fn model_request_key(run: RunKey, start_ns: u64, span_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(16 + span_id.len());
    k.extend_from_slice(&run.0);
    k.extend_from_slice(&start_ns.to_be_bytes());
    k.extend_from_slice(span_id.as_bytes());
    k
}

/// `run key` `n(be32)`: a step event, a ledger entry or a snapshot record.
pub fn run_key_seq(run: RunKey, n: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(12);
    k.extend_from_slice(&run.0);
    k.extend_from_slice(&n.to_be_bytes());
    k
}

/// `run key` `span id`: a span fact.
pub fn fact_key(run: RunKey, span_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + span_id.len());
    k.extend_from_slice(&run.0);
    k.extend_from_slice(span_id.as_bytes());
    k
}

/// Column families whose records schema 6 and earlier keyed by run id (`run_id \0 …`), and
/// later ones by run key.
pub const REKEYED_CFS: [Cf; 3] = [Cf::Facts, Cf::Events, Cf::Effects];

/// The run id and the rest of a key made by [`run_prefix`] (`run_id \0 rest`); `None` when the
/// key has no `\0`, nothing before it, or no UTF-8 there. The one reader of the keys of schema 6
/// and earlier, for their migrations.
pub fn split_run_id_key(key: &[u8]) -> Option<(&str, &[u8])> {
    let sep = key.iter().position(|b| *b == 0)?;
    let run_id = std::str::from_utf8(&key[..sep]).ok()?;
    (!run_id.is_empty()).then_some((run_id, &key[sep + 1..]))
}

/// `run_id \0`: the prefix of all of a run's records in a column family keyed by run id (the
/// run state's call counts; the facts, events and ledger entries of schema 6 and earlier).
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
    /// `attr.<key>=<value>`: the run's attribute `key` is `value`, for every pair.
    pub attributes: Vec<(String, String)>,
    /// `min_tool_calls=`: at least this many ledger entries.
    pub min_tool_calls: Option<u32>,
    /// `continued_from=`: runs whose first request starts from a snapshot of this run.
    pub continued_from: Option<String>,
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
            && self
                .attributes
                .iter()
                .all(|(k, v)| run.attributes.get(k) == Some(v))
            && self.min_tool_calls.is_none_or(|n| run.tool_call_count >= n)
            && eq(
                &self.continued_from,
                run.continued_from.as_ref().map(|c| c.run_id.as_str()),
            )
    }

    /// True when a filter no index serves is set (`min_tool_calls`): a page then scans at
    /// most a bounded number of index entries (see [`crate::store::Store::list_runs`]).
    pub fn scans(&self) -> bool {
        self.min_tool_calls.is_some()
    }

    /// The prefix of the most selective index to scan: a conversation, parent, trace, the
    /// first attribute, an agent, a status, else every run.
    pub fn scan_prefix(&self) -> Vec<u8> {
        if self.continued_from.is_none()
            && self.conversation_id.is_none()
            && self.parent_run_id.is_none()
            && self.trace_id.is_none()
        {
            if let Some((k, v)) = self.attributes.first() {
                return super::attribute_index::attribute_prefix(k, v);
            }
        }
        let (tag, value) = self.index();
        index_prefix(tag, value)
    }

    /// The most selective index to scan: its tag and value (`t` and empty for all runs).
    pub fn index(&self) -> (u8, &str) {
        let pick = [
            (CONTINUED_FROM_TAG, &self.continued_from),
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

/// The index tag of runs by the run they continue (written by the lineage index, not by
/// [`index_keys`]: the link is found by content, not kept in the run record).
pub const CONTINUED_FROM_TAG: u8 = b'f';

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
        .chain(super::attribute_index::attribute_keys(run, &position))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_id_key_names_its_run_and_a_key_without_one_is_none() {
        assert_eq!(
            split_run_id_key(b"t-s\0abc"),
            Some(("t-s", &b"abc"[..])),
            "the run id, then the rest"
        );
        assert_eq!(split_run_id_key(b"t-s\0"), Some(("t-s", &b""[..])));
        assert_eq!(split_run_id_key(b"no-separator"), None);
        assert_eq!(split_run_id_key(b"\0rest"), None);
        assert_eq!(split_run_id_key(&[0xff, 0xfe, 0]), None, "not UTF-8");
    }

    #[test]
    fn keys_order_by_start_then_span_id() {
        let run = RunKey::of(3);
        let mut keys = [
            model_request_key(run, 20, "aa"),
            model_request_key(run, 10, "bb"),
            model_request_key(run, 10, "ab"),
            model_request_key(run, 256, "00"),
        ];
        keys.sort();
        assert_eq!(
            keys,
            [
                model_request_key(run, 10, "ab"),
                model_request_key(run, 10, "bb"),
                model_request_key(run, 20, "aa"),
                model_request_key(run, 256, "00"),
            ]
        );
        assert!(model_request_key(run, u64::MAX, "ff") < RunKey::of(4).0.to_vec());
    }
}
