//! `service_account` (the auth type of Google's provider documents): Google's Application
//! Default Credentials, in google-auth's order, each read from the statement's tenant's
//! credentials:
//!
//! 1. the credentials JSON the auth config names: `credentialsenvvar` (the JSON itself, e.g.
//!    the current registry's `GOOGLE_CREDENTIALS`), else the file named by the variable
//!    `credentialsfilepathenvvar`, else the file `credentialsfilepath`;
//! 2. the file named by `GOOGLE_APPLICATION_CREDENTIALS`;
//! 3. gcloud's `application_default_credentials.json` (`$CLOUDSDK_CONFIG`, else
//!    `$HOME/.config/gcloud`), for desktops;
//! 4. the GCE metadata server (`GCE_METADATA_HOST`, else `169.254.169.254`; every request
//!    carries `Metadata-Flavor: Google`, and so must the answer).
//!
//! The JSON of 1–3 is one of google-auth's file kinds, by its `type`: `service_account` (a
//! key: an RS256 assertion, see [`service_account`]; a JSON without `type` counts as
//! one), `external_account` (workload identity federation, see [`external`]) or
//! `authorized_user` (gcloud's login: its refresh token at the token endpoint).
//!
//! A source whose variable is not set is skipped; one that is set but fails (a file that
//! cannot be read, a token endpoint that refuses) stops the chain with an error naming it.
//! Sources 3 and 4 are the host's identity: like Azure's managed identity they serve only a
//! tenant whose store reads the process environment. Tokens are cached per tenant, provider
//! and material until shortly before they expire, fetched once for concurrent callers.
//!
//! Why not the `google-cloud-auth` crate (1.19.0, checked with `cargo tree` in a scratch
//! project): its default features bring aws-lc-rs (a second crypto provider); without them it
//! still adds 16 crates (google-cloud-gax, -rpc, -wkt, serde_with and darling's proc macros,
//! jiff); it sends with its own reqwest clients (none of our timeouts, size limit,
//! `User-Agent`, request-id audit or metrics); its ADC lookup and the AWS subject-token
//! source read the process environment, not a tenant's variables. The requests are a few
//! form posts and GETs, written here over our own client.

mod external;
mod metadata;
mod service_account;

use serde_json::Value;

use self::service_account::GOOGLE_TOKEN_URI;
use super::credential_error;
use super::field;
use super::oauth2::scopes;
use super::token::{self, TokenRequest};
use crate::credentials::{CredentialSource, CredentialStore, read_credential_file};
use crate::error::Result;
use crate::upstream::Upstream;

/// The scope asked for when the auth config names none.
const DEFAULT_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The variable naming an ADC file.
const ADC_VAR: &str = "GOOGLE_APPLICATION_CREDENTIALS";

/// Why the host's sources are skipped for a tenant that may not use the host's identity.
const NOT_FOR_TENANT: &str = "gcloud's application default credentials and the GCE metadata server: not configured (the host's identity serves only the tenant that reads the process environment, credentials.process_env)";

/// A credentials JSON and where it came from (names and paths only).
struct Located {
    raw: Vec<u8>,
    /// For the resolved source: `env:<VAR>` or `file:<path>`.
    origin: String,
    /// For errors: `variable GOOGLE_CREDENTIALS`, `file '/k.json' (from variable X)`, ….
    shown: String,
}

/// What the chain found.
enum Found {
    File(Located),
    Metadata,
}

/// The kinds of credentials file read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Key,
    External,
    AuthorizedUser,
}

impl Kind {
    /// The name in resolved sources and errors.
    fn name(self) -> &'static str {
        match self {
            Kind::Key => "service_account_key",
            Kind::External => "external_account",
            Kind::AuthorizedUser => "authorized_user",
        }
    }
}

/// The scope of the token: the auth's `scopes` (space-joined), else cloud-platform.
fn scope(auth: &Value) -> String {
    let scope = scopes(auth).join(" ");
    if scope.is_empty() {
        DEFAULT_SCOPE.to_owned()
    } else {
        scope
    }
}

fn read(path: &str, shown: &str) -> std::result::Result<Vec<u8>, String> {
    read_credential_file(std::path::Path::new(path))
        .map(String::into_bytes)
        .map_err(|err| format!("{shown} cannot be read: {err}"))
}

