//! Audit sink throughput and the latency an audit write adds to a call: the strict file sink
//! (fsync before acknowledging, group commit) and the PostgreSQL sink (committed before
//! acknowledging, batched), at 1, 8 and 64 concurrent writers, 3 s per point. Each writer
//! loops on `Auditor::record` (what the pipeline awaits per call) with a realistic record.
//! The `+mac` runs are anchored (every record and head MACed under an audit key). Prints
//! records/s and p50/p99 write latency, and the disk's own fsync rate from
//! `pg_test_fsync` for comparison.
//!
//! PostgreSQL: `QUERYGATE_TEST_DATABASE_URL` (an admin URL), else a throwaway cluster from
//! `scripts/pg-test-cluster.sh` (skipped, with a note, when that cannot start one).
//! Targets at 64 writers: ≥ 14,000 records/s (file), ≥ 5,000 (PostgreSQL).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a failure is a failed run

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use querygate::audit::anchor::MacKey;
use querygate::audit::file::{FileSink, FileSinkConfig};
use querygate::audit::postgres::{PgSink, PgSinkConfig};
use querygate::audit::record::{self, class};
use querygate::audit::{
    AuditRecord, AuditSink, Auditor, Decision, FailureMode, FileLocation, Outcome, Phase,
};
use querygate::config::SecretUrl;

const POINT: Duration = Duration::from_secs(3);
const WRITERS: [usize; 3] = [1, 8, 64];

fn sample(n: u64) -> AuditRecord {
    AuditRecord {
        timestamp: record::timestamp_now(),
        phase: Phase::Outcome,
        call_id: record::new_call_id(),
        request_id: Some(n.to_string()),
        tenant: "acme".into(),
        principal: "alice@example.com".into(),
        auth_method: "jwt".into(),
        client_name: Some("bench".into()),
        client_version: Some("1.0".into()),
        protocol_version: Some("2026-07-28".into()),
        tool: "run_select_query".into(),
        mode: "safe".into(),
        decision: Decision::Allow,
        query_class: Some(class::SELECT.into()),
        sql: Some(
            "SELECT name, stargazers_count FROM github.repos.repos WHERE org = 'stackql' ORDER BY 2 DESC LIMIT 5"
                .into(),
        ),
        args: Some(
            serde_json::json!({"sql": "SELECT name, stargazers_count FROM github.repos.repos WHERE org = 'stackql' ORDER BY 2 DESC LIMIT 5", "row_limit": 0})
                .as_object()
                .unwrap()
                .clone(),
        ),
        outcome: Some(Outcome::Ok),
        duration_ms: Some(37),
        rows_returned: Some(5),
        upstream_status: Some(200),
        ..Default::default()
    }
}

