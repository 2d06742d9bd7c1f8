//! The host's identity: managed identity (App Service / Container Apps'
//! `IDENTITY_ENDPOINT`, else IMDS) and the Azure CLI's login. Both serve only a tenant whose
//! store allows the host's identity (see the module above).

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use url::Url;

use super::{Attempt, UNSET};
use crate::credentials::{CredentialSource, CredentialStore};
use crate::error::Result;
use crate::identity::credential_error;
use crate::identity::token;
use crate::upstream::{Upstream, describe};

/// Why a host source is skipped for a tenant that may not use the host's identity.
pub(super) const NOT_FOR_TENANT: &str = "not configured (the host's identity serves only the tenant that reads the process environment, credentials.process_env)";

/// IMDS, where no `AZURE_POD_IDENTITY_AUTHORITY_HOST` says otherwise.
const IMDS_HOST: &str = "http://169.254.169.254";

/// How long `az account get-access-token` may run.
const CLI_TIMEOUT: Duration = Duration::from_secs(20);

/// The largest `az` output read.
const CLI_OUTPUT_LIMIT: usize = 64 * 1024;

/// The resource of a v1 token request: the scope without `/.default`.
fn resource(scope: &str) -> &str {
    scope.strip_suffix("/.default").unwrap_or(scope)
}

/// ManagedIdentityCredential.
pub(super) async fn managed_identity(
    upstream: &Upstream,
    provider: &str,
    scope: &str,
    credentials: &CredentialStore,
) -> Result<Attempt> {
    if !credentials.allows_host_identity() {
        return Ok(Attempt::Unavailable(NOT_FOR_TENANT.to_owned()));
    }
    let client_id = credentials.get("AZURE_CLIENT_ID");
    let app_service = match (
        credentials.get("IDENTITY_ENDPOINT"),
        credentials.get("IDENTITY_HEADER"),
    ) {
        (Some(endpoint), Some(header)) => Some((endpoint, header)),
        _ => None,
    };
    let (base, api_version, header_name, header_value, var) = match &app_service {
        Some((endpoint, header)) => (
            endpoint.clone(),
            "2019-08-01",
            "x-identity-header",
            header.clone(),
            "IDENTITY_ENDPOINT",
        ),
        None => {
            let host = credentials
                .get("AZURE_POD_IDENTITY_AUTHORITY_HOST")
                .unwrap_or_else(|| IMDS_HOST.to_owned());
            (
                format!(
                    "{}/metadata/identity/oauth2/token",
                    host.trim_end_matches('/')
                ),
                "2018-02-01",
                "metadata",
                "true".to_owned(),
                "AZURE_POD_IDENTITY_AUTHORITY_HOST",
            )
        }
    };
    let mut url = Url::parse(&base)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| {
            credential_error(provider, &format!("variable {var} is not an http(s) URL"))
        })?;
    {
        let mut query = url.query_pairs_mut();
        query.append_pair("api-version", api_version);
        query.append_pair("resource", resource(scope));
        if let Some(id) = &client_id {
            query.append_pair("client_id", id);
        }
    }
    let method = reqwest::Method::GET;
    let shown = describe(&method, &url);
    if app_service.is_none() && !crate::identity::metadata_reachable(&url).await {
        return Ok(Attempt::Unavailable(format!(
            "{UNSET} (no IMDS endpoint answers at {shown})"
        )));
    }
    let key = token::cache_key(
        provider,
        &[
            b"azure_default",
            b"managed_identity",
            url.as_str().as_bytes(),
            header_value.as_bytes(),
        ],
    );
    let value = token::single_flight(credentials, key, || async {
        let mut headers = HeaderMap::new();
        let mut value = HeaderValue::from_str(&header_value).map_err(|_| {
            credential_error(
                provider,
                "variable IDENTITY_HEADER is not a valid header value",
            )
        })?;
        value.set_sensitive(true);
        headers.insert(HeaderName::from_static(header_name), value);
        headers.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("application/json"),
        );
        token::fetch_token(upstream, provider, &method, &url, &shown, &headers, None).await
    })
    .await?;
    Ok(Attempt::Token(value))
}

