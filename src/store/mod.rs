//! The store: RocksDB column families for runs, events, snapshots, effects and their indexes,
//! and the forwarding outbox.

mod activity;
mod error;
mod history;
mod history_cache;
pub mod keys;
mod messages;
pub(crate) mod model_requests;
mod outbox;
mod record_codec;
mod rocks;
mod run_keys;
pub(crate) mod snapshot_codec;

pub use error::StoreError;
pub use history::RunNodes;
pub use history_cache::{ResolvedHistory, HISTORY_CACHE_MESSAGES};
pub use keys::{RunFilter, RunKey};
pub use model_requests::{request_start, ModelRequestRecord};
pub use outbox::{OutboxCursor, OutboxEntry};
pub use rocks::{Store, WriteBatch};
