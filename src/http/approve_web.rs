//! The approval web page (`approval.web`): `GET /approve` lists the signed-in person's
//! tenant's approvals, `GET /approve/{id}` shows one (trusted fields first, the plan, the SQL
//! last, escaped onto one line and as HTML), and `POST /approve/{id}/approve|deny` decides it
//! with a reason, under the same rules as the HTTP API (`approval.approvers`,
//! `require_distinct_approver`), recorded with method `web`.
//!
//! Sign-in is OpenID Connect, authorization code with PKCE (S256), against
//! `approval.web.issuer` (`/.well-known/openid-configuration`), hand-written over the
//! server's reqwest client: `state` and `nonce` are checked, and the ID token is verified
//! as a bearer token of that `auth.jwt` issuer is (its keys, algorithms and tenants; the
//! tenant claim), with the client id as audience. The session is a cookie holding the ID
//! token and a CSRF token, sealed (HMAC) with keys derived from the approval key ring,
//! `HttpOnly`, `SameSite=Lax`, `Secure` over TLS, for `approval.web.session_ttl`; each
//! request verifies the token again. Every POST carries the session's CSRF token.
//! Responses forbid framing and scripts (`Content-Security-Policy: default-src 'none'`).

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use http::StatusCode;
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use rmcp::model::{RequestStateCodec, SealOptions};
use serde::{Deserialize, Serialize};

use crate::approval::{DecideError, Decider, OutOfBand, PendingApproval};
use crate::audit::Auditor;
use crate::auth::failures::FailureReporter;
use crate::auth::jwt::JwtAuthenticator;
use crate::auth::{AuthError, AuthSetupError, Principal};
use crate::config::{Config, WebConfig};
use crate::safe_text::escape_inline;

/// The session cookie.
const SESSION: &str = "qg_approve_session";
/// The cookie of a sign-in under way (state, nonce, PKCE verifier, where to go back to).
const LOGIN: &str = "qg_approve_login";
/// How long a sign-in at the provider may take.
const LOGIN_TTL: Duration = Duration::from_secs(600);
/// Largest cookie value sent (browsers keep about 4 KiB per cookie).
const MAX_COOKIE: usize = 3900;
/// Largest answer read from the provider (discovery, token endpoint).
const MAX_PROVIDER_BYTES: usize = 256 * 1024;
/// Associated data of the two cookies: one never opens as the other.
const SESSION_AD: &[u8] = b"querygate-approval-web/session";
const LOGIN_AD: &[u8] = b"querygate-approval-web/login";

/// What every page answers with: no scripts, styles, frames or referrers; nothing cached.
const CSP: &str = "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

#[derive(Clone)]
struct Web {
    inner: Arc<Inner>,
}

struct Inner {
    oob: Arc<OutOfBand>,
    audit: Option<Auditor>,
    config: WebConfig,
    verifier: JwtAuthenticator,
    codec: Arc<RequestStateCodec>,
    client: reqwest::Client,
    discovery: tokio::sync::OnceCell<Discovery>,
    /// Whether the listener serves TLS (the cookies are then `Secure`).
    secure: bool,
    /// Where refused ID tokens are reported (counted, logged, audited).
    failures: Arc<FailureReporter>,
    redirect_uri: String,
}

/// The provider's metadata this client uses.
#[derive(Debug, Clone, Deserialize)]
struct Discovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
}

/// A sign-in under way.
#[derive(Serialize, Deserialize)]
struct Login {
    state: String,
    nonce: String,
    verifier: String,
    next: String,
}

/// A signed-in person: the ID token (verified again on each request) and the CSRF token.
#[derive(Serialize, Deserialize)]
struct Session {
    token: String,
    csrf: String,
}

impl Session {
    /// The session's id where signed-out sessions are kept: a digest of its CSRF token
    /// (random, one per sign-in), so the store never holds the token itself.
    fn id(&self) -> String {
        crate::digest::sha256_hex(format!("approval-web-session\u{1f}{}", self.csrf).as_bytes())
    }
}

