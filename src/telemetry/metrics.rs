//! Prometheus metrics: the contract of docs/deployment.md ("Metrics contract"), kept in one
//! registry per server and rendered as OpenMetrics text at `/metrics`.
//!
//! Every label value comes from a closed set: tool names from the catalogue, tenant ids from
//! the configuration, decisions and codes from their enums, providers from the engine's
//! registry, sinks from the audit. Anything else a request could smuggle in becomes
//! `unknown`, so a client cannot grow the series count.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::audit::WriteObserver;

mod audit_export;
use crate::engine::{UpstreamObserver, UpstreamResult};
use audit_export::ResultLabel;

/// The label value of anything outside the known sets.
pub const UNKNOWN: &str = "unknown";

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const CALL_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
const UPSTREAM_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
const AUDIT_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: &'static str,
    decision: &'static str,
    code: &'static str,
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolTenant {
    tool: &'static str,
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    provider: String,
    status_class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabel {
    provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkLabel {
    sink: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QuotaLabels {
    tenant: String,
    class: &'static str,
    scope: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// How an approval prompt ended, as `querygate_approvals_total` counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalOutcome {
    /// A prompt went to the client.
    Requested,
    /// The person approved and the call ran.
    Accepted,
    /// The person declined.
    Declined,
    /// The person dismissed the prompt, or did not answer in time.
    Cancelled,
    /// Approval was needed and the client cannot carry a prompt.
    Unavailable,
    /// The approval presented was invalid, expired, already used or for another call.
    Invalid,
    /// The approval store or keys could not be used.
    Failed,
}

impl ApprovalOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalOutcome::Requested => "requested",
            ApprovalOutcome::Accepted => "accepted",
            ApprovalOutcome::Declined => "declined",
            ApprovalOutcome::Cancelled => "cancelled",
            ApprovalOutcome::Unavailable => "unavailable",
            ApprovalOutcome::Invalid => "invalid",
            ApprovalOutcome::Failed => "failed",
        }
    }
}

/// One finished tool call, as the pipeline reports it.
#[derive(Clone, Copy, Debug)]
pub struct FinishedCall<'a> {
    /// The tool named by the caller (mapped to `unknown` unless it is a known tool).
    pub tool: &'a str,
    /// The caller's tenant (mapped to `unknown` unless it is a configured tenant).
    pub tenant: &'a str,
    /// The gate's decision.
    pub decision: crate::audit::Decision,
    /// The stable error code, or `ok`.
    pub code: &'static str,
    /// What happened to an approval, if one was involved.
    pub approval: Option<ApprovalOutcome>,
    /// From entering the pipeline to the reply.
    pub elapsed: Duration,
}

