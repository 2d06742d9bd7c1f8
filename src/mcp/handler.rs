//! The rmcp `ServerHandler`: lists what the server offers and hands every tool call to the
//! tool-call stage. Cheap to clone: rmcp builds one per HTTP request.

use std::sync::Arc;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tower::ServiceExt as _;

use super::Shared;
use super::stage::{self, CallError, ToolCall, ToolStage};
use crate::tenant::Principal;

/// querygate's MCP server.
#[derive(Clone)]
pub struct QuerygateMcp {
    pub(crate) shared: Arc<Shared>,
    stage: ToolStage,
    tools: Arc<Vec<Tool>>,
}

impl std::fmt::Debug for QuerygateMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuerygateMcp")
            .field("tools", &self.tools.len())
            .finish()
    }
}

impl QuerygateMcp {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let tools = shared
            .offered_tools()
            .map(|spec| {
                let description = shared
                    .content
                    .tools
                    .get(spec.name)
                    .cloned()
                    .unwrap_or_default();
                let hints = spec.hints;
                Tool::new_with_raw(
                    spec.name,
                    Some(description.into()),
                    Arc::new((spec.input_schema)()),
                )
                .with_title(spec.title)
                .with_raw_output_schema(Arc::new((spec.output_schema)()))
                .with_annotations(ToolAnnotations::from_raw(
                    Some(spec.title.to_owned()),
                    Some(hints.read_only),
                    (!hints.read_only).then_some(hints.destructive),
                    Some(hints.idempotent),
                    Some(hints.open_world),
                ))
            })
            .collect();
        QuerygateMcp {
            stage: stage::build(shared.clone()),
            shared,
            tools: Arc::new(tools),
        }
    }

    /// The tool-call stage (for transports and tests that call tools directly).
    pub fn stage(&self) -> ToolStage {
        self.stage.clone()
    }
}

/// The caller, as the HTTP stage's auth layer left it in the request extensions; stdio and
/// unauthenticated HTTP run as the anonymous principal of the default tenant.
fn principal_of(context: &RequestContext<RoleServer>) -> Principal {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .cloned()
        .unwrap_or_else(Principal::anonymous)
}

impl ServerHandler for QuerygateMcp {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_prompts()
            .enable_resources()
            .build();
        let mut info = ServerConfig::new(capabilities).with_server_info(
            Implementation::new("querygate", env!("CARGO_PKG_VERSION")).with_title("querygate"),
        );
        if !self.shared.server.disable_instructions && !self.shared.content.instructions.is_empty()
        {
            info = info.with_instructions(self.shared.content.instructions.clone());
        }
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut result = ListToolsResult::with_all_items(self.tools.as_ref().clone());
        result.ttl_ms = Some(0);
        result.cache_scope = Some(CacheScope::Private);
        Ok(result)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call = ToolCall {
            name: request.name.to_string(),
            arguments: request.arguments.unwrap_or_default(),
            principal: principal_of(&context),
        };
        match self.stage.clone().oneshot(call).await {
            Ok(reply) => {
                let mut result = if reply.is_error {
                    CallToolResult::error(vec![ContentBlock::text(reply.text)])
                } else {
                    CallToolResult::success(vec![ContentBlock::text(reply.text)])
                };
                result.structured_content = reply.structured;
                Ok(result.into())
            }
            Err(err @ (CallError::UnknownTool(_) | CallError::InvalidArguments { .. })) => {
                Err(ErrorData::invalid_params(err.to_string(), None))
            }
            Err(err @ CallError::Tenant(_)) => {
                Err(ErrorData::invalid_request(err.to_string(), None))
            }
        }
    }
}
