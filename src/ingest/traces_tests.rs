//! Trace requests handed over undecoded: decoded and interpreted in one task, in the caller or
//! on the blocking pool, with decoding errors and panics answered as before.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use opentelemetry_proto::tonic::trace::v1::Span;

use super::{DecodeOn, Decoded, Ingest, IngestError, Undecoded, ADMITTED_BYTES};
use crate::exporter::Outbox;
use crate::store::Store;
use crate::test_fixtures::{delegate_scenario, request};

fn ingest() -> (tempfile::TempDir, Arc<Store>, Ingest) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), false).unwrap());
    let ingest = Ingest::new(store.clone(), Arc::new(Outbox::disabled()));
    (dir, store, ingest)
}

/// The delegate scenario moved to trace `[t; 16]`, and its run's id there.
fn in_trace(t: u8) -> (Vec<Span>, String) {
    let spans = delegate_scenario()
        .into_iter()
        .map(|mut s| {
            s.trace_id = vec![t; 16];
            s
        })
        .collect();
    (
        spans,
        format!("{}-{}", hex::encode([t; 16]), hex::encode([1u8; 8])),
    )
}

#[tokio::test]
async fn a_request_decoded_in_the_caller_or_on_the_pool_is_stored_alike() {
    let (_dir, store, ingest) = ingest();
    let mut total = 0;
    for (t, on) in [(3, DecodeOn::Caller), (4, DecodeOn::BlockingPool)] {
        let (spans, run) = in_trace(t);
        total += spans.len() as u64;
        // The guard lives until the request is interpreted, no longer.
        let slots = Arc::new(tokio::sync::Semaphore::new(1));
        let guard = slots.clone().try_acquire_owned().unwrap();
        let outcome = ingest
            .export_traces_decoding(
                move || {
                    Ok::<_, String>(Decoded {
                        request: request(spans),
                        received: None,
                        guard,
                    })
                },
                on,
            )
            .await
            .unwrap();
        assert_eq!(outcome, super::ExportOutcome::default());
        assert_eq!(slots.available_permits(), 1, "{on:?}");
        assert!(store.run(&run).unwrap().is_some(), "{on:?}");
    }
    let c = ingest.counters();
    assert_eq!(c.accepted_spans.load(Ordering::Relaxed), total);
    assert!(c.interpreted_spans.load(Ordering::Relaxed) > 0);
    assert_eq!(ingest.admitted_bytes.load(Ordering::Acquire), 0);
}

#[tokio::test]
async fn a_decoding_error_is_the_decoders_and_counts_nothing() {
    let (_dir, _store, ingest) = ingest();
    for on in [DecodeOn::Caller, DecodeOn::BlockingPool] {
        let answer = ingest
            .export_traces_decoding(
                || Err::<Decoded<_, ()>, _>("truncated message".to_string()),
                on,
            )
            .await;
        match answer {
            Err(Undecoded::Decode(message)) => assert_eq!(message, "truncated message"),
            other => panic!("{on:?}: {other:?}"),
        }
    }
    let c = ingest.counters();
    assert_eq!(c.accepted_spans.load(Ordering::Relaxed), 0);
    assert_eq!(c.refused_spans.load(Ordering::Relaxed), 0);
    assert_eq!(c.panics.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_panic_while_decoding_is_a_counted_permanent_error_wherever_it_runs() {
    let (_dir, store, ingest) = ingest();
    for (n, on) in [DecodeOn::Caller, DecodeOn::BlockingPool]
        .into_iter()
        .enumerate()
    {
        let answer = ingest
            .export_traces_decoding(
                || -> Result<Decoded<_, ()>, String> { panic!("decoder bug") },
                on,
            )
            .await;
        match answer {
            Err(Undecoded::Ingest(e @ IngestError::Internal(_))) => {
                assert!(e.is_permanent());
                assert!(e.to_string().contains("decoder bug"), "{e}");
            }
            other => panic!("{on:?}: {other:?}"),
        }
        assert_eq!(
            ingest.counters().panics.load(Ordering::Relaxed),
            n as u64 + 1
        );
    }
    // The service goes on.
    let (spans, run) = in_trace(5);
    ingest.export_traces(request(spans)).await.unwrap();
    assert!(store.run(&run).unwrap().is_some());
    assert!(ingest.healthy());
}

#[tokio::test]
async fn a_request_over_the_admitted_bytes_is_refused_retryable_and_counted() {
    let (_dir, store, ingest) = ingest();
    ingest
        .admitted_bytes
        .store(ADMITTED_BYTES, Ordering::Release);
    let (spans, run) = in_trace(6);
    let count = spans.len() as u64;
    let answer = ingest
        .export_traces_decoding(
            move || {
                Ok::<_, String>(Decoded {
                    request: request(spans),
                    received: None,
                    guard: (),
                })
            },
            DecodeOn::Caller,
        )
        .await;
    match answer {
        Err(Undecoded::Ingest(e @ IngestError::OverBytes(_))) => assert!(!e.is_permanent()),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        ingest.counters().refused_spans.load(Ordering::Relaxed),
        count
    );
    assert!(store.run(&run).unwrap().is_none());
    assert_eq!(
        ingest.admitted_bytes.load(Ordering::Acquire),
        ADMITTED_BYTES
    );
}
