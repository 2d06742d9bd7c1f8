//! MCP load benchmark: `cargo bench --bench mcp_load`.
//!
//! Three threads, each with its own single-threaded tokio runtime:
//! - `qg-full`: the whole `querygate serve` router (`mcp::http::router` over the real
//!   handler, tool-call stage and engine) on 127.0.0.1, stateless;
//! - `qg-bare`: a bare rmcp `ServerHandler` that lists querygate's tools and answers every
//!   call with the `server_info` result querygate gave (precomputed), behind a
//!   `StreamableHttpService` configured exactly as `mcp::http::router` configures it — rmcp's
//!   own handling of the same call, answered with the same bytes, none of our layers;
//! - `bench-mock`: an axum mock upstream answering `bench.items.items` (fixture provider
//!   under `benches/fixtures/registry`) with 100 JSON rows;
//!
//! and a load generator (reqwest, keep-alive, HTTP/1.1) on a fourth runtime thread. Every call
//! is a raw JSON-RPC POST of MCP 2026-07-28 (per-request `_meta`, `Mcp-Method`/`Mcp-Name`
//! headers; no handshake). Per point: `WARMUP` of calls, then `POINT` of measured calls, at
//! 1, 8 and 64 concurrent clients; requests/s and p50/p99 latency.
//!
//! Server CPU per call is the growth of the server threads' `sum_exec_runtime`
//! (`/proc/self/task/*/schedstat`, threads named like the server) over the measured calls,
//! divided by their number: the server's own CPU, without the load generator's or the
//! mock's. The ratio full/bare for `server_info` is what our layers cost on top of rmcp's
//! handling of the same call (target: at most 1.25).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use axum::http::{HeaderMap, HeaderValue, header};
use bytes::Bytes;
use querygate::config::{Config, Sources};
use querygate::engine::Engine;
use querygate::mcp::{self, Transport};
use querygate::tenant::Tenants;
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
            "registry:\n  root: {}\nproviders:\n  bench:\n    base_url: http://{}\ncredentials:\n  process_env: false\ntenants:\n  - id: default\n    mode: read_only\nserver:\n  listen: 127.0.0.1:0\n",
            crate_root.join("benches/fixtures/registry").display(),
            mock.addr
        ),
    )?;
    let full = Background::start("qg-full", move |addr, shutdown| {
        full_router(&config_path, addr, shutdown)
    })?;
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
    let outcome = checks.and_then(|()| run(&client_rt, &client, &full, &bare));
    drop(client);
    drop(client_rt);
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
        "  (run_select_query's CPU omits the engine's per-statement querygate-sqlite threads, which exit before they can be read)"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Load generation
// ---------------------------------------------------------------------------------------

struct Point {
    calls: usize,
    elapsed: Duration,
    latencies: Vec<u64>,
    server_cpu_ns: u64,
}

impl Point {
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
    Ok(Request {
        url: format!("http://{}/mcp", server.addr),
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
    let start = Instant::now();
    let mut latencies = rt.block_on(drive(client, request, c, POINT))?;
    let elapsed = start.elapsed();
    let cpu1 = threads_cpu_ns(server.name)?;
    latencies.sort_unstable();
    Ok(Point {
        calls: latencies.len(),
        elapsed,
        latencies,
        server_cpu_ns: cpu1.saturating_sub(cpu0),
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
        if comm.trim_end() != name {
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
        let (ready_tx, ready_rx) = mpsc::channel::<Result<SocketAddr>>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let served = (|| -> Result<()> {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .thread_name(name)
                        .enable_all()
                        .build()?;
                    rt.block_on(async {
                        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                        let addr = listener.local_addr()?;
                        let router = make(addr, stop.clone())?;
                        ready_tx
                            .send(Ok(addr))
                            .map_err(|_| anyhow!("benchmark went away"))?;
                        axum::serve(listener, router)
                            .with_graceful_shutdown(async move { stop.cancelled().await })
                            .await?;
                        Ok(())
                    })
                })();
                if let Err(err) = served
                    && ready_tx.send(Err(anyhow!("{err:#}"))).is_err()
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

fn full_router(
    config_path: &Path,
    addr: SocketAddr,
    shutdown: CancellationToken,
) -> Result<axum::Router> {
    let config = Config::load(&Sources {
        file: Some(config_path.to_owned()),
        env: Default::default(),
    })?;
    let engine = Engine::new(config.engine.clone())?;
    let tenants = Tenants::open(&config)?;
    let handler = mcp::build(&config, engine, tenants, Transport::Http, None)?;
    Ok(mcp::http::router(handler, &config.server, addr, shutdown))
}

/// rmcp alone: querygate's tool list, and for any call the `server_info` result querygate
/// gave, precomputed; served as `mcp::http::router` serves querygate. What it costs is rmcp's
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
    // The same settings as querygate::mcp::http::router.
    let defaults = Config::load(&Sources::default())?;
    let config = mcp::http::transport_config(&defaults.server, addr, shutdown);
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
