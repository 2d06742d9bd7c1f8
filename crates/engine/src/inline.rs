//! Planning on the calling (async) thread when everything it needs is at hand.
//!
//! Planning a statement over resources whose models and documents are cached is a few tens
//! of microseconds of CPU; handing it to a blocking thread costs two thread switches, which
//! on a busy server cost more than the work. [`cached_only`] runs work with every step that
//! would read a file (a document past its recheck interval, a registry folder) or build a
//! resource model refused on this thread: such a step calls [`check`] (or [`refused`]) and
//! fails, and the whole run is reported as wanting a thread, to be done again on one.

use std::cell::Cell;

use super::error::{Error, Result};

thread_local! {
    /// Whether this thread is inside [`cached_only`], and whether a step was refused there.
    static MODE: Cell<Mode> = const { Cell::new(Mode::Free) };
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Files may be read.
    Free,
    /// Inside [`cached_only`]; `wanted`: a step was refused.
    CachedOnly { wanted: bool },
}

/// Runs `work` with file reads and model builds refused ([`refused`] is true); its result,
/// or None when a step was refused (the work is then to be run again, off the async
/// threads).
pub(crate) fn cached_only<T>(work: impl FnOnce() -> T) -> Option<T> {
    struct Restore(Mode);
    impl Drop for Restore {
        fn drop(&mut self) {
            MODE.with(|mode| mode.set(self.0));
        }
    }
    let outer = MODE.with(|mode| mode.replace(Mode::CachedOnly { wanted: false }));
    let _restore = Restore(outer);
    let out = work();
    let wanted = MODE.with(|mode| mode.get()) == Mode::CachedOnly { wanted: true };
    (!wanted).then_some(out)
}

/// Whether a step that would read a file or build a model must not run here (inside
/// [`cached_only`]); a refusal is recorded, so the run's result is discarded.
pub(crate) fn refused() -> bool {
    MODE.with(|mode| match mode.get() {
        Mode::Free => false,
        Mode::CachedOnly { .. } => {
            mode.set(Mode::CachedOnly { wanted: true });
            true
        }
    })
}

/// [`refused`] as an error to return (never seen: [`cached_only`] discards the run).
pub(crate) fn check() -> Result<()> {
    if refused() {
        return Err(Error::internal(
            "this step reads files and is run off the async threads",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_step_discards_the_run_and_only_inside_it() {
        assert!(!refused());
        assert_eq!(cached_only(|| 1), Some(1));
        assert!(cached_only(|| check().map(|()| 2)).is_none());
        // A refusal inside does not leak out.
        assert!(!refused());
        assert!(check().is_ok());
        // Nested: the inner run's refusal discards the inner run; the outer one sees the
        // mode it had.
        let outer = cached_only(|| {
            let inner = cached_only(refused);
            (inner, refused())
        });
        assert_eq!(outer, None);
        assert_eq!(cached_only(|| cached_only(|| 3)), Some(Some(3)));
    }
}
