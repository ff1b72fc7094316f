//! The store: RocksDB column families for runs, events, snapshots, effects and their indexes,
//! and the forwarding outbox.

mod error;
pub mod keys;
mod outbox;
mod rocks;

pub use error::StoreError;
pub use keys::RunFilter;
pub use outbox::{OutboxCursor, OutboxEntry};
pub use rocks::{Store, WriteBatch};
