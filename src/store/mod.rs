//! The store: RocksDB column families for runs, events, snapshots, effects and their indexes,
//! and the forwarding outbox.

mod activity;
mod aliases;
mod damage;
mod error;
mod history;
mod history_cache;
pub mod keys;
mod messages;
pub(crate) mod model_requests;
mod outbox;
mod readback;
mod record_codec;
mod rocks;
mod run_keys;
pub(crate) mod snapshot_codec;

pub use aliases::{conflict_warning, AliasClaims};
pub use damage::DAMAGED_WARNING;
pub use error::StoreError;
pub use history::RunNodes;
pub use history_cache::{history_bytes, ResolvedHistory, DEFAULT_HISTORY_CACHE_BYTES};
pub use keys::{RunFilter, RunKey};
pub use model_requests::{request_start, ModelRequestRecord};
pub use outbox::OutboxCursor;
pub use readback::Unreadable;
pub use rocks::{encode_json, json_depth, Store, WriteBatch, MAX_RECORD_DEPTH};
