//! Opening the audit of tool calls for each kind of process: a server's, a local
//! process's (stdio, the command line) and one CLI command's, opened at its first record.

use std::sync::Arc;

use crate::config::Config;

/// Why the audit could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum AuditOpenError {
    /// The database of the PostgreSQL sink cannot be reached.
    #[error("audit: {0}")]
    Database(#[from] crate::db::DbError),
    /// The sink cannot be started (an unwritable location, an unreadable HMAC key, …).
    #[error("audit: {0}")]
    Sink(#[from] crate::audit::AuditError),
}

/// Opens the audit of a server's tool calls from `audit:` (and `database:` for the
/// PostgreSQL sink); an unwritable location or an unreachable database stops the start.
pub async fn open_audit(
    config: &Config,
    announce: bool,
) -> Result<Option<crate::audit::Auditor>, AuditOpenError> {
    let pool = crate::db::shared_pool(config)?;
    open_audit_on(config, pool, announce).await
}

/// [`open_audit`] over `pool`, the process's shared pool.
pub(super) async fn open_audit_on(
    config: &Config,
    pool: Option<crate::db::PgPool>,
    announce: bool,
) -> Result<Option<crate::audit::Auditor>, AuditOpenError> {
    open_audit_scoped(config, pool, announce, crate::audit::open::Scope::Server).await
}

/// [`open_audit`] for a local process (`querygate stdio`, the command line): in files, a
/// stream of its own, as several may write one folder at once.
pub async fn open_local_audit(
    config: &Config,
    announce: bool,
) -> Result<Option<crate::audit::Auditor>, AuditOpenError> {
    let pool = crate::db::shared_pool(config)?;
    open_audit_scoped(config, pool, announce, crate::audit::open::Scope::Local).await
}

/// Opens the audit over `pool` (`None` when nothing is kept in PostgreSQL); the PostgreSQL
/// sink does not start while its database cannot be reached.
pub(super) async fn open_audit_scoped(
    config: &Config,
    pool: Option<crate::db::PgPool>,
    announce: bool,
    scope: crate::audit::open::Scope,
) -> Result<Option<crate::audit::Auditor>, AuditOpenError> {
    use crate::audit::SinkSettings;
    let needs_database =
        config.audit.enabled && matches!(config.audit.sink, SinkSettings::Postgres { .. });
    let pool = match pool {
        Some(pool) if needs_database => {
            crate::db::check_reachable(&pool, &config.database).await?;
            Some(pool)
        }
        _ => None,
    };
    let audit = crate::audit::open::open_scoped(&config.audit, pool, scope).await?;
    match &audit {
        _ if !announce => {}
        Some(auditor) => eprintln!(
            "querygate: audit records go to {} (failure_mode {})",
            auditor.sink().describe(),
            auditor.failure_mode().as_str()
        ),
        None => eprintln!("querygate: audit is off (audit.enabled: false)"),
    }
    Ok(audit)
}

/// The audit of one CLI command: its sink (and database connection) is opened at the
/// first record, so a command that writes none leaves no trace; failing to open it fails
/// that write, under `audit.failure_mode`.
pub fn open_audit_deferred(
    config: &Config,
) -> Result<Option<crate::audit::Auditor>, AuditOpenError> {
    use crate::audit::deferred::DeferredSink;
    use crate::audit::{AuditError, SinkSettings};
    if !config.audit.enabled {
        return Ok(None);
    }
    let settings = config.audit.clone();
    let database = config.database.clone();
    let kind = match settings.sink {
        SinkSettings::File { .. } => "file",
        SinkSettings::Postgres { .. } => "postgres",
        SinkSettings::Otlp => "otlp",
    };
    let opener = Box::new(move || {
        let settings = settings.clone();
        let database = database.clone();
        Box::pin(async move {
            let pool = match settings.sink {
                SinkSettings::Postgres { .. } => Some(
                    crate::db::connect(&database)
                        .await
                        .map_err(|err| AuditError::Unavailable(err.to_string()))?,
                ),
                SinkSettings::File { .. } | SinkSettings::Otlp => None,
            };
            crate::audit::open::start_sink(&settings, pool, crate::audit::open::Scope::Local).await
        }) as futures::future::BoxFuture<'static, _>
    });
    let sink = Arc::new(DeferredSink::new(kind, opener));
    Ok(Some(crate::audit::open::auditor_over(&config.audit, sink)?))
}

/// Writes the records still queued before the process ends.
pub async fn close_audit(audit: Option<crate::audit::Auditor>) {
    if let Some(auditor) = audit {
        auditor.sink().close().await;
    }
}
