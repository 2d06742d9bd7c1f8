//! The document-level identity federation types of StackQL's auth objects, mapped onto the
//! chains this crate already runs. Each exchanges a foreign OIDC token (the *subject
//! token*: GitHub Actions, a Kubernetes projected service account token) for short-lived
//! cloud credentials:
//!
//! - `aws_web_identity` → STS `AssumeRoleWithWebIdentity` (`aws_role_arn` or the variable
//!   `aws_role_arn_env_var` names; `aws_role_session_name`; `aws_sts_endpoint`, else the
//!   regional endpoint of `aws_sts_region`, else `us-east-1`), then SigV4 as
//!   `aws_signing_v4` signs (`signing_region` / `signing_service` apply);
//! - `gcp_workload_identity` → Google's `external_account` flow (`gcp_workload_identity_audience`,
//!   `gcp_workload_identity_subject_token_type` (else the JWT type),
//!   `gcp_workload_identity_token_url` (else Google's STS),
//!   `gcp_service_account_impersonation_url`, `scopes`);
//! - `azure_federated` → Entra's client-assertion grant (`azure_tenant_id` or
//!   `azure_tenant_id_env_var`, `client_id` or `client_id_env_var`, `scopes`,
//!   `azure_federated_endpoint`: the full token URL `<authority>/<tenant>/oauth2/v2.0/token`).
//!
//! **The subject token** is read from its file at each refresh (rotation works). The file
//! is the one named by the tenant's variable `oidc_subject_token_file_env_var` names;
//! else `oidc_subject_token_file`, a path written in the document, which is shared by every
//! tenant and so is the host's credential: it serves only the tenant that may use the
//! host's identity (the one reading the process environment). `oidc_subject_token` (a
//! token inline in the document, "tests only" in StackQL) is refused: a token in a shared
//! document would be every tenant's identity, and it cannot rotate.

use serde_json::{Value, json};

use super::{aws, azure, credential_error, field, google};
use crate::credentials::{CredentialSource, CredentialStore};
use crate::error::Result;
use crate::upstream::Upstream;

/// Google's subject token type for an OIDC ID token.
const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";

