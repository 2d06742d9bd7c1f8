//! CPU-heavy work of large results — turning thousands of rows into JSON values, rendering
//! their text — runs off the async workers, on tokio's blocking threads, at most
//! [`threads`] at once. An async worker busy for milliseconds with one large result would
//! hold up every small call queued behind it on that worker; and capping the rendering
//! threads leaves cores for the workers and the SQLite threads. Results under
//! [`INLINE_CELLS`] values stay on the worker: the hop to another thread costs more than
//! they take.

use std::sync::OnceLock;

use tokio::sync::Semaphore;

/// Results with fewer values (rows × columns) than this are rendered where they are.
pub(crate) const INLINE_CELLS: usize = 2048;

/// How many large results are worked on at once: half the cores the process may use, at
/// least 1.
pub(crate) fn threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .div_ceil(2)
}

fn permits() -> &'static Semaphore {
    static PERMITS: OnceLock<Semaphore> = OnceLock::new();
    PERMITS.get_or_init(|| Semaphore::new(threads()))
}

/// The work on a blocking thread failed to finish (it panicked, or the runtime is
/// shutting down).
#[derive(Debug, thiserror::Error)]
#[error("rendering the result failed: {0}")]
pub(crate) struct OffloadError(String);

/// Runs `work` over a result of `cells` values: inline when it is small, else on a blocking
/// thread once one of the [`threads`] permits is free (first come, first served).
pub(crate) async fn run<T, F>(cells: usize, work: F) -> Result<T, OffloadError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if cells < INLINE_CELLS {
        return Ok(work());
    }
    let _permit = permits()
        .acquire()
        .await
        .map_err(|err| OffloadError(err.to_string()))?;
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| OffloadError(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn small_work_stays_on_the_caller_and_large_work_moves() {
        let here = std::thread::current().id();
        let small = run(10, move || std::thread::current().id()).await.unwrap();
        assert_eq!(small, here);
        let large = run(INLINE_CELLS, move || std::thread::current().id())
            .await
            .unwrap();
        assert_ne!(large, here);
        assert!(threads() >= 1);
    }
}
