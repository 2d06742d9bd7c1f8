//! MCP load benchmark: `cargo bench --bench mcp_load`.
//!
//! Three threads, each with its own single-threaded tokio runtime:
//! - `qg-full`: the whole `querygate serve`, built by `App` as the CLI builds it (HTTP stage,
//!   handler, tool-call stage and engine) on 127.0.0.1, stateless;
//! - `qg-bare`: a bare rmcp `ServerHandler` that lists querygate's tools and answers every
//!   call with the `server_info` result querygate gave (precomputed), behind a
//!   `StreamableHttpService` configured exactly as `querygate::http::mcp::service` configures it — rmcp's
//!   own handling of the same call, answered with the same bytes, none of our layers;
//! - `bench-mock`: an axum mock upstream answering `bench.items.items` (fixture provider
//!   under `benches/fixtures/registry`) with 100 JSON rows;
//!
//! - `qg-mtls` and `qg-jwt`: the same `querygate serve` over HTTPS, authenticating a client
//!   certificate (mTLS) or an ES256 bearer token (certificates and keys generated per run);
//! - `qg-tenants`: the JWT server with two tenants, `acme` under per-tenant limits and
//!   `globex` without: globex's latency alone and while acme sends past its limits (a
//!   bounded open-loop load at ten times its rate, clients honouring `Retry-After`, clients
//!   ignoring it), acme's load sent from its own runtime thread (`bench-flood`);
//!
//! and a load generator (reqwest, keep-alive, HTTP/1.1) on another runtime thread. Every call
//! is a raw JSON-RPC POST of MCP 2026-07-28 (per-request `_meta`, `Mcp-Method`/`Mcp-Name`
//! headers; no handshake). Per point: `WARMUP` of calls, then `POINT` of measured calls, at
//! 1, 8 and 64 concurrent clients; requests/s and p50/p99 latency.
//!
//! Server CPU per call is the growth of the server threads' `sum_exec_runtime`
//! (`/proc/self/task/*/schedstat`, threads named like the server) over the measured calls,
//! divided by their number: the server's own CPU, without the load generator's or the
//! mock's. The ratio full/bare for `server_info` is what our layers cost on top of rmcp's
//! handling of the same call (target: at most 1.25).
//!
//! - `qg-file` and `qg-governed` (section `governed`, only with a PostgreSQL server named by
//!   `QUERYGATE_TEST_DATABASE_URL`, as `scripts/pg-test-cluster.sh run --` gives): the same
//!   calls over plain HTTP without authentication, audited to a file (strict), against HTTPS
//!   with an ES256 bearer token, mode `safe` (the gate), the audit and the approval store in
//!   PostgreSQL: what governance adds to a call's p99 (target: at most 1 ms);
//!
//! Sections: `calls` (full querygate against bare rmcp), `tls` (plain HTTP, mTLS, JWT),
//! `tenants` (isolation under per-tenant limits) and `governed`; `cargo bench --bench mcp_load
//! -- tenants` runs only the named ones, no name runs all (`governed` skipped without a
//! database).

/// The server binary's allocator (see `src/main.rs`), so figures are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use axum::http::{HeaderMap, HeaderValue, header};
use bytes::Bytes;
use querygate::app::App;
use querygate::config::{Config, Sources};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const CONCURRENCY: [usize; 3] = [1, 8, 64];
const WARMUP: Duration = Duration::from_millis(500);
const POINT: Duration = Duration::from_secs(3);
const ROWS: usize = 100;
const SELECT: &str = r#"SELECT id, name, "group", size, active, score FROM bench.items.items"#;
/// A full-stack call may cost at most this much server CPU relative to rmcp's own handling.
const TARGET_RATIO: f64 = 1.25;
const PROTOCOL: &str = "2026-07-28";
/// The name of the engine's threads that hold statements' SQLite databases.
const SQLITE_THREADS: &str = "querygate-sqlite";

