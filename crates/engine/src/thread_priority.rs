//! The OS scheduling priority of threads doing bulk work (rendering large results, the
//! SQLite work of statements that load many rows): such a thread lowers its own priority
//! (`limits.bulk_work_priority`) so that, on a busy machine, the threads serving small
//! calls — the async workers, which also run small statements' SQLite work — get the cores first.
//! By default (Linux) the thread moves to the `SCHED_IDLE` scheduling class: it runs only on
//! CPU time that no other thread wants, and a small call's thread that wakes up takes the
//! core from it at once. Alternatively the thread raises its nice value
//! (`limits.bulk_work_nice`), which leaves it a share of the cores in proportion to its
//! weight. Priority is per thread on Linux; elsewhere this does nothing.
//!
//! A thread that has lowered its priority may not be allowed to raise it again (that needs
//! `CAP_SYS_NICE` or `RLIMIT_NICE`): [`restore`] says whether it could, and a pooled thread
//! that could not ends instead of serving a small call at the lowered priority.

use std::cell::Cell;
use std::sync::OnceLock;

/// How bulk work lowers the priority of the thread doing it (`limits.bulk_work_priority`
/// and `limits.bulk_work_nice`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BulkPriority {
    /// Not at all: bulk work runs at the thread's priority.
    Normal,
    /// The thread's nice value is raised by this many steps (up to [`LOWEST`]).
    Nice(u8),
    /// The thread moves to Linux's `SCHED_IDLE` class, below every nice value.
    #[default]
    Idle,
}

impl BulkPriority {
    /// Whether it lowers a thread's priority at all (`Normal` and `Nice(0)` do not).
    pub fn lowers(self) -> bool {
        !matches!(self, BulkPriority::Normal | BulkPriority::Nice(0))
    }
}

/// What a thread was before [`lower`] lowered it.
#[derive(Debug, Clone, Copy)]
struct Before {
    nice: i32,
    /// Whether it was moved to `SCHED_IDLE` (and is still there).
    idle: bool,
}

thread_local! {
    /// What this thread was before [`lower`] lowered it.
    static BEFORE: Cell<Option<Before>> = const { Cell::new(None) };
}

/// The highest nice value (the lowest priority) Linux has.
pub const LOWEST: u8 = 19;

/// By how many nice steps bulk work lowers its threads' priority with
/// `limits.bulk_work_priority: nice` unless `limits.bulk_work_nice` says otherwise.
pub const DEFAULT_LOWER_BY: u8 = 10;

/// Lowers this thread's priority as `to` says, once: a thread already lowered stays as it
/// is. [`BulkPriority::Normal`] (and `Nice(0)`) does nothing.
pub fn lower(to: BulkPriority) {
    if !to.lowers() || BEFORE.get().is_some() {
        return;
    }
    let Some(now) = nice() else {
        return;
    };
    match to {
        BulkPriority::Normal => {}
        BulkPriority::Nice(by) => {
            let target = now.saturating_add(i32::from(by)).min(i32::from(LOWEST));
            if target != now && set_nice(target) {
                BEFORE.set(Some(Before {
                    nice: now,
                    idle: false,
                }));
            }
        }
        BulkPriority::Idle => {
            if set_idle(true) {
                BEFORE.set(Some(Before {
                    nice: now,
                    idle: true,
                }));
            }
        }
    }
}

/// Whether this thread runs at its original priority: it was never lowered, or it was and
/// could be raised back now.
pub fn restore() -> bool {
    let Some(before) = BEFORE.get() else {
        return true;
    };
    if before.idle {
        if !set_idle(false) {
            return false;
        }
        BEFORE.set(Some(Before {
            idle: false,
            ..before
        }));
    }
    let restored = set_nice(before.nice);
    if restored {
        BEFORE.set(None);
    }
    restored
}

/// Whether this process may raise a thread's priority back after lowering it (found once,
/// on a short-lived thread that lowers and restores its nice value and its scheduling
/// class): where it may not, threads that must return to their priority (e.g. async
/// workers) are never lowered.
pub fn can_raise() -> bool {
    static CAN: OnceLock<bool> = OnceLock::new();
    *CAN.get_or_init(|| {
        std::thread::Builder::new()
            .name("querygate-nice".to_owned())
            .spawn(|| {
                lower(BulkPriority::Nice(1));
                let nice = lowered() && restore();
                lower(BulkPriority::Idle);
                let idle = lowered() && restore();
                nice && idle
            })
            .ok()
            .and_then(|probe| probe.join().ok())
            .unwrap_or(false)
    })
}

/// Runs `work` at the priority `to` says, then raises it back, if this process may raise
/// it back ([`can_raise`]); else at this thread's priority.
pub fn lowered_while<T>(to: BulkPriority, work: impl FnOnce() -> T) -> T {
    if !to.lowers() || lowered() || !can_raise() {
        return work();
    }
    lower(to);
    let done = work();
    if !restore() {
        tracing::warn!("a thread could not raise its priority back after bulk work");
    }
    done
}

/// Whether [`lower`] lowered this thread's priority (and [`restore`] has not undone it).
pub fn lowered() -> bool {
    BEFORE.get().is_some()
}

