//! Keeps a tool result's counted bytes (`limits.max_response_bytes_in_flight`) until its
//! HTTP response has been sent: each `/mcp` request gets an empty [`ResponseSlot`] in its
//! extensions ([`give_slot`]), the MCP handler leaves the result's hold in it, and the hold then lives as
//! long as the unsent part of the response body. The body is handed to hyper in pieces of
//! [`PIECE`] bytes, so hyper asks for the next piece only once it has written out the ones
//! before: the hold is released when the last piece has been taken (at most one piece
//! before the client has it all), or when the connection is dropped.
//!
//! rmcp turns a result into its response body (serializes it, then drops it) on the async
//! worker that polls the request; for a result of [`BLOCKING_BYTES`] or more that takes
//! milliseconds, during which the other tasks queued on that worker would wait. Once the
//! handler has left such a result's hold in the slot, the request is polled inside
//! [`tokio::task::block_in_place`]: the worker's queue moves to another thread meanwhile.
//! Where the process may raise a thread's priority back (see
//! [`crate::thread_priority::can_raise`]), that poll also runs at the priority of bulk work
//! (`limits.bulk_work_priority`).

use std::future::Future;
use std::ops::DerefMut;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Frame, SizeHint};

use crate::mcp::pipeline::response_bytes::{HeldBytes, ResponseSlot};

/// The largest piece of a held body handed to hyper at once.
const PIECE: usize = 64 * 1024;

/// Results of at least this many bytes are turned into their response off the async
/// worker's queue (see the module's documentation).
const BLOCKING_BYTES: usize = 256 * 1024;

/// Puts an empty slot into `request` for the MCP handler to leave a result's hold in.
pub(super) fn give_slot(request: &mut Request) -> ResponseSlot {
    let slot = ResponseSlot::default();
    request.extensions_mut().insert(slot.clone());
    slot
}

/// `response` with the hold left in `slot` (if any) tied to its body.
pub(super) fn hold_until_sent(slot: &ResponseSlot, response: Response) -> Response {
    match slot.take() {
        None => response,
        Some(held) => response.map(|inner| {
            Body::new(HeldBody {
                inner,
                pending: Bytes::new(),
                held: Some(held),
            })
        }),
    }
}

/// `request` (rmcp's handling of one request), polled inside `block_in_place` once a large
/// result's hold is in `slot` (on a multi-threaded runtime; elsewhere as is).
pub(super) fn off_queue_when_large<P>(
    slot: &ResponseSlot,
    request: Pin<P>,
) -> impl Future<Output = <P::Target as Future>::Output>
where
    P: DerefMut<Target: Future> + Unpin,
{
    LargeOffQueue {
        inner: request,
        slot: slot.clone(),
        may_block: tokio::runtime::Handle::try_current().is_ok_and(|runtime| {
            runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
        }),
    }
}

/// A request's future, polled inside `block_in_place` once a large result's hold is in
/// the slot.
struct LargeOffQueue<P> {
    inner: Pin<P>,
    slot: ResponseSlot,
    may_block: bool,
}

impl<P> Future for LargeOffQueue<P>
where
    P: DerefMut<Target: Future> + Unpin,
{
    type Output = <P::Target as Future>::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (bytes, priority) = this.slot.bytes();
        if this.may_block && bytes >= BLOCKING_BYTES {
            tokio::task::block_in_place(|| {
                crate::thread_priority::lowered_while(priority, || this.inner.as_mut().poll(cx))
            })
        } else {
            this.inner.as_mut().poll(cx)
        }
    }
}

/// A response body that keeps its hold until its last piece has been taken.
struct HeldBody {
    inner: Body,
    /// What is left of the inner body's current frame.
    pending: Bytes,
    held: Option<HeldBytes>,
}

