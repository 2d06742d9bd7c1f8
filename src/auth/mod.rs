//! Authentication: who is calling, decided from HTTP parts before any JSON-RPC is read.
//!
//! Each method is an [`Authenticator`] (the decision); [`AuthLayer`] is the plumbing: it asks
//! the configured methods in turn, puts the [`Principal`] into the request extensions, or
//! answers `401` (no or a bad credential, with `WWW-Authenticate: Bearer resource_metadata=…`),
//! `403` (a valid credential naming no known tenant) or `503` (an issuer's keys cannot be
//! fetched). With no method configured every request runs as [`Principal::anonymous`].
//! Every refusal is reported to [`failures`]: counted, and (rate-limited) logged and audited.
//!
//! This module knows the configuration only; it never reads tenants' credentials.

pub mod failures;
pub mod jwt;
pub mod metadata;
pub mod mtls;
mod verified;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::fmt::Debug;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use http::header::{CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::request::Parts;
use http::{HeaderValue, Request, StatusCode};
use rustls::pki_types::CertificateDer;
use tower::{Layer, Service};

use crate::config::Config;

/// How a principal was authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// A verified TLS client certificate.
    Mtls,
    /// A verified JWT bearer token.
    Jwt,
    /// The local user of `querygate stdio` or the CLI.
    Local,
    /// HTTP with authentication off (loopback development).
    Anonymous,
}

impl Method {
    /// `mtls`, `jwt`, `local` or `anonymous`.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Mtls => "mtls",
            Method::Jwt => "jwt",
            Method::Local => "local",
            Method::Anonymous => "anonymous",
        }
    }
}

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The caller's identity: the JWT `sub`, the certificate identity (SPIFFE id, DNS name or
    /// CN), `local` or `anonymous`.
    pub subject: String,
    /// The tenant the caller belongs to.
    pub tenant: String,
    /// How the caller was authenticated.
    pub method: Method,
    /// The JWT issuer (`iss`) that vouched for `subject`; `None` for the other methods. A
    /// principal is its method, issuer and subject together: the same `sub` from two
    /// issuers is two principals.
    pub issuer: Option<String>,
    /// SHA-256 of the client certificate (lower-case hex), for mTLS.
    pub fingerprint: Option<String>,
    /// The tools this credential may call (from the token's scopes); `None`: not narrowed.
    pub tools: Option<Arc<BTreeSet<String>>>,
    /// The token's scopes, when its issuer needs each call's query-class scope
    /// (`auth.jwt.enforce_query_scopes`); `None`: query classes are not scoped.
    pub query_scopes: Option<Arc<BTreeSet<String>>>,
    /// The verified JWT's claims, for the approver rules of out-of-band approvals
    /// (`approval.approvers`: groups and claims); `None` for the other methods.
    pub claims: Option<Arc<serde_json::Map<String, serde_json::Value>>>,
    /// The groups the caller belongs to (the JWT `groups` claim), for Cedar policies;
    /// empty for the other methods.
    pub groups: Vec<String>,
    /// The bearer token the caller authenticated with (JWT), handed to the engine as an
    /// opaque value for providers whose tenant exchanges it for an upstream token
    /// (`tenants[].providers.<name>.token_exchange`); `None` for the other methods.
    pub subject_token: Option<crate::engine::SubjectToken>,
}

impl Principal {
    /// The principal of HTTP requests when authentication is off: `anonymous` of tenant
    /// `default`.
    pub fn anonymous() -> Self {
        Principal {
            subject: "anonymous".to_owned(),
            tenant: "default".to_owned(),
            method: Method::Anonymous,
            issuer: None,
            fingerprint: None,
            tools: None,
            query_scopes: None,
            claims: None,
            groups: Vec::new(),
            subject_token: None,
        }
    }

    /// The local user of stdio and the command line: principal `local` of tenant `default`.
    pub fn local() -> Self {
        Principal {
            subject: "local".to_owned(),
            tenant: "default".to_owned(),
            method: Method::Local,
            issuer: None,
            fingerprint: None,
            tools: None,
            query_scopes: None,
            claims: None,
            groups: Vec::new(),
            subject_token: None,
        }
    }

    /// The typed name approver rules and Cedar policies match
    /// ([`crate::config::PrincipalName`]): `jwt:<issuer>#<sub>` for a token, the certificate
    /// identity (`uri:…`, `dns:…`, `cn:…`) for mTLS, else the subject (`local`,
    /// `anonymous`).
    pub fn typed_name(&self) -> String {
        match (&self.method, &self.issuer) {
            (Method::Jwt, Some(issuer)) => format!("jwt:{issuer}#{}", self.subject),
            _ => self.subject.clone(),
        }
    }

