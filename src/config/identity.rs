//! Identity settings: `server.tls`, the connection bounds of `server`, the `auth:` section
//! (mTLS identities, JWT issuers, the protected resource) and the per-tenant tool allowlist
//! and limits. Raw serde types, validated types and their checks.

use super::Problems;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// JWT signature algorithms that may be allowed: asymmetric only (never `none`, never HMAC,
/// whose key a verifier holding a public key must never accept).
pub const JWT_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

// === raw ===

/// `server.tls`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    cert_file: PathBuf,
    key_file: PathBuf,
    #[serde(default)]
    client_ca_file: Option<PathBuf>,
    #[serde(default)]
    client_auth: Option<ClientAuth>,
    #[serde(default = "default_reload_interval", with = "humantime_serde")]
    reload_interval: Duration,
}

fn default_reload_interval() -> Duration {
    Duration::from_secs(10)
}

/// `auth:`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuth {
    #[serde(default)]
    resource: Option<String>,
    #[serde(default)]
    authorization_servers: Vec<String>,
    #[serde(default)]
    mtls: Option<RawMtls>,
    #[serde(default)]
    jwt: Option<RawJwt>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMtls {
    identities: BTreeMap<String, String>,
    #[serde(default)]
    cn_with_sans: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJwt {
    issuers: Vec<RawIssuer>,
    #[serde(default = "default_tenant_claim")]
    tenant_claim: String,
    #[serde(default = "default_leeway", with = "humantime_serde")]
    leeway: Duration,
    #[serde(default = "default_refresh_floor", with = "humantime_serde")]
    jwks_refresh_floor: Duration,
    #[serde(default = "default_jwks_max_age", with = "humantime_serde")]
    jwks_max_age: Duration,
    #[serde(default)]
    scopes: Option<BTreeMap<String, Vec<String>>>,
    #[serde(default)]
    enforce_query_scopes: bool,
}

fn default_tenant_claim() -> String {
    "tenant".to_owned()
}
fn default_leeway() -> Duration {
    Duration::from_secs(30)
}
fn default_refresh_floor() -> Duration {
    Duration::from_secs(30)
}
fn default_jwks_max_age() -> Duration {
    Duration::from_secs(600)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIssuer {
    issuer: String,
    #[serde(default)]
    jwks_url: Option<String>,
    #[serde(default)]
    public_keys: Vec<PathBuf>,
    #[serde(default)]
    algorithms: Option<Vec<String>>,
    #[serde(default)]
    audience: Option<String>,
    #[serde(default)]
    tenants: Option<Vec<String>>,
    #[serde(default)]
    enforce_query_scopes: Option<bool>,
}

/// A tenant's `limits:`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTenantLimits {
    #[serde(default)]
    requests_per_second: Option<f64>,
    #[serde(default)]
    burst: Option<u32>,
    #[serde(default)]
    max_in_flight: Option<usize>,
}

// === validated ===

/// Whether a TLS client must present a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    /// Connections without a trusted client certificate are refused in the handshake.
    Required,
    /// A certificate is verified when presented; requests without one need a bearer token.
    Optional,
}

/// `server.tls`: HTTPS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// PEM bundle of the CAs client certificates must chain to; `None`: no mTLS.
    pub client_ca_file: Option<PathBuf>,
    /// Whether a client certificate is required (only with `client_ca_file`).
    pub client_auth: ClientAuth,
    /// How often the certificate and key files are checked for changes.
    pub reload_interval: Duration,
}

/// `auth:`: how HTTP callers are authenticated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuthConfig {
    /// This server's canonical resource URL (e.g. `https://mcp.example.com/mcp`): the JWT
    /// audience by default, and the `resource` of the protected resource metadata.
    pub resource: Option<String>,
    /// Authorization servers published in the protected resource metadata.
    pub authorization_servers: Vec<String>,
    /// Client-certificate identities (needs `server.tls.client_ca_file`).
    pub mtls: Option<MtlsConfig>,
    /// Bearer tokens.
    pub jwt: Option<JwtConfig>,
}

impl AuthConfig {
    /// Whether any authentication method is configured.
    pub fn enabled(&self) -> bool {
        self.mtls.is_some() || self.jwt.is_some()
    }
}

/// `auth.mtls`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MtlsConfig {
    /// Certificate identity → tenant.
    pub identities: BTreeMap<CertIdentity, String>,
    /// Whether a subject CN identifies a certificate that also has SANs (by default the CN
    /// counts only for certificates without any SAN).
    pub cn_with_sans: bool,
}

