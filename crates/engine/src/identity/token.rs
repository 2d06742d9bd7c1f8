//! Token endpoints (RFC 6749 §5): a form POST answered by `access_token`, `token_type` and
//! `expires_in`, shared by `oauth2` and `service_account`. Tokens are cached in the tenant's
//! [`TokenCache`](crate::credentials::TokenCache) under
//! `<provider>/<sha256 of the material>` until shortly before they expire.

use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::Value;
use sha2::{Digest, Sha256};
use url::Url;

use super::{AuthParts, credential_error};
use crate::credentials::{CachedToken, CredentialStore};
use crate::error::{Error, Result};
use crate::upstream::{Outgoing, Upstream, describe};

/// A token is dropped from the cache this long before the endpoint said it expires.
const EXPIRY_MARGIN: Duration = Duration::from_secs(60);

/// How long a token is kept when the endpoint gives no `expires_in`.
pub(super) const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);

/// Longer lifetimes are cut to this (and an absurd `expires_in` cannot overflow a clock).
const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// The cache key of a token obtained with `material`: `<provider>/<sha256-hex>`. Each piece
/// is length-prefixed so that no two different materials hash alike.
pub(super) fn cache_key(provider: &str, material: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for piece in material {
        hasher.update((piece.len() as u64).to_le_bytes());
        hasher.update(piece);
    }
    let digest = hasher.finalize();
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push_str(&format!("{byte:02x}"));
    }
    format!("{provider}/{hex}")
}

/// The `Authorization` value cached under `key`, if still valid.
pub(super) fn cached(credentials: &CredentialStore, key: &str) -> Option<String> {
    credentials.tokens().get(key, Instant::now())
}

/// One request to a token endpoint. Holds secrets: no `Debug`.
pub(super) struct TokenRequest<'a> {
    pub(super) provider: &'a str,
    pub(super) token_url: &'a str,
    /// How errors name the endpoint when it differs from `token_url` (the document's
    /// template, so that values expanded into the URL are not shown).
    pub(super) shown_url: Option<&'a str>,
    /// Form fields of the body (may hold a client secret or a signed assertion).
    pub(super) form: Vec<(&'a str, String)>,
    /// Client id and secret for an HTTP Basic `Authorization` header.
    pub(super) basic: Option<(String, String)>,
}

/// The token cached under `key`, else the one `fetch` obtains (its `Authorization` value
/// and lifetime), cached until [`EXPIRY_MARGIN`] before it expires. One fetch per key at a
/// time: concurrent callers wait for the first one and find its token cached.
pub(super) async fn single_flight<F, Fut>(
    credentials: &CredentialStore,
    key: String,
    fetch: F,
) -> Result<String>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(String, Duration)>>,
{
    if let Some(value) = cached(credentials, &key) {
        return Ok(value);
    }
    let flight = credentials.tokens().flight(&key);
    let _turn = flight.lock().await;
    if let Some(value) = cached(credentials, &key) {
        return Ok(value);
    }
    let started = Instant::now();
    let started_wall = std::time::SystemTime::now();
    let (value, lifetime) = fetch().await?;
    let lifetime = lifetime.min(MAX_LIFETIME);
    if lifetime > EXPIRY_MARGIN {
        credentials.tokens().put(
            key,
            CachedToken {
                value: value.clone(),
                expires_at: started + (lifetime - EXPIRY_MARGIN),
                expires: started_wall + lifetime,
            },
        );
    }
    Ok(value)
}

/// Posts `request` to its token endpoint, caches the token under `key` and returns the
/// `Authorization` header value (`Bearer <token>`). Failure statuses and malformed answers
/// are credential errors naming the provider and status, never a secret or a token.
pub(super) async fn exchange(
    upstream: &Upstream,
    credentials: &CredentialStore,
    key: String,
    request: TokenRequest<'_>,
) -> Result<String> {
    single_flight(credentials, key, || post_form(upstream, request)).await
}

