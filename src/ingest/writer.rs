//! The single writer: serialises read-modify-write of runs and group-commits the requests that
//! wait at the same moment into one durable batch.
//!
//! Faults stay with the request that caused them. When a group cannot be applied because of one
//! of its requests (a record that cannot be read or written, or a panic), the writer applies the
//! requests one by one: the others commit, the bad one alone gets a permanent error (and a run
//! whose stored records cannot be read is marked damaged). A RocksDB failure is answered as
//! retryable to every request of the group. A panic is caught, counted and logged with the
//! trace and span ids of the work, and the writer goes on; should the thread end anyway, its
//! liveness flag ([`Writer::is_alive`]) turns false, which `/healthz` reports.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::apply::{
    apply_group, run_block_bound, AbandonOutcome, Applied, DeleteReply, DeleteWork, PrunedLogs,
    Stored, SweepOutcome, Work,
};
use super::{now_ns, IngestCounters, IngestError, Stage};
use crate::config::SignalKind;
use crate::exporter::Outbox;
use crate::idle::memory::blocking_recv_collecting;
use crate::interpreter::{Interpreted, LogEvent};
use crate::outbox::OutboxEntry;
use crate::store::{Store, StoreError};

/// Most work items merged into one commit.
const MAX_GROUP: usize = 128;

/// Encoded request bytes past which no further request joins a group. Without it, 16
/// connections of 2 MB requests made commits whose RocksDB write batch held 34.8 MB at the heap's
/// peak, and took the memtables far past their budget; four such requests share one fsync about
/// as well (32 connections of 500-span agent requests: 10,477 spans/s at 8 MiB, 9,469 at 4 MiB,
/// 10,800 without a bound).
const GROUP_BYTES: u64 = 8 << 20;

/// Most trace/span ids named when a panic is logged.
const LOGGED_IDS: usize = 8;

struct Job {
    work: Work,
    reply: Reply,
    /// The encoded bytes of the request it came from (0 for work of the service's own).
    bytes: u64,
    /// When it was queued.
    queued: Instant,
}

/// The answer to a received request, with its work handed back: the task that submitted it
/// frees it, on the thread whose heap the interpreted request was allocated from (freed by the
/// writer, every block went back to that heap through its cross-thread free list).
struct StoredAnswer {
    answer: Result<Stored, IngestError>,
    work: Option<Work>,
}

/// Where the answer to a job goes: one channel per kind of request, typed by its reply.
enum Reply {
    Stored(oneshot::Sender<StoredAnswer>),
    PrunedLogs(oneshot::Sender<Result<PrunedLogs, IngestError>>),
    Abandon(oneshot::Sender<Result<AbandonOutcome, IngestError>>),
    AbandonIfSilent(oneshot::Sender<Result<SweepOutcome, IngestError>>),
    Deletion(oneshot::Sender<Result<DeleteReply, IngestError>>),
}

impl Reply {
    /// Sends `answer` (the group's answer to this job) to the submitter, as its reply type.
    /// `apply_group` answers each work with the reply of its kind; should that ever not hold,
    /// the submitter gets an internal error rather than a wrong answer.
    fn send(self, answer: Result<Applied, IngestError>) {
        self.send_with(answer, None);
    }

