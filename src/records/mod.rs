//! Persisted types and their codecs; store, interpreter and continuation depend on this, not on
//! each other.

pub mod run_state;
pub mod tool_return_form;
pub mod walk_state;