/// The page's routes (no bearer authentication: the session cookie is theirs), or `None`
/// without `approval.web` or out-of-band approval.
pub fn routes(
    config: &Config,
    oob: Option<Arc<OutOfBand>>,
    audit: Option<Auditor>,
    failures: Arc<FailureReporter>,
) -> Result<Option<Router>, AuthSetupError> {
    let (Some(web), Some(oob), Some(jwt)) = (&config.approval.web, oob, &config.auth.jwt) else {
        return Ok(None);
    };
    let Some(codec) = oob.session_codec() else {
        return Ok(None);
    };
    let tenants: BTreeSet<String> = config.tenants.iter().map(|t| t.id.clone()).collect();
    let verifier = JwtAuthenticator::for_id_tokens(jwt, &web.issuer, &web.client_id, tenants)?;
    let tls = crate::client_tls::web_pki().map_err(AuthSetupError::Tls)?;
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("querygate/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(AuthSetupError::Client)?;
    let state = Web {
        inner: Arc::new(Inner {
            oob,
            audit,
            redirect_uri: format!("{}/approve/callback", web.base_url),
            config: web.clone(),
            verifier,
            codec,
            client,
            discovery: tokio::sync::OnceCell::new(),
            secure: config.server.tls.is_some(),
            failures,
        }),
    };
    Ok(Some(
        Router::new()
            .route("/approve", get(list))
            .route("/approve/login", get(login))
            .route("/approve/callback", get(callback))
            .route("/approve/logout", post(logout))
            .route("/approve/{id}", get(show))
            .route("/approve/{id}/approve", post(approve))
            .route("/approve/{id}/deny", post(deny))
            .with_state(state)
            .layer(axum::middleware::map_response(headers)),
    ))
}

/// The security headers of every answer of the page.
async fn headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `text` as HTML text or attribute value.
fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Text shown on the page: control and bidirectional characters escaped (as in the
/// prompt), then HTML-escaped.
fn shown(text: &str) -> String {
    html(&escape_inline(text))
}

fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let document = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} · querygate</title></head><body>\n<h1>{}</h1>\n{body}\n</body></html>\n",
        html(title),
        html(title)
    );
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        document,
    )
        .into_response()
}

fn problem(status: StatusCode, code: &str, message: &str) -> Response {
    page(
        status,
        "Not possible",
        &format!(
            "<p id=\"error\" data-code=\"{}\">{}</p>\n<p><a href=\"/approve\">Approvals</a></p>",
            html(code),
            shown(message)
        ),
    )
}

fn decide_problem(err: &DecideError) -> Response {
    let status = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    problem(status, err.code().as_str(), &err.to_string())
}

