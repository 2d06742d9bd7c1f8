//! Admission benchmark: `cargo bench --bench admission`.
//!
//! Runs the real `querygate serve` (this profile's build) as a child process on 127.0.0.1,
//! with two JWT tenants, `flood` and `small`, and an axum mock upstream in this process
//! serving `bench.items.items`: 10 pages of 1,000 rows (a 10k-row call), or 10 rows for
//! `WHERE page = 0` (a small call). Three times: with the default admission limits, with
//! tighter ones, and with admission effectively off. Per run it prints
//! - the server's RSS (sampled every 20 ms, and the kernel's high-water mark) while 64
//!   clients of `flood` make 10k-row calls at once (target: under 150 MiB);
//! - `small`'s small-call p50/p99 alone, beside a busy loop in Linux's idle scheduling class
//!   on every core (no request of its own: the floor any priority scheme can reach on this
//!   machine and kernel), then while `flood` keeps 64 10k-row calls going (target: p99 at
//!   most +20%).
//!
//! The small calls and the mock upstream run on their own threads and runtimes, and the
//! flood's clients check each reply without building its JSON tree, so the small calls'
//! latency is the server's and not this process's own work on the flood's replies (clients
//! of another tenant and the upstream API are on other machines).
//!
//! Runs run alone when named (`cargo bench --bench admission -- defaults`).
//! `QUERYGATE_BENCH_BIN` names another `querygate` binary to run (e.g. an earlier build);
//! `QUERYGATE_BENCH_LIMITS` adds `limits:` keys to every run (`;`-separated, e.g.
//! `bulk_work_priority: nice`).
//!
//! Bounded in time: every phase ends after a fixed duration.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use axum::extract::Query;
use axum::http::header;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

const FLOOD_CLIENTS: usize = 64;
const PAGES: usize = 10;
const PAGE_ROWS: usize = 1000;
const SMALL_CLIENTS: usize = 4;
const PHASE: Duration = Duration::from_secs(6);
const HEAVY: &str = "SELECT id, name, \"group\", size, active, score FROM bench.items.items";
const SMALL: &str = "SELECT id, name FROM bench.items.items WHERE page = 0";
const ISSUER: &str = "https://idp.bench.test";
const RESOURCE: &str = "https://bench.test/mcp";

fn main() -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run())
}

