//! Tests of `task`: an exporter task against a real local OTLP/HTTP backend, reading a real
//! (in-memory twin) store and the in-memory handoff.

use std::sync::Mutex;

use super::*;
use crate::config::{
    Compression, ExporterConfig, ExporterProtocol, RetryConfig, SignalKind, WhenFull,
};

/// What a recording backend got at `POST /v1/traces`: the bodies, in arrival order.
type Received = Arc<Mutex<Vec<Vec<u8>>>>;

/// A backend answering 200 to every trace request and keeping its body.
async fn recording_backend() -> (String, Received) {
    let received: Received = Arc::default();
    let keep = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let keep = keep.clone();
            async move {
                keep.lock().unwrap().push(body.to_vec());
                (
                    [(http::header::CONTENT_TYPE, "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, received)
}

fn exporter(endpoint: &str) -> ExporterConfig {
    ExporterConfig {
        id: "otlphttp/test".into(),
        protocol: ExporterProtocol::HttpProtobuf,
        endpoint: endpoint.into(),
        tls: None,
        headers: Vec::new(),
        compression: Compression::None,
        timeout: Duration::from_secs(5),
        retry: RetryConfig::default(),
        queue_size_bytes: 1 << 20,
        when_full: WhenFull::Refuse,
        num_consumers: 2,
        batch: None,
        enrich_run_id: false,
        signals: vec![SignalKind::Traces],
    }
}

fn entry(seq: u64, fill: u8) -> OutboxEntry {
    OutboxEntry {
        seq,
        ..OutboxEntry::new(SignalKind::Traces, 1, vec![fill; 300])
    }
}

async fn wait_for(what: &str, probe: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !probe() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caught_up_exporter_sends_from_memory_one_behind_reads_the_store() {
    let (base, received) = recording_backend().await;
    let config = exporter(&base);
    let store = Arc::new(Store::in_memory());
    // Committed before the outbox opened (a restart): only in the store.
    let stored = entry(1, 1);
    let mut batch = store.batch();
    batch.put_outbox(&stored).unwrap();
    store.commit(batch).unwrap();
    let outbox = Arc::new(Outbox::open(&store, std::slice::from_ref(&config)).unwrap());
    let queue = outbox.queues()[0].clone();
    let task = ExporterTask {
        queue: queue.clone(),
        outbox: outbox.clone(),
        store: store.clone(),
        client: Client::new(&config).unwrap(),
        retry: config.retry.clone(),
        batch: None,
    };
    let (stop_tx, stop) = watch::channel(false);
    let running = tokio::spawn(task.run(stop));
    wait_for("the stored entry", || received.lock().unwrap().len() == 1).await;
    assert_eq!(received.lock().unwrap()[0], stored.payload);

    // Handed off after their commit: a caught-up exporter takes them from memory. These two
    // are handed off without being stored, so only the memory path can deliver them.
    for (seq, fill) in [(2, 2), (3, 3)] {
        let e = entry(seq, fill);
        assert_eq!(outbox.reserve(&store, e.signal, e.items, e.size()), Ok(seq));
        outbox.hand_off(&e, e.size());
    }
    outbox.committed();
    wait_for("the handed-off entries", || {
        received.lock().unwrap().len() == 3
    })
    .await;
    let mut bodies = received.lock().unwrap().clone();
    bodies[1..].sort();
    assert_eq!(bodies, [vec![1; 300], vec![2; 300], vec![3; 300]]);
    wait_for("the cursor", || queue.done() == 3).await;
    // Everything read is let go; the cursor reaches the store within CURSOR_EVERY.
    assert_eq!(outbox.handoff_bytes(), 0);
    wait_for("the stored cursor", || {
        store
            .outbox_cursor(&config.id)
            .unwrap()
            .is_some_and(|c| c.done == 3 && c.in_flight == 3)
    })
    .await;
    assert!(store.outbox_after(0, 10, usize::MAX).unwrap().is_empty());

    stop_tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(received.lock().unwrap().len(), 3, "nothing sent twice");
}
