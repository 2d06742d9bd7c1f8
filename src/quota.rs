//! Quotas: calls per fixed window by query class (`read`, `write`, `delete`, `exec`), for a
//! tenant as a whole and for each of its principals (`tenants[].quotas`), counted in memory
//! (one replica) or in PostgreSQL (`quota_windows`, migration 0005), shared by every replica.
//!
//! A window is a whole second, minute or hour of the wall clock (UTC), the same on every
//! replica. Its counter in PostgreSQL is one row per key and window, moved by one
//! `INSERT … ON CONFLICT … DO UPDATE … RETURNING` for every key a call needs more calls
//! of (one round trip whatever their number). A replica takes a lease of several calls at
//! once (`quotas.lease`, at most a tenth of the quota) and admits from it without asking
//! again. A lease never grants more than the counter had left, so the calls admitted in a
//! window over the whole fleet never exceed the quota: leases cost under-admission only
//! (calls leased and not used by the end of the window are lost: at most
//! `replicas × (lease − 1)` per key and window). Once the counter says the window is used
//! up, the replica refuses without asking again until the window ends. As with every fixed
//! window, a client may get up to twice the quota within one window's length across a
//! window boundary.
//!
//! When the store cannot be reached (or does not answer within [`STORE_TIMEOUT`]),
//! `quotas.on_store_failure` decides: by default reads run (logged and counted) and the
//! other classes are refused with `quota.unavailable`. The store is not asked again for
//! [`STORE_RETRY`] after a failure.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sqlx_core::query::query;
use sqlx_core::query_as::query_as;
use sqlx_postgres::{PgPool, Postgres};

use crate::auth::Principal;
use crate::config::{ClassQuotas, Quota, QuotaClass, QuotaConfig, TenantConfig, TenantQuotas};

/// How long a call waits for the shared store before its failure mode applies.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long after a failure the store is not asked (the failure mode applies at once).
pub const STORE_RETRY: Duration = Duration::from_secs(1);

/// How often a replica deletes windows that ended over two hours ago.
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// Whose calls a quota counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// All the tenant's principals together.
    Tenant,
    /// One principal of the tenant.
    Principal,
}

impl Scope {
    /// The metric label and the structured error's `scope`: `tenant`, `principal`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Tenant => "tenant",
            Scope::Principal => "principal",
        }
    }
}

/// What a call gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Under every quota that applies (or none applies).
    Admitted,
    /// The store could not be reached and `quotas.on_store_failure` lets the call run.
    AdmittedUnchecked,
    /// A quota of the window is used up.
    Exceeded {
        /// Whose quota.
        scope: Scope,
        /// The quota.
        quota: Quota,
        /// Until the window ends.
        retry_after: Duration,
    },
    /// The store could not be reached and `quotas.on_store_failure` refuses the call.
    Unavailable {
        /// What failed (never a secret: the driver's text, redacted of the URL).
        reason: String,
    },
}

/// Counts quota refusals and store failures (the server's metrics).
pub trait QuotaObserver: Send + Sync + std::fmt::Debug {
    /// A call of `tenant` refused by its `scope`'s quota of `class`.
    fn quota_refused(&self, tenant: &str, class: QuotaClass, scope: Scope);
    /// The store failed for a call; `admitted`: the failure mode let it run.
    fn quota_store_failed(&self, admitted: bool);
}

/// The counters: this process's, or PostgreSQL's.
#[derive(Debug)]
enum Store {
    Memory(Mutex<HashMap<String, (i64, u64)>>),
    Postgres {
        pool: PgPool,
        pruned: Mutex<Option<Instant>>,
    },
}

/// Calls of one key this replica may still admit in one window.
#[derive(Debug, Default)]
struct Lease {
    window: i64,
    remaining: u64,
    /// The counter said the window is used up: refused without asking until it ends.
    spent: bool,
}

/// One quota a call needs a call of.
struct Need {
    key: String,
    scope: Scope,
    quota: Quota,
    window: i64,
    lease: Arc<tokio::sync::Mutex<Lease>>,
}

