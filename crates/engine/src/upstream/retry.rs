//! When a read is retried: which statuses, and how long to wait (`Retry-After` or backoff).

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

use crate::document::DocumentRetry;

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

/// The retry rules for one read: the configured policy with a document's fields over it.
#[derive(Debug, Clone)]
pub(crate) struct EffectiveRetry {
    pub(crate) attempts: u32,
    pub(crate) initial_backoff: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) max_elapsed: Duration,
    pub(crate) multiplier: f64,
    status_codes: Option<Vec<u16>>,
}

impl EffectiveRetry {
    pub(crate) fn new(policy: &RetryPolicy, document: Option<&DocumentRetry>) -> Self {
        let doc = document.cloned().unwrap_or_default();
        EffectiveRetry {
            attempts: doc.max_attempts.unwrap_or(policy.attempts),
            initial_backoff: doc.initial_delay.unwrap_or(policy.initial_backoff),
            max_backoff: doc.max_delay.unwrap_or(policy.max_backoff),
            max_elapsed: policy.max_elapsed,
            multiplier: doc.multiplier.unwrap_or(2.0),
            status_codes: doc.status_codes,
        }
    }

    /// Whether a read answered with `status` is tried again.
    pub(crate) fn retries_status(&self, status: u16) -> bool {
        match &self.status_codes {
            Some(codes) => codes.contains(&status),
            None => is_retryable_status(status),
        }
    }

    /// The wait after `backoff`.
    pub(crate) fn next_backoff(&self, backoff: Duration) -> Duration {
        backoff.mul_f64(self.multiplier).min(self.max_backoff)
    }
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

    #[test]
    fn document_retry_fields_replace_the_configured_ones() {
        let doc = DocumentRetry::parse(&serde_json::json!({
            "max_attempts": 50,
            "initial_delay_ms": 5,
            "retryable_conditions": {"status_codes": [500]}
        }))
        .unwrap();
        let effective = EffectiveRetry::new(&RetryPolicy::default(), Some(&doc));
        assert_eq!(effective.attempts, 10, "capped");
        assert_eq!(effective.initial_backoff, Duration::from_millis(5));
        assert_eq!(effective.max_backoff, Duration::from_secs(10));
        assert!(effective.retries_status(500) && !effective.retries_status(503));
        assert_eq!(DocumentRetry::parse(&serde_json::json!({})), None);
    }
}
