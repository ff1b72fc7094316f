//! The record layer: every type the store persists, as named structs, with its codec (JSON or
//! binary) and the schema version of the layout. Below the store and the interpreter: it
//! imports only `domain`.

pub mod codec;
pub mod fact;
pub mod json;
pub mod log_event;
pub mod model_request;
pub mod schema;
pub mod snapshot;

pub use codec::RecordError;
pub use fact::{
    FactKind, RequestedCall, ResultKey, SpanFact, StoredFact, ToolReturnForm, ToolReturnRole,
};
pub use log_event::LogEvent;
pub use model_request::{request_start, ModelRequestRecord};
pub use schema::{MIGRATED_SCHEMA, SCHEMA_VERSION};

// Transitional, until a-fold's `run_state` module (which defines these here) is merged: the
// store reads run meta and state through this layer, never from the interpreter.
pub use crate::interpreter::{RunMeta, RunState};