/// Every tenant's quotas and this replica's leases.
#[derive(Debug)]
pub struct Quotas {
    config: QuotaConfig,
    tenants: HashMap<String, TenantQuotas>,
    store: Store,
    leases: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Lease>>>>,
    unavailable_until: Mutex<Option<Instant>>,
    observer: Option<Arc<dyn QuotaObserver>>,
}

impl Quotas {
    /// The quotas of `tenants`, counted in memory.
    pub fn in_memory(config: QuotaConfig, tenants: &[TenantConfig]) -> Self {
        Self::with_store(config, tenants, Store::Memory(Mutex::default()))
    }

    /// The quotas of `tenants`, counted in PostgreSQL through `pool`.
    pub fn postgres(config: QuotaConfig, tenants: &[TenantConfig], pool: PgPool) -> Self {
        let store = Store::Postgres {
            pool,
            pruned: Mutex::new(None),
        };
        Self::with_store(config, tenants, store)
    }

    fn with_store(config: QuotaConfig, tenants: &[TenantConfig], store: Store) -> Self {
        Quotas {
            config,
            tenants: tenants
                .iter()
                .filter(|t| !t.quotas.is_empty())
                .map(|t| (t.id.clone(), t.quotas.clone()))
                .collect(),
            store,
            leases: Mutex::default(),
            unavailable_until: Mutex::new(None),
            observer: None,
        }
    }

    /// These quotas, telling `observer` about refusals and store failures.
    pub fn observed(mut self, observer: Option<Arc<dyn QuotaObserver>>) -> Self {
        self.observer = observer;
        self
    }

    /// Whether any tenant has a quota.
    pub fn is_empty(&self) -> bool {
        self.tenants.is_empty()
    }

    /// Takes one call of `class` for `principal` from its principal's quota and its tenant's
    /// (each as configured), at the wall clock's time.
    pub async fn admit(&self, principal: &Principal, class: QuotaClass) -> Verdict {
        self.admit_at(principal, class, SystemTime::now()).await
    }

    async fn admit_at(&self, principal: &Principal, class: QuotaClass, now: SystemTime) -> Verdict {
        let Some(quotas) = self.tenants.get(&principal.tenant) else {
            return Verdict::Admitted;
        };
        let now_ms = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        // The principal's first: a principal over its own quota takes nothing of the
        // tenant's. Always in this order, so two calls never wait on each other's leases.
        let mut needs = Vec::with_capacity(2);
        let scopes: [(Scope, &ClassQuotas); 2] = [
            (Scope::Principal, &quotas.per_principal),
            (Scope::Tenant, &quotas.tenant),
        ];
        for (scope, classes) in scopes {
            let Some(quota) = classes.of(class) else {
                continue;
            };
            let key = key(&principal.tenant, class, scope, principal);
            let window_ms = quota.window.as_millis() as i64;
            let window = now_ms.div_euclid(window_ms) * window_ms / 1000;
            let lease = self.lease(&key);
            needs.push(Need {
                key,
                scope,
                quota,
                window,
                lease,
            });
        }
        if needs.is_empty() {
            return Verdict::Admitted;
        }
        let mut held = Vec::with_capacity(needs.len());
        for need in &needs {
            held.push(need.lease.lock().await);
        }
        // A new window starts every lease afresh.
        for (lease, need) in held.iter_mut().zip(&needs) {
            if lease.window != need.window {
                **lease = Lease {
                    window: need.window,
                    ..Lease::default()
                };
            }
        }
        // Known to be used up: refused without asking.
        if let Some(refusal) = self.refusal(&principal.tenant, class, &needs, &held, now_ms) {
            return refusal;
        }
        let asks: Vec<(usize, u64)> = held
            .iter()
            .enumerate()
            .filter(|(_, lease)| lease.remaining == 0)
            .map(|(i, _)| (i, self.config.lease_for(needs[i].quota)))
            .collect();
        if !asks.is_empty() {
            match self.take(&needs, &asks).await {
                Ok(granted) => {
                    for ((i, ask), got) in asks.iter().zip(granted) {
                        held[*i].remaining = got;
                        held[*i].spent = got < *ask;
                    }
                }
                Err(reason) => {
                    let admitted = self.config.on_store_failure.admits(class);
                    if let Some(observer) = &self.observer {
                        observer.quota_store_failed(admitted);
                    }
                    return if admitted {
                        tracing::warn!(
                            tenant = %principal.tenant,
                            class = class.as_str(),
                            "quota store unavailable; call admitted unchecked (quotas.on_store_failure: {}): {reason}",
                            self.config.on_store_failure.as_str()
                        );
                        Verdict::AdmittedUnchecked
                    } else {
                        tracing::warn!(
                            tenant = %principal.tenant,
                            class = class.as_str(),
                            "quota store unavailable; call refused (quotas.on_store_failure: {}): {reason}",
                            self.config.on_store_failure.as_str()
                        );
                        Verdict::Unavailable { reason }
                    };
                }
            }
        }
        if let Some(refusal) = self.refusal(&principal.tenant, class, &needs, &held, now_ms) {
            return refusal;
        }
        for lease in &mut held {
            lease.remaining -= 1;
        }
        Verdict::Admitted
    }

