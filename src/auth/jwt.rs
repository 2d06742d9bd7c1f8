//! JWT bearer tokens: trusted issuers with a JWKS URL (fetched on first use, cached, fetched
//! again in the background when older than `jwks_max_age` while the cached keys keep
//! verifying, and when a token names an unknown `kid`; one fetch at a time, which every
//! request needing it awaits, at most once per `jwks_refresh_floor`) or static PEM keys; an
//! allowlist of asymmetric algorithms per issuer (never `none`, never HMAC); `iss`, `aud`,
//! `exp`, `nbf` and `iat` checked with a leeway (each time claim a NumericDate); the tenant
//! from a configured claim, one of the issuer's own; optional scopes that narrow the tools a
//! token may call, and (`enforce_query_scopes`) the token's scopes kept for the gate, which
//! checks each call's query class against them. A token that verified is remembered for a while (`verified`), so the next
//! request with it skips the signature check.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use base64::Engine as _;
use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use http::header::AUTHORIZATION;
use http::request::Parts;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use super::verified::{Validity, VerifiedTokens, now_secs};
use super::{AuthError, AuthSetupError, Authenticator, Forbidden, Method, Principal};
use crate::clock::Clock;
use crate::config::{IssuerConfig, JwtConfig, KeySource};

/// Largest JWKS document accepted.
const MAX_JWKS_BYTES: usize = 1024 * 1024;
/// How long a JWKS fetch may take.
const JWKS_TIMEOUT: Duration = Duration::from_secs(10);

/// Verifies bearer tokens.
#[derive(Debug)]
pub struct JwtAuthenticator {
    issuers: HashMap<String, Issuer>,
    tenant_claim: String,
    leeway: Duration,
    tenants: BTreeSet<String>,
    scopes: Option<BTreeMap<String, BTreeSet<String>>>,
    /// Tokens verified recently: a repeated token skips the signature check.
    verified: VerifiedTokens,
}

struct Issuer {
    config: IssuerConfig,
    algorithms: Vec<Algorithm>,
    keys: Keys,
}

enum Keys {
    Static(Vec<(Family, DecodingKey)>),
    Jwks(Arc<Jwks>),
}

/// Key families: an algorithm only ever verifies with a key of its own family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Rsa,
    Ec,
    Ed,
}

fn family(alg: Algorithm) -> Option<Family> {
    match alg {
        Algorithm::RS256
        | Algorithm::RS384
        | Algorithm::RS512
        | Algorithm::PS256
        | Algorithm::PS384
        | Algorithm::PS512 => Some(Family::Rsa),
        Algorithm::ES256 | Algorithm::ES384 => Some(Family::Ec),
        Algorithm::EdDSA => Some(Family::Ed),
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => None,
    }
}

impl JwtAuthenticator {
    /// From `auth.jwt`; `tenants` are the tenant ids the server serves; the key sets' ages
    /// and refetch floor are read on `clock`.
    pub fn new(
        config: &JwtConfig,
        tenants: BTreeSet<String>,
        clock: &Clock,
    ) -> Result<Self, AuthSetupError> {
        let mut issuers = HashMap::new();
        let client = jwks_client()?;
        for issuer in &config.issuers {
            let algorithms = issuer
                .algorithms
                .iter()
                .filter_map(|a| Algorithm::from_str(a).ok())
                .filter(|a| family(*a).is_some())
                .collect();
            let keys = match &issuer.keys {
                KeySource::Pem(files) => Keys::Static(read_pem_keys(files)?),
                KeySource::Jwks(url) => Keys::Jwks(Arc::new(Jwks {
                    url: url.clone(),
                    client: client.clone(),
                    state: RwLock::new(JwksState::default()),
                    flight: Mutex::new(None),
                    floor: config.jwks_refresh_floor,
                    max_age: config.jwks_max_age,
                    clock: clock.clone(),
                })),
            };
            issuers.insert(
                issuer.issuer.clone(),
                Issuer {
                    config: issuer.clone(),
                    algorithms,
                    keys,
                },
            );
        }
        Ok(JwtAuthenticator {
            issuers,
            tenant_claim: config.tenant_claim.clone(),
            leeway: config.leeway,
            tenants,
            scopes: config.scopes.clone(),
            verified: VerifiedTokens::new(config.leeway),
        })
    }

