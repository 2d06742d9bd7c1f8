//! What the outside sees of each call: its span (`tool_call`, joined to the caller's trace
//! when the call carries a `traceparent`), its trace id in the audit record, and its
//! metrics (in flight, counted by tool, decision, code and tenant, timed, approvals).
//! Wraps the whole pipeline, `prepare` included, so refused calls are seen too.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument as _;

use super::{CallError, ToolCall, ToolReply};
use crate::audit::Decision;
use crate::code::Code;
use crate::mcp::tools::OfferedTools;
use crate::telemetry::metrics::{ApprovalOutcome, FinishedCall, Metrics, UNKNOWN};
use crate::tenant::Tenants;

/// What names a call's span and counts it.
pub(super) struct Observe {
    /// The offered tools: only their names become labels.
    pub(super) tools: Arc<OfferedTools>,
    /// The tenants: only configured ids become labels.
    pub(super) tenants: Arc<Tenants>,
    /// The server's metrics (`None`: not collected).
    pub(super) metrics: Option<Arc<Metrics>>,
}

/// Runs `run` (the pipeline) for `call` inside the call's span, with its metrics.
pub(super) async fn observed<F, Fut>(
    observe: &Observe,
    mut call: ToolCall,
    run: F,
) -> Result<ToolReply, CallError>
where
    F: FnOnce(ToolCall) -> Fut,
    Fut: Future<Output = Result<ToolReply, CallError>>,
{
    let started = Instant::now();
    // Names from the catalogue only: a client's text never becomes a span or label value.
    let tool = observe
        .tools
        .get(&call.name)
        .map_or(UNKNOWN, |spec| spec.name);
    let tenant = call
        .principal
        .as_ref()
        .map(|p| p.tenant.clone())
        .unwrap_or_default();
    let span = crate::telemetry::trace::call_span(
        tool,
        observe
            .tenants
            .config(&tenant)
            .map_or(UNKNOWN, |t| t.id.as_str()),
        call.origin.traceparent.as_deref(),
    );
    // With traces on, the audit record names the trace the span belongs to (the caller's,
    // or a new one); otherwise the caller's traceparent's.
    if let Some((trace, span_id)) = crate::telemetry::trace::trace_and_span_id(&span) {
        call.origin.trace_id = Some(trace);
        call.origin.span_id = Some(span_id);
    }
    if let Some(id) = &call.origin.trace_id {
        span.record("trace_id", id.as_str());
    }
    let in_flight = observe.metrics.as_ref().map(|m| m.call_started(&tenant));
    let result = run(call).instrument(span.clone()).await;
    drop(in_flight);
    let (decision, code, approval) = summary(&result);
    span.record("decision", decision.as_str());
    span.record("code", code);
    if code != "ok" {
        span.record("otel.status_code", "error");
    }
    let elapsed = started.elapsed();
    span.in_scope(|| {
        tracing::info!(
            decision = decision.as_str(),
            code,
            duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            "tool call finished"
        );
    });
    if let Some(metrics) = &observe.metrics {
        metrics.call_finished(FinishedCall {
            tool,
            tenant: &tenant,
            decision,
            code,
            approval,
            elapsed,
        });
    }
    result
}

/// The gate's decision, the code (`ok` when none) and the approval outcome of a result.
fn summary(
    result: &Result<ToolReply, CallError>,
) -> (Decision, &'static str, Option<ApprovalOutcome>) {
    let reply = match result {
        Ok(reply) => reply,
        Err(err) => return (Decision::RefuseImmediate, err.code().as_str(), None),
    };
    let code = reply.outcome().and_then(super::ToolOutcome::code);
    let approval = match (reply.decision, code) {
        (Decision::NeedsApprovalRequested, _) => Some(ApprovalOutcome::Requested),
        (Decision::NeedsApprovalAccepted, _) => Some(ApprovalOutcome::Accepted),
        (Decision::NeedsApprovalDeclined, _) => Some(ApprovalOutcome::Declined),
        (Decision::NeedsApprovalCancelled, _) => Some(ApprovalOutcome::Cancelled),
        (Decision::NeedsApprovalUnavailable, _) => Some(ApprovalOutcome::Unavailable),
        (_, Some(Code::PolicyApprovalInvalid)) => Some(ApprovalOutcome::Invalid),
        (_, Some(Code::PolicyApprovalUnavailable)) => Some(ApprovalOutcome::Failed),
        _ => None,
    };
    (reply.decision, code.map_or("ok", Code::as_str), approval)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::pipeline::ToolOutcome;

    fn reply(decision: Decision, code: Option<Code>) -> Result<ToolReply, CallError> {
        Ok(match code {
            Some(code) => ToolReply::stopped(decision, code, "x"),
            None => ToolReply {
                body: super::super::ReplyBody::Complete(ToolOutcome::empty()),
                decision,
                approval_id: None,
                approved_by: None,
            },
        })
    }

    #[test]
    fn decisions_codes_and_approval_outcomes() {
        let cases = [
            (reply(Decision::Allow, None), ("allow", "ok", None)),
            (
                reply(Decision::NeedsApprovalAccepted, None),
                (
                    "needs_approval_accepted",
                    "ok",
                    Some(ApprovalOutcome::Accepted),
                ),
            ),
            (
                reply(
                    Decision::NeedsApprovalDeclined,
                    Some(Code::PolicyApprovalDeclined),
                ),
                (
                    "needs_approval_declined",
                    "policy.approval_declined",
                    Some(ApprovalOutcome::Declined),
                ),
            ),
            (
                reply(
                    Decision::NeedsApprovalCancelled,
                    Some(Code::PolicyApprovalCancelled),
                ),
                (
                    "needs_approval_cancelled",
                    "policy.approval_cancelled",
                    Some(ApprovalOutcome::Cancelled),
                ),
            ),
            (
                reply(Decision::RefuseImmediate, Some(Code::PolicyApprovalInvalid)),
                (
                    "refuse_immediate",
                    "policy.approval_invalid",
                    Some(ApprovalOutcome::Invalid),
                ),
            ),
            (
                reply(
                    Decision::RefuseImmediate,
                    Some(Code::PolicyApprovalUnavailable),
                ),
                (
                    "refuse_immediate",
                    "policy.approval_unavailable",
                    Some(ApprovalOutcome::Failed),
                ),
            ),
            (
                reply(Decision::RefuseImmediate, Some(Code::PolicyRefused)),
                ("refuse_immediate", "policy.refused", None),
            ),
            (
                Err(CallError::UnknownTool("x".into())),
                ("refuse_immediate", "arguments.invalid", None),
            ),
            (
                Err(CallError::Unauthenticated),
                ("refuse_immediate", "policy.refused", None),
            ),
        ];
        for (result, expected) in cases {
            let (decision, code, approval) = summary(&result);
            assert_eq!((decision.as_str(), code, approval), expected, "{result:?}");
        }
    }
}
