//! What the engine reports about its upstream requests to whoever is interested (metrics),
//! without knowing who that is: the composition root hands an [`UpstreamObserver`] to
//! `Engine::with_observer`.

use std::time::Duration;

/// How one upstream request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamResult {
    /// The upstream answered with this HTTP status (its body read).
    Status(u16),
    /// The request or the body read timed out.
    Timeout,
    /// No usable answer: connection failure, body too large, a request that could not be
    /// built.
    Error,
}

/// Told about every request the engine sends to a provider's API (each page and each retry
/// attempt is one request).
pub trait UpstreamObserver: Send + Sync + std::fmt::Debug {
    /// `provider` is an installed provider's name (never text from a statement); `elapsed`
    /// covers sending the request and reading the whole body.
    fn upstream_request(&self, provider: &str, result: UpstreamResult, elapsed: Duration);
}
