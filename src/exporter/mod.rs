//! Forwarding: the outbox's exporters. Every accepted request is in the outbox (committed with
//! its interpreted records before the client is answered); one task per configured exporter
//! sends the entries of its signals to the backend over OTLP/gRPC or OTLP/HTTP, retrying per
//! the OTLP specification, and an entry is deleted once every exporter has finished it.

mod client;
mod enrich;
mod error;
mod queue;
mod retry;
mod task;

pub use client::{Client, Delivered};
pub use enrich::{add_run_ids, RUN_ID_ATTRIBUTE};
pub use error::ExportError;
pub use queue::{ExporterCounters, ExporterQueue, Outbox, QueueFull, SignalCounters};
pub use retry::{grpc_is_retryable, http_is_retryable, Backoff};
pub use task::{item_name, ExporterTask};