fn redirect(to: &str) -> Response {
    match HeaderValue::from_str(to) {
        Ok(location) => (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response(),
        Err(_) => problem(
            StatusCode::BAD_GATEWAY,
            "approval.web",
            "the provider's authorization endpoint is not a usable URL",
        ),
    }
}

fn random(bytes: usize) -> Option<String> {
    crate::digest::random_bytes(bytes)
        .ok()
        .map(|b| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

fn form(bytes: &[u8]) -> HashMap<String, String> {
    url::form_urlencoded::parse(bytes).into_owned().collect()
}

impl Web {
    fn set_cookie(&self, name: &str, value: &str, max_age: Duration) -> Option<HeaderValue> {
        let secure = if self.inner.secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{name}={value}; Path=/approve; Max-Age={}; HttpOnly; SameSite=Lax{secure}",
            max_age.as_secs()
        ))
        .ok()
    }

    fn clear_cookie(&self, name: &str) -> Option<HeaderValue> {
        self.set_cookie(name, "", Duration::ZERO)
    }

    fn seal<T: Serialize>(&self, value: &T, ad: &[u8], ttl: Duration) -> Option<String> {
        self.inner
            .codec
            .seal_json_with(value, &SealOptions::new().associated_data(ad).ttl(ttl))
            .ok()
            .filter(|sealed| sealed.len() <= MAX_COOKIE)
    }

    fn open<T: serde::de::DeserializeOwned>(
        &self,
        headers: &HeaderMap,
        name: &str,
        ad: &[u8],
    ) -> Option<T> {
        let sealed = cookie(headers, name)?;
        self.inner.codec.open_json_with(&sealed, ad).ok()
    }

    /// The signed-in person, if the session cookie opens, was not signed out, and its ID
    /// token still verifies. A store that cannot answer counts as signed out (fail closed).
    async fn session(&self, headers: &HeaderMap) -> Option<(Principal, Session)> {
        let session: Session = self.open(headers, SESSION, SESSION_AD)?;
        let signed_out = self
            .inner
            .oob
            .store()
            .signed_out(&session.id())
            .await
            .unwrap_or(true);
        if signed_out {
            return None;
        }
        let principal = self
            .inner
            .verifier
            .verify_token(&session.token)
            .await
            .ok()?;
        Some((principal, session))
    }

    /// The provider's metadata, read once (a failed read is tried again next time).
    async fn discovery(&self) -> Result<&Discovery, String> {
        self.inner
            .discovery
            .get_or_try_init(|| async {
                let url = format!(
                    "{}/.well-known/openid-configuration",
                    self.inner.config.issuer.trim_end_matches('/')
                );
                let bytes = self.fetch(self.inner.client.get(&url)).await?;
                let discovery: Discovery = serde_json::from_slice(&bytes)
                    .map_err(|err| format!("the provider's discovery document is not usable: {err}"))?;
                if discovery.issuer != self.inner.config.issuer {
                    return Err(format!(
                        "the provider's discovery document names issuer '{}', not approval.web.issuer",
                        escape_inline(&discovery.issuer)
                    ));
                }
                for endpoint in [&discovery.authorization_endpoint, &discovery.token_endpoint] {
                    if !url::Url::parse(endpoint)
                        .is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
                    {
                        return Err("the provider's endpoints must be http or https URLs".into());
                    }
                }
                Ok(discovery)
            })
            .await
    }

    /// The body of a successful answer, bounded.
    async fn fetch(&self, request: reqwest::RequestBuilder) -> Result<Bytes, String> {
        let mut response = request.send().await.map_err(|err| {
            format!(
                "the OpenID provider cannot be reached: {}",
                err.without_url()
            )
        })?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|err| {
            format!(
                "the OpenID provider's answer broke off: {}",
                err.without_url()
            )
        })? {
            if body.len() + chunk.len() > MAX_PROVIDER_BYTES {
                return Err("the OpenID provider's answer is too large".into());
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            // The provider's error code only (RFC 6749 §5.2), never the body as a whole.
            let code = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
                .unwrap_or_default();
            return Err(format!(
                "the OpenID provider answered {status} {}",
                escape_inline(&code)
            ));
        }
        Ok(Bytes::from(body))
    }

    fn sign_in_link(next: &str) -> String {
        let next: String = url::form_urlencoded::byte_serialize(next.as_bytes()).collect();
        format!("/approve/login?next={next}")
    }
}

/// Where to go back to after signing in: only a page of this one.
fn local_next(next: Option<&String>) -> String {
    match next {
        Some(n)
            if (n == "/approve" || n.starts_with("/approve/"))
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/-_".contains(c)) =>
        {
            n.clone()
        }
        _ => "/approve".to_owned(),
    }
}

async fn login(State(web): State<Web>, RawQuery(query): RawQuery) -> Response {
    let query = form(query.unwrap_or_default().as_bytes());
    let next = local_next(query.get("next"));
    let discovery = match web.discovery().await {
        Ok(d) => d.clone(),
        Err(err) => return problem(StatusCode::BAD_GATEWAY, "approval.web", &err),
    };
    let (Some(state), Some(nonce), Some(verifier)) = (random(24), random(24), random(32)) else {
        return problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "approval.web",
            "no randomness for a sign-in",
        );
    };
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(<sha2::Sha256 as sha2::Digest>::digest(verifier.as_bytes()));
    let mut target = match url::Url::parse(&discovery.authorization_endpoint) {
        Ok(url) => url,
        Err(_) => {
            return problem(
                StatusCode::BAD_GATEWAY,
                "approval.web",
                "the provider's authorization endpoint is not a URL",
            );
        }
    };
    target
        .query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", &web.inner.config.client_id)
        .append_pair("redirect_uri", &web.inner.redirect_uri)
        .append_pair("scope", &web.inner.config.scopes.join(" "))
        .append_pair("state", &state)
        .append_pair("nonce", &nonce)
        .append_pair("code_challenge", &challenge)
        .append_pair("code_challenge_method", "S256");
    let pending = Login {
        state,
        nonce,
        verifier,
        next,
    };
    let Some(cookie) = web
        .seal(&pending, LOGIN_AD, LOGIN_TTL)
        .and_then(|sealed| web.set_cookie(LOGIN, &sealed, LOGIN_TTL))
    else {
        return problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "approval.web",
            "the sign-in could not be sealed",
        );
    };
    let mut response = redirect(target.as_str());
    response.headers_mut().append(header::SET_COOKIE, cookie);
    response
}

