//! The rmcp `ServerHandler`: lists what the server offers and hands every tool call to the
//! tool-call stage. Cheap to clone: rmcp builds one per HTTP request.

use std::sync::Arc;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    DiscoverResult, GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
    InitializeRequestParams, InitializeResult, ListPromptsResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, Prompt, PromptArgument, PromptMessage,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, Role, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use super::content::{Content, INSTRUCTIONS_RESOURCE, PromptDoc, ResourceDoc};
use super::pipeline::response_bytes::ResponseSlot;
use super::pipeline::{ApprovalChannel, CallError, CallOrigin, Pipeline, ReplyBody, ToolCall};
use super::tools::OfferedTools;
use super::transport::Transport;
use crate::approval::OutOfBand;
use crate::audit::Auditor;
use crate::tenant::{Principal, Tenants};

/// What the handler answers from besides the pipeline, shared by its clones: the listings
/// (prompts, resources, instructions), which tools each caller sees, and what the HTTP
/// stage mounts the approval routes over.
pub(crate) struct HandlerState {
    /// The embedded tool descriptions, prompts, resources and instructions.
    pub(super) content: Content,
    /// The server's settings: the prompts and resources offered, the instructions switch,
    /// the request size cap.
    pub(super) server: crate::config::ServerConfig,
    /// The tenants: which tools a caller's tenant and credential may call.
    pub(super) tenants: Arc<Tenants>,
    /// The transport serving the calls: where the caller's principal comes from.
    pub(super) transport: Transport,
    /// Out-of-band approvals (`None`: `approval.out_of_band` is off), for the approval
    /// routes.
    pub(super) out_of_band: Option<Arc<OutOfBand>>,
    /// The audit of tool calls, for the approval routes' records.
    pub(super) audit: Option<Auditor>,
    /// MCP tasks (`None`: stdio and the command line, where calls wait).
    pub(super) tasks: Option<Arc<crate::tasks::Tasks>>,
}

/// querygate's MCP server.
#[derive(Clone)]
pub struct QuerygateMcp {
    state: Arc<HandlerState>,
    pipeline: Pipeline,
    tools: Arc<Vec<Tool>>,
    info: Arc<ServerConfig>,
}

impl std::fmt::Debug for QuerygateMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuerygateMcp")
            .field("tools", &self.tools.len())
            .finish()
    }
}

impl QuerygateMcp {
    pub(crate) fn new(state: HandlerState, offered: &OfferedTools, pipeline: Pipeline) -> Self {
        let tools = offered
            .iter()
            .map(|spec| {
                let description = state
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
                .with_raw_output_schema(Arc::new(super::output_schema::declared((spec
                    .output_schema)(
                ))))
                .with_annotations(ToolAnnotations::from_raw(
                    Some(spec.title.to_owned()),
                    Some(hints.read_only),
                    (!hints.read_only).then_some(hints.destructive),
                    Some(hints.idempotent),
                    Some(hints.open_world),
                ))
            })
            .collect();
        let builder = ServerCapabilities::builder()
            .enable_tools()
            .enable_prompts()
            .enable_resources();
        let capabilities = if state.tasks.as_ref().is_some_and(|t| t.enabled()) {
            builder.enable_tasks().build()
        } else {
            builder.build()
        };
        let info = ServerConfig::new(capabilities).with_server_info(
            Implementation::new("querygate", env!("CARGO_PKG_VERSION")).with_title("querygate"),
        );
        QuerygateMcp {
            info: Arc::new(info),
            pipeline,
            state: Arc::new(state),
            tools: Arc::new(tools),
        }
    }

    /// Out-of-band approvals, when `approval.out_of_band` is on (the approval routes).
    pub(crate) fn out_of_band(&self) -> Option<Arc<OutOfBand>> {
        self.state.out_of_band.clone()
    }

    /// The audit of tool calls, when on (the approval routes record decisions in it).
    pub(crate) fn auditor(&self) -> Option<Auditor> {
        self.state.audit.clone()
    }

