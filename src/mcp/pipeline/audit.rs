//! The audit layers. `AuditLayer`, outermost, writes one `outcome` record for every call
//! that passed `prepare` — allowed, refused, held for approval, failed or timed out — before
//! the reply goes back. `IntentLayer`, after the gate and before the timeout, writes an
//! `intent` record for a call with side effects before anything of it runs. Both apply
//! `audit.failure_mode` through [`Auditor::record`]: a failed intent refuses the call before
//! the upstream sees a request; a failed outcome replaces the reply with the audit error.
//! Reads that `querygate query` runs get no record unless `audit.cli_reads` is on (its
//! refusals, writes, EXECs and installs always do).

use std::sync::{Arc, OnceLock};

use tower::{Service, ServiceExt as _};

use super::step::{Step, StepFuture};
use super::{Call, CallError, PreparedCall, ReplyBody, ToolOutcome, ToolReply};
use crate::audit::Auditor;
use crate::audit::record::{self, AuditRecord, Decision, Outcome, Phase};
use crate::code::Code;
use crate::mcp::transport::Transport;
use crate::tenant::Principal;

/// The outcome record of every call.
pub(super) struct Audit {
    /// Where records go (`None`: `audit.enabled` is false).
    auditor: Option<Auditor>,
    /// Whether reads that ran get an outcome record (see [`Parts::audit_reads`]).
    ///
    /// [`Parts::audit_reads`]: super::Parts::audit_reads
    audit_reads: bool,
    /// The transport, for the local user of stdio and CLI records.
    transport: Transport,
}

impl Audit {
    pub(super) fn new(auditor: Option<Auditor>, audit_reads: bool, transport: Transport) -> Self {
        Audit {
            auditor,
            audit_reads,
            transport,
        }
    }

    /// Whether calls are audited.
    pub(super) fn enabled(&self) -> bool {
        self.auditor.is_some()
    }

    /// The intent step, writing to the same auditor.
    pub(super) fn intent(&self) -> Intent {
        Intent {
            auditor: self.auditor.clone(),
            transport: self.transport,
        }
    }

    /// Audits a call that `prepare` refused (unknown tool, invalid arguments, no principal,
    /// an unknown tenant): nothing ran; the record says who tried what.
    pub(super) async fn record_refused(&self, call: Refused<'_>) {
        if let Some(auditor) = &self.auditor {
            record_refused(auditor, self.transport, call).await;
        }
    }
}

impl Step for Audit {
    fn run<S>(self: Arc<Self>, inner: S, call: Call) -> StepFuture
    where
        S: Service<Call, Response = ToolReply, Error = CallError> + Send + 'static,
        S::Future: Send,
    {
        let Some(auditor) = self.auditor.clone() else {
            return Box::pin(inner.oneshot(call));
        };
        let mut record = base_record(&call, self.transport);
        let started = call.started;
        let skip_read = !self.audit_reads && !call.has_side_effects();
        Box::pin(async move {
            let result = inner.oneshot(call).await;
            // A read that was allowed ran (or failed) without changing anything.
            if skip_read && matches!(&result, Ok(reply) if reply.decision == Decision::Allow) {
                return result;
            }
            record.duration_ms =
                Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
            // Submitted as an MCP task but stopped before it became one: no task to name.
            if crate::tasks::submitted_but_no_task() {
                record.task_id = None;
            }
            match &result {
                Ok(reply) => fill_outcome(&mut record, reply),
                Err(err) => {
                    record.decision = Decision::Allow;
                    record.outcome = Some(Outcome::Error);
                    record.error_code = Some(err.code().as_str().to_owned());
                    record.error = Some(err.to_string());
                }
            }
            let intent_refused = matches!(
                &result,
                Ok(reply) if reply.outcome().and_then(ToolOutcome::code) == Some(Code::AuditUnavailable)
            );
            match auditor.record(record).await {
                Ok(_) => result,
                // The intent was refused already: that reply says what happened.
                Err(_) if intent_refused => result,
                Err(failure) => match result {
                    Ok(reply) => Ok(ToolReply {
                        body: ReplyBody::Complete(ToolOutcome::error(
                            failure.code(),
                            failure.message,
                        )),
                        decision: reply.decision,
                        approval_id: reply.approval_id,
                        approved_by: reply.approved_by,
                    }),
                    Err(err) => Err(err),
                },
            }
        })
    }
}

/// The intent record of a call with side effects, durable before it runs.
pub(super) struct Intent {
    auditor: Option<Auditor>,
    transport: Transport,
}

impl Step for Intent {
    fn run<S>(self: Arc<Self>, inner: S, call: Call) -> StepFuture
    where
        S: Service<Call, Response = ToolReply, Error = CallError> + Send + 'static,
        S::Future: Send,
    {
        let auditor = match &self.auditor {
            Some(auditor) if call.has_side_effects() => auditor.clone(),
            _ => return Box::pin(inner.oneshot(call)),
        };
        let mut record = base_record(&call, self.transport);
        record.phase = Phase::Intent;
        record.decision = if call.approved.is_some() {
            Decision::NeedsApprovalAccepted
        } else {
            Decision::Allow
        };
        Box::pin(async move {
            match auditor.record(record).await {
                Ok(_) => inner.oneshot(call).await,
                Err(failure) => Ok(ToolReply::stopped(
                    Decision::Allow,
                    failure.code(),
                    failure.message,
                )),
            }
        })
    }
}

/// A call `prepare` refused: what its record says.
pub(super) struct Refused<'a> {
    /// The tool named.
    pub(super) name: &'a str,
    /// The caller, if any.
    pub(super) principal: Option<&'a Principal>,
    /// Where it came from.
    pub(super) origin: &'a super::CallOrigin,
    /// Why it was refused.
    pub(super) error: &'a CallError,
}

