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

mod baseline;
mod cpu;
mod dataset;
mod discovery;
mod mock;
mod report;
use baseline::*;
use cpu::*;
use dataset::*;
use discovery::*;
use mock::*;
use report::*;

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
