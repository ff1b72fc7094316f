//! The column families, as a closed set: a read or write names one of these, so a write to a
//! column family the database does not have cannot be expressed.

use std::fmt;

/// A column family (a keyspace of the store, ordered bytewise by key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cf {
    /// RocksDB's `default` column family: the schema version and the next free run key.
    Meta,
    /// run_id → run record.
    Runs,
    /// run_id \0 seq(be32) → step event.
    Events,
    /// run key seq(be32) → snapshot record (binary: see [`crate::records::snapshot`]).
    Snapshots,
    /// run_id \0 index(be32) → tool effect.
    Effects,
    /// run_id \0 span_id → span fact.
    Facts,
    /// run_id → run meta (lineage, abandonment, last activity).
    RunMeta,
    /// run key message hash (binary) → message body, canonical JSON (each distinct message once
    /// per run).
    Messages,
    /// run key node id (binary) → history chain node (see `store::history`).
    History,
    /// run_id → the run's [`crate::store::RunKey`] (be64).
    RunKeys,
    /// run_id → the run's working state for incremental derivation; run_id \0 call id → count.
    RunState,
    /// alias → run_id.
    Aliases,
    /// Secondary run indexes (see [`crate::store::keys::index_keys`]).
    RunIndex,
    /// trace_id span_id of a tool or model-request span → run_id.
    SpanRuns,
    /// trace_id span_id \0 child run_id → () : the delegate runs of a tool span.
    PendingParents,
    /// seq(be64) → outbox entry (see [`crate::outbox`]).
    Outbox,
    /// exporter id → done seq(be64) in-flight seq(be64).
    OutboxCursors,
    /// trace_id span_id of a grouping span → its parent span id.
    GroupSpans,
    /// trace_id span_id \0 order key → a legacy GenAI event received as an OTLP log record.
    SpanLogs,
    /// run key start_ns(be64) span_id → model-request record (binary: see
    /// [`crate::records::model_request`]).
    ModelRequests,
    /// run_id → why the run's records could not be read (UTF-8 text; see `store::damage`).
    Damaged,
    /// The lineage index of continued and forked runs (see `store::lineage_index`).
    Lineage,
    /// run_id → a deletion of the run, in progress or done (see `store::deletion`).
    Deletions,
    /// media digest (32 bytes) run key message hash → (): the stored messages naming a blob of
    /// the media store (see `store::media_refs`).
    MediaRefs,
    /// media digest (32 bytes) → (): blobs whose last naming message was deleted, to be checked
    /// and removed from the media store.
    MediaGc,
}

impl Cf {
    /// Every named column family (all but [`Cf::Meta`]), in the order they are opened.
    pub const NAMED: [Cf; 24] = [
        Cf::Runs,
        Cf::Events,
        Cf::Snapshots,
        Cf::Effects,
        Cf::Facts,
        Cf::RunMeta,
        Cf::Messages,
        Cf::Aliases,
        Cf::RunIndex,
        Cf::SpanRuns,
        Cf::PendingParents,
        Cf::Outbox,
        Cf::OutboxCursors,
        Cf::GroupSpans,
        Cf::SpanLogs,
        Cf::History,
        Cf::RunState,
        Cf::RunKeys,
        Cf::ModelRequests,
        Cf::Damaged,
        Cf::Lineage,
        Cf::Deletions,
        Cf::MediaRefs,
        Cf::MediaGc,
    ];

    /// Every column family, in declaration order ([`Cf::Meta`] first).
    pub const EVERY: [Cf; 25] = [
        Cf::Meta,
        Cf::Runs,
        Cf::Events,
        Cf::Snapshots,
        Cf::Effects,
        Cf::Facts,
        Cf::RunMeta,
        Cf::Messages,
        Cf::History,
        Cf::RunKeys,
        Cf::RunState,
        Cf::Aliases,
        Cf::RunIndex,
        Cf::SpanRuns,
        Cf::PendingParents,
        Cf::Outbox,
        Cf::OutboxCursors,
        Cf::GroupSpans,
        Cf::SpanLogs,
        Cf::ModelRequests,
        Cf::Damaged,
        Cf::Lineage,
        Cf::Deletions,
        Cf::MediaRefs,
        Cf::MediaGc,
    ];

    /// The column family's name in the database (unchanged since the string names).
    pub const fn name(self) -> &'static str {
        match self {
            Cf::Meta => "default",
            Cf::Runs => "runs",
            Cf::Events => "events",
            Cf::Snapshots => "snapshots",
            Cf::Effects => "effects",
            Cf::Facts => "facts",
            Cf::RunMeta => "run_meta",
            Cf::Messages => "messages",
            Cf::History => "history",
            Cf::RunKeys => "run_keys",
            Cf::RunState => "run_state",
            Cf::Aliases => "aliases",
            Cf::RunIndex => "run_index",
            Cf::SpanRuns => "span_runs",
            Cf::PendingParents => "pending_parents",
            Cf::Outbox => "outbox",
            Cf::OutboxCursors => "outbox_cursors",
            Cf::GroupSpans => "group_spans",
            Cf::SpanLogs => "span_logs",
            Cf::ModelRequests => "model_requests",
            Cf::Damaged => "damaged",
            Cf::Lineage => "lineage",
            Cf::Deletions => "deletions",
            Cf::MediaRefs => "media_refs",
            Cf::MediaGc => "media_gc",
        }
    }

    /// Its position in [`Cf::EVERY`] (a dense index for per-column-family tables).
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Cf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl AsRef<str> for Cf {
    fn as_ref(&self) -> &str {
        self.name()
    }
}

impl PartialEq<&str> for Cf {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_family_is_listed_once_at_its_index() {
        for (i, cf) in Cf::EVERY.iter().enumerate() {
            assert_eq!(cf.index(), i, "{cf}");
        }
        let mut names: Vec<&str> = Cf::EVERY.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Cf::EVERY.len());
        let mut named = Cf::NAMED.to_vec();
        named.sort_unstable();
        assert_eq!(named, &Cf::EVERY[1..], "NAMED is EVERY without Meta");
    }
}
