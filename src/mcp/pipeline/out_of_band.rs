//! Out-of-band approval in the gate: a call that needs approval, and goes out of band
//! (`approval.out_of_band`), finds or makes the pending approval of the same call (tenant,
//! principal, tool, arguments digest), waits up to `approval.wait` for its decision
//! (reporting progress where the client gave a progress token), and then runs once
//! (approved: `approved → used` in one step), is refused (denied, expired), or returns the
//! pending result with the approval's id and link. Planned again before it runs: a changed
//! plan is refused and uses the approval up.

use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use tokio::time::sleep;
use tower::Service;

use super::gate::{ModeGate, PLAN_CHANGED, preflight, refusal, run_approved};
use super::prompt::{plan_hash, prompt, write_line};
use super::{ApprovedBy, Call, CallError, PreparedCall, ToolOutcome, ToolReply};
use crate::approval::pending::{CallKey, PendingRequest, WriteRequests, now_ms};
use crate::approval::{OutOfBand, PendingApproval, PendingState};
use crate::audit::Decision;
use crate::audit::record::timestamp;
use crate::code::Code;
use crate::policy::Reason;
use crate::safe_text::escape_inline;

/// How often a waiting call looks at its approval.
const POLL: Duration = Duration::from_millis(200);

/// How often a waiting call reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

pub(super) async fn approve<S>(
    gate: &ModeGate,
    oob: Arc<OutOfBand>,
    inner: S,
    call: Call,
    reason: Reason,
    key: CallKey,
) -> Result<ToolReply, CallError>
where
    S: Service<Call, Response = ToolReply, Error = CallError> + Send,
    S::Future: Send,
{
    // A statement that can never run is refused with its real error before anyone is asked.
    let planned = match preflight(gate, &call).await {
        Ok(planned) => planned,
        Err(reply) => return Ok(reply),
    };
    let plan = plan_hash(&planned);
    let approval = match oob.store().current(&key).await {
        Ok(Some(approval)) => approval,
        Ok(None) => {
            let id = match gate.approvals.new_id() {
                Ok(id) => id,
                Err(err) => return Ok(unavailable(&call, err)),
            };
            let created_at_ms = now_ms();
            let ttl_ms = u64::try_from(gate.approvals.ttl().as_millis()).unwrap_or(u64::MAX);
            let request = PendingRequest {
                id: id.clone(),
                tenant: key.tenant.clone(),
                requester: key.requester.clone(),
                tool: key.tool.clone(),
                class: call.class.as_str().to_owned(),
                mode: call.mode.as_str().to_owned(),
                sql: call.sql.clone(),
                arguments_sha256: key.arguments_sha256.clone(),
                plan_hash: plan.clone(),
                writes: planned.iter().map(write_line).collect(),
                requests: planned.iter().map(WriteRequests::of).collect(),
                prompt: prompt(&call, &planned, &plan),
                created_at_ms,
                expires_at_ms: created_at_ms.saturating_add(ttl_ms),
            };
            let max_pending = oob.config().max_pending_per_principal;
            match oob.store().create(request, max_pending).await {
                Ok(Ok(approval)) => {
                    // Announced once: by the call that made it.
                    if approval.request.id == id {
                        oob.announce(&approval);
                    }
                    approval
                }
                Ok(Err(too_many)) => return Ok(too_many_pending(&call, too_many.pending)),
                Err(err) => return Ok(unavailable(&call, err)),
            }
        }
        Err(err) => return Ok(unavailable(&call, err)),
    };
    wait(gate, &oob, inner, call, approval, &reason).await
}