/// The subject token's file for this tenant, and how errors show it.
fn subject_token_file(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<(String, String), String> {
    if let Some(var) = field(auth, "oidc_subject_token_file_env_var") {
        return match credentials.get(var) {
            Some(path) => Ok((path, format!("variable {var}"))),
            None => Err(format!(
                "variable {var} (oidc_subject_token_file_env_var) is not set"
            )),
        };
    }
    if let Some(path) = field(auth, "oidc_subject_token_file") {
        if !credentials.allows_host_identity() {
            return Err(format!(
                "oidc_subject_token_file '{path}' is a file of the host named by a shared document: it serves only the tenant that reads the process environment (credentials.process_env); name the tenant's own token file with oidc_subject_token_file_env_var"
            ));
        }
        return Ok((path.to_owned(), "oidc_subject_token_file".to_owned()));
    }
    if field(auth, "oidc_subject_token").is_some() {
        return Err(
            "oidc_subject_token (a token inline in the document) is not supported: name a token file, re-read at each refresh, with oidc_subject_token_file_env_var".to_owned(),
        );
    }
    Err("none of oidc_subject_token_file_env_var, oidc_subject_token_file is set".to_owned())
}

/// Where the subject token comes from, for the credential report: `env:<VAR>` or
/// `file:<path>`; `None` when it does not resolve for this tenant.
pub(crate) fn subject_source(auth: &Value, credentials: &dyn CredentialSource) -> Option<String> {
    subject_token_file(auth, credentials).ok()?;
    match field(auth, "oidc_subject_token_file_env_var") {
        Some(var) => Some(format!("env:{var}")),
        None => field(auth, "oidc_subject_token_file").map(|path| format!("file:{path}")),
    }
}

/// The inline value `key`, else the tenant's variable named by `var_key`.
fn value_or_var(
    auth: &Value,
    key: &str,
    var_key: &str,
    credentials: &dyn CredentialSource,
) -> std::result::Result<String, String> {
    if let Some(value) = field(auth, key) {
        return Ok(value.to_owned());
    }
    match field(auth, var_key) {
        Some(var) => credentials
            .get(var)
            .ok_or_else(|| format!("variable {var} ({var_key}) is not set")),
        None => Err(format!("neither {key} nor {var_key} is set")),
    }
}

/// What `kind` needs, checked without a network call.
struct Aws {
    file: (String, String),
    role: String,
}

fn aws_material(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<Aws, String> {
    Ok(Aws {
        role: value_or_var(auth, "aws_role_arn", "aws_role_arn_env_var", credentials)?,
        file: subject_token_file(auth, credentials)?,
    })
}

fn google_material(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<Value, String> {
    let audience = field(auth, "gcp_workload_identity_audience")
        .ok_or("gcp_workload_identity_audience is not set")?;
    let (file, _) = subject_token_file(auth, credentials)?;
    let mut external = json!({
        "type": "external_account",
        "audience": audience,
        "subject_token_type": field(auth, "gcp_workload_identity_subject_token_type")
            .unwrap_or(JWT_TOKEN_TYPE),
        "credential_source": {"file": file},
    });
    if let Some(url) = field(auth, "gcp_workload_identity_token_url") {
        external["token_url"] = json!(url);
    }
    if let Some(url) = field(auth, "gcp_service_account_impersonation_url") {
        external["service_account_impersonation_url"] = json!(url);
    }
    Ok(external)
}

struct Azure {
    file: (String, String),
    client: String,
    tenant: String,
    authority: Option<String>,
}

fn azure_material(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<Azure, String> {
    let tenant = value_or_var(
        auth,
        "azure_tenant_id",
        "azure_tenant_id_env_var",
        credentials,
    )?;
    let client = value_or_var(auth, "client_id", "client_id_env_var", credentials)?;
    let file = subject_token_file(auth, credentials)?;
    if tenant.is_empty()
        || !tenant
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
    {
        return Err("the azure tenant id is not a tenant id (letters, digits, '-' and '.')".into());
    }
    let authority = match field(auth, "azure_federated_endpoint") {
        None => None,
        Some(url) => {
            google::secure_url(url).map_err(|cause| format!("azure_federated_endpoint {cause}"))?;
            let suffix = format!("/{tenant}/oauth2/v2.0/token");
            Some(
                url.trim_end_matches('/')
                    .strip_suffix(&suffix)
                    .ok_or_else(|| {
                        "azure_federated_endpoint is not <authority>/<azure_tenant_id>/oauth2/v2.0/token"
                            .to_owned()
                    })?
                    .to_owned(),
            )
        }
    };
    Ok(Azure {
        file,
        client,
        tenant,
        authority,
    })
}

/// Checks `kind`'s material without a network call (`Ok(true)`: present).
pub(super) fn check(
    kind: &str,
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<bool, String> {
    let with_kind = |cause: String| format!("{kind}: {cause}");
    match kind {
        "aws_web_identity" => aws_material(auth, credentials)
            .map(|_| ())
            .map_err(with_kind)?,
        "gcp_workload_identity" => google_material(auth, credentials)
            .map(|_| ())
            .map_err(with_kind)?,
        _ => azure_material(auth, credentials)
            .map(|_| ())
            .map_err(with_kind)?,
    };
    Ok(true)
}

/// `aws_web_identity`: the role's credentials for the tenant's subject token.
pub(super) async fn aws_credentials(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
) -> Result<aws::FederatedCredentials> {
    let found = aws_material(auth, credentials)
        .map_err(|c| credential_error(provider, &format!("aws_web_identity: {c}")))?;
    let (file, shown) = found.file;
    aws::web_identity_federated(
        upstream,
        provider,
        credentials,
        field(auth, "aws_sts_endpoint"),
        field(auth, "aws_sts_region"),
        &file,
        &shown,
        &found.role,
        field(auth, "aws_role_session_name").map(str::to_owned),
    )
    .await
    .map_err(|err| err.with_note("aws_web_identity"))
}

/// `gcp_workload_identity`: the `Authorization` value.
pub(super) async fn google_authorization(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
) -> Result<String> {
    let external = google_material(auth, credentials)
        .map_err(|c| credential_error(provider, &format!("gcp_workload_identity: {c}")))?;
    google::workload_identity(upstream, provider, auth, credentials, &external).await
}

/// `azure_federated`: the `Authorization` value.
pub(super) async fn azure_authorization(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
) -> Result<String> {
    let found = azure_material(auth, credentials)
        .map_err(|c| credential_error(provider, &format!("azure_federated: {c}")))?;
    azure::federated(
        upstream,
        provider,
        auth,
        credentials,
        (
            &found.file.0,
            &format!("the subject token file (named by {})", found.file.1),
        ),
        &found.client,
        &found.tenant,
        found.authority,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(pairs: &[(&str, &str)]) -> CredentialStore {
        CredentialStore::fixed(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
    }

    #[test]
    fn a_documents_token_file_serves_only_the_host_tenant() {
        let auth = json!({"type": "aws_web_identity", "aws_role_arn": "arn:aws:iam::1:role/r",
            "oidc_subject_token_file": "/var/run/secrets/token"});
        let err = check("aws_web_identity", &auth, &store(&[]))
            .err()
            .unwrap_or_default();
        assert!(
            err.contains("serves only the tenant that reads the process environment"),
            "{err}"
        );
        let host = store(&[]).with_host_identity(true);
        assert_eq!(check("aws_web_identity", &auth, &host), Ok(true));
        let inline = json!({"type": "azure_federated", "azure_tenant_id": "t", "client_id": "c",
            "oidc_subject_token": "eyJ"});
        let err = check("azure_federated", &inline, &host)
            .err()
            .unwrap_or_default();
        assert!(err.contains("oidc_subject_token (a token inline"), "{err}");
    }

    #[test]
    fn fields_come_inline_or_from_the_tenants_variables() {
        let auth = json!({"type": "azure_federated", "azure_tenant_id_env_var": "MY_TENANT",
            "client_id": "c", "oidc_subject_token_file_env_var": "MY_TOKEN_FILE",
            "azure_federated_endpoint": "http://127.0.0.1:1/t1/oauth2/v2.0/token"});
        let s = store(&[("MY_TENANT", "t1"), ("MY_TOKEN_FILE", "/tmp/t")]);
        let found = azure_material(&auth, &s).expect("material");
        assert_eq!(
            (found.tenant.as_str(), found.file.0.as_str()),
            ("t1", "/tmp/t")
        );
        assert_eq!(found.authority.as_deref(), Some("http://127.0.0.1:1"));
        let other = store(&[("MY_TENANT", "t2"), ("MY_TOKEN_FILE", "/tmp/t")]);
        let err = azure_material(&auth, &other).err().unwrap_or_default();
        assert!(err.contains("azure_federated_endpoint is not"), "{err}");
        let remote = json!({"type": "azure_federated", "azure_tenant_id": "t1", "client_id": "c",
            "oidc_subject_token_file_env_var": "MY_TOKEN_FILE",
            "azure_federated_endpoint": "http://login.example/t1/oauth2/v2.0/token"});
        let err = azure_material(&remote, &s).err().unwrap_or_default();
        assert!(
            err.contains("azure_federated_endpoint must be an https URL"),
            "{err}"
        );
        let err = check("azure_federated", &auth, &store(&[]))
            .err()
            .unwrap_or_default();
        assert!(
            err.contains("variable MY_TENANT (azure_tenant_id_env_var) is not set"),
            "{err}"
        );
        let google = json!({"type": "gcp_workload_identity",
            "gcp_workload_identity_audience": "//iam.googleapis.com/x",
            "oidc_subject_token_file_env_var": "MY_TOKEN_FILE"});
        let external = google_material(&google, &s).expect("google");
        assert_eq!(external["credential_source"]["file"], "/tmp/t");
        assert_eq!(external["subject_token_type"], JWT_TOKEN_TYPE);
        assert!(external.get("token_url").is_none());
    }
}
