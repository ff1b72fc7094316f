//! Store errors.

use crate::service_error::{ServiceError, ServiceErrorCode};

/// What can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// RocksDB reported an error.
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    /// A stored record could not be decoded.
    #[error("corrupt record in {cf}: {reason}")]
    Corrupt {
        /// Column family.
        cf: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The database was written by a newer stepline.
    #[error("the database at {path} has schema version {found}, newer than this stepline understands ({supported}); upgrade stepline or use another storage directory")]
    NewerSchema {
        /// Storage directory.
        path: String,
        /// Version on disk.
        found: u32,
        /// Version this build writes.
        supported: u32,
    },
    /// The database was written by an older stepline with another layout.
    #[error("the database at {path} has schema version {found}, older than this stepline's ({supported}) and not migrated; remove it or use another storage directory")]
    OlderSchema {
        /// Storage directory.
        path: String,
        /// Version on disk.
        found: u32,
        /// Version this build writes.
        supported: u32,
    },
    /// A message referenced by a snapshot is missing.
    #[error("message {hash} of run {run_id} is missing from the store")]
    MissingMessage {
        /// Run.
        run_id: String,
        /// Message hash.
        hash: String,
    },
}

impl ServiceError for StoreError {
    fn error_code(&self) -> ServiceErrorCode {
        ServiceErrorCode::Internal
    }
}
