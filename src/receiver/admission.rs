//! Admission of export requests into decoding: a bounded number decode (and, for traces,
//! interpret) at once, each counted against its item cap before anything is built.
//!
//! Decompressing and decoding are CPU work on up to the size limit; without a bound, a burst of
//! large requests occupies every blocking thread and holds every decoded copy in memory at
//! once. Both receivers share one [`DecodeGate`] with a slot per core: a request waits at most
//! [`DECODE_WAIT`] for a slot and is otherwise answered 503 / UNAVAILABLE with a retry delay.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::decode::{decode_counted, decompress, ContentEncoding, ItemCap, PayloadFormat};
use super::error::ReceiverError;
use super::signal::Signal;
use super::sink::ExportSink;
use crate::ingest::{DecodeOn, Decoded, ExportOutcome, Undecoded};
use crate::limits::Limits;

/// How long a request waits for a decoding slot before it is answered retryable.
pub(crate) const DECODE_WAIT: Duration = Duration::from_secs(1);

/// The largest uncompressed protobuf body decoded (and interpreted) in the receiving task
/// itself rather than on the blocking pool: its CPU work is then about as long as the two
/// thread wakeups of a trip through the pool.
pub(crate) const INLINE_BYTES: usize = 128 * 1024;

/// The retry delay a request refused for want of a slot is given.
pub(crate) const DECODE_RETRY: Duration = Duration::from_secs(1);

/// Slots for decoding requests, shared by both receivers of the process.
pub(crate) struct DecodeGate {
    slots: Arc<Semaphore>,
    wait: Duration,
}

/// The process-wide gate: one slot per core the process may use.
static GATE: LazyLock<DecodeGate> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    DecodeGate::new(cores, DECODE_WAIT)
});

impl DecodeGate {
    /// A gate with `slots` slots (at least one) where a request waits at most `wait`.
    pub(crate) fn new(slots: usize, wait: Duration) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(slots.max(1))),
            wait,
        }
    }

    /// The gate both receivers use.
    pub(crate) fn shared() -> &'static Self {
        &GATE
    }

    /// A slot, or [`ReceiverError::DecodeBusy`] when none frees up in time.
    pub(crate) async fn enter(&self) -> Result<OwnedSemaphorePermit, ReceiverError> {
        let busy = || ReceiverError::DecodeBusy {
            retry: DECODE_RETRY,
        };
        match tokio::time::timeout(self.wait, Arc::clone(&self.slots).acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) | Err(_) => Err(busy()),
        }
    }
}

/// A body as received, with what is needed to decode it.
pub(crate) struct Received {
    /// The payload format.
    pub(crate) format: PayloadFormat,
    /// The content encoding (`Identity` when the transport already decompressed it).
    pub(crate) encoding: ContentEncoding,
    /// The body.
    pub(crate) body: Bytes,
    /// The most bytes the body may have after decompression.
    pub(crate) max_bytes: usize,
}

/// Decompresses, counts, decodes and hands to `sink` a request of signal `G`, in a decoding
/// slot of `gate`: the sink runs the decoding in its task on the blocking pool (for traces,
/// the one that also interprets the request), or, for an uncompressed protobuf body of at most
/// [`INLINE_BYTES`], in this task, and gives the slot back when it is done with the CPU work. A
/// request over its item cap in `limits` is refused before decoding.
pub(crate) async fn export_admitted<G: Signal, S: ExportSink>(
    gate: &DecodeGate,
    limits: &Limits,
    received: Received,
    sink: &S,
) -> Result<ExportOutcome, ReceiverError> {
    let permit = gate.enter().await?;
    let small = received.format == PayloadFormat::Protobuf
        && received.encoding == ContentEncoding::Identity
        && received.body.len() <= INLINE_BYTES;
    let on = if small {
        DecodeOn::Caller
    } else {
        DecodeOn::BlockingPool
    };
    let cap = ItemCap {
        counted: G::COUNTED,
        limit: G::cap(limits),
        key: G::LIMIT_KEY,
    };
    let decode = move || {
        let raw = decompress(received.encoding, received.body, received.max_bytes)?;
        let request = decode_counted(received.format, &raw, G::REQUEST_TYPE, cap)?;
        let encoded = (received.format == PayloadFormat::Protobuf).then_some(raw);
        Ok::<_, ReceiverError>(Decoded {
            request,
            received: encoded,
            guard: permit,
        })
    };
    G::export_decoding(sink, decode, on)
        .await
        .map_err(|err| match err {
            Undecoded::Decode(err) => err,
            Undecoded::Ingest(err) => ReceiverError::from(err),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_gate_answers_busy_after_the_wait() {
        let gate = DecodeGate::new(1, Duration::from_millis(50));
        let held = gate.enter().await.unwrap();
        let started = std::time::Instant::now();
        let err = gate.enter().await.unwrap_err();
        assert!(matches!(err, ReceiverError::DecodeBusy { .. }), "{err}");
        assert!(started.elapsed() >= Duration::from_millis(50));
        drop(held);
        assert!(gate.enter().await.is_ok(), "a freed slot is taken");
    }
}
