//! The partitions of `audit_events` (`migrations/0009_audit_partitions.sql`): one per UTC
//! day of the calls' start (`at`), made ahead by the writer (today and tomorrow, at start
//! and when the day changes) and by `querygate audit maintain` (`audit.postgres.
//! partitions_ahead` days), and removed by retention (`audit.postgres.retention`).
//!
//! Retention removes (drops or detaches) each daily partition whose whole day is older than
//! `keep`, and in the same transaction records in `audit_retention_cuts`, per stream, what
//! went: the first and last seq, how many records, the hash of the last one, MACed under the
//! audit key. `audit verify --database` starts each stream from its cuts, so a retention cut
//! is told from a deletion. Several processes may maintain at once: an advisory lock
//! serialises them, and a partition another one removed is skipped.

use std::time::Duration;

use sqlx_core::query::query;
use sqlx_core::query_as::query_as;
use sqlx_core::query_scalar::query_scalar;
use sqlx_postgres::{PgPool, Postgres};

use super::anchor::MacKey;

/// The advisory lock that serialises partition changes (the migration's functions take the
/// same one).
const LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('querygate.audit_events.partitions'))";

/// What retention does with a partition older than `keep`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetentionAction {
    /// `DROP TABLE`: its records are gone.
    Drop,
    /// `DETACH PARTITION`: it stays as a table of its own (to archive, then drop by hand);
    /// auditors' views and `verify` no longer see it.
    Detach,
}

impl RetentionAction {
    /// The word stored in `audit_retention_cuts.action`.
    pub fn as_str(self) -> &'static str {
        match self {
            RetentionAction::Drop => "drop",
            RetentionAction::Detach => "detach",
        }
    }
}

/// `audit.postgres.retention`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Partitions whose day ended more than this long ago are removed.
    pub keep: Duration,
    /// Dropped or detached.
    pub action: RetentionAction,
}

/// Why maintenance failed.
#[derive(Debug, thiserror::Error)]
pub enum MaintainError {
    /// A statement failed (the partition being removed, if any, is left as it was).
    #[error("audit maintenance: {context}: {source}")]
    Database {
        /// What was being done.
        context: String,
        /// The database's error.
        source: sqlx_core::Error,
    },
    /// `keep` does not fit PostgreSQL's interval.
    #[error("audit.postgres.retention.keep is too long")]
    KeepTooLong,
}

impl MaintainError {
    /// A stable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            MaintainError::Database { .. } => "audit.maintain_failed",
            MaintainError::KeepTooLong => "audit.retention_invalid",
        }
    }
}

fn db(context: impl Into<String>) -> impl FnOnce(sqlx_core::Error) -> MaintainError {
    let context = context.into();
    move |source| MaintainError::Database { context, source }
}

/// What one retention cut removed of one stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamCut {
    /// The partition.
    pub partition: String,
    /// The stream.
    pub stream: String,
    /// Its lowest seq in the partition.
    pub first_seq: i64,
    /// Its highest seq in the partition.
    pub last_seq: i64,
    /// How many of its records the partition held.
    pub records: i64,
}

/// What `maintain` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaintainReport {
    /// Partitions created.
    pub created: Vec<String>,
    /// Partitions removed, each with what it held per stream.
    pub removed: Vec<(String, Vec<StreamCut>)>,
}

/// Creates the missing daily partitions from today (UTC, by the database's clock) for
/// `days` days; returns those it created.
pub async fn ensure_partitions(pool: &PgPool, days: u32) -> Result<Vec<String>, sqlx_core::Error> {
    query_scalar::<Postgres, String>(
        "SELECT audit_create_partitions((now() AT TIME ZONE 'UTC')::date, $1)",
    )
    .bind(i32::try_from(days).unwrap_or(i32::MAX))
    .fetch_all(pool)
    .await
}

/// `querygate audit maintain`: partitions `ahead` days ahead, then `retention` (when set),
/// each removed partition's cuts MACed under `key`.
pub async fn maintain(
    pool: &PgPool,
    ahead: u32,
    retention: Option<Retention>,
    key: Option<&MacKey>,
) -> Result<MaintainReport, MaintainError> {
    let mut report = MaintainReport {
        created: ensure_partitions(pool, ahead)
            .await
            .map_err(db("creating partitions"))?,
        ..Default::default()
    };
    let Some(retention) = retention else {
        return Ok(report);
    };
    let keep = i64::try_from(retention.keep.as_secs()).map_err(|_| MaintainError::KeepTooLong)?;
    for partition in expired(pool, keep).await? {
        if let Some(cuts) = remove(pool, &partition, keep, retention.action, key).await? {
            report.removed.push((partition, cuts));
        }
    }
    Ok(report)
}

/// The daily partitions whose day ended more than `keep` seconds ago, oldest first.
const EXPIRED: &str = "SELECT c.relname::text FROM pg_inherits i \
     JOIN pg_class c ON c.oid = i.inhrelid \
     WHERE i.inhparent = 'audit_events'::regclass \
       AND c.relname ~ '^audit_events_p[0-9]{8}$' \
       AND (to_date(substr(c.relname, 15), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' \
           <= now() - make_interval(secs => $1) \
       AND ($2::text IS NULL OR c.relname = $2) \
     ORDER BY 1";