#[expect(
    clippy::too_many_lines,
    reason = "starts the three server threads and runs each scenario, printing figures in order"
)]
fn main() -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let crate_root = Path::new(env!("CARGO_MANIFEST_DIR"));
    println!("querygate MCP load benchmark (cargo bench --bench mcp_load)");
    println!(
        "  {} cores; {} warm-up + {} measured per point; MCP {PROTOCOL} JSON-RPC POSTs over keep-alive HTTP/1.1",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        humantime::format_duration(WARMUP),
        humantime::format_duration(POINT)
    );

    let mock = Background::start("bench-mock", mock_router)?;
    let dir = tempfile::tempdir()?;
    let config_path = dir.path().join("querygate.yaml");
    std::fs::write(
        &config_path,
        format!(
            "registry:\n  root: {}\nproviders:\n  bench:\n    base_url: http://{}\ncredentials:\n  process_env: false\ntenants:\n  - id: default\n    mode: read_only\naudit:\n  enabled: false\nserver:\n  listen: 127.0.0.1:0\n  drain:\n    delay: 0s\n",
            crate_root.join("benches/fixtures/registry").display(),
            mock.addr
        ),
    )?;
    // Audit is off here: this benchmark measures the MCP layers (the audit sinks have
    // their own, `cargo bench --bench audit`).
    let base_yaml = std::fs::read_to_string(&config_path)?;
    let full = Background::start_app(
        "qg-full",
        move || async move { full_app(&config_path).await },
    )?;
    let pki = Pki::new(dir.path())?;
    let mtls_config = dir.path().join("querygate-mtls.yaml");
    std::fs::write(
        &mtls_config,
        format!(
            "{}  tls:\n    cert_file: {}\n    key_file: {}\n    client_ca_file: {}\nauth:\n  mtls:\n    identities:\n      \"uri:spiffe://bench/agent\": default\n",
            base_yaml,
            pki.server_cert.display(),
            pki.server_key.display(),
            pki.ca_file.display(),
        ),
    )?;
    let jwt_config = dir.path().join("querygate-jwt.yaml");
    std::fs::write(
        &jwt_config,
        format!(
            "{}  tls:\n    cert_file: {}\n    key_file: {}\nauth:\n  resource: https://bench.test/mcp\n  jwt:\n    issuers:\n      - issuer: https://idp.bench.test\n        public_keys: [{}]\n        algorithms: [ES256]\n        tenants: [default]\n",
            base_yaml,
            pki.server_cert.display(),
            pki.server_key.display(),
            pki.jwt_public.display(),
        ),
    )?;
    let jwt_yaml = std::fs::read_to_string(&jwt_config)?;
    // Two tenants behind JWT: acme with per-tenant limits, globex without.
    let tenants_config = dir.path().join("querygate-tenants.yaml");
    std::fs::write(
        &tenants_config,
        jwt_yaml
            .replace(
                "tenants:\n  - id: default\n    mode: read_only\n",
                "tenants:\n  - id: default\n    mode: read_only\n  - id: acme\n    mode: read_only\n    limits:\n      requests_per_second: 100\n      burst: 10\n      max_in_flight: 2\n  - id: globex\n    mode: read_only\n",
            )
            .replace("        tenants: [default]\n", "        tenants: [acme, globex]\n"),
    )?;
    let mut mtls =
        Background::start_app(
            "qg-mtls",
            move || async move { full_app(&mtls_config).await },
        )?;
    mtls.scheme = "https";
    let mut jwt =
        Background::start_app("qg-jwt", move || async move { full_app(&jwt_config).await })?;
    jwt.scheme = "https";
    jwt.token = Some(pki.token("default")?);
    let mut tenants = Background::start_app("qg-tenants", move || async move {
        full_app(&tenants_config).await
    })?;
    tenants.scheme = "https";
    tenants.token = Some(pki.token("globex")?);
    let flooder = pki.token("acme")?;
    let mtls_client = pki.client(true)?;
    let tls_client = pki.client(false)?;
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-load")
        .enable_all()
        .build()?;
    let client = reqwest::Client::builder()
        .http1_only()
        .pool_max_idle_per_host(256)
        .build()?;

    // The baseline answers the same call with the same bytes: querygate's own tool list
    // and `server_info` result, replayed by a bare rmcp handler.
    let (tools, reply) = client_rt.block_on(async {
        let listed = post(&client, &full, "tools/list", json!({})).await?;
        let tools: Vec<Tool> = serde_json::from_value(listed["result"]["tools"].clone())?;
        let info = call_once(&client, &full, "server_info", json!({})).await?;
        let reply: CallToolResult = serde_json::from_value(info["result"].clone())?;
        Ok::<_, anyhow::Error>((tools, reply))
    })?;
    let bare = Background::start("qg-bare", move |addr, shutdown| {
        bare_router(addr, shutdown, tools, reply)
    })?;

    // Sanity: each server answers each call correctly before any load.
    let checks = client_rt.block_on(async {
        let info = call_once(&client, &full, "server_info", json!({})).await?;
        ensure!(
            info["result"]["structuredContent"]["transport"] == "http",
            "server_info: {info}"
        );
        let rows = call_once(&client, &full, "run_select_query", json!({"sql": SELECT})).await?;
        let n = rows["result"]["structuredContent"]["rows"]
            .as_array()
            .map_or(0, Vec::len);
        ensure!(n == ROWS, "run_select_query returned {n} rows: {rows}");
        let bare_info = call_once(&client, &bare, "server_info", json!({})).await?;
        ensure!(
            bare_info["result"]["content"] == info["result"]["content"]
                && bare_info["result"]["structuredContent"] == info["result"]["structuredContent"],
            "bare: {bare_info}"
        );
        Ok(())
    });
    let tls_checks = client_rt.block_on(async {
        for (client, server) in [(&mtls_client, &mtls), (&tls_client, &jwt)] {
            let info = call_once(client, server, "server_info", json!({})).await?;
            ensure!(
                info["result"]["structuredContent"]["tenant"] == "default",
                "{}: {info}",
                server.name
            );
        }
        Ok(())
    });
    let sections = Sections::from_args();
    let outcome = checks
        .and(tls_checks)
        .and_then(|()| {
            if !sections.wants("calls") {
                return Ok(());
            }
            run(&client_rt, &client, &full, &bare)
        })
        .and_then(|()| {
            if !sections.wants("tls") {
                return Ok(());
            }
            run_tls(
                &client_rt,
                &[(&client, &full), (&mtls_client, &mtls), (&tls_client, &jwt)],
            )
        })
        .and_then(|()| {
            if !sections.wants("tenants") {
                return Ok(());
            }
            let acme = Acme {
                rt: tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name(FLOOD_THREADS)
                    .enable_all()
                    .build()?,
                client: pki.client(false)?,
                token: flooder,
            };
            run_tenants(&client_rt, &tls_client, &tenants, acme)
        })
        .and_then(|()| {
            if !sections.wants("governed") {
                return Ok(());
            }
            let Some(database) = std::env::var("QUERYGATE_TEST_DATABASE_URL")
                .ok()
                .filter(|url| !url.is_empty())
            else {
                ensure!(
                    !sections.named("governed"),
                    "the governed section needs PostgreSQL: scripts/pg-test-cluster.sh run -- cargo bench --bench mcp_load -- governed"
                );
                println!();
                println!(
                    "governed: skipped (no QUERYGATE_TEST_DATABASE_URL; scripts/pg-test-cluster.sh run -- cargo bench --bench mcp_load -- governed)"
                );
                return Ok(());
            };
            let configs = governed_configs(dir.path(), &jwt_yaml, &database)?;
            run_governed(&client_rt, &client, &tls_client, &configs, pki.token("default")?)
        });
    drop(client);
    drop(mtls_client);
    drop(tls_client);
    drop(client_rt);
    mtls.stop();
    jwt.stop();
    tenants.stop();
    full.stop();
    bare.stop();
    mock.stop();
    outcome
}

