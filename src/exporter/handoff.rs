//! The in-memory handoff of committed outbox entries to the exporters.
//!
//! After the writer's durable commit it hands each committed entry here (its payload is the
//! refcounted [`Bytes`] received, never copied), and an exporter that is caught up takes its
//! next entries from here instead of scanning the outbox column family for them. The outbox on
//! disk stays the truth: an exporter that is behind what this holds (after a restart, after an
//! outage, or because the oldest entries were let go at the byte bound) reads the store, and
//! cursors and deletions do not change.
//!
//! The one invariant: every committed entry with a seq above `complete_after` is here, in seq
//! order. The writer commits and hands off in seq order on one thread, so an entry is either
//! here or (when let go from the front) at or below `complete_after`.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::outbox::OutboxEntry;

/// Bytes the handoff holds at most (entries' stored sizes plus [`ENTRY_OVERHEAD`] each); past
/// it the oldest entries are let go and whoever still needs them reads the store.
pub const HANDOFF_BYTES: u64 = 16 * 1024 * 1024;

/// What an entry costs beyond its stored size (its place in the queue, its struct), so that
/// many tiny entries are bounded too.
const ENTRY_OVERHEAD: u64 = 128;

/// One committed entry. When its stored value has a run block this copy does not carry (the
/// writer resolved the span runs after the entry was built), `entry.runs_in_store` says how
/// large, and an exporter that needs the runs reads the store.
#[derive(Debug)]
struct Committed {
    entry: OutboxEntry,
    /// What it counts for against the bound.
    cost: u64,
}

/// What [`Handoff::take`] found.
#[derive(Debug, PartialEq, Eq)]
pub struct Taken {
    /// The entries after the asked seq, in order (possibly none).
    pub entries: Vec<OutboxEntry>,
    /// Every committed entry after the asked seq that was handed off is in `entries` (more
    /// are read only once the writer hands off again).
    pub drained: bool,
}

/// Committed outbox entries waiting for the exporters, bounded in bytes.
#[derive(Debug)]
pub struct Handoff {
    inner: Mutex<Inner>,
    max_bytes: u64,
}

#[derive(Debug)]
struct Inner {
    entries: VecDeque<Committed>,
    bytes: u64,
    /// Every committed entry above this seq is in `entries`.
    complete_after: u64,
}

