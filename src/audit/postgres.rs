//! The PostgreSQL sink: records go to the append-only `audit_events` table
//! (`migrations/0002_audit_events.sql`). One writer task owns the stream's chain: callers
//! queue records and await a reply; the task inserts everything queued in one statement
//! (committed on return) and then answers them all, so concurrent calls share a commit.
//!
//! Each statement also advances the stream's row in `audit_heads` (migration `0004`, through
//! `audit_advance_head`, which never moves a head back), MACed under the audit key when there
//! is one, in the same transaction as the rows: `audit verify --database` then sees rows
//! removed from a stream's end, and rows forged by a role without the key.
//!
//! After any failure the task re-reads the stream's head from the database before the next
//! batch (a failed or timed-out insert may still have committed), so the chain stays linear
//! and a database that comes back is used again without a restart.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sqlx_core::query::query;
use sqlx_core::query_as::query_as;
use sqlx_postgres::{PgPool, Postgres};
use tokio::sync::{mpsc, oneshot};

use super::anchor::MacKey;
use super::batch::{LinkedBatch, fail_all};
use super::chain::ChainHead;
use super::group::{Gather, GroupCommit};
use super::head::Head;
use super::queue::{Job, WriterQueue};
use super::record::AuditRecord;
use super::sink::{AuditError, AuditSink, Receipt};

/// How the PostgreSQL sink batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgSinkConfig {
    /// The stream (replica) the records are chained in.
    pub stream: String,
    /// The most records one INSERT carries.
    pub max_batch: usize,
    /// How long one INSERT (connection wait included) may take before its callers get an
    /// error.
    pub write_timeout: Duration,
    /// The audit key: every record and head is MACed under it (`None`: unanchored).
    pub mac_key: Option<MacKey>,
}

/// The PostgreSQL sink.
pub struct PgSink {
    queue: WriterQueue<mpsc::UnboundedSender<Job>>,
    stream: String,
}

impl std::fmt::Debug for PgSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSink")
            .field("stream", &self.stream)
            .finish()
    }
}

const INSERT: &str = "WITH inserted AS (\
       INSERT INTO audit_events (stream, seq, at, record, doc, prev_hash, hash, mac) \
       SELECT $1, t.seq, t.at::timestamptz, t.record, t.record::jsonb, t.prev_hash, t.hash, t.mac \
       FROM UNNEST($2::int8[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[]) \
       AS t(seq, at, record, prev_hash, hash, mac) RETURNING 1) \
     SELECT audit_advance_head($1, $8, $9, $10, $11) FROM (SELECT count(*) FROM inserted) AS n";

impl PgSink {
    /// Starts the sink on `pool`: reads where the stream's chain left off (so a database
    /// that is unreachable, or lacks the schema, fails the start) and starts the writer.
    pub async fn start(pool: PgPool, config: PgSinkConfig) -> Result<PgSink, AuditError> {
        let head = read_head(&pool, &config.stream, config.write_timeout).await?;
        let (jobs, receiver) = mpsc::unbounded_channel();
        let (stopped_tx, stopped) = oneshot::channel();
        let stream = config.stream.clone();
        let writer = Writer {
            pool,
            config,
            head: Some(head),
        };
        tokio::spawn(async move {
            writer.run(receiver).await;
            let _ = stopped_tx.send(());
        });
        Ok(PgSink {
            queue: WriterQueue::new(jobs, stopped),
            stream,
        })
    }
}

impl AuditSink for PgSink {
    fn write(&self, record: AuditRecord) -> BoxFuture<'_, Result<Receipt, AuditError>> {
        self.queue.write(record)
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        self.queue.close()
    }

    fn describe(&self) -> String {
        format!("postgres (stream {})", self.stream)
    }

    fn kind(&self) -> &'static str {
        "postgres"
    }
}

struct Writer {
    pool: PgPool,
    config: PgSinkConfig,
    /// `None`: unknown after a failure; read again before the next batch.
    head: Option<ChainHead>,
}

