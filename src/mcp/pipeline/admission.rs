//! Admission: a cap on the evaluation slots in use at once (per replica), with a share per
//! tenant so that one tenant's flood leaves slots for the others, and a cap on the rendered
//! response bytes in flight, with a share per tenant (see [`super::response_bytes`]). A
//! statement holds a slot only while it does local work (planning, decoding a response page
//! into SQLite, running SQL: see `engine::EvalSlots`), never while it waits for an upstream
//! API, the audit or its response to be sent.
//!
//! A call that takes an `sql` argument waits for room under its tenant's bytes share and the
//! replica's bytes cap, then for one of its tenant's slots and a global one, all within
//! `limits.admission_wait`; then it is answered `server.busy` (a tool error, nothing ran)
//! with a retry delay. The slot it was admitted with is its statement's first (planning);
//! each later piece of work waits for a slot of its own, within `server.call_timeout`, ranked
//! by when its call was admitted (see [`super::ranked_slots`]): statements under way are
//! served before newer ones.
//! A statement that loads more than `engine::EvalLimits::INLINE_BYTES` of responses also
//! waits, holding no slot, for one of its tenant's bulk permits and a global one
//! (`limits.max_tenant_bulk_statements`, `limits.max_bulk_statements`), ranked the same
//! way, and holds them until its SQLite work has ended and its call's response has been
//! sent (they are kept with the response's bytes in flight): large statements keep their
//! data in memory while they wait for upstream pages, and their results are large, so their
//! number is what bounds that memory.
//! Calls that run no statement take no slot (their responses are counted all the same).
//! Request rates and HTTP requests in flight per tenant are bounded before this, at the HTTP
//! level (`tenants[].limits`).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tower::{Service, ServiceExt as _};

use super::ranked_slots::{RankedSlot, RankedSlots};
use super::response_bytes::{Full, ResponseBytes};
use super::step::{Step, StepFuture, StepLayer};
use super::{Call, CallError, ToolOutcome, ToolReply};
use crate::code::Code;
use crate::config::AdmissionLimits;
use crate::engine::{EvalSlot, EvalSlots};

/// The delay a busy answer suggests before retrying.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The evaluation slots of one replica.
#[derive(Debug)]
pub(crate) struct Admission {
    limits: AdmissionLimits,
    global: Arc<RankedSlots>,
    /// The bulk permits over all tenants.
    global_bulk: Arc<RankedSlots>,
    /// One share per tenant seen (tenants come from configuration: a closed set).
    tenants: Mutex<HashMap<String, Share>>,
    /// Calls admitted so far: the next one's rank.
    admitted: AtomicU64,
    /// The rendered response bytes in flight.
    responses: Arc<ResponseBytes>,
}

/// A tenant's share of the slots and of the bulk permits.
#[derive(Debug, Clone)]
struct Share {
    slots: Arc<RankedSlots>,
    bulk: Arc<RankedSlots>,
}

/// A tenant's slot and a global one, held for a piece of a statement's local work (or a
/// tenant's bulk permit and a global one, held by a large statement); dropping it frees
/// them.
#[derive(Debug)]
pub(crate) struct Slot {
    _tenant: RankedSlot,
    _global: RankedSlot,
}

/// An admitted call's first slot, and the rank its later ones wait with.
#[derive(Debug)]
pub(crate) struct Admitted {
    slot: Slot,
    rank: u64,
}

/// Why no slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Busy {
    /// The tenant's share stayed full.
    Tenant,
    /// Every slot stayed taken.
    Global,
    /// The tenant's response bytes in flight stayed at its share.
    TenantBytes,
    /// The response bytes in flight stayed at the replica's cap.
    GlobalBytes,
}

impl Admission {
    /// Slots as `limits` says.
    pub(crate) fn new(limits: AdmissionLimits) -> Self {
        Admission {
            global: RankedSlots::new(limits.max_concurrent_evaluations),
            global_bulk: RankedSlots::new(limits.max_bulk_statements),
            tenants: Mutex::default(),
            admitted: AtomicU64::new(0),
            responses: ResponseBytes::with_bulk_priority(
                limits.max_response_bytes,
                limits.max_tenant_response_bytes,
                limits.bulk_work_priority,
            ),
            limits,
        }
    }

    /// How threads rendering and sending large results lower their priority
    /// (`limits.bulk_work_priority`).
    pub(crate) fn bulk_work_priority(&self) -> crate::thread_priority::BulkPriority {
        self.limits.bulk_work_priority
    }

    /// The count of rendered response bytes in flight.
    pub(crate) fn responses(&self) -> &Arc<ResponseBytes> {
        &self.responses
    }