    /// MCP tasks, when this server answers long-running calls as tasks (`tasks.enabled`).
    pub fn tasks(&self) -> Option<Arc<crate::tasks::Tasks>> {
        self.state.tasks.clone().filter(|t| t.enabled())
    }

    /// `server.max_request_bytes`: the largest request the server reads.
    pub(crate) fn max_request_bytes(&self) -> usize {
        self.state.server.max_request_bytes
    }

    /// The server instructions, unless disabled or empty.
    fn instructions(&self) -> Option<String> {
        let text = &self.state.content.instructions;
        (!self.state.server.disable_instructions && !text.is_empty()).then(|| text.clone())
    }

    /// The tool-call pipeline (for callers that run tools without MCP framing).
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }
}

impl HandlerState {
    /// Offered prompts: all, or those `server.enabled_prompts` names.
    fn offered_prompts(&self) -> impl Iterator<Item = &PromptDoc> + '_ {
        self.content.prompts.iter().filter(|p| {
            self.server
                .enabled_prompts
                .as_ref()
                .is_none_or(|list| list.contains(&p.name))
        })
    }

    /// Offered resources: all, or those `server.enabled_resources` names; the instructions
    /// resource only while instructions are served.
    fn offered_resources(&self) -> impl Iterator<Item = &ResourceDoc> + '_ {
        self.content.resources.iter().filter(|r| {
            !(self.server.disable_instructions && r.name == INSTRUCTIONS_RESOURCE)
                && self
                    .server
                    .enabled_resources
                    .as_ref()
                    .is_none_or(|list| list.contains(&r.name))
        })
    }
}

/// A prompt's text with its arguments filled in: a missing required argument is an error
/// naming it; a missing optional one becomes `(not given)`.
pub(crate) fn fill_prompt(
    prompt: &PromptDoc,
    arguments: &serde_json::Map<String, serde_json::Value>,
) -> Result<String, String> {
    let mut text = prompt.body.clone();
    for argument in &prompt.arguments {
        let value = match arguments.get(&argument.name) {
            Some(serde_json::Value::String(s)) => s.trim().to_owned(),
            Some(serde_json::Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        if value.is_empty() && argument.required {
            return Err(format!(
                "prompt '{}' needs the argument '{}' ({})",
                prompt.name, argument.name, argument.description
            ));
        }
        let value = if value.is_empty() {
            "(not given)".to_owned()
        } else {
            value
        };
        text = text.replace(&format!("{{{{{}}}}}", argument.name), &value);
    }
    Ok(text)
}

/// The caller: over HTTP, the principal the authentication layer put in the request
/// extensions (none there means none: the pipeline refuses the call); over stdio, the local
/// user.
fn principal_of(context: &RequestContext<RoleServer>, transport: Transport) -> Option<Principal> {
    match transport {
        Transport::Stdio | Transport::Cli => Some(Principal::local()),
        Transport::Http => context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>())
            .cloned(),
    }
}

/// Where the HTTP layer keeps a result's counted bytes until the response is sent (none
/// over stdio: there the count ends when the result is handed to the transport).
fn response_slot(context: &RequestContext<RoleServer>) -> Option<ResponseSlot> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<ResponseSlot>())
        .cloned()
}