/// Lets the callers the last commits released send their next record, until `batch` holds
/// the plan's target, none arrived for its quiet time, or its window has passed.
/// Yields rather than sleeps: the runtime's timers are too coarse for microseconds.
async fn gather(receiver: &mut mpsc::UnboundedReceiver<Job>, batch: &mut Vec<Job>, plan: Gather) {
    let started = Instant::now();
    let mut last_arrival = started;
    while batch.len() < plan.target && started.elapsed() < plan.window {
        tokio::task::yield_now().await;
        let before = batch.len();
        while batch.len() < plan.target {
            match receiver.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if batch.len() > before {
            last_arrival = Instant::now();
        } else if last_arrival.elapsed() >= plan.quiet {
            break;
        }
    }
}

impl Writer {
    async fn run(mut self, mut receiver: mpsc::UnboundedReceiver<Job>) {
        let max_batch = self.config.max_batch.max(1);
        let mut group = GroupCommit::default();
        let mut batch = Vec::with_capacity(max_batch);
        while receiver.recv_many(&mut batch, max_batch).await > 0 {
            if let Some(plan) = group.plan(max_batch) {
                gather(&mut receiver, &mut batch, plan).await;
            }
            group.observe(batch.len());
            let jobs = std::mem::take(&mut batch);
            let started = Instant::now();
            self.write_batch(jobs).await;
            group.committed(started.elapsed());
        }
    }

    async fn write_batch(&mut self, batch: Vec<Job>) {
        let head = match self.head.clone() {
            Some(head) => head,
            None => {
                match read_head(&self.pool, &self.config.stream, self.config.write_timeout).await {
                    Ok(head) => head,
                    Err(err) => {
                        fail_all(batch, &err);
                        return;
                    }
                }
            }
        };
        let mut columns = Columns::default();
        let key = self.config.mac_key.as_ref();
        let linked = LinkedBatch::link(&self.config.stream, head, key, batch, |linked, record| {
            columns.seq.push(linked.seq as i64);
            columns.at.push(record.timestamp.clone());
            columns.prev_hash.push(linked.prev_hash);
            columns.hash.push(linked.hash);
            columns.record.push(linked.canonical);
            columns.mac.push(linked.mac);
        });
        if linked.is_empty() {
            return;
        }
        let head = Head::new(&self.config.stream, linked.head(), key);
        let insert = query::<Postgres>(INSERT)
            .bind(&self.config.stream)
            .bind(&columns.seq)
            .bind(&columns.at)
            .bind(&columns.record)
            .bind(&columns.prev_hash)
            .bind(&columns.hash)
            .bind(&columns.mac)
            .bind(i64::try_from(head.seq).unwrap_or(i64::MAX))
            .bind(&head.hash)
            .bind(&head.at)
            .bind(&head.mac)
            .execute(&self.pool);
        let result = match tokio::time::timeout(self.config.write_timeout, insert).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(err)) => Err(AuditError::Unavailable(format!(
                "cannot insert into audit_events: {err}"
            ))),
            Err(_) => Err(AuditError::Unavailable(format!(
                "inserting into audit_events took longer than {}",
                humantime::format_duration(self.config.write_timeout)
            ))),
        };
        match result {
            Ok(()) => self.head = Some(linked.acknowledge()),
            Err(err) => {
                tracing::error!("{err}");
                self.head = None;
                linked.fail(&err);
            }
        }
    }
}

#[derive(Default)]
struct Columns {
    seq: Vec<i64>,
    at: Vec<String>,
    record: Vec<String>,
    prev_hash: Vec<String>,
    hash: Vec<String>,
    mac: Vec<Option<String>>,
}

/// The stream's last record, through `audit_stream_head` (the writer role may not read the
/// table itself).
pub async fn read_head(
    pool: &PgPool,
    stream: &str,
    timeout: Duration,
) -> Result<ChainHead, AuditError> {
    let read = query_as::<Postgres, (i64, String)>("SELECT seq, hash FROM audit_stream_head($1)")
        .bind(stream)
        .fetch_optional(pool);
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(Some((seq, hash)))) => Ok(ChainHead {
            seq: u64::try_from(seq).unwrap_or(0),
            hash,
        }),
        Ok(Ok(None)) => Ok(ChainHead::genesis()),
        Ok(Err(err)) => Err(AuditError::Unavailable(format!(
            "cannot read the audit stream's head: {err}"
        ))),
        Err(_) => Err(AuditError::Unavailable(format!(
            "reading the audit stream's head took longer than {}",
            humantime::format_duration(timeout)
        ))),
    }
}
