//! `prepare`: what every layer needs to know about a call, worked out once before the
//! layers run: the tool, the principal's tenant and mode, the arguments parsed into the
//! tool's input type (malformed ones are refused here), `format`, the digest of the
//! arguments an approval is bound to, and the SQL parsed once with its class.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::{ApprovalChannel, Call, CallError, CallOrigin, ToolCall};
use crate::config::Render;
use crate::engine::{Error, ExecContext, ParsedSql, PreparedStatement};
use crate::mcp::gatekeeper::Plan;
use crate::mcp::tools::{Effect, OfferedTools, ToolInput, ToolSpec};
use crate::policy::{self, Mode, QueryClass};
use crate::tenant::{Principal, Tenants, ToolAccess};

/// A call ready for the layers.
#[derive(Debug)]
pub struct PreparedCall {
    /// A fresh id for this call (audit's `call_id`).
    pub(crate) call_id: String,
    /// When the call entered the pipeline.
    pub(crate) started: Instant,
    /// The same moment on the wall clock: every audit record of the call carries it, so
    /// its intent and its outcome have one call-start timestamp.
    pub(crate) started_at: std::time::SystemTime,
    /// The tool.
    pub(crate) spec: &'static ToolSpec,
    /// Who is calling.
    pub(crate) principal: Principal,
    /// The caller's tenant context for the engine.
    pub(crate) cx: ExecContext,
    /// The tenant's mode when the call arrived.
    pub(crate) mode: Mode,
    /// What the tenant and the credential let the caller use.
    pub(crate) permits: Permits,
    /// Text rendering of the result, or why the `format` argument is unusable.
    pub(crate) render: Result<Render, String>,
    /// The arguments as sent, without `format`, for the audit record.
    pub(crate) arguments: Map<String, Value>,
    /// The arguments parsed into the tool's input type, for the tool.
    pub(crate) input: Box<dyn ToolInput>,
    /// The SQL text, for tools that take one.
    pub(crate) sql: Option<String>,
    /// The statement that will run, parsed once (SQL tools only).
    pub(crate) statement: Option<Result<PreparedStatement, Error>>,
    /// How many statements the SQL text holds.
    pub(crate) statement_count: usize,
    /// What the call would do: the statement's class, or `lifecycle` for a read whose
    /// requests include one the tenant does not count as a read (see `bind`).
    pub(crate) class: QueryClass,
    /// The class of the statement as written, which decides the tool that runs it.
    pub(crate) sql_class: QueryClass,
    /// The upstream requests the statement would make, as `bind` planned them, or why the
    /// engine could not plan them (the gate refuses with that error when the tenant's
    /// policies need the plan; the run fails the same way, before any request).
    pub(crate) plan: Plan,
    /// How a person can be asked to approve it.
    pub(crate) approval: ApprovalChannel,
    /// The approval that lets it run and who decided it, once the gate has redeemed one.
    pub(crate) approved: Option<Approved>,
    /// Where the call came from.
    pub(crate) origin: CallOrigin,
    /// Where it reports progress while it waits for an out-of-band approval.
    pub(crate) progress: Option<std::sync::Arc<dyn super::Progress>>,
    /// Cancelled when nobody waits for the reply any more (the client disconnected or sent
    /// `notifications/cancelled`): the call stops (see the `cancel` layer).
    pub(crate) cancel: CancellationToken,
}

impl PreparedCall {
    /// The tool's name.
    pub fn tool(&self) -> &'static str {
        self.spec.name
    }

    /// Whether the call may change something outside querygate's read path: a write, an
    /// EXEC, an unclassifiable statement, or an install into the registry.
    pub fn has_side_effects(&self) -> bool {
        self.class != QueryClass::Select || matches!(self.spec.effect, Effect::RegistryInstall)
    }
}

/// What the tenant's configuration and the credential let a caller use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Permits {
    /// Whether the tenant's allowlist and the credential's scopes let the caller use the tool.
    pub(crate) tool: ToolAccess,
    /// Whether the tenant may install providers (`pull_provider`).
    pub(crate) pull_provider: bool,
}

