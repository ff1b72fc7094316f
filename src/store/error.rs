//! Store errors, and which of them a retry can cure.
//!
//! A RocksDB failure (I/O, a full disk, a busy database) is *retryable*: the same request may
//! succeed later. A record that cannot be encoded or decoded (damaged, nested too deep, an
//! unknown format, a missing message) is *permanent*: the same request fails the same way
//! however often it is retried, so the ingest service answers it with a permanent error.

use super::column::Cf;
use crate::records::RecordError;
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
        cf: Cf,
        /// What is wrong.
        reason: String,
    },
    /// A record could not be encoded into a form that reads back; nothing was written.
    #[error("record for {cf} cannot be stored: {reason}")]
    Encode {
        /// Column family.
        cf: Cf,
        /// What is wrong.
        reason: String,
    },
    /// The database lacks one of the column families (it was opened without creating them).
    #[error("no column family {0} in the database")]
    MissingColumnFamily(Cf),
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
    /// An error met while reading or writing one run (and span), naming them.
    #[error("run {run_id}{}: {source}", span_id.as_ref().map(|s| format!(" span {s}")).unwrap_or_default())]
    InRun {
        /// The run.
        run_id: String,
        /// The span being applied, when known.
        span_id: Option<String>,
        /// What went wrong.
        source: Box<StoreError>,
    },
}

impl StoreError {
    /// A record of `cf` that could not be decoded.
    pub fn corrupt(cf: Cf, error: RecordError) -> Self {
        Self::Corrupt {
            cf,
            reason: error.to_string(),
        }
    }

    /// A JSON record of `cf` that could not be decoded (the reason is serde's, as it always was).
    pub fn corrupt_json(cf: Cf, error: RecordError) -> Self {
        Self::Corrupt {
            cf,
            reason: error.reason,
        }
    }

    /// True when retrying the same operation may succeed (RocksDB failures); false for records
    /// that cannot be encoded or decoded, which fail the same way every time.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Rocks(_) => true,
            Self::InRun { source, .. } => source.is_retryable(),
            Self::Corrupt { .. }
            | Self::Encode { .. }
            | Self::MissingColumnFamily(_)
            | Self::NewerSchema { .. }
            | Self::OlderSchema { .. }
            | Self::MissingMessage { .. } => false,
        }
    }

    /// This error, attributed to `run_id` (and `span_id`) unless it already names a run; the
    /// span is added to a context naming the same run without one.
    pub fn in_run(self, run_id: &str, span_id: Option<&str>) -> Self {
        match self {
            Self::InRun {
                run_id: named,
                span_id: None,
                source,
            } if named == run_id => Self::InRun {
                run_id: named,
                span_id: span_id.map(str::to_string),
                source,
            },
            e @ Self::InRun { .. } => e,
            e => Self::InRun {
                run_id: run_id.to_string(),
                span_id: span_id.map(str::to_string),
                source: Box::new(e),
            },
        }
    }

    /// The run whose stored records could not be read, with why: set when this error names a
    /// run and comes from decoding its records (not from encoding new ones, nor from RocksDB).
    pub fn damaged_run(&self) -> Option<(&str, String)> {
        match self {
            Self::InRun { run_id, source, .. } => match source.as_ref() {
                e @ (Self::Corrupt { .. } | Self::MissingMessage { .. }) => {
                    Some((run_id.as_str(), e.to_string()))
                }
                _ => None,
            },
            _ => None,
        }
    }
}

impl ServiceError for StoreError {
    fn error_code(&self) -> ServiceErrorCode {
        ServiceErrorCode::Internal
    }
}
