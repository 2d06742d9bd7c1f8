//! The host's identity: the container credentials endpoint (ECS, EKS Pod Identity) and the
//! EC2 instance metadata service (IMDSv2).

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use url::Url;

use super::{Attempt, AwsCredentials, UNSET, sts};
use crate::credentials::{CredentialSource, CredentialStore};
use crate::error::{Error, Result};
use crate::identity::{AuthParts, credential_error, token};
use crate::upstream::{Outgoing, Upstream, describe};

/// ECS's credentials host, which `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` is relative to.
const ECS_HOST: &str = "http://169.254.170.2";

/// IMDS, where no `AWS_EC2_METADATA_SERVICE_ENDPOINT` says otherwise.
const IMDS_HOST: &str = "http://169.254.169.254";

/// The lifetime of the IMDSv2 session token asked for.
const IMDS_TOKEN_TTL: &str = "21600";

/// Whether a plain-http full URI may be asked: loopback, ECS's and EKS Pod Identity's
/// link-local hosts (as the SDKs allow).
fn allowed_container_host(url: &Url) -> bool {
    match url.scheme() {
        "https" => url.host_str().is_some(),
        "http" => match url.host() {
            Some(url::Host::Ipv4(ip)) => {
                ip.is_loopback()
                    || ip.octets() == [169, 254, 170, 2]
                    || ip.octets() == [169, 254, 170, 23]
            }
            Some(url::Host::Ipv6(ip)) => {
                ip.is_loopback() || ip.segments() == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23]
            }
            Some(url::Host::Domain(name)) => name == "localhost",
            None => false,
        },
        _ => false,
    }
}

/// The container credentials source.
pub(super) async fn container(
    upstream: &Upstream,
    provider: &str,
    store: &CredentialStore,
) -> Result<Attempt> {
    let (url, var) = match (
        store.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
        store.get("AWS_CONTAINER_CREDENTIALS_FULL_URI"),
    ) {
        (Some(relative), _) => (
            format!("{ECS_HOST}/{}", relative.trim_start_matches('/')),
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        ),
        (None, Some(full)) => (full, "AWS_CONTAINER_CREDENTIALS_FULL_URI"),
        (None, None) => {
            return Ok(Attempt::Unavailable(format!(
                "{UNSET} (AWS_CONTAINER_CREDENTIALS_FULL_URI, AWS_CONTAINER_CREDENTIALS_RELATIVE_URI not set)"
            )));
        }
    };
    let url = Url::parse(&url)
        .ok()
        .filter(allowed_container_host)
        .ok_or_else(|| {
            credential_error(
                provider,
                &format!(
                    "variable {var} is not an https URL, nor http to a loopback or the ECS / EKS Pod Identity host"
                ),
            )
        })?;
    let token_file = store.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    let token_value = store.get("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    let key = token::cache_key(
        provider,
        &[
            b"aws",
            b"container",
            url.as_str().as_bytes(),
            token_file.as_deref().unwrap_or_default().as_bytes(),
            token_value.as_deref().unwrap_or_default().as_bytes(),
        ],
    );
    let value = token::single_flight(store, key, || async {
        // The token file is read at each refresh: EKS rotates it in place.
        let authorization = match (&token_file, &token_value) {
            (Some(file), _) => Some(
                sts::read_token_file(file, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
                    .map_err(|c| credential_error(provider, &c))?,
            ),
            (None, Some(token)) => Some(token.clone()),
            (None, None) => None,
        };
        let mut headers = HeaderMap::new();
        if let Some(authorization) = authorization {
            let mut value = HeaderValue::from_str(&authorization).map_err(|_| {
                credential_error(
                    provider,
                    "the container authorization token is not a valid header value",
                )
            })?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        headers.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("application/json"),
        );
        let body = get(
            upstream,
            provider,
            &reqwest::Method::GET,
            &url,
            &headers,
            "the container credentials endpoint",
        )
        .await?;
        let (found, lifetime) = parse_json(&body).map_err(|c| {
            credential_error(provider, &format!("the container credentials endpoint {c}"))
        })?;
        Ok((found.encode(), lifetime))
    })
    .await?;
    Ok(Attempt::Found(AwsCredentials::decode(&value)?))
}

/// The instance metadata source (IMDSv2).
pub(super) async fn instance(
    upstream: &Upstream,
    provider: &str,
    store: &CredentialStore,
) -> Result<Attempt> {
    if store
        .get("AWS_EC2_METADATA_DISABLED")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    {
        return Ok(Attempt::Unavailable(format!(
            "{UNSET} (AWS_EC2_METADATA_DISABLED is true)"
        )));
    }
    let endpoint = store
        .get("AWS_EC2_METADATA_SERVICE_ENDPOINT")
        .unwrap_or_else(|| IMDS_HOST.to_owned());
    let base = Url::parse(&endpoint)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| {
            credential_error(
                provider,
                "variable AWS_EC2_METADATA_SERVICE_ENDPOINT is not an http(s) URL",
            )
        })?;
    if !crate::identity::metadata_reachable(&base).await {
        return Ok(Attempt::Unavailable(format!(
            "{UNSET} (no instance metadata service answers at {})",
            base.as_str().trim_end_matches('/')
        )));
    }
    let key = token::cache_key(provider, &[b"aws", b"imds", base.as_str().as_bytes()]);
    let value =
        token::single_flight(store, key, || imds_credentials(upstream, provider, &base)).await?;
    Ok(Attempt::Found(AwsCredentials::decode(&value)?))
}

