//! The mode gate: the one chokepoint between a prepared call and its tool. It refuses what
//! the tenant's mode never runs, statements that are not the tool's class, texts of several
//! statements and unparseable SQL; it asks a person to approve what the mode holds for
//! approval (once the engine has resolved the statement, so nobody is asked about one that
//! can never run), and runs such a call only once its approval is redeemed. Each approval
//! takes one decision: accepted, declined or dismissed, it is used up.

use std::sync::Arc;

use tower::{Service, ServiceExt as _};

use super::prompt::{plan_hash, prompt};
use super::step::{Step, StepFuture};
use super::{
    ApprovalAnswer, ApprovalChannel, ApprovalPrompt, ApprovedBy, Call, CallError, PreparedCall,
    ReplyBody, ToolReply,
};
use crate::approval::Approvals;
use crate::approval::pending::{CallKey, Requester};
use crate::approval::{ApprovalError, Binding, DecisionMethod};
use crate::audit::Decision;
use crate::code::Code;
use crate::config::OutOfBand;
use crate::engine::PlannedWrite;
use crate::mcp::gatekeeper::{Gatekeeper, Plan};
use crate::mcp::tools::Effect;
use crate::mcp::transport::Transport;
use crate::policy::{self, QueryClass, Reason, Verdict};
use crate::tenant::ToolAccess;

/// The gate, in front of the rest of the pipeline.
pub(super) struct ModeGate {
    /// The gate's rules (pinned parameters, read methods, the mode's verdict), the tenants'
    /// Cedar policies, and the engine that preflights statements before anyone is asked
    /// about them.
    pub(super) keeper: Gatekeeper,
    /// The transport, for the CLI's refusal of a call nobody can approve.
    pub(super) transport: Transport,
    /// `server.max_rows`, for the row cap the Cedar policies see.
    pub(super) max_rows: usize,
    /// Approvals asked and redeemed in the call.
    pub(super) approvals: Approvals,
    /// Out-of-band approvals (`None`: `approval.out_of_band` is off).
    pub(super) out_of_band: Option<Arc<crate::approval::OutOfBand>>,
}

impl Step for ModeGate {
    fn run<S>(self: Arc<Self>, next: S, call: Call) -> StepFuture
    where
        S: Service<Call, Response = ToolReply, Error = CallError> + Send + 'static,
        S::Future: Send,
    {
        Box::pin(gate(self, next, call))
    }
}

/// `tool "<name>" refused: <why>`, with the tenant when it is not `default` (the name is
/// the CLI command's for calls of `querygate query`).
pub(super) fn refusal(call: &PreparedCall, why: impl std::fmt::Display) -> String {
    let tenant = &call.cx.tenant;
    let tool = call.origin.command.unwrap_or(call.tool());
    if tenant == "default" {
        format!("tool \"{tool}\" refused: {why}")
    } else {
        format!("tool \"{tool}\" refused: {why} (tenant '{tenant}')")
    }
}

async fn gate<S>(gate: Arc<ModeGate>, inner: S, call: Call) -> Result<ToolReply, CallError>
where
    S: Service<Call, Response = ToolReply, Error = CallError> + Send,
    S::Future: Send,
{
    if let Err(message) = &call.render {
        let message = message.clone();
        return Ok(ToolReply::stopped(
            Decision::RefuseImmediate,
            Code::ArgumentsInvalid,
            message,
        ));
    }
    let verdict = match check(&gate, &call) {
        Ok(verdict) => verdict,
        Err(stop) => return Ok(*stop),
    };
    match verdict {
        Verdict::Allow => inner.oneshot(call).await,
        Verdict::Refuse(reason) => Ok(ToolReply::stopped(
            Decision::RefuseImmediate,
            Code::PolicyRefused,
            refusal(&call, format!("{reason}{}", bound_note(&gate, &call))),
        )),
        Verdict::NeedsApproval(reason) => approve(&gate, inner, call, reason).await,
    }
}