async fn run() -> Result<()> {
    println!("querygate admission benchmark (cargo bench --bench admission)");
    println!(
        "  {} cores; `querygate serve` child process; {FLOOD_CLIENTS} concurrent {}-row calls; small calls: {SMALL_CLIENTS} clients, {} per phase",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        PAGES * PAGE_ROWS,
        humantime::format_duration(PHASE)
    );
    if let Some(binary) = std::env::var_os("QUERYGATE_BENCH_BIN") {
        println!("  server binary: {}", Path::new(&binary).display());
    }
    let mock = start_mock().await?;
    let dir = tempfile::tempdir()?;
    let key = rcgen::KeyPair::generate()?;
    let public = dir.path().join("jwt.pub.pem");
    std::fs::write(&public, key.public_key_pem())?;
    let flood = token(&key, "flood")?;
    let small = token(&key, "small")?;
    let http = reqwest::Client::builder()
        .http1_only()
        .pool_max_idle_per_host(256)
        .build()?;
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    for (label, limits) in [
        ("admission defaults", ""),
        (
            "admission tighter (4 slots, 2 per tenant; 4 bulk statements, 2 per tenant)",
            "limits:\n  max_concurrent_evaluations: 4\n  max_tenant_evaluations: 2\n  max_bulk_statements: 4\n  max_tenant_bulk_statements: 2\n",
        ),
        (
            "admission effectively off (1024 slots and bulk statements, 1024 per tenant)",
            "limits:\n  max_concurrent_evaluations: 1024\n  max_tenant_evaluations: 1024\n  max_bulk_statements: 1024\n  max_tenant_bulk_statements: 1024\n",
        ),
    ] {
        if !only.is_empty() && !only.iter().any(|name| label.contains(name.as_str())) {
            continue;
        }
        // More `limits:` keys for every run, `;`-separated (e.g. `bulk_work_priority: nice`).
        let mut limits = limits.to_owned();
        if let Ok(extra) = std::env::var("QUERYGATE_BENCH_LIMITS") {
            if limits.is_empty() {
                limits.push_str("limits:\n");
            }
            for key in extra.split(';').map(str::trim).filter(|k| !k.is_empty()) {
                limits.push_str(&format!("  {key}\n"));
            }
        }
        let config = dir.path().join("querygate.yaml");
        std::fs::write(
            &config,
            format!(
                "registry:\n  root: {root}\nproviders:\n  bench:\n    base_url: {mock}\ncredentials:\n  process_env: false\ntenants:\n  - id: flood\n    mode: read_only\n  - id: small\n    mode: read_only\naudit:\n  enabled: false\nserver:\n  listen: 127.0.0.1:0\n  max_rows: 10000\nauth:\n  resource: {RESOURCE}\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        public_keys: [{public}]\n        algorithms: [ES256]\n        tenants: [flood, small]\n{limits}",
                root = Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("benches/fixtures/registry")
                    .display(),
                public = public.display(),
            ),
        )?;
        println!(
            "\n{label} (load average {})",
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split(' ')
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
        let server = Server::spawn(&config).await?;
        let outcome = measure(&http, &server, &flood, &small).await;
        server.stop().await;
        outcome?;
    }
    Ok(())
}

#[expect(
    clippy::too_many_lines,
    reason = "the admission scenarios measured in the order their figures are printed"
)]
async fn measure(http: &reqwest::Client, server: &Server, flood: &str, small: &str) -> Result<()> {
    // Sanity: both calls return what they should.
    let heavy = call(http, &server.url, flood, HEAVY).await?;
    let rows = heavy["result"]["structuredContent"]["rows"]
        .as_array()
        .map_or(0, Vec::len);
    if rows != PAGES * PAGE_ROWS {
        bail!(
            "the heavy call returned {rows} rows: {:.300}",
            heavy.to_string()
        );
    }
    let light = call(http, &server.url, small, SMALL).await?;
    if light["result"]["structuredContent"]["rows"]
        .as_array()
        .map_or(0, Vec::len)
        != 10
    {
        bail!("the small call: {light}");
    }

    // RSS under 64 concurrent 10k-row calls (two rounds each).
    let start_rss = rss_kib(server.pid)?;
    let sampling = Arc::new(AtomicBool::new(true));
    let peak = Arc::new(AtomicUsize::new(start_rss));
    let sampler = {
        let (sampling, peak, pid) = (sampling.clone(), peak.clone(), server.pid);
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                if let Ok(kib) = rss_kib(pid) {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let started = Instant::now();
    let outcomes = futures::future::join_all((0..FLOOD_CLIENTS).map(|_| async {
        let mut codes = Vec::new();
        for _ in 0..2 {
            codes.push(flood_call(http, &server.url, flood).await);
        }
        codes
    }))
    .await;
    let elapsed = started.elapsed();
    sampling.store(false, Ordering::Relaxed);
    sampler.await?;
    let codes: Vec<String> = outcomes.into_iter().flatten().collect();
    let ok = codes.iter().filter(|c| c.as_str() == "ok").count();
    println!(
        "  RSS, {FLOOD_CLIENTS} concurrent 10k-row calls x2: start {:.1} MiB, peak {:.1} MiB (sampled), high-water {:.1} MiB; {ok}/{} ok, others: {:?}; {:.1} s",
        mib(start_rss),
        mib(peak.load(Ordering::Relaxed)),
        mib(hwm_kib(server.pid)?),
        codes.len(),
        summarize(&codes),
        elapsed.as_secs_f64()
    );

    // The small tenant's latency, alone and beside the flood.
    let alone = small_calls(&server.url, small).await?;
    let spinning = Arc::new(AtomicBool::new(true));
    let spinners: Vec<_> = (0..std::thread::available_parallelism().map_or(1, |n| n.get()))
        .map(|_| {
            let on = spinning.clone();
            std::thread::spawn(move || {
                querygate::thread_priority::lower(querygate::thread_priority::BulkPriority::Idle);
                let idle = querygate::thread_priority::lowered();
                while on.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
                idle
            })
        })
        .collect();
    let spun = small_calls(&server.url, small).await?;
    spinning.store(false, Ordering::Relaxed);
    let idle_class = spinners
        .into_iter()
        .all(|spinner| spinner.join().unwrap_or(false));
    let flooding = Arc::new(AtomicBool::new(true));
    let flooders: Vec<_> = (0..FLOOD_CLIENTS)
        .map(|_| {
            let (http, url, token, on) = (
                http.clone(),
                server.url.clone(),
                flood.to_owned(),
                flooding.clone(),
            );
            tokio::spawn(async move {
                let mut codes = Vec::new();
                while on.load(Ordering::Relaxed) {
                    codes.push(flood_call(&http, &url, &token).await);
                }
                codes
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let beside = small_calls(&server.url, small).await?;
    flooding.store(false, Ordering::Relaxed);
    let mut flood_codes = Vec::new();
    for flooder in flooders {
        flood_codes.extend(flooder.await?);
    }
    let (p50a, p99a) = percentiles(&alone.latencies);
    let (p50s, p99s) = percentiles(&spun.latencies);
    let (p50b, p99b) = percentiles(&beside.latencies);
    println!(
        "  small calls alone:          {} calls, p50 {:.1} ms, p99 {:.1} ms, errors {:?}",
        alone.latencies.len(),
        p50a,
        p99a,
        summarize(&alone.errors)
    );
    println!(
        "  small calls beside a busy loop{}: {} calls, p50 {:.1} ms, p99 {:.1} ms, errors {:?}; p99 {:+.0}% (the floor)",
        if idle_class {
            " (SCHED_IDLE)"
        } else {
            " (NOT in SCHED_IDLE: not a floor)"
        },
        spun.latencies.len(),
        p50s,
        p99s,
        summarize(&spun.errors),
        (p99s / p99a - 1.0) * 100.0
    );
    println!(
        "  small calls beside flood:   {} calls, p50 {:.1} ms, p99 {:.1} ms, errors {:?}; p99 {:+.0}% (target at most +20%), {:+.0}% over the floor",
        beside.latencies.len(),
        p50b,
        p99b,
        summarize(&beside.errors),
        (p99b / p99a - 1.0) * 100.0,
        (p99b / p99s - 1.0) * 100.0
    );
    println!(
        "  flood meanwhile: {} calls finished, {:?}",
        flood_codes.len(),
        summarize(&flood_codes)
    );
    Ok(())
}

struct SmallPoint {
    latencies: Vec<f64>,
    errors: Vec<String>,
}

/// `small`'s calls for one phase, from their own thread and runtime (and HTTP client), so
/// that this process's work on the flood's replies does not delay them.
async fn small_calls(url: &str, token: &str) -> Result<SmallPoint> {
    let (url, token) = (url.to_owned(), token.to_owned());
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(async {
                let http = reqwest::Client::builder().http1_only().build()?;
                small_phase(&http, &url, &token).await
            })
    })
    .await?
}

async fn small_phase(http: &reqwest::Client, url: &str, token: &str) -> Result<SmallPoint> {
    let until = Instant::now() + PHASE;
    let clients = (0..SMALL_CLIENTS).map(|_| async move {
        let mut latencies = Vec::new();
        let mut errors = Vec::new();
        while Instant::now() < until {
            let started = Instant::now();
            let code = outcome_code(call(http, url, token, SMALL).await);
            if code == "ok" {
                latencies.push(started.elapsed().as_secs_f64() * 1000.0);
            } else {
                errors.push(code);
            }
        }
        (latencies, errors)
    });
    let mut point = SmallPoint {
        latencies: Vec::new(),
        errors: Vec::new(),
    };
    for (latencies, errors) in futures::future::join_all(clients).await {
        point.latencies.extend(latencies);
        point.errors.extend(errors);
    }
    if point.latencies.is_empty() {
        bail!("no small call succeeded: {:?}", summarize(&point.errors));
    }
    Ok(point)
}

fn percentiles(latencies: &[f64]) -> (f64, f64) {
    let mut sorted = latencies.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)];
    (at(0.50), at(0.99))
}

fn summarize(codes: &[String]) -> std::collections::BTreeMap<&str, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for code in codes {
        *counts.entry(code.as_str()).or_insert(0) += 1;
    }
    counts
}

/// `ok`, the tool error's code, or what failed at the transport.
fn outcome_code(reply: Result<Value>) -> String {
    match reply {
        Ok(reply) => match reply["result"]["structuredContent"]["error"]["code"].as_str() {
            Some(code) => code.to_owned(),
            None if reply["result"].is_object() => "ok".to_owned(),
            None => format!("protocol: {}", reply["error"]["message"]),
        },
        Err(err) => format!("transport: {err}"),
    }
}

/// The outcome of one flood call (`ok`, the tool error's code, or what failed), read
/// without building the reply's JSON tree.
async fn flood_call(http: &reqwest::Client, url: &str, token: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Reply {
        result: Option<Outcome>,
        error: Option<Message>,
    }
    #[derive(serde::Deserialize)]
    struct Outcome {
        #[serde(rename = "structuredContent")]
        structured: Option<Structured>,
    }
    #[derive(serde::Deserialize)]
    struct Structured {
        error: Option<Code>,
    }
    #[derive(serde::Deserialize)]
    struct Code {
        code: String,
    }
    #[derive(serde::Deserialize)]
    struct Message {
        message: String,
    }
    let body = match send(http, url, token, HEAVY).await {
        Ok(response) => response.bytes().await.map_err(anyhow::Error::from),
        Err(err) => Err(err),
    };
    match body.and_then(|body| Ok(serde_json::from_slice::<Reply>(&body)?)) {
        Ok(Reply {
            result: Some(outcome),
            ..
        }) => match outcome.structured.and_then(|s| s.error) {
            Some(error) => error.code,
            None => "ok".to_owned(),
        },
        Ok(Reply { error, .. }) => format!(
            "protocol: {}",
            error.map_or_else(String::new, |e| e.message)
        ),
        Err(err) => format!("transport: {err}"),
    }
}

/// A `tools/call` of `run_select_query` as a 2026-07-28 client sends it.
async fn call(http: &reqwest::Client, url: &str, token: &str, sql: &str) -> Result<Value> {
    Ok(send(http, url, token, sql).await?.json().await?)
}

/// Sends a `tools/call` of `run_select_query`: the response, its status checked.
async fn send(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    sql: &str,
) -> Result<reqwest::Response> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "run_select_query", "arguments": {"sql": sql, "format": "json"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let response = http
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "run_select_query")
        .body(body.to_string())
        .send()
        .await?;
    let status = response.status();
    if !status.is_success() {
        bail!("HTTP {status}");
    }
    Ok(response)
}

