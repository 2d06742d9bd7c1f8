//! `upstream:` and `limits:` — how the engine talks to upstream APIs and how much it keeps.

use std::time::Duration;

use serde::Deserialize;

use super::problems::{GIB, HOUR, Problems};
use crate::engine::{RetryPolicy, UpstreamLimits};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawUpstream {
    #[serde(with = "humantime_serde")]
    pub(super) timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub(super) connect_timeout: Duration,
    pub(super) page_limit: u32,
    pub(super) max_concurrency: usize,
    pub(super) max_requests_per_statement: usize,
    pub(super) max_response_bytes: usize,
    pub(super) retry: RawRetry,
    /// `upstream.await_operations`: how `/*+ AWAIT */` polls an operation.
    pub(super) await_operations: RawAwait,
}

/// `upstream.await_operations:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawAwait {
    #[serde(with = "humantime_serde")]
    pub(super) poll_interval: Duration,
    #[serde(with = "humantime_serde")]
    pub(super) max_wait: Duration,
}

impl Default for RawAwait {
    fn default() -> Self {
        let d = crate::engine::AwaitLimits::default();
        RawAwait {
            poll_interval: d.poll_interval,
            max_wait: d.max_wait,
        }
    }
}

impl Default for RawUpstream {
    fn default() -> Self {
        let d = UpstreamLimits::default();
        RawUpstream {
            timeout: d.timeout,
            connect_timeout: d.connect_timeout,
            page_limit: d.page_limit,
            max_concurrency: d.max_concurrency,
            max_requests_per_statement: d.max_requests_per_statement,
            max_response_bytes: d.max_response_bytes,
            retry: RawRetry::default(),
            await_operations: RawAwait::default(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawRetry {
    pub(super) attempts: u32,
    #[serde(with = "humantime_serde")]
    pub(super) initial_backoff: Duration,
    #[serde(with = "humantime_serde")]
    pub(super) max_backoff: Duration,
    #[serde(with = "humantime_serde")]
    pub(super) max_elapsed: Duration,
}

impl Default for RawRetry {
    fn default() -> Self {
        let d = RetryPolicy::default();
        RawRetry {
            attempts: d.attempts,
            initial_backoff: d.initial_backoff,
            max_backoff: d.max_backoff,
            max_elapsed: d.max_elapsed,
        }
    }
}

/// Checks `upstream:`.
pub(super) fn check_upstream(raw: RawUpstream, problems: &mut Problems) -> UpstreamLimits {
    problems.duration_in_range("upstream.timeout", raw.timeout, 24 * HOUR);
    problems.duration_in_range("upstream.connect_timeout", raw.connect_timeout, HOUR);
    problems.in_range(
        "upstream.max_concurrency",
        raw.max_concurrency as u64,
        10_000,
    );
    problems.in_range(
        "upstream.max_requests_per_statement",
        raw.max_requests_per_statement as u64,
        1_000_000,
    );
    problems.in_range(
        "upstream.max_response_bytes",
        raw.max_response_bytes as u64,
        16 * GIB,
    );
    problems.duration_in_range(
        "upstream.await_operations.poll_interval",
        raw.await_operations.poll_interval,
        HOUR,
    );
    problems.duration_in_range(
        "upstream.await_operations.max_wait",
        raw.await_operations.max_wait,
        24 * HOUR,
    );
    let retry = raw.retry;
    if retry.attempts == 0 {
        problems.push("upstream.retry.attempts", "must be at least 1");
    } else if retry.attempts > 100 {
        problems.push(
            "upstream.retry.attempts",
            format!("{} is more than the largest allowed, 100", retry.attempts),
        );
    }
    for (key, value) in [
        ("upstream.retry.initial_backoff", retry.initial_backoff),
        ("upstream.retry.max_backoff", retry.max_backoff),
        ("upstream.retry.max_elapsed", retry.max_elapsed),
    ] {
        if value > 24 * HOUR {
            problems.push(
                key,
                format!(
                    "{} is more than the longest allowed, 24h",
                    humantime::format_duration(value)
                ),
            );
        }
    }
    UpstreamLimits {
        timeout: raw.timeout,
        connect_timeout: raw.connect_timeout,
        page_limit: raw.page_limit,
        max_concurrency: raw.max_concurrency,
        max_requests_per_statement: raw.max_requests_per_statement,
        max_response_bytes: raw.max_response_bytes,
        retry: RetryPolicy {
            attempts: retry.attempts,
            initial_backoff: retry.initial_backoff,
            max_backoff: retry.max_backoff,
            max_elapsed: retry.max_elapsed,
        },
        await_operations: crate::engine::AwaitLimits {
            poll_interval: raw.await_operations.poll_interval,
            max_wait: raw.await_operations.max_wait,
        },
        max_requests_per_second: Default::default(),
    }
}

/// Checks `limits:`; returns the rows one statement may return.
pub(super) fn check_limits(raw: super::limits::RawLimits, problems: &mut Problems) -> usize {
    problems.in_range(
        "limits.max_result_rows",
        raw.max_result_rows as u64,
        100_000_000,
    );
    raw.max_result_rows
}