    /// The refusal of the first need with nothing left in a window known to be used up.
    fn refusal(
        &self,
        tenant: &str,
        class: QuotaClass,
        needs: &[Need],
        held: &[tokio::sync::MutexGuard<'_, Lease>],
        now_ms: i64,
    ) -> Option<Verdict> {
        let (need, _) = needs
            .iter()
            .zip(held)
            .find(|(_, lease)| lease.remaining == 0 && lease.spent)?;
        if let Some(observer) = &self.observer {
            observer.quota_refused(tenant, class, need.scope);
        }
        let ends_ms = (need.window * 1000).saturating_add(need.quota.window.as_millis() as i64);
        Some(Verdict::Exceeded {
            scope: need.scope,
            quota: need.quota,
            retry_after: Duration::from_millis(ends_ms.saturating_sub(now_ms).max(0) as u64),
        })
    }

    fn lease(&self, key: &str) -> Arc<tokio::sync::Mutex<Lease>> {
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        match leases.get(key) {
            Some(lease) => lease.clone(),
            None => {
                let lease = Arc::<tokio::sync::Mutex<Lease>>::default();
                leases.insert(key.to_owned(), lease.clone());
                lease
            }
        }
    }

    /// Takes up to `ask` calls of each need `asks` names from its counter; what each got.
    async fn take(&self, needs: &[Need], asks: &[(usize, u64)]) -> Result<Vec<u64>, String> {
        match &self.store {
            Store::Memory(counters) => {
                let mut counters = counters.lock().unwrap_or_else(PoisonError::into_inner);
                Ok(asks
                    .iter()
                    .map(|(i, ask)| {
                        let need = &needs[*i];
                        let counter = counters.entry(need.key.clone()).or_insert((need.window, 0));
                        if counter.0 != need.window {
                            *counter = (need.window, 0);
                        }
                        let got = (*ask).min(need.quota.limit.saturating_sub(counter.1));
                        counter.1 += got;
                        got
                    })
                    .collect())
            }
            Store::Postgres { pool, pruned } => {
                {
                    let until = self
                        .unavailable_until
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    if until.is_some_and(|until| Instant::now() < until) {
                        return Err("the store failed less than a second ago".to_owned());
                    }
                }
                let taken = tokio::time::timeout(STORE_TIMEOUT, take_pg(pool, needs, asks)).await;
                let outcome = match taken {
                    Ok(Ok(granted)) => Ok(granted),
                    Ok(Err(err)) => Err(err),
                    Err(_) => Err(format!(
                        "no answer within {}",
                        humantime::format_duration(STORE_TIMEOUT)
                    )),
                };
                match &outcome {
                    Ok(_) => self.prune_now_and_then(pool, pruned),
                    Err(_) => {
                        *self
                            .unavailable_until
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) =
                            Some(Instant::now() + STORE_RETRY);
                    }
                }
                outcome
            }
        }
    }

