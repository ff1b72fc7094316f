//! The single writer: serialises read-modify-write of runs and group-commits the requests that
//! wait at the same moment into one durable batch.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::apply::{apply_group, Applied, Work};
use super::{now_ns, IngestError};
use crate::store::Store;

/// Most work items merged into one commit.
const MAX_GROUP: usize = 128;

struct Job {
    work: Work,
    reply: oneshot::Sender<Result<Applied, IngestError>>,
}

/// Handle to the writer thread.
pub struct Writer {
    tx: mpsc::Sender<Job>,
    capacity: usize,
}

impl Writer {
    /// Starts the writer thread; at most `queue` jobs wait before submissions are refused.
    pub fn start(store: Arc<Store>, queue: usize) -> Self {
        let (tx, rx) = mpsc::channel(queue);
        std::thread::Builder::new()
            .name("stepline-writer".into())
            .spawn(move || run(store, rx))
            .map(|_| ())
            .unwrap_or_else(|e| tracing::error!(error = %e, "could not start the writer thread"));
        Self {
            tx,
            capacity: queue,
        }
    }

    /// Submits work and waits until it is durably committed.
    pub async fn submit(&self, work: Work) -> Result<Applied, IngestError> {
        let (reply, answer) = oneshot::channel();
        self.tx.try_send(Job { work, reply }).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => IngestError::Overloaded(self.capacity),
            mpsc::error::TrySendError::Closed(_) => IngestError::ShuttingDown,
        })?;
        answer.await.map_err(|_| IngestError::ShuttingDown)?
    }
}

fn run(store: Arc<Store>, mut rx: mpsc::Receiver<Job>) {
    while let Some(first) = rx.blocking_recv() {
        let mut jobs = vec![first];
        while jobs.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let (works, replies): (Vec<Work>, Vec<_>) =
            jobs.into_iter().map(|j| (j.work, j.reply)).unzip();
        match apply_group(&store, &works, now_ns()) {
            Ok(results) => {
                for (reply, result) in replies.into_iter().zip(results) {
                    let _ = reply.send(Ok(result));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "commit failed; the requests are answered as retryable");
                for reply in replies {
                    let _ = reply.send(Err(IngestError::Storage(e.to_string())));
                }
            }
        }
    }
}
