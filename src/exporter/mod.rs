//! Forwarding: the outbox's exporters. Every accepted request is in the outbox (committed with
//! its interpreted records before the client is answered); one task per configured exporter
//! sends the entries of its signals to the backend over OTLP/gRPC or OTLP/HTTP, retrying per
//! the OTLP specification, and an entry is deleted once every exporter has finished it.
//!
//! - `queue`: [`Outbox`] and the per-exporter [`ExporterQueue`]s (caps, cursors, counters).
//! - `handoff`: committed entries handed to the exporters in memory (the store read only when
//!   an exporter is behind).
//! - `task`: [`ExporterTask`], the loop reading one exporter's entries and keeping them in flight.
//! - `batcher`: merging entries into fewer, larger requests (`sending_queue.batch`).
//! - `retry`: retryable or permanent, the backoff, the retry loop (backon).
//! - `client`: [`Client`], one attempt over OTLP/gRPC (the stored bytes as the message) or
//!   OTLP/HTTP.
//! - `enrich`: `stepline.run_id` from the entry's span runs (`enrich_run_id`).
//! - `unframed`: an uncompressed gRPC call whose message is the entries' bytes, sent without
//!   copying them.
//! - `tls`: the rustls client side; `error`: [`ExportError`].
//!
//! The exporter depends only on the layers below it (config, outbox, store, otlp), never on
//! ingest, the interpreter or the receivers.

mod batcher;
mod client;
mod enrich;
mod error;
mod handoff;
mod queue;
mod retry;
mod task;
mod tls;
mod unframed;

/// Kept here for the callers that name them through the exporter; they live in [`crate::otlp`].
pub use crate::otlp::{item_name, TlsError};
pub use batcher::{Batcher, MAX_MERGED_BYTES};
pub use client::Client;
pub use enrich::{add_run_ids, RUN_ID_ATTRIBUTE};
pub use error::ExportError;
pub use handoff::{Taken, HANDOFF_BYTES};
pub use queue::{ExporterCounters, ExporterQueue, Outbox, QueueFull, SignalCounters};
pub use retry::{grpc_is_retryable, http_is_retryable, with_retries, Backoff};
pub use task::ExporterTask;
pub use tls::{client_config, TlsConnector, ALPN_GRPC, ALPN_HTTP};

use crate::config::{Config, ConfigError, ConfigProblem};

/// Reads every exporter's TLS files, reporting the unusable ones like configuration problems
/// (`exporters.<id>.tls.ca_file: cannot read …`). Run at start and by `--validate-config`.
pub fn check_tls(config: &Config) -> Result<(), ConfigError> {
    let problems: Vec<ConfigProblem> = config
        .exporters
        .iter()
        .filter_map(|exporter| {
            let tls = exporter.tls.as_ref()?;
            let alpn = match exporter.protocol {
                crate::config::ExporterProtocol::Grpc => ALPN_GRPC,
                _ => ALPN_HTTP,
            };
            client_config(tls, alpn).err().map(|error| {
                ConfigProblem::new(
                    format!("exporters.{}.{}", exporter.id, error.key),
                    error.message,
                )
            })
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            file: config.source.clone(),
            problems,
        })
    }
}
