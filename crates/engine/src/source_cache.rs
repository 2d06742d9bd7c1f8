//! The credential-source summaries `server_info` shows, kept per tenant (see `reload.rs`):
//! reused until the credentials are reloaded, a provider is pulled, the tenant's store or
//! allowlist changes, or the registry's recheck interval has passed.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use super::credential_report::SourceSummary;
use super::credentials::CredentialStore;
use super::registry::LocalRegistry;
use super::types::ExecContext;

/// One provider of a kept summary.
#[derive(Debug)]
pub(crate) struct SummaryRow {
    pub(crate) provider: String,
    pub(crate) auth_type: String,
    pub(crate) source: SourceSummary,
}

/// The kept credential-source summaries, by tenant.
#[derive(Debug, Default)]
pub(crate) struct SourceCache {
    entries: Mutex<HashMap<String, Summary>>,
    /// Bumped by every [`SourceCache::clear`]: a summary built across a clear is not kept.
    epoch: AtomicU64,
}

/// When a summary was started: the cache's epoch and the registry's generation then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    epoch: u64,
    generation: u64,
}

#[derive(Debug)]
struct Summary {
    /// The tenant's store it was built with (a new store is a new configuration).
    store: Weak<CredentialStore>,
    allowed: Option<BTreeSet<String>>,
    stamp: Stamp,
    built: Instant,
    rows: Arc<[SummaryRow]>,
}

impl SourceCache {
    /// Forgets every summary (the credentials were reloaded).
    pub(crate) fn clear(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.lock().clear();
    }

    /// The cache's epoch and `registry`'s generation now.
    pub(crate) fn stamp(&self, registry: &LocalRegistry) -> Stamp {
        Stamp {
            epoch: self.epoch.load(Ordering::SeqCst),
            generation: registry.generation(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Summary>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The summary kept for `cx`, while it is current: nothing cleared or pulled since it
    /// was started, the same store and allowlist, and younger than `recheck`.
    pub(crate) fn get(
        &self,
        registry: &LocalRegistry,
        recheck: Duration,
        cx: &ExecContext,
    ) -> Option<Arc<[SummaryRow]>> {
        let now = self.stamp(registry);
        let entries = self.lock();
        let summary = entries.get(&cx.tenant)?;
        let current = summary.stamp == now
            && std::ptr::eq(summary.store.as_ptr(), Arc::as_ptr(&cx.credentials))
            && summary.allowed == cx.allowed_providers
            && summary.built.elapsed() < recheck;
        current.then(|| summary.rows.clone())
    }

    /// Keeps `rows` for `cx`'s tenant, unless the cache was cleared since `stamp`.
    pub(crate) fn put(&self, cx: &ExecContext, stamp: Stamp, rows: Arc<[SummaryRow]>) {
        let mut entries = self.lock();
        // Checked under the lock: a clear after the summary was started wins.
        if self.epoch.load(Ordering::SeqCst) != stamp.epoch {
            return;
        }
        entries.insert(
            cx.tenant.clone(),
            Summary {
                store: Arc::downgrade(&cx.credentials),
                allowed: cx.allowed_providers.clone(),
                stamp,
                built: Instant::now(),
                rows,
            },
        );
    }
}
