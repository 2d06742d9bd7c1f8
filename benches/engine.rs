//! Engine benchmark: `cargo bench --bench engine`.
//!
//! 1. An in-process axum mock upstream on 127.0.0.1 serves `bench.items.items` (fixture
//!    provider under `benches/fixtures/registry`) as 10 pages × 1,000 rows, pre-generated at
//!    start-up, chained with `Link: <…>; rel="next"`.
//! 2. The engine runs a GROUP BY over all 10,000 rows; a hand-written baseline parses the
//!    same page bodies with `serde_json::Value`, inserts them into an in-memory SQLite table
//!    with a prepared statement in one transaction and runs the same GROUP BY.
//! 3. Peak memory (VmHWM) and the first/cached discovery cost of the github `activity.yaml`
//!    document from the shared provider registry.
//! 4. The same rows Azure-shaped (`{"value": [{"id", "name", "type", "location", "properties":
//!    {…}}]}`) as `bench.arm.items`, whose list method has the Azure providers' flatten
//!    transform (`golang_template_json_v0.3.0`): the same GROUP BY, its CPU against point a's.
//!
//! 5. The same rows S3-shaped: a ListObjectsV2 XML listing (`<Contents>` per object: `Key`,
//!    `LastModified`, `ETag`, `Size`, `StorageClass` = the group, `Owner`) as
//!    `bench.s3.objects`, read by the aws provider's `schema_driven_xml_v0.1.0` transform,
//!    10 pages chained by `NextContinuationToken` → `continuation-token`: the same GROUP BY
//!    (by `StorageClass`), its CPU against point a's.
//!
//! CPU time is the sum of per-thread `sum_exec_runtime` (`/proc/self/task/*/schedstat`,
//! nanoseconds). Threads that exit during a query (an engine SQLite thread beyond the ones
//! kept for reuse) would vanish from that sum, so a probe thread polls new threads' counters
//! while the query runs and keeps their last value. The mock's thread and the probe are excluded and
//! reported separately. A coarse cross-check from `/proc/self/stat` (clock ticks, includes
//! exited threads) is printed for the whole batch.
//!
//! With `QUERYGATE_BENCH_PROFILE=N` only point a runs: one cold query, then N more, checked
//! but neither timed nor reported (for a profiler: the instructions of N calls are the
//! difference between two runs with different N, e.g. under `valgrind --tool=callgrind`).
//! `QUERYGATE_BENCH_PROFILE_QUERY=arm` or `=s3` profiles point e's or f's query instead.

/// The server binary's allocator (see `src/main.rs`), so figures are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use querygate::engine::{Cell, Engine, EngineConfig, ExecContext, ProviderSettings};
use rusqlite::types::Value as SqlValue;
use serde_json::{Value, json};

const PAGES: usize = 10;
const ROWS_PER_PAGE: usize = 1_000;
const GROUPS: u64 = 20;
const WARMUPS: usize = 2;
const ITERATIONS: usize = 15;
const DISCOVERY_REPEATS: usize = 50;
const FRESH_PARSES: usize = 5;
const QUERY: &str =
    r#"SELECT "group", count(*), sum(size) FROM bench.items.items GROUP BY "group""#;
const ARM_QUERY: &str =
    r#"SELECT "group", count(*), sum(size) FROM bench.arm.items GROUP BY "group""#;
const S3_QUERY: &str =
    "SELECT StorageClass, count(*), sum(Size) FROM bench.s3.objects GROUP BY StorageClass";
/// Columns of the fixture's item schema, in document order.
const COLUMNS: [&str; 10] = [
    "id",
    "seq",
    "name",
    "group",
    "size",
    "active",
    "score",
    "created_at",
    "owner",
    "tags",
];

// Targets (informational).
const TARGET_CPU_RATIO: f64 = 2.0;
const TARGET_ENGINE_CPU_MS: f64 = 25.0;
const TARGET_FIRST_PARSE_MS: f64 = 150.0;
const TARGET_CACHED_MS: f64 = 1.0;

fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; nothing to parse.
    let crate_root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = Dataset::generate();
    println!("querygate engine benchmark");
    println!(
        "  data: {PAGES} pages x {ROWS_PER_PAGE} rows = {} rows, {:.2} MiB of JSON; {WARMUPS} warm-ups + {ITERATIONS} iterations",
        PAGES * ROWS_PER_PAGE,
        data.total_bytes() as f64 / (1024.0 * 1024.0)
    );
    println!("  query: {QUERY}");

    let mock = Mock::start(
        data.pages.clone(),
        data.arm_pages.clone(),
        data.s3_pages.clone(),
    )?;
    let result = match std::env::var("QUERYGATE_BENCH_PROFILE") {
        Ok(n) => match n.parse() {
            Ok(n) => profile(crate_root, &data, &mock, n),
            Err(_) => Err(anyhow!(
                "QUERYGATE_BENCH_PROFILE={n}: not a number of queries"
            )),
        },
        Err(_) => run(crate_root, &data, &mock),
    };
    mock.stop();
    result
}

/// The engine of point a, calling the mock.
fn bench_engine(crate_root: &Path, mock: &Mock) -> Result<Engine> {
    let mut config = EngineConfig::new(crate_root.join("benches/fixtures/registry"));
    config.providers.insert(
        "bench".into(),
        ProviderSettings {
            base_url: Some(format!("http://127.0.0.1:{}", mock.port)),
            ..ProviderSettings::default()
        },
    );
    config.upstream.page_limit = 100;
    config.upstream.timeout = Duration::from_secs(20);
    config.upstream.connect_timeout = Duration::from_secs(5);
    Ok(Engine::new(config)?)
}

