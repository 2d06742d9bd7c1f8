//! `external_account` (workload identity federation): a subject token from a file
//! (`credential_source.file`, as Kubernetes projects a service-account token) or a URL
//! (`credential_source.url` with its `headers`), as text or as a field of a JSON answer
//! (`format: {type: json, subject_token_field_name}`), exchanged at the STS `token_url` for
//! a federated access token (RFC 8693 form), and, with `service_account_impersonation_url`,
//! that token exchanged in turn at IAM credentials' `generateAccessToken` for a service
//! account's. The subject token is read at each token request, so a token rotated in place
//! is used from the next refresh on. `client_id`/`client_secret` authenticate to STS
//! (HTTP Basic); `workforce_pool_user_project` is sent as STS `options`.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use url::Url;

use super::{DEFAULT_SCOPE, secure_url};
use crate::credentials::{CredentialStore, read_credential_file};
use crate::error::Result;
use crate::identity::token::{self, TokenRequest};
use crate::identity::{AuthParts, credential_error};
use crate::upstream::{Outgoing, Upstream, describe};

/// Google's STS, when the file names no `token_url`.
const STS_TOKEN_URL: &str = "https://sts.googleapis.com/v1/token";

const TOKEN_EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// The lifetime asked of `generateAccessToken` unless the file says otherwise.
const DEFAULT_IMPERSONATION_LIFETIME_SECS: u64 = 3600;

/// Where the subject token comes from.
enum Subject {
    File(String),
    Url { url: Url, headers: HeaderMap },
}

/// How the subject token is read from the file or answer.
enum Format {
    Text,
    Json(String),
}

/// An `external_account` file, checked. Holds a client secret: no `Debug`.
struct Config {
    audience: String,
    subject_token_type: String,
    token_url: String,
    impersonation_url: Option<String>,
    lifetime_secs: u64,
    subject: Subject,
    format: Format,
    client: Option<(String, String)>,
    user_project: Option<String>,
}

fn text<'a>(json: &'a Value, name: &str) -> Option<&'a str> {
    json.get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Reads and checks the file's fields; errors name the field, never a value.
fn parse(json: &Value) -> std::result::Result<Config, String> {
    let audience = text(json, "audience")
        .ok_or("the external_account file has no audience")?
        .to_owned();
    let subject_token_type = text(json, "subject_token_type")
        .ok_or("the external_account file has no subject_token_type")?
        .to_owned();
    let token_url = text(json, "token_url").unwrap_or(STS_TOKEN_URL).to_owned();
    secure_url(&token_url).map_err(|cause| format!("the file's token_url {cause}"))?;
    let impersonation_url = text(json, "service_account_impersonation_url").map(str::to_owned);
    if let Some(url) = &impersonation_url {
        secure_url(url)
            .map_err(|cause| format!("the file's service_account_impersonation_url {cause}"))?;
    }
    let lifetime_secs = json
        .pointer("/service_account_impersonation/token_lifetime_seconds")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_IMPERSONATION_LIFETIME_SECS)
        .clamp(600, 43_200);
    let source = json
        .get("credential_source")
        .filter(|s| s.is_object())
        .ok_or("the external_account file has no credential_source")?;
    let subject = if let Some(path) = text(source, "file") {
        Subject::File(path.to_owned())
    } else if let Some(url) = text(source, "url") {
        let url = Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
            .ok_or("the file's credential_source.url is not an http(s) URL")?;
        let mut headers = HeaderMap::new();
        if let Some(Value::Object(map)) = source.get("headers") {
            for (name, value) in map {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    "the file's credential_source.headers has a name that is not an HTTP header name"
                        .to_owned()
                })?;
                let mut value = value
                    .as_str()
                    .and_then(|v| HeaderValue::from_str(v).ok())
                    .ok_or_else(|| {
                        format!("the file's credential_source.headers.{name} is not a valid header value")
                    })?;
                value.set_sensitive(true);
                headers.insert(name, value);
            }
        }
        Subject::Url { url, headers }
    } else if source.get("environment_id").is_some() {
        return Err(
            "credential_source.environment_id (AWS) is not supported: use a file or url source"
                .to_owned(),
        );
    } else if source.get("executable").is_some() {
        return Err(
            "credential_source.executable is not supported: use a file or url source".to_owned(),
        );
    } else {
        return Err("the file's credential_source has neither file nor url".to_owned());
    };
    let format = match source.pointer("/format/type").and_then(Value::as_str) {
        None | Some("text") => Format::Text,
        Some("json") => Format::Json(
            source
                .pointer("/format/subject_token_field_name")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or("credential_source.format of type json has no subject_token_field_name")?
                .to_owned(),
        ),
        Some(_) => return Err("credential_source.format.type is neither text nor json".to_owned()),
    };
    let client = match (text(json, "client_id"), text(json, "client_secret")) {
        (Some(id), Some(secret)) => Some((id.to_owned(), secret.to_owned())),
        _ => None,
    };
    Ok(Config {
        audience,
        subject_token_type,
        token_url,
        impersonation_url,
        lifetime_secs,
        subject,
        format,
        client,
        user_project: text(json, "workforce_pool_user_project").map(str::to_owned),
    })
}

