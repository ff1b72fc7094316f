//! The forwarding outbox: received OTLP requests, in arrival order, waiting for the exporters.
//!
//! An entry is appended in the same write batch as the interpreted records of its request, so
//! an acknowledged request is always in the outbox. Each exporter keeps a cursor (the last
//! entry it finished, and the one it is sending), committed atomically with the deletion of
//! the entries every exporter has finished.

use super::core::{Store, WriteBatch};
use super::error::StoreError;
use super::keys::cf;
use super::kv::KvBatch;
use crate::config::SignalKind;
use crate::outbox::{sized_header, stored_size, EntryError, Header, OutboxEntry, SpanRun};

/// An exporter's position in the outbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboxCursor {
    /// Every entry up to this seq is finished (sent, dropped, or not for this exporter).
    pub done: u64,
    /// The entry being sent when the cursor was last written (`done` when none): entries in
    /// `(done, in_flight]` may already have reached the backend.
    pub in_flight: u64,
}

pub(super) fn decode_entry(key: &[u8], value: &[u8]) -> Result<OutboxEntry, StoreError> {
    OutboxEntry::decode(key, value).map_err(corrupt)
}

fn decode_header(key: &[u8], value: &[u8]) -> Result<Header, StoreError> {
    Header::decode(key, value).map_err(corrupt)
}

/// The header of a stored entry and the size it counts for (see [`stored_size`]).
fn decode_sized(key: &[u8], value: &[u8]) -> Result<(Header, u64), StoreError> {
    sized_header(key, value).map_err(corrupt)
}

fn corrupt(e: EntryError) -> StoreError {
    StoreError::Corrupt {
        cf: cf::OUTBOX,
        reason: e.to_string(),
    }
}

impl WriteBatch<'_> {
    /// Appends an outbox entry; returns its stored size.
    pub fn put_outbox(&mut self, entry: &OutboxEntry) -> Result<u64, StoreError> {
        self.put_outbox_with(entry, &entry.span_runs)
    }

    /// Appends an outbox entry with `span_runs` in place of its own; returns the size it counts
    /// for in the queues (its stored length with the payload unpacked: see [`stored_size`]).
    pub fn put_outbox_with(
        &mut self,
        entry: &OutboxEntry,
        span_runs: &[SpanRun],
    ) -> Result<u64, StoreError> {
        let key = entry.key();
        let value = entry.encode_with(span_runs);
        let size = stored_size(&key, &value).map_err(corrupt)?;
        // The value moves into the batch (a request can be megabytes: no copy).
        self.batch.put(cf::OUTBOX, &key, value);
        Ok(size)
    }
}

impl Store {
    /// The highest seq in the outbox, if any.
    pub fn outbox_last_seq(&self) -> Result<Option<u64>, StoreError> {
        let mut last = None;
        self.kv
            .scan_back(cf::OUTBOX, b"", None, &mut |key, value| {
                last = Some(decode_header(key, value)?.seq);
                Ok(false)
            })?;
        Ok(last)
    }

    /// Up to `max_entries` entries after `after`, stopping once `max_bytes` are read (at least
    /// one entry is returned when there is one).
    pub fn outbox_after(
        &self,
        after: u64,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        let start = after.saturating_add(1).to_be_bytes();
        let mut out = Vec::new();
        let mut bytes = 0;
        self.scan(cf::OUTBOX, b"", &start, |key, value| {
            let (header, size) = decode_sized(key, value)?;
            if header.seq <= after {
                return Ok(true);
            }
            // Counted unpacked: what the entries hold in memory.
            bytes += size as usize;
            out.push(decode_entry(key, value)?);
            Ok(out.len() < max_entries && bytes < max_bytes)
        })?;
        Ok(out)
    }

    /// Visits `(seq, signal, size)` of every entry, in order (to rebuild queue sizes at start).
    pub fn outbox_sizes(
        &self,
        mut visit: impl FnMut(u64, SignalKind, u64),
    ) -> Result<(), StoreError> {
        self.scan(cf::OUTBOX, b"", b"", |key, value| {
            let (entry, size) = decode_sized(key, value)?;
            visit(entry.seq, entry.signal, size);
            Ok(true)
        })
    }

