//! The innermost service: runs the tool on the prepared call and renders its result (a large
//! one off the async workers, see `mcp::offload`), counting the result's bytes as in flight
//! (see `response_bytes`). No tenant, format or policy logic here: `prepare` and the gate
//! did that.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::Value;
use tower::Service;

use super::{Call, CallError, ToolOutcome, ToolReply, response_bytes};
use crate::code::Code;
use crate::config::Render;
use crate::mcp::offload::RenderPool;
use crate::mcp::render;
use crate::mcp::tools::{Invocation, ToolError, ToolResult, ToolServices};
use crate::mcp::transport::Transport;
use crate::thread_priority::BulkPriority;

/// Runs tools.
#[derive(Clone)]
pub(super) struct Dispatch {
    /// What the tools use of the server.
    pub(super) tools: Arc<ToolServices>,
    /// The threads large results are rendered on.
    pub(super) render: Arc<RenderPool>,
    /// The OS priority of that work.
    pub(super) priority: BulkPriority,
    /// The response bytes in flight, which each result counts in.
    pub(super) responses: Arc<response_bytes::ResponseBytes>,
    /// The transport: the CLI takes the engine's output as it is.
    pub(super) transport: Transport,
}

impl Service<Call> for Dispatch {
    type Response = ToolReply;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<ToolReply, CallError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: Call) -> Self::Future {
        Box::pin(dispatch(self.clone(), call))
    }
}

async fn dispatch(dispatch: Dispatch, call: Call) -> Result<ToolReply, CallError> {
    let spec = call.spec;
    let render = call.render.clone().unwrap_or(Render::Markdown);
    let Dispatch {
        tools,
        render: render_pool,
        priority,
        responses,
        transport,
    } = dispatch;
    // The call's evaluation slots outlive the tool's run until its response is sent: a
    // large statement's bulk permits cover its result too (see `admission`).
    let slots = call.cx.slots.clone();
    let invocation = Invocation {
        services: tools,
        cx: call.cx,
        mode: call.mode,
        input: call.input,
        statement: call.statement,
        typed: transport == Transport::Cli,
    };
    let tenant = invocation.cx.tenant.clone();
    let (result, request_ids) =
        crate::engine::collect_upstream_request_ids((spec.run)(invocation)).await;
    let outcome = match result {
        Ok(ToolResult {
            typed: Some(output),
            ..
        }) => ToolOutcome {
            rows: Some(output.rows.len()),
            output: Some(Box::new(output)),
            ..ToolOutcome::empty()
        },
        Ok(result) => {
            let upstream_status = result.upstream_status;
            let cells = cells_in(&result.structured);
            let rendered = render_pool
                .run(cells, priority, move || rendered(render, result))
                .await;
            let Rendered {
                structured,
                text,
                bytes,
            } = match rendered {
                Ok(rendered) => rendered,
                Err(err) => {
                    return Ok(ToolReply::allowed(ToolOutcome::error(
                        Code::Internal,
                        err.to_string(),
                    )));
                }
            };
            ToolOutcome {
                held: Some(responses.hold_keeping(&tenant, bytes, slots)),
                text,
                rows: rows_in(&structured),
                structured: Some(structured),
                upstream_status,
                ..ToolOutcome::empty()
            }
        }
        Err(ToolError::Failed {
            code,
            message,
            upstream_status,
            acknowledged,
            retry_after,
        }) => {
            let mut fields = serde_json::Map::new();
            if let Some(wait) = retry_after {
                fields.insert(
                    "retry_after_seconds".into(),
                    crate::quota::retry_seconds(wait).into(),
                );
            }
            ToolOutcome {
                upstream_status,
                acknowledged,
                ..ToolOutcome::error_with(code, message, fields)
            }
        }
    };
    Ok(ToolReply::allowed(ToolOutcome {
        upstream_request_ids: request_ids,
        ..outcome
    }))
}

/// A result with its text, and about the bytes both take in the response.
struct Rendered {
    structured: Value,
    text: String,
    bytes: usize,
}

fn rendered(render: Render, result: ToolResult) -> Rendered {
    let text = render::text(render, &result.view, &result.structured);
    let structured_bytes = match render {
        // The text is the structured result serialized.
        Render::Json => text.len(),
        Render::Markdown => response_bytes::json_len(&result.structured),
    };
    Rendered {
        bytes: text.len() + structured_bytes,
        structured: result.structured,
        text,
    }
}

/// How many values a result's rows hold (rows × the first row's columns).
fn cells_in(structured: &Value) -> usize {
    structured
        .get("rows")
        .and_then(Value::as_array)
        .map_or(0, |rows| {
            rows.len()
                * rows
                    .first()
                    .and_then(Value::as_object)
                    .map_or(1, serde_json::Map::len)
        })
}

/// How many rows a result carries (`rows` of the structured payload).
fn rows_in(structured: &Value) -> Option<usize> {
    structured
        .get("rows")
        .and_then(Value::as_array)
        .map(Vec::len)
}