#[derive(Deserialize)]
struct TokenAnswer {
    id_token: Option<String>,
}

#[expect(
    clippy::too_many_lines,
    reason = "the OIDC callback's checks in the order the flow needs them, each answering its own refusal"
)]
async fn callback(State(web): State<Web>, parts: Parts, RawQuery(query): RawQuery) -> Response {
    let headers = &parts.headers;
    let query = form(query.unwrap_or_default().as_bytes());
    let refused =
        |message: &str| problem(StatusCode::UNAUTHORIZED, "approval.sign_in_failed", message);
    let Some(pending) = web.open::<Login>(headers, LOGIN, LOGIN_AD) else {
        return refused(
            "no sign-in is under way in this browser (or it took too long): start again at /approve",
        );
    };
    if query.get("state") != Some(&pending.state) {
        return refused("the sign-in's state does not match; nothing was signed in");
    }
    if let Some(error) = query.get("error") {
        return refused(&format!("the OpenID provider refused the sign-in: {error}"));
    }
    let Some(code) = query.get("code") else {
        return refused("the OpenID provider sent no authorization code");
    };
    let discovery = match web.discovery().await {
        Ok(d) => d.clone(),
        Err(err) => return problem(StatusCode::BAD_GATEWAY, "approval.web", &err),
    };
    let config = &web.inner.config;
    let mut fields = vec![
        ("grant_type", "authorization_code".to_owned()),
        ("code", code.clone()),
        ("redirect_uri", web.inner.redirect_uri.clone()),
        ("code_verifier", pending.verifier.clone()),
    ];
    let mut request = web.inner.client.post(&discovery.token_endpoint);
    match &config.client_secret_env {
        Some(var) => match std::env::var(var) {
            Ok(secret) => {
                request =
                    request.basic_auth(form_encode(&config.client_id), Some(form_encode(&secret)));
            }
            Err(_) => {
                return problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "approval.web",
                    &format!("the client secret's variable {var} is not set"),
                );
            }
        },
        None => fields.push(("client_id", config.client_id.clone())),
    }
    let body: String = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
    let request = request
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, "application/json")
        .body(body);
    let answer = match web.fetch(request).await {
        Ok(bytes) => bytes,
        Err(err) => return refused(&err),
    };
    let Some(token) = serde_json::from_slice::<TokenAnswer>(&answer)
        .ok()
        .and_then(|a| a.id_token)
    else {
        return refused("the OpenID provider's token answer holds no ID token");
    };
    // A refused ID token is counted, logged and audited as a refused bearer token is.
    let principal = match web.inner.verifier.verify_token(&token).await {
        Ok(principal) => principal,
        Err(err) => {
            web.inner
                .failures
                .report_id_token(&parts, &token, &err)
                .await;
            return problem(
                StatusCode::FORBIDDEN,
                err.code(),
                &format!("the ID token is not accepted: {err}"),
            );
        }
    };
    let claims = principal.claims.as_deref();
    let claim = |name: &str| claims.and_then(|c| c.get(name)).and_then(|v| v.as_str());
    let mismatch = if claim("nonce") != Some(pending.nonce.as_str()) {
        Some("the ID token's nonce does not match this sign-in")
    } else if claim("azp").is_some_and(|azp| azp != config.client_id) {
        Some("the ID token was issued to another client (azp)")
    } else {
        None
    };
    if let Some(why) = mismatch {
        let err = AuthError::InvalidToken(why.to_owned());
        web.inner
            .failures
            .report_id_token(&parts, &token, &err)
            .await;
        return refused(why);
    }
    let Some(csrf) = random(24) else {
        return problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "approval.web",
            "no randomness for a session",
        );
    };
    let session = Session { token, csrf };
    let Some(cookie) = web
        .seal(&session, SESSION_AD, config.session_ttl)
        .and_then(|sealed| web.set_cookie(SESSION, &sealed, config.session_ttl))
    else {
        return problem(
            StatusCode::BAD_GATEWAY,
            "approval.web",
            "the ID token is too large for a session cookie",
        );
    };
    tracing::info!(
        tenant = %principal.tenant,
        principal = %escape_inline(&principal.display_name()),
        "signed in to the approval page"
    );
    let mut response = redirect(&pending.next);
    response.headers_mut().append(header::SET_COOKIE, cookie);
    if let Some(clear) = web.clear_cookie(LOGIN) {
        response.headers_mut().append(header::SET_COOKIE, clear);
    }
    response
}