/// One identity a client certificate can carry, typed by where in the certificate it is:
/// written `uri:<URI SAN>` (a SPIFFE id), `dns:<DNS SAN>` or `cn:<subject CN>` in
/// `auth.mtls.identities`. A name of one type never matches a name of another.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CertIdentity {
    /// A URI subject alternative name, e.g. `spiffe://example.org/ns/prod/sa/agent`.
    Uri(String),
    /// A DNS subject alternative name, compared in lower case.
    Dns(String),
    /// A common name of the subject.
    Cn(String),
}

impl CertIdentity {
    /// A DNS SAN (lower-cased: DNS names compare without case).
    pub fn dns(name: &str) -> Self {
        CertIdentity::Dns(name.to_ascii_lowercase())
    }

    /// `uri:…`, `dns:…` or `cn:…`; `None` without one of these prefixes or with nothing
    /// after it.
    pub fn parse(typed: &str) -> Option<Self> {
        let (kind, name) = typed.split_once(':')?;
        if name.is_empty() {
            return None;
        }
        match kind {
            "uri" => Some(CertIdentity::Uri(name.to_owned())),
            "dns" => Some(CertIdentity::dns(name)),
            "cn" => Some(CertIdentity::Cn(name.to_owned())),
            _ => None,
        }
    }
}

impl std::fmt::Display for CertIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CertIdentity::Uri(name) => write!(f, "uri:{name}"),
            CertIdentity::Dns(name) => write!(f, "dns:{name}"),
            CertIdentity::Cn(name) => write!(f, "cn:{name}"),
        }
    }
}

/// `auth.jwt`.
#[derive(Clone, Debug, PartialEq)]
pub struct JwtConfig {
    /// Trusted issuers.
    pub issuers: Vec<IssuerConfig>,
    /// The claim naming the caller's tenant.
    pub tenant_claim: String,
    /// Clock skew allowed on `exp`, `nbf` and `iat`.
    pub leeway: Duration,
    /// Least time between the starts of two JWKS fetches.
    pub jwks_refresh_floor: Duration,
    /// A JWKS older than this is fetched again on the next token.
    pub jwks_max_age: Duration,
    /// Scope → the tools it permits; `None`: scopes do not narrow tools.
    pub scopes: Option<BTreeMap<String, BTreeSet<String>>>,
    /// Whether every tool call needs the scope of its query class (`querygate:read`,
    /// `:write`, `:delete`, `:exec`; see [`crate::policy::required_scopes`]) by default;
    /// each issuer may say otherwise.
    pub enforce_query_scopes: bool,
}

impl JwtConfig {
    /// Whether tokens of any issuer need the scopes of their query classes.
    pub fn enforces_query_scopes(&self) -> bool {
        self.issuers
            .iter()
            .any(|issuer| issuer.enforce_query_scopes)
    }
}

/// One trusted JWT issuer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuerConfig {
    /// The exact `iss` value.
    pub issuer: String,
    /// Where its keys come from.
    pub keys: KeySource,
    /// Allowed `alg` values (a subset of [`JWT_ALGORITHMS`]).
    pub algorithms: Vec<String>,
    /// The required `aud` (defaults to `auth.resource`).
    pub audience: String,
    /// The tenants this issuer's tokens may name; a token naming another one is refused.
    pub tenants: BTreeSet<String>,
    /// Whether its tokens need the scope of each call's query class
    /// (`issuers[].enforce_query_scopes`, default `auth.jwt.enforce_query_scopes`).
    pub enforce_query_scopes: bool,
}

/// Where an issuer's verification keys come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// A JWKS document, fetched and cached.
    Jwks(String),
    /// PEM public keys (RSA, EC or Ed25519), read at start.
    Pem(Vec<PathBuf>),
}

/// A tenant's request limits (per replica).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TenantLimits {
    /// Sustained requests per second; `None`: unlimited.
    pub requests_per_second: Option<f64>,
    /// Requests allowed in a burst above the rate (default: one second's worth, at least 1).
    pub burst: u32,
    /// Requests handled at once; `None`: unlimited.
    pub max_in_flight: Option<usize>,
}

// === checks ===

