//! `azure_default`: Azure's DefaultAzureCredential chain, tried in its order, each source
//! read from the statement's tenant's credentials:
//!
//! 1. **EnvironmentCredential**: `AZURE_TENANT_ID` + `AZURE_CLIENT_ID` and either
//!    `AZURE_CLIENT_SECRET` or `AZURE_CLIENT_CERTIFICATE_PATH` (a PEM file with the
//!    certificate and its RSA key: an RS256 client assertion with the `x5t` thumbprint).
//! 2. **WorkloadIdentityCredential**: `AZURE_FEDERATED_TOKEN_FILE` + `AZURE_CLIENT_ID` +
//!    `AZURE_TENANT_ID`: the file's token is the client assertion. The file is read at each
//!    token request, so a token Kubernetes rotated in place is used from then on.
//! 3. **ManagedIdentityCredential**: App Service / Container Apps (`IDENTITY_ENDPOINT` +
//!    `IDENTITY_HEADER`), else IMDS (`http://169.254.169.254`, or
//!    `AZURE_POD_IDENTITY_AUTHORITY_HOST`); `AZURE_CLIENT_ID` picks a user-assigned identity.
//! 4. **AzureCliCredential**: `az account get-access-token --scope <scope>`, `az` found on
//!    the tenant's `PATH`.
//!
//! Entra's token endpoint is `<AZURE_AUTHORITY_HOST>/<tenant>/oauth2/v2.0/token`
//! (`https://login.microsoftonline.com` by default; plain `http` only to a loopback host).
//! `AZURE_TOKEN_CREDENTIALS` narrows the chain as Azure's SDKs do: `prod` (1–3), `dev` (4),
//! or one credential's name.
//!
//! A source whose variables are not set is skipped; a source that is set but fails stops
//! the chain with an error naming it (no silent fall-through to another identity).
//! **Tenants**: sources 1 and 2 come from the tenant's own credential variables. Sources 3
//! and 4 are the host's identity, shared by every tenant of the process: they serve only a
//! tenant whose store reads the process environment (`credentials.process_env`, which only
//! the `default` tenant may set); for any other tenant they are skipped and the error says
//! why.
//!
//! Tokens are per scope (the auth's `scopes`, else ARM's
//! `https://management.azure.com/.default`), cached in the tenant's token cache until
//! shortly before they expire, fetched once for concurrent callers.
//!
//! Why not the `azure_identity` crate (1.0.0, checked with `cargo tree` in a scratch
//! project): it has no DefaultAzureCredential or EnvironmentCredential any more; it reads
//! the process environment itself (no per-tenant variables); its IMDS endpoint is a
//! constant (not testable against a mock); client certificates need OpenSSL, and its default
//! HTTP stack pulls reqwest with aws-lc-rs (a second crypto provider), 134 crates in all.
//! The token requests are small form posts and GETs over our own client (ring, timeouts,
//! size limit), written here.

mod entra;
mod host;

use serde_json::Value;

use super::credential_error;
use super::oauth2::scopes;
use crate::credentials::{CredentialSource, CredentialStore};
use crate::error::{Error, Result};
use crate::upstream::Upstream;

/// The scope asked for when the auth names none: Azure Resource Manager.
const ARM_SCOPE: &str = "https://management.azure.com/.default";

/// The variable that narrows the chain.
const SELECT_VAR: &str = "AZURE_TOKEN_CREDENTIALS";

/// One source of the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Environment,
    WorkloadIdentity,
    ManagedIdentity,
    AzureCli,
}

impl Source {
    const ALL: [Source; 4] = [
        Source::Environment,
        Source::WorkloadIdentity,
        Source::ManagedIdentity,
        Source::AzureCli,
    ];

    /// The name Azure's SDKs give it (and `AZURE_TOKEN_CREDENTIALS` accepts).
    fn name(self) -> &'static str {
        match self {
            Source::Environment => "EnvironmentCredential",
            Source::WorkloadIdentity => "WorkloadIdentityCredential",
            Source::ManagedIdentity => "ManagedIdentityCredential",
            Source::AzureCli => "AzureCliCredential",
        }
    }

    /// The variables it reads, named in its errors.
    fn variables(self) -> &'static str {
        match self {
            Source::Environment => {
                "AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET or AZURE_CLIENT_CERTIFICATE_PATH, AZURE_AUTHORITY_HOST"
            }
            Source::WorkloadIdentity => {
                "AZURE_FEDERATED_TOKEN_FILE, AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_AUTHORITY_HOST"
            }
            Source::ManagedIdentity => {
                "IDENTITY_ENDPOINT and IDENTITY_HEADER, else AZURE_POD_IDENTITY_AUTHORITY_HOST; AZURE_CLIENT_ID"
            }
            Source::AzureCli => "PATH",
        }
    }
}