/// CPU (all engine threads but the mock's) of `query`, per timed iteration, each result
/// checked against the generated data.
fn engine_query_cpu(
    runtime: &tokio::runtime::Runtime,
    engine: &Engine,
    cx: &ExecContext,
    mock_tid: u32,
    expected: &Groups,
    query: &str,
) -> Result<Vec<u64>> {
    let mut cpu = Vec::with_capacity(ITERATIONS);
    for i in 0..WARMUPS + ITERATIONS {
        let probe = CpuProbe::start(&[mock_tid])?;
        let out = runtime.block_on(engine.execute(cx, query));
        let sample = probe.finish()?;
        let out = out.map_err(|err| anyhow!("engine query failed: {err} ({:?})", err.kind()))?;
        check_engine_output(&out.columns, &out.rows, expected)?;
        if i >= WARMUPS {
            cpu.push(sample.cpu_ns);
        }
    }
    Ok(cpu)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the engine runtime")
}

/// Point a only: a cold query, then `queries` more, each result checked.
fn profile(crate_root: &Path, data: &Dataset, mock: &Mock, queries: usize) -> Result<()> {
    let runtime = runtime()?;
    let engine = bench_engine(crate_root, mock)?;
    let cx = ExecContext::anonymous_default();
    let query = match std::env::var("QUERYGATE_BENCH_PROFILE_QUERY").as_deref() {
        Err(_) | Ok("" | "json") => QUERY,
        Ok("arm") => ARM_QUERY,
        Ok("s3") => S3_QUERY,
        Ok(other) => bail!("QUERYGATE_BENCH_PROFILE_QUERY={other}: json, arm or s3"),
    };
    for _ in 0..=queries {
        let out = runtime
            .block_on(engine.execute(&cx, query))
            .map_err(|err| anyhow!("engine query failed: {err} ({:?})", err.kind()))?;
        check_engine_output(&out.columns, &out.rows, &data.expected)?;
    }
    println!("  profile: 1 + {queries} queries ({query}), results as generated");
    drop(engine);
    runtime.shutdown_timeout(Duration::from_secs(2));
    Ok(())
}