pub(super) fn check_tls(raw: Option<RawTls>, problems: &mut Problems) -> Option<TlsConfig> {
    let raw = raw?;
    let client_auth = match (&raw.client_ca_file, raw.client_auth) {
        (None, Some(_)) => {
            problems.push_line("server.tls.client_auth needs server.tls.client_ca_file".to_owned());
            ClientAuth::Optional
        }
        (_, Some(auth)) => auth,
        (_, None) => ClientAuth::Required,
    };
    if raw.reload_interval.is_zero() {
        problems.push_line("server.tls.reload_interval must be greater than 0".to_owned());
    }
    Some(TlsConfig {
        cert_file: raw.cert_file,
        key_file: raw.key_file,
        client_ca_file: raw.client_ca_file,
        client_auth,
        reload_interval: raw.reload_interval,
    })
}

pub(super) fn check_auth(
    raw: RawAuth,
    tls: Option<&TlsConfig>,
    tenants: &BTreeSet<String>,
    problems: &mut Problems,
) -> AuthConfig {
    if let Some(resource) = &raw.resource {
        match url::Url::parse(resource) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            _ => problems.push_line(format!("auth.resource '{resource}' is not an http(s) URL")),
        }
    }
    let mtls = raw.mtls.map(|mtls| {
        if tls.and_then(|t| t.client_ca_file.as_ref()).is_none() {
            problems.push_line("auth.mtls needs server.tls.client_ca_file".to_owned());
        }
        let mut identities = BTreeMap::new();
        for (identity, tenant) in mtls.identities {
            if !tenants.contains(&tenant) {
                problems.push_line(format!(
                    "auth.mtls.identities.{identity}: unknown tenant '{tenant}'"
                ));
            }
            match CertIdentity::parse(&identity) {
                Some(typed) => {
                    identities.insert(typed, tenant);
                }
                None => problems.push_line(untyped_identity(&identity)),
            }
        }
        MtlsConfig {
            identities,
            cn_with_sans: mtls.cn_with_sans,
        }
    });
    let jwt = raw
        .jwt
        .map(|jwt| check_jwt(jwt, raw.resource.as_deref(), tenants, problems));
    if jwt.is_some() && raw.resource.is_none() {
        problems.push_line(
            "auth.jwt needs auth.resource (the audience tokens are issued for)".to_owned(),
        );
    }
    AuthConfig {
        resource: raw.resource,
        authorization_servers: raw.authorization_servers,
        mtls,
        jwt,
    }
}

/// The problem of an `auth.mtls.identities` key without its type, with the fix.
fn untyped_identity(identity: &str) -> String {
    let suggested = if identity.contains("://") {
        format!("'uri:{identity}' (a URI SAN such as a SPIFFE id)")
    } else {
        format!("'dns:{identity}' (a DNS SAN) or 'cn:{identity}' (the subject CN)")
    };
    format!(
        "auth.mtls.identities: '{identity}' does not say which certificate name it is: write {suggested}; the types are uri:, dns: and cn:"
    )
}

fn check_jwt(
    raw: RawJwt,
    resource: Option<&str>,
    known_tenants: &BTreeSet<String>,
    problems: &mut Problems,
) -> JwtConfig {
    if raw.issuers.is_empty() {
        problems.push_line("auth.jwt.issuers must name at least one issuer".to_owned());
    }
    let mut issuers = Vec::new();
    for (i, issuer) in raw.issuers.into_iter().enumerate() {
        let key = format!("auth.jwt.issuers[{i}]");
        if issuer.issuer.is_empty() || issuer.issuer.contains('#') {
            // Typed names are jwt:<issuer>#<sub>: an issuer holding '#' would make them
            // ambiguous (and an issuer URL has no fragment).
            problems.push(
                format!("{key}.issuer"),
                "must be a non-empty issuer without '#' (an issuer URL has no fragment)",
            );
        }
        let keys = match (issuer.jwks_url, issuer.public_keys.is_empty()) {
            (Some(url), true) => {
                match url::Url::parse(&url) {
                    Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {}
                    _ => {
                        problems.push_line(format!("{key}.jwks_url '{url}' is not an http(s) URL"))
                    }
                }
                KeySource::Jwks(url)
            }
            (None, false) => KeySource::Pem(issuer.public_keys),
            _ => {
                problems.push_line(format!(
                    "{key}: set exactly one of jwks_url and public_keys"
                ));
                KeySource::Pem(Vec::new())
            }
        };
        let algorithms = issuer
            .algorithms
            .unwrap_or_else(|| vec!["RS256".to_owned(), "ES256".to_owned()]);
        if algorithms.is_empty() {
            problems.push_line(format!("{key}.algorithms must not be empty"));
        }
        for alg in &algorithms {
            if !JWT_ALGORITHMS.contains(&alg.as_str()) {
                problems.push_line(format!(
                    "{key}.algorithms: '{alg}' is not allowed (allowed: {})",
                    JWT_ALGORITHMS.join(", ")
                ));
            }
        }
        let audience = issuer
            .audience
            .or_else(|| resource.map(str::to_owned))
            .unwrap_or_default();
        let tenants = check_issuer_tenants(&key, issuer.tenants, known_tenants, problems);
        issuers.push(IssuerConfig {
            issuer: issuer.issuer,
            keys,
            algorithms,
            audience,
            tenants,
            enforce_query_scopes: issuer
                .enforce_query_scopes
                .unwrap_or(raw.enforce_query_scopes),
        });
    }
    if raw.tenant_claim.is_empty() {
        problems.push_line("auth.jwt.tenant_claim must not be empty".to_owned());
    }
    if raw.jwks_max_age.is_zero() {
        problems.push_line("auth.jwt.jwks_max_age must be greater than 0".to_owned());
    }
    JwtConfig {
        issuers,
        tenant_claim: raw.tenant_claim,
        leeway: raw.leeway,
        jwks_refresh_floor: raw.jwks_refresh_floor,
        jwks_max_age: raw.jwks_max_age,
        scopes: raw.scopes.map(|scopes| {
            scopes
                .into_iter()
                .map(|(scope, tools)| (scope, tools.into_iter().collect()))
                .collect()
        }),
        enforce_query_scopes: raw.enforce_query_scopes,
    }
}

