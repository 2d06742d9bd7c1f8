//! The threads statements too large for the calling thread run their SQLite work on, kept
//! for reuse: starting an OS thread costs about as much as a small statement's own SQLite
//! work. A thread whose statement has ended waits for the next one; at most [`MAX_IDLE`]
//! wait, the others end. A thread whose bulk statement lowered its priority waits for the
//! next one only once it is back at its own priority (raising it may not be allowed: then
//! it ends).

use std::sync::Mutex;
use std::sync::mpsc;

/// The work of one statement.
pub(super) type Work = Box<dyn FnOnce() + Send + 'static>;

/// Most threads kept waiting for a statement.
const MAX_IDLE: usize = 16;

/// Waiting threads, each reached through its channel.
static IDLE: Mutex<Vec<mpsc::Sender<Work>>> = Mutex::new(Vec::new());

/// Runs `work` on a waiting thread, or on a new one when none waits.
pub(super) fn run(work: Work) -> std::io::Result<()> {
    let mut work = work;
    loop {
        let waiting = IDLE.lock().ok().and_then(|mut idle| idle.pop());
        let Some(thread) = waiting else {
            break;
        };
        // A thread that has gone (it cannot, short of a panic) hands the work back.
        match thread.send(work) {
            Ok(()) => return Ok(()),
            Err(mpsc::SendError(back)) => work = back,
        }
    }
    std::thread::Builder::new()
        .name("querygate-sqlite".to_owned())
        .spawn(move || serve(work))
        .map(drop)
}

fn serve(first: Work) {
    let (sender, receiver) = mpsc::channel::<Work>();
    let mut work = first;
    loop {
        work();
        if !crate::thread_priority::restore() {
            return;
        }
        {
            let Ok(mut idle) = IDLE.lock() else {
                return;
            };
            if idle.len() >= MAX_IDLE {
                return;
            }
            idle.push(sender.clone());
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

    #[test]
    fn threads_are_reused_after_their_work() {
        // Other tests take threads from the same pool meanwhile: most of 20 statements in a
        // row still find a waiting thread.
        let (tx, rx) = mpsc::channel();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..20 {
            let next = tx.clone();
            run(Box::new(move || {
                next.send(std::thread::current().id()).unwrap()
            }))
            .unwrap();
            seen.insert(rx.recv().unwrap());
            // The thread parks itself just after its work.
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(seen.len() < 10, "{} threads for 20 works", seen.len());
    }
}