/// This thread's nice value (`None` where threads have none of their own).
pub fn nice() -> Option<i32> {
    #[cfg(target_os = "linux")]
    {
        rustix::process::getpriority_process(Some(rustix::thread::gettid())).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Moves this thread into `SCHED_IDLE` (`idle`) or back to `SCHED_OTHER`: whether it is in
/// the class asked for afterwards (read back, as the wrapper may fail after the move).
fn set_idle(idle: bool) -> bool {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy,
            thread_native_id, thread_schedule_policy,
        };
        let class = if idle {
            NormalThreadSchedulePolicy::Idle
        } else {
            NormalThreadSchedulePolicy::Other
        };
        // `Min` is the only value SCHED_IDLE takes (nice 0), and for SCHED_OTHER nice 19,
        // a value any thread may take: `restore` sets the nice value it had afterwards.
        if let Err(err) = set_thread_priority_and_policy(
            thread_native_id(),
            thread_priority::ThreadPriority::Min,
            ThreadSchedulePolicy::Normal(class),
        ) {
            tracing::debug!(error = %err, idle, "cannot change a thread's scheduling class");
        }
        thread_schedule_policy().is_ok_and(|now| now == ThreadSchedulePolicy::Normal(class))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = idle;
        false
    }
}

fn set_nice(value: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        match rustix::process::setpriority_process(Some(rustix::thread::gettid()), value) {
            Ok(()) => true,
            Err(err) => {
                tracing::debug!(error = %err, nice = value, "cannot set a thread's priority");
                false
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = value;
        false
    }
}

/// What the kernel shows of this process's threads, for tests of code that lowers a
/// thread's priority (the `test-support` feature; Linux only).
#[cfg(all(any(test, feature = "test-support"), target_os = "linux"))]
pub mod probe {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    /// This thread's id.
    pub fn tid() -> i32 {
        rustix::thread::gettid().as_raw_nonzero().get()
    }

    /// The nice value of this process's thread `tid` as the kernel shows it (field 19 of
    /// `/proc/self/task/<tid>/stat`).
    pub fn nice_of(tid: i32) -> i32 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        // The command name (field 2) is in parentheses and may hold spaces.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after.split(' ').nth(16).unwrap().parse().unwrap()
    }

    /// The scheduling policy of this process's thread `tid` (field 41 of its `stat`; 5 is
    /// `SCHED_IDLE`, 0 `SCHED_OTHER`).
    pub fn policy_of(tid: i32) -> i32 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after.split(' ').nth(38).unwrap().parse().unwrap()
    }

    /// `SCHED_IDLE`'s number.
    pub const SCHED_IDLE: i32 = 5;
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::probe::{SCHED_IDLE, nice_of, policy_of, tid};
    use super::*;

    #[test]
    fn a_thread_lowers_its_own_nice_value_and_no_others() {
        let caller = tid();
        let caller_nice = nice_of(caller);
        std::thread::spawn(move || {
            let me = tid();
            let start = nice_of(me);
            lower(BulkPriority::Nice(0));
            lower(BulkPriority::Normal);
            assert!(!lowered());
            lower(BulkPriority::Nice(5));
            let expected = (start + 5).min(i32::from(LOWEST));
            assert_eq!(nice_of(me), expected);
            assert_eq!(nice(), Some(expected));
            assert_eq!(policy_of(me), 0);
            assert!(lowered() || start == i32::from(LOWEST));
            // Once only.
            lower(BulkPriority::Nice(5));
            lower(BulkPriority::Idle);
            assert_eq!(nice_of(me), expected);
            assert_eq!(policy_of(me), 0);
            // The other threads keep theirs.
            assert_eq!(nice_of(caller), caller_nice);
            if restore() {
                assert_eq!(nice_of(me), start);
                assert!(!lowered());
            } else {
                assert!(lowered());
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_moves_itself_to_sched_idle_and_no_other() {
        let caller = tid();
        let caller_policy = policy_of(caller);
        std::thread::spawn(move || {
            let me = tid();
            let start = nice_of(me);
            lower(BulkPriority::Idle);
            assert_eq!(policy_of(me), SCHED_IDLE);
            assert!(lowered());
            assert_eq!(policy_of(caller), caller_policy);
            // Once only: a nice value on top does not apply.
            let during = nice_of(me);
            lower(BulkPriority::Nice(5));
            assert_eq!(nice_of(me), during);
            if restore() {
                assert_eq!(policy_of(me), 0);
                assert_eq!(nice_of(me), start);
                assert!(!lowered());
            } else {
                assert_eq!(policy_of(me), SCHED_IDLE);
                assert!(lowered());
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn work_runs_lowered_and_the_priority_comes_back_where_it_may() {
        std::thread::spawn(|| {
            let me = tid();
            let start = nice_of(me);
            let during = lowered_while(BulkPriority::Nice(3), || nice_of(me));
            if can_raise() {
                assert_eq!(during, (start + 3).min(i32::from(LOWEST)));
            } else {
                assert_eq!(during, start);
            }
            assert_eq!(nice_of(me), start);
            let during = lowered_while(BulkPriority::Idle, || policy_of(me));
            assert_eq!(during, if can_raise() { SCHED_IDLE } else { 0 });
            assert_eq!((nice_of(me), policy_of(me)), (start, 0));
            assert!(!lowered());
            assert_eq!(lowered_while(BulkPriority::Nice(0), || nice_of(me)), start);
            assert_eq!(lowered_while(BulkPriority::Normal, || policy_of(me)), 0);
        })
        .join()
        .unwrap();
    }
}
