//! Statistics, units and the printed figures and verdicts.

use super::*;

pub(crate) struct Stats {
    pub(crate) median: f64,
    pub(crate) min: f64,
}

impl Stats {
    pub(crate) fn of(values: &[u64]) -> Stats {
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        let median = match sorted.len() {
            0 => 0.0,
            n if n % 2 == 1 => sorted[n / 2] as f64,
            n => (sorted[n / 2 - 1] + sorted[n / 2]) as f64 / 2.0,
        };
        Stats {
            median,
            min: sorted.first().copied().unwrap_or_default() as f64,
        }
    }
}

pub(crate) fn ms(ns: f64) -> f64 {
    ns / 1e6
}

pub(crate) fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

pub(crate) fn kib_to_mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

pub(crate) fn print_stats(label: &str, stats: &Stats) {
    println!(
        "   {label:<42} median {:>8.2} ms   min {:>8.2} ms",
        ms(stats.median),
        ms(stats.min)
    );
}

pub(crate) fn verdict(label: &str, value: String, pass: bool) {
    println!(
        "   [{}] {label:<44} {value}",
        if pass { "PASS" } else { "MISS" }
    );
}

/// A `kB` field of /proc/self/status.
pub(crate) fn vm_status(field: &str) -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| anyhow!("{field} missing from /proc/self/status"))
}