/// The record of a call `prepare` refused.
async fn record_refused(auditor: &Auditor, transport: Transport, call: Refused<'_>) {
    let (tenant, principal, issuer, auth_method) = match call.principal {
        Some(p) => (
            p.tenant.clone(),
            p.subject.clone(),
            p.issuer.clone(),
            auth_method(p),
        ),
        None => (String::new(), String::new(), None, "none".to_owned()),
    };
    let record = AuditRecord {
        timestamp: record::timestamp_now(),
        phase: Phase::Outcome,
        call_id: record::new_call_id(),
        request_id: call.origin.request_id.clone(),
        trace_id: call.origin.trace_id.clone(),
        span_id: call.origin.span_id.clone(),
        tenant,
        principal,
        issuer,
        auth_method,
        os_user: local_user(transport),
        client_name: call.origin.client_name.clone(),
        client_version: call.origin.client_version.clone(),
        protocol_version: call.origin.protocol_version.clone(),
        tool: call.origin.command.unwrap_or(call.name).to_owned(),
        decision: Decision::RefuseImmediate,
        outcome: Some(Outcome::Error),
        duration_ms: Some(0),
        error_code: Some(call.error.code().as_str().to_owned()),
        error: Some(call.error.to_string()),
        ..Default::default()
    };
    // The call fails whatever happens here; a failed write is logged by the auditor.
    let _ = auditor.record(record).await;
}

/// What every record of a call says: who, what, where from.
fn base_record(call: &PreparedCall, transport: Transport) -> AuditRecord {
    let approved = call.approved.as_ref();
    AuditRecord {
        timestamp: record::timestamp(call.started_at),
        phase: Phase::Outcome,
        call_id: call.call_id.clone(),
        request_id: call.origin.request_id.clone(),
        task_id: call.origin.task_id.clone(),
        trace_id: call.origin.trace_id.clone(),
        span_id: call.origin.span_id.clone(),
        replica: String::new(),
        tenant: call.cx.tenant.clone(),
        principal: call.principal.subject.clone(),
        issuer: call.principal.issuer.clone(),
        auth_method: auth_method(&call.principal),
        cert_fingerprint: call.principal.fingerprint.clone(),
        os_user: local_user(transport),
        client_name: call.origin.client_name.clone(),
        client_version: call.origin.client_version.clone(),
        protocol_version: call.origin.protocol_version.clone(),
        tool: call.origin.command.unwrap_or(call.tool()).to_owned(),
        mode: call.mode.as_str().to_owned(),
        decision: Decision::Allow,
        // A statement class for calls that carry SQL; none for the other tools
        // (`pull_provider` installs a provider: it is no `select`).
        query_class: call.spec.takes_sql.then(|| call.class.as_str().to_owned()),
        sql: call.sql.clone(),
        sql_sha256: None,
        args: Some(call.arguments.clone()),
        approval_id: approved.map(|a| a.id.clone()),
        approver: approved.map(|a| a.by.approver.clone()),
        approver_id: approved.map(|a| a.by.approver_id.clone()),
        approval_method: approved.map(|a| a.by.method.as_str().to_owned()),
        approval_reason: approved.map(|a| a.by.reason.clone()),
        outcome: None,
        duration_ms: None,
        error_code: None,
        error: None,
        policies: None,
        rows_returned: None,
        upstream_status: None,
        cache_hit: None,
        upstream_request_ids: None,
        client_addr: None,
        suppressed: None,
        cut: None,
        pruned: None,
    }
}

/// Fills the outcome of a reply into its record.
fn fill_outcome(record: &mut AuditRecord, reply: &ToolReply) {
    record.decision = reply.decision;
    if let Some(id) = &reply.approval_id {
        record.approval_id = Some(id.clone());
    }
    if let Some(by) = &reply.approved_by {
        record.approver = Some(by.approver.clone());
        record.approver_id = Some(by.approver_id.clone());
        record.approval_method = Some(by.method.as_str().to_owned());
        record.approval_reason = Some(by.reason.clone());
    }
    let Some(outcome) = reply.outcome() else {
        // An approval prompt went back: the call has not run (yet).
        return;
    };
    record.outcome = Some(match outcome.code() {
        None => Outcome::Ok,
        Some(Code::CallOutcomeUnknown) => Outcome::Unknown,
        // The upstream had acknowledged a write: what it did is not known.
        Some(_) if outcome.acknowledged => Outcome::Unknown,
        Some(_) => Outcome::Error,
    });
    if let Some(failure) = &outcome.error {
        record.error_code = Some(failure.code.as_str().to_owned());
        record.error = Some(failure.message.clone());
        if failure.code == Code::PolicyDenied {
            record.policies = Some(failure.policies.clone());
        }
    }
    record.rows_returned = outcome.rows.and_then(|n| u64::try_from(n).ok());
    record.upstream_status = outcome.upstream_status;
    record.cache_hit = outcome.cache_age.map(|_| true);
    record.upstream_request_ids =
        (!outcome.upstream_request_ids.is_empty()).then(|| outcome.upstream_request_ids.clone());
}

/// How the principal was established: `mtls`, `jwt`, `local` (stdio, the CLI) or
/// `anonymous` (HTTP without authentication).
fn auth_method(principal: &Principal) -> String {
    principal.method.as_str().to_owned()
}

/// The operating-system user, for local sessions (stdio, the CLI).
fn local_user(transport: Transport) -> Option<String> {
    static USER: OnceLock<Option<String>> = OnceLock::new();
    if transport == Transport::Http {
        return None;
    }
    USER.get_or_init(|| Some(record::os_user())).clone()
}