    /// Deletes long-ended windows, at most every [`PRUNE_EVERY`] per replica, in the
    /// background (the call does not wait for it).
    fn prune_now_and_then(&self, pool: &PgPool, pruned: &Mutex<Option<Instant>>) {
        let mut last = pruned.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|at| at.elapsed() < PRUNE_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        let pool = pool.clone();
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
            - 7200;
        tokio::spawn(async move {
            let _ = query::<Postgres>("DELETE FROM quota_windows WHERE window_start < $1")
                .bind(before)
                .execute(&pool)
                .await;
        });
    }
}

/// One round trip: adds each ask to its key's counter of the window and computes what it
/// got from the counter's new value (never more than the quota had left).
async fn take_pg(pool: &PgPool, needs: &[Need], asks: &[(usize, u64)]) -> Result<Vec<u64>, String> {
    let keys: Vec<String> = asks.iter().map(|(i, _)| needs[*i].key.clone()).collect();
    let windows: Vec<i64> = asks.iter().map(|(i, _)| needs[*i].window).collect();
    let counts: Vec<i64> = asks.iter().map(|(_, ask)| *ask as i64).collect();
    let rows: Vec<(String, i64)> = query_as::<Postgres, (String, i64)>(
        "INSERT INTO quota_windows (key, window_start, used) \
         SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bigint[]) \
         ON CONFLICT (key, window_start) DO UPDATE SET used = quota_windows.used + EXCLUDED.used \
         RETURNING key, used",
    )
    .bind(&keys)
    .bind(&windows)
    .bind(&counts)
    .fetch_all(pool)
    .await
    .map_err(|err| err.to_string())?;
    asks.iter()
        .map(|(i, ask)| {
            let need = &needs[*i];
            let used = rows
                .iter()
                .find(|(key, _)| *key == need.key)
                .map(|(_, used)| (*used).max(0) as u64)
                .ok_or_else(|| "the store returned no counter for a key".to_owned())?;
            let before = used.saturating_sub(*ask);
            Ok((*ask).min(need.quota.limit.saturating_sub(before)))
        })
        .collect()
}

/// The counter's key: tenant and class, and for a principal's quota a digest of who it is
/// (its method, issuer and subject: bounded, and no identity in the table).
fn key(tenant: &str, class: QuotaClass, scope: Scope, principal: &Principal) -> String {
    match scope {
        Scope::Tenant => format!("{tenant}/{}", class.as_str()),
        Scope::Principal => {
            let who = format!(
                "{:?}\u{1f}{}\u{1f}{}",
                principal.method,
                principal.issuer.as_deref().unwrap_or(""),
                principal.subject
            );
            let digest = crate::digest::sha256_hex(who.as_bytes());
            format!("{tenant}/{}/p/{}", class.as_str(), &digest[..32])
        }
    }
}

