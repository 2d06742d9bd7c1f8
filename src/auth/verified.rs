//! A cache of bearer tokens already verified: an agent sends the same token with every
//! request, and checking its signature again (tens of microseconds for ES256 or RS256) is
//! the largest cost of an authenticated request, also of requests its tenant's limits then
//! refuse. Entries are keyed by the token's SHA-256 (the token itself is not kept), hold the
//! principal the token gave, and are used only while the token's own `exp`/`nbf` (with the
//! leeway) admit it and for at most [`MAX_ENTRY_AGE`], so a key removed from an issuer's JWKS
//! stops being honoured within that time. Only successes are cached.

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lru::LruCache;
use sha2::{Digest, Sha256};

use super::Principal;

/// Tokens remembered at most (least recently used go first).
const CAPACITY: usize = 4096;

/// Longest an entry is used before the token is verified again.
pub(super) const MAX_ENTRY_AGE: Duration = Duration::from_secs(60);

/// When a verified token may be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Validity {
    /// `exp`, seconds since the epoch.
    pub(super) expires: u64,
    /// `nbf`, seconds since the epoch (0 when absent).
    pub(super) not_before: u64,
}

struct Entry {
    principal: Principal,
    validity: Validity,
    verified: Instant,
}

/// Verified tokens, by digest.
pub(super) struct VerifiedTokens {
    entries: Mutex<LruCache<[u8; 32], Entry>>,
    leeway: u64,
}

impl std::fmt::Debug for VerifiedTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifiedTokens").finish_non_exhaustive()
    }
}

impl VerifiedTokens {
    /// An empty cache; `leeway` as for `exp`/`nbf` at verification.
    pub(super) fn new(leeway: Duration) -> Self {
        let capacity = NonZeroUsize::new(CAPACITY).unwrap_or(NonZeroUsize::MIN);
        VerifiedTokens {
            entries: Mutex::new(LruCache::new(capacity)),
            leeway: leeway.as_secs(),
        }
    }

    /// The principal of `token` when it was verified recently and is valid now.
    pub(super) fn get(&self, token: &str) -> Option<Principal> {
        self.get_at(token, now_secs(), Instant::now())
    }

    /// Remembers a token that verified.
    pub(super) fn insert(&self, token: &str, principal: &Principal, validity: Validity) {
        self.insert_at(token, principal, validity, Instant::now());
    }

    fn get_at(&self, token: &str, now: u64, instant: Instant) -> Option<Principal> {
        let key = digest(token);
        let mut entries = self.entries.lock().ok()?;
        let entry = entries.get(&key)?;
        let fresh = instant.saturating_duration_since(entry.verified) < MAX_ENTRY_AGE;
        let valid = now < entry.validity.expires.saturating_add(self.leeway)
            && now.saturating_add(self.leeway) >= entry.validity.not_before;
        if fresh && valid {
            Some(entry.principal.clone())
        } else {
            entries.pop(&key);
            None
        }
    }

    fn insert_at(&self, token: &str, principal: &Principal, validity: Validity, at: Instant) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.put(
                digest(token),
                Entry {
                    principal: principal.clone(),
                    validity,
                    verified: at,
                },
            );
        }
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Seconds since the Unix epoch now.
pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Method;

    fn principal() -> Principal {
        Principal {
            subject: "alice".into(),
            tenant: "acme".into(),
            method: Method::Jwt,
            issuer: Some("https://idp".into()),
            fingerprint: None,
            tools: None,
            query_scopes: None,
            claims: None,
            groups: Vec::new(),
            subject_token: None,
        }
    }

    #[test]
    fn a_cached_token_is_used_only_while_valid_and_fresh() {
        let cache = VerifiedTokens::new(Duration::from_secs(5));
        let t0 = Instant::now();
        let validity = Validity {
            expires: 1_000,
            not_before: 900,
        };
        cache.insert_at("tok", &principal(), validity, t0);
        assert_eq!(
            cache.get_at("tok", 950, t0).map(|p| p.subject),
            Some("alice".into())
        );
        assert!(cache.get_at("other", 950, t0).is_none());
        // exp + leeway, then the entry is gone.
        assert!(cache.get_at("tok", 1_004, t0).is_some());
        assert!(cache.get_at("tok", 1_005, t0).is_none());
        assert!(
            cache.get_at("tok", 950, t0).is_none(),
            "dropped once expired"
        );
        // Not yet valid (nbf - leeway).
        cache.insert_at("tok", &principal(), validity, t0);
        assert!(cache.get_at("tok", 894, t0).is_none());
        // Too old: verified again.
        cache.insert_at("tok", &principal(), validity, t0);
        assert!(cache.get_at("tok", 950, t0 + MAX_ENTRY_AGE).is_none());
    }
}
