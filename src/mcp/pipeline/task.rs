//! The task step: a call submitted as an MCP task (see `crate::tasks`) becomes one here,
//! after the gate, the quotas and admission let it through and before its intent record:
//! its task is stored and the client gets the task while the call goes on. A call that
//! is no task passes untouched.

use std::sync::Arc;

use tower::{Service, ServiceExt as _};

use super::step::{Step, StepFuture};
use super::{Call, CallError, ToolReply};
use crate::tasks::TaskStart;

/// Starts the task of a submitted call.
pub(super) struct TaskStep;

impl Step for TaskStep {
    fn run<S>(self: Arc<Self>, inner: S, call: Call) -> StepFuture
    where
        S: Service<Call, Response = ToolReply, Error = CallError> + Send + 'static,
        S::Future: Send,
    {
        let Some(start) = TaskStart::current() else {
            return Box::pin(inner.oneshot(call));
        };
        Box::pin(async move {
            match start.begin(&call).await {
                Ok(()) => inner.oneshot(call).await,
                Err(refused) => Ok(ToolReply::allowed(refused)),
            }
        })
    }
}
