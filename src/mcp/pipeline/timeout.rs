//! Ends a call that runs longer than `server.call_timeout` with a tool error. The call's
//! future is dropped, which stops its upstream requests and SQLite work; a call that may
//! already have sent a write says that its outcome is unknown.

use std::sync::Arc;
use std::time::Duration;

use tower::{Service, ServiceExt as _};

use super::step::{Step, StepFuture, StepLayer};
use super::{Call, CallError, ToolOutcome, ToolReply};
use crate::code::Code;

/// `server.call_timeout` around the rest of the pipeline.
#[derive(Clone, Copy)]
pub(super) struct CallTimeout {
    timeout: Duration,
}

impl CallTimeout {
    pub(super) fn layer(timeout: Duration) -> StepLayer<Self> {
        StepLayer::new(CallTimeout { timeout })
    }
}

impl Step for CallTimeout {
    fn run<S>(self: Arc<Self>, inner: S, call: Call) -> StepFuture
    where
        S: Service<Call, Response = ToolReply, Error = CallError> + Send + 'static,
        S::Future: Send,
    {
        // A task is bounded by the operation's own wait (upstream.await_operations).
        if crate::tasks::in_task() {
            return Box::pin(inner.oneshot(call));
        }
        let name = call.tool();
        let side_effects = call.has_side_effects();
        let timeout = self.timeout;
        let mut call = call;
        // The engine does not start a paced request it could not finish in time.
        call.cx.deadline = Some(tokio::time::Instant::now() + timeout);
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
