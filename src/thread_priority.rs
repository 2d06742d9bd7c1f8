//! The OS scheduling priority of threads doing bulk work (rendering large results, the
//! SQLite work of statements that load many rows): such a thread lowers its own priority
//! (Linux: raises its nice value by `limits.bulk_work_nice`) so that, on a busy machine, the
//! threads serving small calls — the async workers, the SQLite threads of small statements —
//! get the cores first. Priority is per thread on Linux; elsewhere this does nothing.
//!
//! A thread that has lowered its priority may not be allowed to raise it again (that needs
//! `CAP_SYS_NICE` or `RLIMIT_NICE`): [`restore`] says whether it could, and a pooled thread
//! that could not ends instead of serving a small call at the lowered priority.

use std::cell::Cell;
use std::sync::OnceLock;

thread_local! {
    /// The nice value this thread had before [`lower`] raised it.
    static BEFORE: Cell<Option<i32>> = const { Cell::new(None) };
}

/// The highest nice value (the lowest priority) Linux has.
pub const LOWEST: u8 = 19;

/// By how many nice steps bulk work lowers its threads' priority unless configured
/// (`limits.bulk_work_nice`).
pub const DEFAULT_LOWER_BY: u8 = 10;

/// Lowers this thread's priority by `by` nice steps (up to nice [`LOWEST`]), once: a thread
/// already lowered stays as it is. `by` of 0 does nothing.
pub fn lower(by: u8) {
    if by == 0 || BEFORE.get().is_some() {
        return;
    }
    if let Some(now) = nice() {
        let target = now.saturating_add(i32::from(by)).min(i32::from(LOWEST));
        if target != now && set_nice(target) {
            BEFORE.set(Some(now));
        }
    }
}

/// Whether this thread runs at its original priority: it was never lowered, or it was and
/// could be raised back now.
pub fn restore() -> bool {
    match BEFORE.get() {
        None => true,
        Some(before) => {
            let restored = set_nice(before);
            if restored {
                BEFORE.set(None);
            }
            restored
        }
    }
}

/// Whether this process may raise a thread's priority back after lowering it (found once,
/// on a short-lived thread): where it may not, threads that must return to their priority
/// (e.g. async workers) are never lowered.
pub fn can_raise() -> bool {
    static CAN: OnceLock<bool> = OnceLock::new();
    *CAN.get_or_init(|| {
        std::thread::Builder::new()
            .name("querygate-nice".to_owned())
            .spawn(|| {
                lower(1);
                lowered() && restore()
            })
            .ok()
            .and_then(|probe| probe.join().ok())
            .unwrap_or(false)
    })
}

/// Runs `work` at a priority lowered by `by` steps, then raises it back, if this process
/// may raise it back ([`can_raise`]); else at this thread's priority.
pub fn lowered_while<T>(by: u8, work: impl FnOnce() -> T) -> T {
    if by == 0 || lowered() || !can_raise() {
        return work();
    }
    lower(by);
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

#[cfg(all(test, target_os = "linux"))]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// This thread's id.
    pub(crate) fn tid() -> i32 {
        rustix::thread::gettid().as_raw_nonzero().get()
    }

    /// The nice value of this process's thread `tid` as the kernel shows it (field 19 of
    /// `/proc/self/task/<tid>/stat`).
    pub(crate) fn nice_of(tid: i32) -> i32 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        // The command name (field 2) is in parentheses and may hold spaces.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after.split(' ').nth(16).unwrap().parse().unwrap()
    }

    #[test]
    fn a_thread_lowers_its_own_priority_and_no_other() {
        let caller = tid();
        let caller_nice = nice_of(caller);
        std::thread::spawn(move || {
            let me = tid();
            let start = nice_of(me);
            lower(0);
            assert!(!lowered());
            lower(5);
            let expected = (start + 5).min(i32::from(LOWEST));
            assert_eq!(nice_of(me), expected);
            assert_eq!(nice(), Some(expected));
            assert!(lowered() || start == i32::from(LOWEST));
            // Once only.
            lower(5);
            assert_eq!(nice_of(me), expected);
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
    fn work_runs_lowered_and_the_priority_comes_back_where_it_may() {
        std::thread::spawn(|| {
            let me = tid();
            let start = nice_of(me);
            let during = lowered_while(3, || nice_of(me));
            if can_raise() {
                assert_eq!(during, (start + 3).min(i32::from(LOWEST)));
            } else {
                assert_eq!(during, start);
            }
            assert_eq!(nice_of(me), start);
            assert!(!lowered());
            assert_eq!(lowered_while(0, || nice_of(me)), start);
        })
        .join()
        .unwrap();
    }
}