/// What trying one source gave: a token, or why the source does not apply.
enum Attempt {
    Token(String),
    Unavailable(String),
}

/// The sources `AZURE_TOKEN_CREDENTIALS` selects (all when unset).
fn selected(credentials: &dyn CredentialSource) -> std::result::Result<Vec<Source>, String> {
    let Some(choice) = credentials.get(SELECT_VAR) else {
        return Ok(Source::ALL.to_vec());
    };
    let choice = choice.trim();
    if choice.eq_ignore_ascii_case("prod") {
        return Ok(Source::ALL[..3].to_vec());
    }
    if choice.eq_ignore_ascii_case("dev") {
        return Ok(vec![Source::AzureCli]);
    }
    Source::ALL
        .into_iter()
        .find(|s| s.name().eq_ignore_ascii_case(choice))
        .map(|s| vec![s])
        .ok_or_else(|| {
            format!(
                "variable {SELECT_VAR} is not one of prod, dev, EnvironmentCredential, WorkloadIdentityCredential, ManagedIdentityCredential, AzureCliCredential"
            )
        })
}

/// The scope of the token: the auth's `scopes` (space-joined), else ARM's.
fn scope(auth: &Value) -> String {
    let scope = scopes(auth).join(" ");
    if scope.is_empty() {
        ARM_SCOPE.to_owned()
    } else {
        scope
    }
}

/// The `Authorization` value for an `azure_default` auth object: cached, or obtained from
/// the first source of the chain that applies.
pub(super) async fn authorization(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
) -> Result<String> {
    let sources = selected(credentials).map_err(|cause| credential_error(provider, &cause))?;
    let scope = scope(auth);
    let mut skipped = Vec::new();
    for source in sources {
        let attempt = match source {
            Source::Environment => {
                entra::environment(upstream, provider, &scope, credentials).await
            }
            Source::WorkloadIdentity => {
                entra::workload_identity(upstream, provider, &scope, credentials).await
            }
            Source::ManagedIdentity => {
                host::managed_identity(upstream, provider, &scope, credentials).await
            }
            Source::AzureCli => host::azure_cli(provider, &scope, credentials).await,
        }
        .map_err(|err| named(err, source))?;
        match attempt {
            Attempt::Token(value) => {
                tracing::debug!(%provider, source = source.name(), "azure_default resolved");
                credentials
                    .tokens()
                    .note_source(provider, &format!("azure_default:{}", source.name()));
                return Ok(value);
            }
            Attempt::Unavailable(why) => skipped.push(format!("{}: {why}", source.name())),
        }
    }
    Err(credential_error(
        provider,
        &format!("azure_default found no credential: {}", skipped.join("; ")),
    ))
}

/// The document-level `azure_federated` type: the federated token of `file` (and what
/// named it, for errors) as the client
/// assertion of `client` in `tenant`, at `authority` (else Entra's public cloud).
#[allow(clippy::too_many_arguments)]
pub(super) async fn federated(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
    file: (&str, &str),
    client: &str,
    tenant: &str,
    authority: Option<String>,
) -> Result<String> {
    let value = entra::client_assertion(
        upstream,
        provider,
        &scope(auth),
        credentials,
        file,
        client,
        tenant,
        authority,
    )
    .await
    .map_err(|err| err.with_note("azure_federated"))?;
    credentials
        .tokens()
        .note_source(provider, "azure_federated:client_assertion");
    Ok(value)
}

/// `err` with the source it came from and the variables that source reads.
fn named(err: Error, source: Source) -> Error {
    err.with_note(&format!(
        "azure_default source {}, variables {}",
        source.name(),
        source.variables()
    ))
}

