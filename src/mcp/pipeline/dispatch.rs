//! The innermost service: runs the tool on the prepared call and renders its result. No
//! tenant, format or policy logic here: `prepare` and the gate did that.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::Value;
use tower::Service;

use super::{CallError, PreparedCall, ToolOutcome, ToolReply};
use crate::config::Render;
use crate::mcp::Shared;
use crate::mcp::render;
use crate::mcp::tools::{Invocation, ToolError};

/// Runs tools.
#[derive(Clone)]
pub(super) struct Dispatch {
    shared: Arc<Shared>,
}

impl Dispatch {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        Dispatch { shared }
    }
}

impl Service<PreparedCall> for Dispatch {
    type Response = ToolReply;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<ToolReply, CallError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: PreparedCall) -> Self::Future {
        let shared = self.shared.clone();
        Box::pin(dispatch(shared, call))
    }
}

async fn dispatch(shared: Arc<Shared>, call: PreparedCall) -> Result<ToolReply, CallError> {
    let spec = call.spec;
    let render = call.render.clone().unwrap_or(Render::Markdown);
    let invocation = Invocation {
        shared,
        cx: call.cx,
        mode: call.mode,
        arguments: call.arguments,
        statement: call.statement,
    };
    let outcome = match (spec.run)(invocation).await {
        Ok(result) => ToolOutcome {
            text: render::text(render, &result.view, &result.structured),
            rows: rows_in(&result.structured),
            structured: Some(result.structured),
            code: None,
            upstream_status: None,
        },
        Err(ToolError::InvalidArguments(message)) => {
            return Err(CallError::InvalidArguments {
                tool: spec.name.to_owned(),
                message,
            });
        }
        Err(ToolError::Failed {
            code,
            message,
            upstream_status,
        }) => ToolOutcome {
            upstream_status,
            ..ToolOutcome::error(code, message)
        },
    };
    Ok(ToolReply::allowed(outcome))
}

/// How many rows a result carries (`rows` of the structured payload).
fn rows_in(structured: &Value) -> Option<usize> {
    structured
        .get("rows")
        .and_then(Value::as_array)
        .map(Vec::len)
}
