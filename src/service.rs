//! Wiring: builds the pipeline from a validated config and runs it until shutdown.
//!
//! Order of shutdown: receivers and the API stop accepting and finish in-flight requests (each
//! answered only after its commit, so everything acknowledged is on disk, outbox included);
//! the exporters then get `service.shutdown_timeout` (default 5 s) to send what is left. What they do not
//! send stays in the outbox and goes out after the next start.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::{self, ApiAccess, ApiState};
use crate::config::Config;
use crate::continuation::{prefetch, Continuations};
use crate::exporter::{Client, ExporterTask, Outbox};
use crate::ingest::Ingest;
use crate::media::Media;
use crate::receiver::tls::{ALPN_GRPC, ALPN_HTTP};
use crate::receiver::{self, ReceiverLimits, ReceiverSecurity};
use crate::store::Store;

/// Runs stepline until SIGINT or SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let directory = &config.storage.directory;
    std::fs::create_dir_all(directory)
        .with_context(|| format!("cannot create storage directory {}", directory.display()))?;
    let store = Arc::new(
        Store::open(directory, config.storage.sync)
            .with_context(|| format!("cannot open the store in {}", directory.display()))?,
    );
    let outbox = Arc::new(
        Outbox::open(&store, &config.exporters).context("cannot read the forwarding outbox")?,
    );
    let (export_stop_tx, export_stop_rx) = watch::channel(false);
    let mut exporters = tokio::task::JoinSet::new();
    for (exporter, queue) in config.exporters.iter().zip(outbox.queues()) {
        let client = Client::new(exporter)
            .with_context(|| format!("cannot build exporter {}", exporter.id))?;
        tracing::info!(
            exporter = %exporter.id,
            endpoint = %exporter.endpoint,
            unsent_bytes = queue.pending_bytes(),
            "exporter configured"
        );
        let task = ExporterTask {
            queue: queue.clone(),
            outbox: outbox.clone(),
            store: store.clone(),
            client,
            retry: exporter.retry.clone(),
            batch: exporter.batch,
        };
        exporters.spawn(task.run(export_stop_rx.clone()));
    }
    let media = Arc::new(Media::open(&config.storage.media, config.storage.sync)?);
    tracing::info!(
        location = %media.location(),
        threshold = ?config.storage.media.threshold,
        "media store configured"
    );
    // The caches' byte budgets, set before anything fills them.
    let budgets = config.interpreter.memory;
    crate::interpreter::prefix_memo::set_default_budget(budgets.prefix_memo);
    crate::interpreter::vercel_ai::set_conversation_keys(
        config.interpreter.vercel_ai_conversation_keys.clone(),
    );
    store.set_history_cache_budget(budgets.history);
    store.set_chain_cache_budget(budgets.chain);
    store.set_lineage_scope(config.interpreter.lineage_scope);
    let ingest = Arc::new(
        Ingest::new(store.clone(), outbox.clone())
            .with_media(media.clone())
            .with_limits(config.interpreter.limits)
            .with_run_info(config.interpreter.run_info.clone()),
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };

    let mut tasks = tokio::task::JoinSet::new();
    if let Some(grpc) = &config.receiver.grpc {
        let listener = bind(&grpc.endpoint, "OTLP gRPC receiver").await?;
        let limits = ReceiverLimits {
            max_request_bytes: grpc.max_recv_msg_size,
            items: config.interpreter.limits,
        };
        let security = ReceiverSecurity::new(grpc.tls.as_ref(), grpc.auth.as_ref(), ALPN_GRPC)
            .context("cannot set up TLS for the OTLP gRPC receiver")?;
        let (ingest, stop) = (ingest.clone(), stopped());
        tasks.spawn(async move {
            receiver::serve_grpc_with(listener, ingest, limits, security, stop)
                .await
                .context("OTLP gRPC receiver failed")
        });
    }
    if let Some(http) = &config.receiver.http {
        let listener = bind(&http.endpoint, "OTLP HTTP receiver").await?;
        let limits = ReceiverLimits {
            max_request_bytes: http.max_request_body_size,
            items: config.interpreter.limits,
        };
        let security = ReceiverSecurity::new(http.tls.as_ref(), http.auth.as_ref(), ALPN_HTTP)
            .context("cannot set up TLS for the OTLP HTTP receiver")?;
        let (ingest, stop) = (ingest.clone(), stopped());
        tasks.spawn(async move {
            receiver::serve_http_with(listener, ingest, limits, security, stop)
                .await
                .context("OTLP HTTP receiver failed")
        });
    }
    let api_listener = bind(&config.api.endpoint, "query API").await?;
    if let Ok(address) = api_listener.local_addr() {
        tracing::info!(
            %address,
            token = config.api.bearer_token.is_some(),
            metrics_token = config.api.metrics_bearer_token.is_some(),
            "query API listening"
        );
        if config.api.bearer_token.is_none() && !address.ip().is_loopback() {
            tracing::warn!(
                %address,
                "the query API listens beyond loopback without a bearer token: anyone who can \
                 reach it can read every run; set extensions.stepline_api.bearer_token"
            );
        }
    }
    let continuations = Arc::new(
        Continuations::new(store.clone(), media)
            .with_cache_budgets(budgets.rendered, budgets.context),
    );
    let router = api::router(ApiState {
        store: store.clone(),
        ingest: ingest.clone(),
        access: Arc::new(ApiAccess::from_config(&config.api)),
        continuations: continuations.clone(),
    });
    tasks.spawn({
        let prefetch = prefetch::run(continuations, stopped());
        async move {
            prefetch.await;
            Ok::<(), anyhow::Error>(())
        }
    });
    let stop = stopped();
    tasks.spawn(async move {
        axum::serve(crate::receiver::socket::http_listener(api_listener), router)
            .with_graceful_shutdown(stop)
            .await
            .context("query API failed")
    });
    // Deletions (those a crash interrupted first) and the retention sweep.
    tasks.spawn({
        let deletions = crate::ingest::run_deletions(
            ingest.clone(),
            store.clone(),
            config.interpreter.retention,
            stopped(),
        );
        async move {
            deletions.await;
            Ok::<(), anyhow::Error>(())
        }
    });
    if let Some(timeout) = config.interpreter.inactivity_timeout {
        tasks.spawn(sweep(store.clone(), ingest.clone(), timeout, stopped()));
    }
    if let Some(timeout) = config.interpreter.waiting_timeout {
        tasks.spawn(sweep_waiting(
            store.clone(),
            ingest.clone(),
            timeout,
            stopped(),
        ));
    }
    // Memory given back once ingest goes quiet.
    tasks.spawn({
        let idle = crate::idle::run(store.clone(), ingest.clone(), crate::idle::QUIET, stopped());
        async move {
            idle.await;
            Ok::<(), anyhow::Error>(())
        }
    });
    tracing::info!(storage = %directory.display(), "stepline is running");

    let outcome = tokio::select! {
        _ = shutdown_signal() => Ok(()),
        Some(result) = tasks.join_next() => result.context("a task panicked").and_then(|r| r),
    };
    tracing::info!("shutting down: finishing in-flight requests");
    let _ = stop_tx.send(true);
    let drain = async {
        while let Some(result) = tasks.join_next().await {
            if let Ok(Err(e)) = result {
                tracing::warn!(error = %e, "task ended with an error during shutdown");
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), drain)
        .await
        .is_err()
    {
        tracing::warn!("shutdown deadline passed; stopping anyway");
    }
    if !exporters.is_empty() {
        let deadline = config.shutdown_timeout;
        tracing::info!(?deadline, "sending what is left in the outbox");
        let _ = export_stop_tx.send(true);
        let drained = async { while exporters.join_next().await.is_some() {} };
        if tokio::time::timeout(deadline, drained).await.is_err() {
            tracing::warn!("exporters did not finish in time; the rest stays in the outbox");
            exporters.abort_all();
        }
    }
    outcome
}