struct Point {
    records: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

async fn run_point(auditor: &Auditor, writers: usize) -> Point {
    let deadline = Instant::now() + POINT;
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let auditor = auditor.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut n = w as u64 * 1_000_000;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    auditor
                        .record(sample(n))
                        .await
                        .expect("write")
                        .expect("durable");
                    latencies.push(t.elapsed());
                    n += 1;
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    Point {
        records: latencies.len() as u64,
        elapsed,
        latencies,
    }
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn print_point(sink: &str, writers: usize, point: &Point) {
    let rate = point.records as f64 / point.elapsed.as_secs_f64();
    println!(
        "{sink:<10} writers {writers:>3}: {rate:>9.0} records/s   p50 {:>8.2} ms   p99 {:>8.2} ms   ({} records in {:.1} s)",
        quantile(&point.latencies, 0.50).as_secs_f64() * 1000.0,
        quantile(&point.latencies, 0.99).as_secs_f64() * 1000.0,
        point.records,
        point.elapsed.as_secs_f64()
    );
}

/// The audit key of the anchored runs (`audit.mac_key_file`).
fn bench_key() -> MacKey {
    MacKey::new(&[42u8; 32]).unwrap()
}

async fn bench_file(dir: &Path) {
    for (label, key) in [("file", None), ("file+mac", Some(bench_key()))] {
        for writers in WRITERS {
            let sub = dir.join(format!("{label}-w{writers}"));
            let sink = Arc::new(
                FileSink::start(FileSinkConfig {
                    location: FileLocation::Dir(sub),
                    stream: "bench".into(),
                    max_size: 0,
                    max_files: 0,
                    max_age: None,
                    mac_key: key.clone(),
                    format: querygate::audit::Format::Jsonl,
                })
                .unwrap(),
            );
            let auditor = Auditor::new(sink.clone(), FailureMode::Strict, "bench", None);
            let point = run_point(&auditor, writers).await;
            print_point(label, writers, &point);
            sink.close().await;
        }
    }
}

/// The admin URL of a PostgreSQL server, and the folder of a cluster started for the run.
fn postgres() -> Option<(String, Option<String>)> {
    if let Ok(url) = std::env::var("QUERYGATE_TEST_DATABASE_URL")
        && !url.is_empty()
    {
        return Some((url, None));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pg-test-cluster.sh");
    let out = Command::new(script).arg("start").output().ok()?;
    if !out.status.success() {
        eprintln!(
            "note: no PostgreSQL for the benchmark: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("export {name}=")))
            .map(|v| v.trim_matches('\'').to_owned())
    };
    Some((
        value("QUERYGATE_TEST_DATABASE_URL")?,
        value("QUERYGATE_TEST_PG_DIR"),
    ))
}

async fn bench_postgres(admin: &str) {
    let admin_pool = querygate::db::connect_url(&SecretUrl::new(admin), 1, Duration::from_secs(10))
        .await
        .unwrap();
    let name = format!("qg_bench_{}", std::process::id());
    sqlx_core::query::query::<sqlx_postgres::Postgres>(&format!("CREATE DATABASE {name}"))
        .execute(&admin_pool)
        .await
        .unwrap();
    let mut url = url::Url::parse(admin).unwrap();
    url.set_path(&format!("/{name}"));
    let pool =
        querygate::db::connect_url(&SecretUrl::new(url.as_str()), 4, Duration::from_secs(10))
            .await
            .unwrap();
    querygate::db::migrate(&pool).await.unwrap();
    for (label, key, writers) in WRITERS
        .iter()
        .map(|w| ("postgres", None, *w))
        .chain(WRITERS.iter().map(|w| ("pg+mac", Some(bench_key()), *w)))
    {
        let sink = Arc::new(
            PgSink::start(
                pool.clone(),
                PgSinkConfig {
                    stream: format!("bench-{label}-{writers}"),
                    max_batch: 512,
                    write_timeout: Duration::from_secs(10),
                    mac_key: key,
                },
            )
            .await
            .unwrap(),
        );
        let auditor = Auditor::new(
            sink.clone() as Arc<dyn AuditSink>,
            FailureMode::Strict,
            "bench",
            None,
        );
        let point = run_point(&auditor, writers).await;
        print_point(label, writers, &point);
        sink.close().await;
    }
    pool.close().await;
    let _ = sqlx_core::query::query::<sqlx_postgres::Postgres>(&format!("DROP DATABASE {name}"))
        .execute(&admin_pool)
        .await;
}

fn pg_test_fsync(dir: &Path) {
    let bin =
        std::env::var("QUERYGATE_PG_BIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into());
    let file = dir.join("pg_test_fsync.out");
    match Command::new(Path::new(&bin).join("pg_test_fsync"))
        .args(["-s", "2", "-f"])
        .arg(&file)
        .output()
    {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            println!("pg_test_fsync -s 2 (the disk's own rates, one 8 kB write per sync):");
            let mut section = false;
            for line in text.lines() {
                if line.contains("one 8kB write") {
                    section = true;
                    continue;
                }
                if section && line.trim().is_empty() {
                    break;
                }
                if section && line.contains("ops/sec") {
                    println!("  {}", line.trim());
                }
            }
        }
        Ok(out) => println!(
            "pg_test_fsync failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(err) => println!("pg_test_fsync not run ({bin}): {err}"),
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::Builder::new()
        .prefix("querygate-audit-bench.")
        .tempdir()
        .unwrap();
    println!(
        "audit sinks, {} s per point, strict failure mode, records in {}",
        POINT.as_secs(),
        dir.path().display()
    );
    pg_test_fsync(dir.path());
    runtime.block_on(bench_file(dir.path()));
    match postgres() {
        Some((admin, started)) => {
            runtime.block_on(bench_postgres(&admin));
            if let Some(pg_dir) = started {
                let script =
                    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pg-test-cluster.sh");
                let _ = Command::new(script).args(["stop", &pg_dir]).status();
            }
        }
        None => println!("postgres: skipped (no server)"),
    }
}
