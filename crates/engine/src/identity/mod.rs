//! Cloud identity: resolves a provider's `config.auth` into what its requests carry
//! ([`AuthParts`]), reading secrets through the tenant's credential source, running the
//! AWS, Google and Azure credential chains and fetching and caching tokens over the
//! upstream client. Secret values never appear in errors or logs: only variable names and
//! file paths.
//!
//! [`resolve`] runs once per table load (it may fetch a token, so it is async);
//! [`AuthParts::apply`] (in `upstream`) runs on every request once it is fully built, and
//! signs it when the auth is `aws_signing_v4`.

mod aws;
mod azure;
mod exchange;
mod federated;
mod google;
mod oauth2;
mod oci;
mod static_keys;
mod template;
mod token;

pub(crate) use aws::sigv4::session_token_var as aws_session_token_var;
pub(crate) use aws::{Caller, configured_source as aws_source};
pub(crate) use azure::configured_source as azure_default_source;
pub(crate) use exchange::source_name as exchange_source;
pub(crate) use federated::subject_source as federated_source;
pub(crate) use google::{configured_source as google_source, material_pieces as google_material};
pub(crate) use oci::configured_source as oci_source;

use serde_json::Value;

use self::aws::sigv4::Signer;
use crate::credentials::{CredentialSource, CredentialStore};
use crate::error::{Error, ErrorKind, Result};
use crate::upstream::{AuthParts, Upstream};

/// The auth types [`resolve`] knows.
const SUPPORTED: &str = "basic, bearer, api_key, custom, oauth2, service_account, azure_default, aws_signing_v4, oci_signing_v1, aws_web_identity, gcp_workload_identity, azure_federated, null_auth";

/// The credential error text the MCP tools show (inventory §8.5).
pub(crate) fn credential_error(provider: &str, cause: &str) -> Error {
    Error::new(
        ErrorKind::Credentials,
        format!(
            "credential resolution failed for provider '{provider}' ({cause}) - fix the configured env file, call reload_credentials, then retry"
        ),
    )
}

/// Resolves `auth` (a provider's `config.auth`, or `null`) into headers, query params and
/// a signer. Token-based types (`oauth2`, `service_account`) take a cached token or fetch
/// one through `upstream`'s client (same timeouts and size limit as API calls);
/// `aws_signing_v4` runs the AWS credential chain (and assumes the tenant's role for the
/// provider, in a session naming `caller`). When the tenant exchanges the caller's token
/// for this provider (`tenants[].providers.<name>.token_exchange`), the exchanged token
/// replaces the document's auth.
pub(crate) async fn resolve(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
    caller: Caller<'_>,
) -> Result<AuthParts> {
    credentials.reread_if_changed();
    let mut parts = AuthParts {
        provider: provider.to_owned(),
        ..AuthParts::default()
    };
    if let Some(config) = credentials.token_exchange(provider) {
        let value =
            exchange::authorization(upstream, provider, config, credentials, caller).await?;
        parts.headers.push(("Authorization".to_owned(), value));
        return Ok(parts);
    }
    let mut current = Some(auth);
    let mut depth = 0;
    while let Some(auth) = current.filter(|a| a.is_object()) {
        depth += 1;
        if depth > 8 {
            return Err(Error::bad_document(format!(
                "provider '{provider}': auth successor chain is longer than 8"
            )));
        }
        let kind = field(auth, "type").unwrap_or("null_auth");
        match kind {
            "null_auth" | "none" | "null" => {}
            "basic" | "bearer" | "api_key" | "custom" => {
                static_keys::apply(provider, kind, auth, credentials, &mut parts)?;
            }
            "oauth2" => {
                let value = oauth2::authorization(upstream, provider, auth, credentials).await?;
                parts.headers.push(("Authorization".to_owned(), value));
            }
            "service_account" => {
                let value = google::authorization(upstream, provider, auth, credentials).await?;
                parts.headers.push(("Authorization".to_owned(), value));
            }
            "azure_default" => {
                let value = azure::authorization(upstream, provider, auth, credentials).await?;
                parts.headers.push(("Authorization".to_owned(), value));
            }
            "aws_signing_v4" => {
                let found = aws::credentials(upstream, provider, auth, credentials, caller).await?;
                parts.signer = Some(Box::new(Signer::new(provider, auth, found)));
            }
            "oci_signing_v1" => {
                parts.signer = Some(Box::new(oci::signer(provider, auth, credentials)?));
            }
            "aws_web_identity" => {
                let found =
                    federated::aws_credentials(upstream, provider, auth, credentials).await?;
                parts.signer = Some(Box::new(Signer::new(provider, auth, found)));
            }
            "gcp_workload_identity" => {
                let value =
                    federated::google_authorization(upstream, provider, auth, credentials).await?;
                parts.headers.push(("Authorization".to_owned(), value));
            }
            "azure_federated" => {
                let value =
                    federated::azure_authorization(upstream, provider, auth, credentials).await?;
                parts.headers.push(("Authorization".to_owned(), value));
            }
            other => {
                return Err(Error::new(
                    ErrorKind::Credentials,
                    format!(
                        "auth type '{other}' of provider '{provider}' is not supported (supported: {SUPPORTED})"
                    ),
                ));
            }
        }
        current = auth.get("successor");
    }
    // Checked here, once per statement, so a bad credential is reported for its provider.
    for (name, value) in &parts.headers {
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err()
            || reqwest::header::HeaderValue::from_str(value).is_err()
        {
            return Err(credential_error(
                provider,
                &format!("the value for header {name} is not a valid HTTP header value"),
            ));
        }
    }
    Ok(parts)
}

