//! `audit_events` partitioned by day (migration 0009): an existing unpartitioned table is
//! converted without losing a record (its chains still verify, the views and the auditor
//! role still work, the writer continues its streams), and retention (`querygate audit
//! maintain`, the binary) removes an old partition and records the cut so that `verify
//! --database` passes, while a record deleted from a kept partition, a gap outside the cut,
//! or a forged cut is still a break.

use std::borrow::Cow;
use std::path::Path;
use std::time::{Duration, SystemTime};

use querygate::audit::anchor::MacKey;
use querygate::audit::chain::{self, ChainHead};
use querygate::audit::postgres::{PgSink, PgSinkConfig};
use querygate::audit::record::timestamp;
use querygate::audit::{AuditRecord, AuditSink};
use querygate::db::{self, PgPool};
use sqlx_core::migrate::Migrator;
use sqlx_core::query::query;
use sqlx_core::query_scalar::query_scalar;
use sqlx_postgres::Postgres;

use crate::audit_anchor::pg_record;
use crate::support::{pg, querygate_command};

const DAY: Duration = Duration::from_secs(86_400);

/// A key file and a configuration (`audit.sink: postgres`, the key, `extra` under
/// `audit.postgres`) in a new folder.
fn setup(extra: &str) -> (tempfile::TempDir, MacKey) {
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("audit.key");
    std::fs::write(&key_path, [42u8; 32]).unwrap();
    std::fs::write(
        dir.path().join("pg.yaml"),
        format!(
            "audit:\n  sink: postgres\n  mac_key_file: {}\n  postgres:\n    partitions_ahead: 3\n{extra}",
            key_path.display()
        ),
    )
    .unwrap();
    (dir, MacKey::load(&key_path).unwrap())
}

