//! The forwarding outbox's entry: one received export request waiting for the exporters, with
//! the run ids the writer resolved for its spans.
//!
//! Ingest builds an [`OutboxEntry`] for each accepted request, the writer fills in its `seq` and
//! `span_runs` and appends it in the same write batch as the request's interpreted records, and
//! the exporters read it back. This module owns the entry and its byte layout; the store keeps
//! the bytes, and neither ingest nor the exporter depend on each other for it.
//!
//! Layout of a stored value (the key is `seq` as 8 big-endian bytes):
//!
//! ```text
//! [signal: u8 (| 0x80 when a run block follows, | 0x40 when the payload is packed)]
//! [items: u64 BE]
//! [run block length: u32 BE] [run block]            -- only with the 0x80 flag
//! [payload: the export request, protobuf-encoded]   -- without the 0x40 flag
//! [payload length: u32 BE] [LZ4 block of the payload] -- with the 0x40 flag
//! run block: [run ids: u32 BE] ([len: u16 BE] [utf-8 run id])*
//!            [spans: u32 BE] ([trace id: 16 bytes] [span id: 8 bytes] [run index: u32 BE])*
//! ```
//!
//! A payload is stored packed (LZ4) when that makes it at least an eighth smaller: an agent's
//! export repeats the conversation in every model request's input, so its requests pack to a
//! tenth of their size, and the write-ahead log, the memtables and the flushes carry that much
//! less. The sizes the queues count ([`OutboxEntry::size`], [`stored_size`]) are the unpacked
//! ones, so a queue's byte cap means what the Collector's byte sizer does. Entries written
//! before the run block existed have no flag and read back with no span runs.

use std::collections::HashMap;

use bytes::Bytes;

use crate::config::SignalKind;

/// Bytes of the fixed header: the signal byte and the item count.
pub const HEADER: usize = 9;

/// Flag on the signal byte: a run block follows the header.
const RUN_BLOCK: u8 = 0x80;

/// Flag on the signal byte: the payload is packed (its length, then an LZ4 block).
const PACKED: u8 = 0x40;

/// A payload shorter than this is stored as it is: packing it would save next to nothing.
const MIN_PACKED_PAYLOAD: usize = 1024;

/// The most an LZ4 block can grow by on unpacking (a sequence's 255 bytes of match length per
/// input byte): a packed payload claiming more is damaged, and is refused before anything of
/// that size is allocated.
const MAX_UNPACK_RATIO: usize = 255;

/// A run id longer than this is not put in the run block (its spans are forwarded untagged).
pub const MAX_RUN_ID_BYTES: usize = u16::MAX as usize;

/// The run a span of the entry's request belongs to, as the writer resolved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanRun {
    /// The span's trace id (binary).
    pub trace_id: [u8; 16],
    /// The span's id (binary).
    pub span_id: [u8; 8],
    /// The id of the run the span belongs to.
    pub run_id: String,
}

/// One received request waiting to be forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// Position in the outbox; increasing in arrival order (0 until the writer assigns it).
    pub seq: u64,
    /// Which signal the request is.
    pub signal: SignalKind,
    /// Spans, log records or metric data points in it.
    pub items: u64,
    /// The export request, protobuf-encoded, as received (shared, never copied on the way
    /// from the receiver to the exporters' in-memory handoff).
    pub payload: Bytes,
    /// The run of each interpreted span of the request (traces only; empty otherwise).
    pub span_runs: Vec<SpanRun>,
    /// Bytes of a run block stored with this entry that `span_runs` does not hold: a copy
    /// handed to the exporters in memory before the writer resolved the runs (0 otherwise).
    /// Counted in [`OutboxEntry::size`], so the copy weighs what the stored value does.
    pub runs_in_store: u64,
    /// The payload packed (an LZ4 block), as it is stored, when packing makes it at least an
    /// eighth smaller: made where the request is received, so the one writer thread only
    /// copies it. None once the entry is in the store (the exporters send `payload`).
    pub packed: Option<Bytes>,
}

