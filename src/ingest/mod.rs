//! The core ingest service: one function per OTLP signal, shared by the gRPC and HTTP receivers.
//!
//! A trace request is decoded and interpreted in one task (see `traces`: on the blocking pool, or
//! in the receiving task for a small one), then handed to the single writer thread,
//! which merges the requests waiting at that moment into one RocksDB write batch (WAL on, fsync
//! when configured) and answers each request only after that batch is committed.

mod admission;
mod apply;
mod deletion;
mod latency;
#[cfg(test)]
mod scaling_tests;
#[cfg(test)]
mod stored_bodies_tests;
mod traces;
#[cfg(test)]
mod traces_tests;
mod writer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message;

use crate::outbox::OutboxEntry;
use admission::{encoded_len, payload, Admitted, OverLimits};
pub use apply::{
    apply_group, run_id_of, AbandonOutcome, Applied, DeleteReply, DeleteWork, PrunedLogs, Stored,
    SweepOutcome, Work, TOMBSTONE,
};
pub use deletion::{delete_batch, run_deletions, DELETE_BATCH};
pub use latency::{Histogram, HistogramReading, Latencies, Stage};
pub use traces::{DecodeOn, Decoded, Undecoded};
use writer::Writer;

use crate::config::SignalKind;
use crate::domain::RunInfoKeys;
use crate::exporter::Outbox;
use crate::interpreter::{interpret_log, PrefixMemo};
use crate::limits::Limits;
use crate::media::{Blob, Media, MediaError, SaveHold};
use crate::service_error::{ServiceError, ServiceErrorCode};
use crate::store::Store;

/// What an accepted export request produced, for the OTLP `partial_success` field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportOutcome {
    /// Items (spans, log records, data points) rejected; 0 when everything was accepted.
    pub rejected: i64,
    /// Why items were rejected; empty when `rejected` is 0.
    pub message: String,
}

/// Why an export request was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The store could not commit the request; nothing was acknowledged, the client should retry.
    #[error("storage unavailable: {0}")]
    Storage(String),
    /// Too many requests are waiting for the writer; the client should retry later.
    #[error("stepline is busy: {0} requests are waiting to be written; retry later")]
    Overloaded(usize),
    /// The requests being interpreted and written add up to the byte cap; retry later.
    #[error("stepline is busy: {0} bytes of requests are being written; retry later")]
    OverBytes(u64),
    /// An exporter's queue is at its byte cap: the backend is slower than the agents.
    #[error("the forwarding queue of exporter {exporter} is full ({capacity} bytes); retry later")]
    OutboxFull {
        /// The exporter whose queue is full.
        exporter: String,
        /// Its cap, in bytes.
        capacity: u64,
    },
    /// The service is shutting down and takes no new requests.
    #[error("stepline is shutting down")]
    ShuttingDown,
    /// Large binary parts could not be written to the media store; nothing was stored.
    #[error(transparent)]
    Media(#[from] MediaError),
    /// What the request holds cannot be stored (a record that would not read back, or a run
    /// whose stored records cannot be read); the message names the run and span. Permanent:
    /// retrying the same request fails the same way (HTTP 400 / gRPC INVALID_ARGUMENT).
    #[error("the request cannot be stored: {0}")]
    Rejected(String),
    /// Applying the request failed unexpectedly (a panic, caught); permanent, so clients do not
    /// retry it forever (HTTP 500 / gRPC INTERNAL).
    #[error("internal error: {0}")]
    Internal(String),
}

impl IngestError {
    /// True for errors a retry of the same request cannot cure.
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Rejected(_) | Self::Internal(_))
    }
}

