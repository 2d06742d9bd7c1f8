//! The tool-call pipeline every call passes, over HTTP, stdio and the CLI alike:
//!
//! ```text
//! prepare(ToolCall) → PreparedCall     tool, principal → tenant and mode, the arguments
//!                                      parsed once into the tool's input type, `format`,
//!                                      the SQL parsed once (class known), the approval
//!                                      channel
//! bind                                 the statement's upstream requests, planned by the
//!                                      engine: a read bound to POST… is classed lifecycle
//!   Audit         one outcome record per call (refusals and approval prompts included),
//!                 durable before the reply; audit.failure_mode decides about failures;
//!                 reads of `querygate query` only with audit.cli_reads
//!   ModeGate      the one chokepoint: the credential's query scopes, the Gatekeeper's
//!                 rules (pinned parameters, the mode's verdict), Cedar;
//!                 refusals, approval asked (an [`Approver`], or a resumable round) or
//!                 redeemed
//!   Quota         SQL statements: a call of the class from the principal's and the
//!                 tenant's quotas (tenants[].quotas), or `quota.exceeded`
//!   Cache         tenants[].cache: a SELECT's recent result served again; writes drop
//!                 the results of the resources they touch
//!   Admission     SQL statements: a slot of the tenant's share and a global one, or
//!                 `server.busy` after limits.admission_wait
//!   Task          a call submitted as an MCP task becomes one (crate::tasks)
//!   Intent        side effects only: an intent record, durable before anything runs
//!   CallTimeout   server.call_timeout; says when a write's outcome is unknown
//!   Cancel        stops the call when nobody waits (disconnect, notifications/cancelled)
//!   Dispatch      runs the tool on the parsed statement and renders its result
//! ```
//!
//! Every layer sees the tenant, the principal, the class and exactly the statement that will
//! run. No call reaches a tool, and so the engine, without passing the gate. The pipeline
//! holds no transport's types: the MCP handler and the CLI translate at their edge.

pub(crate) mod admission;
mod approver;
mod audit;
mod bind;
pub(crate) mod cache;
mod cancel;
mod dispatch;
mod exec_rows;
mod gate;
mod observe;
mod out_of_band;
mod prepare;
mod prompt;
mod quota;
mod ranked_slots;
pub(crate) mod response_bytes;
mod resume;
mod step;
mod task;
mod timeout;

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;

pub use approver::{ApprovalAnswer, ApprovalPrompt, Approver};
pub use prepare::PreparedCall;

use super::offload::RenderPool;
use super::tools::{OfferedTools, ToolServices};
use super::transport::Transport;
use crate::approval::{Approvals, OutOfBand};
use crate::audit::{Auditor, Decision};
use crate::code::Code;
use crate::config::Render;
use crate::mcp::gatekeeper::Gatekeeper;
use crate::tenant::{Principal, TenantError};

/// One tool call, as every transport hands it to the pipeline.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments (an empty object when none were sent).
    pub arguments: Map<String, Value>,
    /// Who is calling: set by the HTTP authentication layer, or the transport's own
    /// principal (stdio). `None` is refused.
    pub principal: Option<Principal>,
    /// How a person can be asked to approve this call.
    pub approval: ApprovalChannel,
    /// Where the call came from, for the audit record.
    pub origin: CallOrigin,
    /// Where the call reports progress while it waits for an out-of-band approval (`None`:
    /// the client gave no progress token).
    pub progress: Option<Arc<dyn Progress>>,
}

/// Where a call reports progress: MCP `notifications/progress` for the client's progress
/// token.
pub trait Progress: Send + Sync + std::fmt::Debug {
    /// Reports `progress` (of `total`, when known) with `message`; best effort.
    fn report(
        &self,
        progress: f64,
        total: Option<f64>,
        message: String,
    ) -> futures::future::BoxFuture<'_, ()>;
}

/// Who decided the approval that let a call run, for its audit records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovedBy {
    /// The decider as a person reads it (the principal at the client for elicitation and
    /// MRTR).
    pub approver: String,
    /// The decider's typed identity (the audit record's `approver_id`).
    pub approver_id: String,
    /// Through what.
    pub method: crate::approval::DecisionMethod,
    /// The reason given (empty for answers in the call).
    pub reason: String,
}

