//! Per-tenant request limits on `/mcp`, after authentication: a token bucket
//! (`requests_per_second`, `burst`) and a cap on requests in flight (`max_in_flight`). A
//! tenant over either gets `429` with `Retry-After`; other tenants are not affected. Limits
//! hold per replica.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, StatusCode};
use tokio::sync::Semaphore;

use crate::auth::Principal;
use crate::config::TenantConfig;

/// Every tenant's limits.
#[derive(Debug, Default)]
pub struct TenantLimiter {
    tenants: HashMap<String, Gate>,
}

#[derive(Debug)]
struct Gate {
    bucket: Option<Mutex<Bucket>>,
    in_flight: Option<Arc<Semaphore>>,
}

#[derive(Debug)]
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// Takes a token, or tells how long until one is there.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

impl TenantLimiter {
    /// The limits of `tenants`; tenants without limits pass freely.
    pub fn new(tenants: &[TenantConfig]) -> Self {
        let tenants = tenants
            .iter()
            .map(|t| {
                let bucket = t.limits.requests_per_second.map(|rate| {
                    let burst = f64::from(t.limits.burst.max(1));
                    Mutex::new(Bucket {
                        rate,
                        burst,
                        tokens: burst,
                        last: Instant::now(),
                    })
                });
                let in_flight = t.limits.max_in_flight.map(|n| Arc::new(Semaphore::new(n)));
                (t.id.clone(), Gate { bucket, in_flight })
            })
            .collect();
        TenantLimiter { tenants }
    }
}

/// Applies the caller's tenant limits.
pub async fn limit(
    State(limiter): State<Arc<TenantLimiter>>,
    request: Request,
    next: Next,
) -> Response {
    let gate = request
        .extensions()
        .get::<Principal>()
        .and_then(|p| limiter.tenants.get(&p.tenant));
    let Some(gate) = gate else {
        return next.run(request).await;
    };
    if let Some(bucket) = &gate.bucket {
        let taken = bucket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(Instant::now());
        if let Err(wait) = taken {
            return too_many("request rate", wait);
        }
    }
    let _permit = match &gate.in_flight {
        Some(slots) => match slots.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => return too_many("requests in flight", Duration::from_secs(1)),
        },
        None => None,
    };
    next.run(request).await
}

fn too_many(what: &str, wait: Duration) -> Response {
    let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
    let body = serde_json::json!({
        "error": "Too Many Requests",
        "message": format!("the tenant's {what} limit is reached; retry after {seconds} s"),
    });
    let mut response = (StatusCode::TOO_MANY_REQUESTS, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
        headers.insert(RETRY_AFTER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_burst_then_refills_at_rate() {
        let start = Instant::now();
        let mut bucket = Bucket {
            rate: 2.0,
            burst: 2.0,
            tokens: 2.0,
            last: start,
        };
        assert!(bucket.take(start).is_ok());
        assert!(bucket.take(start).is_ok());
        let wait = bucket.take(start).unwrap_err();
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-6, "{wait:?}");
        assert!(bucket.take(start + Duration::from_millis(500)).is_ok());
    }
}