impl ServiceError for IngestError {
    fn error_code(&self) -> ServiceErrorCode {
        match self {
            Self::Rejected(_) => ServiceErrorCode::BadRequest,
            Self::Internal(_) => ServiceErrorCode::Internal,
            _ => ServiceErrorCode::Unavailable,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        (!self.is_permanent()).then_some(Duration::from_secs(1))
    }
}

/// Counters of what was received, for `/metrics`.
#[derive(Debug, Default)]
pub struct IngestCounters {
    /// Spans acknowledged.
    pub accepted_spans: AtomicU64,
    /// Spans rejected (partial success).
    pub refused_spans: AtomicU64,
    /// Spans recognised as agent runs, model requests or tool calls.
    pub interpreted_spans: AtomicU64,
    /// Log records acknowledged.
    pub accepted_log_records: AtomicU64,
    /// Metric data points acknowledged.
    pub accepted_metric_points: AtomicU64,
    /// Log records refused with a retryable error (queue full, overload, storage).
    pub refused_log_records: AtomicU64,
    /// Metric data points refused with a retryable error.
    pub refused_metric_points: AtomicU64,
    /// Panics caught while interpreting or applying a request
    /// (`stepline_ingest_panics_total`); each such request was answered with a permanent error.
    pub panics: AtomicU64,
    /// Requests refused permanently because what they hold cannot be stored
    /// (`stepline_ingest_rejected_requests_total`).
    pub rejected_requests: AtomicU64,
    /// Runs the inactivity sweep passed by because their records cannot be read
    /// (`stepline_sweep_damaged_runs_total`).
    pub sweep_damaged_runs: AtomicU64,
    /// Spans and log records accepted and forwarded but not interpreted because they are over a
    /// per-span cap (`stepline_items_over_limits_total`).
    pub over_limits: AtomicU64,
    /// Write groups the writer committed (`stepline_writer_groups_total`): one WAL write (and
    /// sync, when configured) each.
    pub writer_groups: AtomicU64,
    /// Requests in those groups (`stepline_writer_grouped_requests_total`); divided by the
    /// groups, the mean group size.
    pub writer_grouped_requests: AtomicU64,
    /// How long requests took, whole and stage by stage
    /// (`stepline_ingest_request_duration_seconds`, `stepline_ingest_stage_duration_seconds`).
    pub latencies: Latencies,
}

/// The ingest service. Cheap to share behind an `Arc`.
pub struct Ingest {
    writer: Writer,
    outbox: Arc<Outbox>,
    counters: Arc<IngestCounters>,
    /// Encoded bytes of the requests being interpreted or waiting for the writer.
    admitted_bytes: Arc<AtomicU64>,
    media: Option<Arc<Media>>,
    /// The last input history interpreted per run, shared by the interpretation tasks.
    memo: Arc<PrefixMemo>,
    /// The per-span caps the interpreter applies.
    limits: Limits,
    /// The attribute keys of a run's trigger and attributes.
    run_info: Arc<RunInfoKeys>,
}

/// Requests that may wait for the writer before new ones are refused with a retryable error.
const WRITER_QUEUE: usize = 1024;
/// Encoded bytes of requests that may be in the ingest service at once (interpreting, waiting
/// for or in the writer) before new ones are refused with a retryable error. One request of
/// any size is taken when nothing else is in.
pub const ADMITTED_BYTES: u64 = 256 * 1024 * 1024;

impl Ingest {
    /// Starts the writer thread over `store`; accepted requests of the signals some exporter
    /// forwards are appended to `outbox`.
    pub fn new(store: Arc<Store>, outbox: Arc<Outbox>) -> Self {
        let counters = Arc::new(IngestCounters::default());
        Self {
            writer: Writer::start(store, outbox.clone(), WRITER_QUEUE, counters.clone()),
            outbox,
            counters,
            admitted_bytes: Arc::new(AtomicU64::new(0)),
            media: None,
            memo: Arc::new(PrefixMemo::default()),
            limits: Limits::default(),
            run_info: Arc::new(RunInfoKeys::default()),
        }
    }

    /// The interpreter's memo of the last input history per run (the idle task trims it).
    pub fn prefix_memo(&self) -> &PrefixMemo {
        &self.memo
    }

    /// Reads runs' triggers and attributes with `keys` (default: `RunInfoKeys::default()`).
    pub fn with_run_info(mut self, keys: Arc<RunInfoKeys>) -> Self {
        self.run_info = keys;
        self
    }

    /// Interprets spans and log records within `limits` (default: `Limits::default()`).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Counts `bytes` in, or refuses them when the service already holds [`ADMITTED_BYTES`].
    fn admit(&self, bytes: u64) -> Result<Admitted, IngestError> {
        admission::admit(&self.admitted_bytes, bytes, ADMITTED_BYTES)
    }

    /// Moves large binary message parts to `media` before they are stored (without it, every
    /// part stays inline).
    pub fn with_media(mut self, media: Arc<Media>) -> Self {
        self.media = Some(media);
        self
    }

    /// The outbox the accepted requests go to.
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// The outbox entry for a request of `signal`, when some exporter forwards it: the bytes
    /// as received when given, else the request encoded.
    fn entry(
        &self,
        signal: SignalKind,
        items: u64,
        request: &impl Message,
        received: Option<Bytes>,
    ) -> Option<OutboxEntry> {
        self.outbox
            .wants(signal)
            .then(|| OutboxEntry::new(signal, items, payload(request, received)))
    }