#[expect(
    clippy::too_many_lines,
    reason = "the bench's measurements in the order their figures are printed"
)]
fn run(crate_root: &Path, data: &Dataset, mock: &Mock) -> Result<()> {
    let runtime = runtime()?;

    // ---- a. engine ------------------------------------------------------------------
    let engine = bench_engine(crate_root, mock)?;
    let cx = ExecContext::anonymous_default();

    let hwm_before = vm_status("VmHWM")?;
    let rss_before = vm_status("VmRSS")?;

    let mut engine_wall = Vec::with_capacity(ITERATIONS);
    let mut engine_cpu = Vec::with_capacity(ITERATIONS);
    let mut mock_cpu = Vec::with_capacity(ITERATIONS);
    let mut exited_threads = Vec::with_capacity(ITERATIONS);
    let mut exited_cpu = Vec::with_capacity(ITERATIONS);
    let mut probe_cpu_total: u64 = 0;
    let mut cold_wall = None;
    let mut stat_before = 0;
    let mut rss_after_warmups = 0;
    for i in 0..WARMUPS + ITERATIONS {
        if i == WARMUPS {
            rss_after_warmups = vm_status("VmRSS")?;
            stat_before = process_stat_ticks()?;
            probe_cpu_total = 0;
        }
        let excluded = [mock.tid];
        let probe = CpuProbe::start(&excluded)?;
        let start = Instant::now();
        let out = runtime.block_on(engine.execute(&cx, QUERY));
        let wall = start.elapsed();
        let sample = probe.finish()?;
        let out = out.map_err(|err| anyhow!("engine query failed: {err} ({:?})", err.kind()))?;
        if i == 0 {
            cold_wall = Some(wall);
            if !out.warnings.is_empty() {
                println!("  engine warnings: {:?}", out.warnings);
            }
        }
        check_engine_output(&out.columns, &out.rows, &data.expected)?;
        probe_cpu_total += sample.probe_ns;
        if i >= WARMUPS {
            exited_threads.push(sample.exited as u64);
            exited_cpu.push(sample.exited_ns);
            engine_wall.push(wall.as_nanos() as u64);
            engine_cpu.push(sample.cpu_ns);
            mock_cpu.push(sample.excluded_ns);
        }
    }
    let stat_after = process_stat_ticks()?;
    let hwm_after_engine = vm_status("VmHWM")?;
    let rss_after_engine = vm_status("VmRSS")?;
    let fidelity = runtime.block_on(check_fidelity(&engine, &cx, &data.first_row));

    // ---- b. baseline ----------------------------------------------------------------
    let mut base_wall = Vec::with_capacity(ITERATIONS);
    let mut base_cpu = Vec::with_capacity(ITERATIONS);
    let mut base_parse = Vec::with_capacity(ITERATIONS);
    let me = current_tid()?;
    for i in 0..WARMUPS + ITERATIONS {
        settle();
        let cpu0 = thread_cpu_ns(me).context("reading this thread's schedstat")?;
        let start = Instant::now();
        let (groups, parse) = baseline(&data.pages)?;
        let wall = start.elapsed();
        settle();
        let cpu1 = thread_cpu_ns(me).context("reading this thread's schedstat")?;
        ensure!(
            groups == data.expected,
            "baseline result differs from the generated data"
        );
        if i >= WARMUPS {
            base_wall.push(wall.as_nanos() as u64);
            base_cpu.push(cpu1.saturating_sub(cpu0));
            base_parse.push(parse.as_nanos() as u64);
        }
    }
    let hwm_after_baseline = vm_status("VmHWM")?;

    // ---- report a-c -----------------------------------------------------------------
    let engine_cpu_s = Stats::of(&engine_cpu);
    let base_cpu_s = Stats::of(&base_cpu);
    let ratio = engine_cpu_s.median / base_cpu_s.median.max(1.0);
    let mock_s = Stats::of(&mock_cpu);
    println!();
    println!("a. engine: GROUP BY over bench.items.items (10,000 rows over HTTP, 10 pages)");
    if let Some(cold) = cold_wall {
        println!(
            "   first query (cold: document load, connection)  wall {:>8.2} ms",
            ms(cold.as_nanos() as f64)
        );
    }
    print_stats("wall", &Stats::of(&engine_wall));
    print_stats("CPU (all engine threads)", &engine_cpu_s);
    println!(
        "   of which threads that exited during the query: {:.0} thread(s), median {:.2} ms (seen by the probe)",
        Stats::of(&exited_threads).median,
        ms(Stats::of(&exited_cpu).median)
    );
    println!(
        "   mock upstream CPU (excluded above)        median {:>8.2} ms   (probe thread, also excluded: {:.2} ms/iter)",
        ms(mock_s.median),
        ms(probe_cpu_total as f64 / ITERATIONS as f64)
    );
    let stat_ns = stat_after.saturating_sub(stat_before) as f64 * 1e7; // 100 ticks/s
    let mock_sum: u64 = mock_cpu.iter().sum();
    let batch_mean = (stat_ns - mock_sum as f64 - probe_cpu_total as f64) / ITERATIONS as f64;
    println!(
        "   cross-check /proc/self/stat (10 ms ticks, incl. exited threads), batch mean minus mock+probe: {:.2} ms (±{:.1})",
        ms(batch_mean),
        20.0 / ITERATIONS as f64
    );
    match fidelity {
        Ok(notes) if notes.is_empty() => {
            println!("   value fidelity (row seq = 0 vs generated): all 10 columns OK")
        }
        Ok(notes) => {
            println!("   value fidelity (row seq = 0 vs generated): MISMATCH");
            for note in notes {
                println!("     - {note}");
            }
        }
        Err(err) => println!("   value fidelity check failed: {err:#}"),
    }
    println!();
    println!(
        "b. baseline: serde_json::Value per page + prepared INSERT (one tx) + same GROUP BY, one thread"
    );
    print_stats("wall", &Stats::of(&base_wall));
    print_stats("CPU", &base_cpu_s);
    print_stats(
        "of which serde_json::from_slice (wall)",
        &Stats::of(&base_parse),
    );
    println!();
    println!(
        "c. memory (VmHWM includes the mock's {:.2} MiB of pre-generated pages)",
        mib(data.total_bytes() as u64)
    );
    println!(
        "   VmHWM before first engine query   {:>8.1} MiB   (VmRSS {:.1} MiB)",
        kib_to_mib(hwm_before),
        kib_to_mib(rss_before)
    );
    println!(
        "   VmHWM after engine runs           {:>8.1} MiB   (delta {:+.1} MiB)",
        kib_to_mib(hwm_after_engine),
        kib_to_mib(hwm_after_engine) - kib_to_mib(hwm_before),
    );
    println!(
        "   VmRSS after {WARMUPS} warm-ups {:.1} MiB, after {ITERATIONS} more queries {:.1} MiB",
        kib_to_mib(rss_after_warmups),
        kib_to_mib(rss_after_engine)
    );
    println!(
        "   VmHWM after baseline runs         {:>8.1} MiB",
        kib_to_mib(hwm_after_baseline)
    );

    // ---- d. activity.yaml -----------------------------------------------------------
    println!();
    let discovery = discovery_bench(&runtime, crate_root, &cx)?;

    // ---- e. Azure-shaped rows through the flatten transform ------------------------
    let arm_cpu = Stats::of(&engine_query_cpu(
        &runtime,
        &engine,
        &cx,
        mock.tid,
        &data.expected,
        ARM_QUERY,
    )?);
    let arm_ratio = arm_cpu.median / engine_cpu_s.median.max(1.0);
    println!();
    println!(
        "e. engine: the same GROUP BY over bench.arm.items (10,000 Azure-shaped rows, flatten transform)"
    );
    print_stats("CPU (all engine threads)", &arm_cpu);
    println!(
        "   per row: {:.2} us transformed vs {:.2} us plain JSON (point a): {arm_ratio:.2}x",
        arm_cpu.median / 1e3 / (PAGES * ROWS_PER_PAGE) as f64,
        engine_cpu_s.median / 1e3 / (PAGES * ROWS_PER_PAGE) as f64
    );

    // ---- f. S3-shaped XML listing through schema_driven_xml --------------------------
    let s3_cpu = Stats::of(&engine_query_cpu(
        &runtime,
        &engine,
        &cx,
        mock.tid,
        &data.expected,
        S3_QUERY,
    )?);
    let s3_ratio = s3_cpu.median / engine_cpu_s.median.max(1.0);
    println!();
    println!(
        "f. engine: the same GROUP BY over bench.s3.objects (10,000 objects of S3 ListObjectsV2 XML, schema_driven_xml, {:.2} MiB)",
        mib(data.s3_pages.iter().map(Bytes::len).sum::<usize>() as u64)
    );
    print_stats("CPU (all engine threads)", &s3_cpu);
    println!(
        "   per row: {:.2} us XML vs {:.2} us plain JSON (point a): {s3_ratio:.2}x",
        s3_cpu.median / 1e3 / (PAGES * ROWS_PER_PAGE) as f64,
        engine_cpu_s.median / 1e3 / (PAGES * ROWS_PER_PAGE) as f64
    );

    // ---- targets --------------------------------------------------------------------
    println!();
    println!("targets (informational)");
    verdict(
        &format!("engine CPU <= {TARGET_CPU_RATIO}x baseline"),
        format!(
            "{ratio:.2}x ({:.2} / {:.2} ms)",
            ms(engine_cpu_s.median),
            ms(base_cpu_s.median)
        ),
        ratio <= TARGET_CPU_RATIO,
    );
    verdict(
        &format!("engine CPU <= {TARGET_ENGINE_CPU_MS} ms / 10,000 rows"),
        format!("{:.2} ms", ms(engine_cpu_s.median)),
        ms(engine_cpu_s.median) <= TARGET_ENGINE_CPU_MS,
    );
    verdict(
        &format!("flatten transform CPU per row <= {TARGET_CPU_RATIO}x plain JSON path"),
        format!(
            "{arm_ratio:.2}x ({:.2} / {:.2} ms)",
            ms(arm_cpu.median),
            ms(engine_cpu_s.median)
        ),
        arm_ratio <= TARGET_CPU_RATIO,
    );
    verdict(
        &format!("S3 XML listing CPU per row <= {TARGET_CPU_RATIO}x plain JSON path"),
        format!(
            "{s3_ratio:.2}x ({:.2} / {:.2} ms)",
            ms(s3_cpu.median),
            ms(engine_cpu_s.median)
        ),
        s3_ratio <= TARGET_CPU_RATIO,
    );
    match discovery {
        Some((first, cached)) => {
            verdict(
                &format!("activity.yaml first parse <= {TARGET_FIRST_PARSE_MS} ms"),
                format!("{:.2} ms", ms(first)),
                ms(first) <= TARGET_FIRST_PARSE_MS,
            );
            verdict(
                &format!("activity.yaml cached lookup <= {TARGET_CACHED_MS} ms"),
                format!("{:.3} ms", ms(cached)),
                ms(cached) <= TARGET_CACHED_MS,
            );
        }
        None => println!("   activity.yaml targets: SKIPPED (registry not found)"),
    }
    drop(engine);
    runtime.shutdown_timeout(Duration::from_secs(2));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// d. discovery over the shared registry
// ---------------------------------------------------------------------------------------

/// Returns (first parse ns, median cached ns), or None when the registry is missing.
fn discovery_bench(
    runtime: &tokio::runtime::Runtime,
    crate_root: &Path,
    cx: &ExecContext,
) -> Result<Option<(f64, f64)>> {
    let root = match std::env::var_os("QUERYGATE_COMPAT_REGISTRY") {
        Some(dir) => PathBuf::from(dir),
        None => crate_root.join("../shared/providers"),
    };
    let doc = root.join("src/github");
    let (service, resource) = ("activity", "events");
    println!(
        "d. discovery: columns(github, {service}, {resource}) from {}",
        root.display()
    );
    if !doc.is_dir() {
        println!(
            "   SKIPPED: {} does not exist (set QUERYGATE_COMPAT_REGISTRY)",
            doc.display()
        );
        return Ok(None);
    }
    let mut firsts = Vec::with_capacity(FRESH_PARSES);
    let mut cached = Vec::with_capacity(DISCOVERY_REPEATS);
    let mut column_count = 0;
    for round in 0..FRESH_PARSES {
        let engine = Engine::new(EngineConfig::new(&root))?;
        let start = Instant::now();
        let cols = runtime
            .block_on(engine.columns(cx, "github", service, resource))
            .map_err(|err| anyhow!("columns(github, {service}, {resource}) failed: {err}"))?;
        firsts.push(start.elapsed().as_nanos() as u64);
        column_count = cols.len();
        if round == 0 {
            for _ in 0..DISCOVERY_REPEATS {
                let start = Instant::now();
                let again = runtime
                    .block_on(engine.columns(cx, "github", service, resource))
                    .map_err(|err| anyhow!("cached columns() failed: {err}"))?;
                cached.push(start.elapsed().as_nanos() as u64);
                ensure!(again.len() == cols.len(), "cached columns differ");
            }
        }
    }
    let first = firsts.first().copied().unwrap_or_default() as f64;
    let fresh = Stats::of(&firsts);
    let cached_s = Stats::of(&cached);
    println!(
        "   {column_count} columns; document size {:.2} MiB",
        file_mib(&root.join("src/github"), service)
    );
    println!(
        "   first call on a fresh Engine (process's first parse)   {:>8.2} ms",
        ms(first)
    );
    println!(
        "   first call on {FRESH_PARSES} fresh Engines                      median {:>8.2} ms   min {:>8.2} ms",
        ms(fresh.median),
        ms(fresh.min)
    );
    println!(
        "   cached call x{DISCOVERY_REPEATS} (same Engine)                     median {:>8.3} ms   min {:>8.3} ms",
        ms(cached_s.median),
        ms(cached_s.min)
    );
    println!(
        "   VmHWM after discovery             {:>8.1} MiB",
        kib_to_mib(vm_status("VmHWM")?)
    );
    Ok(Some((first, cached_s.median)))
}

fn file_mib(provider_dir: &Path, service: &str) -> f64 {
    let Ok(versions) = std::fs::read_dir(provider_dir) else {
        return 0.0;
    };
    versions
        .filter_map(|v| v.ok())
        .filter_map(|v| {
            std::fs::metadata(v.path().join("services").join(format!("{service}.yaml"))).ok()
        })
        .map(|m| mib(m.len()))
        .fold(0.0, f64::max)
}

// ---------------------------------------------------------------------------------------
// Data
// ---------------------------------------------------------------------------------------

/// group → (count, sum(size)).
type Groups = BTreeMap<String, (i64, i64)>;

struct Dataset {
    pages: Vec<Bytes>,
    /// The same rows, Azure-shaped: `{"value": [{"id", "name", "type", "location",
    /// "properties": {the rest}}], "nextLink": null}`.
    arm_pages: Vec<Bytes>,
    /// The same rows as S3 ListObjectsV2 XML pages (`StorageClass` holds the group).
    s3_pages: Vec<Bytes>,
    /// group → (count, sum(size)).
    expected: Groups,
    /// The row with `seq = 0`, to check what the engine makes of each type.
    first_row: Value,
}

impl Dataset {
    fn generate() -> Dataset {
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            state >> 33
        };
        let mut expected: Groups = BTreeMap::new();
        let mut pages = Vec::with_capacity(PAGES);
        let mut arm_pages = Vec::with_capacity(PAGES);
        let mut s3_pages = Vec::with_capacity(PAGES);
        for page in 0..PAGES {
            let mut rows = Vec::with_capacity(ROWS_PER_PAGE);
            for r in 0..ROWS_PER_PAGE {
                let seq = (page * ROWS_PER_PAGE + r) as i64;
                let group = format!("group-{:02}", next() % GROUPS);
                let size = (next() % 100_000) as i64;
                let user = next() % 5_000;
                let entry = expected.entry(group.clone()).or_default();
                entry.0 += 1;
                entry.1 += size;
                rows.push(json!({
                    // Above 2^53: must survive as an exact integer.
                    "id": 7_000_000_000_000_000_000_i64 + seq * 1_000_003,
                    "seq": seq,
                    "name": format!("item-{seq:05}"),
                    "group": group,
                    "size": size,
                    "active": next() % 3 != 0,
                    "score": (next() % 1_000_000) as f64 / 1_000.0 + 0.5,
                    "created_at": format!("2024-{:02}-{:02}T{:02}:{:02}:00Z", 1 + next() % 12, 1 + next() % 28, next() % 24, next() % 60),
                    "owner": {"login": format!("user{user}"), "id": user, "site_admin": user % 97 == 0},
                    "tags": (0..next() % 4).map(|t| format!("tag{}", (t + user) % 10)).collect::<Vec<_>>(),
                }));
            }
            let arm_rows: Vec<Value> = rows.iter().map(arm_row).collect();
            let arm_page = json!({"value": arm_rows, "nextLink": null});
            arm_pages.push(Bytes::from(arm_page.to_string()));
            s3_pages.push(Bytes::from(s3_page(&rows, page)));
            // `Value::to_string` cannot fail.
            pages.push(Bytes::from(Value::Array(rows).to_string()));
        }
        let first_row = pages
            .first()
            .and_then(|p| serde_json::from_slice::<Value>(p).ok())
            .and_then(|v| v.get(0).cloned())
            .unwrap_or(Value::Null);
        Dataset {
            pages,
            arm_pages,
            s3_pages,
            expected,
            first_row,
        }
    }

    fn total_bytes(&self) -> usize {
        self.pages.iter().map(Bytes::len).sum()
    }
}

