//! The queue between a sink's callers and its one writer (a thread for the file sink, a task
//! for PostgreSQL): callers queue a [`Job`] and await its reply; closing drops the sender, so
//! the writer finishes what is queued and stops, and waits for it to say so.

use std::sync::Mutex;

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use super::record::AuditRecord;
use super::sink::{AuditError, Receipt};

/// A record to write and where to answer.
pub(super) struct Job {
    pub(super) record: AuditRecord,
    pub(super) reply: oneshot::Sender<Result<Receipt, AuditError>>,
}

/// A channel's sending side.
pub(super) trait Enqueue: Send {
    /// Queues `job`; `false` when the writer has stopped.
    fn enqueue(&self, job: Job) -> bool;
}

impl Enqueue for std::sync::mpsc::Sender<Job> {
    fn enqueue(&self, job: Job) -> bool {
        self.send(job).is_ok()
    }
}

impl Enqueue for tokio::sync::mpsc::UnboundedSender<Job> {
    fn enqueue(&self, job: Job) -> bool {
        self.send(job).is_ok()
    }
}

/// The callers' side of a writer.
pub(super) struct WriterQueue<T> {
    jobs: Mutex<Option<T>>,
    /// Answers when the writer has stopped.
    stopped: Mutex<Option<oneshot::Receiver<()>>>,
}

impl<T: Enqueue> WriterQueue<T> {
    /// The queue into `jobs`, whose writer sends on `stopped` when it ends.
    pub(super) fn new(jobs: T, stopped: oneshot::Receiver<()>) -> Self {
        WriterQueue {
            jobs: Mutex::new(Some(jobs)),
            stopped: Mutex::new(Some(stopped)),
        }
    }

    /// Queues `record`; resolves when the writer answers.
    pub(super) fn write(&self, record: AuditRecord) -> BoxFuture<'_, Result<Receipt, AuditError>> {
        let (reply, answer) = oneshot::channel();
        let sent = match self.jobs.lock() {
            Ok(jobs) => jobs
                .as_ref()
                .is_some_and(|jobs| jobs.enqueue(Job { record, reply })),
            Err(_) => false,
        };
        Box::pin(async move {
            if !sent {
                return Err(AuditError::Closed);
            }
            answer.await.unwrap_or(Err(AuditError::Closed))
        })
    }

    /// Stops taking records and waits for the writer to finish what is queued.
    pub(super) fn close(&self) -> BoxFuture<'_, ()> {
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.take();
        }
        let stopped = self.stopped.lock().ok().and_then(|mut s| s.take());
        Box::pin(async move {
            if let Some(stopped) = stopped {
                let _ = stopped.await;
            }
        })
    }
}