/// Where a call came from: the transport's request and the client, as far as they are
/// known (for the audit record; nothing decides on them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallOrigin {
    /// The request's id: the HTTP `x-request-id` header, else the JSON-RPC id.
    pub request_id: Option<String>,
    /// The W3C trace id of the request's `traceparent`, when it has one (with traces on,
    /// the trace of the call's span).
    pub trace_id: Option<String>,
    /// The span id of the request's `traceparent` (the caller's span; with traces on, the
    /// call's own span).
    pub span_id: Option<String>,
    /// The request's W3C `traceparent`: MCP `_meta.traceparent`, else the HTTP header.
    pub traceparent: Option<String>,
    /// The MCP client's name.
    pub client_name: Option<String>,
    /// The MCP client's version.
    pub client_version: Option<String>,
    /// The MCP protocol version of the request.
    pub protocol_version: Option<String>,
    /// The CLI command that made the call (`query`): its records and messages name it as
    /// the tool, since that is what the person typed.
    pub command: Option<&'static str>,
    /// The MCP task the call runs as (`crate::tasks`), for its audit records.
    pub task_id: Option<String>,
}

/// How the client can carry an approval prompt to a person.
#[derive(Debug, Clone)]
pub enum ApprovalChannel {
    /// A 2026-07-28 client that declared elicitation: the call returns an input request and
    /// a sealed state; the client retries with the answer and the state.
    Resumable {
        /// The sealed state of an earlier round, if this is a retry.
        request_state: Option<String>,
        /// The client's answer to the approval prompt of an earlier round (`None`: none
        /// sent; the prompt is asked again).
        answer: Option<ApprovalAnswer>,
    },
    /// A person asked in the middle of the call: `elicitation/create` in an MCP session of
    /// an older revision (stdio), or the terminal of `querygate query`.
    Inline(Arc<dyn Approver>),
    /// A client of a revision with an `initialize` handshake (2025-11-25 and older) over
    /// stateless HTTP: the server keeps no session to send it a request in the middle of
    /// the call, whatever capabilities it declared at `initialize`.
    StatelessLegacy {
        /// The request's protocol revision.
        protocol: String,
    },
    /// Nobody can be asked: the client declared no elicitation capability, or
    /// `querygate query` runs without a terminal and without `--yes`.
    Unavailable,
}

/// What the pipeline answers.
#[derive(Debug, Clone)]
pub struct ToolReply {
    /// The result, or a request for input.
    pub body: ReplyBody,
    /// What the gate decided, for the audit record, the span and the metrics.
    pub decision: Decision,
    /// The approval involved (asked, accepted, declined or dismissed), if any.
    pub approval_id: Option<String>,
    /// Who decided it, when someone did.
    pub approved_by: Option<ApprovedBy>,
}

/// The result of a call, or a request for the client to ask a person.
#[derive(Debug, Clone)]
pub enum ReplyBody {
    /// A finished call (a result or a tool error).
    Complete(ToolOutcome),
    /// The call needs an approval first (MRTR round): the transport asks the client to put
    /// `prompt` to a person and to call again with the answer and `sealed`.
    InputRequired {
        /// The question for the person.
        prompt: String,
        /// The sealed approval state the retry must carry.
        sealed: String,
    },
    /// A pending out-of-band approval told as a URL-mode elicitation
    /// (`approval.url_elicitation`): the transport answers JSON-RPC error -32042 pointing
    /// at the approval page; `outcome` is the pending result the records and metrics see.
    UrlElicitation {
        /// The `policy.approval_pending` tool error the call would otherwise return.
        outcome: ToolOutcome,
        /// The approval's id (the elicitation's id).
        id: String,
        /// The approval's link (the page).
        url: String,
        /// What the person is asked to do.
        message: String,
    },
}

