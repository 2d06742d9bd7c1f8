//! Builds the [`Auditor`] from the settings: the chosen sink (started, so an unwritable
//! location or an unreachable database fails the start), the failure mode, the HMAC key.

use std::sync::Arc;

use sqlx_postgres::PgPool;

use super::anchor::MacKey;
use super::auditor::Auditor;
use super::file::{FileSink, FileSinkConfig};
use super::otel::exporter::Exporter;
use super::otel::sinks::{CopySink, OtlpSink};
use super::postgres::{PgSink, PgSinkConfig};
use super::redact::{HmacKey, MIN_KEY_BYTES};
use super::settings::{AuditSettings, SinkSettings};
use super::sink::{AuditError, AuditSink};

/// Whose records a process writes: a server's, chained in the replica's stream across its
/// restarts, or a local session's (`querygate stdio`, the command line), of which several
/// may run at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `querygate serve`: the stream is `audit.replica`.
    Server,
    /// A local process: a stream of its own, `<replica>.<pid>-<unix ms>`, in files and in
    /// PostgreSQL alike, so two sessions writing one file at once keep two linear chains,
    /// and a command run beside a server with its configuration (`kubectl exec … querygate
    /// query`, `querygate approvals approve`) never writes into the server's stream.
    Local,
}

/// The stream of a local process.
fn local_stream(replica: &str) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    format!("{replica}.{}-{millis}", std::process::id())
}

/// Opens the audit of a server ([`Scope::Server`]): `Ok(None)` when `audit.enabled` is
/// false. The PostgreSQL sink needs `pool` (from the `database:` settings).
pub async fn open(
    settings: &AuditSettings,
    pool: Option<PgPool>,
) -> Result<Option<Auditor>, AuditError> {
    open_scoped(settings, pool, Scope::Server).await
}

/// [`open`] for `scope`.
pub async fn open_scoped(
    settings: &AuditSettings,
    pool: Option<PgPool>,
    scope: Scope,
) -> Result<Option<Auditor>, AuditError> {
    if !settings.enabled {
        return Ok(None);
    }
    let sink = start_sink(settings, pool, scope).await?;
    auditor_over(settings, sink).map(Some)
}

/// Starts the sink `settings` choose for `scope` (the PostgreSQL sink needs `pool`), with
/// its OTLP copy when `audit.otlp` is set.
pub async fn start_sink(
    settings: &AuditSettings,
    pool: Option<PgPool>,
    scope: Scope,
) -> Result<Arc<dyn AuditSink>, AuditError> {
    let stream = match (scope, &settings.sink) {
        // Nothing durable to continue: every start is a stream of its own.
        (_, SinkSettings::Otlp) | (Scope::Local, _) => local_stream(&settings.replica),
        (Scope::Server, _) => settings.replica.clone(),
    };
    let durable: Arc<dyn AuditSink> = match &settings.sink {
        SinkSettings::File {
            location,
            max_size,
            max_files,
            max_age,
        } => {
            let config = FileSinkConfig {
                location: location.clone(),
                stream: stream.clone(),
                max_size: *max_size,
                max_files: *max_files,
                max_age: *max_age,
                mac_key: mac_key(settings)?,
                format: settings.format,
            };
            let sink = tokio::task::spawn_blocking(move || match scope {
                Scope::Server => FileSink::start(config),
                Scope::Local => FileSink::start_fresh(config),
            })
            .await
            .map_err(|err| AuditError::Unavailable(err.to_string()))??;
            Arc::new(sink)
        }
        SinkSettings::Postgres {
            max_batch,
            write_timeout,
            ..
        } => {
            let pool = pool.ok_or_else(|| {
                AuditError::Unavailable(
                    "audit.sink is postgres but no database is configured (database.url)"
                        .to_owned(),
                )
            })?;
            let config = PgSinkConfig {
                stream: stream.clone(),
                max_batch: *max_batch,
                write_timeout: *write_timeout,
                mac_key: mac_key(settings)?,
            };
            Arc::new(PgSink::start(pool, config).await?)
        }
        SinkSettings::Otlp => {
            let otlp = settings.otlp.as_ref().ok_or_else(|| {
                AuditError::Unavailable("audit.sink is otlp but audit.otlp is not set".to_owned())
            })?;
            let exporter = Exporter::start(otlp)?;
            return Ok(Arc::new(OtlpSink::new(
                exporter,
                &stream,
                mac_key(settings)?,
            )));
        }
    };
    Ok(match &settings.otlp {
        Some(otlp) => Arc::new(CopySink::new(durable, Exporter::start(otlp)?, &stream)),
        None => durable,
    })
}

/// The auditor of `settings` over a started (or [deferred](super::deferred)) `sink`.
pub fn auditor_over(
    settings: &AuditSettings,
    sink: Arc<dyn AuditSink>,
) -> Result<Auditor, AuditError> {
    let hmac = if settings.hmac_sql_literals {
        Some(hmac_key(settings)?)
    } else {
        None
    };
    Ok(Auditor::new(
        sink,
        settings.failure_mode,
        settings.replica.clone(),
        hmac,
    ))
}

/// The audit key of `audit.mac_key_file`, when set (an unreadable or short file fails the
/// start).
pub fn mac_key(settings: &AuditSettings) -> Result<Option<MacKey>, AuditError> {
    settings
        .mac_key_file
        .as_deref()
        .map(MacKey::load)
        .transpose()
        .map_err(|err| AuditError::Unavailable(err.to_string()))
}

fn hmac_key(settings: &AuditSettings) -> Result<HmacKey, AuditError> {
    match &settings.hmac_key_file {
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|err| {
                AuditError::Unavailable(format!(
                    "cannot read audit.hmac_key_file '{}': {err}",
                    path.display()
                ))
            })?;
            HmacKey::new(bytes).ok_or_else(|| {
                AuditError::Unavailable(format!(
                    "audit.hmac_key_file '{}' must hold at least {MIN_KEY_BYTES} bytes",
                    path.display()
                ))
            })
        }
        None => {
            tracing::warn!(
                "audit.hmac_sql_literals without audit.hmac_key_file: a random key for this process (HMACs of different processes do not match)"
            );
            HmacKey::random().map_err(|err| {
                AuditError::Unavailable(format!("cannot make a random HMAC key: {err}"))
            })
        }
    }
}
