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

mod calls;
mod governed;
mod load;
mod pki;
mod servers;
mod tenants;

use calls::*;
use governed::*;
use load::*;
use pki::*;
use servers::*;
use tenants::*;

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
