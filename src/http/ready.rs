//! `/readyz`: whether this replica should receive traffic. Ready when the registry folder
//! can be read and holds what its provider lock says (`registry.lock_file`, when the file
//! exists: every locked document with its digest, nothing unlocked), the audit sink can write (the file sink's folder takes a probe file; the
//! PostgreSQL sink's database answers `SELECT 1`; and its last write did not fail: a full
//! disk still takes an empty probe file), and the approval store answers when it is
//! PostgreSQL; never while draining.
//!
//! The answer is JSON, `200` or `503`:
//! `{"status":"ready","checks":{"registry":"ok","audit":"ok"}}`,
//! `{"status":"not_ready","checks":{"registry":"ok","audit":"not writable"}}`,
//! `{"status":"draining"}`. The body names what failed in a few fixed words (it is served
//! without authentication); the details go to the log when a check changes state.
//!
//! Checks run at most once per [`CACHE_FOR`] (probes arriving meanwhile share the result),
//! concurrently, each bounded by [`CHECK_TIMEOUT`]. The database check uses the process's
//! one pool ([`crate::db::shared_pool`]) with an idle connection, or opens one; when every
//! connection of the pool is in use, the database answered them and the check passes
//! without waiting, so a busy pool never makes a replica unready (a write that then fails
//! is caught by the audit's write health).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::json;
use sqlx_core::query::query;
use tokio::time::Instant;

use super::drain::Drain;
use crate::audit::{FileLocation, SinkSettings};
use crate::clock::Clock;
use crate::config::{ApprovalStoreKind, Config};
use crate::db::PgPool;

/// How long a result is reused.
pub const CACHE_FOR: Duration = Duration::from_secs(1);
/// The longest one check may take; past it, the check fails.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// What `/readyz` checks, and its last result; clones share both.
#[derive(Clone, Debug)]
pub struct Readiness {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    drain: Drain,
    /// `<registry.root>/src` (absent: an empty registry, which is ready).
    registry: PathBuf,
    /// Compares the registry with its provider lock.
    lock: Arc<crate::engine::lock::LockChecker>,
    /// The file sink's folder.
    audit_dir: Option<PathBuf>,
    /// The database of the PostgreSQL audit sink and/or approval store.
    database: Option<Database>,
    /// Whether the audit's last write failed.
    audit_writes: Option<Arc<crate::audit::auditor::WriteHealth>>,
    last: tokio::sync::Mutex<Option<(Instant, Checks)>>,
    /// What [`CACHE_FOR`] is measured on (the composition root's clock).
    clock: Clock,
}

#[derive(Debug)]
struct Database {
    /// The process's shared pool.
    pool: PgPool,
    audit: bool,
    approvals: bool,
}

/// Check name → `Ok` or why not.
type Checks = BTreeMap<&'static str, Result<(), Failure>>;

/// A failed check: a short reason for the body, details for the log.
#[derive(Clone, Debug)]
struct Failure {
    reason: &'static str,
    details: String,
}

impl Readiness {
    /// The checks `config` calls for, answering 503 once `drain` has begun or while the
    /// audit's last write (`audit_writes`) failed.
    pub fn new(
        config: &Config,
        pool: Option<PgPool>,
        drain: Drain,
        audit_writes: Option<Arc<crate::audit::auditor::WriteHealth>>,
        clock: Clock,
    ) -> Readiness {
        let audit_dir = match &config.audit.sink {
            SinkSettings::File { location, .. } if config.audit.enabled => Some(match location {
                FileLocation::Dir(dir) => dir.clone(),
                FileLocation::Path(path) => path
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .map_or_else(|| PathBuf::from("."), ToOwned::to_owned),
            }),
            _ => None,
        };
        let audit_db =
            config.audit.enabled && matches!(config.audit.sink, SinkSettings::Postgres { .. });
        let approvals_db = config.approval.store == ApprovalStoreKind::Postgres;
        let database = pool
            .filter(|_| audit_db || approvals_db)
            .map(|pool| Database {
                pool,
                audit: audit_db,
                approvals: approvals_db,
            });
        Readiness {
            inner: Arc::new(Inner {
                drain,
                registry: config.engine.registry_root.join("src"),
                lock: Arc::new(lock_checker(config)),
                audit_dir,
                database,
                audit_writes,
                last: tokio::sync::Mutex::new(None),
                clock,
            }),
        }
    }

    /// The `/readyz` answer.
    pub async fn respond(&self) -> Response {
        if self.inner.drain.is_draining() {
            return answer(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"status": "draining"}),
            );
        }
        let checks = self.checks().await;
        let ready = checks.values().all(Result::is_ok);
        let body: serde_json::Map<String, serde_json::Value> = checks
            .iter()
            .map(|(name, result)| {
                let state = result.as_ref().map_or_else(|f| f.reason, |()| "ok");
                ((*name).to_owned(), json!(state))
            })
            .collect();
        if ready {
            answer(StatusCode::OK, json!({"status": "ready", "checks": body}))
        } else {
            answer(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"status": "not_ready", "checks": body}),
            )
        }
    }

    /// The checks' results, from the cache when fresh.
    async fn checks(&self) -> Checks {
        let mut last = self.inner.last.lock().await;
        if let Some((at, checks)) = last.as_ref()
            && self.inner.clock.since(*at) < CACHE_FOR
        {
            return checks.clone();
        }
        let checks = self.inner.run().await;
        // Log changes only: probes come every few seconds.
        let state = |r: &Result<(), Failure>| r.as_ref().err().map(|f| f.reason);
        for (name, result) in &checks {
            let before = last.as_ref().and_then(|(_, b)| b.get(name)).map(state);
            if before == Some(state(result)) {
                continue;
            }
            match result {
                Ok(()) if before.is_some() => tracing::info!("readiness: {name} ok"),
                Ok(()) => {}
                Err(f) => tracing::warn!("readiness: {name} {}: {}", f.reason, f.details),
            }
        }
        *last = Some((self.inner.clock.instant(), checks.clone()));
        checks
    }
}

