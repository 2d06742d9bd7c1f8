//! The partitioned `audit_events` at scale (docs/audit.md "Partitions and retention"):
//! loads `QG_BENCH_RECORDS` synthetic records (10,000,000 by default) across 30 daily
//! partitions with `generate_series` (their chain columns are filler: this part measures
//! queries, not verification), then runs the auditors' two questions with
//! `EXPLAIN (ANALYZE, BUFFERS)`, prints the plan's key lines and the median of 5 runs:
//!
//! - every DELETE of one tenant yesterday, with its approver (`audit_mutations`);
//! - every call of one principal in the last hour (`audit_calls`).
//!
//! Then, in a second database, writes one day's worth of real chained, MACed records
//! through the PostgreSQL sink (`QG_BENCH_VERIFY_RECORDS`, by default a thirtieth of the
//! records) and times `audit verify --database` over them (records/s).
//!
//! Needs `QUERYGATE_TEST_DATABASE_URL` (an admin URL): run it through
//! `scripts/pg-test-cluster.sh run -- cargo bench --bench audit_partitions`. Not part of CI.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a failure is a failed run

use std::sync::Arc;
use std::time::{Duration, Instant};

use querygate::audit::anchor::MacKey;
use querygate::audit::postgres::{PgSink, PgSinkConfig};
use querygate::audit::record::{self, class};
use querygate::audit::{AuditRecord, AuditSink, Decision, Outcome, Phase};
use querygate::config::SecretUrl;
use querygate::db::PgPool;
use sqlx_core::query::query;
use sqlx_core::query_scalar::query_scalar;
use sqlx_postgres::Postgres;

const DAYS: i64 = 30;

