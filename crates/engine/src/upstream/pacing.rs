//! Outbound pacing per tenant × provider, so one tenant cannot get a shared cloud account
//! throttled: once a provider answers a tenant's request `429` or `503` with `Retry-After`,
//! the tenant's further requests to that provider wait until then instead of being sent;
//! and a provider with `max_requests_per_second` gets at most that many requests per second
//! from each tenant (a burst of one second's worth, at least 1). A request whose wait would
//! run past its call's deadline is not sent: it fails at once with
//! [`ErrorKind::UpstreamThrottled`](crate::error::ErrorKind::UpstreamThrottled), naming the
//! provider and the wait.
//!
//! Keyed by the tenant and the provider's SQL name only: the engine knows nothing of who
//! the tenant's callers are or how they reach it.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The longest `Retry-After` honoured: a provider asking for more is waited for this long.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(3600);

/// One tenant's traffic to one provider.
#[derive(Debug, Default)]
struct Pace {
    /// Until when the provider asked this tenant to wait.
    paused_until: Option<Instant>,
    /// GCRA's theoretical arrival time of the next request (configured rate only).
    next: Option<Instant>,
}

/// The pacing state of every tenant × provider.
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    /// Requests per second per tenant, by provider.
    rates: HashMap<String, f64>,
    paces: Mutex<HashMap<(String, String), Pace>>,
}

impl Pacer {
    /// A pacer with `rates` (requests per second per tenant, by provider).
    pub(crate) fn new(rates: HashMap<String, f64>) -> Self {
        Pacer {
            rates,
            paces: Mutex::default(),
        }
    }

    /// Reserves the next send of `tenant` to `provider` at `now`: how long to wait before
    /// sending, or (nothing reserved) how long it would have had to wait when that runs
    /// past `deadline`.
    pub(crate) fn reserve(
        &self,
        tenant: &str,
        provider: &str,
        now: Instant,
        deadline: Instant,
    ) -> Result<Duration, Duration> {
        let rate = self.rates.get(provider).copied();
        let mut paces = self.paces.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (tenant.to_owned(), provider.to_owned());
        if rate.is_none() && !paces.contains_key(&key) {
            return Ok(Duration::ZERO);
        }
        let pace = paces.entry(key).or_default();
        let mut start = now;
        if let Some(until) = pace.paused_until {
            if until <= now {
                pace.paused_until = None;
            } else {
                start = until;
            }
        }
        // GCRA: one request per `interval`, a burst of `burst` at once.
        let slot = rate.map(|rate| {
            let interval = Duration::from_secs_f64(1.0 / rate);
            let burst = rate.floor().max(1.0);
            let tolerance = interval.mul_f64(burst - 1.0);
            let tat = pace.next.map_or(start, |next| next.max(start));
            let at = tat.checked_sub(tolerance).map_or(start, |t| t.max(start));
            (at, tat + interval)
        });
        if let Some((at, _)) = slot {
            start = start.max(at);
        }
        let wait = start.saturating_duration_since(now);
        if start > deadline {
            return Err(wait);
        }
        if let Some((_, next)) = slot {
            pace.next = Some(next);
        }
        Ok(wait)
    }

    /// Notes an answer of `provider` to `tenant`: a `429` or `503` with a `Retry-After`
    /// pauses the tenant's further requests to it until then (at most [`MAX_PAUSE`]).
    pub(crate) fn answered(
        &self,
        tenant: &str,
        provider: &str,
        status: u16,
        retry_after: Option<Duration>,
        now: Instant,
    ) {
        let Some(wait) = retry_after.filter(|_| matches!(status, 429 | 503)) else {
            return;
        };
        let until = now + wait.min(MAX_PAUSE);
        let mut paces = self.paces.lock().unwrap_or_else(PoisonError::into_inner);
        let pace = paces
            .entry((tenant.to_owned(), provider.to_owned()))
            .or_default();
        pace.paused_until = Some(pace.paused_until.map_or(until, |u| u.max(until)));
        tracing::debug!(
            tenant,
            provider,
            status,
            wait_ms = wait.as_millis() as u64,
            "provider asked the tenant to wait; its requests to it are paused"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_after_pauses_the_tenant_for_that_provider_only() {
        let pacer = Pacer::default();
        let now = Instant::now();
        let far = now + Duration::from_secs(60);
        assert_eq!(
            pacer.reserve("acme", "github", now, far),
            Ok(Duration::ZERO)
        );
        pacer.answered("acme", "github", 429, Some(Duration::from_secs(2)), now);
        assert_eq!(
            pacer.reserve("acme", "github", now, far),
            Ok(Duration::from_secs(2))
        );
        // Another tenant, another provider: not paused.
        assert_eq!(
            pacer.reserve("globex", "github", now, far),
            Ok(Duration::ZERO)
        );
        assert_eq!(pacer.reserve("acme", "okta", now, far), Ok(Duration::ZERO));
        // A deadline before the pause ends: not sent, the wait said.
        assert_eq!(
            pacer.reserve("acme", "github", now, now + Duration::from_secs(1)),
            Err(Duration::from_secs(2))
        );
        // A 500, or a 429 without Retry-After, pauses nothing.
        pacer.answered("acme", "okta", 500, Some(Duration::from_secs(9)), now);
        pacer.answered("acme", "okta", 429, None, now);
        assert_eq!(pacer.reserve("acme", "okta", now, far), Ok(Duration::ZERO));
        let later = now + Duration::from_secs(2);
        assert_eq!(
            pacer.reserve("acme", "github", later, far),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn a_configured_rate_spaces_requests_after_a_burst() {
        let pacer = Pacer::new(HashMap::from([("github".to_owned(), 2.0)]));
        let now = Instant::now();
        let far = now + Duration::from_secs(60);
        let waits: Vec<Duration> = (0..5)
            .map(|_| pacer.reserve("acme", "github", now, far).unwrap())
            .collect();
        assert_eq!(
            waits,
            [0, 0, 500, 1000, 1500].map(Duration::from_millis),
            "a burst of 2, then one every 500 ms"
        );
        // Refused reservations take no slot.
        assert_eq!(
            pacer.reserve("acme", "github", now, now + Duration::from_millis(100)),
            Err(Duration::from_millis(2000))
        );
        assert_eq!(
            pacer.reserve("acme", "github", now, far),
            Ok(Duration::from_millis(2000))
        );
        assert_eq!(
            pacer.reserve("globex", "github", now, far),
            Ok(Duration::ZERO)
        );
    }
}
