//! What a page's body waits for before it is read. A statement whose pages are about to pass
//! the bytes that need a bulk permit (see `eval`) waits for the permit when a page's headers
//! have come and its body has not been read: the body stays in the connection (the upstream
//! is held back by TCP) instead of in this process, and the connection stays out of the idle
//! pool, where it would keep a read buffer of the body's size.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A wait for a body's admission.
pub(crate) type AdmissionWait<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Decides whether a response body may be read now.
pub(crate) trait BodyAdmission: Sync + std::fmt::Debug {
    /// `None` when `bytes` more of response body may be read at once; otherwise the wait
    /// after which they may.
    fn admit(&self, bytes: u64) -> Option<AdmissionWait<'_>>;
}

/// One request's admission: the decision its body asks (until it has waited once), and the
/// time it has waited.
#[derive(Debug)]
pub(super) struct Admitting<'a> {
    asks: Option<&'a dyn BodyAdmission>,
    /// Time spent waiting for the admission.
    pub(super) waited: Duration,
}

impl<'a> Admitting<'a> {
    /// A request whose body asks `asks` (`None`: read at once).
    pub(super) fn new(asks: Option<&'a dyn BodyAdmission>) -> Self {
        Admitting {
            asks,
            waited: Duration::ZERO,
        }
    }

    /// Whether the body may have to wait.
    pub(super) fn asks(&self) -> bool {
        self.asks.is_some()
    }

    /// Reads the body at once (an unsuccessful answer's body is not loaded).
    pub(super) fn skip(&mut self) {
        self.asks = None;
    }

    /// Waits until `bytes` of body may be read, at most `cap`; once it has waited, it asks no
    /// more (a wait that ran out is not repeated for the rest of the body). The time waited.
    pub(super) async fn before_reading(&mut self, bytes: u64, cap: Duration) -> Duration {
        let Some(wait) = self.asks.and_then(|asks| asks.admit(bytes)) else {
            return Duration::ZERO;
        };
        self.asks = None;
        let waiting = tokio::time::Instant::now();
        let _ = tokio::time::timeout(cap, wait).await;
        let waited = waiting.elapsed();
        self.waited += waited;
        waited
    }
}