/// The metrics of one server.
pub struct Metrics {
    registry: Registry,
    tools: HashSet<&'static str>,
    tenants: HashSet<String>,
    calls: Family<CallLabels, Counter>,
    call_duration: HistogramFamily<ToolTenant>,
    in_flight: Family<TenantLabel, Gauge>,
    upstream: Family<UpstreamLabels, Counter>,
    upstream_duration: HistogramFamily<ProviderLabel>,
    approvals: Family<OutcomeLabel, Counter>,
    audit_duration: HistogramFamily<SinkLabel>,
    audit_failures: Family<SinkLabel, Counter>,
    audit_export: Family<ResultLabel, Counter>,
    auth_failures: Family<ReasonLabel, Counter>,
    quota_refusals: Family<QuotaLabels, Counter>,
    quota_store_failures: Family<OutcomeLabel, Counter>,
    tasks: Family<StateLabel, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// The metrics for a server offering `tools` to the configured `tenants`.
    #[expect(
        clippy::too_many_lines,
        reason = "registers every metric family with its name and help text, one registration each"
    )]
    pub fn new<'a>(
        tools: impl IntoIterator<Item = &'static str>,
        tenants: impl IntoIterator<Item = &'a str>,
    ) -> Arc<Self> {
        let mut registry = Registry::default();
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "querygate_tool_calls",
            "Tool calls that reached the pipeline, by tool, gate decision, code and tenant",
            calls.clone(),
        );
        let call_duration: HistogramFamily<ToolTenant> =
            Family::new_with_constructor(|| Histogram::new(CALL_BUCKETS));
        registry.register(
            "querygate_tool_call_duration_seconds",
            "Time from a call entering the pipeline to its response",
            call_duration.clone(),
        );
        let in_flight = Family::<TenantLabel, Gauge>::default();
        registry.register(
            "querygate_calls_in_flight",
            "Tool calls running now",
            in_flight.clone(),
        );
        let upstream = Family::<UpstreamLabels, Counter>::default();
        registry.register(
            "querygate_upstream_requests",
            "Requests to provider APIs, by provider and status class",
            upstream.clone(),
        );
        let upstream_duration: HistogramFamily<ProviderLabel> =
            Family::new_with_constructor(|| Histogram::new(UPSTREAM_BUCKETS));
        registry.register(
            "querygate_upstream_request_duration_seconds",
            "One upstream request, body included",
            upstream_duration.clone(),
        );
        let approvals = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "querygate_approvals",
            "Approval prompts by outcome",
            approvals.clone(),
        );
        let audit_duration: HistogramFamily<SinkLabel> =
            Family::new_with_constructor(|| Histogram::new(AUDIT_BUCKETS));
        registry.register(
            "querygate_audit_write_duration_seconds",
            "Time until an audit record is durable",
            audit_duration.clone(),
        );
        let audit_failures = Family::<SinkLabel, Counter>::default();
        registry.register(
            "querygate_audit_write_failures",
            "Audit writes that failed",
            audit_failures.clone(),
        );
        let audit_export = audit_export::register(&mut registry);
        let auth_failures = Family::<ReasonLabel, Counter>::default();
        for reason in crate::auth::failures::REASONS {
            let _ = auth_failures.get_or_create(&ReasonLabel { reason });
        }
        registry.register(
            "querygate_auth_failures",
            "Requests refused by authentication, by reason (an auth.… code)",
            auth_failures.clone(),
        );
        let quota_refusals = Family::<QuotaLabels, Counter>::default();
        let tenants: HashSet<String> = tenants.into_iter().map(str::to_owned).collect();
        // Each configured tenant's series, shown from 0 (a closed set: tenants × 4 × 2).
        for tenant in &tenants {
            for class in crate::config::QuotaClass::ALL {
                for scope in [crate::quota::Scope::Tenant, crate::quota::Scope::Principal] {
                    let _ = quota_refusals.get_or_create(&QuotaLabels {
                        tenant: tenant.clone(),
                        class: class.as_str(),
                        scope: scope.as_str(),
                    });
                }
            }
        }
        registry.register(
            "querygate_quota_refusals",
            "Calls refused by a quota (quota.exceeded), by tenant, class and scope",
            quota_refusals.clone(),
        );
        let quota_store_failures = Family::<OutcomeLabel, Counter>::default();
        for outcome in ["admitted", "refused"] {
            let _ = quota_store_failures.get_or_create(&OutcomeLabel { outcome });
        }
        registry.register(
            "querygate_quota_store_failures",
            "Calls whose quota store could not be reached, by what quotas.on_store_failure did",
            quota_store_failures.clone(),
        );
        let tasks = Family::<StateLabel, Counter>::default();
        for state in ["working", "completed", "failed", "cancelled"] {
            let _ = tasks.get_or_create(&StateLabel { state });
        }
        registry.register(
            "querygate_tasks",
            "MCP tasks that reached each state on this replica (working: made or resumed)",
            tasks.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                commit: env!("QUERYGATE_COMMIT"),
            })
            .set(1);
        registry.register(
            "querygate_build_info",
            "The running build (always 1)",
            build,
        );
        Arc::new(Metrics {
            registry,
            tools: tools.into_iter().collect(),
            tenants,
            calls,
            call_duration,
            in_flight,
            upstream,
            upstream_duration,
            approvals,
            audit_duration,
            audit_failures,
            audit_export,
            auth_failures,
            quota_refusals,
            quota_store_failures,
            tasks,
        })
    }

    /// The metrics as OpenMetrics text (served with [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    fn tool(&self, name: &str) -> &'static str {
        self.tools.get(name).copied().unwrap_or(UNKNOWN)
    }

    fn tenant(&self, id: &str) -> String {
        if self.tenants.contains(id) {
            id.to_owned()
        } else {
            UNKNOWN.to_owned()
        }
    }

    /// Counts a call of `tenant` in flight until the guard is dropped (also when the call
    /// is abandoned half-way).
    pub fn call_started(self: &Arc<Self>, tenant: &str) -> InFlight {
        let label = TenantLabel {
            tenant: self.tenant(tenant),
        };
        self.in_flight.get_or_create(&label).inc();
        InFlight {
            metrics: self.clone(),
            label,
        }
    }

    /// Records a finished call.
    pub fn call_finished(&self, call: FinishedCall<'_>) {
        let tool = self.tool(call.tool);
        let tenant = self.tenant(call.tenant);
        self.calls
            .get_or_create(&CallLabels {
                tool,
                decision: call.decision.as_str(),
                code: call.code,
                tenant: tenant.clone(),
            })
            .inc();
        self.call_duration
            .get_or_create(&ToolTenant { tool, tenant })
            .observe(call.elapsed.as_secs_f64());
        if let Some(outcome) = call.approval {
            self.approvals
                .get_or_create(&OutcomeLabel {
                    outcome: outcome.as_str(),
                })
                .inc();
        }
    }

    /// Counts an MCP task that reached `state` (`working`: made, or resumed from another
    /// replica; `completed`, `failed`, `cancelled`).
    pub fn task_state(&self, state: &'static str) {
        self.tasks.get_or_create(&StateLabel { state }).inc();
    }

    /// Shows the audit sink's failure counter (at 0) before the first failure.
    pub fn watch_audit_sink(&self, sink: &'static str) {
        let _ = self.audit_failures.get_or_create(&SinkLabel { sink });
    }
}