    fn tenant(&self, tenant: &str) -> Share {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        tenants
            .entry(tenant.to_owned())
            .or_insert_with(|| Share {
                slots: RankedSlots::new(self.limits.max_tenant_evaluations),
                bulk: RankedSlots::new(self.limits.max_tenant_bulk_statements),
            })
            .clone()
    }

    /// Waits for room under the response bytes caps, then for one of `tenant`'s slots and
    /// a global one (after the calls admitted before it), up to the admission wait.
    pub(crate) async fn admit(&self, tenant: &str) -> Result<Admitted, Busy> {
        let deadline = tokio::time::Instant::now() + self.limits.wait;
        self.responses
            .room(tenant, deadline)
            .await
            .map_err(|full| match full {
                Full::Tenant => Busy::TenantBytes,
                Full::Global => Busy::GlobalBytes,
            })?;
        let rank = self.admitted.fetch_add(1, Ordering::Relaxed);
        let share = self.tenant(tenant);
        let own = tokio::time::timeout_at(deadline, share.slots.acquire(rank))
            .await
            .map_err(|_| Busy::Tenant)?;
        let global = tokio::time::timeout_at(deadline, self.global.acquire(rank))
            .await
            .map_err(|_| Busy::Global)?;
        Ok(Admitted {
            slot: Slot {
                _tenant: own,
                _global: global,
            },
            rank,
        })
    }

    /// The slots of one admitted call of `tenant`: its first, then each as the tenant's
    /// share and the global slots allow, at the call's rank.
    fn call_slots(&self, tenant: &str, admitted: Admitted) -> CallSlots {
        CallSlots {
            admitted: Mutex::new(Some(admitted.slot)),
            rank: admitted.rank,
            tenant: self.tenant(tenant),
            global: self.global.clone(),
            global_bulk: self.global_bulk.clone(),
            bulk: tokio::sync::OnceCell::new(),
        }
    }

    /// The tool error of a call that got no slot.
    fn busy(&self, tool: &str, tenant: &str, why: Busy) -> ToolOutcome {
        let wait = humantime::format_duration(self.limits.wait);
        let retry = RETRY_AFTER.as_secs();
        let full = match why {
            Busy::Tenant => format!(
                "tenant '{tenant}' already has {} statements running (limits.max_tenant_evaluations) and none came free",
                self.limits.max_tenant_evaluations
            ),
            Busy::Global => format!(
                "all {} evaluation slots are taken (limits.max_concurrent_evaluations) and none came free",
                self.limits.max_concurrent_evaluations
            ),
            Busy::TenantBytes => format!(
                "tenant '{tenant}' already has {} of responses being sent (limits.max_tenant_response_bytes_in_flight) and they were not sent",
                bytes(self.limits.max_tenant_response_bytes)
            ),
            Busy::GlobalBytes => format!(
                "{} of responses are being sent (limits.max_response_bytes_in_flight) and they were not sent",
                bytes(self.limits.max_response_bytes)
            ),
        };
        let mut fields = serde_json::Map::new();
        fields.insert("retry_after_seconds".into(), Value::from(retry));
        ToolOutcome::error_with(
            Code::ServerBusy,
            format!(
                "server busy: {full} within {wait} (limits.admission_wait); tool '{tool}' did not run: retry after {retry}s"
            ),
            fields,
        )
    }
}

/// The evaluation slots of one admitted call, handed to the engine in its context.
#[derive(Debug)]
struct CallSlots {
    /// The slot the call was admitted with, until its statement's first piece of work
    /// takes it.
    admitted: Mutex<Option<Slot>>,
    /// When the call was admitted: its place among the waiters for a slot.
    rank: u64,
    tenant: Share,
    global: Arc<RankedSlots>,
    global_bulk: Arc<RankedSlots>,
    /// The call's bulk permits once it has them, kept with the call until its response is
    /// sent (the engine drops its own hold when its SQLite work ends). One pair per call:
    /// every database its statement opens (an `EXEC`'s rows, then the query over them)
    /// shares it, so a call never waits for a permit it holds itself.
    bulk: tokio::sync::OnceCell<Arc<Slot>>,
}