/// Posts `request` once: the `Authorization` value and lifetime of the answer.
pub(super) async fn post_form(
    upstream: &Upstream,
    request: TokenRequest<'_>,
) -> Result<(String, Duration)> {
    let provider = request.provider;
    let url = Url::parse(request.token_url)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https"))
        .ok_or_else(|| {
            Error::bad_document(format!(
                "provider '{provider}': token URL '{}' is not an http(s) URL",
                request.shown_url.unwrap_or(request.token_url)
            ))
        })?;
    let method = reqwest::Method::POST;
    let shown = match request.shown_url {
        Some(template) => format!("{method} {template}"),
        None => describe(&method, &url),
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        reqwest::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    headers.insert(
        reqwest::header::ACCEPT,
        HeaderValue::from_static("application/json"),
    );
    if let Some((id, secret)) = &request.basic {
        // RFC 6749 §2.3.1: both parts form-encoded before base64.
        let encode =
            |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let pair = format!("{}:{}", encode(id), encode(secret));
        let value = format!(
            "Basic {}",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, pair)
        );
        let mut value = HeaderValue::from_str(&value)
            .map_err(|_| Error::internal("base64 is a valid header value"))?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(request.form.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
    fetch_token(
        upstream,
        provider,
        &method,
        &url,
        &shown,
        &headers,
        Some(Bytes::from(body)),
    )
    .await
}

/// Sends one token request (`shown` names it in errors) and reads the answer: the
/// `Authorization` value and the token's lifetime.
pub(super) async fn fetch_token(
    upstream: &Upstream,
    provider: &str,
    method: &reqwest::Method,
    url: &Url,
    shown: &str,
    headers: &HeaderMap,
    body: Option<Bytes>,
) -> Result<(String, Duration)> {
    let (status, _, answer) = upstream
        .send_as(
            Outgoing::new(method, url, headers, body.as_ref()),
            &AuthParts::default(),
        )
        .await
        .map_err(|err| {
            let message = err.message().replace(&describe(method, url), shown);
            Error::new(
                err.kind(),
                format!("token request for provider '{provider}' failed: {message}"),
            )
        })?;
    if !(200..300).contains(&status) {
        return Err(credential_error(
            provider,
            &format!(
                "token endpoint {shown} answered {status}{}",
                oauth_error_code(&answer)
            ),
        ));
    }
    let (value, lifetime) = parse_answer(&answer)
        .map_err(|cause| credential_error(provider, &format!("token endpoint {shown} {cause}")))?;
    tracing::debug!(%provider, endpoint = %shown, lifetime_s = lifetime.as_secs(), "obtained an access token");
    Ok((value, lifetime))
}

/// The `Authorization` value and lifetime from a token response: JSON, or (as some older
/// endpoints answer) a form-encoded body with the same fields.
pub(super) fn parse_answer(body: &[u8]) -> std::result::Result<(String, Duration), String> {
    let json: Value = match serde_json::from_slice(body) {
        Ok(json) => json,
        Err(_) => {
            let fields: serde_json::Map<String, Value> = url::form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
                .collect();
            if !fields.contains_key("access_token") {
                return Err("answered with a body that is neither JSON nor a form".to_owned());
            }
            Value::Object(fields)
        }
    };
    let token = json
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| "answered without an access_token".to_owned())?;
    let kind = match json.get("token_type").and_then(Value::as_str) {
        None | Some("") => "Bearer",
        Some(t) if t.eq_ignore_ascii_case("bearer") => "Bearer",
        Some(t) => t,
    };
    let value = format!("{kind} {token}");
    if HeaderValue::from_str(&value).is_err() {
        return Err("answered with a token that is not a valid HTTP header value".to_owned());
    }
    let expires_in = match json.get("expires_in") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.trim().parse().ok(),
        _ => None,
    };
    // Azure's managed identity endpoints may give only `expires_on` (Unix seconds).
    let expires_on = match json.get("expires_on") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.trim().parse().ok(),
        _ => None,
    };
    let lifetime = expires_in
        .map(Duration::from_secs)
        .or_else(|| expires_on.map(lifetime_until))
        .unwrap_or(DEFAULT_LIFETIME)
        .min(MAX_LIFETIME);
    Ok((value, lifetime))
}

/// The time from now until `unix_seconds` (zero when past).
pub(super) fn lifetime_until(unix_seconds: u64) -> Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Duration::from_secs(unix_seconds).saturating_sub(now)
}

/// ` (invalid_client)` when the body is an RFC 6749 error with a plain code; nothing else
/// of the body is shown (it might echo what was sent).
fn oauth_error_code(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|json| json.get("error").and_then(Value::as_str).map(str::to_owned))
        .filter(|code| {
            code.len() <= 64
                && code
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        })
        .map(|code| format!(" ({code})"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_into_header_and_lifetime() {
        let (value, lifetime) =
            parse_answer(br#"{"access_token":"abc","token_type":"bearer","expires_in":3599}"#)
                .unwrap();
        assert_eq!(value, "Bearer abc");
        assert_eq!(lifetime, Duration::from_secs(3599));
        let (_, lifetime) = parse_answer(br#"{"access_token":"abc","expires_in":"60"}"#).unwrap();
        assert_eq!(lifetime, Duration::from_secs(60));
        let (_, lifetime) =
            parse_answer(br#"{"access_token":"abc","expires_in":18446744073709551615}"#).unwrap();
        assert_eq!(lifetime, MAX_LIFETIME);
        assert_eq!(
            parse_answer(br#"{"access_token":"abc"}"#).unwrap().1,
            DEFAULT_LIFETIME
        );
        assert!(parse_answer(br#"{"token_type":"bearer"}"#).is_err());
        assert!(parse_answer(b"<html>").is_err());
        let (value, lifetime) =
            parse_answer(b"access_token=gho_x&token_type=bearer&expires_in=7200").unwrap();
        assert_eq!(value, "Bearer gho_x");
        assert_eq!(lifetime, Duration::from_secs(7200));
    }

    #[test]
    fn error_codes_are_shown_only_when_plain() {
        assert_eq!(
            oauth_error_code(br#"{"error":"invalid_client"}"#),
            " (invalid_client)"
        );
        assert_eq!(oauth_error_code(br#"{"error":"bad secret: s3cr3t!"}"#), "");
        assert_eq!(oauth_error_code(b"nope"), "");
    }

    #[test]
    fn cache_keys_follow_every_piece_of_material() {
        let a = cache_key("p", &[b"ab", b"c"]);
        assert!(a.starts_with("p/") && a.len() == 2 + 64);
        assert_ne!(a, cache_key("p", &[b"a", b"bc"]));
        assert_ne!(a, cache_key("q", &[b"ab", b"c"]));
        assert_eq!(a, cache_key("p", &[b"ab", b"c"]));
    }
}
