//! Group commit sizing, shared by the file and PostgreSQL sinks. Callers that each wait for
//! their own record to be durable come back together: the writers a commit released send
//! their next record a few microseconds after it ends. Cutting the next batch at once would
//! split them in two halves that alternate (each commit covering about half of them), so
//! when the last commit covered several records the sink waits a moment, while records keep
//! arriving, for the callers of the last two batches to be back (PostgreSQL's
//! `commit_delay`/`commit_siblings` idea). A lone caller never waits.
//!
//! The wait is bounded by what a commit costs: never longer than the last commits took
//! ([`GroupCommit::plan`]). A caller that comes back later than one commit would have
//! taken is better served by committing what is there and taking it with the next commit,
//! which the disk is then busy with while the CPU produces the record: on a fast disk with
//! the CPU the limit (one core, 8 clients, ~0.1 ms of CPU per call, ~0.25 ms per
//! `fdatasync`) the CPU's work and the disk's then overlap rather than alternate. On a slow
//! disk (milliseconds per `fdatasync`) the wait is what it was: up to [`GATHER_WINDOW`].

use std::time::Duration;

/// How long a batch may wait for more records in all.
pub(super) const GATHER_WINDOW: Duration = Duration::from_millis(1);

/// A batch stops waiting when no record arrived for this long (or for a quarter of the
/// window, when that is shorter).
pub(super) const GATHER_QUIET: Duration = Duration::from_micros(100);

/// How long to wait for more records before a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Gather {
    /// Stop waiting once the batch holds this many records.
    pub(super) target: usize,
    /// Wait this long at most in all.
    pub(super) window: Duration,
    /// Stop waiting when no record arrived for this long.
    pub(super) quiet: Duration,
}

/// The sizes of the last two batches and how long commits take.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct GroupCommit {
    last: usize,
    before_last: usize,
    /// A moving average of how long a commit took (`None`: none finished yet).
    commit: Option<Duration>,
}

impl GroupCommit {
    /// How the next batch should wait for more records, or `None` to commit what is there
    /// (the last commit covered a single record: nobody else is writing).
    pub(super) fn plan(&self, max_batch: usize) -> Option<Gather> {
        if self.last <= 1 {
            return None;
        }
        let window = self.commit.map_or(GATHER_WINDOW, |c| c.min(GATHER_WINDOW));
        Some(Gather {
            target: (self.last + self.before_last).min(max_batch),
            window,
            quiet: GATHER_QUIET.min(window / 4),
        })
    }

    /// Notes the size of a batch about to be committed.
    pub(super) fn observe(&mut self, size: usize) {
        self.before_last = self.last;
        self.last = size;
    }

    /// Notes how long a commit took (averaged over the last few, weighting the newest by
    /// an eighth).
    pub(super) fn committed(&mut self, took: Duration) {
        self.commit = Some(match self.commit {
            None => took,
            Some(average) => (average * 7 + took) / 8,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_only_after_a_shared_commit_and_for_the_last_two_batches() {
        let mut group = GroupCommit::default();
        assert_eq!(group.plan(4096), None);
        group.observe(1);
        assert_eq!(group.plan(4096), None, "a lone writer never waits");
        group.observe(30);
        assert_eq!(group.plan(4096).map(|g| g.target), Some(31));
        group.observe(34);
        assert_eq!(group.plan(4096).map(|g| g.target), Some(64));
        assert_eq!(
            group.plan(50).map(|g| g.target),
            Some(50),
            "bounded by the batch size"
        );
        group.observe(1);
        assert_eq!(group.plan(4096), None);
    }

    #[test]
    fn never_waits_longer_than_a_commit_takes() {
        let mut group = GroupCommit::default();
        group.observe(8);
        let before_any_commit = group.plan(4096).unwrap();
        assert_eq!(before_any_commit.window, GATHER_WINDOW);
        assert_eq!(before_any_commit.quiet, GATHER_QUIET);
        // A slow disk: the wait is bounded by the window as before.
        group.committed(Duration::from_millis(4));
        let slow = group.plan(4096).unwrap();
        assert_eq!((slow.window, slow.quiet), (GATHER_WINDOW, GATHER_QUIET));
        // A fast one: the average comes down to it, and so does the wait.
        for _ in 0..100 {
            group.committed(Duration::from_micros(200));
        }
        let fast = group.plan(4096).unwrap();
        assert!(
            fast.window >= Duration::from_micros(200) && fast.window < Duration::from_micros(210),
            "{fast:?}"
        );
        assert_eq!(fast.quiet, fast.window / 4);
        // One slow commit moves the average by an eighth of the difference.
        group.committed(Duration::from_micros(200 + 800));
        let after = group.plan(4096).unwrap().window;
        assert!(after < Duration::from_micros(310), "{after:?}");
    }
}
