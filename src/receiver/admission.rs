//! Admission of export requests into decoding: a bounded number of bytes in process at once, a
//! bounded number of requests decoding (and, for traces, interpreting) at once, each counted
//! against its item cap before anything is built.
//!
//! A request holds several times its bytes from decoding until it is committed (decoded, then
//! its facts, its outbox copy and its share of a write batch): without a bound, memory grows
//! with the number of connections sending large requests. Both receivers share one
//! [`ByteBudget`] of [`BUDGET_BYTES`]: a request waits at most [`BUDGET_WAIT`] for room and
//! holds it until it is answered.
//!
//! Decompressing and decoding are CPU work on up to the size limit; without a bound, a burst of
//! large requests occupies every blocking thread. Both receivers share one [`DecodeGate`] with a
//! slot per core: a request waits at most [`DECODE_WAIT`] for a slot.
//!
//! A request that waits too long is answered 503 / UNAVAILABLE with a retry delay.

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

/// Received bytes of the requests being decoded, interpreted, or waiting for or in the writer,
/// at once. Such a request holds about 4.3 times its bytes in memory (`examples/interp_bench`
/// built with `count-allocations`, Pydantic-AI-shaped spans: 1.3 decoded, 3.3 with its facts,
/// plus the bytes themselves kept for the outbox), so this bounds that memory near 70 MB.
pub(crate) const BUDGET_BYTES: usize = 16 << 20;

/// How long a request waits for room in the byte budget before it is answered retryable:
/// under a steady load of large requests from many connections, waiting is their queue.
pub(crate) const BUDGET_WAIT: Duration = Duration::from_secs(5);

/// What a compressed body is counted as, per byte, before it is decompressed (its size after is
/// known only then): protobuf and JSON spans compress about that much with gzip or zstd.
const COMPRESSED_RATIO: usize = 8;

/// The byte budget of requests in process, shared by both receivers of the process.
pub(crate) struct ByteBudget {
    bytes: Arc<Semaphore>,
    /// The budget's size (what one request of any size may take).
    total: u32,
    wait: Duration,
}

/// The process-wide budget.
static BUDGET: LazyLock<ByteBudget> = LazyLock::new(|| ByteBudget::new(BUDGET_BYTES, BUDGET_WAIT));

impl ByteBudget {
    /// A budget of `bytes` (at least one) where a request waits at most `wait`.
    pub(crate) fn new(bytes: usize, wait: Duration) -> Self {
        let total = u32::try_from(bytes.min(Semaphore::MAX_PERMITS))
            .unwrap_or(u32::MAX)
            .max(1);
        Self {
            bytes: Arc::new(Semaphore::new(total as usize)),
            total,
            wait,
        }
    }

    /// The budget both receivers use.
    pub(crate) fn shared() -> &'static Self {
        &BUDGET
    }

    /// Bytes held now.
    pub(crate) fn held(&self) -> u64 {
        (self.total as usize).saturating_sub(self.bytes.available_permits()) as u64
    }

    /// Room for `bytes` (all of the budget for a request larger than it, which then waits until
    /// nothing else is in process), or [`ReceiverError::BytesBusy`] when it does not free up in
    /// time. Requests get room in the order they asked.
    pub(crate) async fn reserve(
        &self,
        bytes: usize,
    ) -> Result<OwnedSemaphorePermit, ReceiverError> {
        let wanted = u32::try_from(bytes)
            .unwrap_or(u32::MAX)
            .clamp(1, self.total);
        match tokio::time::timeout(
            self.wait,
            Arc::clone(&self.bytes).acquire_many_owned(wanted),
        )
        .await
        {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) | Err(_) => Err(ReceiverError::BytesBusy {
                held: self.held() as usize,
                retry: DECODE_RETRY,
            }),
        }
    }
}

/// The bytes a received body is counted as: its length, or for a compressed body an estimate of
/// its length once decompressed, at most its limit.
fn counted_bytes(received: &Received) -> usize {
    if received.encoding == ContentEncoding::Identity {
        received.body.len()
    } else {
        received
            .body
            .len()
            .saturating_mul(COMPRESSED_RATIO)
            .min(received.max_bytes)
    }
}

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

