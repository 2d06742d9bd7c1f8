//! The rendered response bytes in flight on one replica, overall and per tenant. A result is
//! counted from the moment it is rendered until its response has been sent (over HTTP: until
//! the response body is dropped, written out or abandoned; over stdio: until the result is
//! handed to the transport). A call that runs an SQL statement is admitted only while both
//! its tenant's count is under `limits.max_tenant_response_bytes_in_flight` and the
//! replica's is under `limits.max_response_bytes_in_flight`, where the replica's count takes
//! each tenant's bytes only up to that share (so a tenant past its share holds up only
//! itself); it waits up to `limits.admission_wait` for that, then is answered `server.busy`
//! before anything ran.
//!
//! The size of a response is only known once it is rendered, and a statement's result size
//! cannot be known before it ran, so the cap is checked on admission and a result is counted
//! with its real size after rendering (never refused then: the work is done). The count can
//! therefore pass the cap by at most the results of the calls admitted meanwhile, and it
//! stays there only until those are sent.

use crate::engine::EvalSlots;
use crate::thread_priority::BulkPriority;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Whose share of the response bytes was full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// The tenant's share.
    Tenant,
    /// The replica's cap.
    Global,
}

/// The count of response bytes in flight.
#[derive(Debug)]
pub(crate) struct ResponseBytes {
    max_global: usize,
    max_tenant: usize,
    /// How large responses are serialized at a lower priority
    /// (`limits.bulk_work_priority`).
    bulk_priority: BulkPriority,
    counts: Mutex<Counts>,
    /// Woken whenever bytes are released.
    released: Notify,
}

#[derive(Debug, Default)]
struct Counts {
    /// The sum over tenants of their bytes up to their share: a tenant past its share (one
    /// response larger than the share, or a client that does not read) holds up only itself.
    global: usize,
    /// Each tenant's bytes.
    tenants: HashMap<String, usize>,
}

impl Counts {
    /// Sets `tenant`'s bytes with `change` and the global count with it.
    fn update(&mut self, tenant: &str, share: usize, change: impl FnOnce(usize) -> usize) {
        let own = self.tenants.entry(tenant.to_owned()).or_insert(0);
        let before = (*own).min(share);
        *own = change(*own);
        let after = (*own).min(share);
        self.global = (self.global + after).saturating_sub(before);
    }
}

impl ResponseBytes {
    /// A count with these caps (bytes).
    #[cfg(test)]
    pub(crate) fn new(max_global: usize, max_tenant: usize) -> Arc<Self> {
        Self::with_bulk_priority(max_global, max_tenant, BulkPriority::Normal)
    }

    /// A count with these caps (bytes), whose holds say to serialize large responses at a
    /// priority lowered as `bulk_priority` says.
    pub(crate) fn with_bulk_priority(
        max_global: usize,
        max_tenant: usize,
        bulk_priority: BulkPriority,
    ) -> Arc<Self> {
        Arc::new(ResponseBytes {
            max_global,
            max_tenant,
            bulk_priority,
            counts: Mutex::default(),
            released: Notify::new(),
        })
    }

    fn full(&self, tenant: &str) -> Option<Full> {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if counts.tenants.get(tenant).copied().unwrap_or(0) >= self.max_tenant {
            Some(Full::Tenant)
        } else if counts.global >= self.max_global {
            Some(Full::Global)
        } else {
            None
        }
    }

    /// Waits until `tenant`'s count is under its share and the replica's under its cap, up
    /// to `deadline`; the share that stayed full otherwise.
    pub(crate) async fn room(&self, tenant: &str, deadline: Instant) -> Result<(), Full> {
        loop {
            // Registered before the check, so a release between the check and the wait
            // still wakes this waiter.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let Some(full) = self.full(tenant) else {
                return Ok(());
            };
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                return Err(full);
            }
        }
    }

    /// Counts `bytes` of `tenant`'s response until the returned hold is dropped.
    pub(crate) fn hold(self: &Arc<Self>, tenant: &str, bytes: usize) -> HeldBytes {
        self.hold_keeping(tenant, bytes, None)
    }

    /// Counts `bytes` of `tenant`'s like [`ResponseBytes::hold`], and keeps `slots` (the
    /// call's evaluation slots: a large statement's bulk permits) until they are released.
    pub(crate) fn hold_keeping(
        self: &Arc<Self>,
        tenant: &str,
        bytes: usize,
        slots: Option<Arc<dyn EvalSlots>>,
    ) -> HeldBytes {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.update(tenant, self.max_tenant, |own| own.saturating_add(bytes));
        HeldBytes(Arc::new(Hold {
            count: self.clone(),
            tenant: tenant.to_owned(),
            bytes,
            _slots: slots,
        }))
    }

    fn release(&self, tenant: &str, bytes: usize) {
        {
            let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
            counts.update(tenant, self.max_tenant, |own| own.saturating_sub(bytes));
        }
        self.released.notify_waiters();
    }

    /// The bytes in flight: the replica's (each tenant's up to its share) and `tenant`'s.
    #[cfg(test)]
    pub(crate) fn in_flight(&self, tenant: &str) -> (usize, usize) {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        (
            counts.global,
            counts.tenants.get(tenant).copied().unwrap_or(0),
        )
    }
}

/// A response's bytes, counted until the last clone is dropped.
#[derive(Debug, Clone)]
pub struct HeldBytes(Arc<Hold>);

impl PartialEq for HeldBytes {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl HeldBytes {
    /// The bytes counted.
    pub fn bytes(&self) -> usize {
        self.0.bytes
    }