fn run(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    full: &Background,
    bare: &Background,
) -> Result<()> {
    let info_args = json!({});
    let select_args = json!({"sql": SELECT});
    println!();
    println!(
        "{:<44} {:>5} {:>9} {:>9} {:>9} {:>12}",
        "server / tool", "conc", "req/s", "p50 ms", "p99 ms", "CPU µs/call"
    );
    let mut ratios = Vec::new();
    for c in CONCURRENCY {
        let f = point(rt, client, full, "server_info", &info_args, c)?;
        let b = point(rt, client, bare, "server_info", &info_args, c)?;
        f.print("full querygate / server_info", c);
        b.print("bare rmcp, same reply / server_info", c);
        ratios.push((
            c,
            f.cpu_per_call_us() / b.cpu_per_call_us().max(f64::MIN_POSITIVE),
        ));
    }
    for c in CONCURRENCY {
        let s = point(rt, client, full, "run_select_query", &select_args, c)?;
        s.print(
            &format!("full querygate / run_select_query ({ROWS} rows)"),
            c,
        );
    }
    println!();
    println!(
        "server CPU per call, full querygate server_info / bare rmcp (target <= {TARGET_RATIO:.2}):"
    );
    for (c, ratio) in ratios {
        let verdict = if ratio <= TARGET_RATIO {
            "meets the target"
        } else {
            "MISSES the target"
        };
        println!(
            "  c={c:<3} ratio {ratio:.2} (+{:.0}%)  {verdict}",
            (ratio - 1.0) * 100.0
        );
    }
    println!(
        "  (CPU = the server threads' schedstat growth over the measured calls; the load generator and the mock are not counted)"
    );
    println!(
        "  (run_select_query's CPU: the server thread, then with the engine's querygate-sqlite threads that outlive their statements)"
    );
    Ok(())
}

/// `server_info` over plain HTTP, HTTPS with a client certificate and HTTPS with a JWT,
/// each a whole querygate on one thread; keep-alive, so each connection pays its handshake
/// once (in the warm-up).
fn run_tls(
    rt: &tokio::runtime::Runtime,
    servers: &[(&reqwest::Client, &Background)],
) -> Result<()> {
    println!();
    println!(
        "{:<44} {:>5} {:>9} {:>9} {:>9} {:>12}",
        "transport / server_info", "conc", "req/s", "p50 ms", "p99 ms", "CPU µs/call"
    );
    let args = json!({});
    for c in CONCURRENCY {
        for (client, server) in servers {
            let label = match server.name {
                "qg-mtls" => "https + mTLS (client certificate)",
                "qg-jwt" => "https + JWT bearer (ES256)",
                _ => "plain http, no authentication",
            };
            point(rt, client, server, "server_info", &args, c)?.print(label, c);
        }
    }
    Ok(())
}

/// The configurations of the `governed` section: `file` (plain HTTP, no authentication,
/// mode `read_only`, the audit in a file, strict) and `governed` (HTTPS with an ES256 bearer
/// token, mode `safe`, the audit (strict) and the approval store in PostgreSQL at `database`,
/// migrated at start).
struct GovernedConfigs {
    file: std::path::PathBuf,
    governed: std::path::PathBuf,
}

fn governed_configs(dir: &Path, jwt_yaml: &str, database: &str) -> Result<GovernedConfigs> {
    const AUDIT_OFF: &str = "audit:\n  enabled: false\n";
    ensure!(
        jwt_yaml.contains(AUDIT_OFF) && jwt_yaml.contains("    mode: read_only\n"),
        "the benchmark's base configuration changed: {jwt_yaml}"
    );
    let file = dir.join("querygate-file.yaml");
    let plain = jwt_yaml
        .split("  tls:\n")
        .next()
        .ok_or_else(|| anyhow!("no tls section"))?;
    std::fs::write(
        &file,
        plain.replace(
            AUDIT_OFF,
            &format!(
                "audit:\n  failure_mode: strict\n  file:\n    dir: {}\n",
                dir.join("audit").display()
            ),
        ),
    )?;
    let governed = dir.join("querygate-governed.yaml");
    std::fs::write(
        &governed,
        format!(
            "{}database:\n  url: {database}\n  migrate_on_start: true\napproval:\n  store: postgres\n",
            jwt_yaml
                .replace("    mode: read_only\n", "    mode: safe\n")
                .replace(
                    AUDIT_OFF,
                    "audit:\n  failure_mode: strict\n  sink: postgres\n"
                )
        ),
    )?;
    Ok(GovernedConfigs { file, governed })
}