/// The first source of the chain that is configured; `Err` when one is configured but
/// unusable, or when none is (naming each source and why).
fn locate(auth: &Value, credentials: &dyn CredentialSource) -> std::result::Result<Found, String> {
    let mut skipped = Vec::new();
    if let Some(var) = field(auth, "credentialsenvvar") {
        match credentials.get(var) {
            Some(json) => {
                return Ok(Found::File(Located {
                    raw: json.into_bytes(),
                    origin: format!("env:{var}"),
                    shown: format!("variable {var}"),
                }));
            }
            None => skipped.push(format!("variable {var} is not set")),
        }
    }
    if let Some(var) = field(auth, "credentialsfilepathenvvar") {
        match credentials.get(var) {
            Some(path) => {
                let shown = format!("file '{path}' (from variable {var})");
                return Ok(Found::File(Located {
                    raw: read(&path, &shown)?,
                    origin: format!("env:{var}"),
                    shown,
                }));
            }
            None => skipped.push(format!("variable {var} is not set")),
        }
    }
    if let Some(path) = field(auth, "credentialsfilepath") {
        let shown = format!("file '{path}'");
        return Ok(Found::File(Located {
            raw: read(path, &shown)?,
            origin: format!("file:{path}"),
            shown,
        }));
    }
    match credentials.get(ADC_VAR) {
        Some(path) => {
            let shown = format!("file '{path}' (from variable {ADC_VAR})");
            return Ok(Found::File(Located {
                raw: read(&path, &shown)?,
                origin: format!("env:{ADC_VAR}"),
                shown,
            }));
        }
        None => skipped.push(format!("variable {ADC_VAR} is not set")),
    }
    if !credentials.allows_host_identity() {
        skipped.push(NOT_FOR_TENANT.to_owned());
        return Err(format!(
            "service_account found no credential: {}",
            skipped.join("; ")
        ));
    }
    if let Some(path) = gcloud_file(credentials)
        && std::fs::metadata(&path).is_ok()
    {
        let shown = format!("gcloud's application default credentials '{path}'");
        return Ok(Found::File(Located {
            raw: read(&path, &shown)?,
            origin: format!("file:{path}"),
            shown,
        }));
    }
    Ok(Found::Metadata)
}

/// Where gcloud keeps its application default credentials.
fn gcloud_file(credentials: &dyn CredentialSource) -> Option<String> {
    let folder = match credentials.get("CLOUDSDK_CONFIG") {
        Some(folder) => folder,
        None => format!("{}/.config/gcloud", credentials.get("HOME")?),
    };
    Some(format!(
        "{}/application_default_credentials.json",
        folder.trim_end_matches('/')
    ))
}

/// The file's kind, from its `type`.
fn kind(file: &Located) -> std::result::Result<(Kind, Value), String> {
    let json: Value = serde_json::from_slice(&file.raw).map_err(|err| {
        format!(
            "{} is not a JSON credentials file (line {}, column {})",
            file.shown,
            err.line(),
            err.column()
        )
    })?;
    let kind = match json.get("type").and_then(Value::as_str) {
        None | Some("service_account") => Kind::Key,
        Some("external_account") => Kind::External,
        Some("authorized_user") => Kind::AuthorizedUser,
        Some(other) => {
            let other: String = other.chars().take(64).collect();
            return Err(format!(
                "{} is of type '{other}', which is not read (service_account, external_account, authorized_user)",
                file.shown
            ));
        }
    };
    Ok((kind, json))
}