/// Decompresses, counts, decodes and hands to `sink` a request of signal `G`, with room in
/// `budget` until it is answered and in a decoding slot of `gate`: the sink runs the decoding in
/// its task on the blocking pool (for traces, the one that also interprets the request), or,
/// for an uncompressed protobuf body of at most [`INLINE_BYTES`], in this task, and gives the
/// slot back when it is done with the CPU work. A request over its item cap in `limits` is
/// refused before decoding.
pub(crate) async fn export_admitted<G: Signal, S: ExportSink>(
    budget: &ByteBudget,
    gate: &DecodeGate,
    limits: &Limits,
    received: Received,
    sink: &S,
) -> Result<ExportOutcome, ReceiverError> {
    // Held until the request is answered (dropped at the end of this function).
    let _room = budget.reserve(counted_bytes(&received)).await?;
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
    async fn the_byte_budget_makes_requests_wait_in_order_then_answers_busy() {
        let budget = ByteBudget::new(100, Duration::from_millis(50));
        let first = budget.reserve(60).await.unwrap();
        // No room: busy after the wait, saying how much is held.
        let started = std::time::Instant::now();
        match budget.reserve(60).await {
            Err(ReceiverError::BytesBusy { held, .. }) => assert_eq!(held, 60),
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() >= Duration::from_millis(50));
        // A request larger than the whole budget takes all of it, once nothing else is in; a
        // small one asking after it waits behind it.
        drop(first);
        let budget = Arc::new(ByteBudget::new(100, Duration::from_secs(5)));
        let first = budget.reserve(60).await.unwrap();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let large = {
            let (budget, order) = (budget.clone(), order.clone());
            tokio::spawn(async move {
                let room = budget.reserve(10_000).await.unwrap();
                order.lock().unwrap().push("large");
                drop(room);
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let small = {
            let (budget, order) = (budget.clone(), order.clone());
            tokio::spawn(async move {
                let _room = budget.reserve(10).await.unwrap();
                order.lock().unwrap().push("small");
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(order.lock().unwrap().is_empty(), "both wait for the first");
        drop(first);
        large.await.unwrap();
        small.await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["large", "small"]);
        assert_eq!(budget.bytes.available_permits(), 100);
    }

    #[tokio::test]
    async fn a_request_waits_on_the_byte_budget_before_it_reaches_the_ingest() {
        use crate::ingest::Ingest;
        use crate::otlp::Traces;
        use crate::store::Store;
        use prost::Message;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), false).unwrap());
        let ingest = Ingest::new(store.clone(), Arc::new(crate::exporter::Outbox::disabled()));
        let spans = crate::test_fixtures::delegate_scenario();
        let body = Bytes::from(crate::test_fixtures::request(spans).encode_to_vec());
        let received = || Received {
            format: PayloadFormat::Protobuf,
            encoding: ContentEncoding::Identity,
            body: body.clone(),
            max_bytes: 1 << 20,
        };
        let budget = ByteBudget::new(body.len(), Duration::from_millis(50));
        let gate = DecodeGate::new(1, Duration::from_secs(1));
        let limits = Limits::default();
        // The budget is held: the request is answered busy and nothing is stored.
        let held = budget.reserve(1).await.unwrap();
        match export_admitted::<Traces, Ingest>(&budget, &gate, &limits, received(), &ingest).await
        {
            Err(ReceiverError::BytesBusy { held, .. }) => assert_eq!(held, 1),
            other => panic!("{other:?}"),
        }
        let outer = crate::test_fixtures::run_id(1);
        assert!(store.run(&outer).unwrap().is_none());
        // Room again: stored, and the budget is whole once it is answered.
        drop(held);
        export_admitted::<Traces, Ingest>(&budget, &gate, &limits, received(), &ingest)
            .await
            .unwrap();
        assert!(store.run(&outer).unwrap().is_some());
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_compressed_body_counts_as_its_estimated_decompressed_size_within_its_limit() {
        let received = |encoding, len: usize, max_bytes| Received {
            format: PayloadFormat::Protobuf,
            encoding,
            body: Bytes::from(vec![0u8; len]),
            max_bytes,
        };
        assert_eq!(
            counted_bytes(&received(ContentEncoding::Identity, 1000, 1 << 20)),
            1000
        );
        assert_eq!(
            counted_bytes(&received(ContentEncoding::Gzip, 1000, 1 << 20)),
            1000 * COMPRESSED_RATIO
        );
        assert_eq!(
            counted_bytes(&received(ContentEncoding::Gzip, 1000, 5000)),
            5000
        );
    }

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