/// The `retry_after_seconds` of a wait: whole seconds, rounded up, at least 1.
pub fn retry_seconds(wait: Duration) -> u64 {
    (wait.as_secs_f64().ceil() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(id: &str, quotas: TenantQuotas) -> TenantConfig {
        TenantConfig {
            id: id.to_owned(),
            mode: crate::config::Mode::default(),
            allowed_providers: None,
            env_file: None,
            process_env: false,
            allow_pull_provider: false,
            allowed_tools: None,
            limits: crate::config::TenantLimits::default(),
            rules: crate::governance::TenantRules::default(),
            cache: None,
            quotas,
            aws_roles: std::collections::BTreeMap::new(),
            token_exchanges: std::collections::BTreeMap::new(),
            policy_files: Vec::new(),
            policy_reload_interval: std::time::Duration::from_secs(5),
        }
    }

    fn principal(tenant: &str, subject: &str) -> Principal {
        Principal {
            subject: subject.to_owned(),
            tenant: tenant.to_owned(),
            ..Principal::anonymous()
        }
    }

    fn per_minute(limit: u64) -> Option<Quota> {
        Some(Quota {
            limit,
            window: Duration::from_secs(60),
        })
    }

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[tokio::test]
    async fn a_tenant_gets_its_quota_per_window_and_the_wait_until_the_next() {
        let quotas = TenantQuotas {
            tenant: ClassQuotas {
                write: per_minute(3),
                ..ClassQuotas::default()
            },
            ..TenantQuotas::default()
        };
        let q = Quotas::in_memory(QuotaConfig::default(), &[tenant("acme", quotas)]);
        let alice = principal("acme", "alice");
        let start = 6_000_000; // a minute's start
        for _ in 0..3 {
            assert_eq!(
                q.admit_at(&alice, QuotaClass::Write, at(start + 10)).await,
                Verdict::Admitted
            );
        }
        let refused = q.admit_at(&alice, QuotaClass::Write, at(start + 10)).await;
        assert_eq!(
            refused,
            Verdict::Exceeded {
                scope: Scope::Tenant,
                quota: per_minute(3).unwrap(),
                retry_after: Duration::from_secs(50)
            }
        );
        // Reads have no quota; the next window admits again.
        assert_eq!(
            q.admit_at(&alice, QuotaClass::Read, at(start + 10)).await,
            Verdict::Admitted
        );
        assert_eq!(
            q.admit_at(&alice, QuotaClass::Write, at(start + 60)).await,
            Verdict::Admitted
        );
        // Another tenant has no quota.
        let bob = principal("globex", "bob");
        assert_eq!(
            q.admit_at(&bob, QuotaClass::Write, at(start + 10)).await,
            Verdict::Admitted
        );
    }

    #[tokio::test]
    async fn a_principal_over_its_own_quota_takes_nothing_from_the_tenant() {
        let quotas = TenantQuotas {
            tenant: ClassQuotas {
                read: per_minute(4),
                ..ClassQuotas::default()
            },
            per_principal: ClassQuotas {
                read: per_minute(2),
                ..ClassQuotas::default()
            },
        };
        let q = Quotas::in_memory(QuotaConfig::default(), &[tenant("acme", quotas)]);
        let (alice, bob) = (principal("acme", "alice"), principal("acme", "bob"));
        let now = at(6_000_030);
        assert_eq!(
            q.admit_at(&alice, QuotaClass::Read, now).await,
            Verdict::Admitted
        );
        assert_eq!(
            q.admit_at(&alice, QuotaClass::Read, now).await,
            Verdict::Admitted
        );
        for _ in 0..5 {
            assert!(matches!(
                q.admit_at(&alice, QuotaClass::Read, now).await,
                Verdict::Exceeded {
                    scope: Scope::Principal,
                    ..
                }
            ));
        }
        // Bob still gets the tenant's other two.
        assert_eq!(
            q.admit_at(&bob, QuotaClass::Read, now).await,
            Verdict::Admitted
        );
        assert_eq!(
            q.admit_at(&bob, QuotaClass::Read, now).await,
            Verdict::Admitted
        );
        assert!(matches!(
            q.admit_at(&principal("acme", "carol"), QuotaClass::Read, now)
                .await,
            Verdict::Exceeded {
                scope: Scope::Tenant,
                ..
            }
        ));
    }

    use crate::config::StoreFailure;

    #[test]
    fn principal_keys_differ_by_issuer_and_hold_no_identity() {
        let alice = principal("acme", "alice@example.com");
        let other = Principal {
            issuer: Some("https://other".to_owned()),
            ..alice.clone()
        };
        let a = key("acme", QuotaClass::Read, Scope::Principal, &alice);
        assert!(!a.contains("alice"), "{a}");
        assert_ne!(a, key("acme", QuotaClass::Read, Scope::Principal, &other));
        assert_eq!(
            key("acme", QuotaClass::Read, Scope::Tenant, &alice),
            "acme/read"
        );
        assert_eq!(retry_seconds(Duration::from_millis(1)), 1);
        assert_eq!(retry_seconds(Duration::from_millis(1500)), 2);
        assert!(StoreFailure::ReadsOpen.admits(QuotaClass::Read));
        assert!(!StoreFailure::ReadsOpen.admits(QuotaClass::Write));
    }
}
