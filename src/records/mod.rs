//! The record layer: every type the store persists, as named structs, with its codec (JSON or
//! binary) and the schema version of the layout. Below the store, the interpreter and the
//! continuation: it imports only `domain`.

pub mod codec;
pub mod effect_outcome;
pub mod event;
pub mod fact;
pub mod json;
pub mod log_event;
pub mod model_request;
pub mod run_state;
pub mod schema;
pub mod snapshot;
pub mod walk_state;

pub use codec::RecordError;
pub use fact::{
    FactKind, RequestedCall, ResultKey, SpanFact, StoredFact, ToolReturnForm, ToolReturnRole,
};
pub use log_event::LogEvent;
pub use model_request::{request_start, ModelRequestRecord};
pub use run_state::{RunMeta, RunState};
pub use schema::{MIGRATED_SCHEMA, MODEL_REQUESTS_SCHEMA, RUN_KEYED_SCHEMA, SCHEMA_VERSION};
