//! The writer's requests and their replies: one reply type per kind of request, so a caller
//! gets exactly the answer its request can have.

use crate::interpreter::{Interpreted, LogEvent};
use crate::outbox::OutboxEntry;
use crate::store::media_refs::DIGEST_BYTES;
use crate::store::FinishedDeletion;

/// One unit of work for the writer.
pub enum Work {
    /// One accepted export request: what was interpreted from it and its outbox entry.
    Received {
        /// Spans interpreted from the request (empty for logs, metrics and non-agent spans).
        spans: Vec<Interpreted>,
        /// Legacy GenAI events from the request's log records.
        logs: Vec<LogEvent>,
        /// The request for the outbox, when some exporter forwards its signal.
        outbox: Option<OutboxEntry>,
    },
    /// Delete log records whose span never arrived (found by [`Store::orphan_logs`]); each is
    /// checked again, so a span that arrived since keeps its records.
    PruneLogs {
        /// `(key, trace id, span id)` of each record.
        records: Vec<(Vec<u8>, String, String)>,
    },
    /// Declare a run dead.
    Abandon {
        /// Run id or alias.
        run: String,
        /// Why.
        reason: String,
        /// When, nanoseconds since the epoch.
        at_ns: u64,
        /// Only abandon if no new fact arrived since this time (the sweeper's check), else 0.
        silent_since_ns: u64,
    },
    /// Deleting runs (see `apply::delete`); applied alone, in its own commit.
    Delete(DeleteWork),
}

/// The kinds of deletion work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteWork {
    /// Start deleting a run (id or alias) and its delegate runs.
    Run {
        /// Run id or alias.
        run: String,
        /// Why (kept on the intent).
        reason: String,
        /// Only if the run is over and silent since this time (the retention sweep's check).
        over_before_ns: Option<u64>,
    },
    /// Start deleting up to `limit` runs of a conversation, and their delegate runs.
    Conversation {
        /// The conversation id.
        conversation_id: String,
        /// Most runs started by this work.
        limit: usize,
    },
    /// Remove at most `budget` keys of the deletions in progress.
    Step {
        /// Keys per step.
        budget: usize,
    },
    /// Check up to `limit` blobs whose last naming message was deleted.
    MediaCheck {
        /// Blobs checked.
        limit: usize,
    },
    /// These blobs are gone from the media store: forget them.
    MediaRemoved {
        /// Their digests.
        digests: Vec<[u8; DIGEST_BYTES]>,
    },
    /// Drop up to `limit` tombstones of deletions finished before `cutoff_ns`.
    PruneTombstones {
        /// Finished before this time.
        cutoff_ns: u64,
        /// Most tombstones dropped.
        limit: usize,
    },
}

/// The reply to [`Work::Delete`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteReply {
    /// The runs whose deletion started (the asked run first; empty: no such run, or nothing
    /// to start).
    Started(Vec<String>),
    /// One step: the deletions it finished, and whether some are still in progress.
    Stepped {
        /// Deletions finished in this step.
        finished: Vec<FinishedDeletion>,
        /// True when deletions remain in progress.
        pending: bool,
    },
    /// Blobs no stored message names any more (to be removed from the media store).
    Unreferenced(Vec<[u8; DIGEST_BYTES]>),
    /// Done; how many records it touched.
    Done(usize),
}

/// The reply to [`Work::Received`]: the request's records (and its outbox entry) are committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The stored size of the request's outbox entry (with the run of each interpreted span),
    /// when it has one.
    pub outbox_bytes: Option<u64>,
}

/// The reply to [`Work::PruneLogs`]: how many log records were deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrunedLogs(pub usize);

/// The reply to [`Work::Abandon`] when it is unconditional (`silent_since_ns` 0): a user's
/// abandonment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbandonOutcome {
    /// The run (its id) is now abandoned.
    Abandoned(String),
    /// The run (its id) had already ended (its status).
    AlreadyOver(String, String),
    /// No such run.
    UnknownRun,
}

/// The reply to [`Work::Abandon`] when it is the inactivity sweep's (only if the run stayed
/// silent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SweepOutcome {
    /// The run was silent: what abandoning it did.
    Decided(AbandonOutcome),
    /// The run came back to life before the sweeper's decision was applied.
    StillActive,
}

/// What one unit of work of a group did: the reply of its kind, in the order of the work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// A received request was stored.
    Stored(Stored),
    /// Orphan log records were pruned.
    PrunedLogs(PrunedLogs),
    /// A run was (or was not) abandoned.
    Abandon(SweepOutcome),
    /// Deletion work was applied.
    Deletion(DeleteReply),
}