/// Rows as one page (`page`, from 0) of an S3 ListObjectsV2 answer, with the token of the
/// next page while one follows.
fn s3_page(rows: &[Value], page: usize) -> String {
    let text = |row: &Value, key: &str| {
        row.get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let mut body = String::from(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bench-bucket</Name><Prefix></Prefix>"#,
    );
    let more = page + 1 < PAGES;
    body.push_str(&format!(
        "<KeyCount>{}</KeyCount><MaxKeys>{ROWS_PER_PAGE}</MaxKeys><IsTruncated>{more}</IsTruncated>",
        rows.len()
    ));
    if page > 0 {
        body.push_str(&format!(
            "<ContinuationToken>page-{}</ContinuationToken>",
            page + 1
        ));
    }
    if more {
        body.push_str(&format!(
            "<NextContinuationToken>page-{}</NextContinuationToken>",
            page + 2
        ));
    }
    for row in rows {
        let owner = row.get("owner").cloned().unwrap_or(Value::Null);
        body.push_str(&format!(
            "<Contents><Key>photos/2024/{}.jpg</Key><LastModified>{}</LastModified>\
             <ETag>&quot;{:032x}&quot;</ETag><ChecksumAlgorithm>CRC32</ChecksumAlgorithm>\
             <Size>{}</Size><StorageClass>{}</StorageClass>\
             <Owner><DisplayName>{}</DisplayName><ID>{:064x}</ID></Owner></Contents>",
            text(row, "name"),
            text(row, "created_at"),
            row.get("id").and_then(Value::as_i64).unwrap_or(0),
            row.get("size").and_then(Value::as_i64).unwrap_or(0),
            text(row, "group"),
            owner.get("login").and_then(Value::as_str).unwrap_or(""),
            owner.get("id").and_then(Value::as_u64).unwrap_or(0),
        ));
    }
    body.push_str("</ListBucketResult>");
    body
}

/// A row as an ARM list item: `name` at the top, the other fields under `properties`.
fn arm_row(row: &Value) -> Value {
    let mut properties = row.as_object().cloned().unwrap_or_default();
    let name = properties.remove("name").unwrap_or(Value::Null);
    json!({
        "id": format!("/subscriptions/s1/resourceGroups/rg1/providers/Bench/items/{}", name.as_str().unwrap_or("")),
        "name": name,
        "type": "Bench/items",
        "location": "westeurope",
        "properties": properties,
    })
}

fn check_engine_output(columns: &[String], rows: &[Vec<Cell>], expected: &Groups) -> Result<()> {
    ensure!(columns.len() == 3, "engine returned columns {columns:?}");
    let mut got = BTreeMap::new();
    for row in rows {
        match row.as_slice() {
            [Cell::Text(group), Cell::Integer(count), Cell::Integer(sum)] => {
                got.insert(group.clone(), (*count, *sum));
            }
            other => bail!("unexpected engine row {other:?}"),
        }
    }
    if &got != expected {
        let rows_seen: i64 = got.values().map(|(c, _)| c).sum();
        bail!(
            "engine result differs from the generated data: {} groups, {rows_seen} rows (expected 20 groups, 10000 rows)",
            got.len()
        );
    }
    Ok(())
}

/// Differences between the engine's row `seq = 0` and the generated one (empty = none).
async fn check_fidelity(engine: &Engine, cx: &ExecContext, row: &Value) -> Result<Vec<String>> {
    let sql = format!(
        "SELECT {} FROM bench.items.items WHERE seq = 0",
        quoted_columns().join(", ")
    );
    let out = engine
        .execute(cx, &sql)
        .await
        .map_err(|err| anyhow!("{err}"))?;
    let [cells] = out.rows.as_slice() else {
        bail!("expected one row for seq = 0, got {}", out.rows.len());
    };
    let mut notes = Vec::new();
    for (column, cell) in COLUMNS.iter().zip(cells) {
        let expected = match to_sql(row.get(*column)) {
            // The schema types `active` boolean: selected as it is, it comes back as a
            // boolean (StackQL gives true/false), though SQLite stores 1/0.
            SqlValue::Integer(i) if row.get(*column).is_some_and(Value::is_boolean) => {
                Cell::Boolean(i == 1)
            }
            SqlValue::Null => Cell::Null,
            SqlValue::Integer(i) => Cell::Integer(i),
            SqlValue::Real(f) => Cell::Real(f),
            SqlValue::Text(t) => Cell::Text(t),
            SqlValue::Blob(b) => Cell::Blob(b),
        };
        let same = match (&expected, cell) {
            // Nested JSON: compare as JSON, not text.
            (Cell::Text(a), Cell::Text(b)) if a.starts_with(['{', '[']) => {
                serde_json::from_str::<Value>(a).ok() == serde_json::from_str::<Value>(b).ok()
            }
            (a, b) => a == b,
        };
        if !same {
            notes.push(format!("{column}: engine {cell:?}, generated {expected:?}"));
        }
    }
    Ok(notes)
}

fn quoted_columns() -> Vec<String> {
    COLUMNS.iter().map(|c| format!("\"{c}\"")).collect()
}

// ---------------------------------------------------------------------------------------
// b. baseline
// ---------------------------------------------------------------------------------------

/// The GROUP BY result and the wall time spent in `serde_json::from_slice`.
fn baseline(pages: &[Bytes]) -> Result<(Groups, Duration)> {
    let mut parse = Duration::ZERO;
    let mut conn = rusqlite::Connection::open_in_memory()?;
    conn.execute_batch(&format!(
        "CREATE TABLE items ({})",
        quoted_columns().join(", ")
    ))?;
    let placeholders: Vec<String> = (1..=COLUMNS.len()).map(|i| format!("?{i}")).collect();
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare(&format!(
            "INSERT INTO items VALUES ({})",
            placeholders.join(", ")
        ))?;
        for page in pages {
            let started = Instant::now();
            let value: Value = serde_json::from_slice(page)?;
            parse += started.elapsed();
            let Value::Array(rows) = value else {
                bail!("page is not an array")
            };
            for row in &rows {
                for (i, column) in COLUMNS.iter().enumerate() {
                    bind(&mut insert, i + 1, row.get(*column))?;
                }
                insert.raw_execute()?;
            }
        }
    }
    tx.commit()?;
    let mut statement =
        conn.prepare(r#"SELECT "group", count(*), sum(size) FROM items GROUP BY "group""#)?;
    let groups = statement
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                (row.get::<_, i64>(1)?, row.get::<_, i64>(2)?),
            ))
        })?
        .collect::<rusqlite::Result<BTreeMap<_, _>>>()?;
    Ok((groups, parse))
}

