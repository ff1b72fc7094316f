//! The store: RocksDB column families for runs, events, snapshots, effects and their indexes.

mod error;
pub mod keys;
mod rocks;

pub use error::StoreError;
pub use keys::RunFilter;
pub use rocks::{Store, WriteBatch};
