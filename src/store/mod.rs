//! The store: runs, events, snapshots, effects, facts and their indexes, and the forwarding
//! outbox, over a key-value store behind a narrow trait ([`KvStore`]: RocksDB on disk, or a
//! twin in memory).
//!
//! Layers, each importing only those before it: the column families ([`Cf`]), errors and key
//! layout; the key-value trait and its two implementations (`rocks`, `memory`); the in-memory
//! caches (`chain_cache`, `history_cache`, `run_key_cache`, `activity`, `changes`), which know
//! nothing of the store; the store itself (`core`); then the modules that read and write one
//! kind of record through it. The persisted types and their codecs are in [`crate::records`].

mod activity;
mod aliases;
mod attribute_index;
mod chain_cache;
mod changes;
mod column;
mod core;
mod damage;
mod deletion;
mod error;
mod events;
mod facts;
mod history;
mod history_cache;
mod interactions;
pub mod keys;
pub mod kv;
mod lineage_index;
mod maintenance;
pub mod media_refs;
mod memory;
mod memtable_budget;
mod messages;
pub(crate) mod model_requests;
mod open;
pub mod open_files;
mod outbox;
mod readback;
mod recent_requests;
mod rekey;
#[cfg(test)]
pub(crate) use rekey::key_by_run_id;
mod resolved;
mod rocks;
mod run_key_cache;
mod run_keys;
mod runs;
mod snapshots;
#[cfg(test)]
mod suite;

pub use activity::WrittenRun;
pub use aliases::{conflict_warning, AliasClaims};
pub use changes::{ChangeMark, Changed};
pub use column::Cf;
pub use core::{encode_json, Store, WriteBatch};
pub use damage::DAMAGED_WARNING;
pub use deletion::{Deletion, DeletionPhase, FinishedDeletion, StepOutcome};
pub use error::StoreError;
pub use history::RunNodes;
pub use history_cache::{history_bytes, ResolvedHistory, DEFAULT_HISTORY_CACHE_BYTES};
pub use interactions::{answer_key, waiting_key};
pub use keys::{RunFilter, RunKey};
pub use kv::{KvBatch, KvStore};
pub use lineage_index::{LinkRecord, LinkSource, ScopeKey, Wanted};
pub use memory::MemoryKv;
pub use messages::Bodies;
pub use outbox::OutboxCursor;
pub use readback::Unreadable;
pub use recent_requests::{RECENT_REQUEST_LINES, RECENT_REQUEST_LINE_BYTES};
pub use rocks::RocksKv;

// Kept at their old paths for the callers of before the record layer.
pub use crate::records::json::MAX_RECORD_DEPTH;
pub use crate::records::{request_start, ModelRequestRecord};

/// The snapshot record codec, at its old path (see [`crate::records::snapshot`]).
pub(crate) mod snapshot_codec {
    pub use crate::records::snapshot::{decode, encode};
}