    /// The typed names of its groups, `jwt:<issuer>#<group>`: the groups of a token belong
    /// to its issuer; the other methods carry none.
    pub fn typed_groups(&self) -> impl Iterator<Item = String> + '_ {
        let issuer = match (&self.method, &self.issuer) {
            (Method::Jwt, Some(issuer)) => Some(issuer.as_str()),
            _ => None,
        };
        issuer.into_iter().flat_map(move |issuer| {
            self.groups
                .iter()
                .map(move |g| crate::config::GroupName::typed(issuer, g))
        })
    }

    /// The principal as a person reads it: the subject, with its issuer when it has one
    /// (`alice (https://idp.example.com)`).
    pub fn display_name(&self) -> String {
        match &self.issuer {
            Some(issuer) => format!("{} ({issuer})", self.subject),
            None => self.subject.clone(),
        }
    }

    /// Whether this credential's scopes let it call `tool` (the tenant's own allowlist is
    /// checked separately).
    pub fn may_call(&self, tool: &str) -> bool {
        self.tools.as_ref().is_none_or(|tools| tools.contains(tool))
    }

    /// The scopes of `required` this credential lacks; empty when it has them all or its
    /// query classes are not scoped.
    pub fn missing_scopes<'a>(&self, required: &[&'a str]) -> Vec<&'a str> {
        match &self.query_scopes {
            Some(granted) => crate::policy::missing_scopes(required, granted),
            None => Vec::new(),
        }
    }
}

/// The certificate chain a TLS client presented and rustls verified against the client CA
/// bundle, leaf first; put into each request's extensions by the listener.
#[derive(Clone, Debug)]
pub struct PeerCertificates(pub Arc<Vec<CertificateDer<'static>>>);

/// Why a request is refused before the MCP layer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// No credential was presented.
    #[error("authentication required")]
    Missing,
    /// A credential was presented and is not valid (401).
    #[error("invalid token: {0}")]
    InvalidToken(String),
    /// The credential is valid but does not let the caller in (403).
    #[error("{1}")]
    Forbidden(Forbidden, String),
    /// A token issuer's keys cannot be fetched (503).
    #[error("cannot verify the token now: {0}")]
    Unavailable(String),
}

/// Why a valid credential gets `403`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forbidden {
    /// The token has no tenant claim.
    NoTenant,
    /// The credential names a tenant this server does not have.
    UnknownTenant,
    /// The token's issuer may not name the tenant it names (`auth.jwt.issuers[].tenants`).
    TenantNotAllowed,
    /// The client certificate cannot be parsed.
    CertificateInvalid,
    /// No identity of the client certificate is in `auth.mtls.identities`.
    CertificateUnmapped,
    /// The client certificate's identities map to more than one tenant.
    CertificateAmbiguous,
}

impl AuthError {
    /// Every code [`AuthError::code`] gives.
    pub const CODES: [&'static str; 9] = [
        "auth.missing",
        "auth.invalid_token",
        "auth.no_tenant",
        "auth.unknown_tenant",
        "auth.tenant_not_allowed",
        "auth.certificate_invalid",
        "auth.certificate_unmapped",
        "auth.certificate_ambiguous",
        "auth.unavailable",
    ];

    /// The stable code of the refusal (`auth.…`): in the answer's body, the log line and
    /// the `reason` label of `querygate_auth_failures_total`.
    pub fn code(&self) -> &'static str {
        match self {
            AuthError::Missing => "auth.missing",
            AuthError::InvalidToken(_) => "auth.invalid_token",
            AuthError::Forbidden(why, _) => match why {
                Forbidden::NoTenant => "auth.no_tenant",
                Forbidden::UnknownTenant => "auth.unknown_tenant",
                Forbidden::TenantNotAllowed => "auth.tenant_not_allowed",
                Forbidden::CertificateInvalid => "auth.certificate_invalid",
                Forbidden::CertificateUnmapped => "auth.certificate_unmapped",
                Forbidden::CertificateAmbiguous => "auth.certificate_ambiguous",
            },
            AuthError::Unavailable(_) => "auth.unavailable",
        }
    }
}

/// Why authentication cannot be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthSetupError {
    /// A key file (`auth.jwt.public_key_files`) cannot be read.
    #[error("auth.jwt: cannot read '{}': {source}", path.display())]
    KeyUnreadable {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A key file holds no public key the server can use.
    #[error("auth.jwt: '{}' holds no RSA, EC or Ed25519 public key in PEM", path.display())]
    KeyMalformed {
        /// The file.
        path: std::path::PathBuf,
    },
    /// TLS for the JWKS client cannot be set up.
    #[error("auth.jwt: {0}")]
    Tls(String),
    /// The JWKS HTTP client cannot be built.
    #[error("auth.jwt: HTTP client set-up failed: {0}")]
    Client(#[source] reqwest::Error),
}

impl AuthSetupError {
    /// The stable code of this error (`auth.setup.*`), for logs and exit reports.
    pub fn code(&self) -> &'static str {
        match self {
            AuthSetupError::KeyUnreadable { .. } => "auth.setup.key_unreadable",
            AuthSetupError::KeyMalformed { .. } => "auth.setup.key_malformed",
            AuthSetupError::Tls(_) | AuthSetupError::Client(_) => "auth.setup.client",
        }
    }
}