fn form_encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

async fn logout(State(web): State<Web>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some((_, session)) = web.session(&headers).await {
        if form(&body).get("csrf") != Some(&session.csrf) {
            return problem(
                StatusCode::FORBIDDEN,
                "approval.csrf",
                "the form's token does not match this session",
            );
        }
        // The cookie is sealed, not stored: clearing it in this browser does not end a copy
        // of it, so the session is recorded as signed out until it would expire.
        let until = crate::approval::pending::now_ms().saturating_add(
            u64::try_from(web.inner.config.session_ttl.as_millis()).unwrap_or(u64::MAX),
        );
        if let Err(err) = web.inner.oob.store().sign_out(&session.id(), until).await {
            tracing::warn!("the approval page could not record a sign-out: {err}");
            return problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "policy.approval_unavailable",
                "the sign-out could not be recorded; try again",
            );
        }
    }
    let mut response = page(
        StatusCode::OK,
        "Signed out",
        "<p><a href=\"/approve\">Sign in again</a></p>",
    );
    if let Some(clear) = web.clear_cookie(SESSION) {
        response.headers_mut().append(header::SET_COOKIE, clear);
    }
    response
}

fn who(principal: &Principal, session: &Session) -> String {
    format!(
        "<p id=\"who\">Signed in as <b>{}</b> of tenant <b id=\"tenant\">{}</b>.</p>\n<form method=\"post\" action=\"/approve/logout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\">Sign out</button></form>",
        shown(&principal.display_name()),
        shown(&principal.tenant),
        html(&session.csrf)
    )
}

async fn list(State(web): State<Web>, headers: HeaderMap) -> Response {
    let Some((principal, session)) = web.session(&headers).await else {
        return redirect(&Web::sign_in_link("/approve"));
    };
    let oob = &web.inner.oob;
    if let Err(err) = oob.may_view(&principal, &principal.tenant) {
        return decide_problem(&err);
    }
    let approvals = match oob.store().list(&principal.tenant).await {
        Ok(list) => list,
        Err(err) => return decide_problem(&DecideError::Store(err)),
    };
    let mut body = who(&principal, &session);
    body.push_str("\n<table id=\"approvals\"><thead><tr><th>Approval</th><th>State</th><th>Tool</th><th>Class</th><th>Requester</th><th>Expires</th></tr></thead><tbody>\n");
    for approval in &approvals {
        let r = &approval.request;
        let _ = writeln!(
            body,
            "<tr class=\"approval\" data-id=\"{id}\" data-state=\"{state}\"><td><a href=\"/approve/{id}\">{id}</a></td><td>{state}</td><td>{tool}</td><td>{class}</td><td>{requester}</td><td>{expires}</td></tr>",
            id = html(&r.id),
            state = approval.state_now().as_str(),
            tool = shown(&r.tool),
            class = shown(&r.class),
            requester = shown(&r.requester.subject),
            expires = crate::audit::record::timestamp(
                std::time::UNIX_EPOCH + Duration::from_millis(r.expires_at_ms)
            ),
        );
    }
    body.push_str("</tbody></table>");
    if approvals.is_empty() {
        body.push_str("\n<p id=\"empty\">No approvals in this tenant.</p>");
    }
    page(StatusCode::OK, "Approvals", &body)
}

async fn show(State(web): State<Web>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let Some((principal, session)) = web.session(&headers).await else {
        return redirect(&Web::sign_in_link(&format!("/approve/{id}")));
    };
    match web
        .inner
        .oob
        .show(Decider::Web(&principal), &principal.tenant, &id)
        .await
    {
        Ok(approval) => page(
            StatusCode::OK,
            &format!("Approval {}", approval.request.id),
            &detail(&web.inner.oob, &principal, &session, &approval),
        ),
        Err(err) => decide_problem(&err),
    }
}

