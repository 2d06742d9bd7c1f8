//! The credentials `aws_signing_v4` signs with: the AWS SDKs' default chain, tried in its
//! order, each source read from the statement's tenant's credential variables, then, when
//! the tenant's configuration names a role for the provider, that role assumed from them.
//!
//! 1. **Environment**: the auth's `keyIDenvvar` / `credentialsenvvar` (the registry's `aws`
//!    and `awscc` documents name `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`) and the
//!    session token variable (`AWS_SESSION_TOKEN`).
//! 2. **Profile**: the shared credentials and config files (`AWS_SHARED_CREDENTIALS_FILE`,
//!    `AWS_CONFIG_FILE`, else `~/.aws/credentials` and `~/.aws/config` under `HOME`),
//!    profile `AWS_PROFILE` (else `default`): static keys, or `role_arn` with
//!    `source_profile` (assumed with STS `AssumeRole`) or `web_identity_token_file`.
//! 3. **WebIdentity**: `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`
//!    [+ `AWS_ROLE_SESSION_NAME`]: STS `AssumeRoleWithWebIdentity` (EKS IRSA). The file is
//!    read at each refresh: Kubernetes rotates the projected token in place.
//! 4. **ContainerCredentials**: `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` (ECS) or
//!    `_FULL_URI` (EKS Pod Identity) with `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` (re-read
//!    at each refresh) or `AWS_CONTAINER_AUTHORIZATION_TOKEN`.
//! 5. **InstanceMetadata**: IMDSv2 (`AWS_EC2_METADATA_SERVICE_ENDPOINT`, else
//!    `http://169.254.169.254`; `AWS_EC2_METADATA_DISABLED=true` skips it).
//!
//! A source whose variables are not set is skipped; a source that is set but fails stops
//! the chain with an error naming it and its variables (never their values).
//!
//! **Tenants.** Sources 1–3 come from the tenant's own variables. Sources 4 and 5 are the
//! host's identity: they serve a tenant whose store allows it (the one reading the process
//! environment). A tenant whose configuration names a role for the provider
//! (`tenants[].providers.<name>.role_arn`) runs the chain over its own variables first and,
//! when none resolves, over the process environment's (the pod's identity): those base
//! credentials are then used only to call `AssumeRole` for the role the operator
//! configured, never to sign the provider's requests.
//!
//! **Role sessions** name who asked: `RoleSessionName` is `<tenant>.<principal>`,
//! `SourceIdentity` the principal and the session tags `querygate-tenant` /
//! `querygate-principal`, each cut to what STS accepts (characters it refuses become `_`).
//! The principal is `ExecContext::principal`, the tenant layer's display name of the
//! authenticated caller (`sub`, with the issuer in parentheses for a JWT; the mTLS
//! identity; `local`; `anonymous`). Each principal has its own cached session.
//!
//! Credentials with an expiry are cached in the tenant's token cache until 60 s before it,
//! fetched once for concurrent callers.
//!
//! Why not the `aws-config` crate (1.13, resolved with `cargo tree` in a scratch project):
//! with its `rustls` feature it brings `aws-lc-rs`/`aws-lc-sys` (a second crypto provider
//! and a C build), hyper-rustls, the generated `aws-sdk-sts`, `aws-sdk-sso` and
//! `aws-sdk-ssooidc` clients and a second `aws-sigv4`/`aws-smithy-*` set (27 crates new to
//! the tree); without it, it has no HTTP client and one would have to be written against
//! smithy's client traits; and its providers read the process environment, where each
//! tenant here has its own variables. The requests are a few form posts and GETs over our
//! own client (ring, timeouts, size limit), written here.

mod credentials;
mod files;
mod metadata;
pub(super) mod sigv4;
mod sts;

use std::time::Duration;

use serde_json::Value;

use self::credentials::AwsCredentials;
use super::credential_error;
use super::token;
use crate::credentials::{CredentialSource, CredentialStore};
use crate::error::{Error, Result};
use crate::upstream::Upstream;