/// A finished call: structured content, text, and the error code when it failed.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// `structuredContent`: the tool's result, or `{"error": {"code", "message"}}`.
    pub structured: Option<Value>,
    /// The text content.
    pub text: String,
    /// The tool error (`isError: true`), typed; `None` on success.
    pub error: Option<ToolFailure>,
    /// Rows returned, for results that carry rows.
    pub rows: Option<usize>,
    /// The upstream HTTP status: of an upstream error, of the write a failed call had
    /// had acknowledged, or of a successful write or EXEC.
    pub upstream_status: Option<u16>,
    /// The request ids the upstreams answered the call's requests with
    /// (`<header>=<value>`, bounded and escaped).
    pub upstream_request_ids: Vec<String>,
    /// A tool error after the upstream acknowledged a write of the call: the side effect
    /// may have happened, so the audit records the outcome as `unknown`.
    pub acknowledged: bool,
    /// The result's bytes, counted as in flight until this (and every clone) is dropped:
    /// the transport keeps it until the response is sent.
    pub held: Option<response_bytes::HeldBytes>,
    /// The engine's output as it is, for the CLI, which renders it itself (`structured` is
    /// then `None`).
    pub output: Option<Box<crate::engine::QueryOutput>>,
    /// The scopes the credential lacks for this call (`auth.insufficient_scope`): the HTTP
    /// transport answers `403` with a step-up challenge naming them instead of a result.
    pub step_up: Option<Vec<&'static str>>,
    /// Served from the tenant's result cache (`tenants[].cache`): the result's age in
    /// seconds; `None`: it ran.
    pub cache_age: Option<u64>,
}

/// A tool error as the pipeline's readers (the audit, the CLI, `policy explain`) take it:
/// the same code and message `structuredContent.error` carries, without reading them back
/// out of the JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolFailure {
    /// The stable error code.
    pub code: Code,
    /// The message, as written before escaping for the text content.
    pub message: String,
    /// With `policy.denied`: the ids of the tenant's Cedar policies that denied the call.
    pub policies: Vec<String>,
}

impl ToolOutcome {
    /// A successful outcome with nothing in it yet.
    pub(crate) fn empty() -> Self {
        ToolOutcome {
            structured: None,
            text: String::new(),
            error: None,
            rows: None,
            upstream_status: None,
            upstream_request_ids: Vec::new(),
            acknowledged: false,
            held: None,
            output: None,
            step_up: None,
            cache_age: None,
        }
    }

    /// A tool error: text `<message> [<code>]`, structured `{"error": {code, message}}`.
    pub fn error(code: Code, message: impl Into<String>) -> Self {
        Self::error_with(code, message, serde_json::Map::new())
    }

    /// A tool error as [`ToolOutcome::error`], with `fields` added beside `code` and
    /// `message` in `structuredContent.error` (e.g. `retry_after_seconds`).
    pub fn error_with(
        code: Code,
        message: impl Into<String>,
        fields: serde_json::Map<String, serde_json::Value>,
    ) -> Self {
        let message = message.into();
        let mut error = serde_json::Map::new();
        error.insert("code".into(), code.as_str().into());
        error.insert("message".into(), message.clone().into());
        error.extend(fields);
        ToolOutcome {
            structured: Some(serde_json::json!({ "error": error })),
            // Messages quote upstream bodies (the engine escapes those): shown, never acted on.
            text: crate::safe_text::escape_controls(&format!("{message} [{code}]")).into_owned(),
            error: Some(ToolFailure {
                code,
                message,
                policies: Vec::new(),
            }),
            ..ToolOutcome::empty()
        }
    }

    /// The refusal of the tenant's Cedar policies `policies`: [`ToolOutcome::error`] with
    /// code `policy.denied`, and the ids in `structuredContent.error.policies`.
    pub(crate) fn denied(message: impl Into<String>, policies: Vec<String>) -> Self {
        let mut fields = serde_json::Map::new();
        fields.insert("policies".into(), policies.clone().into());
        let mut outcome = Self::error_with(Code::PolicyDenied, message, fields);
        if let Some(failure) = &mut outcome.error {
            failure.policies = policies;
        }
        outcome
    }

    /// Whether this is a tool error.
    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }

    /// The error code of a tool error; `None` on success.
    pub fn code(&self) -> Option<Code> {
        self.error.as_ref().map(|e| e.code)
    }
}

impl ToolReply {
    /// A finished call that passed the gate without approval.
    pub(crate) fn allowed(outcome: ToolOutcome) -> Self {
        ToolReply {
            body: ReplyBody::Complete(outcome),
            decision: Decision::Allow,
            approval_id: None,
            approved_by: None,
        }
    }