impl Inner {
    async fn run(&self) -> Checks {
        let registry = async {
            match bounded("unreadable", read_registry(self.registry.clone())).await {
                Ok(()) => {
                    bounded("differs from providers.lock", check_lock(self.lock.clone())).await
                }
                failed => failed,
            }
        };
        let audit_file = async {
            match &self.audit_dir {
                Some(dir) => Some(bounded("not writable", probe_dir(dir.clone())).await),
                None => None,
            }
        };
        let database = async {
            match &self.database {
                Some(db) => Some((db, bounded("unreachable", ping(&db.pool)).await)),
                None => None,
            }
        };
        let (registry, audit_file, database) = tokio::join!(registry, audit_file, database);
        let mut checks = Checks::new();
        checks.insert("registry", registry);
        if let Some(audit) = audit_file {
            checks.insert("audit", audit);
        }
        if let Some((db, result)) = database {
            if db.audit {
                checks.insert("audit", result.clone());
            }
            if db.approvals {
                checks.insert("approval_store", result);
            }
        }
        // A folder that takes a probe file can still be full: the last write decides too.
        if let Some(details) = self.audit_writes.as_ref().and_then(|h| h.failing())
            && checks.get("audit").is_none_or(Result::is_ok)
        {
            checks.insert(
                "audit",
                Err(Failure {
                    reason: "write failing",
                    details,
                }),
            );
        }
        checks
    }
}

/// Runs `check` within [`CHECK_TIMEOUT`]; a failure or a timeout is `reason`.
async fn bounded<F>(reason: &'static str, check: F) -> Result<(), Failure>
where
    F: std::future::Future<Output = Result<(), String>>,
{
    let details = match tokio::time::timeout(CHECK_TIMEOUT, check).await {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(details)) => details,
        Err(_) => format!(
            "no answer within {}",
            humantime::format_duration(CHECK_TIMEOUT)
        ),
    };
    Err(Failure { reason, details })
}

/// The registry's provider lock checker of `config` (`registry.lock_file`).
pub fn lock_checker(config: &Config) -> crate::engine::lock::LockChecker {
    let root = &config.engine.registry_root;
    let lock_file = config
        .engine
        .remote
        .lock_file
        .clone()
        .unwrap_or_else(|| root.join(crate::engine::lock::LOCK_FILE_NAME));
    crate::engine::lock::LockChecker::new(lock_file, root)
}

/// The registry holds what its lock says (or has no lock).
async fn check_lock(lock: Arc<crate::engine::lock::LockChecker>) -> Result<(), String> {
    blocking(move || lock.check().map(drop).map_err(|err| err.0)).await
}

/// The registry folder can be listed (or does not exist yet: an empty registry).
async fn read_registry(src: PathBuf) -> Result<(), String> {
    blocking(move || match std::fs::read_dir(&src) {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(format!("cannot read '{}': {err}", src.display())),
    })
    .await
}

/// A probe file can be created in `dir` (and is removed again).
async fn probe_dir(dir: PathBuf) -> Result<(), String> {
    blocking(move || {
        let probe = dir.join(format!(".querygate-readyz-{}", std::process::id()));
        std::fs::File::create(&probe)
            .and_then(|_| std::fs::remove_file(&probe))
            .map_err(|err| format!("cannot write in '{}': {err}", dir.display()))
    })
    .await
}

/// The database answers `SELECT 1` on an idle or new connection of `pool`; a pool whose
/// connections are all in use passes (each of them was answered).
async fn ping(pool: &PgPool) -> Result<(), String> {
    let busy = pool.num_idle() == 0 && pool.size() >= pool.options().get_max_connections();
    if busy {
        return Ok(());
    }
    query("SELECT 1")
        .execute(pool)
        .await
        .map(|_| ())
        .map_err(|err| format!("database error: {err}"))
}

/// Runs file system work off the async threads.
async fn blocking<F>(work: F) -> Result<(), String>
where
    F: FnOnce() -> Result<(), String> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|err| Err(format!("check failed: {err}")))
}

fn answer(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [(http::header::CACHE_CONTROL, "no-store")],
        axum::Json(body),
    )
        .into_response()
}

/// `/healthz` (the process answers: `ok`) and `/readyz`, served without authentication on
/// the main listener and on the admin listener.
pub fn probes(readiness: Readiness) -> axum::Router {
    axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let readiness = readiness.clone();
                async move { readiness.respond().await }
            }),
        )
}