/// Where a call came from, for its audit record: the HTTP `x-request-id` (else the JSON-RPC
/// id), the W3C `traceparent` in `_meta` (else the HTTP header) and its trace id, the client
/// and the protocol version. Over HTTP (stateless) the client is known only from the
/// request's `_meta` (`io.modelcontextprotocol/clientInfo`): rmcp's stand-in session of a
/// 2025-protocol request names rmcp itself, which is not the caller, so it is left out.
fn origin_of(
    context: &RequestContext<RoleServer>,
    transport: Transport,
    request: &CallToolRequestParams,
) -> CallOrigin {
    let header = context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.headers.get("x-request-id"))
        .and_then(|v| v.to_str().ok())
        .map(|v| v.chars().take(128).collect::<String>());
    // rmcp moves the request's `_meta` into the context.
    let traceparent = context
        .meta
        .get_traceparent()
        .or_else(|| {
            request
                .meta
                .as_ref()
                .and_then(|meta| meta.get_traceparent())
        })
        .or_else(|| {
            context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|parts| parts.headers.get("traceparent"))
                .and_then(|v| v.to_str().ok())
        })
        .filter(|tp| tp.len() <= 128)
        .map(str::to_owned);
    let trace_id = traceparent
        .as_deref()
        .and_then(crate::telemetry::trace::traceparent_trace_id);
    let span_id = traceparent
        .as_deref()
        .and_then(crate::telemetry::trace::traceparent_span_id);
    let client = match transport {
        Transport::Stdio => context.client_info(),
        Transport::Http => context
            .meta
            .client_info()
            .or_else(|| request.meta.as_ref().and_then(|meta| meta.client_info())),
        // The command line calls the pipeline directly, not through this handler.
        Transport::Cli => None,
    };
    CallOrigin {
        request_id: header.or_else(|| Some(context.id.to_string())),
        trace_id,
        span_id,
        traceparent,
        client_name: client.as_ref().map(|c| c.name.clone()),
        client_version: client.map(|c| c.version),
        protocol_version: context.protocol_version().map(|v| v.to_string()),
        command: None,
        task_id: None,
    }
}

/// How this request's client can carry an approval prompt: MRTR for 2026-07-28 clients that
/// declared elicitation, `elicitation/create` mid-call for older clients in a stdio session
/// that declared it, otherwise not at all: older revisions over stateless HTTP (no session
/// to ask in, no capabilities kept), and clients that declared no elicitation.
fn approval_channel(
    context: &RequestContext<RoleServer>,
    transport: Transport,
    request: &CallToolRequestParams,
) -> ApprovalChannel {
    let elicits = context
        .client_capabilities()
        .is_some_and(|caps| caps.elicitation.is_some());
    let resumable = context
        .protocol_version()
        .is_some_and(|version| !version.has_initialize());
    match (elicits, resumable, transport) {
        (true, true, _) => ApprovalChannel::Resumable {
            request_state: request.request_state.clone(),
            answer: super::elicit::resumed_answer(request.input_responses.as_ref()),
        },
        (true, false, Transport::Stdio) => ApprovalChannel::Inline(Arc::new(
            super::elicit::RmcpApprover::new(context.peer.clone()),
        )),
        // A stateless request of an older revision carries no capabilities: whatever the
        // client declared, it cannot be asked in the middle of this call.
        (_, false, Transport::Http) => ApprovalChannel::StatelessLegacy {
            protocol: context
                .protocol_version()
                .map_or_else(|| "unknown".to_owned(), |v| v.to_string()),
        },
        _ => ApprovalChannel::Unavailable,
    }
}

/// `notifications/progress` for the request's progress token, in its session or on the
/// stream of its response.
#[derive(Debug)]
struct McpProgress {
    peer: rmcp::service::Peer<RoleServer>,
    token: rmcp::model::ProgressToken,
}

impl super::pipeline::Progress for McpProgress {
    fn report(
        &self,
        progress: f64,
        total: Option<f64>,
        message: String,
    ) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async move {
            let mut param =
                rmcp::model::ProgressNotificationParam::new(self.token.clone(), progress);
            param.total = total;
            param.message = Some(message);
            // Best effort: a client that went away learns nothing more.
            let _ = self.peer.notify_progress(param).await;
        })
    }
}

/// The progress reporter of a request that carries a progress token.
fn progress_of(context: &RequestContext<RoleServer>) -> Option<Arc<dyn super::pipeline::Progress>> {
    let token = context.meta.get_progress_token()?;
    Some(Arc::new(McpProgress {
        peer: context.peer.clone(),
        token,
    }))
}

/// The JSON-RPC error code of MCP 2025-11-25's `URLElicitationRequiredError` (rmcp names
/// none).
pub const URL_ELICITATION_REQUIRED: i32 = -32042;