/// What governance adds to a call: `server_info` and the 100-row select at 1 and 8 clients,
/// against the file-audited server without authentication and the governed one (JWT over
/// HTTPS, the gate in mode `safe`, PostgreSQL audit and approval store), point after point.
/// Target: p99 at most [`GOVERNED_P99_MS`] more.
fn run_governed(
    rt: &tokio::runtime::Runtime,
    plain_client: &reqwest::Client,
    tls_client: &reqwest::Client,
    configs: &GovernedConfigs,
    token: String,
) -> Result<()> {
    let (file_config, governed_config) = (configs.file.clone(), configs.governed.clone());
    let file = Background::start_app(
        "qg-file",
        move || async move { full_app(&file_config).await },
    )?;
    let mut governed = Background::start_app("qg-governed", move || async move {
        full_app(&governed_config).await
    })?;
    governed.scheme = "https";
    governed.token = Some(token);
    let outcome = (|| -> Result<()> {
        rt.block_on(async {
            for (client, server) in [(plain_client, &file), (tls_client, &governed)] {
                let rows =
                    call_once(client, server, "run_select_query", json!({"sql": SELECT})).await?;
                let n = rows["result"]["structuredContent"]["rows"]
                    .as_array()
                    .map_or(0, Vec::len);
                ensure!(
                    n == ROWS,
                    "{}: run_select_query returned {n} rows: {rows}",
                    server.name
                );
            }
            Ok(())
        })?;
        println!();
        println!(
            "{:<44} {:>5} {:>9} {:>9} {:>9} {:>12}",
            "governed / tool", "conc", "req/s", "p50 ms", "p99 ms", "CPU µs/call"
        );
        let mut added = Vec::new();
        for (tool, args) in [
            ("server_info", json!({})),
            ("run_select_query", json!({"sql": SELECT})),
        ] {
            for c in [1, 8] {
                let f = point(rt, plain_client, &file, tool, &args, c)?;
                let g = point(rt, tls_client, &governed, tool, &args, c)?;
                f.print(&format!("http, file audit / {tool}"), c);
                g.print(&format!("https + JWT, safe, PostgreSQL / {tool}"), c);
                added.push((tool, c, (g.p99_ms() - f.p99_ms())));
            }
        }
        println!();
        println!(
            "p99 added by JWT over HTTPS, the gate, PostgreSQL audit and approvals (target <= {GOVERNED_P99_MS:.1} ms):"
        );
        for (tool, c, ms) in added {
            let verdict = if ms <= GOVERNED_P99_MS {
                "meets the target"
            } else {
                "MISSES the target"
            };
            println!("  {tool:<17} c={c:<3} {ms:+.3} ms  {verdict}");
        }
        Ok(())
    })();
    file.stop();
    governed.stop();
    outcome
}

/// The p99 that governance may add to a call, in milliseconds (issue 32).
const GOVERNED_P99_MS: f64 = 1.0;

/// Per-tenant limits keep one tenant's load from slowing another. globex (no limits) calls
/// `server_info` from `CLIENTS` clients back to back on `bench-load`, alone and then while
/// acme (100 req/s, burst 10, 2 in flight) sends from its own runtime (`bench-flood`, one
/// worker, its own connections): a bounded open-loop load at ten times its rate, clients
/// that honour `Retry-After`, and clients that ignore it (adversarial). Last, acme's
/// adversarial load alone: what its answers, nearly all `429`, cost the server.
#[expect(
    clippy::too_many_lines,
    reason = "one load run per tenant mix, setting up, measuring and printing its figures in order"
)]
fn run_tenants(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    server: &Background,
    acme: Acme,
) -> Result<()> {
    const CLIENTS: usize = 4;
    const FLOODERS: usize = 32;
    let loads = [
        AcmeLoad::Open {
            per_second: 1000,
            outstanding: 64,
        },
        AcmeLoad::Honouring { clients: FLOODERS },
        AcmeLoad::Flood { clients: FLOODERS },
    ];
    println!();
    println!(
        "{:<44} {:>5} {:>9} {:>9} {:>9} {:>12}",
        "tenant isolation / globex server_info", "conc", "req/s", "p50 ms", "p99 ms", "CPU µs/call"
    );
    let args = json!({});
    let cpu0 = Cpu::now(server.name)?;
    let start = Instant::now();
    let alone = point(rt, client, server, "server_info", &args, CLIENTS)?;
    let alone_cpu = Cpu::now(server.name)?.since(&cpu0, start.elapsed());
    alone.print("globex alone", CLIENTS);
    let mut acme_request = request(server, "server_info", &args)?;
    acme_request.headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {}", acme.token))?,
    );
    let acme_request = Arc::new(acme_request);
    let mut runs = Vec::new();
    for load in loads {
        let counts = Arc::new(AcmeCounts::default());
        let stop = CancellationToken::new();
        let cpu0 = Cpu::now(server.name)?;
        let start = Instant::now();
        let sending = acme.rt.spawn(acme_load(
            acme.client.clone(),
            acme_request.clone(),
            load,
            counts.clone(),
            stop.clone(),
        ));
        let loaded = point(rt, client, server, "server_info", &args, CLIENTS);
        stop.cancel();
        acme.rt.block_on(sending)?;
        let cpu = Cpu::now(server.name)?.since(&cpu0, start.elapsed());
        let loaded = loaded?;
        counts.check()?;
        // The point's server CPU per call counts acme's requests too.
        loaded.print(&format!("globex + acme {}", load.label()), CLIENTS);
        runs.push((load, loaded, counts, cpu));
    }

    // acme's adversarial load alone, measured after a warm-up like a point.
    let counts = Arc::new(AcmeCounts::default());
    let stop = CancellationToken::new();
    let sending = acme.rt.spawn(acme_load(
        acme.client.clone(),
        acme_request.clone(),
        AcmeLoad::Flood { clients: FLOODERS },
        counts.clone(),
        stop.clone(),
    ));
    std::thread::sleep(WARMUP);
    let (served0, limited0, _, _) = counts.get();
    let cpu0 = Cpu::now(server.name)?;
    let start = Instant::now();
    std::thread::sleep(POINT);
    let (served1, limited1, _, _) = counts.get();
    let cpu = Cpu::now(server.name)?.since(&cpu0, start.elapsed());
    stop.cancel();
    acme.rt.block_on(sending)?;
    counts.check()?;

    let p99 = |p: &Point| percentile(&p.latencies, 0.99) / 1e6;
    println!(
        "  globex: {CLIENTS} clients back to back on bench-load (1 worker thread); acme: limits 100 req/s, burst 10, 2 in flight, sent from {FLOOD_THREADS} (1 worker thread)"
    );
    println!(
        "  globex alone: p99 {:.3} ms; CPU in % of one core: {}",
        p99(&alone),
        alone_cpu
    );
    for (load, loaded, counts, cpu) in &runs {
        let (served, limited, skipped, _) = counts.get();
        let seconds = cpu.seconds;
        let skipped = if matches!(load, AcmeLoad::Open { .. }) {
            format!(", {skipped} not sent (too many unanswered)")
        } else {
            String::new()
        };
        println!(
            "  acme {}: {:.0} served/s, {:.0} answered 429/s{skipped}; globex p99 {:.3} ms ({:+.0}% vs alone; target at most +20%); CPU in % of one core: {cpu}",
            load.label(),
            served as f64 / seconds,
            limited as f64 / seconds,
            p99(loaded),
            (p99(loaded) / p99(&alone) - 1.0) * 100.0,
        );
    }
    let (served, limited) = (served1 - served0, limited1 - limited0);
    let per_answer = cpu.server_ns as f64 / 1e3 / (served + limited).max(1) as f64;
    let per_refusal = (cpu.server_ns as f64 / 1e3 - served as f64 * alone.cpu_per_call_us())
        / limited.max(1) as f64;
    println!(
        "  acme alone, {FLOODERS} clients ignoring Retry-After: {:.0} served/s, {:.0} answered 429/s; server CPU {per_answer:.1} µs per answer, about {per_refusal:.1} µs per 429 (served calls counted at globex's figure); CPU in % of one core: {cpu}",
        served as f64 / cpu.seconds,
        limited as f64 / cpu.seconds,
    );
    println!(
        "  (CPU: schedstat growth of the server thread {} and of the load generators' threads bench-load and {FLOOD_THREADS}, over the whole run including the warm-up; the machine has {} cores)",
        server.name,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    Ok(())
}