/// AzureCliCredential.
pub(super) async fn azure_cli(
    provider: &str,
    scope: &str,
    credentials: &CredentialStore,
) -> Result<Attempt> {
    if !credentials.allows_host_identity() {
        return Ok(Attempt::Unavailable(NOT_FOR_TENANT.to_owned()));
    }
    let path = credentials.get("PATH").unwrap_or_default();
    let Some(az) = find_on_path(&path, "az") else {
        return Ok(Attempt::Unavailable(format!("{UNSET} (az is not on PATH)")));
    };
    if scope.split_whitespace().count() != 1
        || !scope
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '\'')
    {
        return Err(credential_error(
            provider,
            "AzureCliCredential asks for one scope of plain characters",
        ));
    }
    let key = token::cache_key(
        provider,
        &[
            b"azure_default",
            b"azure_cli",
            az.as_os_str().as_encoded_bytes(),
            scope.as_bytes(),
        ],
    );
    let value = token::single_flight(credentials, key, || async {
        run_az(provider, &az, &path, scope).await
    })
    .await?;
    Ok(Attempt::Token(value))
}

/// The first executable `name` in the directories of `path`.
fn find_on_path(path: &str, name: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `az account get-access-token` and reads its JSON: `accessToken`, `tokenType` and
/// `expires_on` (Unix seconds; older versions give only a local-time `expiresOn`, then the
/// token is kept for the default lifetime).
async fn run_az(provider: &str, az: &Path, path: &str, scope: &str) -> Result<(String, Duration)> {
    let mut command = tokio::process::Command::new(az);
    command
        .args([
            "account",
            "get-access-token",
            "--output",
            "json",
            "--scope",
            scope,
        ])
        .env("PATH", path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let fail = |cause: &str| credential_error(provider, &format!("AzureCliCredential: {cause}"));
    let output = match tokio::time::timeout(CLI_TIMEOUT, command.output()).await {
        Err(_) => {
            return Err(fail(&format!(
                "az did not answer within {}s",
                CLI_TIMEOUT.as_secs()
            )));
        }
        Ok(Err(err)) => return Err(fail(&format!("az could not be started: {}", err.kind()))),
        Ok(Ok(output)) => output,
    };
    if !output.status.success() {
        // stderr is not shown (it may quote what it was given); only the one hint that matters.
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint = if stderr.contains("az login") {
            ": not logged in, run `az login`"
        } else {
            ""
        };
        return Err(fail(&format!(
            "az account get-access-token exited with {}{hint}",
            output
                .status
                .code()
                .map_or_else(|| "a signal".to_owned(), |c| format!("status {c}"))
        )));
    }
    if output.stdout.len() > CLI_OUTPUT_LIMIT {
        return Err(fail("az answered with more output than a token"));
    }
    parse_cli_answer(&output.stdout).map_err(|cause| fail(&cause))
}

fn parse_cli_answer(stdout: &[u8]) -> std::result::Result<(String, Duration), String> {
    let json: Value = serde_json::from_slice(stdout)
        .map_err(|_| "az answered with something other than JSON".to_owned())?;
    let token = json
        .get("accessToken")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| "az answered without an accessToken".to_owned())?;
    let kind = match json.get("tokenType").and_then(Value::as_str) {
        Some(t) if !t.is_empty() && !t.eq_ignore_ascii_case("bearer") => t,
        _ => "Bearer",
    };
    let value = format!("{kind} {token}");
    if HeaderValue::from_str(&value).is_err() {
        return Err("az answered with a token that is not a valid HTTP header value".to_owned());
    }
    let expires_on = match json.get("expires_on") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.trim().parse().ok(),
        _ => None,
    };
    let lifetime = expires_on
        .map(token::lifetime_until)
        .unwrap_or(token::DEFAULT_LIFETIME);
    Ok((value, lifetime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_answers_parse() {
        let far = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 3000;
        let (value, lifetime) = parse_cli_answer(
            format!(r#"{{"accessToken":"eyJ0","tokenType":"Bearer","expires_on":{far},"expiresOn":"2030-01-01 00:00:00.000000"}}"#)
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(value, "Bearer eyJ0");
        assert!(lifetime > Duration::from_secs(2990) && lifetime <= Duration::from_secs(3000));
        assert_eq!(
            parse_cli_answer(br#"{"accessToken":"a"}"#).unwrap().1,
            token::DEFAULT_LIFETIME
        );
        assert!(parse_cli_answer(b"ERROR: Please run 'az login'").is_err());
    }

    #[test]
    fn resources_drop_the_default_suffix() {
        assert_eq!(
            resource("https://management.azure.com/.default"),
            "https://management.azure.com"
        );
    }
}
