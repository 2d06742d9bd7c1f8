//! The tool-call stage: a tower `Service` over tool calls that HTTP and stdio share. Every
//! call passes through it. Its layers, outermost first, will be audit → mode gate (the
//! issues after this one); today it is the call timeout around dispatch, the innermost
//! service, which parses arguments, resolves the caller's tenant, runs the tool and renders
//! its result.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::{Map, Value};
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceBuilder, ServiceExt as _};

use super::Shared;
use super::render;
use super::tools::{Invocation, ToolError};
use crate::config::Render;
use crate::tenant::{Principal, TenantError};

/// One tool call, as every transport hands it to the stage.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments (an empty object when none were sent).
    pub arguments: Map<String, Value>,
    /// Who is calling (from the HTTP stage's auth layer; anonymous until it exists).
    pub principal: Principal,
}

/// A tool call's result: structured content, text, and whether it is an error the model
/// should read (`isError`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolReply {
    /// `structuredContent` (absent on errors).
    pub structured: Option<Value>,
    /// The text content.
    pub text: String,
    /// Whether this is a tool error (`isError: true`).
    pub is_error: bool,
}

impl ToolReply {
    /// A tool error with this text.
    pub fn error(text: impl Into<String>) -> Self {
        ToolReply {
            structured: None,
            text: text.into(),
            is_error: true,
        }
    }
}

/// Why a call was refused before any tool ran (a protocol error, not a tool result).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CallError {
    /// No tool of that name is offered.
    #[error("unknown tool '{0}'")]
    UnknownTool(String),
    /// The arguments do not fit the tool's input schema.
    #[error("invalid arguments for tool '{tool}': {message}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// The caller's tenant cannot be served.
    #[error(transparent)]
    Tenant(#[from] TenantError),
}

/// The boxed stage, cheap to clone per request.
pub type ToolStage = BoxCloneSyncService<ToolCall, ToolReply, CallError>;

/// Builds the stage over `shared`.
pub(crate) fn build(shared: Arc<Shared>) -> ToolStage {
    let timeout = shared.server.call_timeout;
    let service = ServiceBuilder::new()
        .layer(CallTimeoutLayer { timeout })
        .service(Dispatch { shared });
    BoxCloneSyncService::new(service)
}

/// The innermost service: runs the named tool.
#[derive(Clone)]
pub(crate) struct Dispatch {
    shared: Arc<Shared>,
}

impl Service<ToolCall> for Dispatch {
    type Response = ToolReply;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<ToolReply, CallError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ToolCall) -> Self::Future {
        let shared = self.shared.clone();
        Box::pin(async move { dispatch(shared, call).await })
    }
}

async fn dispatch(shared: Arc<Shared>, call: ToolCall) -> Result<ToolReply, CallError> {
    let spec = shared
        .tool(&call.name)
        .ok_or_else(|| CallError::UnknownTool(call.name.clone()))?;
    let mut arguments = call.arguments;
    // `format` is checked before the tool runs; tools that take none ignore it.
    let render = match arguments.remove("format") {
        _ if !spec.takes_format => shared.server.render,
        None | Some(Value::Null) => shared.server.render,
        Some(Value::String(s)) if s.is_empty() => shared.server.render,
        Some(Value::String(s)) if s == "markdown" => Render::Markdown,
        Some(Value::String(s)) if s == "json" => Render::Json,
        Some(Value::String(other)) => {
            return Ok(ToolReply::error(format!(
                "invalid format \"{other}\" (legal: markdown, json)"
            )));
        }
        Some(other) => {
            return Ok(ToolReply::error(format!(
                "invalid format {other} (legal: markdown, json)"
            )));
        }
    };
    let cx = shared.tenants.context(&call.principal)?;
    let mode = shared.tenants.mode(&cx.tenant).unwrap_or_default();
    let invocation = Invocation {
        shared: shared.clone(),
        cx,
        mode,
        arguments,
    };
    match (spec.run)(invocation).await {
        Ok(result) => Ok(ToolReply {
            text: render::text(render, &result.view, &result.structured),
            structured: Some(result.structured),
            is_error: false,
        }),
        Err(ToolError::InvalidArguments(message)) => Err(CallError::InvalidArguments {
            tool: spec.name.to_owned(),
            message,
        }),
        Err(ToolError::Failed(text)) => Ok(ToolReply::error(text)),
    }
}

/// Ends a call that runs longer than `server.call_timeout` with a tool error.
#[derive(Clone, Copy)]
struct CallTimeoutLayer {
    timeout: Duration,
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

#[derive(Clone)]
struct CallTimeout<S> {
    inner: S,
    timeout: Duration,
}

impl<S> Service<ToolCall> for CallTimeout<S>
where
    S: Service<ToolCall, Response = ToolReply, Error = CallError> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = ToolReply;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<ToolReply, CallError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: ToolCall) -> Self::Future {
        let name = call.name.clone();
        let timeout = self.timeout;
        let inner = self.inner.clone();
        Box::pin(async move {
            match tokio::time::timeout(timeout, inner.oneshot(call)).await {
                Ok(result) => result,
                Err(_) => Ok(ToolReply::error(format!(
                    "tool '{name}' did not finish within {} (server.call_timeout); nothing more will be done for this call",
                    humantime::format_duration(timeout)
                ))),
            }
        })
    }
}