fn env_number(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

async fn database(admin: &str, name: &str) -> PgPool {
    let admin_pool = querygate::db::connect_url(&SecretUrl::new(admin), 1, Duration::from_secs(10))
        .await
        .unwrap();
    query::<Postgres>(&format!("CREATE DATABASE {name}"))
        .execute(&admin_pool)
        .await
        .unwrap();
    admin_pool.close().await;
    let mut url = url::Url::parse(admin).unwrap();
    url.set_path(&format!("/{name}"));
    let pool =
        querygate::db::connect_url(&SecretUrl::new(url.as_str()), 4, Duration::from_secs(10))
            .await
            .unwrap();
    querygate::db::migrate(&pool).await.unwrap();
    pool
}

/// One day of synthetic records (the `$1`th day before now): 50 tenants, 1,000
/// principals, 80 % selects, 10 % creates, 5 % deletes, 5 % lifecycle; writes approved
/// (approval id, approver), spread evenly over the day.
const LOAD_DAY: &str = "INSERT INTO audit_events (stream, seq, at, record, doc, prev_hash, hash) \
SELECT 'bench', $2::bigint * $3 + g, t.at, '', d.doc, repeat('0', 64), md5(g::text) || md5($2::text || g) \
FROM generate_series(1, $3::bigint) g \
CROSS JOIN LATERAL (SELECT now() - make_interval(days => $1::int + 1) \
    + g * (interval '86400 seconds' / $3) AS at, \
    CASE WHEN g % 100 < 80 THEN 'select' WHEN g % 100 < 90 THEN 'mutation_create' \
         WHEN g % 100 < 95 THEN 'mutation_delete' ELSE 'lifecycle' END AS class) t \
CROSS JOIN LATERAL (SELECT jsonb_strip_nulls(jsonb_build_object( \
    'v', 2, 'timestamp', t.at, 'phase', 'outcome', 'call_id', 'c' || $2 || '-' || g, \
    'replica', 'bench', 'tenant', 't' || abs(hashint8(g) % 50), \
    'principal', 'p' || abs(hashint8(-g) % 1000), \
    'auth_method', 'jwt', 'tool', CASE WHEN t.class = 'select' THEN 'run_select_query' \
        ELSE 'run_mutation_query' END, 'mode', 'safe', \
    'decision', CASE WHEN t.class = 'select' THEN 'allow' ELSE 'needs_approval_accepted' END, \
    'query_class', t.class, 'sql', 'SELECT name FROM aws.ec2.instances WHERE region = ''r' || (g % 20) || '''', \
    'approval_id', CASE WHEN t.class <> 'select' THEN 'ap-' || $2 || '-' || g END, \
    'approver', CASE WHEN t.class <> 'select' THEN 'approver' || (g % 20) END, \
    'approval_method', CASE WHEN t.class <> 'select' THEN 'web' END, \
    'outcome', 'ok', 'duration_ms', g % 500, 'rows_returned', g % 100)) AS doc) d";

const DELETES: &str = "SELECT at, principal, sql, approval_id, approver, approval_method \
FROM audit_mutations WHERE tenant = 't7' AND query_class = 'mutation_delete' \
AND at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '1 day' \
AND at < date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' ORDER BY at";

const PRINCIPAL: &str = "SELECT at, tool, query_class, decision, outcome, sql FROM audit_calls \
WHERE principal = 'p42' AND at >= now() - interval '1 hour' ORDER BY at";

async fn explain(pool: &PgPool, name: &str, sql: &str) {
    let mut times = Vec::new();
    let mut plan = Vec::new();
    for _ in 0..5 {
        plan = query_scalar::<Postgres, String>(&format!("EXPLAIN (ANALYZE, BUFFERS) {sql}"))
            .fetch_all(pool)
            .await
            .unwrap();
        let total = plan
            .iter()
            .filter_map(|l| l.strip_prefix("Execution Time: "))
            .find_map(|t| t.trim_end_matches(" ms").parse::<f64>().ok())
            .unwrap_or(f64::NAN);
        times.push(total);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let rows = query_scalar::<Postgres, i64>(&format!("SELECT count(*) FROM ({sql}) q"))
        .fetch_one(pool)
        .await
        .unwrap();
    println!(
        "\n{name}: {rows} rows, median execution {:.2} ms (min {:.2}, max {:.2})",
        times[2], times[0], times[4]
    );
    for line in plan {
        println!("  {line}");
    }
}

fn sample(n: u64) -> AuditRecord {
    AuditRecord {
        timestamp: record::timestamp_now(),
        phase: Phase::Outcome,
        call_id: record::new_call_id(),
        request_id: Some(n.to_string()),
        tenant: format!("t{}", n % 50),
        principal: format!("p{}", n % 1000),
        auth_method: "jwt".into(),
        tool: "run_select_query".into(),
        mode: "safe".into(),
        decision: Decision::Allow,
        query_class: Some(class::SELECT.into()),
        sql: Some("SELECT name FROM aws.ec2.instances WHERE region = 'us-east-1'".into()),
        outcome: Some(Outcome::Ok),
        duration_ms: Some(12),
        rows_returned: Some(3),
        ..Default::default()
    }
}

#[tokio::main]
#[expect(
    clippy::too_many_lines,
    reason = "loads the records, then runs and prints each measurement in order"
)]
async fn main() {
    let Some(admin) = std::env::var("QUERYGATE_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        println!("skipped: set QUERYGATE_TEST_DATABASE_URL (scripts/pg-test-cluster.sh run -- …)");
        return;
    };
    let records = env_number("QG_BENCH_RECORDS", 10_000_000);
    let per_day = records / DAYS;
    let pool = database(&admin, &format!("qg_partbench_{}", std::process::id())).await;
    query::<Postgres>("SELECT audit_create_partitions((now() AT TIME ZONE 'UTC')::date - 29, 31)")
        .execute(&pool)
        .await
        .unwrap();
    let started = Instant::now();
    for day in 0..DAYS {
        query::<Postgres>(LOAD_DAY)
            .bind((DAYS - 1 - day) as i32)
            .bind(day)
            .bind(per_day)
            .execute(&pool)
            .await
            .unwrap();
        eprint!(".");
    }
    query::<Postgres>("VACUUM ANALYZE audit_events")
        .execute(&pool)
        .await
        .unwrap();
    let size: String =
        query_scalar("SELECT pg_size_pretty(sum(pg_total_relation_size(inhrelid))) FROM pg_inherits WHERE inhparent = 'audit_events'::regclass")
            .fetch_one(&pool)
            .await
            .unwrap();
    println!(
        "\nloaded {} records in {DAYS} daily partitions in {:.0} s ({size} with indexes)",
        per_day * DAYS,
        started.elapsed().as_secs_f64()
    );
    explain(
        &pool,
        "every DELETE of tenant t7 yesterday, with its approver",
        DELETES,
    )
    .await;
    explain(
        &pool,
        "every call of principal p42 in the last hour",
        PRINCIPAL,
    )
    .await;
    pool.close().await;

    // Verification of one day's records: real chains, MACed, written by the sink.
    let verify_records = env_number("QG_BENCH_VERIFY_RECORDS", per_day).max(1) as u64;
    let pool = database(&admin, &format!("qg_verifybench_{}", std::process::id())).await;
    let key = MacKey::new(&[9u8; 32]).unwrap();
    let writers = 64u64;
    let sink = Arc::new(
        PgSink::start(
            pool.clone(),
            PgSinkConfig {
                stream: "bench".into(),
                max_batch: 512,
                write_timeout: Duration::from_secs(30),
                mac_key: Some(key.clone()),
            },
        )
        .await
        .unwrap(),
    );
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let sink = sink.clone();
            tokio::spawn(async move {
                let mut n = w;
                while n < verify_records {
                    sink.write(sample(n)).await.unwrap();
                    n += writers;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    sink.close().await;
    println!(
        "\nwrote {verify_records} chained records through the sink in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let report = querygate::audit::verify::verify_database_with(&pool, Some(&key))
        .await
        .unwrap();
    let took = started.elapsed().as_secs_f64();
    assert!(report.ok(), "{}", report.render());
    println!(
        "audit verify --database: {} records in {took:.1} s: {:.0} records/s",
        report.records,
        report.records as f64 / took
    );
    pool.close().await;
}
