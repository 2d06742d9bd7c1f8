//! Stops a call nobody waits for: when the call's cancellation token fires (the HTTP client
//! disconnected, or the client sent `notifications/cancelled`), the call's future is
//! dropped, which stops its upstream requests, its pagination and its SQLite work (the
//! engine's futures do no work once dropped). The audit layer above still records the
//! outcome: `call.cancelled`, or `call.outcome_unknown` for a call that may already have
//! sent a write.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower::{Layer, Service, ServiceExt as _};

use super::{CallError, PreparedCall, ToolOutcome, ToolReply};
use crate::code::Code;

/// Puts cancellation around a service.
#[derive(Clone, Copy)]
pub(super) struct CancelLayer;

impl<S> Layer<S> for CancelLayer {
    type Service = Cancel<S>;

    fn layer(&self, inner: S) -> Cancel<S> {
        Cancel { inner }
    }
}

/// Cancellation around `S`.
#[derive(Clone)]
pub(super) struct Cancel<S> {
    inner: S,
}

impl<S> Service<PreparedCall> for Cancel<S>
where
    S: Service<PreparedCall, Response = ToolReply, Error = CallError> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = ToolReply;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<ToolReply, CallError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: PreparedCall) -> Self::Future {
        let name = call.tool();
        let side_effects = call.has_side_effects();
        let cancel = call.cancel.clone();
        // Keep the service that was polled ready; the clone waits for the next call.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            tokio::select! {
                biased;
                result = inner.oneshot(call) => result,
                () = cancel.cancelled() => Ok(ToolReply::allowed(cancelled(name, side_effects))),
            }
        })
    }
}

/// The outcome of a call stopped because nobody waits for it.
pub(super) fn cancelled(name: &str, side_effects: bool) -> ToolOutcome {
    if side_effects {
        ToolOutcome::error(
            Code::CallOutcomeUnknown,
            format!(
                "tool '{name}' was cancelled by the client and stopped; a request that changes something may already have been sent, so the outcome is unknown: check the provider before trying again"
            ),
        )
    } else {
        ToolOutcome::error(
            Code::CallCancelled,
            format!(
                "tool '{name}' was cancelled by the client; it was stopped and nothing more will be done for this call"
            ),
        )
    }
}