/// Why stored bytes are not an outbox entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The key is not 8 bytes.
    #[error("key is not 8 bytes")]
    Key,
    /// The value ends before its header or run block does.
    #[error("entry shorter than its header")]
    Short,
    /// The signal byte names no signal.
    #[error("unknown signal")]
    Signal,
    /// The run block does not parse.
    #[error("bad run block: {0}")]
    RunBlock(&'static str),
    /// The packed payload does not unpack to the length stored with it.
    #[error("packed payload does not unpack: {0}")]
    Packed(&'static str),
}

impl OutboxEntry {
    /// A new entry of a received request (seq and span runs are filled in by the writer), its
    /// payload packed when that pays (see [`OutboxEntry::packed`]).
    pub fn new(signal: SignalKind, items: u64, payload: impl Into<Bytes>) -> OutboxEntry {
        let payload = payload.into();
        OutboxEntry {
            seq: 0,
            signal,
            items,
            packed: pack(&payload),
            payload,
            span_runs: Vec::new(),
            runs_in_store: 0,
        }
    }

    /// Bytes this entry counts for against a queue cap: the size of its stored value.
    pub fn size(&self) -> u64 {
        (HEADER + self.payload.len()) as u64
            + run_block(&self.span_runs).map_or(0, |b| 4 + b.len() as u64)
            + self.runs_in_store
    }

    /// The stored key.
    pub fn key(&self) -> [u8; 8] {
        self.seq.to_be_bytes()
    }

    /// The stored value.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_with(&self.span_runs)
    }

    /// The stored value of this entry with `span_runs` in place of its own (so a writer that
    /// resolves the runs later need not copy the payload into a new entry).
    pub fn encode_with(&self, span_runs: &[SpanRun]) -> Vec<u8> {
        let block = run_block(span_runs);
        // A payload over 4 GiB (never received: requests are capped far below) goes unpacked.
        let packed = self
            .packed
            .as_ref()
            .zip(u32::try_from(self.payload.len()).ok());
        let payload = packed.map_or(self.payload.len(), |(p, _)| 4 + p.len());
        let mut value =
            Vec::with_capacity(HEADER + payload + block.as_ref().map_or(0, |b| 4 + b.len()));
        let flags =
            if block.is_some() { RUN_BLOCK } else { 0 } | if packed.is_some() { PACKED } else { 0 };
        value.push(signal_byte(self.signal) | flags);
        value.extend_from_slice(&self.items.to_be_bytes());
        if let Some(block) = block {
            value.extend_from_slice(&(block.len() as u32).to_be_bytes());
            value.extend_from_slice(&block);
        }
        match packed {
            Some((packed, len)) => {
                value.extend_from_slice(&len.to_be_bytes());
                value.extend_from_slice(packed);
            }
            None => value.extend_from_slice(&self.payload),
        }
        value
    }

    /// Reads an entry back from its stored key and value (the payload is copied out of it, or
    /// unpacked).
    pub fn decode(key: &[u8], value: &[u8]) -> Result<OutboxEntry, EntryError> {
        let (entry, at) = Self::decode_parts(key, value)?;
        let payload = match entry.packed_len {
            Some(len) => Bytes::from(unpack(&value[at..], len)?),
            None => Bytes::copy_from_slice(&value[at..]),
        };
        Ok(OutboxEntry {
            payload,
            ..entry.entry
        })
    }

    /// [`OutboxEntry::decode`] of a value already in a [`Bytes`]: an unpacked payload is a view
    /// of it, not a copy.
    pub fn decode_shared(key: &[u8], value: &Bytes) -> Result<OutboxEntry, EntryError> {
        let (entry, at) = Self::decode_parts(key, value)?;
        let payload = match entry.packed_len {
            Some(len) => Bytes::from(unpack(&value[at..], len)?),
            None => value.slice(at..),
        };
        Ok(OutboxEntry {
            payload,
            ..entry.entry
        })
    }

    /// The entry of a stored value with an empty payload, and where the payload (or, packed,
    /// its LZ4 block) starts.
    fn decode_parts(key: &[u8], value: &[u8]) -> Result<(Parts, usize), EntryError> {
        let header = Header::decode(key, value)?;
        let mut at = HEADER;
        let mut span_runs = Vec::new();
        if header.has_runs {
            let len = read_u32(value, at).ok_or(EntryError::Short)? as usize;
            at += 4;
            let block = value.get(at..at + len).ok_or(EntryError::Short)?;
            span_runs = decode_run_block(block)?;
            at += len;
        }
        let mut packed_len = None;
        if header.packed {
            packed_len = Some(read_u32(value, at).ok_or(EntryError::Short)? as usize);
            at += 4;
        }
        let entry = OutboxEntry {
            seq: header.seq,
            signal: header.signal,
            items: header.items,
            payload: Bytes::new(),
            span_runs,
            runs_in_store: 0,
            packed: None,
        };
        Ok((Parts { entry, packed_len }, at.min(value.len())))
    }
}

