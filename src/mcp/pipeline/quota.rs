//! Quotas (`tenants[].quotas`): after the gate allowed a statement, one call of its class is
//! taken from its principal's quota and its tenant's (see [`crate::quota`]). Over quota, the
//! call gets the tool error `quota.exceeded` with `retry_after_seconds` (the seconds until
//! the window ends), and nothing ran. The HTTP layer cannot answer `429` for it: the class is
//! known only once the statement is parsed, inside the JSON-RPC call. With the shared store
//! down and `quotas.on_store_failure` refusing the class: `quota.unavailable`.

use std::sync::Arc;

use serde_json::Value;
use tower::{Service, ServiceExt as _};

use super::step::{Step, StepFuture, StepLayer};
use super::{Call, CallError, ToolOutcome, ToolReply};
use crate::code::Code;
use crate::config::QuotaClass;
use crate::quota::{Quotas, STORE_RETRY, Scope, Verdict, retry_seconds};

/// The quotas in front of admission.
#[derive(Clone)]
pub(super) struct QuotaStep {
    quotas: Arc<Quotas>,
}

impl QuotaStep {
    pub(super) fn layer(quotas: Arc<Quotas>) -> StepLayer<Self> {
        StepLayer::new(QuotaStep { quotas })
    }
}

impl Step for QuotaStep {
    fn run<S>(self: Arc<Self>, inner: S, call: Call) -> StepFuture
    where
        S: Service<Call, Response = ToolReply, Error = CallError> + Send + 'static,
        S::Future: Send,
    {
        let quotas = self.quotas.clone();
        Box::pin(async move {
            if !call.spec.takes_sql || quotas.is_empty() {
                return inner.oneshot(call).await;
            }
            let class = QuotaClass::of(call.class);
            match quotas.admit(&call.principal, class).await {
                Verdict::Admitted | Verdict::AdmittedUnchecked => inner.oneshot(call).await,
                Verdict::Exceeded {
                    scope,
                    quota,
                    retry_after,
                } => {
                    let retry = retry_seconds(retry_after);
                    let window = match quota.window.as_secs() {
                        1 => "second",
                        60 => "minute",
                        _ => "hour",
                    };
                    let (whose, key) = match scope {
                        Scope::Tenant => (
                            format!("tenant '{}'", call.principal.tenant),
                            format!("tenants[].quotas.{}", class.as_str()),
                        ),
                        Scope::Principal => (
                            format!(
                                "principal '{}' of tenant '{}'",
                                call.principal.subject, call.principal.tenant
                            ),
                            format!("tenants[].quotas.per_principal.{}", class.as_str()),
                        ),
                    };
                    let mut fields = serde_json::Map::new();
                    fields.insert("retry_after_seconds".into(), Value::from(retry));
                    fields.insert("scope".into(), Value::from(scope.as_str()));
                    fields.insert("class".into(), Value::from(class.as_str()));
                    fields.insert("limit".into(), Value::from(quota.limit));
                    fields.insert("window".into(), Value::from(window));
                    Ok(ToolReply::allowed(ToolOutcome::error_with(
                        Code::QuotaExceeded,
                        format!(
                            "quota exceeded: {whose} has used its {} {} calls per {window} ({key}); tool '{}' did not run: retry after {retry}s",
                            quota.limit,
                            class.as_str(),
                            call.tool()
                        ),
                        fields,
                    )))
                }
                Verdict::Unavailable { .. } => {
                    let retry = retry_seconds(STORE_RETRY);
                    let mut fields = serde_json::Map::new();
                    fields.insert("retry_after_seconds".into(), Value::from(retry));
                    Ok(ToolReply::allowed(ToolOutcome::error_with(
                        Code::QuotaUnavailable,
                        format!(
                            "the quota store cannot be reached and quotas.on_store_failure refuses {} calls; tool '{}' did not run: retry after {retry}s",
                            class.as_str(),
                            call.tool()
                        ),
                        fields,
                    )))
                }
            }
        })
    }
}