/// What [`web_identity_federated`] resolves, for the SigV4 signer.
pub(super) type FederatedCredentials = AwsCredentials;

/// The document-level `aws_web_identity` type: `AssumeRoleWithWebIdentity` for `role_arn`
/// with the token of `file` (read at each refresh), at the STS `endpoint` (else the regional
/// one of `region`), cached like the chain's web identity source.
#[allow(clippy::too_many_arguments)]
pub(super) async fn web_identity_federated(
    upstream: &Upstream,
    provider: &str,
    store: &CredentialStore,
    endpoint: Option<&str>,
    region: Option<&str>,
    file: &str,
    file_shown: &str,
    role_arn: &str,
    session_name: Option<String>,
) -> Result<AwsCredentials> {
    let endpoint =
        sts::Endpoint::explicit(endpoint, region).map_err(|c| credential_error(provider, &c))?;
    sts::web_identity(
        upstream,
        provider,
        store,
        &endpoint,
        file,
        file_shown,
        role_arn,
        session_name,
    )
    .await
}

/// One source of the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Environment,
    Profile,
    WebIdentity,
    Container,
    InstanceMetadata,
}

impl Source {
    const ALL: [Source; 5] = [
        Source::Environment,
        Source::Profile,
        Source::WebIdentity,
        Source::Container,
        Source::InstanceMetadata,
    ];

    /// The name reports and errors give it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::Environment => "Environment",
            Source::Profile => "Profile",
            Source::WebIdentity => "WebIdentity",
            Source::Container => "ContainerCredentials",
            Source::InstanceMetadata => "InstanceMetadata",
        }
    }

    /// The variables it reads, named in its errors (the environment's come from the auth).
    fn variables(self, auth: &Value) -> String {
        match self {
            Source::Environment => {
                let (id, secret) = env_vars(auth);
                format!("{id}, {secret}, {}", sigv4::session_token_var(auth))
            }
            Source::Profile => {
                "AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE, HOME".to_owned()
            }
            Source::WebIdentity => {
                "AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN, AWS_ROLE_SESSION_NAME, AWS_ENDPOINT_URL_STS"
                    .to_owned()
            }
            Source::Container => "AWS_CONTAINER_CREDENTIALS_FULL_URI or AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or AWS_CONTAINER_AUTHORIZATION_TOKEN".to_owned(),
            Source::InstanceMetadata => {
                "AWS_EC2_METADATA_SERVICE_ENDPOINT, AWS_EC2_METADATA_DISABLED".to_owned()
            }
        }
    }

    fn is_host(self) -> bool {
        matches!(self, Source::Container | Source::InstanceMetadata)
    }
}

/// How a source's "not configured" reason starts.
pub(super) const UNSET: &str = "not configured";

/// Why a host source is skipped for a tenant that may not use the host's identity.
const NOT_FOR_TENANT: &str = "not configured (the host's identity serves only the tenant that reads the process environment, credentials.process_env, or a tenant with a configured role_arn)";

/// What trying one source gave.
pub(super) enum Attempt {
    /// Credentials, and whether they came from the cache or a fetch (with an expiry).
    Found(AwsCredentials),
    Unavailable(String),
}

/// Who a role session is for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caller<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) principal: &'a str,
    /// The caller's bearer token, for token exchange.
    pub(crate) subject_token: Option<&'a crate::credentials::SubjectToken>,
}

/// The variables of the environment source: the auth's, else the SDKs' names.
fn env_vars(auth: &Value) -> (&str, &str) {
    (
        super::field(auth, "keyIDenvvar").unwrap_or("AWS_ACCESS_KEY_ID"),
        super::field(auth, "credentialsenvvar").unwrap_or("AWS_SECRET_ACCESS_KEY"),
    )
}