    /// A verifier of OpenID Connect ID tokens (the approval page's sign-in): `issuer` of
    /// `config` with its keys, algorithms and tenants, the audience `client_id`, no scopes.
    pub fn for_id_tokens(
        config: &JwtConfig,
        issuer: &str,
        client_id: &str,
        tenants: BTreeSet<String>,
    ) -> Result<Self, AuthSetupError> {
        let mut config = config.clone();
        config.issuers.retain(|i| i.issuer == issuer);
        for i in &mut config.issuers {
            i.audience = client_id.to_owned();
            i.enforce_query_scopes = false;
        }
        config.scopes = None;
        Self::new(&config, tenants, &Clock::system())
    }

    /// Verifies `token` as a bearer token is verified (signature, `iss`, `aud`, times, the
    /// tenant claim and the issuer's tenants): its principal.
    pub async fn verify_token(&self, token: &str) -> Result<Principal, AuthError> {
        self.principal(token).await
    }

    /// The token's principal: from the cache of verified tokens, else verified now.
    async fn principal(&self, token: &str) -> Result<Principal, AuthError> {
        if let Some(principal) = self.verified.get(token) {
            return Ok(principal);
        }
        let (principal, validity) = self.verify(token).await?;
        self.verified.insert(token, &principal, validity);
        Ok(principal)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one token's verification steps in order (header, key, signature, claims), each with its own refusal"
    )]
    async fn verify(&self, token: &str) -> Result<(Principal, Validity), AuthError> {
        let invalid = |why: &str| AuthError::InvalidToken(why.to_owned());
        // `alg: none` and unknown algorithms fail here.
        let header =
            jsonwebtoken::decode_header(token).map_err(|_| invalid("malformed token header"))?;
        // RFC 7515 §4.1.11: a token whose `crit` names extensions the recipient does not
        // understand must be rejected, and this server understands none.
        if names_critical_parameters(token) {
            return Err(invalid(
                "the token's header names critical parameters (crit) this server does not understand",
            ));
        }
        let iss = unverified_issuer(token).ok_or_else(|| invalid("the token has no issuer"))?;
        let issuer = self
            .issuers
            .get(&iss)
            .ok_or_else(|| invalid("the token's issuer is not trusted"))?;
        let alg = header.alg;
        let Some(key_family) = family(alg).filter(|_| issuer.algorithms.contains(&alg)) else {
            return Err(invalid(&format!("algorithm {alg:?} is not allowed")));
        };
        let mut validation = Validation::new(alg);
        validation.algorithms = vec![alg];
        validation.leeway = self.leeway.as_secs();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.set_issuer(&[issuer.config.issuer.as_str()]);
        validation.set_audience(&[issuer.config.audience.as_str()]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let claims = match &issuer.keys {
            Keys::Static(keys) => {
                let mut outcome = Err(invalid("signature does not verify"));
                for (_, key) in keys.iter().filter(|(f, _)| *f == key_family) {
                    outcome = decode(token, key, &validation);
                    if !matches!(&outcome, Err(AuthError::InvalidToken(why)) if why == "signature does not verify")
                    {
                        break;
                    }
                }
                outcome?
            }
            Keys::Jwks(jwks) => {
                let key = jwks.key(header.kid.as_deref(), alg).await?;
                decode(token, &key, &validation)?
            }
        };
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| invalid("the token has no subject"))?
            .to_owned();
        let tenant = claims
            .get(&self.tenant_claim)
            .and_then(Value::as_str)
            .ok_or_else(|| {
                AuthError::Forbidden(
                    Forbidden::NoTenant,
                    format!("the token names no tenant (claim '{}')", self.tenant_claim),
                )
            })?;
        if !self.tenants.contains(tenant) {
            return Err(AuthError::Forbidden(
                Forbidden::UnknownTenant,
                format!("unknown tenant '{tenant}'"),
            ));
        }
        if !issuer.config.tenants.contains(tenant) {
            return Err(AuthError::Forbidden(
                Forbidden::TenantNotAllowed,
                format!(
                    "the issuer '{}' may not name tenant '{tenant}' (auth.jwt.issuers[].tenants)",
                    issuer.config.issuer
                ),
            ));
        }
        let granted = token_scopes(&claims);
        let query_scopes = issuer
            .config
            .enforce_query_scopes
            .then(|| Arc::new(granted.iter().cloned().collect::<BTreeSet<String>>()));
        let tools = self.scopes.as_ref().map(|scopes| {
            Arc::new(
                granted
                    .iter()
                    .filter_map(|s| scopes.get(s))
                    .flatten()
                    .cloned()
                    .collect::<BTreeSet<String>>(),
            )
        });
        let validity = check_times(&claims, now_secs(), self.leeway.as_secs())?;
        let principal = Principal {
            subject,
            tenant: tenant.to_owned(),
            method: Method::Jwt,
            issuer: Some(issuer.config.issuer.clone()),
            fingerprint: None,
            tools,
            query_scopes,
            groups: token_groups(&claims),
            claims: Some(Arc::new(claims)),
            subject_token: Some(crate::engine::SubjectToken::new(token)),
        };
        Ok((principal, validity))
    }
}

