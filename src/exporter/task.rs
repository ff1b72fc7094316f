//! One task per exporter: reads the outbox after its cursor and keeps up to
//! `sending_queue.num_consumers` requests of its signals in flight (each sent with retries).
//! Each entry is one request, or with `sending_queue.batch` entries of one signal are merged
//! into larger ones (`batcher`). The cursor advances only over the contiguous prefix of
//! finished entries, so everything after it is sent again after a crash (at-least-once);
//! entries every exporter finished are deleted with the cursor update.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::batcher::{Batch, Batcher};
use super::client::Client;
use super::error::ExportError;
use super::queue::{ExporterQueue, Outbox};
use super::retry::with_retries;
use crate::config::{BatchConfig, RetryConfig, SignalKind};
use crate::otlp::PartialSuccess;
use crate::outbox::OutboxEntry;
use crate::store::{OutboxCursor, Store};

/// Entries read from the outbox at a time.
const READ_ENTRIES: usize = 64;
/// Bytes read from the outbox at a time (at least one entry is read).
const READ_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of entries an exporter holds at once, in open batches and in flight (at least one
/// entry, whatever its size). At the bound, open batches go out without waiting.
const HELD_BYTES: u64 = 8 * 1024 * 1024;
/// Wait after a failed outbox read or cursor write.
const STORE_RETRY: Duration = Duration::from_secs(1);
/// A cursor that only moved over finished entries is written at most this often (one write,
/// with the deletion of what every exporter finished). A cursor announcing entries about to be
/// sent is written before they are, whatever the time.
const CURSOR_EVERY: Duration = Duration::from_millis(10);

/// What became of one request.
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
    /// Merging entries into larger requests (`None`: one request per entry).
    pub batch: Option<BatchConfig>,
}

/// The entries after the cursor, by seq: finished (`true`) or taken and not finished (`false`).
#[derive(Default)]
struct Window {
    entries: BTreeMap<u64, bool>,
    /// Highest seq sent (the persisted `in_flight`).
    highest_sent: u64,
}

/// What a finished send hands back: the seqs of its entries and the bytes they held.
type Finished = (Vec<u64>, u64);

