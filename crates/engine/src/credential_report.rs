//! The credential report of `reload_credentials`: per installed provider, its auth type,
//! where its credentials come from (names and paths only), whether they resolve now, and
//! whether the resolved material changed across a reload (SHA-256 digests compared, never
//! shown).

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::credentials::{CredentialSource, CredentialStore};
use crate::identity::{
    aws_session_token_var, aws_source, azure_default_source, check_provider_material,
    exchange_source, federated_source, google_material, google_source, oci_source,
};

/// Whether a provider's credentials resolve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialStatus {
    /// Every secret the auth config names is present.
    Ok,
    /// A secret is missing or unusable; `detail` says which.
    Unresolved,
    /// The auth type needs no local secret (e.g. `null_auth`).
    NotChecked,
}

/// One provider's row of the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProviderCredentials {
    /// Provider SQL name.
    pub provider: String,
    /// The auth type in effect (configured override, else the document's).
    pub auth_type: String,
    /// Where the material comes from: `env:<VAR>` names, `file:<path>`, `inline` or `none`.
    pub sourced_from: String,
    /// Whether it resolves now.
    pub status: CredentialStatus,
    /// Why it does not resolve (empty when it does).
    pub detail: String,
    /// Whether the resolved material differs from before the reload.
    pub changed: bool,
    /// Which credential source resolves (see [`ProviderSource::resolved_source`]).
    pub resolved_source: String,
    /// When the cached token expires (RFC 3339); `None` when no token is cached (a reload
    /// drops them).
    pub token_expires_at: Option<String>,
}

/// Which credential source serves one provider for the calling tenant, and when its cached
/// token expires. Names only, never material.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProviderSource {
    /// Provider SQL name.
    pub provider: String,
    /// The auth type in effect.
    pub auth_type: String,
    /// The source that resolves: `env:<VAR>` names for static keys,
    /// `aws:<Source>[+AssumeRole:<role arn>]`, `azure_default:<Credential>`,
    /// `oauth2_client_credentials:env:<ID>,env:<SECRET>`, `service_account:<kind>:<where>` or
    /// `service_account:gce_metadata`, `token_exchange:<rfc8693|entra_obo>`, `inline`, or `none` (nothing needed, or nothing resolves).
    pub resolved_source: String,
    /// When the cached token expires (RFC 3339, UTC); `None` when no token is cached.
    pub token_expires_at: Option<String>,
}

/// The result of a reload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CredentialReport {
    /// The tenant's configured env file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_file: Option<String>,
    /// Whether the file was read on this call.
    pub env_file_sourced: bool,
    /// Names (never values) the file set, sorted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sourced_vars: Vec<String>,
    /// One row per installed provider (or the one asked for), sorted by name.
    pub providers: Vec<ProviderCredentials>,
}

/// Fields of an auth object that name a variable holding credential material.
const VARIABLE_FIELDS: &[&str] = &[
    "credentialsenvvar",
    "keyIDenvvar",
    "credentialsfilepathenvvar",
    "username_var",
    "password_var",
    "api_key_var",
    "api_secret_var",
    "client_id_env_var",
    "client_secret_env_var",
    "sessiontokenenvvar",
];

/// Fields holding credential material (or a path to it) inline in the document or config.
const INLINE_FIELDS: &[&str] = &[
    "username",
    "password",
    "api_key",
    "api_secret",
    "client_id",
    "client_secret",
    "keyID",
];

fn field<'a>(auth: &'a Value, key: &str) -> Option<&'a str> {
    auth.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The auth objects of a chain: the auth itself, then its successors.
fn chain(auth: &Value) -> impl Iterator<Item = &Value> {
    std::iter::successors(Some(auth).filter(|a| a.is_object()), |a| {
        a.get("successor").filter(|s| s.is_object())
    })
    .take(8)
}

/// The auth type string (`null_auth` when the provider declares none).
pub(crate) fn auth_type(auth: &Value) -> String {
    field(auth, "type").unwrap_or("null_auth").to_owned()
}

/// `sourced_from` as StackQL computes it (inventory §8.4), for the primary auth.
pub(crate) fn sourced_from(auth: &Value) -> String {
    if let Some(var) = field(auth, "credentialsenvvar") {
        return format!("env:{var}");
    }
    if let Some(var) = field(auth, "credentialsfilepathenvvar") {
        return format!("env:{var}");
    }
    if let Some(path) = field(auth, "credentialsfilepath") {
        return format!("file:{path}");
    }
    for (a, b) in [
        ("username_var", "password_var"),
        ("api_key_var", "api_secret_var"),
        ("client_id_env_var", "client_secret_env_var"),
    ] {
        if let (Some(a), Some(b)) = (field(auth, a), field(auth, b)) {
            return format!("env:{a},env:{b}");
        }
    }
    if field(auth, "username").is_some()
        || field(auth, "api_key").is_some()
        || field(auth, "client_id").is_some()
    {
        return "inline".to_owned();
    }
    "none".to_owned()
}