/// Checks without any network call: `Ok(true)` when a tenant-held source (environment or
/// workload identity) is configured and its material is usable; `Ok(false)` when only the
/// host's identity could serve (it can only be checked by asking for a token); an error
/// naming each source's missing variables otherwise.
pub(super) fn check(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<bool, String> {
    let _ = auth;
    let mut skipped = Vec::new();
    for source in selected(credentials)? {
        let outcome = match source {
            Source::Environment => entra::check_environment(credentials),
            Source::WorkloadIdentity => entra::check_workload_identity(credentials),
            Source::ManagedIdentity | Source::AzureCli => {
                if credentials.allows_host_identity() {
                    return Ok(false);
                }
                Err(host::NOT_FOR_TENANT.to_owned())
            }
        };
        match outcome {
            Ok(true) => return Ok(true),
            Ok(false) => {}
            Err(why) if why.starts_with(UNSET) => skipped.push(format!("{}: {why}", source.name())),
            Err(why) => return Err(format!("azure_default source {}: {why}", source.name())),
        }
    }
    Err(format!(
        "azure_default found no credential: {}",
        skipped.join("; ")
    ))
}

/// Which source of the chain would serve, judged without a network call: the first
/// tenant-held source whose material is usable, else the host's identity sources the
/// chain still selects (joined with `|`: which one answers is known only once a token is
/// fetched); `None` when none applies.
pub(crate) fn configured_source(credentials: &dyn CredentialSource) -> Option<String> {
    let mut host = Vec::new();
    for source in selected(credentials).ok()? {
        match source {
            Source::Environment => {
                if entra::check_environment(credentials) == Ok(true) {
                    return Some(source.name().to_owned());
                }
            }
            Source::WorkloadIdentity => {
                if entra::check_workload_identity(credentials) == Ok(true) {
                    return Some(source.name().to_owned());
                }
            }
            Source::ManagedIdentity | Source::AzureCli => {
                if credentials.allows_host_identity() {
                    host.push(source.name());
                }
            }
        }
    }
    (!host.is_empty()).then(|| host.join("|"))
}

/// How a source's "not configured" reason starts (so `check` tells it from a failure).
const UNSET: &str = "not configured";

/// `Some(value)` for each of `names` when all are set; else the "not configured" reason.
fn all_set(
    credentials: &dyn CredentialSource,
    names: &[&str],
) -> std::result::Result<Vec<String>, String> {
    let mut values = Vec::with_capacity(names.len());
    let mut missing = Vec::new();
    for name in names {
        match credentials.get(name) {
            Some(value) => values.push(value),
            None => missing.push(*name),
        }
    }
    if missing.is_empty() {
        Ok(values)
    } else {
        Err(format!("{UNSET} ({} not set)", missing.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store(pairs: &[(&str, &str)]) -> CredentialStore {
        CredentialStore::fixed(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
    }

    #[test]
    fn token_credentials_variable_narrows_the_chain() {
        assert_eq!(selected(&store(&[])).unwrap(), Source::ALL.to_vec());
        assert_eq!(
            selected(&store(&[(SELECT_VAR, "prod")])).unwrap(),
            Source::ALL[..3].to_vec()
        );
        assert_eq!(
            selected(&store(&[(SELECT_VAR, "dev")])).unwrap(),
            vec![Source::AzureCli]
        );
        assert_eq!(
            selected(&store(&[(SELECT_VAR, "workloadidentitycredential")])).unwrap(),
            vec![Source::WorkloadIdentity]
        );
        assert!(
            selected(&store(&[(SELECT_VAR, "magic")]))
                .unwrap_err()
                .contains(SELECT_VAR)
        );
    }

    #[test]
    fn scope_defaults_to_arm() {
        assert_eq!(scope(&json!({"type": "azure_default"})), ARM_SCOPE);
        assert_eq!(
            scope(&json!({"scopes": ["https://vault.azure.net/.default"]})),
            "https://vault.azure.net/.default"
        );
    }

    #[test]
    fn check_names_every_source_for_a_tenant_without_host_identity() {
        let err = check(&json!({}), &store(&[])).unwrap_err();
        assert!(err.contains("EnvironmentCredential: not configured (AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET or AZURE_CLIENT_CERTIFICATE_PATH not set)"), "{err}");
        assert!(
            err.contains("WorkloadIdentityCredential: not configured (AZURE_FEDERATED_TOKEN_FILE"),
            "{err}"
        );
        assert!(
            err.contains("ManagedIdentityCredential: not configured (the host's identity"),
            "{err}"
        );
        let secret = store(&[
            ("AZURE_TENANT_ID", "t"),
            ("AZURE_CLIENT_ID", "c"),
            ("AZURE_CLIENT_SECRET", "s3cr3t"),
        ]);
        assert_eq!(check(&json!({}), &secret), Ok(true));
        assert_eq!(
            configured_source(&secret).as_deref(),
            Some("EnvironmentCredential")
        );
        assert_eq!(configured_source(&store(&[])), None);
        assert_eq!(
            configured_source(&store(&[]).with_host_identity(true)).as_deref(),
            Some("ManagedIdentityCredential|AzureCliCredential")
        );
        assert_eq!(
            check(&json!({}), &store(&[]).with_host_identity(true)),
            Ok(false)
        );
        let missing_file = store(&[
            ("AZURE_TENANT_ID", "t"),
            ("AZURE_CLIENT_ID", "c"),
            ("AZURE_FEDERATED_TOKEN_FILE", "/nonexistent/token"),
        ]);
        let err = check(&json!({}), &missing_file).unwrap_err();
        assert!(
            err.starts_with(
                "azure_default source WorkloadIdentityCredential: AZURE_FEDERATED_TOKEN_FILE"
            ),
            "{err}"
        );
    }
}
