//! stepline: an OpenTelemetry pipeline stage that turns the traces AI agents emit into durable,
//! resumable run state.
//!
//! A span travels [`receiver`] → [`ingest`] → [`interpreter`] → [`store`], and comes back out
//! through the query [`api`] and its [`continuation`] export; large binary message parts go to
//! an object store on the way in and come back on the way out ([`media`]). [`service`] wires
//! them together from the [`config`].

pub mod api;
pub mod cache_budget;
pub mod config;
pub mod continuation;
pub mod domain;
pub mod exporter;
#[doc(hidden)]
pub mod fuzzing;
pub mod heap;
pub mod idle;
pub mod ingest;
pub mod interpreter;
pub mod limits;
pub mod media;
pub mod otlp;
pub mod outbox;
pub mod receiver;
pub mod records;
pub mod service;
pub mod service_error;
pub mod store;
#[cfg(test)]
mod test_fixtures;
pub mod ui;

/// The process's allocator for every binary, test and example linking stepline (mimalloc:
/// interpreting spans and rendering continuations build and drop many small JSON values, where
/// glibc's allocator was the largest single cost in profiles of `examples/history_bench`).
#[global_allocator]
static ALLOCATOR: heap::Heap = heap::Heap;