    /// Counters of what was received.
    pub fn counters(&self) -> &IngestCounters {
        &self.counters
    }

    /// True while the writer thread runs (cheap; for `/healthz`).
    pub fn healthy(&self) -> bool {
        self.writer.is_alive()
    }

    /// The answer to a request whose interpretation task failed (it panicked): permanent, and
    /// counted with the panics.
    fn task_failed(&self, error: tokio::task::JoinError) -> IngestError {
        if !error.is_panic() {
            return IngestError::ShuttingDown;
        }
        self.counters.panics.fetch_add(1, Ordering::Relaxed);
        tracing::error!(error = %error, "interpreting a request failed; it is refused");
        IngestError::Internal(format!("interpreting the request failed: {error}"))
    }

    /// Stores the blobs taken out of a request's messages in the media store. When this returns
    /// `Ok`, the blobs the messages' references name are durably stored, so the messages may be
    /// committed; the hold keeps the media collection off them until then.
    async fn save_media(&self, blobs: Vec<Blob>) -> Result<Option<SaveHold<'_>>, IngestError> {
        match &self.media {
            Some(media) if !blobs.is_empty() => Ok(Some(media.save_held(blobs).await?)),
            _ => Ok(None),
        }
    }

    /// Accepts a logs export request: legacy GenAI events correlated to a span (trace and span
    /// id) are durably stored and feed that span's step; other records are only counted.
    pub async fn export_logs(
        &self,
        request: ExportLogsServiceRequest,
    ) -> Result<ExportOutcome, IngestError> {
        self.export_logs_from(request, None).await
    }

    /// [`Ingest::export_logs`] given the request's protobuf bytes as received (forwarded as
    /// they are).
    pub async fn export_logs_from(
        &self,
        request: ExportLogsServiceRequest,
        received: Option<Bytes>,
    ) -> Result<ExportOutcome, IngestError> {
        let records: usize = request
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .map(|s| s.log_records.len())
            .sum();
        let admitted = self
            .admit(encoded_len(&request, received.as_ref()))
            .inspect_err(|_| {
                self.counters
                    .refused_log_records
                    .fetch_add(records as u64, Ordering::Relaxed);
            })?;
        // Encoding for the outbox and interpreting are CPU work: both on the blocking pool.
        let forward = self.outbox.wants(SignalKind::Logs);
        let limits = self.limits;
        let (events, over, payload) = tokio::task::spawn_blocking(move || {
            let mut over = OverLimits::default();
            let mut events = Vec::new();
            for record in request
                .resource_logs
                .iter()
                .flat_map(|r| &r.scope_logs)
                .flat_map(|s| &s.log_records)
            {
                match interpret_log(record, &limits) {
                    Ok(event) => events.push(event),
                    Err(reason) => over.note(reason),
                }
            }
            (events, over, forward.then(|| payload(&request, received)))
        })
        .await
        .map_err(|e| self.task_failed(e))?;
        let outbox =
            payload.map(|payload| OutboxEntry::new(SignalKind::Logs, records as u64, payload));
        if !events.is_empty() || outbox.is_some() {
            // The events and the outbox entry commit in one batch.
            let submitted = self
                .writer
                .receive(Vec::new(), events, outbox, admitted.bytes())
                .await;
            if let Err(error) = submitted {
                self.counters
                    .refused_log_records
                    .fetch_add(records as u64, Ordering::Relaxed);
                return Err(error);
            }
        }
        self.counters
            .accepted_log_records
            .fetch_add(records as u64, Ordering::Relaxed);
        let mut outcome = ExportOutcome::default();
        over.warn(&mut outcome, "log records", &self.counters.over_limits);
        Ok(outcome)
    }

    /// Accepts and counts a metrics export request.
    pub async fn export_metrics(
        &self,
        request: ExportMetricsServiceRequest,
    ) -> Result<ExportOutcome, IngestError> {
        self.export_metrics_from(request, None).await
    }