/// The environment source without any network call.
fn environment(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<Option<AwsCredentials>, String> {
    let (id_var, secret_var) = env_vars(auth);
    let key_id = match (
        super::field(auth, "keyIDenvvar"),
        super::field(auth, "keyID"),
    ) {
        (None, Some(inline)) => Some(inline.to_owned()),
        _ => credentials.get(id_var),
    };
    let secret = credentials.get(secret_var);
    match (key_id, secret) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(format!("variable {secret_var} is not set")),
        (None, Some(_)) => Err(format!("variable {id_var} is not set")),
        (Some(key_id), Some(secret)) => Ok(Some(AwsCredentials {
            key_id,
            secret,
            session_token: credentials.get(sigv4::session_token_var(auth)),
        })),
    }
}

/// The shared store of the host's identity (the process environment), used as the base of
/// a configured role when the tenant's own variables resolve no source.
fn host_store() -> &'static CredentialStore {
    static HOST: std::sync::OnceLock<CredentialStore> = std::sync::OnceLock::new();
    HOST.get_or_init(CredentialStore::process_env)
}

/// The credentials for `provider`'s `auth`, for `caller`'s tenant (`credentials`).
pub(crate) async fn credentials(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
    caller: Caller<'_>,
) -> Result<AwsCredentials> {
    let Some(role) = credentials.aws_role(provider).cloned() else {
        let (found, source) = chain(upstream, provider, auth, credentials, false).await?;
        credentials
            .tokens()
            .note_source(provider, &format!("aws:{}", source.name()));
        return Ok(found);
    };
    let (base, source, from) = match chain(upstream, provider, auth, credentials, true).await {
        Ok((base, source)) => (base, source, credentials),
        Err(own) if own.message().contains("aws found no credential") => {
            let host = host_store();
            match chain(upstream, provider, auth, host, false).await {
                Ok((base, source)) => (base, source, host),
                Err(_) => return Err(own),
            }
        }
        Err(err) => return Err(err),
    };
    let session = sts::RoleSession::for_caller(&role, caller);
    let key = token::cache_key(
        provider,
        &[
            b"aws",
            b"assume_role",
            role.role_arn.as_bytes(),
            role.external_id.as_deref().unwrap_or_default().as_bytes(),
            &role.duration.as_secs().to_le_bytes(),
            caller.tenant.as_bytes(),
            caller.principal.as_bytes(),
            base.key_id.as_bytes(),
            base.secret.as_bytes(),
        ],
    );
    let endpoint = sts::Endpoint::of(credentials)
        .or_else(|_| sts::Endpoint::of(from))
        .map_err(|cause| credential_error(provider, &cause))?;
    let value = token::single_flight(credentials, key, || async {
        let found = sts::assume_role(upstream, provider, &endpoint, &base, &session)
            .await
            .map_err(|err| {
                err.with_note(&format!(
                    "AssumeRole of the role configured for the tenant, from aws source {}",
                    source.name()
                ))
            })?;
        Ok((found.0.encode(), found.1))
    })
    .await?;
    credentials.tokens().note_source(
        provider,
        &format!("aws:{}+AssumeRole:{}", source.name(), role.role_arn),
    );
    AwsCredentials::decode(&value)
}

/// The first source of the chain over `store` that gives credentials. `for_role`: the
/// host's sources may serve as the base of a configured role.
async fn chain(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    store: &CredentialStore,
    for_role: bool,
) -> Result<(AwsCredentials, Source)> {
    let mut skipped = Vec::new();
    for source in Source::ALL {
        let attempt = attempt(upstream, provider, auth, store, source, for_role)
            .await
            .map_err(|err| named(err, source, auth))?;
        match attempt {
            Attempt::Found(found) => {
                tracing::debug!(%provider, source = source.name(), "aws credentials resolved");
                return Ok((found, source));
            }
            Attempt::Unavailable(why) => skipped.push(format!("{}: {why}", source.name())),
        }
    }
    Err(credential_error(
        provider,
        &format!("aws found no credential: {}", skipped.join("; ")),
    ))
}

