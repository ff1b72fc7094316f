//! Merging outbox entries into fewer, larger requests (`sending_queue.batch`), with the
//! Collector's exporter batching rules: entries of one signal gather in an open batch, which
//! goes out once it holds `min_size` (items or bytes, per `sizer`) or `flush_timeout` after its
//! first entry, and never holds more than `max_size`. Entries are never split: one larger than
//! `max_size` goes out alone. Without a `max_size` under the `bytes` sizer, a merged request
//! stays within [`MAX_MERGED_BYTES`] (most gRPC servers refuse larger messages).
//!
//! Without batching every entry is its own request, as it arrived. Pure logic: the exporter
//! task asks what is ready and when to look again.

use std::time::Instant;

use crate::config::{BatchConfig, BatchSizer, SignalKind};
use crate::outbox::OutboxEntry;

/// Bytes a merged request holds at most unless `sizer: bytes` sets a larger `max_size`.
pub const MAX_MERGED_BYTES: u64 = 4 * 1024 * 1024;

/// Entries of one signal going out as one request, in outbox order.
pub type Batch = Vec<OutboxEntry>;

/// An open batch: entries waiting for more of their signal.
#[derive(Debug)]
struct Open {
    entries: Batch,
    /// In the sizer's unit.
    size: u64,
    /// Payload bytes.
    bytes: u64,
    /// When its first entry was taken.
    since: Instant,
}

/// The open batches of one exporter, one per signal.
#[derive(Debug)]
pub struct Batcher {
    config: Option<BatchConfig>,
    open: [Option<Open>; 3],
}

fn slot(signal: SignalKind) -> usize {
    match signal {
        SignalKind::Traces => 0,
        SignalKind::Logs => 1,
        SignalKind::Metrics => 2,
    }
}

impl Batcher {
    /// A batcher with `config`; `None` makes every entry its own batch.
    pub fn new(config: Option<BatchConfig>) -> Self {
        Self {
            config,
            open: [None, None, None],
        }
    }

    /// Takes `entry` (at `now`) and returns the batches it made ready, oldest first.
    pub fn add(&mut self, entry: OutboxEntry, now: Instant) -> Vec<Batch> {
        let Some(config) = self.config else {
            return vec![vec![entry]];
        };
        let size = match config.sizer {
            BatchSizer::Items => entry.items,
            BatchSizer::Bytes => entry.payload.len() as u64,
        };
        let bytes = entry.payload.len() as u64;
        let max_size = if config.max_size == 0 {
            u64::MAX
        } else {
            config.max_size
        };
        let max_bytes = match config.sizer {
            BatchSizer::Bytes if config.max_size > MAX_MERGED_BYTES => config.max_size,
            _ => MAX_MERGED_BYTES,
        };
        let mut ready = Vec::new();
        let open = &mut self.open[slot(entry.signal)];
        // The entry does not fit with what is open: that goes out first.
        if let Some(current) = open.as_ref() {
            if current.size.saturating_add(size) > max_size
                || current.bytes.saturating_add(bytes) > max_bytes
            {
                ready.extend(open.take().map(|o| o.entries));
            }
        }
        let current = open.get_or_insert_with(|| Open {
            entries: Vec::new(),
            size: 0,
            bytes: 0,
            since: now,
        });
        current.entries.push(entry);
        current.size = current.size.saturating_add(size);
        current.bytes = current.bytes.saturating_add(bytes);
        if current.size >= config.min_size || current.size >= max_size || current.bytes >= max_bytes
        {
            ready.extend(open.take().map(|o| o.entries));
        }
        ready
    }

    /// The open batches whose `flush_timeout` has passed at `now`, or all of them with `all`
    /// (shutting down, or the exporter holds as much as it may).
    pub fn due(&mut self, now: Instant, all: bool) -> Vec<Batch> {
        let Some(config) = self.config else {
            return Vec::new();
        };
        let mut due: Vec<(Instant, Batch)> = Vec::new();
        for open in &mut self.open {
            let expired = open.as_ref().is_some_and(|o| {
                all || now.saturating_duration_since(o.since) >= config.flush_timeout
            });
            if expired {
                due.extend(open.take().map(|o| (o.since, o.entries)));
            }
        }
        // Oldest first, so the cursor's prefix finishes soonest.
        due.sort_by_key(|(since, _)| *since);
        due.into_iter().map(|(_, batch)| batch).collect()
    }

    /// When the oldest open batch is due, if one is open.
    pub fn deadline(&self) -> Option<Instant> {
        let config = self.config?;
        self.open
            .iter()
            .flatten()
            .map(|o| o.since + config.flush_timeout)
            .min()
    }