/// A digest of every piece of credential material the chain resolves to now: variable
/// values, the contents of named key files, inline values. Missing pieces count too.
pub(crate) fn fingerprint(auth: &Value, credentials: &dyn CredentialSource) -> [u8; 32] {
    let mut hasher = Sha256::new();
    let mut piece = |label: &str, value: Option<&[u8]>| {
        hasher.update(label.as_bytes());
        hasher.update([0]);
        match value {
            Some(bytes) => {
                hasher.update([1]);
                hasher.update((bytes.len() as u64).to_le_bytes());
                hasher.update(bytes);
            }
            None => hasher.update([0]),
        }
    };
    for (depth, auth) in chain(auth).enumerate() {
        piece(&format!("#{depth}"), None);
        for key in VARIABLE_FIELDS {
            if let Some(var) = field(auth, key) {
                let value = credentials.get(var);
                piece(&format!("{key}={var}"), value.as_deref().map(str::as_bytes));
                if *key == "credentialsfilepathenvvar" {
                    let contents = value.and_then(|path| std::fs::read(path).ok());
                    piece("file-from-env", contents.as_deref());
                }
            }
        }
        // aws_signing_v4 reads AWS_SESSION_TOKEN when no variable is named.
        if field(auth, "type") == Some("aws_signing_v4")
            && field(auth, "sessiontokenenvvar").is_none()
        {
            let var = aws_session_token_var(auth);
            piece(
                &format!("session={var}"),
                credentials.get(var).as_deref().map(str::as_bytes),
            );
        }
        for key in INLINE_FIELDS {
            if let Some(value) = field(auth, key) {
                piece(key, Some(value.as_bytes()));
            }
        }
        if let Some(path) = field(auth, "credentialsfilepath") {
            let contents = std::fs::read(path).ok();
            piece(&format!("file={path}"), contents.as_deref());
        }
        // service_account falls back to GOOGLE_APPLICATION_CREDENTIALS and its file.
        if field(auth, "type") == Some("service_account") {
            for (label, value) in google_material(credentials) {
                piece(&label, value.as_deref());
            }
        }
    }
    hasher.finalize().into()
}

/// Status and detail of a provider's credentials now.
pub(crate) fn status(
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
) -> (CredentialStatus, String) {
    match check_provider_material(provider, auth, credentials) {
        Ok(true) => (CredentialStatus::Ok, String::new()),
        Ok(false) => (CredentialStatus::NotChecked, String::new()),
        Err(cause) => (CredentialStatus::Unresolved, cause),
    }
}

/// The source that resolves `provider`'s `auth` from `store` now: the source that issued
/// a still-cached token when one did, else the one the variables select; `none` when the
/// auth needs nothing or its material does not resolve.
pub(crate) fn resolved_source(provider: &str, auth: &Value, store: &CredentialStore) -> String {
    source_summary(provider, auth, store).resolve(provider, store)
}

/// The part of [`resolved_source`] that follows from the auth and the store's values (what
/// only a reload of the credentials or of the documents changes); the rest, the source of a
/// cached token, is looked up when the summary is [resolved](SourceSummary::resolve).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SourceSummary {
    /// The source whatever is cached.
    Fixed(String),
    /// `azure_default`, `aws_signing_v4`, `service_account`: the source of a cached token,
    /// else this one (from the variables and files).
    Token(String),
}

impl SourceSummary {
    /// The source in force now.
    pub(crate) fn resolve(&self, provider: &str, store: &CredentialStore) -> String {
        match self {
            SourceSummary::Fixed(source) => source.clone(),
            SourceSummary::Token(configured) => store
                .tokens()
                .source(provider, std::time::Instant::now())
                .unwrap_or_else(|| configured.clone()),
        }
    }
}

/// [`SourceSummary`] of `auth` with the values of `store`.
pub(crate) fn source_summary(
    provider: &str,
    auth: &Value,
    store: &CredentialStore,
) -> SourceSummary {
    let none = || SourceSummary::Fixed("none".to_owned());
    if check_provider_material(provider, auth, store).is_err() {
        return none();
    }
    if let Some(exchange) = store.token_exchange(provider) {
        return SourceSummary::Fixed(exchange_source(exchange));
    }
    let from = sourced_from(auth);
    match field(auth, "type").unwrap_or("null_auth") {
        "null_auth" | "none" | "null" => none(),
        "azure_default" => SourceSummary::Token(
            azure_default_source(store)
                .map(|s| format!("azure_default:{s}"))
                .unwrap_or_else(|| "none".to_owned()),
        ),
        "aws_signing_v4" => {
            let base = aws_source(auth, store).map(|s| format!("aws:{s}"));
            SourceSummary::Token(match store.aws_role(provider) {
                Some(role) => format!(
                    "{}+AssumeRole:{}",
                    base.unwrap_or_else(|| "aws:host".to_owned()),
                    role.role_arn
                ),
                None => base.unwrap_or_else(|| "none".to_owned()),
            })
        }
        "oci_signing_v1" => SourceSummary::Fixed(
            oci_source(auth, store)
                .map(|s| format!("oci_signing_v1:{s}"))
                .unwrap_or_else(|| "none".to_owned()),
        ),
        kind @ ("aws_web_identity" | "gcp_workload_identity" | "azure_federated") => {
            SourceSummary::Fixed(
                federated_source(auth, store)
                    .map(|s| format!("{kind}:{s}"))
                    .unwrap_or_else(|| "none".to_owned()),
            )
        }
        "oauth2" => SourceSummary::Fixed(format!("oauth2_client_credentials:{from}")),
        "service_account" => SourceSummary::Token(
            google_source(auth, store)
                .map(|s| format!("service_account:{s}"))
                .unwrap_or_else(|| "none".to_owned()),
        ),
        _ => SourceSummary::Fixed(from),
    }
}

