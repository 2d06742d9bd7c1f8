//! The first and cached discovery cost of a large provider document (github's `activity.yaml`).

use super::*;

/// Returns (first parse ns, median cached ns), or None when the registry is missing.
pub(crate) fn discovery_bench(
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

pub(crate) fn file_mib(provider_dir: &Path, service: &str) -> f64 {
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
pub(crate) type Groups = BTreeMap<String, (i64, i64)>;
