//! The outbox as the exporters and the writer see it: the next seq, and for each exporter its
//! cursor, its unsent bytes against its cap, and its counters. The entries themselves live in
//! RocksDB (`store::outbox`); the recently committed ones are also handed to the exporters in
//! memory (`handoff`, bounded), so a caught-up exporter does not read them back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::handoff::{Handoff, Taken, HANDOFF_BYTES};
use crate::config::{ExporterConfig, SignalKind, WhenFull};
use crate::outbox::OutboxEntry;
use crate::store::{Store, StoreError};

/// Per-signal counters, indexed by [`signal_index`].
#[derive(Debug, Default)]
pub struct SignalCounters([AtomicU64; 3]);

impl SignalCounters {
    /// Adds `n` for `signal`.
    pub fn add(&self, signal: SignalKind, n: u64) {
        self.0[signal_index(signal)].fetch_add(n, Ordering::Relaxed);
    }

    /// The count for `signal`.
    pub fn get(&self, signal: SignalKind) -> u64 {
        self.0[signal_index(signal)].load(Ordering::Relaxed)
    }
}

fn signal_index(signal: SignalKind) -> usize {
    match signal {
        SignalKind::Traces => 0,
        SignalKind::Logs => 1,
        SignalKind::Metrics => 2,
    }
}

/// What one exporter did, for `/metrics`.
#[derive(Debug, Default)]
pub struct ExporterCounters {
    /// Items the backend accepted (including those it reported as partially rejected).
    pub sent: SignalCounters,
    /// Items dropped after a permanent error or when retries gave up.
    pub send_failed: SignalCounters,
    /// Items refused at the receiver because this exporter's queue was full.
    pub enqueue_failed: SignalCounters,
    /// Items the backend rejected in a `partial_success`.
    pub partially_rejected: SignalCounters,
    /// Items sent again after a restart that may already have reached the backend.
    pub possible_duplicates: SignalCounters,
    /// Unsent items dropped to make room at the cap (`when_full: drop_oldest`).
    pub dropped_oldest: SignalCounters,
    /// Retried attempts.
    pub retries: AtomicU64,
}

/// One exporter's place in the outbox.
#[derive(Debug)]
pub struct ExporterQueue {
    /// The exporter id, e.g. `otlp/backend`.
    pub id: String,
    signals: Vec<SignalKind>,
    /// Cap on unsent bytes.
    pub capacity: u64,
    /// What happens at the cap.
    pub when_full: WhenFull,
    /// Requests in flight at once.
    pub num_consumers: usize,
    pending_bytes: AtomicU64,
    claims: Mutex<Claims>,
    done: AtomicU64,
    /// Every entry up to this seq was read by the exporter (it no longer needs the handoff's).
    read_through: AtomicU64,
    /// The in-flight seq found at start (entries up to it may be duplicates).
    pub recovered_in_flight: u64,
    /// Wakes the exporter when entries were committed.
    pub notify: Notify,
    /// Counters.
    pub counters: ExporterCounters,
}

impl ExporterQueue {
    /// Whether this exporter forwards `signal`.
    pub fn takes(&self, signal: SignalKind) -> bool {
        self.signals.contains(&signal)
    }

    /// Unsent bytes.
    pub fn pending_bytes(&self) -> u64 {
        self.pending_bytes.load(Ordering::Relaxed)
    }

    /// Every entry up to this seq is finished.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }

    /// Marks everything up to `seq` finished; `size` bytes of it leave this queue.
    pub fn finish(&self, seq: u64, size: u64) {
        self.set_done(seq);
        self.release(size);
    }

    /// Marks everything up to `seq` finished.
    pub fn set_done(&self, seq: u64) {
        self.done.fetch_max(seq, Ordering::AcqRel);
    }