impl EvalSlots for CallSlots {
    fn acquire(&self) -> Pin<Box<dyn Future<Output = EvalSlot> + Send + '_>> {
        Box::pin(async move {
            let admitted = self
                .admitted
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(slot) = admitted {
                return EvalSlot::new(slot);
            }
            // The tenant's share first, so a tenant over it waits without a global slot.
            let own = self.tenant.slots.acquire(self.rank).await;
            let global = self.global.acquire(self.rank).await;
            EvalSlot::new(Slot {
                _tenant: own,
                _global: global,
            })
        })
    }

    fn acquire_bulk(&self) -> Pin<Box<dyn Future<Output = EvalSlot> + Send + '_>> {
        Box::pin(async move {
            let permit = self
                .bulk
                .get_or_init(|| async {
                    let own = self.tenant.bulk.acquire(self.rank).await;
                    let global = self.global_bulk.acquire(self.rank).await;
                    Arc::new(Slot {
                        _tenant: own,
                        _global: global,
                    })
                })
                .await;
            EvalSlot::new(Arc::clone(permit))
        })
    }
}

/// A byte count for people: `1.5 MiB`, `640 KiB`, `512 bytes`.
fn bytes(count: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * KIB;
    if count >= MIB {
        format!("{:.1} MiB", count as f64 / MIB as f64)
    } else if count >= KIB {
        format!("{:.1} KiB", count as f64 / KIB as f64)
    } else {
        format!("{count} bytes")
    }
}

/// Admission in front of the rest of the pipeline.
#[derive(Clone)]
pub(super) struct Admit {
    admission: Arc<Admission>,
}

impl Admit {
    pub(super) fn layer(admission: Arc<Admission>) -> StepLayer<Self> {
        StepLayer::new(Admit { admission })
    }
}