impl Authenticator for JwtAuthenticator {
    fn authenticate<'a>(
        &'a self,
        parts: &'a Parts,
    ) -> BoxFuture<'a, Result<Option<Principal>, AuthError>> {
        Box::pin(async move {
            let Some(value) = parts.headers.get(AUTHORIZATION) else {
                return Ok(None);
            };
            let token = bearer_token(value).ok_or_else(|| {
                AuthError::InvalidToken("the Authorization header is not a Bearer token".into())
            })?;
            self.principal(token).await.map(Some)
        })
    }
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer")
            .field("issuer", &self.config.issuer)
            .field("algorithms", &self.algorithms)
            .field(
                "keys",
                &match &self.keys {
                    Keys::Static(keys) => format!("{} PEM keys", keys.len()),
                    Keys::Jwks(jwks) => format!("JWKS {}", jwks.url),
                },
            )
            .finish()
    }
}

fn decode(
    token: &str,
    key: &DecodingKey,
    validation: &Validation,
) -> Result<Map<String, Value>, AuthError> {
    jsonwebtoken::decode::<Map<String, Value>>(token, key, validation)
        .map(|data| data.claims)
        .map_err(|err| {
            AuthError::InvalidToken(
                match err.kind() {
                    ErrorKind::ExpiredSignature => "the token has expired",
                    ErrorKind::ImmatureSignature => "the token is not valid yet",
                    ErrorKind::InvalidAudience => "the token is for another audience",
                    ErrorKind::InvalidIssuer => "the token's issuer is not trusted",
                    ErrorKind::MissingRequiredClaim(_) => "the token lacks a required claim",
                    ErrorKind::InvalidAlgorithm => "the token's algorithm does not fit the key",
                    ErrorKind::InvalidSignature => "signature does not verify",
                    _ => "the token cannot be verified",
                }
                .to_owned(),
            )
        })
}

/// The latest NumericDate accepted, 9999-12-31T23:59:59Z: a time claim beyond it is not a
/// date a real issuer writes.
const MAX_NUMERIC_DATE: f64 = 253_402_300_799.0;

/// The time claims as RFC 7519 has them: `exp`, `nbf` and `iat` are NumericDates (a number of
/// seconds, at least 0) when present, and `iat` is not in the future beyond `leeway`.
/// `decode` has checked `exp` and `nbf` against the clock, but passes over an `nbf` that is
/// not a number. Whole seconds, rounded down (a fractional `exp` ends a cache entry early).
fn check_times(claims: &Map<String, Value>, now: u64, leeway: u64) -> Result<Validity, AuthError> {
    let date = |name: &str| -> Result<Option<u64>, AuthError> {
        let Some(value) = claims.get(name) else {
            return Ok(None);
        };
        value
            .as_f64()
            .filter(|secs| secs.is_finite() && (0.0..=MAX_NUMERIC_DATE).contains(secs))
            .map(|secs| Some(secs as u64))
            .ok_or_else(|| {
                AuthError::InvalidToken(format!("the token's '{name}' is not a NumericDate"))
            })
    };
    let expires = date("exp")?.unwrap_or(0);
    let not_before = date("nbf")?.unwrap_or(0);
    if date("iat")?.is_some_and(|issued| issued > now.saturating_add(leeway)) {
        return Err(AuthError::InvalidToken(
            "the token was issued in the future".to_owned(),
        ));
    }
    Ok(Validity {
        expires,
        not_before,
    })
}

/// The `iss` claim, read before verification only to choose the issuer's keys.
fn unverified_issuer(token: &str) -> Option<String> {
    unverified_claims(token)?
        .get("iss")?
        .as_str()
        .map(str::to_owned)
}