/// Binds without copying strings; nested JSON is bound as its text (as the engine does).
fn bind(
    insert: &mut rusqlite::Statement<'_>,
    index: usize,
    value: Option<&Value>,
) -> rusqlite::Result<()> {
    match value {
        Some(Value::String(s)) => insert.raw_bind_parameter(index, s.as_str()),
        Some(Value::Bool(b)) => insert.raw_bind_parameter(index, i64::from(*b)),
        Some(Value::Number(n)) if n.is_i64() || n.is_f64() => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => insert.raw_bind_parameter(index, i),
            (None, Some(f)) => insert.raw_bind_parameter(index, f),
            _ => insert.raw_bind_parameter(index, SqlValue::Null),
        },
        other => insert.raw_bind_parameter(index, to_sql(other)),
    }
}

fn to_sql(value: Option<&Value>) -> SqlValue {
    match value {
        None | Some(Value::Null) => SqlValue::Null,
        Some(Value::Bool(b)) => SqlValue::Integer(i64::from(*b)),
        Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => SqlValue::Integer(i),
            (None, Some(f)) if !n.is_u64() => SqlValue::Real(f),
            _ => SqlValue::Text(n.to_string()),
        },
        Some(Value::String(s)) => SqlValue::Text(s.clone()),
        Some(nested) => SqlValue::Text(nested.to_string()),
    }
}

