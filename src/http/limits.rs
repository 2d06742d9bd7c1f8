//! Per-tenant request limits on `/mcp`, after authentication: a token bucket
//! (`requests_per_second`, `burst`) and a cap on requests in flight (`max_in_flight`). A
//! tenant over either gets `429` with `Retry-After`; other tenants are not affected. Limits
//! hold per replica.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use futures::future::BoxFuture;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, StatusCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt as _};

use crate::auth::Principal;
use crate::clock::Clock;
use crate::config::TenantConfig;

/// Every tenant's limits.
#[derive(Debug, Default)]
pub struct TenantLimiter {
    tenants: HashMap<String, Gate>,
    /// What the rates refill on.
    clock: Clock,
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
    /// The limits of `tenants`, refilling on `clock`; tenants without limits pass freely.
    pub fn new(tenants: &[TenantConfig], clock: Clock) -> Self {
        let tenants = tenants
            .iter()
            .map(|t| {
                let bucket = t.limits.requests_per_second.map(|rate| {
                    let burst = f64::from(t.limits.burst.max(1));
                    Mutex::new(Bucket {
                        rate,
                        burst,
                        tokens: burst,
                        last: clock.instant(),
                    })
                });
                let in_flight = t.limits.max_in_flight.map(|n| Arc::new(Semaphore::new(n)));
                (t.id.clone(), Gate { bucket, in_flight })
            })
            .collect();
        TenantLimiter { tenants, clock }
    }
}

impl TenantLimiter {
    /// Applies the limits of `principal`'s tenant: a slot of its in-flight cap (held until
    /// dropped) and a token of its rate, or the limit that refuses the request and how long
    /// until it may pass. The in-flight
    /// cap is checked before the rate, so a request refused for either takes nothing from the
    /// other: a refusal costs the tenant no token and holds no slot.
    fn admit(
        &self,
        principal: Option<&Principal>,
    ) -> Result<Option<OwnedSemaphorePermit>, (Refusal, Duration)> {
        let Some(gate) = principal.and_then(|p| self.tenants.get(&p.tenant)) else {
            return Ok(None);
        };
        let permit = match &gate.in_flight {
            Some(slots) => match slots.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => return Err((Refusal::InFlight, Duration::from_secs(1))),
            },
            None => None,
        };
        if let Some(bucket) = &gate.bucket {
            let taken = bucket
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(self.clock.instant());
            if let Err(wait) = taken {
                return Err((Refusal::Rate, wait));
            }
        }
        Ok(permit)
    }
}

/// Applies the caller's tenant limits ([`TenantLimiter`]) to every request, after
/// authentication. A refusal is decided from the principal alone, before the body is read
/// and before the layers below are asked to be ready (the shared `server.max_in_flight` cap
/// among them), and its answer is static.
#[derive(Clone, Debug)]
pub struct TenantLimitLayer {
    limiter: Arc<TenantLimiter>,
}

impl TenantLimitLayer {
    /// A layer applying `limiter`.
    pub fn new(limiter: Arc<TenantLimiter>) -> Self {
        TenantLimitLayer { limiter }
    }
}

impl<S> Layer<S> for TenantLimitLayer {
    type Service = TenantLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TenantLimit {
            inner,
            limiter: self.limiter.clone(),
        }
    }
}

/// The service [`TenantLimitLayer`] builds.
#[derive(Clone, Debug)]
pub struct TenantLimit<S> {
    inner: S,
    limiter: Arc<TenantLimiter>,
}

impl<S> Service<Request> for TenantLimit<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    /// Always ready: the service below is made ready only for an admitted request.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let permit = match self.limiter.admit(request.extensions().get::<Principal>()) {
            Ok(permit) => permit,
            Err((refusal, wait)) => {
                return Box::pin(std::future::ready(Ok(too_many(refusal, wait))));
            }
        };
        let inner = self.inner.clone();
        Box::pin(async move {
            let response = inner.oneshot(request).await;
            drop(permit);
            response
        })
    }
}

/// Which limit refused a request.
#[derive(Clone, Copy, Debug)]
enum Refusal {
    Rate,
    InFlight,
}

impl Refusal {
    /// The JSON body of the `429`, the same bytes every time.
    fn body(self) -> &'static str {
        match self {
            Refusal::Rate => {
                r#"{"error":"Too Many Requests","message":"the tenant's request rate limit is reached; retry after the seconds in Retry-After"}"#
            }
            Refusal::InFlight => {
                r#"{"error":"Too Many Requests","message":"the tenant's requests in flight limit is reached; retry after the seconds in Retry-After"}"#
            }
        }
    }
}

/// `429` with `Retry-After` (`wait` rounded up to whole seconds, at least 1) and a static body.
fn too_many(refusal: Refusal, wait: Duration) -> Response {
    let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
    let mut response = Response::new(Body::from(refusal.body()));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
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