fn token(key: &rcgen::KeyPair, tenant: &str) -> Result<String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let claims = json!({"iss": ISSUER, "aud": RESOURCE, "sub": format!("{tenant}-bench"),
                        "tenant": tenant, "exp": now + 3600});
    let key = jsonwebtoken::EncodingKey::from_ec_pem(key.serialize_pem().as_bytes())?;
    Ok(jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256),
        &claims,
        &key,
    )?)
}

/// The mock upstream: `/items` pages 1..=10 of 1,000 rows linked by `Link`; `?page=0`: 10 rows.
/// It serves from its own thread and runtime (it stands for a remote API: this process's
/// work on the flood's replies must not delay it).
async fn start_mock() -> Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let base = format!("http://{}", listener.local_addr()?);
    let page = |n: usize, count: usize| -> Result<Bytes> {
        let rows: Vec<Value> = (0..count)
            .map(|j| {
                let i = n * PAGE_ROWS + j;
                json!({"id": 9_007_199_254_740_993_u64 + i as u64, "seq": i,
                       "name": format!("item-{i:05}"), "group": format!("group-{:02}", i % 20),
                       "size": (i * 37) % 1000, "active": i.is_multiple_of(3), "score": i as f64 / 7.0,
                       "created_at": "2026-01-02T03:04:05Z",
                       "owner": {"login": format!("user{}", i % 9), "id": i % 9},
                       "tags": ["a", "b"]})
            })
            .collect();
        Ok(Bytes::from(serde_json::to_vec(&rows)?))
    };
    let small = page(0, 10)?;
    let pages: Vec<Bytes> = (1..=PAGES)
        .map(|n| page(n, PAGE_ROWS))
        .collect::<Result<_>>()?;
    let pages = Arc::new(pages);
    let next_base = base.clone();
    let app = axum::Router::new().route(
        "/items",
        axum::routing::get(
            move |Query(query): Query<std::collections::HashMap<String, usize>>| {
                let (pages, small, base) = (pages.clone(), small.clone(), next_base.clone());
                async move {
                    let n = query.get("page").copied().unwrap_or(1);
                    let mut headers = vec![(header::CONTENT_TYPE, "application/json".to_owned())];
                    if n == 0 {
                        return headers_body(headers, small);
                    }
                    if n < PAGES {
                        headers.push((
                            header::LINK,
                            format!("<{base}/items?page={}>; rel=\"next\"", n + 1),
                        ));
                    }
                    headers_body(headers, pages[n.clamp(1, PAGES) - 1].clone())
                }
            },
        ),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("mock-upstream".to_owned())
        .spawn(move || {
            runtime.block_on(async move {
                if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                    let _ = axum::serve(listener, app).await;
                }
            });
        })?;
    Ok(base)
}

