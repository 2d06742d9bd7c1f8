//! The stop sequence of a listener, as the accept loop and `/readyz` see it:
//!
//! 1. [`Drain::begin`]: `/readyz` answers 503 and every response carries
//!    `Connection: close` (a client never has a keep-alive connection closed under a request
//!    it is sending); new connections are still accepted.
//! 2. [`Drain::close`]: the listener closes; connections end once their last response is
//!    written, or when their client closes them, or when they have been idle for
//!    `server.header_read_timeout` (as at any time).
//! 3. [`Drain::cut`]: the deadline: what is still open is ended.
//!
//! The composition root ([`crate::app`]) moves through the steps; [`super::server::serve`]
//! follows them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;

/// One listener's stop sequence; clones share it.
#[derive(Clone, Debug, Default)]
pub struct Drain {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    draining: AtomicBool,
    closed: CancellationToken,
    cut: CancellationToken,
}

impl Drain {
    /// A listener that is serving.
    pub fn new() -> Self {
        Drain::default()
    }

    /// Step 1: not ready any more; responses close their connections.
    pub fn begin(&self) {
        self.inner.draining.store(true, Ordering::SeqCst);
    }

    /// Step 2: stop accepting connections (implies [`Drain::begin`]).
    pub fn close(&self) {
        self.begin();
        self.inner.closed.cancel();
    }

    /// Step 3: end the connections still open (implies [`Drain::close`]).
    pub fn cut(&self) {
        self.close();
        self.inner.cut.cancel();
    }

    /// Whether the stop sequence has begun.
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::SeqCst)
    }

    /// Resolves once the listener is to close.
    pub async fn closed(&self) {
        self.inner.closed.cancelled().await;
    }

    /// Resolves at the deadline.
    pub async fn cut_off(&self) {
        self.inner.cut.cancelled().await;
    }
}