impl http_body::Body for HeldBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        loop {
            if !this.pending.is_empty() {
                let piece = this.pending.split_to(this.pending.len().min(PIECE));
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.pending = data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(None) => {
                    this.held = None;
                    return Poll::Ready(None);
                }
                other => return other,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        // The same bytes, in smaller pieces.
        let inner = self.inner.size_hint();
        let pending = self.pending.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(pending));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(pending));
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::pipeline::response_bytes::ResponseBytes;
    use http_body::Body as _;
    use http_body_util::BodyExt as _;

    #[tokio::test]
    async fn the_hold_lasts_until_the_last_piece_is_taken() {
        let count = ResponseBytes::new(1 << 20, 1 << 20);
        let data = Bytes::from(vec![7_u8; PIECE * 2 + 5]);
        let mut body = HeldBody {
            inner: Body::from(data.clone()),
            pending: Bytes::new(),
            held: Some(count.hold("a", data.len())),
        };
        assert_eq!(body.size_hint().exact(), Some(data.len() as u64));
        let mut pieces = Vec::new();
        while let Some(frame) = body.frame().await {
            let piece = frame.unwrap().into_data().unwrap();
            assert!(piece.len() <= PIECE);
            pieces.push(piece);
            if pieces.len() < 3 {
                assert_eq!(count.in_flight("a").1, data.len(), "still held");
            }
        }
        assert_eq!(pieces.concat(), data.to_vec());
        assert_eq!(count.in_flight("a"), (0, 0));
    }

    /// Polls `LargeOffQueue` once, with a hold of `bytes` in its slot, on a runtime of one
    /// worker; that poll blocks its thread until another task has run (up to `wait`):
    /// whether one could.
    fn another_task_ran_during_the_poll(bytes: usize, wait: std::time::Duration) -> bool {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::{Duration, Instant};

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        runtime.block_on(async move {
            let count = ResponseBytes::new(1 << 30, 1 << 30);
            let slot = ResponseSlot::default();
            slot.keep(count.hold("a", bytes));
            let ran = Arc::new(AtomicBool::new(false));
            let blocking = {
                let ran = ran.clone();
                async move {
                    // Blocks the thread, as serializing a large result does.
                    let until = Instant::now() + wait;
                    while !ran.load(Ordering::SeqCst) && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    ran.load(Ordering::SeqCst)
                }
            };
            let request = tokio::spawn(LargeOffQueue {
                inner: Box::pin(blocking),
                slot,
                may_block: true,
            });
            // Queued behind the request on the only worker.
            let other = tokio::spawn(async move { ran.store(true, Ordering::SeqCst) });
            let ran = request.await.unwrap();
            other.await.unwrap();
            ran
        })
    }

    #[test]
    fn a_large_result_is_finished_off_the_workers_queue() {
        let wait = std::time::Duration::from_secs(10);
        assert!(another_task_ran_during_the_poll(BLOCKING_BYTES, wait));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_result_is_finished_at_the_bulk_priority_where_it_can_come_back() {
        use crate::thread_priority::probe::{nice_of, tid};
        // The runtime's threads start at this thread's priority.
        let base = nice_of(tid());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let (thread, during) = runtime.block_on(async {
            let count = ResponseBytes::with_bulk_priority(
                1 << 30,
                1 << 30,
                crate::thread_priority::BulkPriority::Nice(4),
            );
            let slot = ResponseSlot::default();
            slot.keep(count.hold("a", BLOCKING_BYTES));
            tokio::spawn(LargeOffQueue {
                inner: Box::pin(async { (tid(), nice_of(tid())) }),
                slot,
                may_block: true,
            })
            .await
            .unwrap()
        });
        if crate::thread_priority::can_raise() {
            assert_eq!(
                during,
                (base + 4).min(i32::from(crate::thread_priority::LOWEST))
            );
        } else {
            assert_eq!(during, base);
        }
        // The thread (a worker of the runtime again, or one of its blocking threads) is back
        // at its priority.
        assert_eq!(nice_of(thread), base);
        drop(runtime);
    }

    #[test]
    fn a_small_result_is_finished_in_place() {
        // Nothing else runs on the one worker meanwhile: the wait ends by its deadline.
        let wait = std::time::Duration::from_millis(300);
        assert!(!another_task_ran_during_the_poll(BLOCKING_BYTES - 1, wait));
    }
}