/// `querygate --config DIR/pg.yaml audit ARGS…` against `url`: exit 0, and the output.
async fn run(dir: &Path, url: &str, args: &[&str]) -> (bool, String) {
    let mut command = querygate_command();
    command
        .env("QUERYGATE_DATABASE__URL", url)
        .arg("--config")
        .arg(dir.join("pg.yaml"))
        .arg("audit")
        .args(args);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

fn record_at(call: &str, at: SystemTime) -> AuditRecord {
    AuditRecord {
        timestamp: timestamp(at),
        ..pg_record(call)
    }
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    query_scalar::<Postgres, i64>(sql)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn exec(pool: &PgPool, sql: &str) {
    query::<Postgres>(sql)
        .execute(pool)
        .await
        .unwrap_or_else(|err| panic!("{sql}: {err}"));
}

/// The writer as it was before migration 0009 (one INSERT advancing the head through
/// `audit_advance_head`), for a table made by migrations 0001..0008.
async fn write_before_0009(pool: &PgPool, stream: &str, records: &[AuditRecord], key: &MacKey) {
    let mut head = ChainHead::genesis();
    for record in records {
        let linked = chain::link(stream, &head, record, Some(key)).unwrap();
        head = linked.head();
        let at = querygate::audit::record::timestamp_now();
        query::<Postgres>(
            "WITH inserted AS (INSERT INTO audit_events (stream, seq, at, record, doc, prev_hash, hash, mac) \
             VALUES ($1, $2, $3::timestamptz, $4, $4::jsonb, $5, $6, $7) RETURNING 1) \
             SELECT audit_advance_head($1, $2, $6, $8, $9) FROM (SELECT count(*) FROM inserted) n",
        )
        .bind(stream)
        .bind(linked.seq as i64)
        .bind(&record.timestamp)
        .bind(&linked.canonical)
        .bind(&linked.prev_hash)
        .bind(&linked.hash)
        .bind(&linked.mac)
        .bind(&at)
        .bind(key.head_mac(stream, linked.seq, &linked.hash, &at))
        .execute(pool)
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn an_unpartitioned_table_with_records_is_partitioned_without_losing_one() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let (dir, key) = setup("");
    let pool = database.pool(4).await;
    let before = Migrator {
        migrations: Cow::Owned(
            db::MIGRATOR
                .migrations
                .iter()
                .filter(|m| m.version <= 8)
                .cloned()
                .collect(),
        ),
        ..Migrator::DEFAULT
    };
    before.run(&pool).await.unwrap();
    let now = SystemTime::now();
    // Two streams over three days, one record a day apart in the past.
    for stream in ["old1", "old2"] {
        let records: Vec<AuditRecord> = (0..6)
            .map(|i| record_at(&format!("{stream}-{i}"), now - DAY * (i % 3)))
            .collect();
        write_before_0009(&pool, stream, &records, &key).await;
    }
    let (ok, out) = run(dir.path(), &database.url, &["verify", "--database"]).await;
    assert!(ok && out.contains("ok: 12 records in 2 streams"), "{out}");

    db::migrate(&pool).await.unwrap();
    assert_eq!(count(&pool, "SELECT count(*) FROM audit_events").await, 12);
    let kind: String =
        query_scalar("SELECT relkind::text FROM pg_class WHERE relname = 'audit_events'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(kind, "p", "audit_events is partitioned");
    // Every record is in a daily partition (none fell to DEFAULT), three days of them.
    assert_eq!(
        count(&pool, "SELECT count(*) FROM audit_events_default").await,
        0
    );
    assert_eq!(
        count(&pool, "SELECT count(DISTINCT tableoid) FROM audit_events").await,
        3
    );
    let (ok, out) = run(dir.path(), &database.url, &["verify", "--database"]).await;
    assert!(ok && out.contains("ok: 12 records in 2 streams"), "{out}");

    // The auditor role still reads its views, not the table.
    let mut conn = pool.acquire().await.unwrap();
    query::<Postgres>("SET ROLE querygate_auditor")
        .execute(&mut *conn)
        .await
        .unwrap();
    let calls: i64 = query_scalar("SELECT count(*) FROM audit_calls")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(calls, 12);
    let records: i64 = query_scalar("SELECT count(*) FROM audit_records")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(records, 12);
    assert!(
        query::<Postgres>("SELECT 1 FROM audit_events")
            .execute(&mut *conn)
            .await
            .is_err(),
        "the auditor may not read the table"
    );
    query::<Postgres>("RESET ROLE")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);

    // The writer continues a converted stream after its head.
    let sink = PgSink::start(
        pool.clone(),
        PgSinkConfig {
            stream: "old1".into(),
            max_batch: 16,
            write_timeout: Duration::from_secs(5),
            mac_key: Some(key.clone()),
        },
    )
    .await
    .unwrap();
    let receipt = sink.write(record_at("new", now)).await.unwrap();
    sink.close().await;
    assert_eq!(receipt.seq, 7);
    let (ok, out) = run(dir.path(), &database.url, &["verify", "--database"]).await;
    assert!(ok && out.contains("ok: 13 records in 2 streams"), "{out}");
}

#[tokio::test]
async fn retention_drops_a_partition_and_verify_tells_the_cut_from_a_deletion() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let (dir, key) = setup("    retention: {keep: 5d, action: drop}\n");
    let pool = database.pool(4).await;
    db::migrate(&pool).await.unwrap();
    exec(
        &pool,
        "SELECT audit_create_partitions((now() AT TIME ZONE 'UTC')::date - 10, 10)",
    )
    .await;
    let now = SystemTime::now();
    let (old, recent) = (now - DAY * 10, now - DAY * 3);
    let sink = PgSink::start(
        pool.clone(),
        PgSinkConfig {
            stream: "r1".into(),
            max_batch: 16,
            write_timeout: Duration::from_secs(5),
            mac_key: Some(key.clone()),
        },
    )
    .await
    .unwrap();
    // Seq 4 is a call that started on the old day and was recorded after two records of a
    // later day: a partition by start holds it out of seq order.
    for (call, at) in [
        ("a", old),
        ("b", old),
        ("c", recent),
        ("d", old),
        ("e", recent),
        ("f", recent),
        ("g", now),
    ] {
        sink.write(record_at(call, at)).await.unwrap();
    }
    sink.close().await;
    let (ok, out) = run(dir.path(), &database.url, &["verify", "--database"]).await;
    assert!(ok && out.contains("ok: 7 records"), "{out}");

    // Two replicas maintain at once: each partition is removed, and its cut recorded, once.
    let ((ok1, out1), (ok2, out2)) = tokio::join!(
        run(dir.path(), &database.url, &["maintain"]),
        run(dir.path(), &database.url, &["maintain"])
    );
    assert!(ok1 && ok2, "{out1}\n{out2}");
    let out = format!("{out1}{out2}");
    assert!(out.contains("dropped audit_events_p"), "{out}");
    assert_eq!(
        out.matches("stream r1: 3 records, seq 1..4").count(),
        1,
        "{out}"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM audit_retention_cuts").await,
        1
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM audit_events").await, 4);
    let (ok, out) = run(dir.path(), &database.url, &["verify", "--database"]).await;
    assert!(ok && out.contains("ok: 4 records in 1 streams"), "{out}");
    assert!(out.contains("removed by retention"), "{out}");
    // A second run finds nothing more to remove.
    let (ok, out) = run(dir.path(), &database.url, &["maintain"]).await;
    assert!(ok && out.contains("0 removed"), "{out}");

    // The auditor sees the cut.
    let mut conn = pool.acquire().await.unwrap();
    query::<Postgres>("SET ROLE querygate_auditor")
        .execute(&mut *conn)
        .await
        .unwrap();
    let (records, anchored): (i64, bool) =
        sqlx_core::query_as::query_as("SELECT records, anchored FROM audit_retention")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    assert_eq!((records, anchored), (3, true));
    query::<Postgres>("RESET ROLE")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);

    // The owner deletes seq 3, kept (its day is recent) though among the cut's seqs 1..4.
    exec(
        &pool,
        "CREATE TABLE saved AS SELECT * FROM audit_events WHERE seq = 3",
    )
    .await;
    let delete = |seq: i64| {
        format!(
            "DO $$ BEGIN SET LOCAL session_replication_role = replica; \
             DELETE FROM audit_events WHERE stream = 'r1' AND seq = {seq}; END $$"
        )
    };
    exec(&pool, &delete(3)).await;
    let (ok, out) = run(dir.path(), &database.url, &["verify", "--database"]).await;
    assert!(
        !ok && out.contains("4 records of stream r1 are missing but retention removed 3"),
        "{out}"
    );
    // Put back, it verifies again.
    exec(
        &pool,
        "INSERT INTO audit_events (id, stream, seq, at, record, doc, prev_hash, hash, inserted_at, mac) \
         OVERRIDING SYSTEM VALUE \
         SELECT id, stream, seq, at, record, doc, prev_hash, hash, inserted_at, mac FROM saved",
    )
    .await;
    let (ok, out) = run(dir.path(), &database.url, &["verify", "--database"]).await;
    assert!(ok, "{out}");
    // A record deleted outside the cut's seqs.
    exec(&pool, "DROP TABLE saved").await;
    exec(
        &pool,
        "CREATE TABLE saved AS SELECT * FROM audit_events WHERE seq = 6",
    )
    .await;
    exec(&pool, &delete(6)).await;
    let (ok, out) = run(dir.path(), &database.url, &["verify", "--database"]).await;
    assert!(
        !ok && out.contains("seq 6 of stream r1 is missing and no retention cut names it"),
        "{out}"
    );
    // A cut forged (without the key) to cover it is a break of its own.
    exec(
        &pool,
        "INSERT INTO audit_retention_cuts (partition, range_from, range_to, action, stream, \
           first_seq, last_seq, last_hash, records, cut_at) \
         SELECT 'audit_events_p20000101', now(), now(), 'drop', 'r1', 6, 6, hash, 1, 'x' FROM saved",
    )
    .await;
    let (ok, out) = run(dir.path(), &database.url, &["verify", "--database"]).await;
    assert!(
        !ok && out.contains("retention cut's MAC is missing or does not verify"),
        "{out}"
    );
}
