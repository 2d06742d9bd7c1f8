//! What a refused request leaves behind: every refusal is counted (the `reason` label of
//! `querygate_auth_failures_total`, one of the stable `auth.…` codes), and the first
//! refusal of a reason from a client address in each [`WINDOW`] becomes a log line (at
//! `warn`, the default level) and an `auth_failure` audit record. Those that follow in the
//! same window are only counted; the next record and log line of that pair say how many
//! were left out (`suppressed`), so a flood of bad tokens costs one record per reason and
//! address per minute, not one per request.
//!
//! What is recorded: the reason and its message, the client's IP address, what the
//! credential names (the token's `iss` and `sub`, unverified when the token is refused as
//! invalid; the client certificate's SHA-256 fingerprint) and the request id. Never the
//! token or any other header value. Claimed names are cut to [`MAX_NAME_CHARS`] characters
//! and their control characters escaped: they come from whoever sent the request.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ConnectInfo;
use http::header::AUTHORIZATION;
use http::request::Parts;
use tokio::time::Instant;

use super::{AuthError, PeerCertificates};
use crate::audit::Auditor;
use crate::audit::record::{self, AuditRecord, Decision, Outcome, Phase};

/// How long one (reason, address) pair is recorded at most once.
pub const WINDOW: Duration = Duration::from_secs(60);

/// Pairs tracked at most; refusals from further addresses share one entry per reason.
const MAX_TRACKED: usize = 4096;

/// The longest claimed issuer, subject or message kept, in characters.
pub const MAX_NAME_CHARS: usize = 256;

/// Counts refusals by reason (metrics), without this module knowing who listens.
pub trait FailureCounter: Send + Sync + std::fmt::Debug {
    /// One request was refused for `reason` (an `auth.…` code).
    fn auth_failure(&self, reason: &'static str);
}

/// The reason of a client certificate refused in the TLS handshake (missing where
/// required, expired, of an untrusted CA): no request was read.
pub const HANDSHAKE_REASON: &str = "auth.certificate_rejected";

/// Every `reason` this module reports: the codes of [`AuthError`] and
/// [`HANDSHAKE_REASON`].
pub const REASONS: [&str; 10] = {
    let mut all = [HANDSHAKE_REASON; 10];
    let mut i = 0;
    while i < AuthError::CODES.len() {
        all[i] = AuthError::CODES[i];
        i += 1;
    }
    all
};

/// One refused request, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The stable code (`auth.invalid_token`, …).
    pub reason: &'static str,
    /// The refusal's text.
    pub message: String,
    /// The client's IP address, when known.
    pub client: Option<IpAddr>,
    /// The token's `iss`, as the token claims it.
    pub issuer: Option<String>,
    /// The token's `sub`, as the token claims it.
    pub subject: Option<String>,
    /// SHA-256 of the client certificate, when one was presented.
    pub fingerprint: Option<String>,
    /// The request's `x-request-id`.
    pub request_id: Option<String>,
}

impl Refusal {
    /// What `parts` show of a request refused with `err`.
    pub fn of(parts: &Parts, err: &AuthError) -> Self {
        let claims = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(super::jwt::bearer_token)
            .and_then(super::jwt::unverified_claims);
        let claim = |name: &str| {
            claims
                .as_ref()
                .and_then(|c| c.get(name))
                .and_then(|v| v.as_str())
                .map(bounded)
        };
        Refusal {
            reason: err.code(),
            message: bounded(&err.to_string()),
            client: client_ip(parts),
            issuer: claim("iss"),
            subject: claim("sub"),
            fingerprint: parts
                .extensions
                .get::<PeerCertificates>()
                .and_then(|certs| certs.0.first())
                .map(|leaf| super::mtls::fingerprint(leaf.as_ref())),
            request_id: parts
                .headers
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .map(bounded),
        }
    }
}

/// The peer's IP address (the listener puts it into every request).
fn client_ip(parts: &Parts) -> Option<IpAddr> {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip())
}