    /// [`Ingest::export_metrics`] given the request's protobuf bytes as received (forwarded as
    /// they are).
    pub async fn export_metrics_from(
        &self,
        request: ExportMetricsServiceRequest,
        received: Option<Bytes>,
    ) -> Result<ExportOutcome, IngestError> {
        let points: usize = request
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .map(|m| match &m.data {
                Some(Data::Gauge(g)) => g.data_points.len(),
                Some(Data::Sum(s)) => s.data_points.len(),
                Some(Data::Histogram(h)) => h.data_points.len(),
                Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
                Some(Data::Summary(s)) => s.data_points.len(),
                None => 0,
            })
            .sum();
        let admitted = self
            .admit(encoded_len(&request, received.as_ref()))
            .inspect_err(|_| {
                self.counters
                    .refused_metric_points
                    .fetch_add(points as u64, Ordering::Relaxed);
            })?;
        if let Some(entry) = self.entry(SignalKind::Metrics, points as u64, &request, received) {
            let submitted = self
                .writer
                .receive(Vec::new(), Vec::new(), Some(entry), admitted.bytes())
                .await;
            if let Err(error) = submitted {
                self.counters
                    .refused_metric_points
                    .fetch_add(points as u64, Ordering::Relaxed);
                return Err(error);
            }
        }
        self.counters
            .accepted_metric_points
            .fetch_add(points as u64, Ordering::Relaxed);
        Ok(ExportOutcome::default())
    }

    /// Declares a run (by id or alias) dead now: unsettled tool calls become `unknown_after_crash`.
    pub async fn abandon(&self, run: &str, reason: &str) -> Result<AbandonOutcome, IngestError> {
        self.writer
            .abandon(run.to_string(), reason.to_string(), now_ns())
            .await
    }

    /// Abandons every running run silent for longer than `timeout`. Returns how many.
    ///
    /// A run whose records cannot be read never stops the sweep: it is marked damaged (by the
    /// writer, when abandoning it fails), logged and counted
    /// ([`IngestCounters::sweep_damaged_runs`]), and passed by from then on. Only a retryable
    /// failure (RocksDB, overload) ends the sweep early; the next one starts over.
    pub async fn sweep(&self, store: &Store, timeout: Duration) -> Result<usize, IngestError> {
        let ids = store
            .running_run_ids()
            .map_err(|e| IngestError::Storage(e.to_string()))?;
        self.abandon_silent(store, ids, timeout, "inactivity timeout")
            .await
    }

    /// Abandons every run waiting on calls (status `waiting`) that got no span for longer than
    /// `timeout` (`processors.stepline.waiting_timeout`). Returns how many. Damaged runs are
    /// passed by as in [`Ingest::sweep`].
    pub async fn sweep_waiting(
        &self,
        store: &Store,
        timeout: Duration,
    ) -> Result<usize, IngestError> {
        let ids = store
            .waiting_run_ids()
            .map_err(|e| IngestError::Storage(e.to_string()))?;
        self.abandon_silent(store, ids, timeout, "waiting timeout")
            .await
    }