/// What [`OutboxEntry::decode_parts`] reads before the payload.
struct Parts {
    /// The entry, its payload empty.
    entry: OutboxEntry,
    /// The payload's length, when it is stored packed.
    packed_len: Option<usize>,
}

/// The size a stored value counts for in the queues: its length with the payload unpacked
/// (what [`OutboxEntry::size`] gives for the entry), read without unpacking it or decoding its
/// run block.
pub fn stored_size(key: &[u8], value: &[u8]) -> Result<u64, EntryError> {
    sized_header(key, value).map(|(_, size)| size)
}

/// The header of a stored value and the size it counts for (see [`stored_size`]), the header
/// read once.
pub fn sized_header(key: &[u8], value: &[u8]) -> Result<(Header, u64), EntryError> {
    let header = Header::decode(key, value)?;
    if !header.packed {
        return Ok((header, value.len() as u64));
    }
    // The header and the run block, then the payload's length and its LZ4 block, which stands
    // for that many bytes.
    let mut at = HEADER;
    if header.has_runs {
        let block = read_u32(value, at).ok_or(EntryError::Short)? as usize;
        at = (at + 4)
            .checked_add(block)
            .filter(|end| *end <= value.len())
            .ok_or(EntryError::Short)?;
    }
    let len = read_u32(value, at).ok_or(EntryError::Short)?;
    Ok((header, at as u64 + u64::from(len)))
}

/// `payload` packed into an LZ4 block, when it is long enough to pay and packing makes it at
/// least an eighth smaller.
fn pack(payload: &[u8]) -> Option<Bytes> {
    if payload.len() < MIN_PACKED_PAYLOAD || u32::try_from(payload.len()).is_err() {
        return None;
    }
    let packed = lz4_flex::block::compress(payload);
    (packed.len() + 4 <= payload.len() - payload.len() / 8).then(|| Bytes::from(packed))
}

/// Unpacks the LZ4 block `packed` of a payload of `len` bytes.
fn unpack(packed: &[u8], len: usize) -> Result<Vec<u8>, EntryError> {
    if len > packed.len().saturating_mul(MAX_UNPACK_RATIO) {
        return Err(EntryError::Packed("longer than its block can unpack to"));
    }
    let mut payload = vec![0u8; len];
    match lz4_flex::block::decompress_into(packed, &mut payload) {
        Ok(n) if n == len => Ok(payload),
        Ok(_) => Err(EntryError::Packed("shorter than its stored length")),
        Err(_) => Err(EntryError::Packed("not an LZ4 block of its stored length")),
    }
}

/// The run block of `span_runs`, none when there are none (or none with a run id short enough).
fn run_block(span_runs: &[SpanRun]) -> Option<Vec<u8>> {
    if span_runs.is_empty() {
        return None;
    }
    let mut index: HashMap<&str, u32> = HashMap::new();
    let mut ids: Vec<&str> = Vec::new();
    let mut spans: Vec<(&SpanRun, u32)> = Vec::with_capacity(span_runs.len());
    for s in span_runs {
        if s.run_id.len() > MAX_RUN_ID_BYTES {
            continue;
        }
        let i = *index.entry(s.run_id.as_str()).or_insert_with(|| {
            ids.push(s.run_id.as_str());
            (ids.len() - 1) as u32
        });
        spans.push((s, i));
    }
    if spans.is_empty() {
        return None;
    }
    let mut block = Vec::new();
    block.extend_from_slice(&(ids.len() as u32).to_be_bytes());
    for id in &ids {
        block.extend_from_slice(&(id.len() as u16).to_be_bytes());
        block.extend_from_slice(id.as_bytes());
    }
    block.extend_from_slice(&(spans.len() as u32).to_be_bytes());
    for (s, i) in spans {
        block.extend_from_slice(&s.trace_id);
        block.extend_from_slice(&s.span_id);
        block.extend_from_slice(&i.to_be_bytes());
    }
    Some(block)
}