/// Waits for the decision of `approval` up to `approval.wait`, then acts on its state.
async fn wait<S>(
    gate: &ModeGate,
    oob: &OutOfBand,
    inner: S,
    call: Call,
    mut approval: PendingApproval,
    reason: &Reason,
) -> Result<ToolReply, CallError>
where
    S: Service<Call, Response = ToolReply, Error = CallError> + Send,
    S::Future: Send,
{
    let started = Instant::now();
    let wait = oob.config().wait;
    let mut reported: Option<Instant> = None;
    loop {
        match approval.state_now() {
            PendingState::Approved => return run(gate, oob, inner, call, approval).await,
            PendingState::Denied => return Ok(denied(&call, &approval)),
            PendingState::Expired => {
                let id = &approval.request.id;
                let tenant = &approval.request.tenant;
                // Expired for good: the call's next repetition asks anew.
                for from in [PendingState::Pending, PendingState::Approved] {
                    if let Err(err) = oob
                        .store()
                        .transition(tenant, id, from, PendingState::Expired)
                        .await
                    {
                        return Ok(unavailable(&call, err));
                    }
                }
                return Ok(expired(&call, &approval));
            }
            PendingState::Used => {
                return Ok(ToolReply::stopped(
                    Decision::RefuseImmediate,
                    Code::PolicyApprovalInvalid,
                    refusal(
                        &call,
                        format!(
                            "approval {} was already used; nothing was sent; repeat the call to ask for a new approval",
                            approval.request.id
                        ),
                    ),
                )
                .for_approval(approval.request.id.clone()));
            }
            PendingState::Pending => {}
        }
        let elapsed = started.elapsed();
        if elapsed >= wait {
            return Ok(pending(&call, oob, &approval, reason));
        }
        if let Some(progress) = &call.progress
            && reported.is_none_or(|at| at.elapsed() >= PROGRESS_EVERY)
        {
            reported = Some(Instant::now());
            progress
                .report(
                    elapsed.as_secs_f64(),
                    Some(wait.as_secs_f64()),
                    format!(
                        "waiting for approval {} ({})",
                        approval.request.id,
                        oob.link(&approval.request.id)
                    ),
                )
                .await;
        }
        tokio::select! {
            biased;
            () = call.cancel.cancelled() => {
                return Ok(ToolReply::stopped(
                    Decision::NeedsApprovalCancelled,
                    Code::CallCancelled,
                    refusal(
                        &call,
                        format!(
                            "the client cancelled the call while it waited for approval {}; nothing was done (the approval stays pending: repeat the call after the decision)",
                            approval.request.id
                        ),
                    ),
                )
                .for_approval(approval.request.id.clone()));
            }
            () = sleep(POLL.min(wait - elapsed)) => {}
        }
        approval = match oob
            .store()
            .get(&approval.request.tenant, &approval.request.id)
            .await
        {
            Ok(Some(fresh)) => fresh,
            Ok(None) => {
                return Ok(unavailable(
                    &call,
                    format!("approval {} is gone from the store", approval.request.id),
                ));
            }
            Err(err) => return Ok(unavailable(&call, err)),
        };
    }
}

/// Runs an approved call once: planned again, then `approved → used`; only the repetition
/// that moved it runs.
async fn run<S>(
    gate: &ModeGate,
    oob: &OutOfBand,
    inner: S,
    call: Call,
    approval: PendingApproval,
) -> Result<ToolReply, CallError>
where
    S: Service<Call, Response = ToolReply, Error = CallError> + Send,
    S::Future: Send,
{
    let id = approval.request.id.clone();
    let tenant = approval.request.tenant.clone();
    let by = decided_by(&approval);
    let planned = match preflight(gate, &call).await {
        Ok(planned) => planned,
        Err(reply) => return Ok(reply.for_approval(id)),
    };
    let moved = oob
        .store()
        .transition(&tenant, &id, PendingState::Approved, PendingState::Used)
        .await;
    match moved {
        Ok(true) if plan_hash(&planned) == approval.request.plan_hash => {
            run_approved(inner, call, id, by).await
        }
        // Used up: the approval was for another plan.
        Ok(true) => Ok(ToolReply::stopped(
            Decision::RefuseImmediate,
            Code::PolicyApprovalInvalid,
            refusal(
                &call,
                format!(
                    "{PLAN_CHANGED} since approval {id} was asked; nothing was sent; repeat the call to ask for a new approval"
                ),
            ),
        )
        .for_approval(id)
        .decided_by(Some(by))),
        Ok(false) => Ok(ToolReply::stopped(
            Decision::RefuseImmediate,
            Code::PolicyApprovalInvalid,
            refusal(
                &call,
                format!(
                    "approval {id} was already used by a repetition of this call (or expired); nothing was sent; repeat the call to ask for a new approval"
                ),
            ),
        )
        .for_approval(id)),
        Err(err) => Ok(unavailable(&call, err)),
    }
}

fn decided_by(approval: &PendingApproval) -> ApprovedBy {
    match &approval.decision {
        Some(decided) => ApprovedBy {
            approver: decided.by.clone(),
            approver_id: decided.by_id.clone(),
            method: decided.method,
            reason: decided.reason.clone(),
        },
        // Not reached: a decided approval carries its decision.
        None => ApprovedBy {
            approver: "unknown".to_owned(),
            approver_id: "unknown".to_owned(),
            method: crate::approval::DecisionMethod::Api,
            reason: String::new(),
        },
    }
}

