//! Load generation: MCP requests, the client loop driving `c` concurrent clients, one
//! measured point (latencies, server CPU from schedstat) and how it is printed.

use super::*;

pub(crate) struct Point {
    pub(crate) calls: usize,
    pub(crate) elapsed: Duration,
    pub(crate) latencies: Vec<u64>,
    pub(crate) server_cpu_ns: u64,
    /// CPU of the engine's `querygate-sqlite` threads over the point (reused threads that
    /// outlive a statement; threads that exit before the point ends are not counted).
    pub(crate) sqlite_cpu_ns: u64,
}

impl Point {
    pub(crate) fn p99_ms(&self) -> f64 {
        percentile(&self.latencies, 0.99) / 1e6
    }

    pub(crate) fn cpu_per_call_us(&self) -> f64 {
        self.server_cpu_ns as f64 / 1e3 / self.calls.max(1) as f64
    }

    pub(crate) fn print(&self, label: &str, c: usize) {
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

pub(crate) fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64
}

pub(crate) struct Request {
    pub(crate) url: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

pub(crate) fn request(server: &Background, tool: &str, arguments: &Value) -> Result<Request> {
    request_for(
        server,
        "tools/call",
        Some(tool),
        json!({"name": tool, "arguments": arguments}),
    )
}

pub(crate) fn request_for(
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

pub(crate) async fn send(client: &reqwest::Client, request: &Request) -> Result<Bytes> {
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
pub(crate) async fn post(
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

pub(crate) async fn call_once(
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
pub(crate) async fn drive(
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

pub(crate) fn point(
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
pub(crate) fn threads_cpu_ns(name: &str) -> Result<u64> {
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
