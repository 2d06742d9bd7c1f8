//! The `calls` and `tls` sections: full querygate against bare rmcp, and `server_info` over
//! plain HTTP, mTLS and JWT; each point measured and printed.

use super::*;

pub(crate) fn run(
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
pub(crate) fn run_tls(
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