async fn attempt(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    store: &CredentialStore,
    source: Source,
    for_role: bool,
) -> Result<Attempt> {
    if source.is_host() && !(store.allows_host_identity() || for_role && has_host_vars(store)) {
        return Ok(Attempt::Unavailable(NOT_FOR_TENANT.to_owned()));
    }
    match source {
        Source::Environment => match environment(auth, store) {
            Ok(Some(found)) => Ok(Attempt::Found(found)),
            Ok(None) => {
                let (id, secret) = env_vars(auth);
                Ok(Attempt::Unavailable(format!(
                    "{UNSET} ({id}, {secret} not set)"
                )))
            }
            Err(cause) => Err(credential_error(provider, &cause)),
        },
        Source::Profile => files::profile(upstream, provider, store).await,
        Source::WebIdentity => sts::web_identity_from_env(upstream, provider, store).await,
        Source::Container => metadata::container(upstream, provider, store).await,
        Source::InstanceMetadata => metadata::instance(upstream, provider, store).await,
    }
}

/// Whether a tenant's own variables name a host source (then a configured role may use it).
fn has_host_vars(store: &dyn CredentialSource) -> bool {
    [
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    ]
    .iter()
    .any(|name| store.get(name).is_some())
}

/// `err` with the source it came from and the variables that source reads.
fn named(err: Error, source: Source, auth: &Value) -> Error {
    err.with_note(&format!(
        "aws source {}, variables {}",
        source.name(),
        source.variables(auth)
    ))
}