/// What the gate decides for a call before any approval: a stop, or the mode's verdict.
pub(super) fn check(gate: &ModeGate, call: &PreparedCall) -> Result<Verdict, Box<ToolReply>> {
    let stop =
        |code, message| Box::new(ToolReply::stopped(Decision::RefuseImmediate, code, message));
    match call.permits.tool {
        ToolAccess::Allowed => {}
        ToolAccess::NotInTenantAllowlist => {
            return Err(stop(
                Code::PolicyToolNotAllowed,
                refusal(
                    call,
                    "this tenant may not call it (tenants[].allowed_tools)",
                ),
            ));
        }
        ToolAccess::NotInScopes => {
            return Err(stop(
                Code::PolicyToolNotAllowed,
                refusal(call, "the credential's scopes do not grant it"),
            ));
        }
    }
    match call.spec.effect {
        Effect::Read => {
            scoped(call, policy::required_scopes(QueryClass::Select)).map(|()| Verdict::Allow)
        }
        Effect::RegistryInstall if call.permits.pull_provider => {
            scoped(call, &[policy::SCOPE_WRITE]).map(|()| Verdict::Allow)
        }
        Effect::RegistryInstall => Err(stop(
            Code::PolicyRefused,
            refusal(
                call,
                "this tenant may not install providers into the shared registry (tenants[].allow_pull_provider)",
            ),
        )),
        Effect::Sql(runs) => {
            if call.statement_count > 1 {
                return Err(stop(
                    Code::PolicyMultipleStatements,
                    refusal(
                        call,
                        format!(
                            "the SQL holds {} statements (the most dangerous is {}); send one statement per call",
                            call.statement_count, call.class
                        ),
                    ),
                ));
            }
            match &call.statement {
                Some(Ok(_)) => {}
                Some(Err(err)) => {
                    return Err(stop(Code::from(err.kind()), err.message().to_owned()));
                }
                None => return Err(stop(Code::Internal, "the SQL was not parsed".to_owned())),
            }
            if !runs.contains(&call.sql_class) && !super::exec_rows::reads_exec_rows(call, runs) {
                return Err(stop(Code::PolicyWrongTool, refusal(call, wrong_tool(call))));
            }
            // The class as `bind` left it: a SELECT bound to POST… needs `querygate:exec`.
            scoped(call, policy::required_scopes(call.class))?;
            if let Some(requests) = call.plan.requests()
                && let Err(pinned) = gate.keeper.check_pins(&call.cx.tenant, requests)
            {
                return Err(stop(Code::PolicyParameterPinned, refusal(call, pinned)));
            }
            let verdict = Gatekeeper::verdict(call.mode, call.class);
            if matches!(verdict, Verdict::Refuse(_)) {
                // The mode decides first: its refusal names it.
                return Ok(verdict);
            }
            match ask_policies(gate, call) {
                Some(Err(reply)) => Err(reply),
                Some(Ok(_)) | None => Ok(verdict),
            }
        }
    }
}