    /// [`Reply::send`], handing `work` back to a received request's submitter (other kinds
    /// drop it here).
    fn send_with(self, answer: Result<Applied, IngestError>, work: Option<Work>) {
        fn mismatch<T>(applied: Applied) -> Result<T, IngestError> {
            tracing::error!(
                ?applied,
                "the writer answered a request with another kind's reply"
            );
            Err(IngestError::Internal(format!(
                "the writer gave a reply of another kind: {applied:?}"
            )))
        }
        // A submitter that stopped waiting (its client went away) needs no answer.
        match (self, answer) {
            (Reply::Stored(tx), Ok(Applied::Stored(stored))) => drop(tx.send(StoredAnswer {
                answer: Ok(stored),
                work,
            })),
            (Reply::PrunedLogs(tx), Ok(Applied::PrunedLogs(n))) => drop(tx.send(Ok(n))),
            (Reply::Abandon(tx), Ok(Applied::Abandon(SweepOutcome::Decided(outcome)))) => {
                drop(tx.send(Ok(outcome)))
            }
            (Reply::AbandonIfSilent(tx), Ok(Applied::Abandon(outcome))) => {
                drop(tx.send(Ok(outcome)))
            }
            (Reply::Deletion(tx), Ok(Applied::Deletion(reply))) => drop(tx.send(Ok(reply))),
            (Reply::Stored(tx), answer) => drop(tx.send(StoredAnswer {
                answer: answer.and_then(mismatch),
                work,
            })),
            (Reply::PrunedLogs(tx), answer) => drop(tx.send(answer.and_then(mismatch))),
            (Reply::Abandon(tx), answer) => drop(tx.send(answer.and_then(mismatch))),
            (Reply::AbandonIfSilent(tx), answer) => drop(tx.send(answer.and_then(mismatch))),
            (Reply::Deletion(tx), answer) => drop(tx.send(answer.and_then(mismatch))),
        }
    }

    /// Refuses the job with `error`.
    fn refuse(self, error: IngestError) {
        self.send(Err(error));
    }
}

/// Handle to the writer thread. Dropping it closes the queue and waits for the thread, so the
/// store is released before the process exits (RocksDB aborts when its static state is torn
/// down under a live database).
pub struct Writer {
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    capacity: usize,
    alive: Arc<AtomicBool>,
}

/// Sets the liveness flag false when the writer thread ends, however it ends.
struct Liveness(Arc<AtomicBool>);

impl Drop for Liveness {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Writer {
    /// Starts the writer thread; at most `queue` jobs wait before submissions are refused.
    /// Panics caught while applying are counted in `counters`.
    pub fn start(
        store: Arc<Store>,
        outbox: Arc<Outbox>,
        queue: usize,
        counters: Arc<IngestCounters>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(queue);
        let alive = Arc::new(AtomicBool::new(true));
        let liveness = Liveness(alive.clone());
        let thread = std::thread::Builder::new()
            .name("stepline-writer".into())
            .spawn(move || {
                let _liveness = liveness;
                run(&store, &outbox, &counters, rx);
            })
            .map_err(|e| {
                alive.store(false, Ordering::Release);
                tracing::error!(error = %e, "could not start the writer thread");
            })
            .ok();
        Self {
            tx: Some(tx),
            thread,
            capacity: queue,
            alive,
        }
    }

    /// True while the writer thread runs.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Stores what was interpreted from one received export request of `bytes` encoded bytes
    /// (and its outbox entry) and waits until it is durably committed.
    pub async fn receive(
        &self,
        spans: Vec<Interpreted>,
        logs: Vec<LogEvent>,
        outbox: Option<OutboxEntry>,
        bytes: u64,
    ) -> Result<Stored, IngestError> {
        let work = Work::Received {
            spans,
            logs,
            outbox,
        };
        let StoredAnswer { answer, work } = self.submit_sized(work, Reply::Stored, bytes).await?;
        // Freed before the request is answered: the next request of a run then finds the input
        // history it shares with this one (the interpreter's memo) held by nobody else, and
        // extends it in place.
        drop(work);
        answer
    }

    /// Deletes the orphan log records `records` whose span still has not arrived.
    pub async fn prune_logs(
        &self,
        records: Vec<(Vec<u8>, String, String)>,
    ) -> Result<PrunedLogs, IngestError> {
        self.submit(Work::PruneLogs { records }, Reply::PrunedLogs)
            .await
    }

    /// Declares run `run` (an id or alias) dead at `at_ns`, whatever it did last.
    pub async fn abandon(
        &self,
        run: String,
        reason: String,
        at_ns: u64,
    ) -> Result<AbandonOutcome, IngestError> {
        let work = Work::Abandon {
            run,
            reason,
            at_ns,
            silent_since_ns: 0,
        };
        self.submit(work, Reply::Abandon).await
    }