/// The approval a call runs under, once the gate has redeemed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Approved {
    /// The approval's id.
    pub(crate) id: String,
    /// Who decided it, and how.
    pub(crate) by: super::ApprovedBy,
}

/// What `prepare` looks calls up in.
pub(super) struct Prepare {
    /// The offered tools.
    pub(super) tools: Arc<OfferedTools>,
    /// The tenants: contexts, modes, allowlists.
    pub(super) tenants: Arc<Tenants>,
    /// `server.render`: the rendering of calls that name no `format`.
    pub(super) render: Render,
}

/// Resolves the tool, the tenant and the statement of `call`, which stops when `cancel` is
/// cancelled.
pub(super) fn prepare(
    prepare: &Prepare,
    call: ToolCall,
    cancel: CancellationToken,
) -> Result<Call, CallError> {
    let started = Instant::now();
    let started_at = std::time::SystemTime::now();
    let spec = prepare
        .tools
        .get(&call.name)
        .ok_or_else(|| CallError::UnknownTool(call.name.clone()))?;
    let principal = call.principal.ok_or(CallError::Unauthenticated)?;
    let cx = prepare.tenants.context(&principal)?;
    let tenant = prepare.tenants.config(&cx.tenant);
    let mode = tenant.map(|t| t.mode).unwrap_or_default();
    let allow_pull_provider = tenant.is_some_and(|t| t.allow_pull_provider);
    let access = prepare.tenants.tool_access(&principal, spec.name);
    let mut arguments = call.arguments;
    // A tool that renders nothing has no `format`: one sent is dropped, as it always was.
    if !spec.takes_format {
        arguments.remove("format");
    }
    // Parsed once, here: the tool gets them typed; a malformed call runs no layer.
    let mut input = (spec.parse)(&arguments).map_err(|message| CallError::InvalidArguments {
        tool: spec.name.to_owned(),
        message,
    })?;
    let (sql, statement, statement_count, class) = match input.sql() {
        Some(sql) => {
            let parsed = ParsedSql::parse(sql);
            let count = parsed.parts().len();
            let class = match spec.effect {
                Effect::Sql(_) => policy::classify(&parsed),
                Effect::Read | Effect::RegistryInstall => QueryClass::Select,
            };
            (
                Some(sql.to_owned()),
                Some(parsed.into_single()),
                count,
                class,
            )
        }
        None => (None, None, 0, QueryClass::Select),
    };
    let render = render_of(prepare.render, spec, input.take_format());
    // The record keeps what the tool got: the arguments without `format`.
    arguments.remove("format");
    Ok(Box::new(PreparedCall {
        call_id: crate::audit::record::new_call_id(),
        started,
        started_at,
        spec,
        principal,
        cx,
        mode,
        permits: Permits {
            tool: access,
            pull_provider: allow_pull_provider,
        },
        render,
        arguments,
        input,
        sql,
        statement,
        statement_count,
        class,
        sql_class: class,
        plan: Plan::NotPlanned,
        approval: call.approval,
        approved: None,
        origin: call.origin,
        progress: call.progress,
        cancel,
    }))
}

/// The text rendering a call asks for: `format` when the tool takes one, else the server's.
fn render_of(default: Render, spec: &ToolSpec, format: Option<Value>) -> Result<Render, String> {
    match format {
        _ if !spec.takes_format => Ok(default),
        None | Some(Value::Null) => Ok(default),
        Some(Value::String(s)) if s.is_empty() => Ok(default),
        Some(Value::String(s)) if s == "markdown" => Ok(Render::Markdown),
        Some(Value::String(s)) if s == "json" => Ok(Render::Json),
        Some(Value::String(other)) => Err(format!(
            "invalid format \"{other}\" (legal: markdown, json)"
        )),
        Some(other) => Err(format!("invalid format {other} (legal: markdown, json)")),
    }
}