async fn expired(pool: &PgPool, keep: i64) -> Result<Vec<String>, MaintainError> {
    query_scalar::<Postgres, String>(EXPIRED)
        .bind(keep as f64)
        .bind(None::<String>)
        .fetch_all(pool)
        .await
        .map_err(db("listing expired partitions"))
}

/// Removes one partition and records its cuts, in one transaction; `None` when another
/// process removed it first.
async fn remove(
    pool: &PgPool,
    partition: &str,
    keep: i64,
    action: RetentionAction,
    key: Option<&MacKey>,
) -> Result<Option<Vec<StreamCut>>, MaintainError> {
    let context = |what: &str| format!("{what} {partition}");
    let mut tx = pool
        .begin()
        .await
        .map_err(db(context("starting to remove")))?;
    query::<Postgres>(LOCK)
        .execute(&mut *tx)
        .await
        .map_err(db(context("locking")))?;
    let still = query_scalar::<Postgres, String>(EXPIRED)
        .bind(keep as f64)
        .bind(partition)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db(context("checking")))?;
    if still.is_none() {
        return Ok(None);
    }
    // The name matched `^audit_events_p[0-9]{8}$`: safe to quote as an identifier.
    let table = format!("\"{partition}\"");
    let streams = query_as::<Postgres, (String, i64, i64, i64, String)>(&format!(
        "SELECT s.stream, s.first_seq, s.last_seq, s.records, e.hash FROM \
           (SELECT stream, min(seq) AS first_seq, max(seq) AS last_seq, count(*) AS records \
            FROM {table} GROUP BY stream) s \
         JOIN LATERAL (SELECT hash FROM {table} x WHERE x.stream = s.stream \
                       AND x.seq = s.last_seq LIMIT 1) e ON true \
         ORDER BY s.stream"
    ))
    .fetch_all(&mut *tx)
    .await
    .map_err(db(context("reading the streams of")))?;
    let day = &partition["audit_events_p".len()..];
    let range_from = format!("{}-{}-{}T00:00:00Z", &day[..4], &day[4..6], &day[6..8]);
    let cut_at = super::record::timestamp_now();
    let mut cuts = Vec::with_capacity(streams.len());
    for (stream, first_seq, last_seq, records, last_hash) in streams {
        let fields = cut_fields(
            partition,
            action.as_str(),
            &stream,
            first_seq,
            last_seq,
            &last_hash,
            records,
            &cut_at,
        );
        let refs: Vec<&str> = fields.iter().map(String::as_str).collect();
        let mac = key.map(|key| key.cut_mac(&refs));
        query::<Postgres>(
            "INSERT INTO audit_retention_cuts (partition, range_from, range_to, action, stream, \
               first_seq, last_seq, last_hash, records, cut_at, mac) \
             VALUES ($1, $2::timestamptz, $2::timestamptz + interval '1 day', $3, $4, $5, $6, \
                     $7, $8, $9, $10)",
        )
        .bind(partition)
        .bind(&range_from)
        .bind(action.as_str())
        .bind(&stream)
        .bind(first_seq)
        .bind(last_seq)
        .bind(&last_hash)
        .bind(records)
        .bind(&cut_at)
        .bind(mac)
        .execute(&mut *tx)
        .await
        .map_err(db(context("recording the cut of")))?;
        cuts.push(StreamCut {
            partition: partition.to_owned(),
            stream,
            first_seq,
            last_seq,
            records,
        });
    }
    let statement = match action {
        RetentionAction::Drop => format!("DROP TABLE {table}"),
        RetentionAction::Detach => format!("ALTER TABLE audit_events DETACH PARTITION {table}"),
    };
    query::<Postgres>(&statement)
        .execute(&mut *tx)
        .await
        .map_err(db(context("removing")))?;
    tx.commit().await.map_err(db(context("committing")))?;
    Ok(Some(cuts))
}

/// The fields a cut's MAC covers, in order (verification rebuilds them from the row).
#[allow(clippy::too_many_arguments)]
pub fn cut_fields(
    partition: &str,
    action: &str,
    stream: &str,
    first_seq: i64,
    last_seq: i64,
    last_hash: &str,
    records: i64,
    cut_at: &str,
) -> Vec<String> {
    vec![
        partition.to_owned(),
        action.to_owned(),
        stream.to_owned(),
        first_seq.to_string(),
        last_seq.to_string(),
        last_hash.to_owned(),
        records.to_string(),
        cut_at.to_owned(),
    ]
}

/// When the database's UTC day last ensured differs from today's: for the writer, which
/// makes today's and tomorrow's partitions at start and once a day after.
#[derive(Debug, Default)]
pub struct DailyEnsure {
    last_day: Option<u64>,
}

impl DailyEnsure {
    /// Whether the partitions should be ensured now (the UTC day changed since the last
    /// success).
    pub fn due(&self) -> bool {
        self.last_day != Some(utc_day())
    }

    /// The partitions were ensured today.
    pub fn done(&mut self) {
        self.last_day = Some(utc_day());
    }
}

fn utc_day() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400)
}