/// The name of the threads of the runtime that sends acme's load in the tenant section (one
/// worker), apart from globex's measuring client on `bench-load`.
const FLOOD_THREADS: &str = "bench-flood";

/// CPU of the server's thread and of both load generators' threads.
struct Cpu {
    server_ns: u64,
    globex_client_ns: u64,
    acme_client_ns: u64,
    /// Wall time the growth was measured over, in seconds (0 for a snapshot).
    seconds: f64,
}

impl Cpu {
    fn now(server: &str) -> Result<Cpu> {
        Ok(Cpu {
            server_ns: threads_cpu_ns(server)?,
            globex_client_ns: threads_cpu_ns("bench-load")?,
            acme_client_ns: threads_cpu_ns(FLOOD_THREADS)?,
            seconds: 0.0,
        })
    }

    /// The growth since `before`, over `elapsed`.
    fn since(self, before: &Cpu, elapsed: Duration) -> Cpu {
        Cpu {
            server_ns: self.server_ns.saturating_sub(before.server_ns),
            globex_client_ns: self
                .globex_client_ns
                .saturating_sub(before.globex_client_ns),
            acme_client_ns: self.acme_client_ns.saturating_sub(before.acme_client_ns),
            seconds: elapsed.as_secs_f64(),
        }
    }
}

impl std::fmt::Display for Cpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let share = |ns: u64| ns as f64 / 1e9 / self.seconds.max(f64::MIN_POSITIVE) * 100.0;
        write!(
            f,
            "server {:.0}%, globex's client {:.0}%, acme's client {:.0}%",
            share(self.server_ns),
            share(self.globex_client_ns),
            share(self.acme_client_ns)
        )
    }
}

/// The sections of this benchmark to run: `cargo bench --bench mcp_load -- tenants` runs only
/// the named ones (`calls`, `tls`, `tenants`); no name: all.
struct Sections(Vec<String>);

impl Sections {
    fn from_args() -> Sections {
        Sections(
            std::env::args()
                .skip(1)
                .filter(|a| !a.starts_with('-'))
                .collect(),
        )
    }

    fn wants(&self, section: &str) -> bool {
        self.0.is_empty() || self.named(section)
    }

    /// Whether `section` was asked for by name.
    fn named(&self, section: &str) -> bool {
        self.0.iter().any(|s| s == section)
    }
}

/// The tenant over its limits: its own client runtime (`bench-flood`, one worker), its own
/// connection pool and its token.
struct Acme {
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
    token: String,
}

/// How acme sends `server_info` during a tenant-isolation point.
#[derive(Clone, Copy, Debug)]
enum AcmeLoad {
    /// A bounded over-rate load: `per_second` requests on a fixed schedule whatever the
    /// answers (open loop), at most `outstanding` unanswered at once.
    Open { per_second: u32, outstanding: usize },
    /// `clients` sending back to back that wait out each `429`'s `Retry-After`.
    Honouring { clients: usize },
    /// `clients` sending back to back, ignoring `Retry-After` (closed loop, adversarial: as
    /// many requests as the server and the load generator's thread can turn around).
    Flood { clients: usize },
}

impl AcmeLoad {
    fn label(self) -> String {
        match self {
            AcmeLoad::Open { per_second, .. } => format!("open loop {per_second} req/s"),
            AcmeLoad::Honouring { clients } => format!("{clients} honour Retry-After"),
            AcmeLoad::Flood { clients } => format!("{clients} ignore Retry-After"),
        }
    }
}

/// What acme's requests got.
#[derive(Debug, Default)]
struct AcmeCounts {
    served: AtomicU64,
    limited: AtomicU64,
    /// Open loop: scheduled requests not sent because `outstanding` were unanswered.
    skipped: AtomicU64,
    /// Any other answer or a transport error (the first is kept).
    failed: AtomicU64,
    first_failure: std::sync::Mutex<Option<String>>,
}

impl AcmeCounts {
    /// Counts an answer; for a `429`, its `Retry-After`.
    fn answered(&self, status: reqwest::StatusCode, headers: &HeaderMap) -> Option<Duration> {
        if status.is_success() {
            self.served.fetch_add(1, Relaxed);
            return None;
        }
        if status != reqwest::StatusCode::TOO_MANY_REQUESTS {
            self.fail(format!("HTTP {status}"));
            return None;
        }
        self.limited.fetch_add(1, Relaxed);
        let seconds = headers
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if seconds.is_none() {
            self.fail("429 without a Retry-After in seconds".to_owned());
        }
        Some(Duration::from_secs(seconds.unwrap_or(1)))
    }