    /// Declares run `run` dead at `at_ns` if no fact of it arrived after `silent_since_ns` (not
    /// 0): the inactivity sweep's decision.
    pub async fn abandon_if_silent(
        &self,
        run: String,
        reason: String,
        at_ns: u64,
        silent_since_ns: u64,
    ) -> Result<SweepOutcome, IngestError> {
        let work = Work::Abandon {
            run,
            reason,
            at_ns,
            silent_since_ns,
        };
        self.submit(work, Reply::AbandonIfSilent).await
    }

    /// Applies deletion work (alone, in its own commit) and waits until it is committed.
    pub async fn delete(&self, work: DeleteWork) -> Result<DeleteReply, IngestError> {
        self.submit(Work::Delete(work), Reply::Deletion).await
    }

    /// Queues `work` and waits until it is durably committed; `reply` makes the channel its
    /// answer comes back on.
    async fn submit<T>(
        &self,
        work: Work,
        reply: fn(oneshot::Sender<Result<T, IngestError>>) -> Reply,
    ) -> Result<T, IngestError> {
        self.submit_sized(work, reply, 0).await?
    }

    /// Queues `work`, from a request of `bytes` encoded bytes, and waits for what its reply
    /// channel carries (see [`Writer::submit`]).
    async fn submit_sized<T>(
        &self,
        work: Work,
        reply: fn(oneshot::Sender<T>) -> Reply,
        bytes: u64,
    ) -> Result<T, IngestError> {
        let (tx, answer) = oneshot::channel();
        let sender = self.tx.as_ref().ok_or(IngestError::ShuttingDown)?;
        let job = Job {
            work,
            reply: reply(tx),
            bytes,
            queued: Instant::now(),
        };
        sender.try_send(job).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => IngestError::Overloaded(self.capacity),
            mpsc::error::TrySendError::Closed(_) => IngestError::ShuttingDown,
        })?;
        answer.await.map_err(|_| IngestError::ShuttingDown)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the queue ends the thread's loop once it has answered what it holds.
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the writer thread panicked");
            }
        }
    }
}

/// Why applying failed.
enum Failure {
    Store(StoreError),
    Panic(String),
}

/// Applies `works` as one commit, catching a panic.
fn attempt(store: &Store, works: &[Work], now: u64) -> Result<Vec<Applied>, Failure> {
    match catch_unwind(AssertUnwindSafe(|| apply_group(store, works, now))) {
        Ok(Ok(results)) => Ok(results),
        Ok(Err(e)) => Err(Failure::Store(e)),
        Err(payload) => Err(Failure::Panic(
            payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_string()),
        )),
    }
}

/// The trace and span ids (or the run) a work item is about, for logs.
fn describe(work: &Work) -> String {
    match work {
        Work::Received { spans, logs, .. } => {
            let ids: Vec<String> = spans
                .iter()
                .map(|i| (&i.fact.trace_id, &i.fact.span_id))
                .chain(logs.iter().map(|e| (&e.trace_id, &e.span_id)))
                .take(LOGGED_IDS)
                .map(|(trace, span)| format!("{trace}/{span}"))
                .collect();
            let more = (spans.len() + logs.len()).saturating_sub(ids.len());
            match (ids.is_empty(), more) {
                (true, _) => "a request without spans".to_string(),
                (false, 0) => format!("spans {}", ids.join(", ")),
                (false, more) => format!("spans {} and {more} more", ids.join(", ")),
            }
        }
        Work::Abandon { run, .. } => format!("abandoning run {run}"),
        Work::PruneLogs { records } => format!("pruning {} log records", records.len()),
        Work::Delete(work) => format!("deletion work {work:?}"),
    }
}

/// The answer to one work item that failed on its own (or with others, for a RocksDB
/// failure): retryable for RocksDB, permanent otherwise. A run whose records could not be
/// read is marked damaged.
fn answer_failure(
    store: &Store,
    counters: &IngestCounters,
    work: &Work,
    failure: Failure,
) -> IngestError {
    match failure {
        Failure::Store(e) if e.is_retryable() => IngestError::Storage(e.to_string()),
        Failure::Store(e) => {
            counters.rejected_requests.fetch_add(1, Ordering::Relaxed);
            if let Some((run_id, reason)) = e.damaged_run() {
                match store.mark_damaged(run_id, &reason) {
                    Ok(()) => tracing::warn!(run_id, %reason, "run marked damaged"),
                    Err(mark) => {
                        tracing::error!(run_id, error = %mark, "could not mark the run damaged")
                    }
                }
            }
            tracing::warn!(error = %e, work = %describe(work), "request refused: it cannot be stored");
            IngestError::Rejected(e.to_string())
        }
        Failure::Panic(message) => {
            counters.panics.fetch_add(1, Ordering::Relaxed);
            tracing::error!(panic = %message, work = %describe(work), "applying a request panicked; it is refused, the writer goes on");
            IngestError::Internal(format!("applying the request failed: {message}"))
        }
    }
}