/// A stop when the credential lacks any of `required` (`auth.jwt.enforce_query_scopes`):
/// `auth.insufficient_scope`, naming the scopes it lacks; the HTTP transport turns it into a
/// `403` step-up challenge ([`ToolOutcome::step_up`](super::ToolOutcome::step_up)).
fn scoped(call: &PreparedCall, required: &[&'static str]) -> Result<(), Box<ToolReply>> {
    let missing = call.principal.missing_scopes(required);
    if missing.is_empty() {
        return Ok(());
    }
    let what = match call.spec.effect {
        Effect::Sql(_) => format!("a {} statement", call.class),
        Effect::Read => "this tool".to_owned(),
        Effect::RegistryInstall => "installing a provider".to_owned(),
    };
    let message = refusal(
        call,
        format!(
            "the credential lacks the scope {} that {what} needs (auth.jwt.enforce_query_scopes)",
            missing.join(" ")
        ),
    );
    let mut fields = serde_json::Map::new();
    fields.insert("required_scopes".into(), serde_json::json!(missing));
    let outcome = super::ToolOutcome {
        step_up: Some(missing),
        ..super::ToolOutcome::error_with(Code::AuthInsufficientScope, message, fields)
    };
    Err(Box::new(ToolReply {
        body: ReplyBody::Complete(outcome),
        decision: Decision::RefuseImmediate,
        approval_id: None,
        approved_by: None,
    }))
}

/// What the tenant's Cedar policies say about `call` (`None`: the tenant has none): the
/// answer, or the refusal of a statement they deny or cannot be asked about.
fn ask_policies(gate: &ModeGate, call: &PreparedCall) -> Option<Result<(), Box<ToolReply>>> {
    Some(
        policy_answer(gate, call)?.and_then(|answer| match answer.denied() {
            None => Ok(()),
            Some(denied) => Err(Box::new(ToolReply {
                body: super::ReplyBody::Complete(super::ToolOutcome::denied(
                    format!("{}; nothing was sent", refusal(call, denied.why_denied())),
                    answer.policy_ids(),
                )),
                decision: Decision::RefuseImmediate,
                approval_id: None,
                approved_by: None,
            })),
        }),
    )
}

/// The tenant's Cedar policies' answer about `call`, request by request (`None`: the
/// tenant has none), or the refusal of a statement they cannot be asked about.
pub(super) fn policy_answer(
    gate: &ModeGate,
    call: &PreparedCall,
) -> Option<Result<crate::cedar::Answer, Box<ToolReply>>> {
    let tenants = gate.keeper.tenants();
    let tenant = tenants.config(&call.cx.tenant)?;
    let policies = tenants.policies(&call.cx.tenant)?.current();
    let stop =
        |code, message| Box::new(ToolReply::stopped(Decision::RefuseImmediate, code, message));
    let requests = match &call.plan {
        Plan::Planned(requests) => requests,
        // Fail closed: what cannot be planned cannot be asked about. The plan's own error
        // says why (running the statement would fail the same way).
        Plan::Failed(code, message) => return Some(Err(stop(*code, message.clone()))),
        Plan::NotPlanned => {
            return Some(Err(stop(
                Code::Internal,
                "the statement's requests were not planned for the tenant's policies".to_owned(),
            )));
        }
    };
    let verb = match &call.statement {
        Some(Ok(statement)) => crate::mcp::tools::verb(statement.kind()),
        _ => "UNKNOWN",
    };
    let row_limit = call.input.row_limit();
    let question = crate::cedar::Question {
        principal: &call.principal,
        tool: call.tool(),
        mode: call.mode,
        class: call.class,
        sql_class: call.sql_class,
        verb,
        row_cap: crate::mcp::tools::row_cap(row_limit, gate.max_rows),
        requests,
        rules: &tenant.rules,
    };
    Some(
        crate::cedar::decide(&policies, &question).map_err(|message| {
            stop(
                Code::Internal,
                refusal(
                    call,
                    format!("the Cedar policies could not be asked: {message}"),
                ),
            )
        }),
    )
}

/// Why a statement is not this tool's, naming the tool that runs it.
fn wrong_tool(call: &PreparedCall) -> String {
    let kind = match &call.statement {
        Some(Ok(statement)) => crate::mcp::tools::statement_name(statement),
        _ => "a statement".to_owned(),
    };
    let runs = match call.tool() {
        "run_select_query" => "reads only (SELECT, SHOW, DESCRIBE)",
        "run_mutation_query" => "INSERT, UPDATE, REPLACE and DELETE",
        "run_lifecycle_operation" => "EXEC p.s.r.method @param = 'value', …",
        _ => "other statements",
    };
    let use_instead = match call.sql_class {
        QueryClass::Select => "use run_select_query".to_owned(),
        QueryClass::MutationCreate | QueryClass::MutationDelete => {
            "use run_mutation_query".to_owned()
        }
        QueryClass::Lifecycle => "use run_lifecycle_operation".to_owned(),
        QueryClass::Unknown => match &call.statement {
            Some(Ok(s)) if s.kind() == crate::engine::StatementKind::RegistryPull => {
                "use pull_provider".to_owned()
            }
            Some(Ok(s)) => crate::mcp::tools::nested_writes_advice(s)
                .unwrap_or_else(|| "no tool runs it".to_owned()),
            _ => "no tool runs it".to_owned(),
        },
    };
    format!(
        "{} runs {runs}; this statement is {kind} ({}): {use_instead}",
        call.tool(),
        call.sql_class
    )
}

/// Why a statement takes another class than the one written, when it does: the request
/// with the strongest effect, the evidence for that effect, and the setting that changes it.
fn bound_note(gate: &ModeGate, call: &PreparedCall) -> String {
    if call.class == call.sql_class {
        return String::new();
    }
    let rules = gate.keeper.rules(&call.cx.tenant);
    let strongest = call.plan.requests().and_then(|requests| {
        requests
            .iter()
            .map(|request| (rules.effect(request), request))
            .max_by_key(|(effect, _)| effect.effect)
    });
    let verb = match &call.statement {
        Some(Ok(statement)) => crate::mcp::tools::verb(statement.kind()),
        _ => "statement",
    };
    match strongest {
        Some((effect, request)) if !effect.is_read() => format!(
            "; this {verb} runs {} with {}, whose effect is {} ({}), so it is a {} operation (tenants[].read_methods can name the method as a read)",
            request.full_method(),
            request.http_method,
            effect.effect,
            crate::safe_text::escape_inline(&effect.evidence),
            call.class
        ),
        _ => String::new(),
    }
}

/// Resolves the statement through the engine as running it would, sending nothing: a
/// statement that can never run is refused with its real error before anyone is asked.
pub(super) async fn preflight(
    gate: &ModeGate,
    call: &PreparedCall,
) -> Result<Vec<PlannedWrite>, ToolReply> {
    // `check` refused every SQL call whose statement did not parse.
    let Some(Ok(statement)) = &call.statement else {
        return Ok(Vec::new());
    };
    gate.keeper
        .engine()
        .preflight(&call.cx, statement)
        .await
        .map_err(|err| {
            ToolReply::stopped(
                Decision::RefuseImmediate,
                Code::from(err.kind()),
                err.message().to_owned(),
            )
        })
}

#[expect(
    clippy::too_many_lines,
    reason = "the approval flow of one held call: a retry's answer, then asking, each step with its own refusal"
)]
async fn approve<S>(
    gate: &ModeGate,
    inner: S,
    call: Call,
    reason: Reason,
) -> Result<ToolReply, CallError>
where
    S: Service<Call, Response = ToolReply, Error = CallError> + Send,
    S::Future: Send,
{
    let approvals = &gate.approvals;
    // The approval is bound to the call's arguments (without `format`, which only changes
    // how the result is rendered), digested here, for the calls that are held only.
    let arguments_sha256 = &crate::digest::sha256_hex(
        crate::digest::canonical_json_object(&call.arguments).as_bytes(),
    );
    let binding = Binding {
        tenant: &call.cx.tenant,
        method: call.principal.method.as_str(),
        issuer: call.principal.issuer.as_deref().unwrap_or_default(),
        subject: &call.principal.subject,
        tool: call.tool(),
        arguments_sha256,
    };
    if let Some(oob) = out_of_band_for(gate, &call) {
        let key = CallKey {
            tenant: binding.tenant.to_owned(),
            requester: Requester {
                method: binding.method.to_owned(),
                issuer: binding.issuer.to_owned(),
                subject: binding.subject.to_owned(),
            },
            tool: binding.tool.to_owned(),
            arguments_sha256: arguments_sha256.to_owned(),
        };
        return super::out_of_band::approve(gate, oob, inner, call, reason, key).await;
    }
    let refused = |decision: Decision, code: Code, why: String| {
        Ok(ToolReply::stopped(decision, code, refusal(&call, why)))
    };
    let again = "call the tool again without requestState to ask for a new approval";
    // A retry carrying a state: its answer is decided here; without one, it is asked again
    // below with the same state.
    let reask = match &call.approval {
        ApprovalChannel::Resumable {
            request_state: Some(sealed),
            answer,
        } => {
            let state = match approvals.open(sealed, binding) {
                Ok(state) => state,
                Err(err) => {
                    return refused(
                        Decision::RefuseImmediate,
                        Code::PolicyApprovalInvalid,
                        format!("{err}; {again}"),
                    );
                }
            };
            match answer {
                Some(ApprovalAnswer::Accept) => {
                    // Planned again: the call runs only as the person was shown it.
                    let planned = match preflight(gate, &call).await {
                        Ok(planned) => planned,
                        Err(reply) => return Ok(reply),
                    };
                    if plan_hash(&planned) != state.plan {
                        burn(approvals, &call, &state).await;
                        return refused(
                            Decision::RefuseImmediate,
                            Code::PolicyApprovalInvalid,
                            format!(
                                "{PLAN_CHANGED} since it was approved; nothing was sent; {again}"
                            ),
                        );
                    }
                    return match approvals.redeem(&state).await {
                        Ok(()) => {
                            let by = asked_in_call(&call, DecisionMethod::Mrtr);
                            run_approved(inner, call, state.id, by).await
                        }
                        Err(err @ ApprovalError::Replayed) => refused(
                            Decision::RefuseImmediate,
                            Code::PolicyApprovalInvalid,
                            format!("{err}; {again}"),
                        ),
                        Err(err) => refused(
                            Decision::RefuseImmediate,
                            Code::PolicyApprovalUnavailable,
                            err.to_string(),
                        ),
                    };
                }
                Some(other) => {
                    // One decision per approval, and it is final: a declined or dismissed
                    // state is burnt, so a later retry of it with "accept" runs nothing.
                    burn(approvals, &call, &state).await;
                    return Ok(not_approved(&call, other.clone(), state.id, approvals));
                }
                None => Some((sealed.clone(), state.id, state.plan)),
            }
        }
        _ => None,
    };
    // Everything below asks a person, or says why nobody can be asked: a statement that
    // can never run is refused with its real error first.
    let planned = match preflight(gate, &call).await {
        Ok(planned) => planned,
        Err(reply) => return Ok(reply),
    };
    let plan = plan_hash(&planned);
    let question = prompt(&call, &planned, &plan);
    match &call.approval {
        ApprovalChannel::Unavailable if gate.transport == Transport::Cli => refused(
            Decision::NeedsApprovalUnavailable,
            Code::PolicyApprovalRequired,
            format!(
                "{reason}; this {} statement needs approval: run it again with --yes to approve it, or from a terminal to be asked",
                call.class
            ),
        ),
        ApprovalChannel::Unavailable => refused(
            Decision::NeedsApprovalUnavailable,
            Code::PolicyApprovalRequired,
            format!(
                "{reason} and the MCP client declared no elicitation capability, so nobody can be asked to approve it in the call. Use a client that supports elicitation (over MCP 2026-07-28, or in a stdio session), or ask an operator to {OUT_OF_BAND_ADVICE}"
            ),
        ),
        ApprovalChannel::StatelessLegacy { protocol } => refused(
            Decision::NeedsApprovalUnavailable,
            Code::PolicyApprovalRequired,
            format!(
                "{reason}; this client's protocol (MCP {}) cannot be asked over stateless HTTP: the server keeps no session to send it an elicitation request in the middle of the call, whatever capabilities it declared. Use a client speaking MCP 2026-07-28 with elicitation, connect over stdio, or ask an operator to {OUT_OF_BAND_ADVICE}",
                crate::safe_text::escape_inline(protocol)
            ),
        ),
        ApprovalChannel::Resumable { .. } => match reask {
            Some((_, _, approved)) if approved != plan => refused(
                Decision::RefuseImmediate,
                Code::PolicyApprovalInvalid,
                format!("{PLAN_CHANGED} since the approval was asked; {again}"),
            ),
            // No answer yet: ask again with the same state (the spec's re-ask).
            Some((sealed, id, _)) => Ok(input_required(question, sealed, id)),
            None => ask(&call, question, binding, approvals, &plan),
        },
        ApprovalChannel::Inline(approver) => {
            // Without an id the approval could not be told apart in the audit: refuse.
            let id = match approvals.new_id() {
                Ok(id) => id,
                Err(err) => {
                    return refused(
                        Decision::RefuseImmediate,
                        Code::PolicyApprovalUnavailable,
                        format!("{err}; nobody was asked and nothing was sent"),
                    );
                }
            };
            let question = ApprovalPrompt {
                message: question,
                class: call.class,
                reason: reason.to_string(),
                ttl: approvals.ttl(),
            };
            match approver.ask(question, call.cancel.clone()).await {
                ApprovalAnswer::Accept => {
                    // Planned again: the call runs only as the person was shown it.
                    let planned = match preflight(gate, &call).await {
                        Ok(planned) => planned,
                        Err(reply) => return Ok(reply.for_approval(id)),
                    };
                    if plan_hash(&planned) != plan {
                        return Ok(ToolReply::stopped(
                            Decision::RefuseImmediate,
                            Code::PolicyApprovalInvalid,
                            refusal(
                                &call,
                                format!("{PLAN_CHANGED} while the approval prompt was open; nothing was sent"),
                            ),
                        )
                        .for_approval(id));
                    }
                    let by = asked_in_call(&call, DecisionMethod::Elicitation);
                    run_approved(inner, call, id, by).await
                }
                ApprovalAnswer::Cancel if call.cancel.is_cancelled() => Ok(ToolReply::stopped(
                    Decision::NeedsApprovalCancelled,
                    Code::CallCancelled,
                    refusal(
                        &call,
                        "the client cancelled the call while its approval prompt was open; nothing was done",
                    ),
                )
                .for_approval(id)),
                other => Ok(not_approved(&call, other, id, approvals)),
            }
        }
    }
}

