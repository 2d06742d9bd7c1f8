//! The PostgreSQL database that shared state lives in (audit events, approvals, quota
//! windows): the connection pool built from the `database:` settings (one per process,
//! [`shared_pool`]), and the schema migrations embedded
//! from `migrations/` (applied by `querygate migrate`, or at start-up with
//! `database.migrate_on_start`).
//!
//! Queries are built at run time (`query(..).bind(..)`); nothing here needs a database to
//! compile. The connection URL may hold a password: no error or log line repeats it.

use std::borrow::Cow;
use std::str::FromStr as _;
use std::sync::LazyLock;
use std::time::Duration;

use sqlx_core::migrate::{Migration, MigrationType, Migrator};
use sqlx_core::query::query;
use sqlx_core::query_scalar::query_scalar;
use sqlx_postgres::{PgConnectOptions, PgPoolOptions, Postgres};

pub use sqlx_postgres::PgPool;

use crate::config::{DatabaseConfig, DatabaseUrl, SecretUrl, check_database_url};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
}

/// The schema migrations of `migrations/`, embedded at build time, in version order.
/// Each file is `<version>_<description>.sql` and runs in its own transaction.
pub static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    // The fields are what `sqlx::migrate!` fills in; built here from the build script's
    // list so that no compile-time database macros are needed.
    Migrator {
        migrations: Cow::Owned(embedded_migrations()),
        ignore_missing: false,
        locking: true,
        no_tx: false,
    }
});

fn embedded_migrations() -> Vec<Migration> {
    embedded::FILES
        .iter()
        .filter_map(|(name, sql)| {
            let stem = name.strip_suffix(".sql")?;
            let (version, description) = stem.split_once('_').unwrap_or((stem, ""));
            let version = version.parse::<i64>().ok()?;
            Some(Migration::new(
                version,
                Cow::Owned(description.replace('_', " ")),
                MigrationType::Simple,
                Cow::Borrowed(*sql),
                false,
            ))
        })
        .collect()
}