    /// A call the gate stopped.
    pub(crate) fn stopped(decision: Decision, code: Code, message: impl Into<String>) -> Self {
        ToolReply {
            body: ReplyBody::Complete(ToolOutcome::error(code, message)),
            decision,
            approval_id: None,
            approved_by: None,
        }
    }

    /// This reply, about the approval `id`.
    pub(crate) fn for_approval(mut self, id: String) -> Self {
        self.approval_id = Some(id);
        self
    }

    /// This reply, about an approval `by` decided.
    pub(crate) fn decided_by(mut self, by: Option<ApprovedBy>) -> Self {
        self.approved_by = by;
        self
    }

    /// The finished outcome, if the call finished.
    pub fn outcome(&self) -> Option<&ToolOutcome> {
        match &self.body {
            ReplyBody::Complete(outcome) | ReplyBody::UrlElicitation { outcome, .. } => {
                Some(outcome)
            }
            ReplyBody::InputRequired { .. } => None,
        }
    }
}

/// Why a call was refused before any layer ran (a protocol error, not a tool result).
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
    /// The request carries no principal (fail closed: never a silent anonymous caller).
    #[error("the request carries no authenticated principal")]
    Unauthenticated,
    /// The caller's tenant cannot be served.
    #[error(transparent)]
    Tenant(#[from] TenantError),
}

impl CallError {
    /// The stable code of the refusal, for the audit record, the span and the metrics (the
    /// MCP handler answers these as JSON-RPC errors, which carry no code of ours): the
    /// caller's request was wrong (`arguments.invalid`), or the caller may not be served
    /// (`policy.refused`).
    pub fn code(&self) -> Code {
        match self {
            CallError::UnknownTool(_) | CallError::InvalidArguments { .. } => {
                Code::ArgumentsInvalid
            }
            CallError::Unauthenticated | CallError::Tenant(_) => Code::PolicyRefused,
        }
    }
}

/// What [`Pipeline::explain`] found: the call as the gate sees it, and its decision.
#[derive(Debug)]
pub struct Explanation {
    /// The tenant.
    pub tenant: String,
    /// The principal, as a person reads it.
    pub principal: String,
    /// The principal's groups.
    pub groups: Vec<String>,
    /// The tool that would run the statement.
    pub tool: &'static str,
    /// The tenant's mode.
    pub mode: crate::policy::Mode,
    /// The statement's class (the Cedar action).
    pub class: crate::policy::QueryClass,
    /// The class as written.
    pub sql_class: crate::policy::QueryClass,
    /// The upstream requests planned (`None`: not planned, or the plan failed).
    pub requests: Option<Vec<crate::engine::PlannedRequest>>,
    /// What each planned request does for the tenant, with the evidence (the engine's
    /// answer, or the tenant's `read_methods` / `not_read_methods`), in request order.
    pub effects: Vec<crate::engine::MethodEffect>,
    /// How many Cedar policies the tenant has in force (`None`: it has none configured).
    pub policies: Option<usize>,
    /// The policies' answer, request by request (`None`: not asked).
    pub answer: Option<crate::cedar::Answer>,
    /// The gate's decision: the mode's verdict, or the code and message of the refusal.
    pub verdict: Result<crate::policy::Verdict, (Code, String)>,
}

/// A prepared call as the steps hand it on: boxed, so that passing it to the next step (and
/// boxing each step's future) moves a pointer, not the whole call.
pub type Call = Box<PreparedCall>;

/// The stack after `prepare`, boxed and cheap to clone per request.
pub type CallStack = BoxCloneSyncService<Call, ToolReply, CallError>;