/// What the fixed header of a stored entry says (read without copying the payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Position in the outbox.
    pub seq: u64,
    /// Which signal.
    pub signal: SignalKind,
    /// Items in the request.
    pub items: u64,
    /// A run block follows the header.
    pub has_runs: bool,
    /// The payload is packed.
    pub packed: bool,
}

impl Header {
    /// Reads the header of a stored entry; `value` may be cut after [`HEADER`] bytes.
    pub fn decode(key: &[u8], value: &[u8]) -> Result<Header, EntryError> {
        let seq = key
            .try_into()
            .map(u64::from_be_bytes)
            .map_err(|_| EntryError::Key)?;
        if value.len() < HEADER {
            return Err(EntryError::Short);
        }
        let signal = match value[0] & !(RUN_BLOCK | PACKED) {
            1 => SignalKind::Traces,
            2 => SignalKind::Logs,
            3 => SignalKind::Metrics,
            _ => return Err(EntryError::Signal),
        };
        let items = value[1..HEADER]
            .try_into()
            .map(u64::from_be_bytes)
            .map_err(|_| EntryError::Short)?;
        Ok(Header {
            seq,
            signal,
            items,
            has_runs: value[0] & RUN_BLOCK != 0,
            packed: value[0] & PACKED != 0,
        })
    }
}

fn signal_byte(signal: SignalKind) -> u8 {
    match signal {
        SignalKind::Traces => 1,
        SignalKind::Logs => 2,
        SignalKind::Metrics => 3,
    }
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    bytes
        .get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_be_bytes)
}

fn read_u16(bytes: &[u8], at: usize) -> Option<u16> {
    bytes
        .get(at..at + 2)
        .and_then(|b| b.try_into().ok())
        .map(u16::from_be_bytes)
}