/// Checks the file, and a subject-token file's presence, without a network call.
pub(super) fn check(json: &Value) -> std::result::Result<(), String> {
    let config = parse(json)?;
    if let Subject::File(path) = &config.subject {
        let body = read_subject_file(path)?;
        extract(
            &config.format,
            body.as_bytes(),
            &format!("the subject token file '{path}'"),
        )?;
    }
    Ok(())
}

fn read_subject_file(path: &str) -> std::result::Result<String, String> {
    read_credential_file(std::path::Path::new(path)).map_err(|err| {
        format!("the subject token file '{path}' (credential_source.file) cannot be read: {err}")
    })
}

/// The subject token in `body` per `format`; `shown` names where it came from.
fn extract(format: &Format, body: &[u8], shown: &str) -> std::result::Result<String, String> {
    let token = match format {
        Format::Text => String::from_utf8_lossy(body).trim().to_owned(),
        Format::Json(name) => serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|json| json.get(name).and_then(Value::as_str).map(str::to_owned))
            .ok_or_else(|| format!("{shown} is not JSON with a string field {name}"))?,
    };
    if token.is_empty() {
        return Err(format!("{shown} holds no subject token"));
    }
    Ok(token)
}

/// The `Authorization` value: cached, or obtained now (subject token → STS → optional
/// impersonation), once for concurrent callers.
pub(super) async fn token(
    upstream: &Upstream,
    provider: &str,
    credentials: &CredentialStore,
    raw: &[u8],
    json: &Value,
    scope: &str,
) -> Result<String> {
    let config = parse(json).map_err(|cause| credential_error(provider, &cause))?;
    let key = token::cache_key(
        provider,
        &[
            b"service_account",
            b"external_account",
            raw,
            scope.as_bytes(),
        ],
    );
    token::single_flight(credentials, key, || async {
        let subject = subject_token(upstream, provider, &config).await?;
        let sts_scope = if config.impersonation_url.is_some() {
            DEFAULT_SCOPE.to_owned()
        } else {
            scope.to_owned()
        };
        let mut form = vec![
            ("grant_type", TOKEN_EXCHANGE_GRANT.to_owned()),
            ("audience", config.audience.clone()),
            ("scope", sts_scope),
            ("requested_token_type", ACCESS_TOKEN_TYPE.to_owned()),
            ("subject_token", subject),
            ("subject_token_type", config.subject_token_type.clone()),
        ];
        if let (Some(project), None) = (&config.user_project, &config.client) {
            form.push(("options", json!({"userProject": project}).to_string()));
        }
        let (federated, lifetime) = token::post_form(
            upstream,
            TokenRequest {
                provider,
                token_url: &config.token_url,
                shown_url: None,
                form,
                basic: config.client.clone(),
            },
        )
        .await?;
        match &config.impersonation_url {
            None => Ok((federated, lifetime)),
            Some(url) => {
                impersonate(
                    upstream,
                    provider,
                    url,
                    &federated,
                    scope,
                    config.lifetime_secs,
                )
                .await
            }
        }
    })
    .await
}

/// Reads the subject token now: the file, or a GET of the URL with its headers.
async fn subject_token(upstream: &Upstream, provider: &str, config: &Config) -> Result<String> {
    match &config.subject {
        Subject::File(path) => {
            let body = read_subject_file(path).map_err(|c| credential_error(provider, &c))?;
            extract(
                &config.format,
                body.as_bytes(),
                &format!("the subject token file '{path}'"),
            )
            .map_err(|c| credential_error(provider, &c))
        }
        Subject::Url { url, headers } => {
            let method = reqwest::Method::GET;
            let shown = describe(&method, url);
            let (status, _, body) = upstream
                .send_as(
                    Outgoing::new(&method, url, headers, None),
                    &AuthParts::default(),
                )
                .await
                .map_err(|err| {
                    credential_error(
                        provider,
                        &format!("the subject token URL {shown} failed: {}", err.message()),
                    )
                })?;
            if !(200..300).contains(&status) {
                return Err(credential_error(
                    provider,
                    &format!("the subject token URL {shown} answered {status}"),
                ));
            }
            extract(
                &config.format,
                &body,
                &format!("the answer of the subject token URL {shown}"),
            )
            .map_err(|c| credential_error(provider, &c))
        }
    }
}

