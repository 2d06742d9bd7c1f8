//! Group commit sizing, shared by the file and PostgreSQL sinks. Callers that each wait for
//! their own record to be durable come back together: the writers a commit released send
//! their next record a few microseconds after it ends. Cutting the next batch at once would
//! split them in two halves that alternate (each commit covering about half of them), so
//! when the last commit covered several records the sink waits a moment, while records keep
//! arriving, for the callers of the last two batches to be back (PostgreSQL's
//! `commit_delay`/`commit_siblings` idea). A lone caller never waits.

use std::time::Duration;

/// How long a batch may wait for more records in all.
pub(super) const GATHER_WINDOW: Duration = Duration::from_millis(1);

/// A batch stops waiting when no record arrived for this long.
pub(super) const GATHER_QUIET: Duration = Duration::from_micros(100);

/// The sizes of the last two batches.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct GroupCommit {
    last: usize,
    before_last: usize,
}

impl GroupCommit {
    /// How many records the next batch should wait for, or `None` to commit what is there
    /// (the last commit covered a single record: nobody else is writing).
    pub(super) fn target(&self, max_batch: usize) -> Option<usize> {
        (self.last > 1).then(|| (self.last + self.before_last).min(max_batch))
    }

    /// Notes the size of a batch about to be committed.
    pub(super) fn observe(&mut self, size: usize) {
        self.before_last = self.last;
        self.last = size;
    }
}

#[cfg(test)]
mod tests {
    use super::GroupCommit;

    #[test]
    fn waits_only_after_a_shared_commit_and_for_the_last_two_batches() {
        let mut group = GroupCommit::default();
        assert_eq!(group.target(4096), None);
        group.observe(1);
        assert_eq!(group.target(4096), None, "a lone writer never waits");
        group.observe(30);
        assert_eq!(group.target(4096), Some(31));
        group.observe(34);
        assert_eq!(group.target(4096), Some(64));
        assert_eq!(group.target(50), Some(50), "bounded by the batch size");
        group.observe(1);
        assert_eq!(group.target(4096), None);
    }
}