/// One job of a group, once its outbox space is reserved.
struct Pending {
    reply: Reply,
    /// The signal and bytes reserved in the exporters' queues for its outbox entry.
    reserved: Option<(SignalKind, u64)>,
}

/// The jobs committed together with `first`: those already queued behind it, up to
/// [`MAX_GROUP`] of them and until they hold [`GROUP_BYTES`]. A deletion is committed alone: met
/// while grouping, it is left in `carried` to start the next group.
fn group(first: Job, rx: &mut mpsc::Receiver<Job>, carried: &mut Option<Job>) -> Vec<Job> {
    let alone = matches!(first.work, Work::Delete(_));
    let mut bytes = first.bytes;
    let mut jobs = vec![first];
    while !alone && jobs.len() < MAX_GROUP && bytes < GROUP_BYTES {
        match rx.try_recv() {
            Ok(job) if matches!(job.work, Work::Delete(_)) => {
                *carried = Some(job);
                break;
            }
            Ok(job) => {
                bytes = bytes.saturating_add(job.bytes);
                jobs.push(job);
            }
            Err(_) => break,
        }
    }
    jobs
}

fn run(store: &Store, outbox: &Outbox, counters: &IngestCounters, mut rx: mpsc::Receiver<Job>) {
    // A deletion job met while grouping: it starts the next group, alone.
    let mut carried: Option<Job> = None;
    loop {
        let Some(first) = carried.take().or_else(|| blocking_recv_collecting(&mut rx)) else {
            break;
        };
        let jobs = group(first, &mut rx, &mut carried);
        let started = Instant::now();
        let queue = counters.latencies.stage(Stage::WriterQueue);
        // Outbox space is reserved here, on the one writer thread, so caps are exact.
        let mut works = Vec::with_capacity(jobs.len());
        let mut pending = Vec::with_capacity(jobs.len());
        for Job {
            mut work,
            reply,
            queued,
            ..
        } in jobs
        {
            if matches!(work, Work::Received { .. }) {
                queue.observe(started.saturating_duration_since(queued));
            }
            let mut reserved = None;
            if let Work::Received {
                outbox: Some(entry),
                spans,
                ..
            } = &mut work
            {
                // The run block is written once the runs are resolved: its bound is reserved
                // now, and what it did not take is given back after the commit.
                let size = entry.size().saturating_add(run_block_bound(spans.len()));
                match outbox.reserve(store, entry.signal, entry.items, size) {
                    Ok(seq) => {
                        entry.seq = seq;
                        reserved = Some((entry.signal, size));
                    }
                    Err(full) => {
                        reply.refuse(IngestError::OutboxFull {
                            exporter: full.exporter,
                            capacity: full.capacity,
                        });
                        continue;
                    }
                }
            }
            works.push(work);
            pending.push(Pending { reply, reserved });
        }
        if works.is_empty() {
            continue;
        }
        counters.writer_groups.fetch_add(1, Ordering::Relaxed);
        counters
            .writer_grouped_requests
            .fetch_add(works.len() as u64, Ordering::Relaxed);
        let writing = Store::writing_on_this_thread();
        let applying = Instant::now();
        let answers = apply_isolated(store, counters, &works);
        observe_group(counters, &works, applying, writing);
        // Committed entries go to the exporters in memory (the outbox on disk stays the truth).
        for (work, answer) in works.iter().zip(&answers) {
            if let (
                Work::Received {
                    outbox: Some(entry),
                    ..
                },
                Ok(Applied::Stored(stored)),
            ) = (work, answer)
            {
                if let Some(bytes) = stored.outbox_bytes {
                    outbox.hand_off(entry, bytes);
                }
            }
        }
        let mut committed = false;
        let answered = pending.into_iter().zip(answers).zip(works);
        for ((Pending { reply, reserved }, answer), work) in answered {
            if let Some((signal, size)) = reserved {
                match &answer {
                    Ok(applied) => {
                        committed = true;
                        if let Applied::Stored(Stored {
                            outbox_bytes: Some(bytes),
                        }) = applied
                        {
                            outbox.release(signal, size.saturating_sub(*bytes));
                        }
                    }
                    Err(_) => outbox.release(signal, size),
                }
            }
            reply.send_with(answer, Some(work));
        }
        if committed {
            outbox.committed();
        }
    }
}