/// An issuer's `tenants`: required (an issuer names no tenant unless listed), not empty,
/// and every one a configured tenant.
fn check_issuer_tenants(
    key: &str,
    raw: Option<Vec<String>>,
    known_tenants: &BTreeSet<String>,
    problems: &mut Problems,
) -> BTreeSet<String> {
    let key = format!("{key}.tenants");
    let Some(listed) = raw else {
        problems.push(
            key,
            "missing: list the tenants this issuer's tokens may name (e.g. tenants: [acme]); an issuer names no tenant it is not listed for",
        );
        return BTreeSet::new();
    };
    if listed.is_empty() {
        problems.push(&key, "must name at least one tenant");
    }
    for tenant in &listed {
        if !known_tenants.contains(tenant) {
            problems.push(&key, format!("unknown tenant '{tenant}'"));
        }
    }
    listed.into_iter().collect()
}

pub(super) fn check_tenant_limits(
    tenant: &str,
    raw: Option<RawTenantLimits>,
    problems: &mut Problems,
) -> TenantLimits {
    let raw = raw.unwrap_or_default();
    if let Some(rate) = raw.requests_per_second
        && !(rate.is_finite() && rate > 0.0)
    {
        problems.push(
            format!("tenants[{tenant}].limits.requests_per_second"),
            "must be greater than 0",
        );
    }
    if raw.max_in_flight == Some(0) {
        problems.push(
            format!("tenants[{tenant}].limits.max_in_flight"),
            "must be greater than 0",
        );
    }
    if raw.burst == Some(0) {
        problems.push(
            format!("tenants[{tenant}].limits.burst"),
            "must be at least 1",
        );
    }
    let burst = raw.burst.unwrap_or_else(|| {
        raw.requests_per_second
            .map_or(1, |rate| rate.ceil().clamp(1.0, f64::from(u32::MAX)) as u32)
    });
    TenantLimits {
        requests_per_second: raw.requests_per_second,
        burst,
        max_in_flight: raw.max_in_flight,
    }
}

/// Whether `listen` would serve callers beyond this machine with nobody authenticated: a
/// non-loopback address with neither `auth:` nor required client certificates.
pub fn exposed_unauthenticated(
    listen: std::net::SocketAddr,
    auth: &AuthConfig,
    tls: Option<&TlsConfig>,
) -> bool {
    let mtls_required =
        tls.is_some_and(|t| t.client_ca_file.is_some() && t.client_auth == ClientAuth::Required);
    !listen.ip().is_loopback() && !auth.enabled() && !mtls_required
}