/// The refusal for an answer other than accept.
fn not_approved(
    call: &PreparedCall,
    answer: ApprovalAnswer,
    id: String,
    approvals: &crate::approval::Approvals,
) -> ToolReply {
    let (decision, code, why) = match answer {
        ApprovalAnswer::Cancel => (
            Decision::NeedsApprovalCancelled,
            Code::PolicyApprovalCancelled,
            "approval prompt was dismissed".to_owned(),
        ),
        ApprovalAnswer::Expired => (
            Decision::NeedsApprovalCancelled,
            Code::PolicyApprovalCancelled,
            format!(
                "approval prompt was not answered within {}",
                humantime::format_duration(approvals.ttl())
            ),
        ),
        ApprovalAnswer::Decline => (
            Decision::NeedsApprovalDeclined,
            Code::PolicyApprovalDeclined,
            "user declined approval".to_owned(),
        ),
        ApprovalAnswer::Failed(why) => (
            Decision::NeedsApprovalDeclined,
            Code::PolicyApprovalDeclined,
            why,
        ),
        // Not reached: an accepted approval runs the call.
        ApprovalAnswer::Accept => (
            Decision::RefuseImmediate,
            Code::Internal,
            "an accepted approval was treated as a refusal".to_owned(),
        ),
    };
    ToolReply::stopped(decision, code, refusal(call, why)).for_approval(id)
}

