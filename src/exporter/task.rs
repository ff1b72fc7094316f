//! One task per exporter: reads the outbox after its cursor and keeps up to
//! `sending_queue.num_consumers` entries of its signals in flight (each sent with retries).
//! The cursor advances only over the contiguous prefix of finished entries, so everything
//! after it is sent again after a crash (at-least-once); entries every exporter finished are
//! deleted with the cursor update.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::client::Client;
use super::error::ExportError;
use super::queue::{ExporterQueue, Outbox};
use super::retry::with_retries;
use crate::config::RetryConfig;
use crate::otlp::PartialSuccess;
use crate::outbox::OutboxEntry;
use crate::store::{OutboxCursor, Store};

/// Entries read from the outbox at a time.
const READ_ENTRIES: usize = 64;
/// Bytes read from the outbox at a time (at least one entry is read).
const READ_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of requests in flight at once per exporter (at least one request, whatever its size).
const IN_FLIGHT_BYTES: u64 = 8 * 1024 * 1024;
/// Wait after a failed outbox read or cursor write.
const STORE_RETRY: Duration = Duration::from_secs(1);

/// What became of one entry.
enum Fate {
    Sent(PartialSuccess),
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

/// The entries after the cursor, by seq: finished (`true`) or in flight (`false`).
#[derive(Default)]
struct Window {
    entries: BTreeMap<u64, bool>,
    /// Highest seq taken for sending (the persisted `in_flight`).
    highest: u64,
}

impl ExporterTask {
    /// Runs until `stop` turns true and the outbox holds nothing more for this exporter (the
    /// caller bounds the drain with a deadline; what is not sent stays in the outbox).
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let this = Arc::new(self);
        let queue = this.queue.clone();
        let id = queue.id.clone();
        tracing::info!(exporter = %id, consumers = queue.num_consumers, "exporter started");
        let mut window = Window {
            highest: queue.done(),
            ..Window::default()
        };
        let mut read_after = queue.done();
        let mut buffered: VecDeque<OutboxEntry> = VecDeque::new();
        let mut sends: JoinSet<(u64, u64)> = JoinSet::new();
        let mut in_flight_bytes = 0u64;
        loop {
            // Take entries while there is room in flight.
            let mut outbox_empty = false;
            let mut dispatch = Vec::new();
            while sends.len() + dispatch.len() < queue.num_consumers
                && (in_flight_bytes < IN_FLIGHT_BYTES || sends.is_empty() && dispatch.is_empty())
            {
                if buffered.is_empty() {
                    match this.read(read_after).await {
                        Some(entries) if entries.is_empty() => {
                            outbox_empty = true;
                            break;
                        }
                        Some(entries) => {
                            read_after = entries.last().map_or(read_after, |e| e.seq);
                            buffered.extend(entries);
                        }
                        None => break,
                    }
                }
                let Some(entry) = buffered.pop_front() else {
                    break;
                };
                // Not this exporter's signal, or dropped at the cap: finished, nothing to send.
                if !queue.takes(entry.signal) || !queue.claim(entry.seq) {
                    window.entries.insert(entry.seq, true);
                    continue;
                }
                window.entries.insert(entry.seq, false);
                window.highest = entry.seq;
                in_flight_bytes += entry.size();
                dispatch.push(entry);
            }
            if !dispatch.is_empty() {
                // Durable before sending: after a crash, these count as possible duplicates.
                this.persist(OutboxCursor {
                    done: queue.done(),
                    in_flight: window.highest,
                })
                .await;
                for entry in dispatch {
                    // stepline's own trace of the send (exported with service.telemetry.traces).
                    let span = tracing::info_span!(
                        "stepline.export",
                        exporter = %queue.id,
                        signal = entry.signal.name(),
                        items = entry.items,
                        seq = entry.seq,
                    );
                    sends.spawn(this.clone().deliver(entry).instrument(span));
                }
            }
            this.advance(&mut window).await;

            if sends.is_empty() && buffered.is_empty() && outbox_empty {
                if *stop.borrow() {
                    break;
                }
                tokio::select! {
                    _ = queue.notify.notified() => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
            if sends.is_empty() {
                continue;
            }
            let room = sends.len() < queue.num_consumers && in_flight_bytes < IN_FLIGHT_BYTES;
            let finished = tokio::select! {
                finished = sends.join_next() => finished,
                _ = queue.notify.notified(), if room && buffered.is_empty() && outbox_empty => None,
            };
            for result in finished
                .into_iter()
                .chain(std::iter::from_fn(|| sends.try_join_next()))
            {
                match result {
                    Ok((seq, size)) => {
                        in_flight_bytes = in_flight_bytes.saturating_sub(size);
                        window.entries.insert(seq, true);
                    }
                    Err(e) => {
                        // A send task cannot panic on input; if it did, the entry stays in
                        // flight and is sent again after a restart.
                        tracing::error!(exporter = %id, error = %e, "a send task failed");
                    }
                }
            }
        }
        tracing::info!(exporter = %id, "exporter stopped: nothing left to send");
    }

    /// Up to [`READ_ENTRIES`] entries after `after`; `None` after a failed read (logged,
    /// after a pause).
    async fn read(&self, after: u64) -> Option<Vec<OutboxEntry>> {
        let store = self.store.clone();
        let read = tokio::task::spawn_blocking(move || {
            store.outbox_after(after, READ_ENTRIES, READ_BYTES)
        })
        .await;
        let error = match read {
            Ok(Ok(entries)) => return Some(entries),
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        tracing::error!(exporter = %self.queue.id, error = %error, "cannot read the outbox");
        tokio::time::sleep(STORE_RETRY).await;
        None
    }

    /// Moves the cursor over the finished prefix of the window, and persists it if it moved.
    async fn advance(&self, window: &mut Window) {
        let mut done = None;
        while let Some(entry) = window.entries.first_entry() {
            if !*entry.get() {
                break;
            }
            done = Some(*entry.key());
            entry.remove();
        }
        if let Some(done) = done {
            self.queue.set_done(done);
            let in_flight = if window.entries.is_empty() {
                done
            } else {
                window.highest.max(done)
            };
            self.persist(OutboxCursor { done, in_flight }).await;
        }
    }

    /// Sends one entry (with retries) and counts the outcome; returns its seq and size, whose
    /// bytes have left the queue.
    async fn deliver(self: Arc<Self>, entry: OutboxEntry) -> (u64, u64) {
        let queue = &self.queue;
        if entry.seq <= queue.recovered_in_flight {
            queue
                .counters
                .possible_duplicates
                .add(entry.signal, entry.items);
        }
        match self.send_with_retries(&entry).await {
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
        queue.release(entry.size());
        (entry.seq, entry.size())
    }

    async fn send_with_retries(&self, entry: &OutboxEntry) -> Fate {
        let sent = with_retries(
            &self.retry,
            || self.client.send(entry),
            |error, wait| {
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
            },
        )
        .await;
        match sent {
            Ok(delivered) => Fate::Sent(delivered),
            Err(error) => Fate::Dropped(error),
        }
    }

    /// Writes the cursor, with the deletion of entries every exporter finished. Retried until
    /// it succeeds: a cursor that cannot be written would mean re-sending, not losing.
    async fn persist(&self, cursor: OutboxCursor) {
        let delete = self.outbox.deletable();
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
