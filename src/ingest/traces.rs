//! Trace export requests: decoded (when a receiver hands one over undecoded), counted against
//! the admission budget, interpreted and their large blobs taken out, all in one task on the
//! blocking pool; then stored by the writer, which answers once they are committed.
//!
//! One blocking task per request (not one to decode and another to interpret) saves a round
//! trip through the blocking pool's queue and a wakeup of an async worker in between; a small
//! request is decoded and interpreted in the calling task, without any ([`DecodeOn`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::admission::{admit, payload, Admitted, OverLimits};
use super::{apply, ExportOutcome, Ingest, IngestCounters, IngestError, Stage, ADMITTED_BYTES};
use crate::config::SignalKind;
use crate::domain::RunInfoKeys;
use crate::interpreter::{
    interpret_span_with, note_run_info, Interpreted, PrefixMemo, ResourceInfo,
};
use crate::limits::Limits;
use crate::media::{Blob, Media};
use crate::outbox::OutboxEntry;

/// A request as a receiver decoded it, for [`Ingest::export_traces_decoding`].
pub struct Decoded<R, G> {
    /// The decoded request.
    pub request: R,
    /// The protobuf bytes it was decoded from (after decompression), forwarded as they are;
    /// `None` for OTLP/JSON.
    pub received: Option<Bytes>,
    /// Held until the request is interpreted, then dropped (the receiver's decoding slot: it
    /// bounds the CPU work done at once).
    pub guard: G,
}

/// Where a request handed over undecoded is decoded (and, for traces, interpreted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeOn {
    /// A task of the blocking pool: for CPU work of any size.
    BlockingPool,
    /// The calling async task: for a small request, whose work is shorter than the trip
    /// through the blocking pool's queue and back (two thread wakeups).
    Caller,
}

/// Why a request handed over undecoded was not accepted.
#[derive(Debug)]
pub enum Undecoded<E> {
    /// It could not be decoded: the decoder's error.
    Decode(E),
    /// The ingest service refused it.
    Ingest(IngestError),
}

/// What the blocking task needs of the service, cloned out of it.
struct Interpretation {
    forward: bool,
    media: Option<Arc<Media>>,
    memo: Arc<PrefixMemo>,
    limits: Limits,
    run_info: Arc<RunInfoKeys>,
    admitted: Arc<AtomicU64>,
    counters: Arc<IngestCounters>,
}

/// What the blocking task made of one request.
struct Prepared {
    interpreted: Vec<Interpreted>,
    blobs: Vec<Blob>,
    /// Spans in the request.
    total: u64,
    /// Spans refused: ids of the wrong length.
    invalid: u64,
    over: OverLimits,
    /// The outbox payload, when some exporter forwards traces.
    payload: Option<Bytes>,
    /// The request's bytes, counted until it is committed.
    admitted: Admitted,
}

/// Spans in a request.
fn spans_in(request: &ExportTraceServiceRequest) -> usize {
    request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len())
        .sum()
}

impl Interpretation {
    /// Counts `request` in (refused when the service holds too many bytes), interprets its
    /// spans and takes large blobs out of their messages.
    fn prepare(
        self,
        request: ExportTraceServiceRequest,
        received: Option<Bytes>,
    ) -> Result<Prepared, IngestError> {
        let spans = spans_in(&request);
        let bytes = received
            .as_ref()
            .map_or_else(|| prost::Message::encoded_len(&request), Bytes::len);
        let admitted = admit(&self.admitted, bytes as u64, ADMITTED_BYTES).inspect_err(|_| {
            self.counters
                .refused_spans
                .fetch_add(spans as u64, Ordering::Relaxed);
        })?;
        // Sized once for a typical request (facts are large: no regrowth copies).
        let mut out = Vec::with_capacity(spans.min(1024));
        let (mut total, mut invalid) = (0u64, 0u64);
        let mut over = OverLimits::default();
        for resource_spans in &request.resource_spans {
            // The resource's trigger and attributes, read once for all of its spans.
            let resource = ResourceInfo::read(
                &self.run_info,
                resource_spans
                    .resource
                    .as_ref()
                    .map_or(&[][..], |r| &r.attributes),
            );
            for span in resource_spans.scope_spans.iter().flat_map(|s| &s.spans) {
                total += 1;
                if span.trace_id.len() != 16 || span.span_id.len() != 8 {
                    invalid += 1;
                    continue;
                }
                match interpret_span_with(span, &self.memo, &self.limits) {
                    Ok(mut i) => {
                        note_run_info(&mut i, &self.run_info, &resource, &span.attributes);
                        apply::note_service(&mut i.fact, resource_spans.resource.as_ref());
                        out.push(i)
                    }
                    Err(reason) => over.note(reason),
                }
            }
        }
        // Large blobs leave the messages here, before anything is stored. Without a media
        // store nothing is offloaded, but parts a sender made look like stored references are
        // still neutralised, so none is ever restored later.
        let blobs = match &self.media {
            Some(m) => m.offload(&mut out),
            None => {
                out.iter_mut()
                    .for_each(crate::media::neutralise_interpreted);
                Vec::new()
            }
        };
        let payload = self.forward.then(|| payload(&request, received));
        Ok(Prepared {
            interpreted: out,
            blobs,
            total,
            invalid,
            over,
            payload,
            admitted,
        })
    }
}

impl Ingest {
    /// Interprets and durably stores a trace export request.
    pub async fn export_traces(
        &self,
        request: ExportTraceServiceRequest,
    ) -> Result<ExportOutcome, IngestError> {
        self.export_traces_from(request, None).await
    }

