//! The threads statements too large for the calling thread run their SQLite work on, kept
//! for reuse: starting an OS thread costs about as much as a small statement's own SQLite
//! work. A thread whose statement has ended waits for the next one; at most [`MAX_IDLE`]
//! wait, the others end. A thread whose bulk statement lowered its priority waits for the
//! next one only once it is back at its own priority (raising it may not be allowed: then
//! it ends). The pool belongs to its engine: when the engine is dropped, the waiting threads
//! end.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// The work of one statement.
pub(super) type Work = Box<dyn FnOnce() + Send + 'static>;

/// Most threads kept waiting for a statement.
const MAX_IDLE: usize = 16;

/// An engine's SQLite threads: the waiting ones, each reached through its channel.
#[derive(Debug, Default)]
pub(crate) struct SqliteThreads {
    idle: Mutex<Vec<mpsc::Sender<Work>>>,
}

impl SqliteThreads {
    /// Runs `work` on a waiting thread, or on a new one when none waits.
    pub(super) fn run(self: &Arc<Self>, work: Work) -> std::io::Result<()> {
        let mut work = work;
        loop {
            let waiting = self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            let Some(thread) = waiting else {
                break;
            };
            // A thread that has gone (it cannot, short of a panic) hands the work back.
            match thread.send(work) {
                Ok(()) => return Ok(()),
                Err(mpsc::SendError(back)) => work = back,
            }
        }
        let pool = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("querygate-sqlite".to_owned())
            .spawn(move || serve(&pool, work))
            .map(drop)
    }

    /// How many threads wait for a statement.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

fn serve(pool: &Weak<SqliteThreads>, first: Work) {
    let mut work = first;
    loop {
        work();
        if !crate::thread_priority::restore() {
            return;
        }
        // The pool holds the only sender of the channel the thread waits on: when the pool
        // is dropped, `recv` fails and the thread ends.
        let (sender, receiver) = mpsc::channel::<Work>();
        {
            let Some(pool) = pool.upgrade() else {
                return;
            };
            let mut idle = pool.idle.lock().unwrap_or_else(PoisonError::into_inner);
            if idle.len() >= MAX_IDLE {
                return;
            }
            idle.push(sender);
        }
        match receiver.recv() {
            Ok(next) => work = next,
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// Waits (bounded) until `pool` has `n` waiting threads.
    fn until_waiting(pool: &SqliteThreads, n: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while pool.waiting() != n {
            assert!(std::time::Instant::now() < deadline, "never {n} waiting");
            std::thread::yield_now();
        }
    }

    #[test]
    fn one_thread_serves_statements_one_after_another() {
        let pool = Arc::new(SqliteThreads::default());
        let (tx, rx) = mpsc::channel();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..20 {
            let next = tx.clone();
            pool.run(Box::new(move || {
                next.send(std::thread::current().id()).unwrap()
            }))
            .unwrap();
            seen.insert(rx.recv().unwrap());
            until_waiting(&pool, 1);
        }
        assert_eq!(
            seen.len(),
            1,
            "{} threads for 20 statements in a row",
            seen.len()
        );
    }

    /// Sends on its channel when dropped: kept in a thread-local, at the thread's end.
    struct OnThreadEnd(mpsc::Sender<()>);

    impl Drop for OnThreadEnd {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }

    thread_local! {
        static END: std::cell::RefCell<Option<OnThreadEnd>> = const { std::cell::RefCell::new(None) };
    }

    #[test]
    fn the_waiting_threads_end_with_their_pool() {
        let pool = Arc::new(SqliteThreads::default());
        let (tx, ended) = mpsc::channel();
        pool.run(Box::new(move || {
            END.with(|end| *end.borrow_mut() = Some(OnThreadEnd(tx)));
        }))
        .unwrap();
        until_waiting(&pool, 1);
        assert!(
            ended.try_recv().is_err(),
            "the thread ended while its pool lives"
        );
        drop(pool);
        ended
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the waiting thread did not end with its pool");
    }
}