// ---------------------------------------------------------------------------------------
// Mock upstream
// ---------------------------------------------------------------------------------------

struct Mock {
    port: u16,
    tid: u32,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    done: mpsc::Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Clone)]
struct Pages {
    bodies: Arc<Vec<Bytes>>,
    links: Arc<Vec<Option<HeaderValue>>>,
}

#[derive(serde::Deserialize)]
struct PageQuery {
    page: Option<usize>,
}

async fn serve_page(State(pages): State<Pages>, Query(query): Query<PageQuery>) -> Response {
    let index = query.page.unwrap_or(1);
    let Some(body) = index.checked_sub(1).and_then(|i| pages.bodies.get(i)) else {
        return (StatusCode::NOT_FOUND, "no such page").into_response();
    };
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.clone(),
    )
        .into_response();
    if let Some(Some(link)) = pages.links.get(index - 1) {
        response.headers_mut().insert(header::LINK, link.clone());
    }
    response
}

impl Mock {
    fn start(bodies: Vec<Bytes>, arm_bodies: Vec<Bytes>, s3_bodies: Vec<Bytes>) -> Result<Mock> {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(u16, u32)>>();
        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("bench-mock".into())
            .spawn(move || {
                let served = mock_thread(bodies, arm_bodies, s3_bodies, &ready_tx, shutdown_rx);
                if let Err(err) = served {
                    // Start-up errors reach `start`; later ones are only printed.
                    if ready_tx.send(Err(anyhow!("{err:#}"))).is_err() {
                        eprintln!("mock upstream stopped: {err:#}");
                    }
                }
                let _ = done_tx.send(());
            })?;
        let (port, tid) = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .context("mock upstream did not start")??;
        Ok(Mock {
            port,
            tid,
            shutdown: Some(shutdown_tx),
            done: done_rx,
            thread: Some(thread),
        })
    }

    fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        // Bounded: if a client still holds a keep-alive connection we do not wait for it.
        if self.done.recv_timeout(Duration::from_secs(3)).is_ok()
            && let Some(thread) = self.thread.take()
        {
            let _ = thread.join();
        }
    }
}

/// `bodies` as the pages of `path`, each linked to the next with `Link: <…>; rel="next"`.
fn linked_pages(port: u16, path: &str, bodies: Vec<Bytes>) -> Result<Pages> {
    let count = bodies.len();
    let links = (1..=count)
        .map(|n| {
            (n < count)
                .then(|| {
                    HeaderValue::from_str(&format!(
                        "<http://127.0.0.1:{port}{path}?page={}>; rel=\"next\"",
                        n + 1
                    ))
                })
                .transpose()
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Pages {
        bodies: Arc::new(bodies),
        links: Arc::new(links),
    })
}

/// An S3 ListObjectsV2 page: the first, or the one `continuation-token=page-N` names.
async fn serve_s3_page(
    State(pages): State<Arc<Vec<Bytes>>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let index = match query.get("continuation-token") {
        None => Some(1),
        Some(token) => token
            .strip_prefix("page-")
            .and_then(|n| n.parse::<usize>().ok()),
    };
    let Some(body) = index
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| pages.get(i))
    else {
        return (StatusCode::NOT_FOUND, "no such page").into_response();
    };
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/xml"),
        )],
        body.clone(),
    )
        .into_response()
}

fn mock_thread(
    bodies: Vec<Bytes>,
    arm_bodies: Vec<Bytes>,
    s3_bodies: Vec<Bytes>,
    ready: &mpsc::Sender<Result<(u16, u32)>>,
    shutdown: tokio::sync::oneshot::Receiver<()>,
) -> Result<()> {
    let tid = current_tid()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let s3_pages = Arc::new(s3_bodies);
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let app = axum::Router::new()
            .route("/s3", axum::routing::get(serve_s3_page))
            .with_state(s3_pages)
            .route("/items", axum::routing::get(serve_page))
            .with_state(linked_pages(port, "/items", bodies)?)
            .merge(
                axum::Router::new()
                    .route("/arm", axum::routing::get(serve_page))
                    .with_state(linked_pages(port, "/arm", arm_bodies)?),
            );
        ready
            .send(Ok((port, tid)))
            .map_err(|_| anyhow!("benchmark went away"))?;
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.await;
            })
            .await?;
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// CPU accounting
// ---------------------------------------------------------------------------------------

fn current_tid() -> Result<u32> {
    let link = std::fs::read_link("/proc/thread-self").context("reading /proc/thread-self")?;
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| anyhow!("unexpected /proc/thread-self target {}", link.display()))
}

fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_ascii_whitespace().next()?.parse().ok()
}

fn thread_cpu_ns(tid: u32) -> Option<u64> {
    parse_schedstat(&std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?)
}

fn thread_ids() -> Result<Vec<u32>> {
    let mut tids = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|n| n.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

/// procfs reports a running thread's `sum_exec_runtime` as of its last deschedule or tick
/// (4 ms at HZ=250); blocking briefly brings the calling thread's own counter up to date.
fn settle() {
    std::thread::sleep(Duration::from_micros(50));
}

fn cpu_snapshot() -> Result<HashMap<u32, u64>> {
    settle();
    Ok(thread_ids()?
        .into_iter()
        .filter_map(|tid| Some((tid, thread_cpu_ns(tid)?)))
        .collect())
}

/// utime + stime of the whole process in clock ticks (includes exited threads).
fn process_stat_ticks() -> Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("odd /proc/self/stat"))?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // After "pid (comm)": state is field 3, utime 14, stime 15 (1-based) → indices 11, 12.
    let utime: u64 = fields
        .get(11)
        .ok_or_else(|| anyhow!("short /proc/self/stat"))?
        .parse()?;
    let stime: u64 = fields
        .get(12)
        .ok_or_else(|| anyhow!("short /proc/self/stat"))?
        .parse()?;
    Ok(utime + stime)
}