impl Handoff {
    /// An empty handoff holding at most `max_bytes`; every entry up to `last_seq` is only in the
    /// store.
    pub fn new(last_seq: u64, max_bytes: u64) -> Self {
        Self {
            inner: Mutex::new(Inner {
                entries: VecDeque::new(),
                bytes: 0,
                complete_after: last_seq,
            }),
            max_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Nothing in here can be half-updated in a way that loses an entry: a poisoned lock
        // is used as is.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands off a committed entry whose stored value is `stored_bytes` long (what the writer
    /// put); entries come in increasing seq order. Then lets go of the entries every exporter
    /// has read (at or below `read_through`) and, past the byte bound, of the oldest ones.
    pub fn push(&self, entry: &OutboxEntry, stored_bytes: u64, read_through: u64) {
        let cost = stored_bytes.saturating_add(ENTRY_OVERHEAD);
        let mut inner = self.lock();
        if entry.seq <= inner.complete_after
            || inner
                .entries
                .back()
                .is_some_and(|c| c.entry.seq >= entry.seq)
        {
            // Out of order (cannot happen from the one writer): the store has it.
            return;
        }
        let mut entry = entry.clone();
        entry.runs_in_store = stored_bytes.saturating_sub(entry.size());
        // The exporters send the payload: its packed form is the store's.
        entry.packed = None;
        inner.entries.push_back(Committed { entry, cost });
        inner.bytes = inner.bytes.saturating_add(cost);
        inner.trim(read_through, self.max_bytes);
    }

    /// Lets go of the entries every exporter has read.
    pub fn release(&self, read_through: u64) {
        self.lock().trim(read_through, u64::MAX);
    }

    /// Up to `max_entries` entries after `after` (stopping once `max_bytes` are taken, and
    /// before an entry whose span runs are only in the store when `with_runs`), or `None` when
    /// they are not all here: the caller reads the store.
    pub fn take(
        &self,
        after: u64,
        max_entries: usize,
        max_bytes: u64,
        with_runs: bool,
    ) -> Option<Taken> {
        let inner = self.lock();
        if after < inner.complete_after {
            return None;
        }
        let start = inner.entries.partition_point(|c| c.entry.seq <= after);
        let mut entries = Vec::new();
        let mut bytes = 0u64;
        let mut drained = true;
        for committed in inner.entries.range(start..) {
            if entries.len() >= max_entries || bytes >= max_bytes {
                drained = false;
                break;
            }
            if with_runs && committed.entry.runs_in_store > 0 {
                if entries.is_empty() {
                    return None;
                }
                drained = false;
                break;
            }
            bytes = bytes.saturating_add(committed.entry.size());
            entries.push(committed.entry.clone());
        }
        Some(Taken { entries, drained })
    }

    /// Bytes held (for tests and gauges).
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }
}

impl Inner {
    fn trim(&mut self, read_through: u64, max_bytes: u64) {
        while let Some(front) = self.entries.front() {
            if front.entry.seq > read_through && self.bytes <= max_bytes {
                break;
            }
            let seq = front.entry.seq;
            let cost = front.cost;
            self.entries.pop_front();
            self.bytes = self.bytes.saturating_sub(cost);
            self.complete_after = self.complete_after.max(seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SignalKind;
    use crate::outbox::SpanRun;

    fn entry(seq: u64, len: usize) -> OutboxEntry {
        OutboxEntry {
            seq,
            ..OutboxEntry::new(SignalKind::Traces, 1, vec![seq as u8; len])
        }
    }

    fn seqs(taken: &Taken) -> Vec<u64> {
        taken.entries.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn a_packed_entry_is_handed_off_without_its_packed_copy() {
        let handoff = Handoff::new(0, HANDOFF_BYTES);
        let e = entry(1, 4096);
        assert!(e.packed.is_some(), "4 KiB of one byte packs");
        handoff.push(&e, e.size(), 0);
        let taken = handoff.take(0, 10, u64::MAX, false).unwrap();
        assert_eq!(taken.entries[0].packed, None);
        assert_eq!(taken.entries[0].payload.as_ptr(), e.payload.as_ptr());
        assert_eq!(taken.entries[0].size(), e.size());
    }

    #[test]
    fn a_caught_up_reader_takes_the_same_bytes_without_a_copy() {
        let handoff = Handoff::new(4, HANDOFF_BYTES);
        // Before the first hand-off, a reader behind the store's last entry reads the store.
        assert_eq!(handoff.take(3, 10, u64::MAX, false), None);
        let caught_up = handoff.take(4, 10, u64::MAX, false).unwrap();
        assert!(caught_up.entries.is_empty() && caught_up.drained);
        let e5 = entry(5, 100);
        handoff.push(&e5, e5.size(), 4);
        // Seq 6 failed to commit: never handed off, a gap.
        handoff.push(&entry(7, 10), entry(7, 10).size(), 4);
        let taken = handoff.take(4, 10, u64::MAX, false).unwrap();
        assert_eq!(seqs(&taken), [5, 7]);
        assert!(taken.drained);
        assert_eq!(taken.entries[0], e5);
        assert_eq!(taken.entries[0].payload.as_ptr(), e5.payload.as_ptr());
        assert_eq!(seqs(&handoff.take(5, 10, u64::MAX, false).unwrap()), [7]);
        let one = handoff.take(4, 1, u64::MAX, false).unwrap();
        assert_eq!((seqs(&one), one.drained), (vec![5], false));
        let by_bytes = handoff.take(4, 10, 1, false).unwrap();
        assert_eq!((seqs(&by_bytes), by_bytes.drained), (vec![5], false));
        // Everyone read 5: it is let go, and a reader still at 4 goes to the store.
        handoff.release(5);
        assert_eq!(handoff.take(4, 10, u64::MAX, false), None);
        assert_eq!(seqs(&handoff.take(5, 10, u64::MAX, false).unwrap()), [7]);
        handoff.release(7);
        assert_eq!(handoff.bytes(), 0);
    }

    #[test]
    fn past_the_byte_bound_the_oldest_go_and_their_readers_read_the_store() {
        let one = entry(1, 1000).size() + ENTRY_OVERHEAD;
        let handoff = Handoff::new(0, 3 * one);
        for seq in 1..=5 {
            handoff.push(&entry(seq, 1000), entry(seq, 1000).size(), 0);
            assert!(handoff.bytes() <= 3 * one);
        }
        assert_eq!(handoff.take(0, 10, u64::MAX, false), None);
        assert_eq!(handoff.take(1, 10, u64::MAX, false), None);
        assert_eq!(
            seqs(&handoff.take(2, 10, u64::MAX, false).unwrap()),
            [3, 4, 5]
        );
        // Out of order or already let go: ignored (the store has it).
        handoff.push(&entry(2, 10), entry(2, 10).size(), 0);
        handoff.push(&entry(4, 10), entry(4, 10).size(), 0);
        assert_eq!(
            seqs(&handoff.take(2, 10, u64::MAX, false).unwrap()),
            [3, 4, 5]
        );
    }

    #[test]
    fn entries_whose_span_runs_are_only_stored_send_enriching_readers_to_the_store() {
        let handoff = Handoff::new(0, HANDOFF_BYTES);
        let plain = entry(1, 10);
        handoff.push(&plain, plain.size(), 0);
        let with_runs = OutboxEntry {
            span_runs: vec![SpanRun {
                trace_id: [1; 16],
                span_id: [2; 8],
                run_id: "r".into(),
            }],
            ..entry(2, 10)
        };
        // The writer stored a run block: the stored size says so.
        handoff.push(&entry(2, 10), with_runs.size(), 0);
        handoff.push(&entry(3, 10), entry(3, 10).size(), 0);
        // A reader that does not enrich takes them all, each weighing what is stored.
        let all = handoff.take(0, 10, u64::MAX, false).unwrap();
        assert_eq!(seqs(&all), [1, 2, 3]);
        assert_eq!(all.entries[1].size(), with_runs.size());
        assert_eq!(all.entries[0].size(), plain.size());
        // One that does stops before it, then reads it from the store.
        let taken = handoff.take(0, 10, u64::MAX, true).unwrap();
        assert_eq!((seqs(&taken), taken.drained), (vec![1], false));
        assert_eq!(handoff.take(1, 10, u64::MAX, true), None);
        assert_eq!(seqs(&handoff.take(2, 10, u64::MAX, true).unwrap()), [3]);
    }
}
