//! Stops a call nobody waits for: when the call's cancellation token fires (the HTTP client
//! disconnected, or the client sent `notifications/cancelled`), the call's future is
//! dropped, which stops its upstream requests, its pagination and its SQLite work (the
//! engine's futures do no work once dropped). The audit layer above still records the
//! outcome: `call.cancelled`, or `call.outcome_unknown` for a call that may already have
//! sent a write.

use std::sync::Arc;

use tower::{Service, ServiceExt as _};

use super::step::{Step, StepFuture};
use super::{Call, CallError, ToolOutcome, ToolReply};
use crate::code::Code;

/// Cancellation around the rest of the pipeline.
#[derive(Clone, Copy)]
pub(super) struct Cancel;

impl Step for Cancel {
    fn run<S>(self: Arc<Self>, inner: S, call: Call) -> StepFuture
    where
        S: Service<Call, Response = ToolReply, Error = CallError> + Send + 'static,
        S::Future: Send,
    {
        let name = call.tool();
        let side_effects = call.has_side_effects();
        let cancel = call.cancel.clone();
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
