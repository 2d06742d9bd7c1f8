//! Ends a call that runs longer than `server.call_timeout` with a tool error. The call's
//! future is dropped, which stops its upstream requests and SQLite work; a call that may
//! already have sent a write says that its outcome is unknown.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tower::{Layer, Service, ServiceExt as _};

use super::{CallError, PreparedCall, ToolOutcome, ToolReply};
use crate::code::Code;

/// Puts the call timeout around a service.
#[derive(Clone, Copy)]
pub(super) struct CallTimeoutLayer {
    timeout: Duration,
}

impl CallTimeoutLayer {
    pub(super) fn new(timeout: Duration) -> Self {
        CallTimeoutLayer { timeout }
    }
}

impl<S> Layer<S> for CallTimeoutLayer {
    type Service = CallTimeout<S>;

    fn layer(&self, inner: S) -> CallTimeout<S> {
        CallTimeout {
            inner,
            timeout: self.timeout,
        }
    }
}

/// The timeout around `S`.
#[derive(Clone)]
pub(super) struct CallTimeout<S> {
    inner: S,
    timeout: Duration,
}

impl<S> Service<PreparedCall> for CallTimeout<S>
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
        let timeout = self.timeout;
        // Keep the service that was polled ready; the clone waits for the next call.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            match tokio::time::timeout(timeout, inner.oneshot(call)).await {
                Ok(result) => result,
                Err(_) => {
                    let limit = humantime::format_duration(timeout);
                    let outcome = if side_effects {
                        ToolOutcome::error(
                            Code::CallOutcomeUnknown,
                            format!(
                                "tool '{name}' did not finish within {limit} (server.call_timeout) and was stopped; a request that changes something may already have been sent, so the outcome is unknown: check the provider before trying again"
                            ),
                        )
                    } else {
                        ToolOutcome::error(
                            Code::CallTimeout,
                            format!(
                                "tool '{name}' did not finish within {limit} (server.call_timeout); it was stopped and nothing more will be done for this call"
                            ),
                        )
                    };
                    Ok(ToolReply::allowed(outcome))
                }
            }
        })
    }
}