fn decode_run_block(block: &[u8]) -> Result<Vec<SpanRun>, EntryError> {
    let mut at = 0;
    let n_ids = read_u32(block, at).ok_or(EntryError::RunBlock("no run id count"))? as usize;
    at += 4;
    // Each run id takes at least 2 bytes: a count larger than the block allows is corrupt, and
    // checking it first keeps the allocation bounded by the block's size.
    if n_ids > block.len() / 2 {
        return Err(EntryError::RunBlock("run id count larger than the block"));
    }
    let mut ids = Vec::with_capacity(n_ids);
    for _ in 0..n_ids {
        let len = read_u16(block, at).ok_or(EntryError::RunBlock("run id cut"))? as usize;
        at += 2;
        let bytes = block
            .get(at..at + len)
            .ok_or(EntryError::RunBlock("run id cut"))?;
        let id =
            std::str::from_utf8(bytes).map_err(|_| EntryError::RunBlock("run id not utf-8"))?;
        ids.push(id.to_owned());
        at += len;
    }
    let n_spans = read_u32(block, at).ok_or(EntryError::RunBlock("no span count"))? as usize;
    at += 4;
    const SPAN: usize = 16 + 8 + 4;
    if block.len() - at != n_spans.saturating_mul(SPAN) {
        return Err(EntryError::RunBlock("span count does not match the block"));
    }
    let mut spans = Vec::with_capacity(n_spans);
    for chunk in block[at..].chunks_exact(SPAN) {
        let mut trace_id = [0u8; 16];
        trace_id.copy_from_slice(&chunk[..16]);
        let mut span_id = [0u8; 8];
        span_id.copy_from_slice(&chunk[16..24]);
        let i = read_u32(chunk, 24).ok_or(EntryError::RunBlock("span cut"))? as usize;
        let run_id = ids
            .get(i)
            .ok_or(EntryError::RunBlock("span names no run id"))?
            .clone();
        spans.push(SpanRun {
            trace_id,
            span_id,
            run_id,
        });
    }
    Ok(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(span_runs: Vec<SpanRun>) -> OutboxEntry {
        OutboxEntry {
            seq: 7,
            signal: SignalKind::Traces,
            items: 3,
            payload: Bytes::from_static(&[1, 2, 3, 4]),
            span_runs,
            runs_in_store: 0,
            packed: None,
        }
    }

    fn run(t: u8, s: u8, id: &str) -> SpanRun {
        SpanRun {
            trace_id: [t; 16],
            span_id: [s; 8],
            run_id: id.into(),
        }
    }

    #[test]
    fn entries_with_and_without_span_runs_round_trip_and_size_is_the_stored_length() {
        for e in [
            entry(vec![]),
            entry(vec![run(1, 1, "a"), run(1, 2, "b"), run(1, 3, "a")]),
        ] {
            let value = e.encode();
            assert_eq!(value.len() as u64, e.size());
            assert_eq!(OutboxEntry::decode(&e.key(), &value).unwrap(), e);
            let shared = Bytes::from(value.clone());
            let viewed = OutboxEntry::decode_shared(&e.key(), &shared).unwrap();
            assert_eq!(viewed, e);
            // A view of the stored value, not a copy.
            assert_eq!(
                viewed.payload.as_ptr(),
                shared[value.len() - e.payload.len()..].as_ptr()
            );
            let header = Header::decode(&e.key(), &value[..HEADER]).unwrap();
            assert_eq!((header.seq, header.items), (7, 3));
            assert_eq!(header.has_runs, !e.span_runs.is_empty());
        }
    }

    /// A payload like an agent's export: the same conversation repeated, growing.
    fn conversation_payload() -> Vec<u8> {
        let mut payload = Vec::new();
        for step in 0..20u8 {
            for turn in 0..=step {
                payload.extend_from_slice(b"{\"role\":\"user\",\"content\":\"order ");
                payload.push(b'a' + turn);
                payload.extend_from_slice(b" is late, please check the warehouse\"}");
            }
        }
        payload
    }

    #[test]
    fn a_repetitive_payload_is_stored_packed_and_reads_back_whole() {
        let payload = conversation_payload();
        let mut e = OutboxEntry {
            seq: 7,
            ..OutboxEntry::new(SignalKind::Traces, 20, payload.clone())
        };
        let packed = e.packed.clone().expect("a repetitive payload is packed");
        assert!(
            packed.len() * 4 < payload.len(),
            "{} of {}",
            packed.len(),
            payload.len()
        );
        for span_runs in [vec![], vec![run(1, 1, "a"), run(1, 2, "b")]] {
            e.span_runs = span_runs;
            let value = e.encode();
            let block = run_block(&e.span_runs).map_or(0, |b| 4 + b.len());
            assert_eq!(value.len(), HEADER + block + 4 + packed.len());
            // The queues count it unpacked, as the entry does in memory.
            assert_eq!(stored_size(&e.key(), &value).unwrap(), e.size());
            let (header, size) = sized_header(&e.key(), &value).unwrap();
            assert_eq!(size, e.size());
            assert!(header.packed);
            assert_eq!(header.has_runs, !e.span_runs.is_empty());
            let read = OutboxEntry::decode(&e.key(), &value).unwrap();
            assert_eq!(read.payload, payload);
            assert_eq!(read.span_runs, e.span_runs);
            // Read back, an entry carries no packed copy: the exporters send the payload.
            assert_eq!(
                read,
                OutboxEntry {
                    packed: None,
                    ..e.clone()
                }
            );
            let shared = OutboxEntry::decode_shared(&e.key(), &Bytes::from(value)).unwrap();
            assert_eq!(shared, read);
        }
    }

    #[test]
    fn short_and_incompressible_payloads_are_stored_as_they_are() {
        let short = OutboxEntry::new(SignalKind::Logs, 1, vec![7u8; MIN_PACKED_PAYLOAD - 1]);
        assert_eq!(short.packed, None);
        // Bytes from a generator: LZ4 cannot make them an eighth smaller.
        let mut rng = fastrand::Rng::with_seed(3);
        let noise: Vec<u8> = (0..64 * 1024).map(|_| rng.u8(..)).collect();
        let noisy = OutboxEntry::new(SignalKind::Traces, 1, noise.clone());
        assert_eq!(noisy.packed, None);
        for e in [short, noisy] {
            let value = e.encode();
            assert_eq!(value.len() as u64, e.size());
            assert_eq!(stored_size(&e.key(), &value).unwrap(), e.size());
            assert!(!Header::decode(&e.key(), &value).unwrap().packed);
            assert_eq!(OutboxEntry::decode(&e.key(), &value).unwrap(), e);
        }
    }

    #[test]
    fn damaged_packed_values_are_errors_not_panics() {
        let e = OutboxEntry {
            seq: 7,
            ..OutboxEntry::new(SignalKind::Traces, 20, conversation_payload())
        };
        let good = e.encode();
        let key = e.key();
        for cut in 0..good.len() {
            assert!(
                OutboxEntry::decode(&key, &good[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        // With a run block: a cut before the LZ4 block leaves no size to read; one inside it
        // does not change the size stored before it.
        let with_runs = OutboxEntry {
            span_runs: vec![run(1, 1, "a"), run(1, 2, "b")],
            ..e.clone()
        };
        let value = with_runs.encode();
        let block_at = value.len() - e.packed.as_ref().map_or(0, |p| p.len());
        for cut in 0..value.len() {
            match stored_size(&key, &value[..cut]) {
                Ok(size) => assert!(cut >= block_at && size == with_runs.size(), "cut at {cut}"),
                Err(_) => assert!(cut < block_at, "cut at {cut}"),
            }
        }
        // A stored length past what the block can unpack to is refused before allocating it.
        let mut huge = good.clone();
        huge[HEADER..HEADER + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            OutboxEntry::decode(&key, &huge),
            Err(EntryError::Packed("longer than its block can unpack to"))
        );
        // A stored length shorter or longer than the block's payload.
        let len = e.payload.len() as u32;
        for wrong in [len - 1, len + 1, 0] {
            let mut v = good.clone();
            v[HEADER..HEADER + 4].copy_from_slice(&wrong.to_be_bytes());
            assert!(OutboxEntry::decode(&key, &v).is_err(), "length {wrong}");
        }
        // Any byte of the block changed: an error, or a payload of the stored length.
        let mut rng = fastrand::Rng::with_seed(11);
        for at in HEADER + 4..good.len() {
            let mut v = good.clone();
            v[at] ^= rng.u8(1..);
            if let Ok(read) = OutboxEntry::decode(&key, &v) {
                assert_eq!(read.payload.len(), e.payload.len());
            }
        }
    }

    #[test]
    fn an_entry_written_before_run_blocks_reads_back_without_span_runs() {
        let mut old = vec![1u8];
        old.extend_from_slice(&5u64.to_be_bytes());
        old.extend_from_slice(b"payload");
        let e = OutboxEntry::decode(&9u64.to_be_bytes(), &old).unwrap();
        assert_eq!(e.payload, &b"payload"[..]);
        assert!(e.span_runs.is_empty());
        assert_eq!(e.size(), old.len() as u64);
    }

    #[test]
    fn damaged_values_are_errors_not_panics() {
        let good = entry(vec![run(1, 1, "a"), run(2, 2, "bb")]).encode();
        for cut in 0..good.len() {
            // Every prefix either decodes (cut inside the payload) or is an error.
            let _ = OutboxEntry::decode(&7u64.to_be_bytes(), &good[..cut]);
        }
        let mut huge_count = good.clone();
        huge_count[HEADER + 4..HEADER + 8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(OutboxEntry::decode(&7u64.to_be_bytes(), &huge_count).is_err());
        assert_eq!(OutboxEntry::decode(&[1, 2], &good), Err(EntryError::Key));
        let mut bad_signal = good.clone();
        bad_signal[0] = 0x85;
        assert_eq!(
            OutboxEntry::decode(&7u64.to_be_bytes(), &bad_signal),
            Err(EntryError::Signal)
        );
    }
}