struct CpuSample {
    /// CPU of all threads except the excluded ones and the probe.
    cpu_ns: u64,
    /// CPU of the excluded threads (the mock).
    excluded_ns: u64,
    /// Threads that exited during the query, and their CPU (included in `cpu_ns`).
    exited: usize,
    exited_ns: u64,
    /// The probe thread's own CPU.
    probe_ns: u64,
}

struct CpuProbe {
    before: HashMap<u32, u64>,
    excluded: Vec<u32>,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<ProbeResult>>,
    probe_tid: u32,
}

struct ProbeResult {
    last_seen: HashMap<u32, u64>,
    own_ns: u64,
}

/// Polls threads that appear after `start` so that CPU of threads exiting before `finish`
/// is still counted (up to one poll interval is lost per exiting thread).
const POLL: Duration = Duration::from_micros(250);
const LIST_EVERY: u32 = 4;
const MAX_POLLS: u32 = 240_000; // 60 s

impl CpuProbe {
    fn start(excluded: &[u32]) -> Result<CpuProbe> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tid_tx, tid_rx) = mpsc::channel();
        let known: HashSet<u32> = thread_ids()?.into_iter().collect();
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("bench-cpu-probe".into())
            .spawn(move || {
                let me = current_tid()?;
                tid_tx
                    .send(me)
                    .map_err(|_| anyhow!("probe owner went away"))?;
                probe_loop(me, &known, &flag)
            })?;
        let probe_tid = tid_rx
            .recv_timeout(Duration::from_secs(5))
            .context("probe did not start")?;
        // Snapshot after the probe exists so that its start-up is not attributed to anything.
        let before = cpu_snapshot()?;
        Ok(CpuProbe {
            before,
            excluded: excluded.to_vec(),
            stop,
            handle,
            probe_tid,
        })
    }

    fn finish(self) -> Result<CpuSample> {
        let after = cpu_snapshot()?;
        self.stop.store(true, Ordering::Relaxed);
        let probed = self
            .handle
            .join()
            .map_err(|_| anyhow!("probe thread panicked"))??;
        let mut last = probed.last_seen;
        let (mut exited, mut exited_ns) = (0, 0);
        for (tid, ns) in &last {
            if !after.contains_key(tid) {
                exited += 1;
                exited_ns += ns.saturating_sub(self.before.get(tid).copied().unwrap_or(0));
            }
        }
        last.extend(after);
        let (mut cpu_ns, mut excluded_ns) = (0, 0);
        for (tid, ns) in last {
            if tid == self.probe_tid {
                continue;
            }
            let delta = ns.saturating_sub(self.before.get(&tid).copied().unwrap_or(0));
            if self.excluded.contains(&tid) {
                excluded_ns += delta;
            } else {
                cpu_ns += delta;
            }
        }
        Ok(CpuSample {
            cpu_ns,
            exited,
            exited_ns,
            excluded_ns,
            probe_ns: probed.own_ns,
        })
    }
}

fn probe_loop(me: u32, known: &HashSet<u32>, stop: &AtomicBool) -> Result<ProbeResult> {
    let mut open: Vec<(u32, File)> = Vec::new();
    let mut last_seen = HashMap::new();
    let mut watched: HashSet<u32> = HashSet::new();
    let mut buf = String::with_capacity(64);
    for poll in 0..MAX_POLLS {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if poll % LIST_EVERY == 0 {
            for tid in thread_ids()? {
                if tid != me
                    && !known.contains(&tid)
                    && watched.insert(tid)
                    && let Ok(file) = File::open(format!("/proc/self/task/{tid}/schedstat"))
                {
                    open.push((tid, file));
                }
            }
        }
        open.retain_mut(|(tid, file)| {
            buf.clear();
            let read = file
                .seek(SeekFrom::Start(0))
                .and_then(|_| file.read_to_string(&mut buf));
            match read.ok().and_then(|_| parse_schedstat(&buf)) {
                Some(ns) => {
                    last_seen.insert(*tid, ns);
                    true
                }
                None => false, // the thread has exited
            }
        });
        std::thread::sleep(POLL);
    }
    let own_ns = thread_cpu_ns(me).unwrap_or(0);
    Ok(ProbeResult { last_seen, own_ns })
}

// ---------------------------------------------------------------------------------------
// Reporting helpers
// ---------------------------------------------------------------------------------------

struct Stats {
    median: f64,
    min: f64,
}

impl Stats {
    fn of(values: &[u64]) -> Stats {
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        let median = match sorted.len() {
            0 => 0.0,
            n if n % 2 == 1 => sorted[n / 2] as f64,
            n => (sorted[n / 2 - 1] + sorted[n / 2]) as f64 / 2.0,
        };
        Stats {
            median,
            min: sorted.first().copied().unwrap_or_default() as f64,
        }
    }
}

fn ms(ns: f64) -> f64 {
    ns / 1e6
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn kib_to_mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn print_stats(label: &str, stats: &Stats) {
    println!(
        "   {label:<42} median {:>8.2} ms   min {:>8.2} ms",
        ms(stats.median),
        ms(stats.min)
    );
}

fn verdict(label: &str, value: String, pass: bool) {
    println!(
        "   [{}] {label:<44} {value}",
        if pass { "PASS" } else { "MISS" }
    );
}

/// A `kB` field of /proc/self/status.
fn vm_status(field: &str) -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| anyhow!("{field} missing from /proc/self/status"))
}
