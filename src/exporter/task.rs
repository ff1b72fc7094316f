//! One task per exporter: reads the outbox after its cursor, sends each entry of its signals
//! with retries, then advances its cursor (and deletes what every exporter has finished).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::client::{Client, Delivered};
use super::error::ExportError;
use super::queue::{ExporterQueue, Outbox};
use super::retry::Backoff;
use crate::config::{RetryConfig, SignalKind};
use crate::store::{OutboxCursor, OutboxEntry, Store};

/// Entries read from the outbox at a time.
const READ_ENTRIES: usize = 64;
/// Bytes read from the outbox at a time (at least one entry is read).
const READ_BYTES: usize = 4 * 1024 * 1024;
/// Wait after a failed outbox read or cursor write.
const STORE_RETRY: Duration = Duration::from_secs(1);

/// What became of one entry.
enum Fate {
    Sent(Delivered),
    Dropped(ExportError),
}

/// An exporter task's parts.
pub struct ExporterTask {
    /// The exporter's queue in the outbox.
    pub queue: Arc<ExporterQueue>,
    /// The outbox.
    pub outbox: Arc<Outbox>,
    /// The store holding the outbox.
    pub store: Arc<Store>,
    /// The backend connection.
    pub client: Client,
    /// Retry policy.
    pub retry: RetryConfig,
}

impl ExporterTask {
    /// Runs until `stop` turns true and the outbox holds nothing more for this exporter (the
    /// caller bounds the drain with a deadline; what is not sent stays in the outbox).
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let id = self.queue.id.clone();
        tracing::info!(exporter = %id, "exporter started");
        loop {
            let done = self.queue.done();
            let store = self.store.clone();
            let read = tokio::task::spawn_blocking(move || {
                store.outbox_after(done, READ_ENTRIES, READ_BYTES)
            })
            .await;
            let entries = match read {
                Ok(Ok(entries)) => entries,
                Ok(Err(e)) => {
                    tracing::error!(exporter = %id, error = %e, "cannot read the outbox");
                    tokio::time::sleep(STORE_RETRY).await;
                    continue;
                }
                Err(e) => {
                    tracing::error!(exporter = %id, error = %e, "outbox read task failed");
                    tokio::time::sleep(STORE_RETRY).await;
                    continue;
                }
            };
            if entries.is_empty() {
                if *stop.borrow() {
                    break;
                }
                tokio::select! {
                    _ = self.queue.notify.notified() => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
            let mut skipped_through = None;
            for entry in entries {
                if !self.queue.takes(entry.signal) {
                    self.queue.finish(entry.seq, 0);
                    skipped_through = Some(entry.seq);
                    continue;
                }
                self.deliver(&entry).await;
                skipped_through = None;
            }
            if let Some(seq) = skipped_through {
                self.persist(OutboxCursor {
                    done: seq,
                    in_flight: seq,
                })
                .await;
            }
        }
        tracing::info!(exporter = %id, "exporter stopped: nothing left to send");
    }

    /// Sends one entry (with retries), counts the outcome and advances the cursor.
    async fn deliver(&self, entry: &OutboxEntry) {
        let queue = &self.queue;
        if entry.seq <= queue.recovered_in_flight {
            queue
                .counters
                .possible_duplicates
                .add(entry.signal, entry.items);
        }
        self.persist(OutboxCursor {
            done: queue.done(),
            in_flight: entry.seq,
        })
        .await;
        match self.send_with_retries(entry).await {
            Fate::Sent(delivered) => {
                queue.counters.sent.add(entry.signal, entry.items);
                if delivered.rejected > 0 || !delivered.message.is_empty() {
                    let rejected = u64::try_from(delivered.rejected).unwrap_or(0);
                    queue
                        .counters
                        .partially_rejected
                        .add(entry.signal, rejected);
                    tracing::warn!(
                        exporter = %queue.id,
                        signal = entry.signal.name(),
                        rejected,
                        message = %delivered.message,
                        "the backend rejected part of a request (partial success)"
                    );
                }
            }
            Fate::Dropped(reason) => {
                queue.counters.send_failed.add(entry.signal, entry.items);
                tracing::error!(
                    exporter = %queue.id,
                    signal = entry.signal.name(),
                    items = entry.items,
                    error = %reason,
                    "dropping a request the backend will not take"
                );
            }
        }
        queue.finish(entry.seq, entry.size());
        self.persist(OutboxCursor {
            done: entry.seq,
            in_flight: entry.seq,
        })
        .await;
    }

    async fn send_with_retries(&self, entry: &OutboxEntry) -> Fate {
        let started = Instant::now();
        let mut backoff = Backoff::new(&self.retry);
        loop {
            let error = match self.client.send(entry).await {
                Ok(delivered) => return Fate::Sent(delivered),
                Err(error) => error,
            };
            if !error.is_retryable() || !self.retry.enabled {
                return Fate::Dropped(error);
            }
            let wait = error.retry_after().unwrap_or_else(|| backoff.next_wait());
            if let Some(limit) = self.retry.max_elapsed_time {
                if started.elapsed() + wait > limit {
                    tracing::warn!(exporter = %self.queue.id, "giving up after {limit:?} of retries");
                    return Fate::Dropped(error);
                }
            }
            self.queue
                .counters
                .retries
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(
                exporter = %self.queue.id,
                signal = entry.signal.name(),
                error = %error,
                retry_in = ?wait,
                "export failed; retrying"
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// Writes the cursor, with the deletion of entries every exporter finished. Retried until
    /// it succeeds: a cursor that cannot be written would mean re-sending, not losing.
    async fn persist(&self, cursor: OutboxCursor) {
        let delete = if cursor.done == cursor.in_flight {
            self.outbox.deletable()
        } else {
            None
        };
        loop {
            let (store, id) = (self.store.clone(), self.queue.id.clone());
            let written =
                tokio::task::spawn_blocking(move || store.outbox_advance(&id, cursor, delete))
                    .await;
            match written {
                Ok(Ok(())) => return,
                Ok(Err(e)) => {
                    tracing::error!(exporter = %self.queue.id, error = %e, "cannot write the outbox cursor")
                }
                Err(e) => {
                    tracing::error!(exporter = %self.queue.id, error = %e, "cursor write task failed")
                }
            }
            tokio::time::sleep(STORE_RETRY).await;
        }
    }
}

/// The name of the per-signal item in metric names (`spans`, `log_records`, `metric_points`).
pub fn item_name(signal: SignalKind) -> &'static str {
    match signal {
        SignalKind::Traces => "spans",
        SignalKind::Logs => "log_records",
        SignalKind::Metrics => "metric_points",
    }
}
