//! CPU-heavy work of large results — turning thousands of rows into JSON values, rendering
//! their text — runs off the async workers, on a small pool of dedicated threads
//! ([`threads`] of them, first come, first served). An async worker busy for milliseconds
//! with one large result would hold up every small call queued behind it on that worker;
//! and few rendering threads leave cores for the workers and the SQLite threads. The
//! threads live as long as the process: each allocates from one malloc arena, where
//! tokio's blocking pool would spread large results over an arena per short-lived thread
//! and keep far more memory resident. Results under [`INLINE_CELLS`] values stay on the
//! worker: the hop to another thread costs more than they take. The render threads run at
//! a lower OS priority (`limits.bulk_work_priority`, see [`crate::thread_priority`]), so that on
//! a busy machine the threads serving small calls get the cores first.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tokio::sync::oneshot;

/// Results with fewer values (rows × columns) than this are rendered where they are.
pub(crate) const INLINE_CELLS: usize = 2048;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// How many threads work on large results: half the cores the process may use, at least 1.
pub(crate) fn threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .div_ceil(2)
}

/// The render threads of one MCP server, started on first use and ended when it is dropped
/// (their queue closes).
#[derive(Debug, Default)]
pub(crate) struct RenderPool {
    /// The threads' queue (`None`: no thread could start).
    queue: OnceLock<Option<Mutex<mpsc::Sender<Job>>>>,
}

impl RenderPool {
    fn queue(&self) -> Option<&Mutex<mpsc::Sender<Job>>> {
        self.queue
            .get_or_init(|| {
                let (sender, receiver) = mpsc::channel::<Job>();
                let receiver = Arc::new(Mutex::new(receiver));
                let mut started = 0;
                for index in 0..threads() {
                    let receiver = receiver.clone();
                    let spawned = std::thread::Builder::new()
                        .name(format!("querygate-render-{index}"))
                        .spawn(move || serve(&receiver));
                    match spawned {
                        Ok(_) => started += 1,
                        Err(err) => tracing::warn!(error = %err, "cannot start a render thread"),
                    }
                }
                (started > 0).then(|| Mutex::new(sender))
            })
            .as_ref()
    }

    /// Runs `work` over a result of `cells` values: inline when it is small, else on a
    /// render thread whose priority is lowered as `priority` says first (once: it stays
    /// lowered).
    pub(crate) async fn run<T, F>(
        &self,
        cells: usize,
        priority: crate::thread_priority::BulkPriority,
        work: F,
    ) -> Result<T, OffloadError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        if cells < INLINE_CELLS {
            return Ok(work());
        }
        let queue = self
            .queue()
            .ok_or(OffloadError("no render thread could be started"))?;
        let (reply, result) = oneshot::channel();
        let job: Job = Box::new(move || {
            crate::thread_priority::lower(priority);
            let _ = reply.send(work());
        });
        queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(job)
            .map_err(|_| OffloadError("the render threads have stopped"))?;
        result
            .await
            .map_err(|_| OffloadError("the render work stopped before it finished"))
    }
}

fn serve(receiver: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let job = receiver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recv();
        let Ok(job) = job else {
            return;
        };
        // A job that panics loses only its own result (its caller sees the reply dropped).
        let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
    }
}

/// The work on a render thread did not finish (it panicked, or no thread could start).
#[derive(Debug, thiserror::Error)]
#[error("rendering the result failed: {0}")]
pub(crate) struct OffloadError(&'static str);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thread_priority::BulkPriority;

    #[tokio::test]
    async fn small_work_stays_on_the_caller_and_large_work_moves() {
        let pool = RenderPool::default();
        let here = std::thread::current().id();
        let small = pool
            .run(10, BulkPriority::Normal, move || {
                std::thread::current().id()
            })
            .await
            .unwrap();
        assert_eq!(small, here);
        let large = pool
            .run(INLINE_CELLS, BulkPriority::Normal, || {
                std::thread::current().name().map(str::to_owned)
            })
            .await
            .unwrap();
        assert!(large.unwrap().starts_with("querygate-render-"));
        // A job that panics fails alone; the threads go on.
        let failed = pool
            .run(INLINE_CELLS, BulkPriority::Normal, || -> usize {
                panic!("boom")
            })
            .await;
        assert!(failed.is_err());
        assert_eq!(
            pool.run(INLINE_CELLS, BulkPriority::Normal, || 7)
                .await
                .unwrap(),
            7
        );
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn large_work_runs_at_a_lower_priority_and_small_work_keeps_the_callers() {
        let pool = RenderPool::default();
        use crate::thread_priority::probe::{nice_of, tid};
        let caller = nice_of(tid());
        let small = pool
            .run(10, BulkPriority::Nice(5), || nice_of(tid()))
            .await
            .unwrap();
        assert_eq!(small, caller);
        // Every large job runs at the lowered priority, whichever render thread takes it.
        for _ in 0..threads() * 4 {
            let nice = pool
                .run(INLINE_CELLS, BulkPriority::Nice(5), || nice_of(tid()))
                .await
                .unwrap();
            assert!(
                nice >= (caller + 5).min(i32::from(crate::thread_priority::LOWEST)),
                "a render thread at nice {nice}, the caller at {caller}"
            );
        }
    }
}