/// A write's requests as the page shows them: each one's method and URL, its headers
/// before auth and its body, every value HTML-escaped (and escaped onto one line).
fn requests_html(requests: &crate::approval::pending::WriteRequests) -> String {
    let mut out = String::from("\n<ol class=\"requests\">");
    for request in &requests.shown {
        let _ = write!(
            out,
            "<li><code class=\"request\">{} {}</code>",
            shown(&request.http_method),
            shown(&request.url)
        );
        if !request.headers.is_empty() {
            out.push_str("<br>Headers (before auth; no Authorization is part of them): <code>");
            let headers: Vec<String> = request
                .headers
                .iter()
                .map(|(name, value)| format!("{}: {}", shown(name), shown(value)))
                .collect();
            out.push_str(&headers.join("; "));
            out.push_str("</code>");
        }
        if let Some(request_body) = &request.body {
            let _ = write!(
                out,
                "<br>Body ({}, {} bytes):<pre class=\"body\">{}</pre>",
                shown(request.media_type.as_deref().unwrap_or("no media type")),
                request.body_bytes,
                shown(request_body)
            );
        }
        out.push_str("</li>");
    }
    out.push_str("</ol>");
    if requests.not_shown > 0 {
        let _ = write!(
            out,
            "<p>… and {} more requests like these, not shown.</p>",
            requests.not_shown
        );
    }
    out
}

/// One approval: what querygate worked out itself first, the SQL as the client sent it
/// last, then the forms.
fn detail(
    oob: &OutOfBand,
    principal: &Principal,
    session: &Session,
    approval: &PendingApproval,
) -> String {
    let r = &approval.request;
    let at = |ms: u64| {
        crate::audit::record::timestamp(std::time::UNIX_EPOCH + Duration::from_millis(ms))
    };
    let requester = if r.requester.issuer.is_empty() {
        format!("{} ({})", r.requester.subject, r.requester.method)
    } else {
        format!(
            "{} ({}, {})",
            r.requester.subject, r.requester.issuer, r.requester.method
        )
    };
    let state = approval.state_now();
    let mut body = who(principal, session);
    let _ = write!(
        body,
        "\n<dl id=\"trusted\">\n<dt>State</dt><dd id=\"state\">{state}</dd>\n<dt>Tenant</dt><dd>{tenant}</dd>\n<dt>Requester</dt><dd id=\"requester\">{requester}</dd>\n<dt>Tool</dt><dd>{tool}</dd>\n<dt>Class</dt><dd>{class}</dd>\n<dt>Mode</dt><dd>{mode}</dd>\n<dt>Asked</dt><dd>{created}</dd>\n<dt>Expires</dt><dd>{expires}</dd>\n<dt>Plan</dt><dd id=\"plan\">sha256:{plan}</dd>\n</dl>\n<h2>Writes the engine resolved</h2>\n<ul id=\"writes\">",
        state = state.as_str(),
        tenant = shown(&r.tenant),
        requester = shown(&requester),
        tool = shown(&r.tool),
        class = shown(&r.class),
        mode = shown(&r.mode),
        created = at(r.created_at_ms),
        expires = at(r.expires_at_ms),
        plan = html(&r.plan_hash),
    );
    for (index, write) in r.writes.iter().enumerate() {
        let _ = write!(body, "<li>{}", shown(write));
        if let Some(requests) = r.requests.get(index) {
            body.push_str(&requests_html(requests));
        }
        body.push_str("</li>");
    }
    body.push_str("</ul>\n");
    if let Some(sql) = &r.sql {
        let _ = write!(
            body,
            "<h2>SQL as the client sent it (escaped, on one line)</h2>\n<pre id=\"sql\">{}</pre>\n",
            shown(sql)
        );
    }
    if let Some(decision) = &approval.decision {
        let _ = writeln!(
            body,
            "<p id=\"decision\">Decided by {} ({}) at {}: {}</p>",
            shown(&decision.by),
            decision.method.as_str(),
            at(decision.at_ms),
            if decision.reason.is_empty() {
                "no reason given".to_owned()
            } else {
                shown(&decision.reason)
            }
        );
    }
    if state == crate::approval::PendingState::Pending {
        let csrf = html(&session.csrf);
        let id = html(&r.id);
        for (verb, label) in [("approve", "Approve"), ("deny", "Deny")] {
            let _ = writeln!(
                body,
                "<form method=\"post\" action=\"/approve/{id}/{verb}\" id=\"{verb}\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><label>Reason <input type=\"text\" name=\"reason\" maxlength=\"1024\"></label> <button type=\"submit\">{label}</button></form>"
            );
        }
    }
    let base = oob
        .config()
        .web
        .as_ref()
        .map_or("", |web| web.base_url.as_str());
    body.push_str(&footer(base, &r.id));
    body
}