/// IAM credentials' `generateAccessToken` with the federated token: the service account's
/// token and its lifetime (from `expireTime`).
async fn impersonate(
    upstream: &Upstream,
    provider: &str,
    url: &str,
    federated: &str,
    scope: &str,
    lifetime_secs: u64,
) -> Result<(String, Duration)> {
    let url = secure_url(url).map_err(|cause| {
        credential_error(
            provider,
            &format!("the file's service_account_impersonation_url {cause}"),
        )
    })?;
    let method = reqwest::Method::POST;
    let shown = describe(&method, &url);
    let mut headers = HeaderMap::new();
    let mut bearer = HeaderValue::from_str(federated).map_err(|_| {
        credential_error(provider, "the STS token is not a valid HTTP header value")
    })?;
    bearer.set_sensitive(true);
    headers.insert(reqwest::header::AUTHORIZATION, bearer);
    headers.insert(
        reqwest::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let body = json!({
        "scope": scope.split_whitespace().collect::<Vec<_>>(),
        "lifetime": format!("{lifetime_secs}s"),
    });
    let body = bytes::Bytes::from(body.to_string());
    let (status, _, answer) = upstream
        .send_as(
            Outgoing::new(&method, &url, &headers, Some(&body)),
            &AuthParts::default(),
        )
        .await
        .map_err(|err| {
            credential_error(
                provider,
                &format!("impersonation request {shown} failed: {}", err.message()),
            )
        })?;
    if !(200..300).contains(&status) {
        return Err(credential_error(
            provider,
            &format!(
                "impersonation endpoint {shown} answered {status}{}",
                status_word(&answer)
            ),
        ));
    }
    parse_impersonated(&answer).map_err(|cause| {
        credential_error(provider, &format!("impersonation endpoint {shown} {cause}"))
    })
}

/// ` (PERMISSION_DENIED)` from a Google error body's `error.status`, when plain.
fn status_word(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|json| {
            json.pointer("/error/status")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .filter(|s| s.len() <= 64 && s.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .map(|s| format!(" ({s})"))
        .unwrap_or_default()
}

/// `{"accessToken": …, "expireTime": "<RFC 3339>"}`.
fn parse_impersonated(body: &[u8]) -> std::result::Result<(String, Duration), String> {
    let json: Value = serde_json::from_slice(body)
        .map_err(|_| "answered with a body that is not JSON".to_owned())?;
    let token = json
        .get("accessToken")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or("answered without an accessToken")?;
    let value = format!("Bearer {token}");
    if HeaderValue::from_str(&value).is_err() {
        return Err("answered with a token that is not a valid HTTP header value".to_owned());
    }
    let lifetime = json
        .get("expireTime")
        .and_then(Value::as_str)
        .and_then(|t| humantime::parse_rfc3339(t).ok())
        .map(|at| {
            at.duration_since(std::time::SystemTime::now())
                .unwrap_or_default()
        })
        .unwrap_or(token::DEFAULT_LIFETIME);
    Ok((value, lifetime))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_source(path: &str) -> Value {
        json!({
            "type": "external_account",
            "audience": "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k",
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "token_url": "https://sts.googleapis.com/v1/token",
            "credential_source": {"file": path},
        })
    }

    #[test]
    fn files_are_checked_field_by_field() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "eyJ.sub.sig\n").unwrap();
        let good = file_source(token.to_str().unwrap());
        assert_eq!(check(&good), Ok(()));
        let mut no_audience = good.clone();
        no_audience.as_object_mut().unwrap().remove("audience");
        assert_eq!(
            check(&no_audience).unwrap_err(),
            "the external_account file has no audience"
        );
        let mut plain = good.clone();
        plain["token_url"] = json!("http://sts.example.com/v1/token");
        assert!(
            check(&plain)
                .unwrap_err()
                .starts_with("the file's token_url must be an https URL")
        );
        let missing = file_source("/nonexistent/token");
        assert!(check(&missing).unwrap_err().starts_with(
            "the subject token file '/nonexistent/token' (credential_source.file) cannot be read"
        ),);
        let mut aws = good.clone();
        aws["credential_source"] = json!({"environment_id": "aws1"});
        assert!(
            check(&aws)
                .unwrap_err()
                .contains("environment_id (AWS) is not supported")
        );
        let mut json_format = good;
        json_format["credential_source"]["format"] = json!({"type": "json"});
        assert!(
            check(&json_format)
                .unwrap_err()
                .contains("subject_token_field_name")
        );
    }

    #[test]
    fn subject_tokens_and_impersonated_answers_parse() {
        let field = Format::Json("id_token".to_owned());
        assert_eq!(
            extract(&field, br#"{"id_token":"abc"}"#, "x").unwrap(),
            "abc"
        );
        assert!(extract(&field, br#"{"other":"abc"}"#, "x").is_err());
        assert_eq!(extract(&Format::Text, b" tok \n", "x").unwrap(), "tok");
        assert!(extract(&Format::Text, b"\n", "x").is_err());
        let later = humantime::format_rfc3339_nanos(
            std::time::SystemTime::now() + Duration::from_secs(1800),
        );
        let (value, lifetime) = parse_impersonated(
            format!(r#"{{"accessToken":"ya29.sa","expireTime":"{later}"}}"#).as_bytes(),
        )
        .unwrap();
        assert_eq!(value, "Bearer ya29.sa");
        assert!(lifetime > Duration::from_secs(1790) && lifetime <= Duration::from_secs(1800));
        assert!(parse_impersonated(br#"{"expireTime":"x"}"#).is_err());
        assert_eq!(
            status_word(br#"{"error":{"code":403,"status":"PERMISSION_DENIED","message":"x"}}"#),
            " (PERMISSION_DENIED)"
        );
    }
}