/// Binding a non-loopback address with no authentication needs `allow_unauthenticated`.
pub(super) fn check_exposure(
    listen: std::net::SocketAddr,
    auth: &AuthConfig,
    tls: Option<&TlsConfig>,
    allow_unauthenticated: bool,
    problems: &mut Problems,
) {
    if exposed_unauthenticated(listen, auth, tls) && !allow_unauthenticated {
        problems.push_line(format!(
            "server.listen {listen} is not a loopback address and no authentication is configured (auth.mtls or auth.jwt); set server.allow_unauthenticated: true to serve it anyway"
        ));
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError, KeySource, Sources};

    fn load(yaml: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, yaml).unwrap();
        Config::load(&Sources {
            file: Some(file),
            env: Default::default(),
        })
    }

    fn problems(yaml: &str) -> String {
        match load(yaml) {
            Err(ConfigError::Validation(problems)) => problems.to_string(),
            other => panic!("expected validation problems, got {other:?}"),
        }
    }

    #[test]
    fn jwt_settings_are_checked_together() {
        let text = problems(
            "auth:\n  jwt:\n    issuers:\n      - issuer: a\n        jwks_url: ftp://x\n        algorithms: [HS256, none, ES256]\n      - issuer: b\n",
        );
        for expected in [
            "auth.jwt.issuers[0].jwks_url: 'ftp://x' is not an http(s) URL",
            "auth.jwt.issuers[0].algorithms: 'HS256' is not allowed",
            "auth.jwt.issuers[0].algorithms: 'none' is not allowed",
            "auth.jwt.issuers[1]: set exactly one of jwks_url and public_keys",
            "auth.jwt: needs auth.resource",
        ] {
            assert!(text.contains(expected), "{expected} not in: {text}");
        }
    }

    #[test]
    fn jwt_audience_defaults_to_the_resource() {
        let config = load(
            "auth:\n  resource: https://q.example/mcp\n  jwt:\n    issuers:\n      - issuer: https://idp\n        jwks_url: https://idp/jwks\n        tenants: [default]\n",
        )
        .unwrap();
        let jwt = config.auth.jwt.unwrap();
        assert_eq!(jwt.issuers[0].audience, "https://q.example/mcp");
        assert_eq!(jwt.issuers[0].algorithms, vec!["RS256", "ES256"]);
        assert_eq!(
            jwt.issuers[0].keys,
            KeySource::Jwks("https://idp/jwks".to_owned())
        );
        assert_eq!(jwt.tenant_claim, "tenant");
        assert_eq!(jwt.issuers[0].tenants, ["default".to_owned()].into());
    }

    #[test]
    fn query_scopes_are_enforced_per_issuer_with_a_global_default() {
        let config = load(
            "auth:\n  resource: https://q.example/mcp\n  jwt:\n    enforce_query_scopes: true\n    issuers:\n      - issuer: https://a\n        jwks_url: https://a/jwks\n        tenants: [default]\n      - issuer: https://b\n        jwks_url: https://b/jwks\n        tenants: [default]\n        enforce_query_scopes: false\n",
        )
        .unwrap();
        let jwt = config.auth.jwt.unwrap();
        assert!(jwt.enforce_query_scopes);
        assert!(jwt.issuers[0].enforce_query_scopes);
        assert!(!jwt.issuers[1].enforce_query_scopes);
        assert!(jwt.enforces_query_scopes());
        let config = load(
            "auth:\n  resource: https://q.example/mcp\n  jwt:\n    issuers:\n      - issuer: https://a\n        jwks_url: https://a/jwks\n        tenants: [default]\n",
        )
        .unwrap();
        assert!(
            !config.auth.jwt.unwrap().enforces_query_scopes(),
            "off by default"
        );
    }

    #[test]
    fn tenant_caches_are_checked_and_default() {
        let text = problems(
            "tenants:\n  - id: a\n    cache:\n      ttl: 0s\n      max_entries: 0\n      max_bytes: 0\n",
        );
        for expected in [
            "tenants[0].cache.ttl: must be greater than 0",
            "tenants[0].cache.max_entries: must be at least 1",
            "tenants[0].cache.max_bytes: must be at least 1",
        ] {
            assert!(text.contains(expected), "{expected} not in: {text}");
        }
        let config = load("tenants:\n  - id: a\n    cache: {}\n  - id: b\n").unwrap();
        let cache = |id: &str| {
            config
                .tenants
                .iter()
                .find(|t| t.id == id)
                .unwrap()
                .cache
                .clone()
        };
        assert_eq!(
            cache("a"),
            Some(crate::config::TenantCache {
                ttl: std::time::Duration::from_secs(30),
                max_entries: 256,
                max_bytes: 8 * 1024 * 1024,
            })
        );
        assert_eq!(cache("b"), None);
    }

    #[test]
    fn each_issuer_lists_known_tenants_it_may_name() {
        let issuer = |tenants: &str| {
            format!(
                "tenants:\n  - id: acme\nauth:\n  resource: https://q.example/mcp\n  jwt:\n    issuers:\n      - issuer: https://idp\n        jwks_url: https://idp/jwks\n{tenants}"
            )
        };
        let text = problems(&issuer(""));
        assert!(
            text.contains("auth.jwt.issuers[0].tenants: missing: list the tenants this issuer's tokens may name"),
            "{text}"
        );
        let text = problems(&issuer("        tenants: []\n"));
        assert!(
            text.contains("auth.jwt.issuers[0].tenants: must name at least one tenant"),
            "{text}"
        );
        let text = problems(&issuer("        tenants: [acme, initech]\n"));
        assert!(!text.contains("'acme'"), "{text}");
        assert!(
            text.contains("auth.jwt.issuers[0].tenants: unknown tenant 'initech'"),
            "{text}"
        );
        let config = load(&issuer("        tenants: [acme]\n")).unwrap();
        assert_eq!(
            config.auth.jwt.unwrap().issuers[0].tenants,
            ["acme".to_owned()].into()
        );
    }

    #[test]
    fn mtls_needs_a_client_ca_and_known_tenants() {
        let text = problems(
            "server:\n  tls:\n    cert_file: c\n    key_file: k\nauth:\n  mtls:\n    identities:\n      uri:spiffe://x/a: nobody\n",
        );
        assert!(
            text.contains("auth.mtls: needs server.tls.client_ca_file"),
            "{text}"
        );
        assert!(text.contains("unknown tenant 'nobody'"), "{text}");
    }

    #[test]
    fn mtls_identities_are_typed() {
        let yaml = |identities: &str| {
            format!(
                "tenants:\n  - id: acme\nserver:\n  tls:\n    cert_file: c\n    key_file: k\n    client_ca_file: ca\nauth:\n  mtls:\n    identities:\n{identities}"
            )
        };
        let text = problems(&yaml(
            "      \"spiffe://x/a\": acme\n      agent.example.com: acme\n      \"ftp:x\": acme\n      \"cn:\": acme\n",
        ));
        for expected in [
            "auth.mtls.identities: 'spiffe://x/a' does not say which certificate name it is: write 'uri:spiffe://x/a'",
            "auth.mtls.identities: 'agent.example.com' does not say which certificate name it is: write 'dns:agent.example.com' (a DNS SAN) or 'cn:agent.example.com'",
            "auth.mtls.identities: 'ftp:x' does not say",
            "auth.mtls.identities: 'cn:' does not say",
        ] {
            assert!(text.contains(expected), "{expected} not in: {text}");
        }
        let config = load(&yaml(
            "      \"uri:spiffe://x/a\": acme\n      dns:Agent.Example.com: acme\n      cn:legacy: acme\n",
        ))
        .unwrap();
        let mtls = config.auth.mtls.unwrap();
        let keys: Vec<String> = mtls.identities.keys().map(|k| k.to_string()).collect();
        assert_eq!(
            keys,
            ["uri:spiffe://x/a", "dns:agent.example.com", "cn:legacy"]
        );
        assert!(!mtls.cn_with_sans);
    }

    #[test]
    fn a_public_listen_without_authentication_must_be_allowed() {
        let text = problems("server:\n  listen: 0.0.0.0:8765\n");
        assert!(text.contains("server.allow_unauthenticated"), "{text}");
        let config =
            load("server:\n  listen: 0.0.0.0:8765\n  allow_unauthenticated: true\n").unwrap();
        assert!(config.server.allow_unauthenticated);
        assert!(load("server:\n  listen: 127.0.0.1:8765\n").is_ok());
    }

    #[test]
    fn tenant_limits_are_checked() {
        let text = problems(
            "tenants:\n  - id: a\n    limits:\n      requests_per_second: 0\n      max_in_flight: 0\n      burst: 0\n",
        );
        for expected in [
            "tenants[a].limits.requests_per_second: must be greater than 0",
            "tenants[a].limits.max_in_flight: must be greater than 0",
            "tenants[a].limits.burst: must be at least 1",
        ] {
            assert!(text.contains(expected), "{expected} not in: {text}");
        }
        let config =
            load("tenants:\n  - id: a\n    limits:\n      requests_per_second: 2.5\n").unwrap();
        let a = config.tenants.iter().find(|t| t.id == "a").unwrap();
        assert_eq!(a.limits.burst, 3);
    }
}