/// What a refusal says when planning a call again no longer gives what was approved.
pub(super) const PLAN_CHANGED: &str = "the plan (what would be sent upstream) changed";

/// Uses up an approval that was decided without running (declined, dismissed, or its plan
/// changed), so that no later retry of its state runs the call.
async fn burn(
    approvals: &crate::approval::Approvals,
    call: &PreparedCall,
    state: &crate::approval::ApprovalState,
) {
    match approvals.redeem(state).await {
        Ok(()) | Err(ApprovalError::Replayed) => {}
        Err(err) => tracing::warn!(
            tenant = %call.cx.tenant,
            approval_id = %state.id,
            "a refused approval could not be recorded as used: {err}"
        ),
    }
}

/// Issues an approval request: the prompt and the sealed state, bound to `plan`.
fn ask(
    call: &PreparedCall,
    prompt: String,
    binding: Binding<'_>,
    approvals: &crate::approval::Approvals,
    plan: &str,
) -> Result<ToolReply, CallError> {
    match approvals.issue(binding, call.class.as_str(), plan) {
        Ok((sealed, state)) => Ok(input_required(prompt, sealed, state.id)),
        Err(err) => Ok(ToolReply::stopped(
            Decision::RefuseImmediate,
            Code::PolicyApprovalUnavailable,
            refusal(call, err),
        )),
    }
}

