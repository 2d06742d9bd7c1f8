//! A writer's batch, shared by the file and PostgreSQL sinks: the queued records linked into
//! the stream's hash chain one after the other, then every caller answered at once when the
//! batch is committed or has failed, or (PostgreSQL, when another writer took its seqs)
//! handed back to be linked again after the stream's new head.

use super::anchor::MacKey;
use super::chain::{self, ChainHead, Linked};
use super::queue::Job;
use super::record::AuditRecord;
use super::sink::{AuditError, Receipt};

/// The linked records of a batch, their callers waiting for the commit.
pub(super) struct LinkedBatch {
    /// The stream's head once the batch is committed.
    head: ChainHead,
    /// Each linked job (its record kept, to be linked again) and the receipt it gets.
    waiting: Vec<(Job, Receipt)>,
}

impl LinkedBatch {
    /// Links the jobs' records after `head`, in order (MACed under `key` when given), handing each linked record and the
    /// record it came from to `keep` (which stores what the commit writes). A record that
    /// cannot be encoded is answered with [`AuditError::Encode`] at once and takes no place
    /// in the chain.
    pub(super) fn link(
        stream: &str,
        head: ChainHead,
        key: Option<&MacKey>,
        jobs: Vec<Job>,
        mut keep: impl FnMut(Linked, &AuditRecord),
    ) -> LinkedBatch {
        let mut head = head;
        let mut waiting = Vec::with_capacity(jobs.len());
        for job in jobs {
            match chain::link(stream, &head, &job.record, key) {
                Ok(linked) => {
                    head = linked.head();
                    let receipt = Receipt {
                        seq: linked.seq,
                        hash: head.hash.clone(),
                    };
                    keep(linked, &job.record);
                    waiting.push((job, receipt));
                }
                Err(err) => {
                    let _ = job.reply.send(Err(AuditError::Encode(err.to_string())));
                }
            }
        }
        LinkedBatch { head, waiting }
    }

    /// The stream's head once the batch is committed.
    pub(super) fn head(&self) -> &ChainHead {
        &self.head
    }

    /// Whether no record of the batch was linked (nothing to commit).
    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// After the commit: answers every caller with its receipt and returns the stream's new
    /// head.
    pub(super) fn acknowledge(self) -> ChainHead {
        for (job, receipt) in self.waiting {
            let _ = job.reply.send(Ok(receipt));
        }
        self.head
    }

    /// After a failed commit: answers every caller with `err`.
    pub(super) fn fail(self, err: &AuditError) {
        for (job, _) in self.waiting {
            let _ = job.reply.send(Err(err.clone()));
        }
    }

    /// After a commit that did not happen because another writer took the batch's seqs: the
    /// jobs, unanswered, in order, to be linked again after the stream's new head.
    pub(super) fn unlink(self) -> Vec<Job> {
        self.waiting.into_iter().map(|(job, _)| job).collect()
    }
}

/// Logs `err` and answers every job with it (a batch that could not begin).
pub(super) fn fail_all(jobs: Vec<Job>, err: &AuditError) {
    tracing::error!("{err}");
    for job in jobs {
        let _ = job.reply.send(Err(err.clone()));
    }
}