/// What the pipeline is built from: the server's parts, each handed by [`Pipeline::build`]
/// to the steps that use it (none gets the whole).
pub(crate) struct Parts {
    /// The gate's rules, with the engine (`bind` plans with it, the gate preflights with
    /// it) and the tenants (contexts, modes, rules and policies).
    pub(crate) keeper: Gatekeeper,
    /// The transport serving the calls.
    pub(crate) transport: Transport,
    /// The offered tools.
    pub(crate) tools: Arc<OfferedTools>,
    /// What the tools use of the server.
    pub(crate) tool_services: Arc<ToolServices>,
    /// `server.render`: the text rendering of calls that name none.
    pub(crate) render: Render,
    /// `server.max_rows`.
    pub(crate) max_rows: usize,
    /// `server.call_timeout`.
    pub(crate) call_timeout: std::time::Duration,
    /// Approval of single calls: sealing keys and the store of redeemed approvals.
    pub(crate) approvals: Approvals,
    /// Out-of-band approvals (`None`: `approval.out_of_band` is off).
    pub(crate) out_of_band: Option<Arc<OutOfBand>>,
    /// The audit of tool calls (`None`: `audit.enabled` is false).
    pub(crate) audit: Option<Auditor>,
    /// Whether reads that ran get an outcome record: always, but for the CLI only with
    /// `audit.cli_reads`.
    pub(crate) audit_reads: bool,
    /// The server's metrics (`None`: not collected, e.g. over stdio).
    pub(crate) metrics: Option<Arc<crate::telemetry::Metrics>>,
    /// The evaluation slots statements wait for, and the response bytes in flight.
    pub(crate) admission: Arc<admission::Admission>,
    /// The threads large results are rendered on.
    pub(crate) render_pool: Arc<RenderPool>,
    /// The tenants' result caches (`tenants[].cache`).
    pub(crate) results: Arc<cache::ResultCaches>,
    /// The tenants' quotas (`tenants[].quotas`).
    pub(crate) quotas: Arc<crate::quota::Quotas>,
}

/// What a call passes before the stack: its span and metrics, `prepare`, the audit of
/// what `prepare` refuses, and `bind`; and the gate, for [`Pipeline::explain`].
struct Intake {
    observe: observe::Observe,
    prepare: prepare::Prepare,
    keeper: Gatekeeper,
    audit: Arc<audit::Audit>,
    gate: Arc<gate::ModeGate>,
}

/// The pipeline: `prepare`, then the layers.
#[derive(Clone)]
pub struct Pipeline {
    intake: Arc<Intake>,
    stack: CallStack,
    /// The audit and the tool alone, for tasks resumed from another replica.
    resume_stack: CallStack,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").finish_non_exhaustive()
    }
}

impl Pipeline {
    /// Builds the pipeline from `parts`: each step gets what it uses.
    pub(crate) fn build(parts: Parts) -> Self {
        let Parts {
            keeper,
            transport,
            tools,
            tool_services,
            render,
            max_rows,
            call_timeout,
            approvals,
            out_of_band,
            audit,
            audit_reads,
            metrics,
            admission,
            render_pool,
            results,
            quotas,
        } = parts;
        let responses = admission.responses().clone();
        let audit = Arc::new(audit::Audit::new(audit, audit_reads, transport));
        let tenants = keeper.tenants().clone();
        let gate = Arc::new(gate::ModeGate {
            keeper: keeper.clone(),
            transport,
            max_rows,
            approvals,
            out_of_band,
        });
        let dispatch = dispatch::Dispatch {
            tools: tool_services,
            render: render_pool,
            priority: admission.bulk_work_priority(),
            responses: responses.clone(),
            transport,
        };
        let stack = ServiceBuilder::new()
            // Outermost: an outcome record for every call, whatever the layers below decide.
            .layer(step::StepLayer(audit.clone()))
            // The one chokepoint: mode decisions, approvals asked and redeemed.
            .layer(step::StepLayer(gate.clone()))
            // Quotas per tenant, principal and class (statements only), once the gate allowed.
            .layer(quota::QuotaStep::layer(quotas))
            // Results a tenant ran a moment ago (`tenants[].cache`), and the writes that
            // drop them; after the gate, so a hit is allowed as a run would be.
            .layer(cache::Cache::layer(
                results,
                responses.clone(),
                transport,
                max_rows,
            ))
            // A slot to evaluate in (statements only), before anything is written or sent.
            .layer(admission::Admit::layer(admission.clone()))
            // A call submitted as an MCP task becomes one here (`crate::tasks`).
            .layer(step::StepLayer::new(task::TaskStep))
            // Write-ahead: the intent of an allowed side effect is durable before it runs.
            .layer(step::StepLayer::new(audit.intent()))
            // server.call_timeout, inside the gate so a timed-out call was allowed first.
            .layer(timeout::CallTimeout::layer(call_timeout))
            // Stops the call when its client went away or cancelled it.
            .layer(step::StepLayer::new(cancel::Cancel))
            // Runs the tool on the prepared call and renders the result.
            .service(dispatch.clone());
        let resume_stack = ServiceBuilder::new()
            .layer(step::StepLayer(audit.clone()))
            .layer(step::StepLayer::new(cancel::Cancel))
            .service(dispatch);
        let intake = Intake {
            observe: observe::Observe {
                tools: tools.clone(),
                tenants: tenants.clone(),
                metrics,
            },
            prepare: prepare::Prepare {
                tools,
                tenants: tenants.clone(),
                render,
            },
            keeper,
            audit,
            gate,
        };
        Pipeline {
            intake: Arc::new(intake),
            stack: BoxCloneSyncService::new(stack),
            resume_stack: BoxCloneSyncService::new(resume_stack),
        }
    }