    /// Whether no batch is open.
    pub fn is_empty(&self) -> bool {
        self.open.iter().all(Option::is_none)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn entry(seq: u64, signal: SignalKind, items: u64, bytes: usize) -> OutboxEntry {
        OutboxEntry {
            seq,
            ..OutboxEntry::new(signal, items, vec![0; bytes])
        }
    }

    fn seqs(batches: &[Batch]) -> Vec<Vec<u64>> {
        batches
            .iter()
            .map(|b| b.iter().map(|e| e.seq).collect())
            .collect()
    }

    fn config(min_size: u64, max_size: u64, sizer: BatchSizer) -> Option<BatchConfig> {
        Some(BatchConfig {
            flush_timeout: Duration::from_millis(100),
            min_size,
            max_size,
            sizer,
        })
    }

    #[test]
    fn without_batching_every_entry_goes_alone_at_once() {
        let mut batcher = Batcher::new(None);
        let now = Instant::now();
        let ready = batcher.add(entry(1, SignalKind::Traces, 5, 10), now);
        assert_eq!(seqs(&ready), [vec![1]]);
        assert!(batcher.is_empty());
        assert_eq!(batcher.deadline(), None);
        assert!(batcher.due(now, true).is_empty());
    }

    #[test]
    fn min_size_sends_max_size_cuts_and_signals_stay_apart() {
        let mut batcher = Batcher::new(config(10, 12, BatchSizer::Items));
        let now = Instant::now();
        assert!(batcher
            .add(entry(1, SignalKind::Traces, 4, 10), now)
            .is_empty());
        assert!(batcher
            .add(entry(2, SignalKind::Logs, 4, 10), now)
            .is_empty());
        assert!(batcher
            .add(entry(3, SignalKind::Traces, 4, 10), now)
            .is_empty());
        // 8 + 5 > 12: the open 8 goes, the 5 opens a new batch.
        let ready = batcher.add(entry(4, SignalKind::Traces, 5, 10), now);
        assert_eq!(seqs(&ready), [vec![1, 3]]);
        // 5 + 5 = 10 reaches min_size.
        let ready = batcher.add(entry(5, SignalKind::Traces, 5, 10), now);
        assert_eq!(seqs(&ready), [vec![4, 5]]);
        // One entry over max_size goes alone, after what was open of its signal.
        assert!(batcher
            .add(entry(6, SignalKind::Logs, 1, 10), now)
            .is_empty());
        let ready = batcher.add(entry(7, SignalKind::Logs, 40, 10), now);
        assert_eq!(seqs(&ready), [vec![2, 6], vec![7]]);
        assert!(batcher.is_empty());
    }

    #[test]
    fn flush_timeout_sends_what_is_open_oldest_first() {
        let mut batcher = Batcher::new(config(100, 0, BatchSizer::Items));
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(30);
        assert!(batcher
            .add(entry(1, SignalKind::Metrics, 1, 10), t0)
            .is_empty());
        assert!(batcher
            .add(entry(2, SignalKind::Traces, 1, 10), t1)
            .is_empty());
        assert!(batcher
            .add(entry(3, SignalKind::Metrics, 1, 10), t1)
            .is_empty());
        assert_eq!(batcher.deadline(), Some(t0 + Duration::from_millis(100)));
        assert!(batcher
            .due(t0 + Duration::from_millis(99), false)
            .is_empty());
        let due = batcher.due(t0 + Duration::from_millis(100), false);
        assert_eq!(seqs(&due), [vec![1, 3]]);
        assert_eq!(batcher.deadline(), Some(t1 + Duration::from_millis(100)));
        // Everything when asked (shutdown).
        assert_eq!(seqs(&batcher.due(t1, true)), [vec![2]]);
        assert!(batcher.is_empty());
    }

    #[test]
    fn bytes_sizer_and_the_merged_request_cap() {
        let mut batcher = Batcher::new(config(1000, 0, BatchSizer::Bytes));
        let now = Instant::now();
        assert!(batcher
            .add(entry(1, SignalKind::Traces, 1, 600), now)
            .is_empty());
        let ready = batcher.add(entry(2, SignalKind::Traces, 1, 600), now);
        assert_eq!(seqs(&ready), [vec![1, 2]]);

        // Items with no max_size: a merged request still stops at MAX_MERGED_BYTES.
        let mut batcher = Batcher::new(config(1_000_000, 0, BatchSizer::Items));
        let big = (MAX_MERGED_BYTES / 2) as usize;
        assert!(batcher
            .add(entry(1, SignalKind::Traces, 1, big), now)
            .is_empty());
        let ready = batcher.add(entry(2, SignalKind::Traces, 1, big), now);
        assert_eq!(seqs(&ready), [vec![1, 2]], "full at the cap");
        assert!(batcher
            .add(entry(3, SignalKind::Traces, 1, big), now)
            .is_empty());
        let ready = batcher.add(entry(4, SignalKind::Traces, 1, big + 1), now);
        assert_eq!(seqs(&ready), [vec![3]], "would pass the cap");
        assert!(!batcher.is_empty());
    }
}
