//! The `tenants` section: globex's latency alone and while acme sends past its per-tenant
//! limits (acme's load generator, its answer counts, the CPU of the threads involved).

use super::*;

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
pub(crate) fn run_tenants(
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
pub(crate) const FLOOD_THREADS: &str = "bench-flood";

/// CPU of the server's thread and of both load generators' threads.
pub(crate) struct Cpu {
    pub(crate) server_ns: u64,
    pub(crate) globex_client_ns: u64,
    pub(crate) acme_client_ns: u64,
    /// Wall time the growth was measured over, in seconds (0 for a snapshot).
    pub(crate) seconds: f64,
}

impl Cpu {
    pub(crate) fn now(server: &str) -> Result<Cpu> {
        Ok(Cpu {
            server_ns: threads_cpu_ns(server)?,
            globex_client_ns: threads_cpu_ns("bench-load")?,
            acme_client_ns: threads_cpu_ns(FLOOD_THREADS)?,
            seconds: 0.0,
        })
    }

    /// The growth since `before`, over `elapsed`.
    pub(crate) fn since(self, before: &Cpu, elapsed: Duration) -> Cpu {
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

/// The tenant over its limits: its own client runtime (`bench-flood`, one worker), its own
/// connection pool and its token.
pub(crate) struct Acme {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) client: reqwest::Client,
    pub(crate) token: String,
}

/// How acme sends `server_info` during a tenant-isolation point.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AcmeLoad {
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
    pub(crate) fn label(self) -> String {
        match self {
            AcmeLoad::Open { per_second, .. } => format!("open loop {per_second} req/s"),
            AcmeLoad::Honouring { clients } => format!("{clients} honour Retry-After"),
            AcmeLoad::Flood { clients } => format!("{clients} ignore Retry-After"),
        }
    }
}

/// What acme's requests got.
#[derive(Debug, Default)]
pub(crate) struct AcmeCounts {
    pub(crate) served: AtomicU64,
    pub(crate) limited: AtomicU64,
    /// Open loop: scheduled requests not sent because `outstanding` were unanswered.
    pub(crate) skipped: AtomicU64,
    /// Any other answer or a transport error (the first is kept).
    pub(crate) failed: AtomicU64,
    pub(crate) first_failure: std::sync::Mutex<Option<String>>,
}

impl AcmeCounts {
    /// Counts an answer; for a `429`, its `Retry-After`.
    pub(crate) fn answered(
        &self,
        status: reqwest::StatusCode,
        headers: &HeaderMap,
    ) -> Option<Duration> {
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

    pub(crate) fn fail(&self, what: String) {
        self.failed.fetch_add(1, Relaxed);
        if let Ok(mut first) = self.first_failure.lock() {
            first.get_or_insert(what);
        }
    }

    /// (served, answered 429, not sent, failed).
    pub(crate) fn get(&self) -> (u64, u64, u64, u64) {
        (
            self.served.load(Relaxed),
            self.limited.load(Relaxed),
            self.skipped.load(Relaxed),
            self.failed.load(Relaxed),
        )
    }

    /// An error if any request failed or got another answer than 2xx or 429.
    pub(crate) fn check(&self) -> Result<()> {
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
pub(crate) async fn exchange(
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
pub(crate) async fn acme_load(
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
