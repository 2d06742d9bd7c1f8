//! When a read is retried: which statuses, and how long to wait (`Retry-After` or backoff).

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

/// Bounds on retrying reads. Mutations are never retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = no retries).
    pub attempts: u32,
    /// Wait before the first retry; doubles on each later one.
    pub initial_backoff: Duration,
    /// The longest single wait. A `Retry-After` asking for longer is not waited for.
    pub max_backoff: Duration,
    /// No retry starts once this much time has passed since the first attempt.
    pub max_elapsed: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(10),
            max_elapsed: Duration::from_secs(30),
        }
    }
}

/// Statuses a read retries: 408, 429, 502, 503, 504.
pub(crate) fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 502 | 503 | 504)
}

/// The wait a `Retry-After` header asks for: delay-seconds or an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        let later = SystemTime::now() + Duration::from_secs(120);
        headers.insert(
            "retry-after",
            httpdate::fmt_http_date(later).parse().unwrap(),
        );
        let wait = retry_after(&headers).unwrap();
        assert!(wait > Duration::from_secs(100) && wait <= Duration::from_secs(120));
        headers.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
        assert!(is_retryable_status(429) && !is_retryable_status(500) && !is_retryable_status(403));
    }
}
