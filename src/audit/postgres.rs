//! The PostgreSQL sink: records go to the append-only `audit_events` table
//! (`migrations/0002_audit_events.sql`). One writer task owns the stream's chain: callers
//! queue records and await a reply; the task inserts everything queued in one statement
//! (committed on return) and then answers them all, so concurrent calls share a commit.
//!
//! Each statement also advances the stream's row in `audit_heads` (migration `0009`, through
//! `audit_append_head`, which moves a head only from the seq before the batch), MACed under the audit key when there
//! is one, in the same transaction as the rows: `audit verify --database` then sees rows
//! removed from a stream's end, and rows forged by a role without the key.
//!
//! Every process writes a stream of its own (a server its `audit.replica`, a local process
//! `<replica>.<pid>-<unix ms>`, see `open`), yet two writers of one stream (two servers
//! given the same `audit.replica`, a replica's old and new process overlapping) must not fail
//! calls: when an insert loses the race for its seqs (another writer
//! committed them first, and nothing of the batch was written; the table is partitioned by
//! time, so the head, not a unique index, refuses them), the task re-reads the head
//! and inserts the batch again after it, with the next seqs. The callers never see the lost
//! race.
//!
//! After any other failure the task re-reads the stream's head from the database before the
//! next batch (a failed or timed-out insert may still have committed), so the chain stays
//! linear and a database that comes back is used again without a restart.

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
use super::partitions::DailyEnsure;
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
     SELECT audit_append_head($1, $12, $8, $9, $10, $11) FROM (SELECT count(*) FROM inserted) AS n";

impl PgSink {
    /// Starts the sink on `pool`: reads where the stream's chain left off (so a database
    /// that is unreachable, or lacks the schema, fails the start) and starts the writer.
    pub async fn start(pool: PgPool, config: PgSinkConfig) -> Result<PgSink, AuditError> {
        let head = read_head(&pool, &config.stream, config.write_timeout).await?;
        ensure_partitions(&pool, config.write_timeout).await?;
        let mut daily = DailyEnsure::default();
        daily.done();
        let (jobs, receiver) = mpsc::unbounded_channel();
        let (stopped_tx, stopped) = oneshot::channel();
        let stream = config.stream.clone();
        let writer = Writer {
            pool,
            config,
            head: Some(head),
            daily,
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
    /// When today's and tomorrow's partitions were last made.
    daily: DailyEnsure,
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
        if self.daily.due() {
            // A record whose day has no partition still lands (in the DEFAULT one).
            match ensure_partitions(&self.pool, self.config.write_timeout).await {
                Ok(()) => self.daily.done(),
                Err(err) => tracing::warn!("{err}"),
            }
        }
        let mut jobs = batch;
        let mut attempt = 1;
        loop {
            let head = match self.head.clone() {
                Some(head) => head,
                None => {
                    match read_head(&self.pool, &self.config.stream, self.config.write_timeout)
                        .await
                    {
                        Ok(head) => head,
                        Err(err) => {
                            fail_all(jobs, &err);
                            return;
                        }
                    }
                }
            };
            match self.insert(head, jobs).await {
                Attempt::Empty => return,
                Attempt::Committed(linked) => {
                    self.head = Some(linked.acknowledge());
                    return;
                }
                Attempt::Refused(linked, Insert::SeqTaken(err)) if attempt < MAX_ATTEMPTS => {
                    // Another writer of the stream committed the seqs first: nothing of the
                    // batch was written. Link it again after the stream's new head.
                    tracing::debug!(
                        "audit stream {}: another writer took the batch's seqs (attempt {attempt}): {err}",
                        self.config.stream
                    );
                    attempt += 1;
                    self.head = None;
                    jobs = linked.unlink();
                }
                Attempt::Refused(linked, Insert::SeqTaken(err) | Insert::Failed(err)) => {
                    tracing::error!("{err}");
                    self.head = None;
                    linked.fail(&err);
                    return;
                }
            }
        }
    }

    /// Links `jobs` after `head` and inserts them in one statement.
    async fn insert(&self, head: ChainHead, jobs: Vec<Job>) -> Attempt {
        let mut columns = Columns::default();
        let key = self.config.mac_key.as_ref();
        let linked = LinkedBatch::link(&self.config.stream, head, key, jobs, |linked, record| {
            columns.seq.push(linked.seq as i64);
            columns.at.push(record.timestamp.clone());
            columns.prev_hash.push(linked.prev_hash);
            columns.hash.push(linked.hash);
            columns.record.push(linked.canonical);
            columns.mac.push(linked.mac);
        });
        if linked.is_empty() {
            return Attempt::Empty;
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
            .bind(columns.seq.first().copied().unwrap_or(1))
            .execute(&self.pool);
        let failed = match tokio::time::timeout(self.config.write_timeout, insert).await {
            Ok(Ok(_)) => return Attempt::Committed(linked),
            Ok(Err(err)) => {
                let taken = is_unique_violation(&err);
                let err =
                    AuditError::Unavailable(format!("cannot insert into audit_events: {err}"));
                if taken {
                    Insert::SeqTaken(err)
                } else {
                    Insert::Failed(err)
                }
            }
            Err(_) => Insert::Failed(AuditError::Unavailable(format!(
                "inserting into audit_events took longer than {}",
                humantime::format_duration(self.config.write_timeout)
            ))),
        };
        Attempt::Refused(linked, failed)
    }
}

/// What one insert of a batch came to; the batch's callers are not answered yet.
enum Attempt {
    /// No record of the batch could be linked (each was answered already).
    Empty,
    /// Committed.
    Committed(LinkedBatch),
    /// Nothing of it was written (or, timed out, may have been), and why.
    Refused(LinkedBatch, Insert),
}

/// Why an insert wrote nothing.
enum Insert {
    /// A row of the stream already holds one of the batch's seqs: another writer of the
    /// stream committed first (the unique `(stream, seq)` refused the batch as a whole).
    SeqTaken(AuditError),
    /// Anything else (the database unreachable, the write timed out, …).
    Failed(AuditError),
}

/// How many times a batch is linked and inserted while other writers of its stream keep
/// taking its seqs. Each lost race means another writer committed, so the stream moves on;
/// only many writers hammering one stream (which no configuration makes: every process has
/// a stream of its own) could exhaust it.
const MAX_ATTEMPTS: usize = 64;

/// Whether `err` is PostgreSQL's `unique_violation` (SQLSTATE 23505): on `audit_events`, the
/// `(stream, seq)` another writer took.
fn is_unique_violation(err: &sqlx_core::Error) -> bool {
    err.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|code| code == "23505")
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

/// Makes today's and tomorrow's partitions of `audit_events` (UTC) when missing.
async fn ensure_partitions(pool: &PgPool, timeout: Duration) -> Result<(), AuditError> {
    match tokio::time::timeout(timeout, super::partitions::ensure_partitions(pool, 2)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(AuditError::Unavailable(format!(
            "cannot create the partitions of audit_events (is `querygate migrate` applied?): {err}"
        ))),
        Err(_) => Err(AuditError::Unavailable(format!(
            "creating the partitions of audit_events took longer than {}",
            humantime::format_duration(timeout)
        ))),
    }
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
