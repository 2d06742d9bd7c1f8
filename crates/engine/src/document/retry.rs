//! A provider document's own retry settings (`config.retry`), read from untrusted input:
//! what upstream's retry rules take over the configured policy.

use std::time::Duration;

/// Most attempts a provider document may ask for (documents are untrusted).
const MAX_DOCUMENT_ATTEMPTS: u32 = 10;

/// A provider document's `config.retry` (method, resource, service or provider level, the
/// nearest wins, as in StackQL): each field it sets replaces the configured default.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct DocumentRetry {
    /// `max_attempts` (at most 10).
    pub(crate) max_attempts: Option<u32>,
    /// `initial_delay_ms`.
    pub(crate) initial_delay: Option<Duration>,
    /// `max_delay_ms`.
    pub(crate) max_delay: Option<Duration>,
    /// `multiplier` (above 1).
    pub(crate) multiplier: Option<f64>,
    /// `retryable_conditions.status_codes`.
    pub(crate) status_codes: Option<Vec<u16>>,
}

impl DocumentRetry {
    /// Reads a `retry` object; `None` when it sets nothing usable.
    pub(crate) fn parse(value: &serde_json::Value) -> Option<Self> {
        let millis = |key: &str| {
            value
                .get(key)
                .and_then(serde_json::Value::as_u64)
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis)
        };
        let retry = DocumentRetry {
            max_attempts: value
                .get("max_attempts")
                .and_then(serde_json::Value::as_u64)
                .filter(|n| *n >= 1)
                .map(|n| n.min(u64::from(MAX_DOCUMENT_ATTEMPTS)) as u32),
            initial_delay: millis("initial_delay_ms"),
            max_delay: millis("max_delay_ms"),
            multiplier: value
                .get("multiplier")
                .and_then(serde_json::Value::as_f64)
                .filter(|m| *m > 1.0 && m.is_finite()),
            status_codes: value
                .get("retryable_conditions")
                .and_then(|c| c.get("status_codes"))
                .and_then(serde_json::Value::as_array)
                .map(|codes| {
                    codes
                        .iter()
                        .filter_map(serde_json::Value::as_u64)
                        .filter_map(|c| u16::try_from(c).ok())
                        .collect::<Vec<u16>>()
                })
                .filter(|codes| !codes.is_empty()),
        };
        (retry != DocumentRetry::default()).then_some(retry)
    }
}
