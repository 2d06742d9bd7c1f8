//! A Google service-account key (`client_email`, `private_key`, optional `private_key_id`
//! and `token_uri`) signs an RS256 JWT assertion (RFC 7523), exchanged at the token URI for
//! an access token. Where the key comes from is the chain of `google/mod.rs`.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::super::token::{self, TokenRequest};
use super::super::{credential_error, field};
use crate::credentials::CredentialStore;
use crate::error::Result;
use crate::upstream::Upstream;

/// Google's OAuth 2.0 token endpoint (keys and `authorized_user`), when the file names none.
pub(super) const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// Assertions are valid this long (Google's maximum is one hour).
const ASSERTION_LIFETIME_SECS: u64 = 3600;

const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// The fields of a key file we use. Holds the private key: no `Debug`.
#[derive(Deserialize)]
struct KeyFile {
    #[serde(default)]
    client_email: String,
    #[serde(default)]
    private_key: String,
    #[serde(default)]
    private_key_id: Option<String>,
    #[serde(default)]
    token_uri: Option<String>,
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    scope: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    sub: Option<&'a str>,
}

/// The `Authorization` value from a service-account key (`raw`, found at `source`):
/// cached, or obtained now with a signed assertion at the token URI (the auth's
/// `token_url`, else the key's `token_uri`, else Google's).
pub(super) async fn key_token(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
    raw: &[u8],
    source: &str,
    scope: &str,
) -> Result<String> {
    let key = parse_key(raw, source).map_err(|cause| credential_error(provider, &cause))?;
    let token_url = field(auth, "token_url")
        .or(key.token_uri.as_deref().filter(|u| !u.is_empty()))
        .unwrap_or(GOOGLE_TOKEN_URI);
    let subject = field(auth, "sub");
    let cache_key = token::cache_key(
        provider,
        &[
            b"service_account",
            raw,
            token_url.as_bytes(),
            scope.as_bytes(),
            subject.unwrap_or_default().as_bytes(),
        ],
    );
    if let Some(value) = token::cached(credentials, &cache_key) {
        return Ok(value);
    }
    let assertion = sign_assertion(&key, token_url, scope, subject)
        .map_err(|cause| credential_error(provider, &format!("key from {source}: {cause}")))?;
    token::exchange(
        upstream,
        credentials,
        cache_key,
        TokenRequest {
            provider,
            token_url,
            shown_url: None,
            form: vec![
                ("grant_type", JWT_BEARER_GRANT.to_owned()),
                ("assertion", assertion),
            ],
            basic: None,
        },
    )
    .await
}

/// Checks that the key holds `client_email` and `private_key`.
pub(super) fn check_key(raw: &[u8], source: &str) -> std::result::Result<(), String> {
    parse_key(raw, source).map(|_| ())
}

/// Parses a key; errors say what is wrong without quoting the contents.
fn parse_key(raw: &[u8], source: &str) -> std::result::Result<KeyFile, String> {
    let key: KeyFile = serde_json::from_slice(raw).map_err(|err| {
        format!(
            "key from {source} is not a JSON key file (line {}, column {})",
            err.line(),
            err.column()
        )
    })?;
    for (name, value) in [
        ("client_email", &key.client_email),
        ("private_key", &key.private_key),
    ] {
        if value.is_empty() {
            return Err(format!("key from {source} has no {name}"));
        }
    }
    Ok(key)
}

/// The signed JWT assertion.
fn sign_assertion(
    key: &KeyFile,
    audience: &str,
    scope: &str,
    subject: Option<&str>,
) -> std::result::Result<String, String> {
    let iat = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let claims = Claims {
        iss: &key.client_email,
        scope,
        aud: audience,
        iat,
        exp: iat + ASSERTION_LIFETIME_SECS,
        sub: subject,
    };
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = key.private_key_id.clone().filter(|k| !k.is_empty());
    let signing_key = jsonwebtoken::EncodingKey::from_rsa_pem(key.private_key.as_bytes())
        .map_err(|_| "private_key is not an RSA private key in PEM form".to_owned())?;
    jsonwebtoken::encode(&header, &claims, &signing_key)
        .map_err(|_| "signing the JWT assertion failed".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn key_problems_are_named_without_contents() {
        let err = check_key(b"{\"private_key\": 12345678}", "variable BAD").unwrap_err();
        assert!(
            err.starts_with("key from variable BAD is not a JSON key file"),
            "{err}"
        );
        assert!(!err.contains("12345678"));
        assert_eq!(
            check_key(b"{\"client_email\": \"a@b\"}", "variable PART").unwrap_err(),
            "key from variable PART has no private_key"
        );
    }

    #[test]
    fn a_bad_private_key_is_reported_without_its_text() {
        let key = KeyFile {
            client_email: "sa@p.iam".to_owned(),
            private_key: "-----BEGIN PRIVATE KEY-----\nnot-a-key\n".to_owned(),
            private_key_id: None,
            token_uri: None,
        };
        let err = sign_assertion(&key, "https://t", "s", None).unwrap_err();
        assert!(!err.contains("not-a-key"));
    }
}