    fn fail(&self, what: String) {
        self.failed.fetch_add(1, Relaxed);
        if let Ok(mut first) = self.first_failure.lock() {
            first.get_or_insert(what);
        }
    }

    /// (served, answered 429, not sent, failed).
    fn get(&self) -> (u64, u64, u64, u64) {
        (
            self.served.load(Relaxed),
            self.limited.load(Relaxed),
            self.skipped.load(Relaxed),
            self.failed.load(Relaxed),
        )
    }

    /// An error if any request failed or got another answer than 2xx or 429.
    fn check(&self) -> Result<()> {
        let failed = self.failed.load(Relaxed);
        if failed == 0 {
            return Ok(());
        }
        let first = self.first_failure.lock().ok().and_then(|f| f.clone());
        bail!(
            "acme: {failed} requests failed, the first: {}",
            first.unwrap_or_default()
        )
    }
}

/// One acme request: its status and headers, the body read.
async fn exchange(
    client: &reqwest::Client,
    request: &Request,
) -> reqwest::Result<(reqwest::StatusCode, HeaderMap)> {
    let response = client
        .post(&request.url)
        .headers(request.headers.clone())
        .body(request.body.clone())
        .send()
        .await?;
    let status = response.status();
    let headers = response.headers().clone();
    response.bytes().await?;
    Ok((status, headers))
}

/// Sends acme's `request` with `load` until `stop`, counting the answers in `counts`.
async fn acme_load(
    client: reqwest::Client,
    request: Arc<Request>,
    load: AcmeLoad,
    counts: Arc<AcmeCounts>,
    stop: CancellationToken,
) {
    match load {
        AcmeLoad::Open {
            per_second,
            outstanding,
        } => {
            let slots = Arc::new(tokio::sync::Semaphore::new(outstanding));
            let mut ticks =
                tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(per_second)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut sent = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    _ = ticks.tick() => {}
                }
                while sent.try_join_next().is_some() {}
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    counts.skipped.fetch_add(1, Relaxed);
                    continue;
                };
                let (client, request, counts) = (client.clone(), request.clone(), counts.clone());
                sent.spawn(async move {
                    match exchange(&client, &request).await {
                        Ok((status, headers)) => {
                            counts.answered(status, &headers);
                        }
                        Err(err) => counts.fail(format!("{err:#}")),
                    }
                    drop(slot);
                });
            }
            sent.join_all().await;
        }
        AcmeLoad::Honouring { clients } | AcmeLoad::Flood { clients } => {
            let honour = matches!(load, AcmeLoad::Honouring { .. });
            let mut workers = tokio::task::JoinSet::new();
            for _ in 0..clients {
                let (client, request, counts, stop) = (
                    client.clone(),
                    request.clone(),
                    counts.clone(),
                    stop.clone(),
                );
                workers.spawn(async move {
                    while !stop.is_cancelled() {
                        let wait = match exchange(&client, &request).await {
                            Ok((status, headers)) => counts.answered(status, &headers),
                            Err(err) => {
                                counts.fail(format!("{err:#}"));
                                return;
                            }
                        };
                        if let (true, Some(wait)) = (honour, wait) {
                            tokio::select! {
                                () = stop.cancelled() => {}
                                () = tokio::time::sleep(wait) => {}
                            }
                        }
                    }
                });
            }
            workers.join_all().await;
        }
    }
}

/// Certificates and a JWT key for the HTTPS servers, generated for this run.
struct Pki {
    ca_pem: String,
    ca_file: std::path::PathBuf,
    server_cert: std::path::PathBuf,
    server_key: std::path::PathBuf,
    client: (String, String),
    jwt_key: rcgen::KeyPair,
    jwt_public: std::path::PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Result<Pki> {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType,
        };
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "bench CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
        let issue = |sans: Vec<SanType>| -> Result<(String, String)> {
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params.subject_alt_names = sans;
            let key = KeyPair::generate()?;
            Ok((params.signed_by(&key, &ca)?.pem(), key.serialize_pem()))
        };
        let server = issue(vec![SanType::IpAddress("127.0.0.1".parse()?)])?;
        let client = issue(vec![SanType::URI("spiffe://bench/agent".try_into()?)])?;
        let jwt_key = KeyPair::generate()?;
        let write = |name: &str, text: &str| -> Result<std::path::PathBuf> {
            let path = dir.join(name);
            std::fs::write(&path, text)?;
            Ok(path)
        };
        Ok(Pki {
            ca_pem: ca.pem(),
            ca_file: write("ca.pem", &ca.pem())?,
            server_cert: write("server.pem", &server.0)?,
            server_key: write("server.key", &server.1)?,
            jwt_public: write("jwt.pub.pem", &jwt_key.public_key_pem())?,
            client,
            jwt_key,
        })
    }

    /// A keep-alive HTTPS client trusting the CA, with the client certificate if `mtls`.
    fn client(&self, mtls: bool) -> Result<reqwest::Client> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(self.ca_pem.as_bytes())?)?;
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
        let config = if mtls {
            builder.with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(self.client.0.as_bytes())?],
                PrivateKeyDer::from_pem_slice(self.client.1.as_bytes())?,
            )?
        } else {
            builder.with_no_client_auth()
        };
        Ok(reqwest::Client::builder()
            .tls_backend_preconfigured(config)
            .http1_only()
            .pool_max_idle_per_host(256)
            .build()?)
    }

    /// A token of `tenant` for the JWT servers, valid for an hour.
    fn token(&self, tenant: &str) -> Result<String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs();
        let claims = json!({"iss": "https://idp.bench.test", "aud": "https://bench.test/mcp",
            "sub": "bench", "tenant": tenant, "exp": now + 3600});
        let key = jsonwebtoken::EncodingKey::from_ec_pem(self.jwt_key.serialize_pem().as_bytes())?;
        Ok(jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256),
            &claims,
            &key,
        )?)
    }
}