fn headers_body(
    headers: Vec<(header::HeaderName, String)>,
    body: Bytes,
) -> axum::response::Response {
    let mut response = axum::response::Response::new(axum::body::Body::from(body));
    for (name, value) in headers {
        if let Ok(value) = header::HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// A `querygate serve` child process.
struct Server {
    url: String,
    pid: u32,
    child: tokio::process::Child,
}

impl Server {
    async fn spawn(config: &Path) -> Result<Server> {
        let binary = std::env::var_os("QUERYGATE_BENCH_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_querygate").into());
        let mut child = tokio::process::Command::new(binary)
            .args(["--config", &config.display().to_string(), "serve"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().context("no pid")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        let url = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(url) = line.strip_prefix("querygate: serving MCP at ") {
                    return Ok(url.to_owned());
                }
            }
            bail!("serve exited without announcing its address")
        })
        .await
        .context("serve did not start in time")??;
        // Keep draining stderr so the child never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Server { url, pid, child })
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

fn status_kib(pid: u32, field: &str) -> Result<usize> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

fn rss_kib(pid: u32) -> Result<usize> {
    status_kib(pid, "VmRSS:")
}

fn hwm_kib(pid: u32) -> Result<usize> {
    status_kib(pid, "VmHWM:")
}

fn mib(kib: usize) -> f64 {
    kib as f64 / 1024.0
}