impl ExporterTask {
    /// Runs until `stop` turns true and the outbox holds nothing more for this exporter (the
    /// caller bounds the drain with a deadline; what is not sent stays in the outbox). Open
    /// batches go out at once when `stop` turns true.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let this = Arc::new(self);
        let queue = this.queue.clone();
        let id = queue.id.clone();
        let consumers = queue.num_consumers.max(1);
        tracing::info!(exporter = %id, consumers, batching = this.batch.is_some(), "exporter started");
        let mut window = Window {
            highest_sent: queue.done(),
            ..Window::default()
        };
        let mut read_after = queue.done();
        // The cursor as last written, and when.
        let mut persisted = OutboxCursor {
            done: queue.done(),
            in_flight: queue.recovered_in_flight,
        };
        let mut persisted_at = Instant::now();
        let mut buffered: VecDeque<OutboxEntry> = VecDeque::new();
        let mut batcher = Batcher::new(this.batch);
        let mut ready: VecDeque<Batch> = VecDeque::new();
        let mut sends: JoinSet<Finished> = JoinSet::new();
        let mut held_bytes = 0u64;
        // The last read reached the end of the outbox: nothing to read until `notify` (every
        // commit after that read notifies).
        let mut drained = false;
        loop {
            // Take entries while requests could start and the held bytes allow.
            let stopping = *stop.borrow();
            let mut outbox_empty = false;
            while sends.len() + ready.len() < consumers
                && (held_bytes < HELD_BYTES || held_bytes == 0)
            {
                if buffered.is_empty() {
                    // Stopping, a last read makes sure nothing committed is left.
                    if drained && !stopping {
                        outbox_empty = true;
                        break;
                    }
                    match this.read(read_after).await {
                        Some((entries, _)) if entries.is_empty() => {
                            drained = true;
                            outbox_empty = true;
                            break;
                        }
                        Some((entries, all)) => {
                            drained = all;
                            read_after = entries.last().map_or(read_after, |e| e.seq);
                            this.outbox.read_to(&queue, read_after);
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
                held_bytes += entry.size();
                ready.extend(batcher.add(entry, Instant::now()));
            }
            ready.extend(batcher.due(Instant::now(), stopping || held_bytes >= HELD_BYTES));

            // Start what is ready while consumers are free.
            let mut starting = Vec::new();
            while sends.len() + starting.len() < consumers {
                let Some(batch) = ready.pop_front() else {
                    break;
                };
                if let Some(last) = batch.last() {
                    window.highest_sent = window.highest_sent.max(last.seq);
                }
                starting.push(batch);
            }
            // One cursor write: the finished prefix, and (written before sending) what is about
            // to go out, which counts as possible duplicates after a crash. A cursor that only
            // moved over finished entries waits up to CURSOR_EVERY for company (a crash in
            // between re-sends those entries: at-least-once either way).
            this.advance(&mut window);
            let done = queue.done();
            let in_flight = if window.entries.is_empty() {
                done
            } else {
                window.highest_sent.max(done)
            };
            let announce = in_flight > persisted.in_flight;
            let moved = done > persisted.done;
            if announce || (moved && (stopping || persisted_at.elapsed() >= CURSOR_EVERY)) {
                persisted = OutboxCursor { done, in_flight };
                this.persist(persisted).await;
                persisted_at = Instant::now();
            }
            // When a cursor that moved is to be written if nothing else happens first.
            let cursor_due = (queue.done() > persisted.done).then(|| persisted_at + CURSOR_EVERY);
            for batch in starting {
                let (signal, items, seq) = summary(&batch);
                // stepline's own trace of the send (exported with service.telemetry.traces).
                let span = tracing::info_span!(
                    "stepline.export",
                    exporter = %queue.id,
                    signal = signal.name(),
                    items,
                    seq,
                    entries = batch.len(),
                );
                sends.spawn(this.clone().deliver(batch).instrument(span));
            }

            let idle = sends.is_empty() && buffered.is_empty() && ready.is_empty();
            if idle && outbox_empty && batcher.is_empty() {
                if stopping {
                    break;
                }
                tokio::select! {
                    _ = queue.notify.notified() => drained = false,
                    // Read once more before stopping: a last commit may have come with it.
                    _ = stop.changed() => drained = false,
                    _ = sleep_until(cursor_due), if cursor_due.is_some() => {}
                }
                continue;
            }
            let room = sends.len() + ready.len() < consumers && held_bytes < HELD_BYTES;
            let deadline = batcher.deadline();
            let finished = tokio::select! {
                finished = sends.join_next(), if !sends.is_empty() => finished,
                _ = queue.notify.notified(), if room && buffered.is_empty() && outbox_empty => {
                    drained = false;
                    None
                }
                _ = sleep_until(deadline), if deadline.is_some() => None,
                _ = sleep_until(cursor_due), if cursor_due.is_some() => None,
                _ = stop.changed(), if !stopping && !batcher.is_empty() => {
                    drained = false;
                    None
                }
                else => None,
            };
            for result in finished
                .into_iter()
                .chain(std::iter::from_fn(|| sends.try_join_next()))
            {
                match result {
                    Ok((seqs, size)) => {
                        held_bytes = held_bytes.saturating_sub(size);
                        for seq in seqs {
                            window.entries.insert(seq, true);
                        }
                    }
                    Err(e) => {
                        // A send task cannot panic on input; if it did, its entries stay in
                        // flight and are sent again after a restart.
                        tracing::error!(exporter = %id, error = %e, "a send task failed");
                    }
                }
            }
        }
        tracing::info!(exporter = %id, "exporter stopped: nothing left to send");
    }

    /// Up to [`READ_ENTRIES`] entries after `after`, and whether they are all there is for
    /// now: from the in-memory handoff when it has them all, else from the store. `None`
    /// after a failed read (logged, after a pause).
    async fn read(&self, after: u64) -> Option<(Vec<OutboxEntry>, bool)> {
        let with_runs = self.client.enriches();
        if let Some(taken) = self
            .outbox
            .take(after, READ_ENTRIES, READ_BYTES as u64, with_runs)
        {
            return Some((taken.entries, taken.drained));
        }
        let store = self.store.clone();
        let read = tokio::task::spawn_blocking(move || {
            store.outbox_after(after, READ_ENTRIES, READ_BYTES)
        })
        .await;
        let error = match read {
            Ok(Ok(entries)) => {
                let bytes: u64 = entries.iter().map(OutboxEntry::size).sum();
                let all = entries.len() < READ_ENTRIES && bytes < READ_BYTES as u64;
                return Some((entries, all));
            }
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        tracing::error!(exporter = %self.queue.id, error = %error, "cannot read the outbox");
        tokio::time::sleep(STORE_RETRY).await;
        None
    }

    /// Moves the cursor over the finished prefix of the window; whether it moved.
    fn advance(&self, window: &mut Window) -> bool {
        let mut done = None;
        while let Some(entry) = window.entries.first_entry() {
            if !*entry.get() {
                break;
            }
            done = Some(*entry.key());
            entry.remove();
        }
        match done {
            Some(done) => {
                self.queue.set_done(done);
                true
            }
            None => false,
        }
    }

    /// Sends one batch (with retries) and counts the outcome; returns its seqs and the bytes
    /// that have left the queue.
    async fn deliver(self: Arc<Self>, batch: Batch) -> Finished {
        let queue = &self.queue;
        let (signal, _, _) = summary(&batch);
        let size: u64 = batch.iter().map(OutboxEntry::size).sum();
        let seqs: Vec<u64> = batch.iter().map(|e| e.seq).collect();
        let duplicates: u64 = batch
            .iter()
            .filter(|e| e.seq <= queue.recovered_in_flight)
            .map(|e| e.items)
            .sum();
        if duplicates > 0 {
            queue.counters.possible_duplicates.add(signal, duplicates);
        }
        // The request: each entry's bytes, concatenated (`Client::send_parts`). An entry that
        // cannot be prepared (its stored request does not decode for enrichment) is dropped on
        // its own.
        let mut items = 0;
        let mut parts: Vec<Bytes> = Vec::with_capacity(batch.len());
        for entry in batch {
            let entry_items = entry.items;
            match self.client.into_body(entry) {
                Ok(body) => {
                    items += entry_items;
                    parts.push(body);
                }
                Err(reason) => self.dropped(signal, entry_items, &reason),
            }
        }
        if !parts.is_empty() {
            match self.send_with_retries(signal, parts).await {
                Fate::Sent(delivered) => {
                    queue.counters.sent.add(signal, items);
                    if delivered.rejected > 0 || !delivered.message.is_empty() {
                        let rejected = u64::try_from(delivered.rejected).unwrap_or(0);
                        queue.counters.partially_rejected.add(signal, rejected);
                        tracing::warn!(
                            exporter = %queue.id,
                            signal = signal.name(),
                            rejected,
                            message = %delivered.message,
                            "the backend rejected part of a request (partial success)"
                        );
                    }
                }
                Fate::Dropped(reason) => self.dropped(signal, items, &reason),
            }
        }
        queue.release(size);
        (seqs, size)
    }

    /// Counts and logs `items` given up for `reason`.
    fn dropped(&self, signal: SignalKind, items: u64, reason: &ExportError) {
        self.queue.counters.send_failed.add(signal, items);
        tracing::error!(
            exporter = %self.queue.id,
            signal = signal.name(),
            items,
            error = %reason,
            "dropping a request the backend will not take"
        );
    }

    async fn send_with_retries(&self, signal: SignalKind, parts: Vec<Bytes>) -> Fate {
        let sent = with_retries(
            &self.retry,
            || self.client.send_parts(signal, parts.clone()),
            |error, wait| {
                self.queue
                    .counters
                    .retries
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(
                    exporter = %self.queue.id,
                    signal = signal.name(),
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

/// The signal, items and first seq of a batch (never empty).
fn summary(batch: &[OutboxEntry]) -> (SignalKind, u64, u64) {
    let signal = batch.first().map_or(SignalKind::Traces, |e| e.signal);
    let items = batch.iter().map(|e| e.items).sum();
    let seq = batch.first().map_or(0, |e| e.seq);
    (signal, items, seq)
}

/// Sleeps until `deadline` (forever without one; the caller disables the branch then).
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