    /// `size` bytes leave this queue (an entry was sent or given up).
    pub fn release(&self, size: u64) {
        let _ = self
            .pending_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |pending| {
                Some(pending.saturating_sub(size))
            });
    }

    /// The exporter takes entry `seq` for sending; false when it was dropped to make room
    /// (its bytes already left the queue). Entries are claimed in increasing order.
    pub fn claim(&self, seq: u64) -> bool {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        if seq <= claims.dropped_through {
            return false;
        }
        claims.claimed = claims.claimed.max(seq);
        true
    }

    /// Drops the oldest entries of this queue that the exporter has not claimed, until at
    /// least `needed` bytes are freed or none is left; returns the bytes freed. Runs on the
    /// writer thread (reads the outbox's entry headers).
    fn drop_oldest(&self, store: &Store, needed: u64) -> Result<u64, StoreError> {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        let after = claims.claimed.max(claims.dropped_through).max(self.done());
        let (mut freed, mut through) = (0u64, after);
        let mut dropped = [0u64; 3];
        store.outbox_headers_after(after, |seq, signal, items, size| {
            through = seq;
            if self.takes(signal) {
                freed += size;
                dropped[signal_index(signal)] += items;
            }
            freed < needed
        })?;
        claims.dropped_through = through;
        drop(claims);
        if freed > 0 {
            self.release(freed);
            for signal in SignalKind::ALL {
                self.counters
                    .dropped_oldest
                    .add(signal, dropped[signal_index(signal)]);
            }
            tracing::warn!(
                exporter = %self.id,
                bytes = freed,
                spans = dropped[0],
                log_records = dropped[1],
                metric_points = dropped[2],
                through_seq = through,
                "queue full: dropped the oldest unsent entries (sending_queue.when_full: drop_oldest)"
            );
        }
        Ok(freed)
    }
}

/// What the exporter took for sending, and what the writer dropped at the cap.
#[derive(Debug, Default)]
struct Claims {
    /// Highest seq the exporter took for sending.
    claimed: u64,
    /// Entries up to this seq were dropped (never claimed afterwards).
    dropped_through: u64,
}

/// The outbox's shared state. Only the writer thread reserves space and assigns seqs.
#[derive(Debug)]
pub struct Outbox {
    next_seq: AtomicU64,
    deleted_through: AtomicU64,
    queues: Vec<Arc<ExporterQueue>>,
    handoff: Handoff,
}

/// A request refused because an exporter's queue is full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueFull {
    /// The exporter whose queue is full.
    pub exporter: String,
    /// Its cap, in bytes.
    pub capacity: u64,
}

impl Outbox {
    /// An outbox with no exporter: nothing is ever appended.
    pub fn disabled() -> Self {
        Self {
            next_seq: AtomicU64::new(1),
            deleted_through: AtomicU64::new(0),
            queues: Vec::new(),
            handoff: Handoff::new(0, 0),
        }
    }

    /// Rebuilds the state from `store` for `exporters`: their cursors, their unsent bytes, and
    /// the next seq. Entries no configured exporter still needs are deleted.
    pub fn open(store: &Store, exporters: &[ExporterConfig]) -> Result<Self, StoreError> {
        let last = store.outbox_last_seq()?.unwrap_or(0);
        let mut next = last;
        let mut queues = Vec::with_capacity(exporters.len());
        for exporter in exporters {
            let cursor = store.outbox_cursor(&exporter.id)?.unwrap_or_default();
            next = next.max(cursor.done).max(cursor.in_flight);
            queues.push(ExporterQueue {
                id: exporter.id.clone(),
                signals: exporter.signals.clone(),
                capacity: exporter.queue_size_bytes,
                when_full: exporter.when_full,
                num_consumers: exporter.num_consumers,
                pending_bytes: AtomicU64::new(0),
                claims: Mutex::new(Claims::default()),
                done: AtomicU64::new(cursor.done),
                read_through: AtomicU64::new(cursor.done),
                recovered_in_flight: cursor.in_flight.max(cursor.done),
                notify: Notify::new(),
                counters: ExporterCounters::default(),
            });
        }
        store.outbox_sizes(|seq, signal, size| {
            for queue in &queues {
                if seq > queue.done() && queue.takes(signal) {
                    queue.pending_bytes.fetch_add(size, Ordering::Relaxed);
                }
            }
        })?;
        let deletable = queues.iter().map(ExporterQueue::done).min().unwrap_or(last);
        if deletable > 0 {
            store.outbox_delete_through(deletable)?;
        }
        Ok(Self {
            next_seq: AtomicU64::new(next + 1),
            deleted_through: AtomicU64::new(deletable),
            queues: queues.into_iter().map(Arc::new).collect(),
            // Everything up to `next` is in the store (or never will be): read from there.
            handoff: Handoff::new(next, HANDOFF_BYTES),
        })
    }