// ---------------------------------------------------------------------------------------
// Load generation
// ---------------------------------------------------------------------------------------

struct Point {
    calls: usize,
    elapsed: Duration,
    latencies: Vec<u64>,
    server_cpu_ns: u64,
    /// CPU of the engine's `querygate-sqlite` threads over the point (reused threads that
    /// outlive a statement; threads that exit before the point ends are not counted).
    sqlite_cpu_ns: u64,
}

impl Point {
    fn p99_ms(&self) -> f64 {
        percentile(&self.latencies, 0.99) / 1e6
    }

    fn cpu_per_call_us(&self) -> f64 {
        self.server_cpu_ns as f64 / 1e3 / self.calls.max(1) as f64
    }

    fn print(&self, label: &str, c: usize) {
        println!(
            "{label:<44} {c:>5} {:>9.0} {:>9.3} {:>9.3} {:>12.1}",
            self.calls as f64 / self.elapsed.as_secs_f64(),
            percentile(&self.latencies, 0.50) / 1e6,
            percentile(&self.latencies, 0.99) / 1e6,
            self.cpu_per_call_us()
        );
        if self.sqlite_cpu_ns > 0 {
            println!(
                "{:<44} {:>5} {:>9} {:>9} {:>9} {:>12.1}",
                "  + the engine's SQLite threads",
                "",
                "",
                "",
                "",
                (self.server_cpu_ns + self.sqlite_cpu_ns) as f64 / 1e3 / self.calls.max(1) as f64
            );
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64
}

struct Request {
    url: String,
    headers: HeaderMap,
    body: Bytes,
}

fn request(server: &Background, tool: &str, arguments: &Value) -> Result<Request> {
    request_for(
        server,
        "tools/call",
        Some(tool),
        json!({"name": tool, "arguments": arguments}),
    )
}

fn request_for(
    server: &Background,
    method: &'static str,
    name: Option<&str>,
    mut params: Value,
) -> Result<Request> {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": PROTOCOL,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp_load", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert("mcp-protocol-version", HeaderValue::from_static(PROTOCOL));
    headers.insert("mcp-method", HeaderValue::from_static(method));
    if let Some(name) = name {
        headers.insert("mcp-name", HeaderValue::from_str(name)?);
    }
    if let Some(token) = &server.token {
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}"))?,
        );
    }
    Ok(Request {
        url: format!("{}://{}/mcp", server.scheme, server.addr),
        headers,
        body: Bytes::from(serde_json::to_vec(&body)?),
    })
}

async fn send(client: &reqwest::Client, request: &Request) -> Result<Bytes> {
    let response = client
        .post(&request.url)
        .headers(request.headers.clone())
        .body(request.body.clone())
        .send()
        .await?;
    let status = response.status();
    let body = response.bytes().await?;
    if !status.is_success() {
        bail!("HTTP {status}: {}", String::from_utf8_lossy(&body));
    }
    Ok(body)
}

/// One request of any method; its JSON answer.
async fn post(
    client: &reqwest::Client,
    server: &Background,
    method: &'static str,
    params: Value,
) -> Result<Value> {
    let body = send(client, &request_for(server, method, None, params)?).await?;
    let value: Value = serde_json::from_slice(&body)
        .with_context(|| format!("not JSON: {}", String::from_utf8_lossy(&body)))?;
    ensure!(value.get("error").is_none(), "{method} failed: {value}");
    Ok(value)
}

async fn call_once(
    client: &reqwest::Client,
    server: &Background,
    tool: &str,
    arguments: Value,
) -> Result<Value> {
    let body = send(client, &request(server, tool, &arguments)?).await?;
    let value: Value = serde_json::from_slice(&body)
        .with_context(|| format!("not JSON: {}", String::from_utf8_lossy(&body)))?;
    ensure!(
        value.get("error").is_none() && value["result"]["isError"] != true,
        "{tool} failed: {value}"
    );
    Ok(value)
}

/// `c` clients calling `tool` back to back for `duration`; latencies in nanoseconds.
async fn drive(
    client: &reqwest::Client,
    request: Arc<Request>,
    c: usize,
    duration: Duration,
) -> Result<Vec<u64>> {
    let until = Instant::now() + duration;
    let mut workers = Vec::with_capacity(c);
    for _ in 0..c {
        let client = client.clone();
        let request = request.clone();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(16 * 1024);
            while Instant::now() < until {
                let start = Instant::now();
                let body = send(&client, &request).await?;
                latencies.push(start.elapsed().as_nanos() as u64);
                // Cheap checks per call; the full answer was checked before the load.
                ensure!(
                    body.starts_with(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":"),
                    "unexpected answer: {}",
                    String::from_utf8_lossy(&body)
                );
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut all = Vec::new();
    for worker in workers {
        all.extend(worker.await??);
    }
    Ok(all)
}

fn point(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    server: &Background,
    tool: &str,
    arguments: &Value,
    c: usize,
) -> Result<Point> {
    let request = Arc::new(request(server, tool, arguments)?);
    rt.block_on(drive(client, request.clone(), c, WARMUP))?;
    let cpu0 = threads_cpu_ns(server.name)?;
    let sqlite0 = threads_cpu_ns(SQLITE_THREADS)?;
    let start = Instant::now();
    let mut latencies = rt.block_on(drive(client, request, c, POINT))?;
    let elapsed = start.elapsed();
    let cpu1 = threads_cpu_ns(server.name)?;
    let sqlite1 = threads_cpu_ns(SQLITE_THREADS)?;
    latencies.sort_unstable();
    Ok(Point {
        calls: latencies.len(),
        elapsed,
        latencies,
        server_cpu_ns: cpu1.saturating_sub(cpu0),
        sqlite_cpu_ns: sqlite1.saturating_sub(sqlite0),
    })
}

/// Summed `sum_exec_runtime` of this process's threads named `name`.
fn threads_cpu_ns(name: &str) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc/self/task").context("reading /proc/self/task")? {
        let dir = entry?.path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue; // exited meanwhile
        };
        // The kernel keeps the first 15 bytes of a thread's name.
        if comm.trim_end() != &name[..name.len().min(15)] {
            continue;
        }
        if let Ok(stat) = std::fs::read_to_string(dir.join("schedstat"))
            && let Some(ns) = stat
                .split_ascii_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
        {
            total += ns;
        }
    }
    Ok(total)
}