/// `text` cut to [`MAX_NAME_CHARS`] characters, control and bidi characters escaped.
fn bounded(text: &str) -> String {
    let cut: String = text.chars().take(MAX_NAME_CHARS).collect();
    let more = if text.chars().nth(MAX_NAME_CHARS).is_some() {
        "…"
    } else {
        ""
    };
    format!("{}{more}", crate::safe_text::escape_display_str(&cut))
}

#[derive(Debug)]
struct Window {
    started: Instant,
    suppressed: u64,
}

/// Where refusals go: the counter, the log, the audit.
#[derive(Debug, Default)]
pub struct FailureReporter {
    audit: Option<Auditor>,
    counter: Option<Arc<dyn FailureCounter>>,
    windows: Mutex<HashMap<(&'static str, Option<IpAddr>), Window>>,
}

impl FailureReporter {
    /// Reports to `audit` and `counter` (each optional); the log always.
    pub fn new(audit: Option<Auditor>, counter: Option<Arc<dyn FailureCounter>>) -> Self {
        FailureReporter {
            audit,
            counter,
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// Counts the refusal of `parts` with `err`; logs and records it unless its pair was
    /// recorded in this window (the credential is read only then).
    pub async fn report(&self, parts: &Parts, err: &AuthError) {
        let reason = err.code();
        if let Some(counter) = &self.counter {
            counter.auth_failure(reason);
        }
        let Some(suppressed) = self.admit(reason, client_ip(parts), Instant::now()) else {
            return;
        };
        self.emit(Refusal::of(parts, err), suppressed).await;
    }

    /// Counts an ID token refused at the approval page's sign-in (`err`), of a request whose
    /// `parts` are given; logs and records it as a refused bearer token is, with what the
    /// token claims (never the token).
    pub async fn report_id_token(&self, parts: &Parts, token: &str, err: &AuthError) {
        let reason = err.code();
        if let Some(counter) = &self.counter {
            counter.auth_failure(reason);
        }
        let Some(suppressed) = self.admit(reason, client_ip(parts), Instant::now()) else {
            return;
        };
        let claims = super::jwt::unverified_claims(token);
        let claim = |name: &str| {
            claims
                .as_ref()
                .and_then(|c| c.get(name))
                .and_then(|v| v.as_str())
                .map(bounded)
        };
        let refusal = Refusal {
            issuer: claim("iss"),
            subject: claim("sub"),
            message: bounded(&format!("approval page sign-in: {err}")),
            fingerprint: None,
            ..Refusal::of(parts, err)
        };
        self.emit(refusal, suppressed).await;
    }

    /// Counts a client certificate refused in the TLS handshake from `client`; logs and
    /// records it as [`HANDSHAKE_REASON`] unless that pair was recorded in this window.
    pub async fn report_handshake(&self, client: IpAddr, why: String) {
        if let Some(counter) = &self.counter {
            counter.auth_failure(HANDSHAKE_REASON);
        }
        let Some(suppressed) = self.admit(HANDSHAKE_REASON, Some(client), Instant::now()) else {
            return;
        };
        let refusal = Refusal {
            reason: HANDSHAKE_REASON,
            message: bounded(&why),
            client: Some(client),
            issuer: None,
            subject: None,
            fingerprint: None,
            request_id: None,
        };
        self.emit(refusal, suppressed).await;
    }

    /// The log line and the audit record of a refusal admitted by [`Self::admit`].
    async fn emit(&self, refusal: Refusal, suppressed: u64) {
        let client = refusal
            .client
            .map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
        tracing::warn!(
            reason = refusal.reason,
            client = %client,
            issuer = refusal.issuer.as_deref().unwrap_or(""),
            subject = refusal.subject.as_deref().unwrap_or(""),
            fingerprint = refusal.fingerprint.as_deref().unwrap_or(""),
            suppressed,
            "request refused by authentication: {}",
            refusal.message
        );
        let Some(audit) = &self.audit else {
            return;
        };
        let auth_method = if refusal.issuer.is_some() || refusal.subject.is_some() {
            "jwt"
        } else if refusal.fingerprint.is_some() || refusal.reason == HANDSHAKE_REASON {
            "mtls"
        } else {
            "none"
        };
        let record = AuditRecord {
            timestamp: record::timestamp_now(),
            phase: Phase::AuthFailure,
            call_id: record::new_call_id(),
            request_id: refusal.request_id,
            principal: refusal.subject.unwrap_or_default(),
            issuer: refusal.issuer,
            auth_method: auth_method.to_owned(),
            cert_fingerprint: refusal.fingerprint,
            decision: Decision::RefuseImmediate,
            outcome: Some(Outcome::Error),
            error_code: Some(refusal.reason.to_owned()),
            error: Some(refusal.message),
            client_addr: Some(client),
            suppressed: Some(suppressed),
            ..Default::default()
        };
        // The request is refused whatever happens here; a failed write is logged there.
        let _ = audit.record(record).await;
    }

    /// `Some(suppressed before)` when the pair is to be recorded now, `None` when this
    /// refusal is only counted.
    fn admit(&self, reason: &'static str, client: Option<IpAddr>, now: Instant) -> Option<u64> {
        let Ok(mut windows) = self.windows.lock() else {
            return Some(0);
        };
        if windows.len() >= MAX_TRACKED {
            windows.retain(|_, w| now.duration_since(w.started) < WINDOW);
        }
        let key = if windows.len() >= MAX_TRACKED && !windows.contains_key(&(reason, client)) {
            (reason, None)
        } else {
            (reason, client)
        };
        match windows.get_mut(&key) {
            Some(window) if now.duration_since(window.started) < WINDOW => {
                window.suppressed += 1;
                None
            }
            Some(window) => {
                let suppressed = window.suppressed;
                *window = Window {
                    started: now,
                    suppressed: 0,
                };
                Some(suppressed)
            }
            None => {
                windows.insert(
                    key,
                    Window {
                        started: now,
                        suppressed: 0,
                    },
                );
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_record_per_reason_and_address_per_window() {
        let reporter = FailureReporter::default();
        let t0 = Instant::now();
        let a = Some(IpAddr::from([127, 0, 0, 1]));
        let b = Some(IpAddr::from([127, 0, 0, 2]));
        assert_eq!(reporter.admit("auth.invalid_token", a, t0), Some(0));
        assert_eq!(reporter.admit("auth.invalid_token", a, t0), None);
        assert_eq!(reporter.admit("auth.invalid_token", a, t0), None);
        assert_eq!(reporter.admit("auth.missing", a, t0), Some(0));
        assert_eq!(reporter.admit("auth.invalid_token", b, t0), Some(0));
        assert_eq!(
            reporter.admit("auth.invalid_token", a, t0 + WINDOW),
            Some(2),
            "the next window's record counts what the last one left out"
        );
        assert_eq!(reporter.admit("auth.invalid_token", a, t0 + WINDOW), None);
    }

    #[test]
    fn tracked_pairs_are_bounded() {
        let reporter = FailureReporter::default();
        let t0 = Instant::now();
        for n in 0..(MAX_TRACKED as u32 + 100) {
            let ip = Some(IpAddr::from(n.to_be_bytes()));
            let _ = reporter.admit("auth.missing", ip, t0);
        }
        assert!(reporter.windows.lock().unwrap().len() <= MAX_TRACKED + 1);
    }

    #[test]
    fn claimed_names_are_cut_and_escaped() {
        let long = "a".repeat(1000);
        let cut = bounded(&long);
        assert_eq!(cut.chars().count(), MAX_NAME_CHARS + 1);
        assert_eq!(bounded("x\u{1b}[31m"), "x\\u{1b}[31m");
    }
}