    /// The exporters' queues.
    pub fn queues(&self) -> &[Arc<ExporterQueue>] {
        &self.queues
    }

    /// Whether some exporter forwards `signal` (else requests of it are not appended).
    pub fn wants(&self, signal: SignalKind) -> bool {
        self.queues.iter().any(|queue| queue.takes(signal))
    }

    /// Reserves `size` bytes in every queue taking `signal` and returns the entry's seq, or
    /// the first full queue (counting `items` as refused there). A queue holding nothing takes
    /// an entry of any size, so an entry larger than a cap is not refused forever. A full
    /// `drop_oldest` queue first drops its oldest unclaimed entries from `store`; it refuses
    /// only when what is left is all in flight.
    pub fn reserve(
        &self,
        store: &Store,
        signal: SignalKind,
        items: u64,
        size: u64,
    ) -> Result<u64, QueueFull> {
        let takers = || self.queues.iter().filter(|queue| queue.takes(signal));
        let over = |queue: &ExporterQueue| {
            let pending = queue.pending_bytes();
            (pending > 0 && pending.saturating_add(size) > queue.capacity)
                .then(|| pending.saturating_add(size) - queue.capacity)
        };
        // Refusing queues first, so nothing is dropped for a request refused anyway.
        let mut full =
            takers().find(|queue| queue.when_full == WhenFull::Refuse && over(queue).is_some());
        if full.is_none() {
            for queue in takers().filter(|queue| queue.when_full == WhenFull::DropOldest) {
                let Some(needed) = over(queue) else {
                    continue;
                };
                if let Err(e) = queue.drop_oldest(store, needed) {
                    tracing::error!(exporter = %queue.id, error = %e, "cannot read the outbox to drop its oldest entries");
                }
                if over(queue).is_some() {
                    full = Some(queue);
                    break;
                }
            }
        }
        if let Some(full) = full {
            full.counters.enqueue_failed.add(signal, items);
            return Err(QueueFull {
                exporter: full.id.clone(),
                capacity: full.capacity,
            });
        }
        for queue in takers() {
            queue.pending_bytes.fetch_add(size, Ordering::AcqRel);
        }
        Ok(self.next_seq.fetch_add(1, Ordering::AcqRel))
    }