/// Records, for each received request of a group applied from `applying`, the time the group
/// took, split into its RocksDB write (`writing` is the thread's write time before it) and the
/// rest.
fn observe_group(counters: &IngestCounters, works: &[Work], applying: Instant, writing: Duration) {
    let took = applying.elapsed();
    let received = works
        .iter()
        .filter(|w| matches!(w, Work::Received { .. }))
        .count() as u64;
    let written = Store::writing_on_this_thread().saturating_sub(writing);
    let latencies = &counters.latencies;
    latencies
        .stage(Stage::RocksdbWrite)
        .observe_n(written, received);
    latencies
        .stage(Stage::WriterApply)
        .observe_n(took.saturating_sub(written), received);
}

/// Applies a group as one commit; when that fails because of what one of its requests holds
/// (not a RocksDB failure), applies them one by one so only the bad one fails. One answer per
/// work item, in order.
fn apply_isolated(
    store: &Store,
    counters: &IngestCounters,
    works: &[Work],
) -> Vec<Result<Applied, IngestError>> {
    let now = now_ns();
    let failure = match attempt(store, works, now) {
        Ok(results) => return results.into_iter().map(Ok).collect(),
        Err(failure) => failure,
    };
    if let Failure::Store(e) = &failure {
        if e.is_retryable() {
            tracing::error!(error = %e, "commit failed; the requests are answered as retryable");
            let message = e.to_string();
            return works
                .iter()
                .map(|_| Err(IngestError::Storage(message.clone())))
                .collect();
        }
    }
    if let [work] = works {
        return vec![Err(answer_failure(store, counters, work, failure))];
    }
    if let Failure::Panic(message) = &failure {
        counters.panics.fetch_add(1, Ordering::Relaxed);
        tracing::error!(panic = %message, requests = works.len(), "applying a group panicked; applying its requests one by one");
    } else {
        tracing::warn!(
            requests = works.len(),
            "a group could not be applied; applying its requests one by one"
        );
    }
    works
        .iter()
        .map(
            |work| match attempt(store, std::slice::from_ref(work), now) {
                Ok(mut results) => results
                    .pop()
                    .ok_or_else(|| IngestError::Internal("the writer gave no result".into())),
                Err(failure) => Err(answer_failure(store, counters, work, failure)),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpreter::{interpret_span, Interpreted};
    use crate::store::keys::cf;
    use crate::test_fixtures::{delegate_scenario, run_id};
    use opentelemetry_proto::tonic::trace::v1::Span;

    fn work(spans: &[Span]) -> Work {
        Work::Received {
            spans: spans
                .iter()
                .filter_map(interpret_span)
                .collect::<Vec<Interpreted>>(),
            logs: Vec::new(),
            outbox: None,
        }
    }

    /// The delegate scenario moved to trace `[t; 16]`.
    fn other_trace(t: u8) -> Vec<Span> {
        delegate_scenario()
            .into_iter()
            .map(|mut s| {
                s.trace_id = vec![t; 16];
                s
            })
            .collect()
    }

    fn run_in(t: u8) -> String {
        format!("{}-{}", hex::encode([t; 16]), hex::encode([1u8; 8]))
    }

    #[test]
    fn a_damaged_run_fails_alone_and_permanently_and_is_marked() {
        let store = Store::in_memory();
        let counters = IngestCounters::default();
        let all = delegate_scenario();
        apply_group(&store, &[work(&all[0..1])], 1).unwrap();
        let mut batch = store.batch();
        batch
            .put_raw(cf::RUN_META, run_id(1).as_bytes(), b"garbage")
            .unwrap();
        store.commit(batch).unwrap();

        let works = [work(&all[3..4]), work(&other_trace(9))];
        let answers = apply_isolated(&store, &counters, &works);
        match &answers[0] {
            Err(e @ IngestError::Rejected(message)) => {
                assert!(message.contains(&run_id(1)), "{message}");
                assert!(e.is_permanent());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            answers[1].as_ref().ok(),
            Some(&Applied::Stored(Stored { outbox_bytes: None }))
        );
        assert!(
            store.run(&run_in(9)).unwrap().is_some(),
            "the innocent commits"
        );
        assert!(store.damage(&run_id(1)).unwrap().is_some());
        let damaged = store.run(&run_id(1)).unwrap().unwrap();
        assert!(
            damaged
                .warnings
                .iter()
                .any(|w| w.starts_with(crate::store::DAMAGED_WARNING)),
            "{damaged:?}"
        );
        assert_eq!(counters.rejected_requests.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_panic_fails_only_its_request_and_the_writer_goes_on() {
        let store = Store::in_memory();
        let counters = IngestCounters::default();
        // The tool span (id 3) panics when applied; the innocent request has none.
        super::super::apply::fault::panic_on(Some(&hex::encode([3u8; 8])));
        let innocent: Vec<Span> = other_trace(6)
            .into_iter()
            .filter(|s| s.span_id != [3u8; 8])
            .collect();
        let works = [work(&other_trace(5)[3..4]), work(&innocent)];
        let answers = apply_isolated(&store, &counters, &works);
        super::super::apply::fault::panic_on(None);
        match &answers[0] {
            Err(e @ IngestError::Internal(message)) => {
                assert!(message.contains("injected panic"), "{message}");
                assert!(e.is_permanent());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            answers[1].as_ref().ok(),
            Some(&Applied::Stored(Stored { outbox_bytes: None }))
        );
        assert!(counters.panics.load(Ordering::Relaxed) >= 1);
        // The same request applies once the fault is gone: nothing was left half-done.
        let again = apply_isolated(&store, &counters, &[work(&other_trace(5))]);
        assert_eq!(
            again[0].as_ref().ok(),
            Some(&Applied::Stored(Stored { outbox_bytes: None }))
        );
        assert!(store.run(&run_in(5)).unwrap().is_some());
        assert!(store.check_readable().unwrap().is_empty());
    }

    /// A queued job of a request of `bytes` encoded bytes (its answer is not awaited).
    fn queued(bytes: u64) -> Job {
        let (tx, _answer) = oneshot::channel();
        Job {
            work: Work::Received {
                spans: Vec::new(),
                logs: Vec::new(),
                outbox: None,
            },
            reply: Reply::Stored(tx),
            bytes,
            queued: Instant::now(),
        }
    }

    #[test]
    fn a_group_ends_once_its_requests_hold_the_group_bytes() {
        let (tx, mut rx) = mpsc::channel(256);
        let mut carried = None;
        // Large requests: a group takes the one that reaches the bound, and no more.
        let large = GROUP_BYTES / 2 + 1;
        for _ in 0..4 {
            tx.try_send(queued(large)).ok().unwrap();
        }
        let first = rx.try_recv().unwrap();
        let jobs = group(first, &mut rx, &mut carried);
        assert_eq!(jobs.len(), 2);
        assert_eq!(rx.len(), 2, "the others wait for the next group");
        // One request over the bound on its own is a group of one.
        let jobs = group(queued(GROUP_BYTES * 3), &mut rx, &mut carried);
        assert_eq!(jobs.len(), 1);
        assert_eq!(rx.len(), 2);
        while rx.try_recv().is_ok() {}
        // Small requests: up to MAX_GROUP of them.
        for _ in 0..MAX_GROUP + 10 {
            tx.try_send(queued(1024)).ok().unwrap();
        }
        let first = rx.try_recv().unwrap();
        let jobs = group(first, &mut rx, &mut carried);
        assert_eq!(jobs.len(), MAX_GROUP);
        assert_eq!(rx.len(), 10);
        assert!(carried.is_none());
    }

    #[tokio::test]
    async fn the_outbox_queue_counts_the_stored_entry_with_its_run_block_exactly() {
        use crate::config::{Compression, ExporterConfig, ExporterProtocol, RetryConfig};
        use prost::Message;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), false).unwrap());
        let exporters = [ExporterConfig {
            id: "otlp/traces".into(),
            protocol: ExporterProtocol::Grpc,
            endpoint: "http://127.0.0.1:1".into(),
            tls: None,
            headers: Vec::new(),
            compression: Compression::None,
            timeout: std::time::Duration::from_secs(1),
            retry: RetryConfig::default(),
            queue_size_bytes: 1 << 20,
            when_full: crate::config::WhenFull::Refuse,
            num_consumers: 1,
            batch: None,
            enrich_run_id: true,
            signals: vec![SignalKind::Traces],
        }];
        let outbox = Arc::new(Outbox::open(&store, &exporters).unwrap());
        let writer = Writer::start(
            store.clone(),
            outbox.clone(),
            4,
            Arc::new(IngestCounters::default()),
        );
        let spans = crate::test_fixtures::strands_scenario();
        let entry = |spans: &[Span]| {
            let payload = crate::test_fixtures::request(spans.to_vec()).encode_to_vec();
            OutboxEntry::new(SignalKind::Traces, spans.len() as u64, payload)
        };
        let Work::Received {
            spans: interpreted, ..
        } = work(&spans)
        else {
            unreachable!("work() builds a received request");
        };
        let stored = writer
            .receive(interpreted, Vec::new(), Some(entry(&spans)), 0)
            .await
            .unwrap();
        // A request without interpreted spans: no run block.
        let plain = writer
            .receive(Vec::new(), Vec::new(), Some(entry(&spans[..1])), 0)
            .await
            .unwrap();
        let entries = store.outbox_after(0, 10, usize::MAX).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].span_runs.len(), spans.len());
        assert!(entries[1].span_runs.is_empty());
        assert_eq!(stored.outbox_bytes, Some(entries[0].size()));
        assert_eq!(plain.outbox_bytes, Some(entries[1].size()));
        let total: u64 = entries.iter().map(OutboxEntry::size).sum();
        assert_eq!(outbox.queues()[0].pending_bytes(), total);
        // What a restart counts from the stored entries is the same.
        drop(writer);
        let reopened = Outbox::open(&store, &exporters).unwrap();
        assert_eq!(reopened.queues()[0].pending_bytes(), total);
    }

    /// The writer hands a received request's work back with its answer, and `receive` frees it
    /// before it returns: what the request shares with the interpreter's memo (a model
    /// request's input) is held by nobody else when the run's next request is interpreted.
    #[tokio::test]
    async fn a_received_request_is_freed_once_it_is_answered() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), true).unwrap());
        let writer = Writer::start(
            store.clone(),
            Arc::new(Outbox::disabled()),
            4,
            Arc::new(IngestCounters::default()),
        );
        let Work::Received { spans, .. } = work(&delegate_scenario()) else {
            unreachable!("work() builds a received request");
        };
        let inputs: Vec<_> = spans.iter().filter_map(|i| i.fact.input.clone()).collect();
        assert!(!inputs.is_empty());
        assert!(inputs.iter().all(|input| Arc::strong_count(input) == 2));
        writer.receive(spans, Vec::new(), None, 0).await.unwrap();
        assert!(inputs.iter().all(|input| Arc::strong_count(input) == 1));
        assert!(store.run(&run_id(1)).unwrap().is_some(), "committed");
    }

    #[test]
    fn liveness_turns_false_when_the_writer_thread_ends() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), false).unwrap());
        let mut writer = Writer::start(
            store,
            Arc::new(Outbox::disabled()),
            4,
            Arc::new(IngestCounters::default()),
        );
        assert!(writer.is_alive());
        drop(writer.tx.take());
        if let Some(thread) = writer.thread.take() {
            thread.join().unwrap();
        }
        assert!(!writer.is_alive());
    }
}