    /// Runs one call through every step, in its span and with its metrics.
    pub async fn call(&self, call: ToolCall) -> Result<ToolReply, CallError> {
        self.call_until(call, CancellationToken::new()).await
    }

    /// Runs one call through every step, in its span and with its metrics, stopping its
    /// work when `cancel` fires (the client went away or cancelled the call); the audit
    /// still records its outcome.
    pub async fn call_until(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> Result<ToolReply, CallError> {
        observe::observed(&self.intake.observe, call, |call| self.run(call, cancel)).await
    }

    /// What the gate would decide about `call`, running and sending nothing: `prepare` and
    /// `bind` as for a real call (the engine plans the requests), then the gate's checks
    /// and the tenant's Cedar policies (`querygate policy explain`). Approvals are not
    /// asked: a call the mode holds for approval is reported as such.
    pub async fn explain(&self, call: ToolCall) -> Result<Explanation, CallError> {
        let intake = &self.intake;
        let mut prepared = prepare::prepare(&intake.prepare, call, CancellationToken::new())?;
        bind::bind(&intake.keeper, &mut prepared).await;
        let answer = match gate::policy_answer(&intake.gate, &prepared) {
            Some(Ok(answer)) => Some(answer),
            Some(Err(_)) | None => None,
        };
        let tenant = &prepared.cx.tenant;
        let policies = intake
            .keeper
            .tenants()
            .policies(tenant)
            .map(|p| p.current().len());
        let effects = prepared
            .plan
            .requests()
            .map(|requests| intake.keeper.effects(tenant, requests))
            .unwrap_or_default();
        let verdict = match gate::check(&intake.gate, &prepared) {
            Ok(verdict) => Ok(verdict),
            Err(reply) => Err(match reply.outcome() {
                Some(outcome) => match &outcome.error {
                    Some(failure) => (failure.code, failure.message.clone()),
                    None => (Code::Internal, outcome.text.clone()),
                },
                None => (Code::Internal, "the gate asked for input".to_owned()),
            }),
        };
        Ok(Explanation {
            tenant: prepared.cx.tenant.clone(),
            principal: prepared.principal.display_name(),
            groups: prepared.principal.groups.clone(),
            tool: prepared.tool(),
            mode: prepared.mode,
            class: prepared.class,
            sql_class: prepared.sql_class,
            requests: prepared.plan.take_requests(),
            effects,
            policies,
            answer,
            verdict,
        })
    }

    async fn run(&self, call: ToolCall, cancel: CancellationToken) -> Result<ToolReply, CallError> {
        use tower::ServiceExt as _;
        let intake = &self.intake;
        // What a record of a call refused by `prepare` needs (kept only when auditing).
        let who = intake.audit.enabled().then(|| {
            (
                call.name.clone(),
                call.principal.clone(),
                call.origin.clone(),
            )
        });
        let mut prepared = match prepare::prepare(&intake.prepare, call, cancel) {
            Ok(prepared) => prepared,
            Err(err) => {
                if let Some((name, principal, origin)) = who {
                    let refused = audit::Refused {
                        name: &name,
                        principal: principal.as_ref(),
                        origin: &origin,
                        error: &err,
                    };
                    intake.audit.record_refused(refused).await;
                }
                return Err(err);
            }
        };
        bind::bind(&intake.keeper, &mut prepared).await;
        tracing::Span::current().record("class", prepared.class.as_str());
        self.stack.clone().oneshot(prepared).await
    }
}