fn at(ms: u64) -> String {
    timestamp(UNIX_EPOCH + Duration::from_millis(ms))
}

/// The caller holds as many pending approvals as it may: nothing was asked or sent.
fn too_many_pending(call: &PreparedCall, pending: u32) -> ToolReply {
    ToolReply::stopped(
        Decision::RefuseImmediate,
        Code::LimitExceeded,
        refusal(
            call,
            format!(
                "this caller already has {pending} pending approvals in the tenant (approval.max_pending_per_principal); nothing was asked or sent: repeat a call whose approval is pending, or this one once some are decided or expired"
            ),
        ),
    )
}

fn unavailable(call: &PreparedCall, err: impl std::fmt::Display) -> ToolReply {
    ToolReply::stopped(
        Decision::RefuseImmediate,
        Code::PolicyApprovalUnavailable,
        refusal(call, format!("{err}; nothing was sent")),
    )
}

fn denied(call: &PreparedCall, approval: &PendingApproval) -> ToolReply {
    let by = decided_by(approval);
    let reason = if by.reason.is_empty() {
        "no reason given".to_owned()
    } else {
        escape_inline(&by.reason).into_owned()
    };
    ToolReply::stopped(
        Decision::NeedsApprovalDeclined,
        Code::PolicyApprovalDeclined,
        refusal(
            call,
            format!(
                "approval {} was denied by {} ({}): {reason}; nothing was sent",
                approval.request.id,
                escape_inline(&by.approver),
                by.method.as_str()
            ),
        ),
    )
    .for_approval(approval.request.id.clone())
    .decided_by(Some(by))
}

fn expired(call: &PreparedCall, approval: &PendingApproval) -> ToolReply {
    ToolReply::stopped(
        Decision::NeedsApprovalCancelled,
        Code::PolicyApprovalExpired,
        refusal(
            call,
            format!(
                "approval {} expired at {} before it was decided or used; nothing was sent; repeat the call to ask for a new approval",
                approval.request.id,
                at(approval.request.expires_at_ms)
            ),
        ),
    )
    .for_approval(approval.request.id.clone())
}

/// The pending result: what is waited for, where to decide it, until when, and what to do.
fn pending(
    call: &PreparedCall,
    oob: &OutOfBand,
    approval: &PendingApproval,
    reason: &Reason,
) -> ToolReply {
    let id = &approval.request.id;
    let link = oob.link(id);
    let expires = at(approval.request.expires_at_ms);
    let tool = call.origin.command.unwrap_or(call.tool());
    let message = format!(
        "tool \"{tool}\" needs approval ({reason}): approval {id} is pending; an approver decides it at {link} or with `querygate approvals approve {id} --tenant {tenant}` before {expires}. Nothing was sent. Repeat this same call after the decision: approved, it runs once; denied, it is refused with the reason",
        tenant = escape_inline(&call.cx.tenant),
    );
    let mut fields = serde_json::Map::new();
    fields.insert("approval_id".into(), id.clone().into());
    fields.insert("link".into(), link.into());
    fields.insert("expires_at".into(), expires.clone().into());
    fields.insert("state".into(), "pending".into());
    fields.insert(
        "retry".into(),
        "repeat the same call (same tool and arguments) after the decision".into(),
    );
    let outcome = ToolOutcome::error_with(Code::PolicyApprovalPending, message, fields);
    // A client of an older revision over stateless HTTP cannot be asked in the call; with
    // `approval.url_elicitation` it is sent to the page (MCP 2025-11-25 URL mode).
    let body = if oob.config().url_elicitation
        && matches!(
            call.approval,
            super::ApprovalChannel::StatelessLegacy { .. }
        ) {
        super::ReplyBody::UrlElicitation {
            outcome,
            id: id.clone(),
            url: oob.link(id),
            message: format!(
                "Approval {id} is pending: an approver other than you decides it on this page (sign in) before {expires}; then repeat the same call: approved, it runs once"
            ),
        }
    } else {
        super::ReplyBody::Complete(outcome)
    };
    ToolReply {
        body,
        decision: Decision::NeedsApprovalRequested,
        approval_id: Some(id.clone()),
        approved_by: None,
    }
}