impl Step for Admit {
    fn run<S>(self: Arc<Self>, inner: S, call: Call) -> StepFuture
    where
        S: Service<Call, Response = ToolReply, Error = CallError> + Send + 'static,
        S::Future: Send,
    {
        let admission = self.admission.clone();
        Box::pin(async move {
            let mut call = call;
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
                Ok(admitted) => {
                    call.cx.slots = Some(Arc::new(admission.call_slots(&tenant, admitted)));
                    inner.oneshot(call).await
                }
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
            max_bulk_statements: 3,
            max_tenant_bulk_statements: 2,
            wait: Duration::from_millis(50),
            max_response_bytes: 1000,
            max_tenant_response_bytes: 600,
            bulk_work_priority: crate::thread_priority::BulkPriority::Normal,
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

    #[tokio::test]
    async fn a_tenant_whose_responses_are_not_sent_waits_without_a_slot() {
        let slots = admission(3, 2);
        let held = slots.responses().hold("a", 600);
        assert_eq!(slots.admit("a").await.unwrap_err(), Busy::TenantBytes);
        assert!(slots.admit("b").await.is_ok());
        let more = slots.responses().hold("b", 400);
        assert_eq!(slots.admit("c").await.unwrap_err(), Busy::GlobalBytes);
        drop((held, more));
        assert!(slots.admit("a").await.is_ok());
        let outcome = slots.busy("run_select_query", "acme", Busy::TenantBytes);
        let message = outcome.structured.as_ref().unwrap()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            message.starts_with("server busy: tenant 'acme' already has 600 bytes of responses being sent (limits.max_tenant_response_bytes_in_flight) and they were not sent within 50ms"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_call_works_in_the_slot_it_was_admitted_with_then_waits_for_each_next_one() {
        let slots = Arc::new(admission(2, 1));
        let first = slots.admit("a").await.unwrap();
        let call = slots.call_slots("a", first);
        // The tenant's only slot is the call's: its first piece of work takes it at once,
        // and while that one is held no other call of the tenant is admitted.
        let planning = call.acquire().await;
        assert_eq!(slots.admit("a").await.unwrap_err(), Busy::Tenant);
        // The next piece waits until the first is done.
        let next = {
            let call = Arc::new(call);
            let waiter = call.clone();
            let next = tokio::spawn(async move { waiter.acquire().await });
            tokio::task::yield_now().await;
            assert!(
                !next.is_finished(),
                "the next piece did not wait for the slot"
            );
            drop(planning);
            next.await.unwrap()
        };
        // Held by that piece, not by the call: once it is done another call is admitted.
        assert_eq!(slots.admit("a").await.unwrap_err(), Busy::Tenant);
        drop(next);
        assert!(slots.admit("a").await.is_ok());
        // Another tenant took the global slot the call left meanwhile.
        let _b = slots.admit("b").await.unwrap();
    }

    #[tokio::test]
    async fn a_call_under_way_gets_the_next_slot_before_a_later_one() {
        let slots = admission(2, 1);
        let earlier = slots.admit("a").await.unwrap();
        let earlier = Arc::new(slots.call_slots("a", earlier));
        drop(earlier.acquire().await);
        let later = slots.admit("a").await.unwrap();
        let later = Arc::new(slots.call_slots("a", later));
        let held = later.acquire().await;
        // The later call asks for its next slot first, the earlier one after it.
        let (tx, mut served) = tokio::sync::mpsc::unbounded_channel();
        let mut waiters = Vec::new();
        for (name, call) in [("later", later.clone()), ("earlier", earlier.clone())] {
            let tx = tx.clone();
            waiters.push(tokio::spawn(async move {
                let slot = call.acquire().await;
                tx.send(name).unwrap();
                drop(slot);
            }));
            // Each waits in line before the next asks.
            while slots.tenant("a").slots.waiting() < waiters.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(held);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(served.recv().await, Some("earlier"));
        assert_eq!(served.recv().await, Some("later"));
    }

    /// An admitted call of `tenant` whose planning is done (its first slot freed).
    async fn planned_call(slots: &Admission, tenant: &str) -> Arc<CallSlots> {
        let admitted = slots.admit(tenant).await.unwrap();
        let call = Arc::new(slots.call_slots(tenant, admitted));
        drop(call.acquire().await);
        call
    }

    /// Waits for `call`'s bulk permit on a task of its own, once it is in line.
    async fn bulk_waiter(
        line: &RankedSlots,
        call: &Arc<CallSlots>,
    ) -> tokio::task::JoinHandle<EvalSlot> {
        let before = line.waiting();
        let call = call.clone();
        let waiter = tokio::spawn(async move { call.acquire_bulk().await });
        while line.waiting() == before {
            tokio::task::yield_now().await;
        }
        waiter
    }

    #[tokio::test]
    async fn bulk_permits_have_a_share_per_tenant_and_leave_the_slots_free() {
        // 3 bulk permits, 2 per tenant.
        let slots = admission(2, 1);
        let mut a = Vec::new();
        for _ in 0..3 {
            a.push(planned_call(&slots, "a").await);
        }
        let held = (a[0].acquire_bulk().await, a[1].acquire_bulk().await);
        // Over its share, the tenant's third large statement waits...
        let a_waiting = bulk_waiter(&slots.tenant("a").bulk, &a[2]).await;
        // ...and its statements, that one included, still get slots for their work.
        drop(a[2].acquire().await);
        drop(a[0].acquire().await);
        // Another tenant gets the last permit, then waits for the global cap.
        let (b0, b1) = (
            planned_call(&slots, "b").await,
            planned_call(&slots, "b").await,
        );
        let b_held = b0.acquire_bulk().await;
        let b_waiting = bulk_waiter(&slots.global_bulk, &b1).await;
        // Freed once the engine's hold and the call are both gone.
        drop(b_held);
        tokio::task::yield_now().await;
        assert!(
            !b_waiting.is_finished(),
            "a permit was freed before its call ended"
        );
        drop(b0);
        let _b_bulk = b_waiting.await.unwrap();
        assert!(
            !a_waiting.is_finished(),
            "got a permit over its tenant's share"
        );
        // The engine's holds end, but the calls keep their permits until they are dropped.
        drop(held);
        tokio::task::yield_now().await;
        assert_eq!(slots.tenant("a").bulk.available(), 0);
        assert!(
            !a_waiting.is_finished(),
            "a permit was freed before its call ended"
        );
        drop(a.remove(0));
        a_waiting.await.unwrap();
    }

    #[tokio::test]
    async fn a_call_holds_one_bulk_permit_however_many_databases_ask() {
        // 1 bulk permit per tenant.
        let slots = Admission::new(AdmissionLimits {
            max_bulk_statements: 2,
            max_tenant_bulk_statements: 1,
            ..admission(2, 1).limits
        });
        let call = planned_call(&slots, "a").await;
        // An EXEC's rows, then the query over them: the second database gets the same
        // permit instead of waiting for the one its own call keeps.
        let first = call.acquire_bulk().await;
        let second = tokio::time::timeout(Duration::from_secs(30), call.acquire_bulk())
            .await
            .expect("the call waited for its own permit");
        drop((first, second));
        assert_eq!(slots.tenant("a").bulk.available(), 0, "kept by the call");
        drop(call);
        assert_eq!(slots.tenant("a").bulk.available(), 1);
    }

    #[test]
    fn the_busy_error_names_the_limit_and_the_retry_delay() {
        let slots = admission(3, 2);
        let outcome = slots.busy("run_select_query", "acme", Busy::Tenant);
        assert_eq!(outcome.code(), Some(Code::ServerBusy));
        let error = &outcome.structured.as_ref().unwrap()["error"];
        assert_eq!(error["code"], "server.busy");
        assert_eq!(error["retry_after_seconds"], 1);
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("tenant 'acme' already has 2 statements running (limits.max_tenant_evaluations) and none came free within 50ms"),
            "{message}"
        );
    }
}
