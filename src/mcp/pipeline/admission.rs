//! Admission: a cap on the SQL statements evaluated at once (per replica), with a share per
//! tenant so that one tenant's flood leaves slots for the others. A call that takes an `sql`
//! argument waits for its tenant's slot and then a global one, up to `limits.admission_wait`;
//! then it is answered `server.busy` (a tool error, nothing ran) with a retry delay. Calls
//! that run no statement are not counted. Request rates and HTTP requests in flight per
//! tenant are bounded before this, at the HTTP level (`tenants[].limits`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Service, ServiceExt as _};

use super::step::{Step, StepFuture, StepLayer};
use super::{CallError, PreparedCall, ToolOutcome, ToolReply};
use crate::code::Code;
use crate::config::AdmissionLimits;

/// The delay a busy answer suggests before retrying.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The evaluation slots of one replica.
#[derive(Debug)]
pub(crate) struct Admission {
    limits: AdmissionLimits,
    global: Arc<Semaphore>,
    /// One semaphore per tenant seen (tenants come from configuration: a closed set).
    tenants: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Slots held while a statement runs; dropping it frees them.
#[derive(Debug)]
pub(crate) struct Slot {
    _tenant: OwnedSemaphorePermit,
    _global: OwnedSemaphorePermit,
}

/// Why no slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Busy {
    /// The tenant's share stayed full.
    Tenant,
    /// Every slot stayed taken.
    Global,
}

impl Admission {
    /// Slots as `limits` says.
    pub(crate) fn new(limits: AdmissionLimits) -> Self {
        Admission {
            global: Arc::new(Semaphore::new(limits.max_concurrent_evaluations)),
            tenants: Mutex::default(),
            limits,
        }
    }

    fn tenant(&self, tenant: &str) -> Arc<Semaphore> {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        tenants
            .entry(tenant.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.limits.max_tenant_evaluations)))
            .clone()
    }

    /// Waits (first come, first served) for one of `tenant`'s slots and then a global one,
    /// up to the admission wait.
    pub(crate) async fn admit(&self, tenant: &str) -> Result<Slot, Busy> {
        let deadline = tokio::time::Instant::now() + self.limits.wait;
        let share = self.tenant(tenant);
        let own = tokio::time::timeout_at(deadline, share.acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or(Busy::Tenant)?;
        let global = tokio::time::timeout_at(deadline, self.global.clone().acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or(Busy::Global)?;
        Ok(Slot {
            _tenant: own,
            _global: global,
        })
    }

    /// The tool error of a call that got no slot.
    fn busy(&self, tool: &str, tenant: &str, why: Busy) -> ToolOutcome {
        let wait = humantime::format_duration(self.limits.wait);
        let retry = RETRY_AFTER.as_secs();
        let full = match why {
            Busy::Tenant => format!(
                "tenant '{tenant}' already has {} statements running (limits.max_tenant_evaluations)",
                self.limits.max_tenant_evaluations
            ),
            Busy::Global => format!(
                "all {} evaluation slots are taken (limits.max_concurrent_evaluations)",
                self.limits.max_concurrent_evaluations
            ),
        };
        let mut outcome = ToolOutcome::error(
            Code::ServerBusy,
            format!(
                "server busy: {full} and none came free within {wait} (limits.admission_wait); tool '{tool}' did not run: retry after {retry}s"
            ),
        );
        if let Some(Value::Object(error)) =
            outcome.structured.as_mut().and_then(|s| s.get_mut("error"))
        {
            error.insert("retry_after_seconds".into(), Value::from(retry));
        }
        outcome
    }
}

/// Admission in front of the rest of the pipeline.
#[derive(Clone)]
pub(super) struct Admit {
    admission: Arc<Admission>,
}

impl Admit {
    pub(super) fn layer(admission: Arc<Admission>) -> StepLayer<Self> {
        StepLayer(Admit { admission })
    }
}

impl Step for Admit {
    fn run<S>(&self, inner: S, call: PreparedCall) -> StepFuture
    where
        S: Service<PreparedCall, Response = ToolReply, Error = CallError> + Send + 'static,
        S::Future: Send,
    {
        let admission = self.admission.clone();
        Box::pin(async move {
            if !call.spec.takes_sql {
                return inner.oneshot(call).await;
            }
            let name = call.tool();
            let tenant = call.cx.tenant.clone();
            let cancel = call.cancel.clone();
            let admitted = tokio::select! {
                biased;
                admitted = admission.admit(&tenant) => admitted,
                // Nothing ran yet: a cancelled wait is a plain cancellation.
                () = cancel.cancelled() => {
                    return Ok(ToolReply::allowed(super::cancel::cancelled(name, false)));
                }
            };
            match admitted {
                Ok(_slot) => inner.oneshot(call).await,
                Err(why) => Ok(ToolReply::allowed(admission.busy(name, &tenant, why))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(global: usize, per_tenant: usize) -> Admission {
        Admission::new(AdmissionLimits {
            max_concurrent_evaluations: global,
            max_tenant_evaluations: per_tenant,
            wait: Duration::from_millis(50),
        })
    }

    #[tokio::test]
    async fn a_tenant_over_its_share_waits_and_others_still_get_slots() {
        let slots = admission(3, 2);
        let a1 = slots.admit("a").await.unwrap();
        let _a2 = slots.admit("a").await.unwrap();
        assert_eq!(slots.admit("a").await.unwrap_err(), Busy::Tenant);
        let _b1 = slots.admit("b").await.unwrap();
        // Every slot taken: the next tenant waits for a global one.
        assert_eq!(slots.admit("c").await.unwrap_err(), Busy::Global);
        drop(a1);
        assert!(slots.admit("c").await.is_ok());
    }

    #[test]
    fn the_busy_error_names_the_limit_and_the_retry_delay() {
        let slots = admission(3, 2);
        let outcome = slots.busy("run_select_query", "acme", Busy::Tenant);
        assert_eq!(outcome.code, Some(Code::ServerBusy));
        let error = &outcome.structured.as_ref().unwrap()["error"];
        assert_eq!(error["code"], "server.busy");
        assert_eq!(error["retry_after_seconds"], 1);
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("tenant 'acme' already has 2 statements running"),
            "{message}"
        );
    }
}