async fn bind(endpoint: &str, what: &str) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(endpoint)
        .await
        .with_context(|| format!("cannot listen on {endpoint} for the {what}"))?;
    Ok(listener)
}

/// Calls `tick` every quarter of `timeout` (between 200 ms and 30 s) until `stop`.
async fn every_quarter_of<F, Fut>(
    timeout: Duration,
    stop: impl Future<Output = ()>,
    mut tick: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let period = (timeout / 4).clamp(Duration::from_millis(200), Duration::from_secs(30));
    let mut ticker = tokio::time::interval(period);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = ticker.tick() => tick().await,
        }
    }
}

/// Periodically abandons runs silent for longer than `timeout`, and deletes log records whose
/// span has not arrived within `timeout`.
async fn sweep(
    store: Arc<Store>,
    ingest: Arc<Ingest>,
    timeout: Duration,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let (store, ingest) = (&store, &ingest);
    every_quarter_of(timeout, stop, || async move {
        match ingest.sweep(store, timeout).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(runs = n, "abandoned runs after the inactivity timeout"),
            Err(e) => tracing::warn!(error = %e, "inactivity sweep failed"),
        }
        // Log records whose span has not arrived within the same timeout never will.
        match ingest.prune_orphan_logs(store, timeout).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(records = n, "deleted log records whose span never arrived"),
            Err(e) => tracing::warn!(error = %e, "orphan log sweep failed"),
        }
    })
    .await
}

/// Periodically abandons runs waiting on calls for longer than `timeout` without a span.
async fn sweep_waiting(
    store: Arc<Store>,
    ingest: Arc<Ingest>,
    timeout: Duration,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let (store, ingest) = (&store, &ingest);
    every_quarter_of(timeout, stop, || async move {
        match ingest.sweep_waiting(store, timeout).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(runs = n, "abandoned runs after the waiting timeout"),
            Err(e) => tracing::warn!(error = %e, "waiting sweep failed"),
        }
    })
    .await
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