/// Why the database could not be reached or prepared.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// Neither `database.url` nor `database.url_file` is set.
    #[error("no database is configured (set database.url or database.url_file)")]
    NotConfigured,
    /// `database.url_file` could not be read.
    #[error("cannot read database.url_file '{path}': {source}")]
    UrlFile {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The URL (inline or from the file) is not a PostgreSQL URL.
    #[error("the database URL {0}")]
    BadUrl(&'static str),
    /// No connection could be made (the text never holds the password).
    #[error("cannot connect to the database: {0}")]
    Connect(String),
    /// A query failed (the text never holds the password).
    #[error("database error: {0}")]
    Query(String),
    /// Applying migrations failed.
    #[error("database migration failed: {0}")]
    Migrate(String),
}

/// Reads the configured URL: inline, or the first line of `database.url_file` (read at
/// each call, so a rotated secret is picked up by the next connect).
pub fn resolve_url(config: &DatabaseConfig) -> Result<SecretUrl, DbError> {
    let url = match &config.url {
        None => return Err(DbError::NotConfigured),
        Some(DatabaseUrl::Inline(url)) => url.clone(),
        Some(DatabaseUrl::File(path)) => {
            let text = std::fs::read_to_string(path).map_err(|source| DbError::UrlFile {
                path: path.clone(),
                source,
            })?;
            SecretUrl::new(text.lines().next().unwrap_or_default().trim())
        }
    };
    check_database_url(url.expose()).map_err(DbError::BadUrl)?;
    Ok(url)
}

/// Connects a pool to the configured database; fails when no connection can be made
/// within `database.connect_timeout`.
pub async fn connect(config: &DatabaseConfig) -> Result<PgPool, DbError> {
    let url = resolve_url(config)?;
    connect_url(&url, config.max_connections, config.connect_timeout).await
}

/// Connects a pool to `url` with at most `max_connections` connections.
pub async fn connect_url(
    url: &SecretUrl,
    max_connections: u32,
    connect_timeout: Duration,
) -> Result<PgPool, DbError> {
    let options = PgConnectOptions::from_str(url.expose())
        .map_err(|err| DbError::Connect(redact(&err.to_string(), url)))?
        .application_name("querygate");
    PgPoolOptions::new()
        .max_connections(max_connections.max(1))
        .acquire_timeout(connect_timeout)
        .connect_with(options)
        .await
        .map_err(|err| DbError::Connect(redact(&err.to_string(), url)))
}

/// A pool for the configured database that connects on first use, so a server can start
/// while the database is down and use it once it is back.
pub fn connect_lazy(config: &DatabaseConfig) -> Result<PgPool, DbError> {
    let url = resolve_url(config)?;
    let options = PgConnectOptions::from_str(url.expose())
        .map_err(|err| DbError::Connect(redact(&err.to_string(), &url)))?
        .application_name("querygate");
    Ok(PgPoolOptions::new()
        .max_connections(config.max_connections.max(1))
        .acquire_timeout(config.connect_timeout)
        .connect_lazy_with(options))
}

/// The one pool of a process for everything `config` keeps in PostgreSQL (the audit sink,
/// the approval store and pending approvals, the quota windows, and `/readyz`'s check of
/// them), connecting on first use; `None` when nothing is kept there.
pub fn shared_pool(config: &crate::config::Config) -> Result<Option<PgPool>, DbError> {
    use crate::config::{ApprovalStoreKind, QuotaStoreKind};
    let audit = config.audit.enabled
        && matches!(
            config.audit.sink,
            crate::audit::SinkSettings::Postgres { .. }
        );
    let wanted = audit
        || config.approval.store == ApprovalStoreKind::Postgres
        || config.quotas.store == QuotaStoreKind::Postgres;
    if wanted {
        connect_lazy(&config.database).map(Some)
    } else {
        Ok(None)
    }
}

/// Waits for one connection of `pool` (bounded by `database.connect_timeout`), for what
/// must not start without the database (the PostgreSQL audit sink).
pub async fn check_reachable(pool: &PgPool, config: &DatabaseConfig) -> Result<(), DbError> {
    let url = resolve_url(config)?;
    pool.acquire()
        .await
        .map(drop)
        .map_err(|err| DbError::Connect(redact(&err.to_string(), &url)))
}

/// Applies the pending migrations; returns the ones applied now, as
/// `<version> <description>`, in order.
pub async fn migrate(pool: &PgPool) -> Result<Vec<String>, DbError> {
    let before = applied_versions(pool).await?;
    MIGRATOR
        .run(pool)
        .await
        .map_err(|err| DbError::Migrate(err.to_string()))?;
    Ok(MIGRATOR
        .iter()
        .filter(|m| !before.contains(&m.version))
        .map(|m| format!("{:04} {}", m.version, m.description))
        .collect())
}

/// For `serve` and `stdio`: applies pending migrations when `database.migrate_on_start`
/// is set (and does nothing otherwise).
pub async fn migrate_on_start(config: &DatabaseConfig) -> Result<(), DbError> {
    if !config.migrate_on_start {
        return Ok(());
    }
    let pool = connect(config).await?;
    let outcome = migrate(&pool).await;
    pool.close().await;
    for name in outcome? {
        tracing::info!("applied migration {name}");
    }
    Ok(())
}

/// The versions recorded as applied (none when the migrations table does not exist yet).
pub async fn applied_versions(pool: &PgPool) -> Result<Vec<i64>, DbError> {
    let exists: bool =
        query_scalar::<Postgres, bool>("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
            .fetch_one(pool)
            .await
            .map_err(|err| DbError::Query(err.to_string()))?;
    if !exists {
        return Ok(Vec::new());
    }
    query_scalar::<Postgres, i64>(
        "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
    )
    .fetch_all(pool)
    .await
    .map_err(|err| DbError::Query(err.to_string()))
}

/// Checks that the database answers (for readiness checks).
pub async fn ping(pool: &PgPool) -> Result<(), DbError> {
    query::<Postgres>("SELECT 1")
        .execute(pool)
        .await
        .map(|_| ())
        .map_err(|err| DbError::Query(err.to_string()))
}

/// `text` with the URL's password (and the whole URL) replaced, for messages that quote
/// what the driver said.
pub fn redact(text: &str, url: &SecretUrl) -> String {
    let mut out = text.replace(url.expose(), "<database URL>");
    if let Ok(parsed) = url::Url::parse(url.expose())
        && let Some(password) = parsed.password()
        && !password.is_empty()
    {
        out = out.replace(password, "<redacted>");
        if let Ok(decoded) = percent_encoding::percent_decode_str(password).decode_utf8()
            && !decoded.is_empty()
        {
            out = out.replace(decoded.as_ref(), "<redacted>");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_embedded_in_version_order() {
        let versions: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
        let mut sorted = versions.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(versions, sorted, "versions must be unique and ordered");
        assert_eq!(versions.len(), embedded::FILES.len(), "every file parsed");
    }

    #[test]
    fn redact_hides_the_password_in_any_form() {
        let url = SecretUrl::new("postgres://svc:p%40ss@db:5432/qg");
        let text = "failed for postgres://svc:p%40ss@db:5432/qg with p@ss and p%40ss";
        let out = redact(text, &url);
        assert!(!out.contains("p@ss") && !out.contains("p%40ss"), "{out}");
    }

    #[test]
    fn a_missing_url_file_is_named() {
        let config = DatabaseConfig {
            url: Some(DatabaseUrl::File("/nonexistent/querygate-db-url".into())),
            ..DatabaseConfig::default()
        };
        let err = resolve_url(&config).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/querygate-db-url"), "{err}");
    }
}
