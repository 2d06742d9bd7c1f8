//! Ports for servers that a test stops and starts again on the same port.
//!
//! `bind(127.0.0.1:0)` takes a port from the kernel's ephemeral range, the range it also
//! uses for the local end of every outgoing connection and for every other test's
//! listeners. While a test's server is down, any of those may take its port, and the
//! restart fails to bind. These ports come from just below that range, where only explicit
//! binds land; each one is handed out once per test process.

use std::collections::HashSet;
use std::sync::Mutex;

/// How many ports below the ephemeral range are candidates.
const SPAN: u16 = 8_000;

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A port on 127.0.0.1, free now, outside the ephemeral range, not handed out before by
/// this process.
pub fn restartable_port() -> u16 {
    let low = ephemeral_low();
    let first = low.saturating_sub(SPAN).max(1024);
    let span = low.saturating_sub(first).max(1);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id().wrapping_mul(2_654_435_761);
    let mut handed_out = HANDED_OUT.lock().unwrap();
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    for step in 0..u32::from(span) {
        let port = first + ((seed.wrapping_add(step) % u32::from(span)) as u16);
        if handed_out.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return port;
        }
    }
    panic!("no free port in {first}..{low} on 127.0.0.1");
}

/// The first port of the kernel's ephemeral range (Linux's default when it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}
