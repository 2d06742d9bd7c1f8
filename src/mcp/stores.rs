//! Where the handler keeps state that may be shared between replicas: sealed approvals,
//! pending out-of-band approvals and quota windows, in PostgreSQL when the configuration
//! says so (over the process's one pool), else in memory.

use std::sync::Arc;

use super::{StartError, Transport};
use crate::approval::{
    ApprovalStore, Approvals, KeyRing, MemoryPendingStore, MemoryStore, OutOfBand, PendingStore,
    PgPendingStore, PostgresStore,
};
use crate::clock::Clock;
use crate::config::{ApprovalStoreKind, Config};

/// The approvals of single calls, sealed with `approval.key_files`, and the out-of-band
/// approvals (`None` when off, and always for the command line, which asks at its
/// terminal).
pub(super) fn approvals(
    config: &Config,
    transport: Transport,
    pool: Option<&crate::db::PgPool>,
    clock: &Clock,
) -> Result<(Approvals, Option<Arc<OutOfBand>>), StartError> {
    let keys = KeyRing::from_files(&config.approval.key_files)?;
    // A per-process key matters only where another replica could be asked to redeem an
    // approval: a shared approval store, or an address beyond this machine (a load
    // balancer may be in front). A loopback server or stdio is one process.
    let shared = config.approval.store == ApprovalStoreKind::Postgres
        || !config.server.listen.ip().is_loopback();
    if config.approval.key_files.is_empty() && transport == Transport::Http && shared {
        tracing::warn!(
            "approval.key_files is empty: approvals are sealed with a random key made at start and work on this replica only"
        );
    }
    let (store, pending): (Arc<dyn ApprovalStore>, Arc<dyn PendingStore>) =
        match (config.approval.store, pool) {
            (ApprovalStoreKind::Postgres, Some(pool)) => (
                Arc::new(PostgresStore::new(pool.clone())),
                Arc::new(PgPendingStore::new(pool.clone())),
            ),
            _ => (
                Arc::new(MemoryStore::default()),
                Arc::new(MemoryPendingStore::default()),
            ),
        };
    let approvals = Approvals::new(&keys, config.approval.ttl, store, clock.clone())?;
    let out_of_band = if config.approval.out_of_band_enabled() && transport != Transport::Cli {
        Some(Arc::new(
            OutOfBand::new(&config.approval, pending)
                .and_then(|oob| oob.with_session_keys(&keys))
                .map_err(StartError::OutOfBand)?,
        ))
    } else {
        None
    };
    Ok((approvals, out_of_band))
}

/// The quota windows (`quotas.store`), counted in `metrics` when given.
pub(super) fn quotas(
    config: &Config,
    pool: Option<&crate::db::PgPool>,
    metrics: Option<Arc<crate::telemetry::Metrics>>,
) -> crate::quota::Quotas {
    match (config.quotas.store, pool) {
        (crate::config::QuotaStoreKind::Postgres, Some(pool)) => {
            crate::quota::Quotas::postgres(config.quotas.clone(), &config.tenants, pool.clone())
        }
        _ => crate::quota::Quotas::in_memory(config.quotas.clone(), &config.tenants),
    }
    .observed(metrics.map(|m| m as Arc<dyn crate::quota::QuotaObserver>))
}

/// The MCP tasks of an HTTP server (`tasks:`): in PostgreSQL when `database.url` is set
/// (every replica answers for every task and resumes those of a replica that stopped),
/// else in memory. `None` for stdio and the command line, where a call waits.
pub(super) fn tasks(
    config: &Config,
    transport: Transport,
    pool: Option<&crate::db::PgPool>,
    clock: &Clock,
    metrics: Option<Arc<crate::telemetry::Metrics>>,
) -> Option<Arc<crate::tasks::Tasks>> {
    if transport != Transport::Http {
        return None;
    }
    let store: Arc<dyn crate::tasks::TaskStore> = match pool {
        Some(pool) => Arc::new(crate::tasks::PgTaskStore::new(pool.clone())),
        None => Arc::new(crate::tasks::MemoryTaskStore::default()),
    };
    Some(crate::tasks::Tasks::new(
        store,
        config.tasks.clone(),
        clock.clone(),
        metrics,
    ))
}
