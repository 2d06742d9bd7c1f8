//! The GCE metadata server (Compute Engine, GKE's metadata server, Cloud Run): the default
//! service account's token at `/computeMetadata/v1/instance/service-accounts/default/token`,
//! asked with `Metadata-Flavor: Google` and accepted only from an answer that carries it
//! too. `GCE_METADATA_HOST` (`host[:port]`) overrides `169.254.169.254`.

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use url::Url;

use crate::credentials::{CredentialSource, CredentialStore};
use crate::error::Result;
use crate::identity::token;
use crate::identity::{AuthParts, credential_error};
use crate::upstream::{Outgoing, Upstream, describe};

/// The variable overriding the metadata server's address.
pub(super) const HOST_VAR: &str = "GCE_METADATA_HOST";

/// The metadata server's address where `GCE_METADATA_HOST` is unset.
const DEFAULT_HOST: &str = "169.254.169.254";

const TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";

/// The token URL (without scopes) of the configured metadata server.
pub(super) fn endpoint(credentials: &dyn CredentialSource) -> std::result::Result<Url, String> {
    let host = credentials
        .get(HOST_VAR)
        .unwrap_or_else(|| DEFAULT_HOST.to_owned());
    let host = host.trim();
    let bad = || format!("variable {HOST_VAR} is not a host[:port]");
    if host.is_empty() || host.contains(['/', '@', '?', '#']) || host.contains("://") {
        return Err(bad());
    }
    let url = Url::parse(&format!("http://{host}{TOKEN_PATH}")).map_err(|_| bad())?;
    if url.host_str().is_none() || url.path() != TOKEN_PATH {
        return Err(bad());
    }
    Ok(url)
}

/// The `Authorization` value from the metadata server: cached, or asked now.
pub(super) async fn token(
    upstream: &Upstream,
    provider: &str,
    credentials: &CredentialStore,
    scope: &str,
) -> Result<String> {
    let mut url = endpoint(credentials).map_err(|cause| credential_error(provider, &cause))?;
    let scopes: Vec<&str> = scope.split_whitespace().collect();
    url.query_pairs_mut()
        .append_pair("scopes", &scopes.join(","));
    let method = reqwest::Method::GET;
    let shown = describe(&method, &url);
    let key = token::cache_key(
        provider,
        &[b"service_account", b"gce_metadata", url.as_str().as_bytes()],
    );
    token::single_flight(credentials, key, || async {
        if !crate::identity::metadata_reachable(&url).await {
            return Err(credential_error(
                provider,
                &format!("service_account found no credential: no GCE metadata server answers at {shown}"),
            ));
        }
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("metadata-flavor"),
            HeaderValue::from_static("Google"),
        );
        let (status, answer_headers, body) = upstream
            .send_as(Outgoing::new(&method, &url, &headers, None), &AuthParts::default())
            .await
            .map_err(|err| {
                credential_error(
                    provider,
                    &format!("metadata server request {shown} failed: {}", err.message()),
                )
            })?;
        if !(200..300).contains(&status) {
            return Err(credential_error(
                provider,
                &format!("metadata server {shown} answered {status}"),
            ));
        }
        let flavor = answer_headers
            .get("metadata-flavor")
            .and_then(|v| v.to_str().ok());
        if flavor != Some("Google") {
            return Err(credential_error(
                provider,
                &format!("{shown} answered without Metadata-Flavor: Google, so it is not a GCE metadata server"),
            ));
        }
        token::parse_answer(&body).map_err(|cause| {
            credential_error(provider, &format!("metadata server {shown} {cause}"))
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_variable_is_a_host_and_port_only() {
        let store = |v: &str| CredentialStore::fixed([(HOST_VAR.to_owned(), v.to_owned())]);
        assert_eq!(
            endpoint(&CredentialStore::empty()).unwrap().as_str(),
            "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token"
        );
        assert_eq!(
            endpoint(&store("127.0.0.1:8080")).unwrap().as_str(),
            "http://127.0.0.1:8080/computeMetadata/v1/instance/service-accounts/default/token"
        );
        for bad in ["http://x", "x/y", "u@x", "x?q"] {
            assert!(endpoint(&store(bad)).is_err(), "{bad}");
        }
    }
}