/// The `Authorization` value for a `service_account` auth object: cached, or obtained from
/// the first source of the chain that applies.
pub(super) async fn authorization(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
) -> Result<String> {
    let scope = scope(auth);
    let found = locate(auth, credentials).map_err(|cause| credential_error(provider, &cause))?;
    let (value, source) = match found {
        Found::File(file) => {
            let (kind, json) = kind(&file).map_err(|cause| credential_error(provider, &cause))?;
            let value = match kind {
                Kind::Key => {
                    service_account::key_token(
                        upstream,
                        provider,
                        auth,
                        credentials,
                        &file.raw,
                        &file.shown,
                        &scope,
                    )
                    .await
                }
                Kind::External => {
                    external::token(upstream, provider, credentials, &file.raw, &json, &scope).await
                }
                Kind::AuthorizedUser => {
                    authorized_user(upstream, provider, auth, credentials, &file.raw, &json).await
                }
            }
            .map_err(|err| {
                err.with_note(&format!(
                    "service_account source {} from {}",
                    kind.name(),
                    file.shown
                ))
            })?;
            (value, format!("{}:{}", kind.name(), file.origin))
        }
        Found::Metadata => {
            let value = metadata::token(upstream, provider, credentials, &scope)
                .await
                .map_err(|err| {
                    err.with_note(&format!(
                        "service_account source gce_metadata, variable {}",
                        metadata::HOST_VAR
                    ))
                })?;
            (value, "gce_metadata".to_owned())
        }
    };
    tracing::debug!(%provider, %source, "service_account resolved");
    credentials
        .tokens()
        .note_source(provider, &format!("service_account:{source}"));
    Ok(value)
}

/// The document-level `gcp_workload_identity` type: `external` is an `external_account`
/// configuration built from the auth object; its token is obtained as a file's would be.
pub(super) async fn workload_identity(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
    external: &Value,
) -> Result<String> {
    let raw = external.to_string().into_bytes();
    let value = external::token(
        upstream,
        provider,
        credentials,
        &raw,
        external,
        &scope(auth),
    )
    .await
    .map_err(|err| err.with_note("gcp_workload_identity"))?;
    credentials
        .tokens()
        .note_source(provider, "gcp_workload_identity:external_account");
    Ok(value)
}

/// `authorized_user`: gcloud's login, its refresh token exchanged at the token endpoint
/// (the auth's `token_url`, else the file's `token_uri`, else Google's).
async fn authorized_user(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
    raw: &[u8],
    json: &Value,
) -> Result<String> {
    let user = user_fields(json).map_err(|cause| credential_error(provider, &cause))?;
    let token_url = field(auth, "token_url")
        .or(json.get("token_uri").and_then(Value::as_str))
        .filter(|u| !u.is_empty())
        .unwrap_or(GOOGLE_TOKEN_URI)
        .to_owned();
    secure_url(&token_url)
        .map_err(|cause| credential_error(provider, &format!("the file's token_uri {cause}")))?;
    let key = token::cache_key(
        provider,
        &[
            b"service_account",
            b"authorized_user",
            raw,
            token_url.as_bytes(),
        ],
    );
    let [client_id, client_secret, refresh_token] = user;
    token::exchange(
        upstream,
        credentials,
        key,
        TokenRequest {
            provider,
            token_url: &token_url,
            shown_url: None,
            form: vec![
                ("grant_type", "refresh_token".to_owned()),
                ("client_id", client_id),
                ("client_secret", client_secret),
                ("refresh_token", refresh_token),
            ],
            basic: None,
        },
    )
    .await
}

/// `client_id`, `client_secret` and `refresh_token` of an `authorized_user` file.
fn user_fields(json: &Value) -> std::result::Result<[String; 3], String> {
    let get = |name: &str| {
        json.get(name)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("the authorized_user file has no {name}"))
    };
    Ok([
        get("client_id")?,
        get("client_secret")?,
        get("refresh_token")?,
    ])
}