/// Checks without any network call: `Ok(true)` when a tenant-held source (environment,
/// profile, web identity) is configured and its material is usable; `Ok(false)` when only
/// the host's identity could serve; an error naming each source otherwise.
pub(crate) fn check(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<bool, String> {
    let mut skipped = Vec::new();
    for source in Source::ALL {
        let outcome = match source {
            Source::Environment => match environment(auth, credentials) {
                Ok(Some(_)) => Ok(true),
                Ok(None) => {
                    let (id, secret) = env_vars(auth);
                    Err(format!("{UNSET} ({id}, {secret} not set)"))
                }
                // The variable alone: the message StackQL's users know.
                Err(cause) => return Err(cause),
            },
            Source::Profile => files::check(credentials),
            Source::WebIdentity => sts::check_web_identity(credentials),
            Source::Container | Source::InstanceMetadata => {
                if credentials.allows_host_identity() || has_host_vars(credentials) {
                    return Ok(false);
                }
                Err(NOT_FOR_TENANT.to_owned())
            }
        };
        match outcome {
            Ok(true) => return Ok(true),
            Ok(false) => {}
            Err(why) if why.starts_with(UNSET) => skipped.push(format!("{}: {why}", source.name())),
            Err(why) => return Err(format!("aws source {}: {why}", source.name())),
        }
    }
    if credentials.assumes_aws_roles() {
        // The base of a configured role may be the host's identity: known only by asking.
        return Ok(false);
    }
    Err(format!("aws found no credential: {}", skipped.join("; ")))
}

/// Which source would serve, judged without a network call: the first tenant-held source
/// whose material is usable, else the host's sources (joined with `|`); `None` when none
/// applies.
pub(crate) fn configured_source(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> Option<String> {
    for source in [Source::Environment, Source::Profile, Source::WebIdentity] {
        let usable = match source {
            Source::Environment => matches!(environment(auth, credentials), Ok(Some(_))),
            Source::Profile => files::check(credentials) == Ok(true),
            _ => sts::check_web_identity(credentials) == Ok(true),
        };
        if usable {
            return Some(source.name().to_owned());
        }
    }
    (credentials.allows_host_identity() || has_host_vars(credentials))
        .then(|| "ContainerCredentials|InstanceMetadata".to_owned())
}

/// The lifetime left until an RFC 3339 `Expiration` (zero when past or unreadable, so the
/// credentials are used once and not cached).
pub(super) fn lifetime_until(expiration: &str) -> Duration {
    humantime::parse_rfc3339_weak(expiration.trim())
        .ok()
        .and_then(|at| at.duration_since(std::time::SystemTime::now()).ok())
        .unwrap_or_default()
}

/// `Some(values)` when all of `names` are set, else the "not configured" reason; an error
/// naming the first missing one when only some are set.
pub(super) fn all_or_none(
    credentials: &dyn CredentialSource,
    names: &[&str],
) -> std::result::Result<Option<Vec<String>>, String> {
    let values: Vec<Option<String>> = names.iter().map(|n| credentials.get(n)).collect();
    if values.iter().all(Option::is_none) {
        return Ok(None);
    }
    if let Some(missing) = names.iter().zip(&values).find(|(_, v)| v.is_none()) {
        return Err(format!(
            "variable {} is not set (the source is configured by {})",
            missing.0,
            names.join(", ")
        ));
    }
    Ok(Some(values.into_iter().flatten().collect()))
}

/// Whether `url` may be asked for credentials: `https`, or `http` to a loopback host.
pub(super) fn loopback_or_https(url: &url::Url) -> bool {
    match url.scheme() {
        "https" => url.host_str().is_some(),
        "http" => matches!(url.host_str(), Some("127.0.0.1" | "localhost" | "[::1]")),
        _ => false,
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

    fn aws_auth() -> Value {
        json!({"type": "aws_signing_v4", "keyIDenvvar": "AWS_ACCESS_KEY_ID",
               "credentialsenvvar": "AWS_SECRET_ACCESS_KEY"})
    }

    #[test]
    fn cached_form_round_trips() {
        let creds = AwsCredentials {
            key_id: "ASIA1".into(),
            secret: "s/e+c".into(),
            session_token: Some("tok==".into()),
        };
        assert_eq!(AwsCredentials::decode(&creds.encode()).unwrap(), creds);
        let plain = AwsCredentials {
            session_token: None,
            ..creds.clone()
        };
        assert_eq!(AwsCredentials::decode(&plain.encode()).unwrap(), plain);
        assert!(!format!("{creds:?}").contains("s/e+c"));
        let bad = AwsCredentials {
            secret: "a\nb".into(),
            ..creds
        };
        assert!(bad.checked("IMDS").is_err());
    }

    #[test]
    fn check_names_every_source_and_keeps_the_plain_variable_message() {
        let err = check(&aws_auth(), &store(&[])).unwrap_err();
        assert!(err.starts_with("aws found no credential: Environment: not configured (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY not set)"), "{err}");
        assert!(err.contains("WebIdentity: not configured"), "{err}");
        assert!(
            err.contains("ContainerCredentials: not configured (the host's identity"),
            "{err}"
        );
        assert_eq!(
            check(&aws_auth(), &store(&[("AWS_SECRET_ACCESS_KEY", "s")])).unwrap_err(),
            "variable AWS_ACCESS_KEY_ID is not set"
        );
        let both = store(&[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ]);
        assert_eq!(check(&aws_auth(), &both), Ok(true));
        assert_eq!(
            configured_source(&aws_auth(), &both).as_deref(),
            Some("Environment")
        );
        assert_eq!(
            check(&aws_auth(), &store(&[]).with_host_identity(true)),
            Ok(false)
        );
        let half = store(&[("AWS_WEB_IDENTITY_TOKEN_FILE", "/t")]);
        let err = check(&aws_auth(), &half).unwrap_err();
        assert!(
            err.starts_with("aws source WebIdentity: variable AWS_ROLE_ARN is not set"),
            "{err}"
        );
    }

    #[test]
    fn expirations_give_lifetimes() {
        assert_eq!(lifetime_until("2001-01-01T00:00:00Z"), Duration::ZERO);
        assert_eq!(lifetime_until("soon"), Duration::ZERO);
        let later = humantime::format_rfc3339_seconds(
            std::time::SystemTime::now() + Duration::from_secs(3600),
        )
        .to_string();
        let left = lifetime_until(&later);
        assert!(left > Duration::from_secs(3590) && left <= Duration::from_secs(3600));
    }
}
