//! The version of the stored layout of every record.

/// The schema version this build writes. Opening a database with a higher one fails; one of
/// [`MIGRATED_SCHEMA`] is migrated on opening, an older one is refused.
pub const SCHEMA_VERSION: u32 = 7;

/// The oldest schema version migrated on opening: 3 lacks the model-request records (4), which
/// are written from its facts. 5 stores a fact's system instructions by the key of their body
/// among the run's messages; facts of 3 and 4 (instructions inline) read back as they are, so 4
/// only has its version raised (a build of 4 would not see the instructions of 5). 6 stores
/// step events in binary ([`super::event`]); the JSON events of 5 and earlier read back as they
/// are, so 5 only has its version raised (a build of 5 could not read the events of 6). 7 keys
/// facts, step events and ledger entries by run key, not run id: those of 6 and earlier are moved
/// on opening.
pub const MIGRATED_SCHEMA: u32 = 3;

/// The first schema version with model-request records: an older store gets them on opening.
pub const MODEL_REQUESTS_SCHEMA: u32 = 4;

/// The first schema version keying facts, step events and ledger entries by run key: an older
/// store has them moved on opening.
pub const RUN_KEYED_SCHEMA: u32 = 7;