    /// Gives back a reservation whose commit failed.
    pub fn release(&self, signal: SignalKind, size: u64) {
        for queue in self.queues.iter().filter(|queue| queue.takes(signal)) {
            let _ =
                queue
                    .pending_bytes
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |pending| {
                        Some(pending.saturating_sub(size))
                    });
        }
    }

    /// Hands a committed entry to the exporters in memory (call after the durable commit that
    /// stored it, before [`Outbox::committed`], in seq order); `stored_bytes` is the size of the
    /// value the writer stored for it.
    pub fn hand_off(&self, entry: &OutboxEntry, stored_bytes: u64) {
        if self.queues.is_empty() {
            return;
        }
        self.handoff.push(entry, stored_bytes, self.read_through());
    }

    /// Up to `max_entries` entries after `after` from the in-memory handoff (see
    /// [`Handoff::take`]), or `None` when the exporter must read the store.
    pub fn take(
        &self,
        after: u64,
        max_entries: usize,
        max_bytes: u64,
        with_runs: bool,
    ) -> Option<Taken> {
        self.handoff.take(after, max_entries, max_bytes, with_runs)
    }

    /// `queue`'s exporter has read every entry up to `seq` (from memory or the store): the
    /// handoff lets go of what every exporter has read.
    pub fn read_to(&self, queue: &ExporterQueue, seq: u64) {
        queue.read_through.fetch_max(seq, Ordering::AcqRel);
        self.handoff.release(self.read_through());
    }

    /// The seq every exporter has read through.
    fn read_through(&self) -> u64 {
        self.queues
            .iter()
            .map(|queue| queue.read_through.load(Ordering::Acquire))
            .min()
            .unwrap_or(0)
    }

    /// Bytes the in-memory handoff holds.
    pub fn handoff_bytes(&self) -> u64 {
        self.handoff.bytes()
    }

    /// Wakes every exporter after a commit.
    pub fn committed(&self) {
        for queue in &self.queues {
            queue.notify.notify_one();
        }
    }

    /// The seq every exporter has finished, if entries up to it are not deleted yet; the
    /// caller deletes them with its cursor update.
    pub fn deletable(&self) -> Option<u64> {
        let through = self.queues.iter().map(|queue| queue.done()).min()?;
        let previous = self.deleted_through.fetch_max(through, Ordering::AcqRel);
        (through > previous).then_some(through)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Compression, ExporterProtocol, RetryConfig};
    use crate::outbox::OutboxEntry;
    use crate::store::OutboxCursor;
    use std::time::Duration;

    fn exporter(id: &str, signals: Vec<SignalKind>, cap: u64) -> ExporterConfig {
        ExporterConfig {
            id: id.into(),
            protocol: ExporterProtocol::Grpc,
            endpoint: "http://127.0.0.1:1".into(),
            tls: None,
            headers: Vec::new(),
            compression: Compression::None,
            timeout: Duration::from_secs(1),
            retry: RetryConfig::default(),
            queue_size_bytes: cap,
            when_full: crate::config::WhenFull::Refuse,
            num_consumers: 1,
            batch: None,
            enrich_run_id: false,
            signals,
        }
    }

    #[test]
    fn caps_cursors_and_restart() {
        let store = Store::in_memory();
        let exporters = [
            exporter("otlp/a", vec![SignalKind::Traces], 100),
            exporter("otlp/b", vec![SignalKind::Traces, SignalKind::Logs], 1000),
        ];
        let outbox = Outbox::open(&store, &exporters).unwrap();
        assert!(outbox.wants(SignalKind::Logs) && !outbox.wants(SignalKind::Metrics));
        // An empty queue takes an entry larger than its cap.
        let first = outbox.reserve(&store, SignalKind::Traces, 3, 150).unwrap();
        let full = outbox
            .reserve(&store, SignalKind::Traces, 2, 10)
            .unwrap_err();
        assert_eq!(full.exporter, "otlp/a");
        assert_eq!(
            outbox.queues()[0]
                .counters
                .enqueue_failed
                .get(SignalKind::Traces),
            2
        );
        let second = outbox.reserve(&store, SignalKind::Logs, 1, 20).unwrap();
        assert_eq!((first, second), (1, 2));
        let mut batch = store.batch();
        batch
            .put_outbox(&OutboxEntry {
                seq: first,
                ..OutboxEntry::new(SignalKind::Traces, 3, vec![0; 141])
            })
            .unwrap();
        batch
            .put_outbox(&OutboxEntry {
                seq: second,
                ..OutboxEntry::new(SignalKind::Logs, 1, vec![0; 11])
            })
            .unwrap();
        store.commit(batch).unwrap();
        outbox.queues()[0].finish(first, 150);
        assert_eq!(outbox.queues()[0].pending_bytes(), 0);
        assert_eq!(outbox.deletable(), None, "b has not sent anything");

        // Restart: b still owes both entries, a owes nothing.
        store
            .outbox_advance(
                "otlp/a",
                OutboxCursor {
                    done: 1,
                    in_flight: 1,
                },
                None,
            )
            .unwrap();
        drop(outbox);
        let outbox = Outbox::open(&store, &exporters).unwrap();
        assert_eq!(outbox.queues()[0].pending_bytes(), 0);
        assert_eq!(outbox.queues()[1].pending_bytes(), 170);
        assert_eq!(outbox.reserve(&store, SignalKind::Metrics, 1, 1), Ok(3));
        outbox.queues()[1].finish(2, 170);
        assert_eq!(outbox.deletable(), Some(1));
    }
}