/// One authentication method: decides who sent `parts`.
pub trait Authenticator: Send + Sync + Debug {
    /// `Ok(None)` when the request carries no credential of this method; an error when it
    /// carries one that is not acceptable.
    fn authenticate<'a>(
        &'a self,
        parts: &'a Parts,
    ) -> BoxFuture<'a, Result<Option<Principal>, AuthError>>;
}

/// The configured methods and what to answer without a credential.
#[derive(Debug)]
pub struct Authentication {
    methods: Vec<Box<dyn Authenticator>>,
    /// `WWW-Authenticate` on 401 (when bearer tokens are accepted).
    challenge: Option<String>,
    /// Where refusals are reported.
    failures: Arc<failures::FailureReporter>,
}

impl Authentication {
    /// The methods `config.auth` configures; none: every request is anonymous. Key-set ages
    /// and refetch floors are measured on `clock`.
    pub fn from_config(
        config: &Config,
        clock: &crate::clock::Clock,
    ) -> Result<Self, AuthSetupError> {
        let tenants: BTreeSet<String> = config.tenants.iter().map(|t| t.id.clone()).collect();
        let mut methods: Vec<Box<dyn Authenticator>> = Vec::new();
        if let Some(mtls) = &config.auth.mtls {
            methods.push(Box::new(mtls::MtlsAuthenticator::new(mtls)));
        }
        let mut challenge = None;
        if let Some(jwt) = &config.auth.jwt {
            methods.push(Box::new(jwt::JwtAuthenticator::new(jwt, tenants, clock)?));
            challenge = metadata::metadata_url(&config.auth)
                .map(|url| format!("Bearer resource_metadata=\"{url}\""));
        }
        Ok(Authentication {
            methods,
            challenge,
            failures: Arc::default(),
        })
    }

    /// Reports refusals to `failures` (the default logs them only).
    pub fn with_failure_reporter(mut self, failures: Arc<failures::FailureReporter>) -> Self {
        self.failures = failures;
        self
    }

    /// Where refusals are reported (counted, logged, audited): also the approval page's
    /// refused ID tokens.
    pub fn failure_reporter(&self) -> Arc<failures::FailureReporter> {
        self.failures.clone()
    }

    /// Whether requests need a credential.
    pub fn enabled(&self) -> bool {
        !self.methods.is_empty()
    }

    /// Who sent `parts`.
    pub async fn authenticate(&self, parts: &Parts) -> Result<Principal, AuthError> {
        if self.methods.is_empty() {
            return Ok(Principal::anonymous());
        }
        for method in &self.methods {
            if let Some(principal) = method.authenticate(parts).await? {
                return Ok(principal);
            }
        }
        Err(AuthError::Missing)
    }

    /// The answer to a refused request.
    pub fn refusal(&self, err: &AuthError) -> Response {
        let (status, challenge) = match err {
            AuthError::Missing => (StatusCode::UNAUTHORIZED, self.challenge.clone()),
            AuthError::InvalidToken(reason) => (
                StatusCode::UNAUTHORIZED,
                self.challenge.as_ref().map(|c| {
                    format!(
                        "{c}, error=\"invalid_token\", error_description=\"{}\"",
                        reason.replace(['"', '\\'], "'")
                    )
                }),
            ),
            AuthError::Forbidden(..) => (StatusCode::FORBIDDEN, None),
            AuthError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, None),
        };
        let body = serde_json::json!({
            "error": status.canonical_reason(),
            "code": err.code(),
            "message": err.to_string(),
        });
        let mut response = (status, body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(value) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            headers.insert(WWW_AUTHENTICATE, value);
        }
        if matches!(err, AuthError::Unavailable(_)) {
            headers.insert(RETRY_AFTER, HeaderValue::from_static("5"));
        }
        response
    }
}

/// Authenticates every request before the inner service sees it.
#[derive(Clone, Debug)]
pub struct AuthLayer {
    authentication: Arc<Authentication>,
}

impl AuthLayer {
    /// A layer over `authentication`.
    pub fn new(authentication: Arc<Authentication>) -> Self {
        AuthLayer { authentication }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Auth {
            inner,
            authentication: self.authentication.clone(),
        }
    }
}

/// The service [`AuthLayer`] builds.
#[derive(Clone, Debug)]
pub struct Auth<S> {
    inner: S,
    authentication: Arc<Authentication>,
}

impl<S> Service<Request<Body>> for Auth<S>
where
    S: Service<Request<Body>, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // Keep the service that was polled ready; leave a fresh clone in its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let authentication = self.authentication.clone();
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            match authentication.authenticate(&parts).await {
                Ok(principal) => {
                    tracing::debug!(
                        subject = %principal.subject,
                        tenant = %principal.tenant,
                        method = principal.method.as_str(),
                        "authenticated"
                    );
                    parts.extensions.insert(principal);
                    inner.call(Request::from_parts(parts, body)).await
                }
                Err(err) => {
                    let refusal = authentication.refusal(&err);
                    authentication.failures.report(&parts, &err).await;
                    Ok(refusal)
                }
            }
        })
    }
}