fn input_required(prompt: String, sealed: String, id: String) -> ToolReply {
    ToolReply {
        body: ReplyBody::InputRequired { prompt, sealed },
        decision: Decision::NeedsApprovalRequested,
        approval_id: Some(id),
        approved_by: None,
    }
}

/// Who approved a call asked in the call: the person at the client, i.e. its principal.
fn asked_in_call(call: &PreparedCall, method: DecisionMethod) -> ApprovedBy {
    ApprovedBy {
        approver: call.principal.display_name(),
        approver_id: call.principal.typed_name(),
        method,
        reason: String::new(),
    }
}

/// Runs a call whose approval `id` (decided `by`) was redeemed.
pub(super) async fn run_approved<S>(
    inner: S,
    call: Call,
    id: String,
    by: ApprovedBy,
) -> Result<ToolReply, CallError>
where
    S: Service<Call, Response = ToolReply, Error = CallError> + Send,
    S::Future: Send,
{
    let mut call = call;
    call.approved = Some(super::prepare::Approved {
        id: id.clone(),
        by: by.clone(),
    });
    let mut reply = inner.oneshot(call).await?;
    reply.decision = Decision::NeedsApprovalAccepted;
    reply.approval_id = Some(id);
    reply.approved_by = Some(by);
    Ok(reply)
}

/// What a client that cannot be asked in the call is told to ask an operator for, when
/// out-of-band approval is off: the setting that gets its calls approved, not a weaker mode.
const OUT_OF_BAND_ADVICE: &str = "set `approval.out_of_band: fallback`: then the call becomes a pending approval (policy.approval_pending, with its id and link) that an approver of the tenant decides, and the same call repeated after the approval runs once";

/// The out-of-band approvals a call needing approval goes to, if it does: with
/// `approval.out_of_band: always` every call, with `fallback` those whose client cannot be
/// asked in the call.
fn out_of_band_for(
    gate: &ModeGate,
    call: &PreparedCall,
) -> Option<Arc<crate::approval::OutOfBand>> {
    let oob = gate.out_of_band.as_ref()?;
    let goes = match oob.config().out_of_band {
        OutOfBand::Off => false,
        OutOfBand::Always => true,
        OutOfBand::Fallback => matches!(
            call.approval,
            ApprovalChannel::StatelessLegacy { .. } | ApprovalChannel::Unavailable
        ),
    };
    goes.then(|| oob.clone())
}