/// A call in flight; dropping it ends the count.
#[derive(Debug)]
pub struct InFlight {
    metrics: Arc<Metrics>,
    label: TenantLabel,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.metrics.in_flight.get_or_create(&self.label).dec();
    }
}

/// `2xx` … `5xx` for a status, `error` for anything else.
fn status_class(result: UpstreamResult) -> &'static str {
    match result {
        UpstreamResult::Status(200..=299) => "2xx",
        UpstreamResult::Status(300..=399) => "3xx",
        UpstreamResult::Status(400..=499) => "4xx",
        UpstreamResult::Status(500..=599) => "5xx",
        UpstreamResult::Status(_) | UpstreamResult::Error => "error",
        UpstreamResult::Timeout => "timeout",
    }
}

impl UpstreamObserver for Metrics {
    fn upstream_request(&self, provider: &str, result: UpstreamResult, elapsed: Duration) {
        self.upstream
            .get_or_create(&UpstreamLabels {
                provider: provider.to_owned(),
                status_class: status_class(result),
            })
            .inc();
        self.upstream_duration
            .get_or_create(&ProviderLabel {
                provider: provider.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }
}

impl crate::auth::failures::FailureCounter for Metrics {
    fn auth_failure(&self, reason: &'static str) {
        self.auth_failures
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }
}

impl crate::quota::QuotaObserver for Metrics {
    fn quota_refused(
        &self,
        tenant: &str,
        class: crate::config::QuotaClass,
        scope: crate::quota::Scope,
    ) {
        self.quota_refusals
            .get_or_create(&QuotaLabels {
                tenant: self.tenant(tenant),
                class: class.as_str(),
                scope: scope.as_str(),
            })
            .inc();
    }

    fn quota_store_failed(&self, admitted: bool) {
        let outcome = if admitted { "admitted" } else { "refused" };
        self.quota_store_failures
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }
}

impl WriteObserver for Metrics {
    fn audit_write(&self, sink: &'static str, elapsed: Duration, ok: bool) {
        let label = SinkLabel { sink };
        self.audit_duration
            .get_or_create(&label)
            .observe(elapsed.as_secs_f64());
        if !ok {
            self.audit_failures.get_or_create(&label).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_refusals_and_store_failures_are_counted() {
        use crate::quota::QuotaObserver as _;
        let metrics = Metrics::new(["run_select_query"], ["acme"]);
        metrics.quota_refused(
            "acme",
            crate::config::QuotaClass::Write,
            crate::quota::Scope::Principal,
        );
        metrics.quota_refused(
            "mallory",
            crate::config::QuotaClass::Read,
            crate::quota::Scope::Tenant,
        );
        metrics.quota_store_failed(true);
        let text = metrics.render();
        for series in [
            "querygate_quota_refusals_total{tenant=\"acme\",class=\"write\",scope=\"principal\"} 1",
            "querygate_quota_refusals_total{tenant=\"unknown\",class=\"read\",scope=\"tenant\"} 1",
            "querygate_quota_store_failures_total{outcome=\"admitted\"} 1",
            "querygate_quota_store_failures_total{outcome=\"refused\"} 0",
        ] {
            assert!(text.contains(series), "{series}\n{text}");
        }
    }

    #[test]
    fn labels_outside_the_known_sets_become_unknown() {
        let metrics = Metrics::new(["run_select_query"], ["default", "acme"]);
        let guard = metrics.call_started("acme");
        metrics.call_finished(FinishedCall {
            tool: "run_select_query",
            tenant: "acme",
            decision: crate::audit::Decision::Allow,
            code: "ok",
            approval: None,
            elapsed: Duration::from_millis(3),
        });
        metrics.call_finished(FinishedCall {
            tool: "x\"} 1\nevil_metric{a=\"",
            tenant: "mallory",
            decision: crate::audit::Decision::RefuseImmediate,
            code: "arguments.invalid",
            approval: Some(ApprovalOutcome::Invalid),
            elapsed: Duration::from_millis(1),
        });
        let text = metrics.render();
        assert!(
            text.contains(
                "querygate_tool_calls_total{tool=\"run_select_query\",decision=\"allow\",code=\"ok\",tenant=\"acme\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "querygate_tool_calls_total{tool=\"unknown\",decision=\"refuse_immediate\",code=\"arguments.invalid\",tenant=\"unknown\"} 1"
            ),
            "{text}"
        );
        assert!(
            !text.contains("evil") && !text.contains("mallory"),
            "{text}"
        );
        assert!(text.contains("querygate_calls_in_flight{tenant=\"acme\"} 1"));
        drop(guard);
        assert!(
            metrics
                .render()
                .contains("querygate_calls_in_flight{tenant=\"acme\"} 0")
        );
        assert!(text.contains("querygate_approvals_total{outcome=\"invalid\"} 1"));
        assert!(text.contains("querygate_build_info{version=\""));
    }

    #[test]
    fn upstream_and_audit_observations() {
        let metrics = Metrics::new([], []);
        for result in [
            UpstreamResult::Status(200),
            UpstreamResult::Status(503),
            UpstreamResult::Timeout,
            UpstreamResult::Error,
        ] {
            metrics.upstream_request("github", result, Duration::from_millis(20));
        }
        metrics.watch_audit_sink("file");
        let before = metrics.render();
        assert!(before.contains("querygate_audit_write_failures_total{sink=\"file\"} 0"));
        metrics.audit_write("file", Duration::from_millis(2), false);
        let text = metrics.render();
        for class in ["2xx", "5xx", "timeout", "error"] {
            assert!(
                text.contains(&format!(
                    "querygate_upstream_requests_total{{provider=\"github\",status_class=\"{class}\"}} 1"
                )),
                "{text}"
            );
        }
        assert!(
            text.contains(
                "querygate_upstream_request_duration_seconds_count{provider=\"github\"} 4"
            )
        );
        assert!(text.contains("querygate_audit_write_failures_total{sink=\"file\"} 1"));
        assert!(text.contains("querygate_audit_write_duration_seconds_count{sink=\"file\"} 1"));
    }
}