    /// Visits `(seq, signal, items, size)` of the entries after `after`, in order, while
    /// `visit` returns true (to pick the oldest entries to drop at a full queue).
    pub fn outbox_headers_after(
        &self,
        after: u64,
        mut visit: impl FnMut(u64, SignalKind, u64, u64) -> bool,
    ) -> Result<(), StoreError> {
        let start = after.saturating_add(1).to_be_bytes();
        self.scan(cf::OUTBOX, b"", &start, |key, value| {
            let (entry, size) = decode_sized(key, value)?;
            Ok(entry.seq <= after || visit(entry.seq, entry.signal, entry.items, size))
        })
    }

    /// The stored cursor of `exporter`, if it ever wrote one.
    pub fn outbox_cursor(&self, exporter: &str) -> Result<Option<OutboxCursor>, StoreError> {
        match self.kv.get(cf::OUTBOX_CURSORS, exporter.as_bytes())? {
            None => Ok(None),
            Some(bytes) => match (bytes.get(..8), bytes.get(8..)) {
                (Some(done), Some(in_flight)) if bytes.len() == 16 => Ok(Some(OutboxCursor {
                    done: u64::from_be_bytes(done.try_into().unwrap_or_default()),
                    in_flight: u64::from_be_bytes(in_flight.try_into().unwrap_or_default()),
                })),
                _ => Err(StoreError::Corrupt {
                    cf: cf::OUTBOX_CURSORS,
                    reason: format!("cursor of {exporter} is not 16 bytes"),
                }),
            },
        }
    }

    /// Writes `exporter`'s cursor and deletes every entry up to `delete_through` (when given),
    /// atomically. Not fsynced: a lost cursor update means a re-send, never a loss.
    pub fn outbox_advance(
        &self,
        exporter: &str,
        cursor: OutboxCursor,
        delete_through: Option<u64>,
    ) -> Result<(), StoreError> {
        let mut batch = KvBatch::default();
        let mut value = Vec::with_capacity(16);
        value.extend_from_slice(&cursor.done.to_be_bytes());
        value.extend_from_slice(&cursor.in_flight.to_be_bytes());
        batch.put(cf::OUTBOX_CURSORS, exporter.as_bytes(), value);
        if let Some(through) = delete_through {
            delete_through_in(&mut batch, through);
        }
        self.kv.write(batch, false)?;
        Ok(())
    }

    /// Deletes every entry up to `through` (e.g. when no exporter needs them any more).
    pub fn outbox_delete_through(&self, through: u64) -> Result<(), StoreError> {
        let mut batch = KvBatch::default();
        delete_through_in(&mut batch, through);
        self.kv.write(batch, false)?;
        Ok(())
    }
}

/// Deletes the entries up to `through` in `batch`.
fn delete_through_in(batch: &mut KvBatch, through: u64) {
    batch.delete_range(
        cf::OUTBOX,
        &0u64.to_be_bytes(),
        &through.saturating_add(1).to_be_bytes(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_cursors_and_deletion_round_trip() {
        let store = Store::in_memory();
        assert_eq!(store.outbox_last_seq().unwrap(), None);
        let mut batch = store.batch();
        for seq in 1..=5u64 {
            batch
                .put_outbox(&OutboxEntry {
                    seq,
                    ..OutboxEntry::new(SignalKind::Logs, seq, vec![seq as u8; 3])
                })
                .unwrap();
        }
        store.commit(batch).unwrap();
        assert_eq!(store.outbox_last_seq().unwrap(), Some(5));
        let read = store.outbox_after(2, 2, usize::MAX).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(
            read[0],
            OutboxEntry {
                seq: 3,
                signal: SignalKind::Logs,
                items: 3,
                payload: vec![3; 3].into(),
                span_runs: vec![],
                runs_in_store: 0,
                packed: None,
            }
        );
        assert_eq!(store.outbox_after(0, 10, 1).unwrap().len(), 1);
        let mut sizes = Vec::new();
        store
            .outbox_sizes(|seq, _, size| sizes.push((seq, size)))
            .unwrap();
        assert_eq!(sizes, [(1, 12), (2, 12), (3, 12), (4, 12), (5, 12)]);

        assert_eq!(store.outbox_cursor("otlp").unwrap(), None);
        let cursor = OutboxCursor {
            done: 3,
            in_flight: 4,
        };
        store.outbox_advance("otlp", cursor, Some(3)).unwrap();
        assert_eq!(store.outbox_cursor("otlp").unwrap(), Some(cursor));
        let left: Vec<u64> = store
            .outbox_after(0, 10, usize::MAX)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(left, [4, 5]);
        store.outbox_delete_through(5).unwrap();
        assert!(store.outbox_after(0, 10, usize::MAX).unwrap().is_empty());
    }
}