/// Checks without any network call: `Ok(true)` when a file source is configured and its
/// material is usable; `Ok(false)` when only the metadata server could serve (it can only
/// be checked by asking it); an error naming the source and what is wrong otherwise.
pub(super) fn check(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<bool, String> {
    match locate(auth, credentials)? {
        Found::Metadata => {
            metadata::endpoint(credentials)?;
            Ok(false)
        }
        Found::File(file) => {
            let (kind, json) = kind(&file)?;
            let named = |cause: String| {
                format!(
                    "service_account source {} from {}: {cause}",
                    kind.name(),
                    file.shown
                )
            };
            match kind {
                Kind::Key => service_account::check_key(&file.raw, &file.shown)?,
                Kind::External => external::check(&json).map_err(named)?,
                Kind::AuthorizedUser => user_fields(&json).map(|_| ()).map_err(named)?,
            }
            Ok(true)
        }
    }
}

/// Which source would serve, judged without a network call:
/// `<kind>:env:<VAR>` / `<kind>:file:<path>` or `gce_metadata`; `None` when none applies.
pub(crate) fn configured_source(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> Option<String> {
    match locate(auth, credentials).ok()? {
        Found::Metadata => Some("gce_metadata".to_owned()),
        Found::File(file) => {
            let (kind, _) = kind(&file).ok()?;
            Some(format!("{}:{}", kind.name(), file.origin))
        }
    }
}

/// The names of the variables the chain reads and the contents of the files it names
/// (for the report's `changed`): `(label, value)` pairs.
pub(crate) fn material_pieces(
    credentials: &dyn CredentialSource,
) -> Vec<(String, Option<Vec<u8>>)> {
    let path = credentials.get(ADC_VAR);
    let contents = path.as_deref().and_then(|p| std::fs::read(p).ok());
    vec![
        (format!("{ADC_VAR}="), path.map(String::into_bytes)),
        ("adc-file".to_owned(), contents),
    ]
}

/// `Err` unless `url` is https, or http to a loopback host (mock servers, local proxies).
pub(super) fn secure_url(url: &str) -> std::result::Result<url::Url, String> {
    let parsed = url::Url::parse(url).map_err(|_| "is not a URL".to_owned())?;
    let loopback = matches!(parsed.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
    match parsed.scheme() {
        "https" => Ok(parsed),
        "http" if loopback => Ok(parsed),
        _ => Err("must be an https URL (http only to a loopback host)".to_owned()),
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
    fn the_chain_names_every_source_it_skipped() {
        let auth = json!({"type": "service_account", "credentialsenvvar": "GOOGLE_CREDENTIALS"});
        let err = check(&auth, &store(&[])).unwrap_err();
        assert!(
            err.starts_with("service_account found no credential: variable GOOGLE_CREDENTIALS is not set; variable GOOGLE_APPLICATION_CREDENTIALS is not set; gcloud's"),
            "{err}"
        );
        assert_eq!(configured_source(&auth, &store(&[])), None);
        // The host's identity: the metadata server (no gcloud file under this HOME).
        let host = store(&[("HOME", "/nonexistent-home")]).with_host_identity(true);
        assert_eq!(check(&auth, &host), Ok(false));
        assert_eq!(
            configured_source(&auth, &host).as_deref(),
            Some("gce_metadata")
        );
        // A named file that is missing is an error, not a fall-through.
        let missing = store(&[(ADC_VAR, "/nonexistent/adc.json")]);
        let err = check(&auth, &missing).unwrap_err();
        assert!(
            err.starts_with("file '/nonexistent/adc.json' (from variable GOOGLE_APPLICATION_CREDENTIALS) cannot be read"),
            "{err}"
        );
    }

    #[test]
    fn file_kinds_are_told_by_type() {
        let auth = json!({"credentialsenvvar": "G"});
        let user = json!({"type": "authorized_user", "client_id": "c", "client_secret": "s3cr3t",
                          "refresh_token": "r"});
        let creds = store(&[("G", &user.to_string())]);
        assert_eq!(check(&auth, &creds), Ok(true));
        assert_eq!(
            configured_source(&auth, &creds).as_deref(),
            Some("authorized_user:env:G")
        );
        let partial = json!({"type": "authorized_user", "client_id": "c"});
        let err = check(&auth, &store(&[("G", &partial.to_string())])).unwrap_err();
        assert_eq!(
            err,
            "service_account source authorized_user from variable G: the authorized_user file has no client_secret"
        );
        let other = json!({"type": "impersonated_service_account"});
        let err = check(&auth, &store(&[("G", &other.to_string())])).unwrap_err();
        assert!(
            err.contains("of type 'impersonated_service_account'"),
            "{err}"
        );
        assert!(!err.contains("s3cr3t"));
    }

    #[test]
    fn urls_must_be_https_or_loopback() {
        assert!(secure_url("https://sts.googleapis.com/v1/token").is_ok());
        assert!(secure_url("http://127.0.0.1:8080/token").is_ok());
        assert!(secure_url("http://sts.example.com/token").is_err());
        assert!(secure_url("file:///etc/passwd").is_err());
    }
}
