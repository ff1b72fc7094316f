//! The version of the stored layout of every record.

/// The schema version this build writes. Opening a database with a higher one fails; one of
/// [`MIGRATED_SCHEMA`] is migrated on opening, an older one is refused.
pub const SCHEMA_VERSION: u32 = 4;

/// The oldest schema version migrated on opening: 3 lacks the model-request records (4), which
/// are written from its facts.
pub const MIGRATED_SCHEMA: u32 = 3;