    /// Abandons the runs of `ids` silent for longer than `timeout`, for `why` (the timeout's
    /// name, in the reason). Returns how many.
    async fn abandon_silent(
        &self,
        store: &Store,
        ids: Vec<String>,
        timeout: Duration,
        why: &str,
    ) -> Result<usize, IngestError> {
        let now = now_ns();
        let cutoff = now.saturating_sub(timeout.as_nanos() as u64);
        let mut abandoned = 0;
        for id in ids {
            if store
                .damage(&id)
                .map_err(|e| IngestError::Storage(e.to_string()))?
                .is_some()
            {
                continue;
            }
            // A meta that cannot be read: the writer's attempt meets the damage and marks it.
            let silent = match store.run_meta(&id) {
                Ok(meta) => meta.is_some_and(|m| m.last_seen_ns <= cutoff),
                Err(e) if e.is_retryable() => return Err(IngestError::Storage(e.to_string())),
                Err(_) => true,
            };
            if !silent {
                continue;
            }
            let reason = format!("no telemetry for {}s ({why})", timeout.as_secs());
            let outcome = self
                .writer
                .abandon_if_silent(id.clone(), reason, now, cutoff)
                .await;
            match outcome {
                Ok(SweepOutcome::Decided(AbandonOutcome::Abandoned(_))) => abandoned += 1,
                // Ended, gone or active again since it was listed: nothing to abandon.
                Ok(SweepOutcome::Decided(
                    AbandonOutcome::AlreadyOver(..) | AbandonOutcome::UnknownRun,
                ))
                | Ok(SweepOutcome::StillActive) => {}
                Err(e) if e.is_permanent() => {
                    self.counters
                        .sweep_damaged_runs
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(run_id = %id, error = %e, "the inactivity sweep cannot abandon a run; passing it by");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(abandoned)
    }

    /// Deletes log records older than `max_age` whose span never arrived (a span that did not
    /// end, or log records of spans that are no model request). Returns how many.
    pub async fn prune_orphan_logs(
        &self,
        store: &Store,
        max_age: Duration,
    ) -> Result<usize, IngestError> {
        let cutoff = now_ns().saturating_sub(max_age.as_nanos() as u64);
        let records = store
            .orphan_logs(cutoff, ORPHAN_LOG_SCAN_LIMIT)
            .map_err(|e| IngestError::Storage(e.to_string()))?;
        if records.is_empty() {
            return Ok(0);
        }
        let PrunedLogs(pruned) = self.writer.prune_logs(records).await?;
        Ok(pruned)
    }
}

/// Log records read per orphan-log sweep, so one sweep stays short however many are stored.
const ORPHAN_LOG_SCAN_LIMIT: usize = 100_000;

/// Wall-clock nanoseconds since the epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permanent_failures_are_not_retryable_and_map_once() {
        let rejected = IngestError::Rejected("run r span s: corrupt record".into());
        assert_eq!(rejected.error_code().http_status(), 400);
        assert_eq!(
            rejected.error_code().grpc_code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(rejected.retry_after(), None);
        let internal = IngestError::Internal("applying the request failed: boom".into());
        assert_eq!(internal.error_code().http_status(), 500);
        assert_eq!(internal.error_code().grpc_code(), tonic::Code::Internal);
        assert_eq!(internal.retry_after(), None);
        let storage = IngestError::Storage("rocksdb: io error".into());
        assert_eq!(storage.error_code().http_status(), 503);
        assert!(storage.retry_after().is_some());
    }

    #[tokio::test]
    async fn the_sweep_passes_a_damaged_run_by_and_abandons_the_others() {
        use crate::interpreter::interpret_span;
        use crate::store::keys::cf;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), false).unwrap());
        let ingest = Ingest::new(store.clone(), Arc::new(Outbox::disabled()));
        // Two running runs (one model request each, no run span), in two traces.
        let first = crate::test_fixtures::delegate_scenario()[0].clone();
        let mut second = first.clone();
        second.trace_id = vec![9; 16];
        second.start_time_unix_nano += 1;
        let spans = [first, second].iter().filter_map(interpret_span).collect();
        ingest
            .writer
            .receive(spans, Vec::new(), None, 0)
            .await
            .unwrap();
        let damaged = crate::test_fixtures::run_id(1);
        let other = format!("{}-{}", hex::encode([9u8; 16]), hex::encode([1u8; 8]));
        assert_eq!(
            store.running_run_ids().unwrap(),
            vec![damaged.clone(), other.clone()]
        );
        // The first run's meta is garbage.
        let mut batch = store.batch();
        batch
            .put_raw(cf::RUN_META, damaged.as_bytes(), b"garbage")
            .unwrap();
        store.commit(batch).unwrap();

        let abandoned = ingest.sweep(&store, Duration::ZERO).await.unwrap();
        assert_eq!(abandoned, 1, "the run after the damaged one is abandoned");
        assert_eq!(
            store.run(&other).unwrap().unwrap().status,
            crate::domain::RunStatus::Abandoned
        );
        let counted = || ingest.counters.sweep_damaged_runs.load(Ordering::Relaxed);
        assert_eq!(counted(), 1);
        assert!(store.damage(&damaged).unwrap().is_some(), "marked");
        // Marked runs are passed by without another attempt.
        assert_eq!(ingest.sweep(&store, Duration::ZERO).await.unwrap(), 0);
        assert_eq!(counted(), 1);
        assert!(ingest.healthy());
    }

    #[test]
    fn a_new_service_is_healthy() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), false).unwrap());
        let ingest = Ingest::new(store, Arc::new(Outbox::disabled()));
        assert!(ingest.healthy());
    }

    #[test]
    fn admission_is_bounded_by_bytes_but_takes_one_request_of_any_size() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), false).unwrap());
        let ingest = Ingest::new(store, Arc::new(Outbox::disabled()));
        let huge = ingest.admit(ADMITTED_BYTES * 2).unwrap();
        assert!(matches!(ingest.admit(1), Err(IngestError::OverBytes(_))));
        drop(huge);
        let half = ingest.admit(ADMITTED_BYTES / 2).unwrap();
        let other = ingest.admit(ADMITTED_BYTES / 2).unwrap();
        assert!(ingest.admit(1).is_err());
        drop((half, other));
        assert_eq!(ingest.admitted_bytes.load(Ordering::Acquire), 0);
    }
}