    /// [`Ingest::export_traces`] given the request's protobuf bytes as received (`received`):
    /// they go to the outbox as they are instead of the request encoded again.
    pub async fn export_traces_from(
        &self,
        request: ExportTraceServiceRequest,
        received: Option<Bytes>,
    ) -> Result<ExportOutcome, IngestError> {
        let decoded = move || {
            Ok::<_, std::convert::Infallible>(Decoded {
                request,
                received,
                guard: (),
            })
        };
        match self
            .export_traces_decoding(decoded, DecodeOn::BlockingPool)
            .await
        {
            Ok(outcome) => Ok(outcome),
            Err(Undecoded::Ingest(error)) => Err(error),
            Err(Undecoded::Decode(never)) => match never {},
        }
    }

    /// [`Ingest::export_traces_from`] for a request still to be decoded: `decode` runs in the
    /// task that interprets the request (on the blocking pool, or in the caller for a small
    /// request: `on`), and its guard is dropped once the request is interpreted. A panic there
    /// is counted and answered with a permanent error.
    pub async fn export_traces_decoding<E, G, D>(
        &self,
        decode: D,
        on: DecodeOn,
    ) -> Result<ExportOutcome, Undecoded<E>>
    where
        D: FnOnce() -> Result<Decoded<ExportTraceServiceRequest, G>, E> + Send + 'static,
        E: Send + 'static,
        G: Send + 'static,
    {
        let interpretation = Interpretation {
            forward: self.outbox.wants(SignalKind::Traces),
            media: self.media.clone(),
            memo: self.memo.clone(),
            limits: self.limits,
            run_info: self.run_info.clone(),
            admitted: self.admitted_bytes.clone(),
            counters: self.counters.clone(),
        };
        let entered = Instant::now();
        let counters = self.counters.clone();
        let work = move || {
            let began = Instant::now();
            let latencies = &counters.latencies;
            if matches!(on, DecodeOn::BlockingPool) {
                latencies
                    .stage(Stage::PoolWait)
                    .observe(began.saturating_duration_since(entered));
            }
            let Decoded {
                request,
                received,
                guard,
            } = decode().map_err(Undecoded::Decode)?;
            let prepared = interpretation
                .prepare(request, received)
                .map_err(Undecoded::Ingest);
            drop(guard);
            latencies.stage(Stage::Interpret).observe(began.elapsed());
            prepared
        };
        let answer = self.interpret_and_store(work, on).await;
        self.counters
            .latencies
            .trace_requests
            .observe(entered.elapsed());
        answer
    }

    /// Runs `work` (decoding and interpreting a request) where `on` says, then stores what it
    /// prepared.
    async fn interpret_and_store<E, W>(
        &self,
        work: W,
        on: DecodeOn,
    ) -> Result<ExportOutcome, Undecoded<E>>
    where
        W: FnOnce() -> Result<Prepared, Undecoded<E>> + Send + 'static,
        E: Send + 'static,
    {
        let prepared = match on {
            DecodeOn::Caller => std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                .map_err(|payload| Undecoded::Ingest(self.interpretation_panicked(&*payload)))?,
            DecodeOn::BlockingPool => tokio::task::spawn_blocking(work)
                .await
                .map_err(|e| Undecoded::Ingest(self.task_failed(e)))?,
        }?;
        self.store_traces(prepared).await.map_err(Undecoded::Ingest)
    }

    /// The answer to a request whose decoding or interpretation panicked in the caller:
    /// permanent, and counted with the panics.
    fn interpretation_panicked(&self, payload: &(dyn std::any::Any + Send)) -> IngestError {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        self.counters.panics.fetch_add(1, Ordering::Relaxed);
        tracing::error!(panic = %message, "interpreting a request failed; it is refused");
        IngestError::Internal(format!("interpreting the request failed: {message}"))
    }

    /// Hands an interpreted request to the writer and waits until it is committed.
    async fn store_traces(&self, prepared: Prepared) -> Result<ExportOutcome, IngestError> {
        let Prepared {
            interpreted,
            blobs,
            total,
            invalid,
            over,
            payload,
            admitted,
        } = prepared;
        // Held against the media collection until the messages naming them are committed.
        let _held = match self.save_media(blobs).await {
            Ok(held) => held,
            Err(error) => {
                self.counters
                    .refused_spans
                    .fetch_add(total, Ordering::Relaxed);
                return Err(error);
            }
        };

        let interpreted_count = interpreted.len() as u64;
        let outbox = payload.map(|payload| OutboxEntry::new(SignalKind::Traces, total, payload));
        if !interpreted.is_empty() || outbox.is_some() {
            let submitted = self
                .writer
                .receive(interpreted, Vec::new(), outbox, admitted.bytes())
                .await;
            if let Err(error) = submitted {
                // Refused as a whole (retryable): counted like the Collector's refused spans.
                self.counters
                    .refused_spans
                    .fetch_add(total, Ordering::Relaxed);
                return Err(error);
            }
        }
        let c = &self.counters;
        c.accepted_spans
            .fetch_add(total - invalid, Ordering::Relaxed);
        c.refused_spans.fetch_add(invalid, Ordering::Relaxed);
        c.interpreted_spans
            .fetch_add(interpreted_count, Ordering::Relaxed);
        let mut outcome = if invalid > 0 {
            ExportOutcome {
                rejected: invalid as i64,
                message: format!(
                    "{invalid} spans rejected: trace_id must be 16 bytes and span_id 8 bytes"
                ),
            }
        } else {
            ExportOutcome::default()
        };
        over.warn(&mut outcome, "spans", &self.counters.over_limits);
        Ok(outcome)
    }
}