// ---------------------------------------------------------------------------------------
// Servers, each on its own named thread with a single-threaded runtime
// ---------------------------------------------------------------------------------------

struct Background {
    name: &'static str,
    addr: SocketAddr,
    /// `http` or `https`.
    scheme: &'static str,
    /// A bearer token sent with every request.
    token: Option<String>,
    shutdown: CancellationToken,
    thread: Option<JoinHandle<()>>,
    done: mpsc::Receiver<()>,
}

impl Background {
    /// Binds 127.0.0.1:0 on a thread named `name` and serves what `make` builds there.
    fn start<F>(name: &'static str, make: F) -> Result<Background>
    where
        F: FnOnce(SocketAddr, CancellationToken) -> Result<axum::Router> + Send + 'static,
    {
        Self::spawn(name, move |stop, ready| async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let router = make(addr, stop.clone())?;
            ready
                .send(Ok(addr))
                .map_err(|_| anyhow!("benchmark went away"))?;
            axum::serve(listener, router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await?;
            Ok(())
        })
    }

    /// Runs the [`App`] that `make` builds on a thread named `name`.
    fn start_app<F, Fut>(name: &'static str, make: F) -> Result<Background>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<App>>,
    {
        Self::spawn(name, move |stop, ready| async move {
            let app = make().await?;
            ready
                .send(Ok(app.local_addr()))
                .map_err(|_| anyhow!("benchmark went away"))?;
            app.run_until(async move { stop.cancelled().await }).await?;
            Ok(())
        })
    }

    /// Runs `serve` on a thread named `name` with a single-threaded runtime; `serve` reports
    /// its address through the sender once it accepts connections.
    fn spawn<F, Fut>(name: &'static str, serve: F) -> Result<Background>
    where
        F: FnOnce(CancellationToken, mpsc::Sender<Result<SocketAddr>>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<()>>,
    {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<SocketAddr>>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let failed = ready_tx.clone();
                let served = (|| -> Result<()> {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .thread_name(name)
                        .enable_all()
                        .build()?;
                    rt.block_on(serve(stop, ready_tx))
                })();
                if let Err(err) = served
                    && failed.send(Err(anyhow!("{err:#}"))).is_err()
                {
                    eprintln!("{name} stopped: {err:#}");
                }
                let _ = done_tx.send(());
            })?;
        let addr = ready_rx
            .recv_timeout(Duration::from_secs(30))
            .with_context(|| format!("{name} did not start"))??;
        Ok(Background {
            name,
            addr,
            scheme: "http",
            token: None,
            shutdown,
            thread: Some(thread),
            done: done_rx,
        })
    }

    fn stop(mut self) {
        self.shutdown.cancel();
        if self.done.recv_timeout(Duration::from_secs(3)).is_ok()
            && let Some(thread) = self.thread.take()
        {
            let _ = thread.join();
        }
    }
}

/// The whole `querygate serve`, built by [`App`] as the CLI builds it.
async fn full_app(config_path: &Path) -> Result<App> {
    let config = Config::load(&Sources {
        file: Some(config_path.to_owned()),
        env: Default::default(),
    })?;
    // As `serve` does before it builds the app (`database.migrate_on_start`).
    querygate::db::migrate_on_start(&config.database).await?;
    Ok(App::build(config).await?)
}

/// rmcp alone: querygate's tool list, and for any call the `server_info` result querygate
/// gave, precomputed; served as `querygate::http::mcp::service` serves querygate. What it costs is rmcp's
/// own handling of the same call, answered with the same bytes.
#[derive(Clone, Debug)]
struct Bare {
    tools: Arc<Vec<Tool>>,
    reply: Arc<CallToolResult>,
}

impl ServerHandler for Bare {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(self.reply.as_ref().clone().into())
    }
}

fn bare_router(
    addr: SocketAddr,
    shutdown: CancellationToken,
    tools: Vec<Tool>,
    reply: CallToolResult,
) -> Result<axum::Router> {
    let bare = Bare {
        tools: Arc::new(tools),
        reply: Arc::new(reply),
    };
    // The same settings as querygate::http::mcp::service.
    let defaults = Config::load(&Sources::default())?;
    let config = querygate::http::mcp::transport_config(&defaults.server, addr, shutdown);
    let service = StreamableHttpService::new(
        move || Ok(bare.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Ok(axum::Router::new().nest_service("/mcp", service))
}

/// The mock upstream: `GET /items` answers 100 rows of the fixture's item schema.
fn mock_router(_addr: SocketAddr, _shutdown: CancellationToken) -> Result<axum::Router> {
    let rows: Vec<Value> = (0..ROWS)
        .map(|i| {
            json!({
                "id": 9_007_199_254_740_993_u64 + i as u64,
                "seq": i,
                "name": format!("item-{i:04}"),
                "group": format!("group-{:02}", i % 20),
                "size": (i * 37) % 1000,
                "active": i % 3 == 0,
                "score": i as f64 / 7.0,
                "created_at": "2026-01-02T03:04:05Z",
                "owner": {"login": format!("user{}", i % 9), "id": i % 9},
                "tags": ["a", "b"]
            })
        })
        .collect();
    let body = Bytes::from(serde_json::to_vec(&rows)?);
    Ok(axum::Router::new().route(
        "/items",
        axum::routing::get(move || {
            let body = body.clone();
            async move { ([(header::CONTENT_TYPE, "application/json")], body) }
        }),
    ))
}