/// When `provider`'s latest cached token expires, RFC 3339 (UTC, seconds).
pub(crate) fn token_expires_at(provider: &str, store: &CredentialStore) -> Option<String> {
    store
        .tokens()
        .expiry(provider, std::time::Instant::now())
        .map(|at| humantime::format_rfc3339_seconds(at).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::CredentialStore;
    use serde_json::json;

    #[test]
    fn sourced_from_follows_stackql_precedence() {
        assert_eq!(
            sourced_from(&json!({"type": "custom", "credentialsenvvar": "DD_API_KEY"})),
            "env:DD_API_KEY"
        );
        assert_eq!(
            sourced_from(&json!({"type": "basic", "username_var": "U", "password_var": "P"})),
            "env:U,env:P"
        );
        assert_eq!(
            sourced_from(&json!({"type": "service_account", "credentialsfilepath": "/k.json"})),
            "file:/k.json"
        );
        assert_eq!(
            sourced_from(
                &json!({"type": "aws_signing_v4", "credentialsenvvar": "AWS_SECRET_ACCESS_KEY",
                                 "keyIDenvvar": "AWS_ACCESS_KEY_ID"})
            ),
            "env:AWS_SECRET_ACCESS_KEY"
        );
        assert_eq!(
            sourced_from(&json!({"type": "oauth2", "client_id_env_var": "I",
                                 "client_secret_env_var": "S"})),
            "env:I,env:S"
        );
        assert_eq!(
            sourced_from(&json!({"type": "oauth2", "client_id": "i", "client_secret": "s"})),
            "inline"
        );
        assert_eq!(sourced_from(&json!({"type": "null_auth"})), "none");
        assert_eq!(auth_type(&Value::Null), "null_auth");
    }

    #[test]
    fn resolved_source_names_the_source_or_none() {
        let store = CredentialStore::fixed([
            ("I".to_owned(), "id".to_owned()),
            ("S".to_owned(), "s3cr3t".to_owned()),
        ]);
        let oauth = json!({"type": "oauth2", "token_url": "https://t",
                           "client_id_env_var": "I", "client_secret_env_var": "S"});
        assert_eq!(
            resolved_source("p", &oauth, &store),
            "oauth2_client_credentials:env:I,env:S"
        );
        let missing = json!({"type": "bearer", "credentialsenvvar": "NOPE"});
        assert_eq!(resolved_source("p", &missing, &store), "none");
        let bearer = json!({"type": "bearer", "credentialsenvvar": "S"});
        assert_eq!(resolved_source("p", &bearer, &store), "env:S");
        assert_eq!(
            resolved_source("p", &json!({"type": "null_auth"}), &store),
            "none"
        );
        assert_eq!(token_expires_at("p", &store), None);
    }

    #[test]
    fn fingerprint_follows_values_of_the_whole_chain() {
        let auth = json!({"type": "custom", "credentialsenvvar": "A",
                          "successor": {"type": "custom", "credentialsenvvar": "B"}});
        let one = CredentialStore::fixed([("A".into(), "1".into()), ("B".into(), "2".into())]);
        let same = CredentialStore::fixed([("A".into(), "1".into()), ("B".into(), "2".into())]);
        let other = CredentialStore::fixed([("A".into(), "1".into()), ("B".into(), "3".into())]);
        let missing = CredentialStore::fixed([("A".into(), "1".into())]);
        assert_eq!(fingerprint(&auth, &one), fingerprint(&auth, &same));
        assert_ne!(fingerprint(&auth, &one), fingerprint(&auth, &other));
        assert_ne!(fingerprint(&auth, &one), fingerprint(&auth, &missing));
    }

    #[test]
    fn aws_fingerprint_follows_the_session_token_and_key_id() {
        let auth = json!({"type": "aws_signing_v4", "credentialsenvvar": "S", "keyIDenvvar": "K"});
        let base = [
            ("S".to_owned(), "s".to_owned()),
            ("K".to_owned(), "k".to_owned()),
        ];
        let plain = CredentialStore::fixed(base.clone());
        let mut with_token = base.to_vec();
        with_token.push(("AWS_SESSION_TOKEN".to_owned(), "t".to_owned()));
        let with_token = CredentialStore::fixed(with_token);
        let other_key = CredentialStore::fixed([
            ("S".to_owned(), "s".to_owned()),
            ("K".to_owned(), "k2".to_owned()),
        ]);
        assert_ne!(fingerprint(&auth, &plain), fingerprint(&auth, &with_token));
        assert_ne!(fingerprint(&auth, &plain), fingerprint(&auth, &other_key));
    }
}