/// Whether the token's header has a `crit` member (RFC 7515 §4.1.11).
fn names_critical_parameters(token: &str) -> bool {
    let Some(header) = token.split('.').next() else {
        return false;
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header.trim_end_matches('='))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Map<String, Value>>(&bytes).ok())
        .is_some_and(|fields| fields.contains_key("crit"))
}

/// The token's claims, not verified: to choose the issuer's keys, and to say in the record
/// of a refused token what it claimed to be.
pub(super) fn unverified_claims(token: &str) -> Option<Map<String, Value>> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The bearer token of an `Authorization` header, if it has one.
pub(super) fn bearer_token(value: &http::HeaderValue) -> Option<&str> {
    value
        .to_str()
        .ok()
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// The token's scopes: `scope` (space-separated) or `scp` (a list).
fn token_scopes(claims: &Map<String, Value>) -> Vec<String> {
    match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(s)), _) => s.split_whitespace().map(str::to_owned).collect(),
        (_, Some(Value::Array(list))) => list
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        (_, Some(Value::String(s))) => s.split_whitespace().map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

/// Most groups taken from a token's `groups` claim.
const MAX_GROUPS: usize = 256;

/// The token's `groups` claim: a list of strings (others left out), or one string of
/// space-separated names; at most [`MAX_GROUPS`].
fn token_groups(claims: &Map<String, Value>) -> Vec<String> {
    let groups: Vec<String> = match claims.get("groups") {
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    groups
        .into_iter()
        .filter(|g| !g.is_empty())
        .take(MAX_GROUPS)
        .collect()
}

fn read_pem_keys(
    files: &[std::path::PathBuf],
) -> Result<Vec<(Family, DecodingKey)>, AuthSetupError> {
    let mut keys = Vec::new();
    for file in files {
        let pem = std::fs::read(file).map_err(|source| AuthSetupError::KeyUnreadable {
            path: file.clone(),
            source,
        })?;
        let key = DecodingKey::from_rsa_pem(&pem)
            .map(|k| (Family::Rsa, k))
            .or_else(|_| DecodingKey::from_ec_pem(&pem).map(|k| (Family::Ec, k)))
            .or_else(|_| DecodingKey::from_ed_pem(&pem).map(|k| (Family::Ed, k)))
            .map_err(|_| AuthSetupError::KeyMalformed { path: file.clone() })?;
        keys.push(key);
    }
    Ok(keys)
}

fn jwks_client() -> Result<reqwest::Client, AuthSetupError> {
    let tls = crate::client_tls::web_pki().map_err(AuthSetupError::Tls)?;
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(JWKS_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(AuthSetupError::Client)
}

/// One issuer's JWKS, cached.
struct Jwks {
    url: String,
    client: reqwest::Client,
    state: RwLock<JwksState>,
    /// The fetch under way, awaited by every request that needs its outcome (single
    /// flight); `None` between fetches.
    flight: Mutex<Option<Flight>>,
    floor: Duration,
    max_age: Duration,
    /// What `floor` and `max_age` are measured on.
    clock: Clock,
}

/// A fetch under way: it runs in a task of its own, so a caller that goes away does not
/// cancel it for the others.
type Flight = Shared<BoxFuture<'static, ()>>;

#[derive(Default)]
struct JwksState {
    keys: Vec<JwksKey>,
    /// When the keys were last fetched successfully.
    fetched: Option<Instant>,
    /// When a fetch was last started.
    attempted: Option<Instant>,
}

struct JwksKey {
    kid: Option<String>,
    alg: Option<String>,
    key: Arc<DecodingKey>,
}

impl JwksState {
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<Arc<DecodingKey>> {
        let fits = |k: &&JwksKey| k.alg.as_deref().is_none_or(|a| a == format!("{alg:?}"));
        match kid {
            Some(kid) => self
                .keys
                .iter()
                .filter(fits)
                .find(|k| k.kid.as_deref() == Some(kid)),
            None => {
                let mut fitting = self.keys.iter().filter(fits);
                match (fitting.next(), fitting.next()) {
                    (Some(only), None) => Some(only),
                    _ => None,
                }
            }
        }
        .map(|k| k.key.clone())
    }

    fn fresh(&self, max_age: Duration, clock: &Clock) -> bool {
        self.fetched.is_some_and(|at| clock.since(at) < max_age)
    }
}

impl Jwks {
    /// The key for `kid` and `alg`. A cached key is used at once, also while the set is
    /// older than `max_age` (a fetch then starts in the background); a key not in the cache
    /// waits for the fetch under way, or starts one unless the last one started less than
    /// `floor` ago.
    async fn key(
        self: &Arc<Self>,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Arc<DecodingKey>, AuthError> {
        let (cached, fresh) = {
            let state = self.read();
            (state.find(kid, alg), state.fresh(self.max_age, &self.clock))
        };
        if let Some(key) = cached {
            if !fresh {
                // Not awaited: the cached key verifies while the set is fetched again.
                drop(self.flight());
            }
            return Ok(key);
        }
        if let Some(flight) = self.flight() {
            flight.await;
        }
        let state = self.read();
        match state.find(kid, alg) {
            Some(key) => Ok(key),
            None if state.fetched.is_none() => Err(AuthError::Unavailable(
                "the issuer's key set could not be fetched".to_owned(),
            )),
            None => Err(AuthError::InvalidToken(
                "the token's key id is not in the issuer's key set".into(),
            )),
        }
    }

    /// The fetch under way, else a new one unless the last one started less than `floor`
    /// ago (then `None`: the cache is what there is).
    fn flight(self: &Arc<Self>) -> Option<Flight> {
        let mut flight = self.flight.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = flight.as_ref() {
            return Some(running.clone());
        }
        if self
            .read()
            .attempted
            .is_some_and(|at| self.clock.since(at) < self.floor)
        {
            return None;
        }
        self.write().attempted = Some(self.clock.instant());
        let jwks = self.clone();
        let task = tokio::spawn(async move { jwks.refresh().await });
        let running = async move {
            // A fetch task that panicked leaves the cache as it was.
            let _ = task.await;
        }
        .boxed()
        .shared();
        *flight = Some(running.clone());
        Some(running)
    }

    /// Fetches the key set into the cache (a failure keeps the keys cached before), then
    /// ends the flight.
    async fn refresh(&self) {
        match self.fetch().await {
            Ok(keys) => {
                tracing::debug!(url = %self.url, keys = keys.len(), "JWKS fetched");
                let mut state = self.write();
                state.keys = keys;
                state.fetched = Some(self.clock.instant());
            }
            Err(why) => tracing::warn!(url = %self.url, "JWKS fetch failed: {why}"),
        }
        *self.flight.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    async fn fetch(&self) -> Result<Vec<JwksKey>, String> {
        let mut response = self
            .client
            .get(&self.url)
            .send()
            .await
            .map_err(|err| format!("fetching the issuer's key set: {err}"))?;
        if !response.status().is_success() {
            return Err(format!("the key set URL answered {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|err| format!("reading the issuer's key set: {err}"))?
        {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err("the issuer's key set is too large".to_owned());
            }
            body.extend_from_slice(&chunk);
        }
        let set: JwkSet = serde_json::from_slice(&body)
            .map_err(|err| format!("the issuer's key set is not a JWKS: {err}"))?;
        Ok(set
            .keys
            .iter()
            // Keys marked for encryption never verify signatures.
            .filter(|jwk| {
                !matches!(
                    jwk.common.public_key_use,
                    Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
                )
            })
            .filter_map(|jwk| {
                let key = DecodingKey::from_jwk(jwk).ok()?;
                Some(JwksKey {
                    kid: jwk.common.key_id.clone(),
                    alg: jwk.common.key_algorithm.map(|a| a.to_string()),
                    key: Arc::new(key),
                })
            })
            .collect())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, JwksState> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, JwksState> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_file_errors_are_typed_with_stable_codes() {
        let dir = std::env::temp_dir().join(format!("qg-jwt-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok();
        let missing = dir.join("missing.pem");
        let err = match read_pem_keys(std::slice::from_ref(&missing)) {
            Err(err) => err,
            Ok(_) => panic!("a missing key file was read"),
        };
        assert!(
            matches!(&err, AuthSetupError::KeyUnreadable { path, .. } if *path == missing),
            "{err:?}"
        );
        assert_eq!(err.code(), "auth.setup.key_unreadable");
        assert!(
            err.to_string().starts_with("auth.jwt: cannot read '"),
            "{err}"
        );

        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a key").ok();
        let err = match read_pem_keys(std::slice::from_ref(&junk)) {
            Err(err) => err,
            Ok(_) => panic!("a file without a key was read as one"),
        };
        assert!(
            matches!(err, AuthSetupError::KeyMalformed { .. }),
            "{err:?}"
        );
        assert_eq!(err.code(), "auth.setup.key_malformed");
        std::fs::remove_dir_all(&dir).ok();
    }
}