    /// How the response is serialized at a lower priority when it is large
    /// (`limits.bulk_work_priority`).
    pub fn bulk_priority(&self) -> BulkPriority {
        self.0.count.bulk_priority
    }
}

#[derive(Debug)]
struct Hold {
    count: Arc<ResponseBytes>,
    tenant: String,
    bytes: usize,
    /// Kept until the bytes are released.
    _slots: Option<Arc<dyn EvalSlots>>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.count.release(&self.tenant, self.bytes);
    }
}

/// What the MCP handler leaves for the HTTP layer about one `/mcp` request: a result's
/// [`HeldBytes`], kept until its response is sent, and the scopes of a step-up (the call
/// was refused with `auth.insufficient_scope`: the answer becomes a `403` challenge). The
/// HTTP layer puts one in each request's extensions; stdio has none.
#[derive(Debug, Clone, Default)]
pub struct ResponseSlot(Arc<Mutex<Slot>>);

#[derive(Debug, Default)]
struct Slot {
    held: Option<HeldBytes>,
    step_up: Option<Vec<&'static str>>,
}

impl ResponseSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `held` here (with any hold kept before).
    pub fn keep(&self, held: HeldBytes) {
        self.lock().held = Some(held);
    }

    /// The bytes of the hold kept here (0: none) and its `bulk_priority`.
    pub fn bytes(&self) -> (usize, BulkPriority) {
        self.lock()
            .held
            .as_ref()
            .map_or((0, BulkPriority::Normal), |held| {
                (held.bytes(), held.bulk_priority())
            })
    }

    /// What was kept.
    pub fn take(&self) -> Option<HeldBytes> {
        self.lock().held.take()
    }

    /// Asks the HTTP layer to answer `403 insufficient_scope` naming `scopes`.
    pub fn step_up(&self, scopes: Vec<&'static str>) {
        self.lock().step_up = Some(scopes);
    }

    /// The scopes of a step-up asked for, if any.
    pub fn take_step_up(&self) -> Option<Vec<&'static str>> {
        self.lock().step_up.take()
    }
}

/// About the length of `structured` serialized as JSON (strings without their escapes),
/// found without serializing it.
pub(crate) fn json_len(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(number) => number_len(number),
        Value::String(s) => s.len() + 2,
        Value::Array(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(json_len).sum::<usize>()
        }
        Value::Object(map) => {
            2 + map.len()
                + map.len().saturating_sub(1)
                + map
                    .iter()
                    .map(|(key, value)| key.len() + 2 + json_len(value))
                    .sum::<usize>()
        }
    }
}

fn number_len(number: &serde_json::Number) -> usize {
    if let Some(n) = number.as_u64() {
        digits(n)
    } else if let Some(n) = number.as_i64() {
        1 + digits(n.unsigned_abs())
    } else {
        // Shortest round-trip floats are at most 24 characters; most are about 18.
        18
    }
}

fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    #[tokio::test]
    async fn a_tenant_over_its_share_waits_until_its_bytes_are_sent() {
        let count = ResponseBytes::new(1000, 600);
        let soon = || Instant::now() + Duration::from_millis(30);
        let a = count.hold("a", 600);
        assert_eq!(count.room("a", soon()).await, Err(Full::Tenant));
        // Another tenant still has room; then the replica's cap is reached.
        assert_eq!(count.room("b", soon()).await, Ok(()));
        let b = count.hold("b", 500);
        assert_eq!(count.in_flight("b"), (1100, 500));
        assert_eq!(count.room("c", soon()).await, Err(Full::Global));
        // A waiter is let in as soon as bytes are released.
        let waiter = {
            let count = count.clone();
            tokio::spawn(async move {
                count
                    .room("a", Instant::now() + Duration::from_secs(5))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let copy = a.clone();
        drop(a);
        assert_eq!(count.in_flight("a"), (1100, 600), "a clone still holds");
        drop((copy, b));
        assert_eq!(waiter.await.unwrap(), Ok(()));
        assert_eq!(count.in_flight("a"), (0, 0));
    }

    #[tokio::test]
    async fn a_tenant_past_its_share_counts_only_its_share_for_the_others() {
        let count = ResponseBytes::new(1000, 600);
        let soon = Instant::now() + Duration::from_millis(30);
        let huge = count.hold("a", 50_000);
        let more = count.hold("a", 100);
        assert_eq!(count.in_flight("a"), (600, 50_100));
        assert_eq!(count.room("b", soon).await, Ok(()));
        drop(huge);
        assert_eq!(count.in_flight("a"), (100, 100));
        drop(more);
        assert_eq!(count.in_flight("a"), (0, 0));
    }

    #[test]
    fn a_slot_keeps_the_last_hold() {
        let count = ResponseBytes::new(100, 100);
        let slot = ResponseSlot::default();
        assert_eq!(slot.bytes(), (0, BulkPriority::Normal));
        slot.clone().keep(count.hold("a", 10));
        assert_eq!(count.in_flight("a"), (10, 10));
        assert_eq!(slot.bytes(), (10, BulkPriority::Normal));
        let held = slot.take().unwrap();
        assert_eq!(held.bytes(), 10);
        assert!(slot.take().is_none());
        drop(held);
        assert_eq!(count.in_flight("a"), (0, 0));
    }

    #[test]
    fn json_len_is_close_to_the_serialized_length() {
        for value in [
            json!({"rows": [{"id": 9_007_199_254_740_993_u64, "name": "item-00001", "n": -12,
                              "ok": true, "none": null}], "truncated": false}),
            json!([0, 9, 10, 99, 100, u64::MAX, i64::MIN]),
            json!({}),
            json!("text"),
        ] {
            assert_eq!(
                json_len(&value),
                serde_json::to_string(&value).unwrap().len(),
                "{value}"
            );
        }
    }
}