/// The foot of an approval's page: back to the list, and the same approval in the HTTP API
/// (`<base_url>/approvals/<id>`, for a bearer token; the page itself is `/approve/<id>`).
fn footer(base_url: &str, id: &str) -> String {
    format!(
        "<p><a href=\"/approve\">All approvals</a> · the same approval in the HTTP API: <code id=\"api\">{}/approvals/{}</code></p>",
        html(base_url.trim_end_matches('/')),
        html(id)
    )
}

async fn approve(state: State<Web>, headers: HeaderMap, id: Path<String>, body: Bytes) -> Response {
    decide(state, headers, id, body, true).await
}

async fn deny(state: State<Web>, headers: HeaderMap, id: Path<String>, body: Bytes) -> Response {
    decide(state, headers, id, body, false).await
}

async fn decide(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
    approve: bool,
) -> Response {
    let Some((principal, session)) = web.session(&headers).await else {
        return problem(
            StatusCode::UNAUTHORIZED,
            "approval.sign_in_required",
            "sign in again: the session has ended",
        );
    };
    let fields = form(&body);
    // SameSite=Lax keeps the cookie off cross-site POSTs; the token bound to the session
    // refuses a form this page did not make.
    if fields.get("csrf") != Some(&session.csrf) {
        return problem(
            StatusCode::FORBIDDEN,
            "approval.csrf",
            "the form's token does not match this session; reload the page",
        );
    }
    let reason = fields.get("reason").map(String::as_str).unwrap_or_default();
    match web
        .inner
        .oob
        .decide(
            Decider::Web(&principal),
            &principal.tenant,
            &id,
            approve,
            reason,
            web.inner.audit.as_ref(),
        )
        .await
    {
        Ok(approval) => redirect(&format!("/approve/{}", approval.request.id)),
        Err(err) => decide_problem(&err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_for_html_after_the_controls() {
        assert_eq!(
            shown("<script>\"x\"&'y'\n\u{202e}"),
            "&lt;script&gt;&quot;x&quot;&amp;&#39;y&#39;\\u{a}\\u{202e}"
        );
    }

    #[test]
    fn requests_are_shown_html_escaped() {
        let requests = crate::approval::pending::WriteRequests {
            shown: vec![crate::engine::RequestPreview {
                http_method: "POST".into(),
                url: "https://api.example/w?q=<b>".into(),
                headers: vec![("x-note".into(), "a\"b".into())],
                media_type: Some("application/json".into()),
                body: Some("{\"name\":\"</pre><script>x()</script>\"}".into()),
                body_bytes: 40,
            }],
            not_shown: 2,
        };
        let html = requests_html(&requests);
        assert!(
            !html.contains("<script>") && !html.contains("<b>"),
            "{html}"
        );
        assert!(
            html.contains("POST https://api.example/w?q=&lt;b&gt;"),
            "{html}"
        );
        assert!(html.contains("x-note: a&quot;b"), "{html}");
        assert!(html.contains("&lt;/pre&gt;&lt;script&gt;"), "{html}");
        assert!(
            html.contains("… and 2 more requests like these, not shown."),
            "{html}"
        );
    }

    #[test]
    fn the_footer_names_the_api_of_the_approval_not_its_page() {
        assert_eq!(
            footer("https://qg.example/", "4f<x>"),
            "<p><a href=\"/approve\">All approvals</a> · the same approval in the HTTP API: <code id=\"api\">https://qg.example/approvals/4f&lt;x&gt;</code></p>"
        );
    }

    #[test]
    fn only_pages_of_the_page_are_gone_back_to() {
        for (next, to) in [
            ("/approve/abc", "/approve/abc"),
            ("/approve", "/approve"),
            ("https://evil.example/approve", "/approve"),
            ("//evil.example", "/approve"),
            ("/approvexyz", "/approve"),
            ("/approve/../mcp", "/approve"),
            ("/approve/a?b", "/approve"),
        ] {
            assert_eq!(local_next(Some(&next.to_owned())), to, "{next}");
        }
        assert_eq!(local_next(None), "/approve");
    }

    #[test]
    fn cookies_are_found_by_name() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; qg_approve_session=rs2.x.y.z; b=2"),
        );
        assert_eq!(cookie(&headers, SESSION).as_deref(), Some("rs2.x.y.z"));
        assert_eq!(cookie(&headers, LOGIN), None);
    }
}