impl ServerHandler for QuerygateMcp {
    /// Identity and capabilities, without instructions: rmcp calls this on every request
    /// (stateless serving configures a peer per request), so it stays small. The
    /// instructions go only where clients read them: `initialize` and `server/discover`.
    fn get_info(&self) -> ServerConfig {
        self.info.as_ref().clone()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        if let Some(version) = super::malformed::without_initialize(&context.meta) {
            return Err(super::malformed::initialize_removed(version.as_str()));
        }
        context.peer.set_peer_info(request.clone());
        let mut result = self.negotiate_initialize(&request)?;
        result.instructions = self.instructions();
        Ok(result)
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        let mut info = self.get_info();
        info.instructions = self.instructions();
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // Only the tools the caller's tenant and credential may call; none without a caller.
        let principal = principal_of(&context, self.state.transport);
        let tools = self
            .tools
            .iter()
            .filter(|t| {
                principal
                    .as_ref()
                    .is_some_and(|p| self.state.tenants.allows_tool(p, &t.name))
            })
            .cloned()
            .collect();
        let mut result = ListToolsResult::with_all_items(tools);
        result.ttl_ms = Some(0);
        result.cache_scope = Some(CacheScope::Private);
        Ok(result)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let prompts = self
            .state
            .offered_prompts()
            .map(|p| {
                let arguments = p
                    .arguments
                    .iter()
                    .map(|a| {
                        PromptArgument::new(a.name.clone())
                            .with_description(a.description.clone())
                            .with_required(a.required)
                    })
                    .collect();
                let prompt =
                    Prompt::new(p.name.clone(), Some(p.description.clone()), Some(arguments));
                match &p.title {
                    Some(title) => prompt.with_title(title.clone()),
                    None => prompt,
                }
            })
            .collect();
        let mut result = ListPromptsResult::with_all_items(prompts);
        result.ttl_ms = Some(0);
        result.cache_scope = Some(CacheScope::Private);
        Ok(result)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let Some(prompt) = self
            .state
            .offered_prompts()
            .find(|p| p.name == request.name)
        else {
            let known: Vec<&str> = self
                .state
                .offered_prompts()
                .map(|p| p.name.as_str())
                .collect();
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown prompt '{}' (this server offers: {})",
                    request.name,
                    known.join(", ")
                ),
                None,
            ));
        };
        let text = fill_prompt(prompt, &request.arguments.unwrap_or_default())
            .map_err(|message| ErrorData::invalid_params(message, None))?;
        Ok(
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
                .with_description(prompt.description.clone())
                .into(),
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resources = self
            .state
            .offered_resources()
            .map(|r| {
                let resource = Resource::new(r.uri.clone(), r.name.clone())
                    .with_description(r.description.clone())
                    .with_mime_type(r.mime_type.clone())
                    .with_size(r.body.len() as u64);
                match &r.title {
                    Some(title) => resource.with_title(title.clone()),
                    None => resource,
                }
            })
            .collect();
        let mut result = ListResourcesResult::with_all_items(resources);
        result.ttl_ms = Some(0);
        result.cache_scope = Some(CacheScope::Private);
        Ok(result)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let Some(resource) = self
            .state
            .offered_resources()
            .find(|r| r.uri == request.uri)
        else {
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown resource '{}'; resources/list names the resources this server offers",
                    request.uri
                ),
                Some(serde_json::json!({ "uri": request.uri })),
            ));
        };
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(resource.body.clone(), resource.uri.clone())
                .with_mime_type(resource.mime_type.clone()),
        ])
        .with_ttl_ms(0)
        .with_cache_scope(CacheScope::Private)
        .into())
    }

    /// rmcp's fallback for requests it could not read: see `malformed`.
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        Err(super::malformed::refuse(&request, &context.meta))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let transport = self.state.transport;
        let principal = principal_of(&context, transport);
        // A call that may wait on an operation, from a client that declared the tasks
        // extension, runs as a task once the gate allowed it (the pipeline's task step
        // decides from the prepared statement; the others are answered as without tasks).
        let as_task = self.tasks().filter(|_| {
            context
                .client_capabilities()
                .is_some_and(|caps| caps.supports_tasks())
                && super::task_methods::may_become_task(&request.name)
        });
        let call = ToolCall {
            approval: approval_channel(&context, transport, &request),
            origin: origin_of(&context, transport, &request),
            progress: progress_of(&context),
            principal,
            name: request.name.to_string(),
            arguments: request.arguments.unwrap_or_default(),
        };
        // Fired when the client disconnects (HTTP) or sends `notifications/cancelled`.
        // Boxed: rmcp moves its request future (which holds this one) several times while it
        // spawns and polls it, and the pipeline's future is several KiB.
        let result = match as_task {
            Some(tasks) => match tasks
                .submit(self.pipeline.clone(), call, context.ct.clone())
                .await
            {
                crate::tasks::Submitted::Task(record) => {
                    return Ok(super::task_methods::created(&tasks, &record).into());
                }
                crate::tasks::Submitted::Reply(result) => result,
            },
            None => Box::pin(self.pipeline.call_until(call, context.ct.clone())).await,
        };
        match result {
            Ok(reply) => match reply.body {
                ReplyBody::Complete(mut outcome) => {
                    let slot = response_slot(&context);
                    // The result's bytes stay counted until the HTTP response is sent.
                    if let (Some(held), Some(slot)) = (outcome.held.take(), &slot) {
                        slot.keep(held);
                    }
                    // Over HTTP a missing scope is a 403 step-up challenge (the HTTP layer
                    // answers it); over stdio it stays the tool error.
                    if let (Some(scopes), Some(slot)) = (outcome.step_up.take(), &slot) {
                        slot.step_up(scopes);
                    }
                    let mut result = if outcome.is_error() {
                        CallToolResult::error(vec![ContentBlock::text(outcome.text)])
                    } else {
                        CallToolResult::success(vec![ContentBlock::text(outcome.text)])
                    };
                    result.structured_content = outcome.structured;
                    Ok(result.into())
                }
                ReplyBody::InputRequired { prompt, sealed } => {
                    Ok(super::elicit::input_required(prompt, sealed).into())
                }
                // MCP 2025-11-25 URL-mode elicitation: "URL elicitation required" (-32042),
                // which the client opens for the person and then retries the call.
                ReplyBody::UrlElicitation {
                    outcome,
                    id,
                    url,
                    message,
                } => {
                    // Every such call, by configuration: not a warning (rmcp's own for the
                    // error response is left out of the log lines, telemetry::url_elicitation).
                    tracing::debug!(
                        approval_id = %id,
                        "approval pending: URL-mode elicitation (-32042) to the approval page"
                    );
                    Err(ErrorData::new(
                        rmcp::model::ErrorCode(URL_ELICITATION_REQUIRED),
                        outcome.text,
                        Some(serde_json::json!({
                            "elicitations": [{
                                "mode": "url",
                                "elicitationId": id,
                                "url": url,
                                "message": message,
                            }],
                            "error": outcome.structured.as_ref().and_then(|s| s.get("error")),
                        })),
                    ))
                }
            },
            Err(err @ (CallError::UnknownTool(_) | CallError::InvalidArguments { .. })) => {
                Err(ErrorData::invalid_params(err.to_string(), None))
            }
            Err(err @ (CallError::Tenant(_) | CallError::Unauthenticated)) => {
                Err(ErrorData::invalid_request(err.to_string(), None))
            }
        }
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        let tasks = self.tasks().ok_or_else(tasks_off)?;
        let principal = principal_of(&context, self.state.transport);
        super::task_methods::get(&tasks, principal.as_ref(), &request.task_id).await
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let tasks = self.tasks().ok_or_else(tasks_off)?;
        let principal = principal_of(&context, self.state.transport);
        super::task_methods::cancel(&tasks, principal.as_ref(), &request.task_id).await
    }
}

/// The error of a task method while tasks are off (rmcp answers method-not-found first
/// when the capability is not declared).
fn tasks_off() -> ErrorData {
    ErrorData::invalid_request("tasks are off on this server (tasks.enabled)", None)
}