/// Credentials from IMDSv2 at `base`: a session token, the instance profile's role, then
/// the role's credentials, in their cache form with their lifetime.
async fn imds_credentials(
    upstream: &Upstream,
    provider: &str,
    base: &Url,
) -> Result<(String, Duration)> {
    let join = |path: &str| {
        base.join(path)
            .map_err(|_| Error::internal("IMDS paths join onto a base URL"))
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        HeaderName::from_static("x-aws-ec2-metadata-token-ttl-seconds"),
        HeaderValue::from_static(IMDS_TOKEN_TTL),
    );
    let session = get(
        upstream,
        provider,
        &reqwest::Method::PUT,
        &join("/latest/api/token")?,
        &headers,
        "IMDS",
    )
    .await?;
    let session = String::from_utf8(session.to_vec())
        .ok()
        .and_then(|s| HeaderValue::from_str(s.trim()).ok())
        .map(|mut v| {
            v.set_sensitive(true);
            v
        })
        .ok_or_else(|| {
            credential_error(
                provider,
                "IMDS answered with a session token that is not text",
            )
        })?;
    let mut headers = HeaderMap::new();
    headers.insert(HeaderName::from_static("x-aws-ec2-metadata-token"), session);
    let roles = get(
        upstream,
        provider,
        &reqwest::Method::GET,
        &join("/latest/meta-data/iam/security-credentials/")?,
        &headers,
        "IMDS",
    )
    .await?;
    let role = String::from_utf8_lossy(&roles)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned)
        .filter(|r| {
            r.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c))
        })
        .ok_or_else(|| {
            credential_error(
                provider,
                "IMDS names no instance profile role (is one attached to the instance?)",
            )
        })?;
    let body = get(
        upstream,
        provider,
        &reqwest::Method::GET,
        &join(&format!(
            "/latest/meta-data/iam/security-credentials/{role}"
        ))?,
        &headers,
        "IMDS",
    )
    .await?;
    let (found, lifetime) =
        parse_json(&body).map_err(|c| credential_error(provider, &format!("IMDS {c}")))?;
    Ok((found.encode(), lifetime))
}

/// One request to a metadata endpoint: its body, or an error naming `what` and the status.
async fn get(
    upstream: &Upstream,
    provider: &str,
    method: &reqwest::Method,
    url: &Url,
    headers: &HeaderMap,
    what: &str,
) -> Result<bytes::Bytes> {
    let (status, _, body) = upstream
        .send_as(
            Outgoing::new(method, url, headers, None),
            &AuthParts::default(),
        )
        .await
        .map_err(|err| {
            Error::new(
                err.kind(),
                format!(
                    "{what} request for provider '{provider}' failed: {}",
                    err.message()
                ),
            )
        })?;
    if !(200..300).contains(&status) {
        return Err(credential_error(
            provider,
            &format!("{what} answered {status} to {}", describe(method, url)),
        ));
    }
    Ok(body)
}

/// `AccessKeyId`, `SecretAccessKey`, `Token`, `Expiration` (and IMDS's `Code: Success`).
fn parse_json(body: &[u8]) -> std::result::Result<(AwsCredentials, Duration), String> {
    let json: Value = serde_json::from_slice(body)
        .map_err(|_| "answered with a body that is not JSON".to_owned())?;
    if let Some(code) = json.get("Code").and_then(Value::as_str)
        && code != "Success"
    {
        return Err("answered with a Code other than Success".to_owned());
    }
    let text = |name: &str| {
        json.get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let (Some(key_id), Some(secret)) = (text("AccessKeyId"), text("SecretAccessKey")) else {
        return Err("answered without AccessKeyId and SecretAccessKey".to_owned());
    };
    let found = AwsCredentials {
        key_id,
        secret,
        session_token: text("Token"),
    }
    .checked("the endpoint")?;
    let lifetime = text("Expiration")
        .map(|e| super::lifetime_until(&e))
        .unwrap_or_default();
    Ok((found, lifetime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_hosts_are_those_the_sdks_allow() {
        let ok = |u: &str| allowed_container_host(&Url::parse(u).unwrap());
        assert!(ok("http://127.0.0.1:9/creds"));
        assert!(ok("http://169.254.170.2/v2/credentials/x"));
        assert!(ok("http://169.254.170.23/v1/credentials"));
        assert!(ok("http://[fd00:ec2::23]/v1/credentials"));
        assert!(ok("https://creds.example.com/"));
        assert!(!ok("http://creds.example.com/"));
        assert!(!ok("http://10.0.0.1/"));
    }

    #[test]
    fn metadata_answers_parse() {
        let (found, lifetime) = parse_json(
            br#"{"Code":"Success","LastUpdated":"2026-01-01T00:00:00Z","Type":"AWS-HMAC","AccessKeyId":"ASIAIMDS","SecretAccessKey":"s","Token":"t","Expiration":"2099-01-01T00:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!(found.key_id, "ASIAIMDS");
        assert_eq!(found.session_token.as_deref(), Some("t"));
        assert!(lifetime > Duration::from_secs(3600));
        assert!(parse_json(br#"{"Code":"Failure"}"#).is_err());
        assert!(parse_json(b"nope").is_err());
    }
}