fn field<'a>(auth: &'a Value, key: &str) -> Option<&'a str> {
    auth.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// [`check_material`] for `provider`'s calls from `credentials`' tenant: when the tenant
/// exchanges the caller's token for this provider, the exchange's client id and secret
/// (the document's auth is not used then).
pub(crate) fn check_provider_material(
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
) -> std::result::Result<bool, String> {
    match credentials.token_exchange(provider) {
        Some(config) => exchange::check(config, credentials).map(|()| true),
        None => check_material(auth, credentials),
    }
}

/// Checks, without any network call, that the material every auth of the chain needs is
/// present: the secret of the static types, the client id and secret of `oauth2`, a
/// usable Google credential for `service_account` (a key, an `external_account` or
/// `authorized_user` file; the metadata server is not checked), a configured source of
/// `aws_signing_v4` and `azure_default`. `Ok(true)`: checked and present; `Ok(false)`: nothing to
/// check (e.g. `null_auth`); `Err(cause)`: missing or unusable, with a cause that names
/// variables and paths, never values.
pub(crate) fn check_material(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<bool, String> {
    credentials.reread_if_changed();
    let mut checked = false;
    let mut current = Some(auth);
    let mut depth = 0;
    while let Some(auth) = current.filter(|a| a.is_object() && depth < 8) {
        depth += 1;
        match field(auth, "type").unwrap_or("null_auth") {
            "basic" | "bearer" | "api_key" | "custom" => {
                static_keys::secret_material(auth, credentials)?;
                checked = true;
            }
            "oauth2" => {
                oauth2::check(auth, credentials)?;
                checked = true;
            }
            "service_account" => {
                checked |= google::check(auth, credentials)?;
            }
            "aws_signing_v4" => {
                checked |= aws::check(auth, credentials)?;
            }
            "azure_default" => {
                checked |= azure::check(auth, credentials)?;
            }
            "oci_signing_v1" => {
                checked |= oci::check(auth, credentials)?;
            }
            kind @ ("aws_web_identity" | "gcp_workload_identity" | "azure_federated") => {
                checked |= federated::check(kind, auth, credentials)?;
            }
            _ => {}
        }
        current = auth.get("successor");
    }
    Ok(checked)
}

/// How long a cloud's metadata endpoint may take to accept a TCP connection before the
/// credential chain takes it for absent (off that cloud).
const METADATA_PROBE: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether a TCP connection to `url`'s host opens within [`METADATA_PROBE`]: the AWS, Azure
/// and Google credential chains ask before calling their metadata endpoints.
async fn metadata_reachable(url: &url::Url) -> bool {
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return false;
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    matches!(
        tokio::time::timeout(METADATA_PROBE, tokio::net::TcpStream::connect((host, port))).await,
        Ok(Ok(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::CredentialStore;
    use serde_json::json;

    fn upstream() -> Upstream {
        Upstream::new(crate::upstream::UpstreamSettings {
            timeout: std::time::Duration::from_secs(5),
            connect_timeout: std::time::Duration::from_secs(5),
            page_limit: 0,
            max_response_bytes: 1 << 20,
            retry: Default::default(),
            max_requests_per_second: Default::default(),
        })
        .unwrap()
    }

    const CALLER: Caller<'static> = Caller {
        tenant: "default",
        principal: "anonymous",
        subject_token: None,
    };

    fn creds() -> CredentialStore {
        CredentialStore::fixed([
            ("TOKEN".to_owned(), "s3cr3t".to_owned()),
            ("U".to_owned(), "user".to_owned()),
            ("P".to_owned(), "pass".to_owned()),
        ])
    }

    #[tokio::test]
    async fn each_type_puts_the_secret_where_it_belongs() {
        let up = upstream();
        let basic = resolve(
            &up,
            "p",
            &json!({"type": "basic", "credentialsenvvar": "TOKEN"}),
            &creds(),
            CALLER,
        )
        .await
        .unwrap();
        assert_eq!(
            basic.headers,
            vec![("Authorization".to_owned(), "Basic s3cr3t".to_owned())]
        );
        let pair = resolve(
            &up,
            "p",
            &json!({"type": "basic", "username_var": "U", "password_var": "P"}),
            &creds(),
            CALLER,
        )
        .await
        .unwrap();
        assert_eq!(pair.headers[0].1, "Basic dXNlcjpwYXNz");
        let bearer = resolve(
            &up,
            "p",
            &json!({"type": "bearer", "credentialsenvvar": "TOKEN"}),
            &creds(),
            CALLER,
        )
        .await
        .unwrap();
        assert_eq!(bearer.headers[0].1, "Bearer s3cr3t");
        let custom = resolve(
            &up,
            "p",
            &json!({"type": "custom", "location": "query", "name": "key", "credentialsenvvar": "TOKEN",
                    "successor": {"type": "custom", "location": "header", "name": "X-U", "credentialsenvvar": "U"}}),
            &creds(), CALLER
        )
        .await
        .unwrap();
        assert_eq!(custom.query, vec![("key".to_owned(), "s3cr3t".to_owned())]);
        assert_eq!(custom.headers, vec![("X-U".to_owned(), "user".to_owned())]);
        let none = resolve(&up, "p", &json!({"type": "null_auth"}), &creds(), CALLER)
            .await
            .unwrap();
        assert!(none.headers.is_empty() && none.query.is_empty());
    }

    #[tokio::test]
    async fn missing_variable_names_the_variable_not_a_value() {
        let err = resolve(
            &upstream(),
            "gh",
            &json!({"type": "basic", "credentialsenvvar": "NOPE"}),
            &creds(),
            CALLER,
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Credentials);
        assert!(err.message().starts_with(
            "credential resolution failed for provider 'gh' (variable NOPE is not set)"
        ));
    }

    #[tokio::test]
    async fn unknown_types_fail_and_signing_types_check_their_material() {
        let err = resolve(
            &upstream(),
            "az",
            &json!({"type": "kerberos"}),
            &creds(),
            CALLER,
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Credentials);
        assert!(
            err.message()
                .starts_with("auth type 'kerberos' of provider 'az' is not supported"),
            "{err}"
        );
        let aws =
            json!({"type": "aws_signing_v4", "keyIDenvvar": "U", "credentialsenvvar": "TOKEN"});
        let parts = resolve(&upstream(), "aws", &aws, &creds(), CALLER)
            .await
            .unwrap();
        assert!(parts.signer.is_some() && parts.headers.is_empty());
        assert!(!format!("{parts:?}").contains("s3cr3t"));
        assert_eq!(check_material(&aws, &creds()), Ok(true));
        let oauth = json!({"type": "oauth2", "token_url": "https://t", "client_id_env_var": "U",
                           "client_secret_env_var": "MISSING"});
        assert_eq!(
            check_material(&oauth, &creds()),
            Err("variable MISSING is not set".to_owned())
        );
        assert_eq!(
            check_material(&json!({"type": "null_auth"}), &creds()),
            Ok(false)
        );
    }
}
