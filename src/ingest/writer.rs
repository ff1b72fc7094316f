//! The single writer: serialises read-modify-write of runs and group-commits the requests that
//! wait at the same moment into one durable batch.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::apply::{apply_group, Applied, Work};
use super::{now_ns, IngestError};
use crate::exporter::Outbox;
use crate::store::Store;

/// Most work items merged into one commit.
const MAX_GROUP: usize = 128;

struct Job {
    work: Work,
    reply: oneshot::Sender<Result<Applied, IngestError>>,
}

/// Handle to the writer thread. Dropping it closes the queue and waits for the thread, so the
/// store is released before the process exits (RocksDB aborts when its static state is torn
/// down under a live database).
pub struct Writer {
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    capacity: usize,
}

impl Writer {
    /// Starts the writer thread; at most `queue` jobs wait before submissions are refused.
    pub fn start(store: Arc<Store>, outbox: Arc<Outbox>, queue: usize) -> Self {
        let (tx, rx) = mpsc::channel(queue);
        let thread = std::thread::Builder::new()
            .name("stepline-writer".into())
            .spawn(move || run(store, outbox, rx))
            .map_err(|e| tracing::error!(error = %e, "could not start the writer thread"))
            .ok();
        Self {
            tx: Some(tx),
            thread,
            capacity: queue,
        }
    }

    /// Submits work and waits until it is durably committed.
    pub async fn submit(&self, work: Work) -> Result<Applied, IngestError> {
        let (reply, answer) = oneshot::channel();
        let tx = self.tx.as_ref().ok_or(IngestError::ShuttingDown)?;
        tx.try_send(Job { work, reply }).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => IngestError::Overloaded(self.capacity),
            mpsc::error::TrySendError::Closed(_) => IngestError::ShuttingDown,
        })?;
        answer.await.map_err(|_| IngestError::ShuttingDown)?
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

fn run(store: Arc<Store>, outbox: Arc<Outbox>, mut rx: mpsc::Receiver<Job>) {
    while let Some(first) = rx.blocking_recv() {
        let mut jobs = vec![first];
        while jobs.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        // Outbox space is reserved here, on the one writer thread, so caps are exact.
        let mut works = Vec::with_capacity(jobs.len());
        let mut replies = Vec::with_capacity(jobs.len());
        let mut reserved = Vec::new();
        for Job { mut work, reply } in jobs {
            if let Work::Received {
                outbox: Some(entry),
                ..
            } = &mut work
            {
                match outbox.reserve(&store, entry.signal, entry.items, entry.size()) {
                    Ok(seq) => {
                        entry.seq = seq;
                        reserved.push((entry.signal, entry.size()));
                    }
                    Err(full) => {
                        let _ = reply.send(Err(IngestError::OutboxFull {
                            exporter: full.exporter,
                            capacity: full.capacity,
                        }));
                        continue;
                    }
                }
            }
            works.push(work);
            replies.push(reply);
        }
        if works.is_empty() {
            continue;
        }
        let applied = apply_group(&store, &works, now_ns());
        // Freed before answering: the next request of a run then finds the input history it
        // shares with these (the interpreter's memo) held by nobody else, and extends it in place.
        drop(works);
        match applied {
            Ok(results) => {
                if !reserved.is_empty() {
                    outbox.committed();
                }
                for (reply, result) in replies.into_iter().zip(results) {
                    let _ = reply.send(Ok(result));
                }
            }
            Err(e) => {
                for (signal, size) in reserved {
                    outbox.release(signal, size);
                }
                tracing::error!(error = %e, "commit failed; the requests are answered as retryable");
                for reply in replies {
                    let _ = reply.send(Err(IngestError::Storage(e.to_string())));
                }
            }
        }
    }
}
