//! AWS STS over its query protocol: `AssumeRole` (signed with the base credentials) and
//! `AssumeRoleWithWebIdentity` (unsigned: the web identity token is the proof), form posts
//! answered in XML.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue};
use url::Url;

use super::sigv4::Signer;
use super::{Attempt, AwsCredentials, Caller, UNSET, all_or_none, loopback_or_https};
use crate::credentials::{AwsRole, CredentialSource, CredentialStore};
use crate::error::{Error, Result};
use crate::identity::{AuthParts, credential_error, token};
use crate::upstream::{Outgoing, RequestSigner, Upstream, describe};
use crate::xml;

const VERSION: &str = "2011-06-15";

/// The STS endpoint and the region its requests are signed for.
#[derive(Clone, Debug)]
pub(super) struct Endpoint {
    url: Url,
    region: String,
}

impl Endpoint {
    /// `AWS_ENDPOINT_URL_STS`, else `AWS_ENDPOINT_URL`, else the regional endpoint of
    /// `AWS_REGION` / `AWS_DEFAULT_REGION`, else the global `https://sts.amazonaws.com`.
    /// An endpoint must be `https` (plain `http` only to a loopback host).
    pub(super) fn of(credentials: &dyn CredentialSource) -> std::result::Result<Self, String> {
        let region = credentials
            .get("AWS_REGION")
            .or_else(|| credentials.get("AWS_DEFAULT_REGION"));
        let configured = ["AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL"]
            .into_iter()
            .find_map(|var| credentials.get(var).map(|url| (var, url)));
        let (url, var) = match (&configured, &region) {
            (Some((var, url)), _) => (url.clone(), *var),
            (None, Some(region)) => (format!("https://sts.{region}.amazonaws.com"), "AWS_REGION"),
            (None, None) => (
                "https://sts.amazonaws.com".to_owned(),
                "AWS_ENDPOINT_URL_STS",
            ),
        };
        let url = Url::parse(&url)
            .ok()
            .filter(|u| loopback_or_https(u) && u.query().is_none())
            .ok_or_else(|| {
                format!(
                    "variable {var} does not give an https URL of STS (http only to a loopback host)"
                )
            })?;
        Ok(Endpoint {
            url,
            region: region.unwrap_or_else(|| "us-east-1".to_owned()),
        })
    }
}

impl Endpoint {
    /// The endpoint an auth object names (`aws_sts_endpoint`), else the regional endpoint
    /// of `region`, else the global one; signed for `region` (else `us-east-1`). The same
    /// rules as [`Endpoint::of`]: `https`, plain `http` only to a loopback host.
    pub(super) fn explicit(
        url: Option<&str>,
        region: Option<&str>,
    ) -> std::result::Result<Self, String> {
        let region = region.unwrap_or("us-east-1").to_owned();
        let text = match url {
            Some(url) => url.to_owned(),
            None => format!("https://sts.{region}.amazonaws.com"),
        };
        let url = Url::parse(&text)
            .ok()
            .filter(|u| loopback_or_https(u) && u.query().is_none())
            .ok_or_else(|| {
                "aws_sts_endpoint is not an https URL of STS (http only to a loopback host)"
                    .to_owned()
            })?;
        Ok(Endpoint { url, region })
    }
}

/// Who an `AssumeRole` session is for: its name, source identity and tags.
#[derive(Clone, Debug)]
pub(super) struct RoleSession {
    role_arn: String,
    external_id: Option<String>,
    duration: Duration,
    session_name: String,
    source_identity: String,
    tags: Vec<(&'static str, String)>,
}

/// `text` with every character outside `allowed` replaced by `_`, cut to `max` characters,
/// padded to two (STS's minimum for names).
fn sanitized(text: &str, max: usize, allowed: impl Fn(char) -> bool) -> String {
    let mut out: String = text
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .take(max)
        .collect();
    while out.chars().count() < 2 {
        out.push('_');
    }
    out
}

/// `[\w+=,.@-]`: role session names and source identities.
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | '=' | ',' | '.' | '@' | '-')
}

/// `[\p{L}\p{Z}\p{N}_.:/=+\-@]`: session tag values.
fn tag_char(c: char) -> bool {
    c.is_alphanumeric() || c == ' ' || matches!(c, '_' | '.' | ':' | '/' | '=' | '+' | '-' | '@')
}

impl RoleSession {
    /// The session of `caller` in `role`.
    pub(super) fn for_caller(role: &AwsRole, caller: Caller<'_>) -> Self {
        RoleSession {
            role_arn: role.role_arn.clone(),
            external_id: role.external_id.clone(),
            duration: role.duration,
            session_name: sanitized(
                &format!("{}.{}", caller.tenant, caller.principal),
                64,
                name_char,
            ),
            source_identity: sanitized(caller.principal, 64, name_char),
            tags: vec![
                ("querygate-tenant", sanitized(caller.tenant, 256, tag_char)),
                (
                    "querygate-principal",
                    sanitized(caller.principal, 256, tag_char),
                ),
            ],
        }
    }

    /// A profile's `role_arn` session (no tags: the profile is the operator's).
    fn for_profile(
        role_arn: String,
        external_id: Option<String>,
        duration: Duration,
        name: Option<String>,
    ) -> Self {
        RoleSession {
            role_arn,
            external_id,
            duration,
            session_name: name.unwrap_or_else(default_session_name),
            source_identity: String::new(),
            tags: Vec::new(),
        }
    }
}

/// `querygate-<unix seconds>`, as the SDKs name sessions nobody named.
fn default_session_name() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    format!("querygate-{now}")
}

/// `AssumeRole` of `session.role_arn`, signed with `base`: the role's credentials and
/// their lifetime.
pub(super) async fn assume_role(
    upstream: &Upstream,
    provider: &str,
    endpoint: &Endpoint,
    base: &AwsCredentials,
    session: &RoleSession,
) -> Result<(AwsCredentials, Duration)> {
    let mut form = vec![
        ("Action", "AssumeRole".to_owned()),
        ("Version", VERSION.to_owned()),
        ("RoleArn", session.role_arn.clone()),
        ("RoleSessionName", session.session_name.clone()),
        ("DurationSeconds", session.duration.as_secs().to_string()),
    ];
    if let Some(id) = &session.external_id {
        form.push(("ExternalId", id.clone()));
    }
    if !session.source_identity.is_empty() {
        form.push(("SourceIdentity", session.source_identity.clone()));
    }
    let mut tags = Vec::new();
    for (index, (key, value)) in session.tags.iter().enumerate() {
        tags.push((format!("Tags.member.{}.Key", index + 1), (*key).to_owned()));
        tags.push((format!("Tags.member.{}.Value", index + 1), value.clone()));
    }
    let signer = Signer::for_sts(provider, &endpoint.region, base.clone());
    let mut pairs: Vec<(String, String)> =
        form.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    pairs.extend(tags);
    post(
        upstream,
        provider,
        endpoint,
        "AssumeRole",
        pairs,
        Some(signer),
    )
    .await
}

/// `AssumeRoleWithWebIdentity` with the token read from `token_file` now.
async fn assume_role_with_web_identity(
    upstream: &Upstream,
    provider: &str,
    endpoint: &Endpoint,
    token_file: &str,
    file_var: &str,
    session: &RoleSession,
) -> Result<(AwsCredentials, Duration)> {
    let token =
        read_token_file(token_file, file_var).map_err(|c| credential_error(provider, &c))?;
    let pairs = vec![
        ("Action".to_owned(), "AssumeRoleWithWebIdentity".to_owned()),
        ("Version".to_owned(), VERSION.to_owned()),
        ("RoleArn".to_owned(), session.role_arn.clone()),
        ("RoleSessionName".to_owned(), session.session_name.clone()),
        ("WebIdentityToken".to_owned(), token),
    ];
    post(
        upstream,
        provider,
        endpoint,
        "AssumeRoleWithWebIdentity",
        pairs,
        None,
    )
    .await
}

/// The token of a file (trimmed), or a cause naming the variable that names the file.
pub(super) fn read_token_file(path: &str, var: &str) -> std::result::Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("the file named by {var} cannot be read: {}", err.kind()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("the file named by {var} is empty"));
    }
    Ok(token.to_owned())
}

/// Posts one STS action and reads its `<Action>Result><Credentials>`.
async fn post(
    upstream: &Upstream,
    provider: &str,
    endpoint: &Endpoint,
    action: &str,
    form: Vec<(String, String)>,
    signer: Option<Signer>,
) -> Result<(AwsCredentials, Duration)> {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .finish();
    let mut headers = HeaderMap::new();
    headers.insert(
        reqwest::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded; charset=utf-8"),
    );
    let method = reqwest::Method::POST;
    let url = &endpoint.url;
    let shown = format!("STS {action} at {}", describe(&method, url));
    let auth = AuthParts {
        signer: signer.map(|signer| Box::new(signer) as Box<dyn RequestSigner>),
        ..AuthParts::default()
    };
    let (status, _, answer) = upstream
        .send_as(
            Outgoing::new(&method, url, &headers, Some(&Bytes::from(body))),
            &auth,
        )
        .await
        .map_err(|err| {
            Error::new(
                err.kind(),
                format!(
                    "{shown} for provider '{provider}' failed: {}",
                    err.message()
                ),
            )
        })?;
    if !(200..300).contains(&status) {
        return Err(credential_error(
            provider,
            &format!("{shown} answered {status}{}", error_code(&answer)),
        ));
    }
    parse_credentials(&answer, action)
        .map_err(|cause| credential_error(provider, &format!("{shown} {cause}")))
}

/// ` (AccessDenied)` when the body is an STS error with a plain code; nothing else of the
/// body is shown (its message may quote what was sent).
fn error_code(body: &[u8]) -> String {
    xml::aws_error(body)
        .map(|e| e.code)
        .filter(|code| {
            code.len() <= 64
                && code
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        })
        .map(|code| format!(" ({code})"))
        .unwrap_or_default()
}

/// The credentials of `<{action}Response><{action}Result><Credentials>`.
fn parse_credentials(
    body: &[u8],
    action: &str,
) -> std::result::Result<(AwsCredentials, Duration), String> {
    let tree =
        xml::to_mxj_value(body).map_err(|_| "answered with a body that is not XML".to_owned())?;
    let credentials = &tree[format!("{action}Response")][format!("{action}Result")]["Credentials"];
    let text = |name: &str| {
        credentials[name]
            .as_str()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let (Some(key_id), Some(secret)) = (text("AccessKeyId"), text("SecretAccessKey")) else {
        return Err("answered without Credentials".to_owned());
    };
    let found = AwsCredentials {
        key_id,
        secret,
        session_token: text("SessionToken"),
    }
    .checked("STS")?;
    let lifetime = text("Expiration")
        .map(|e| super::lifetime_until(&e))
        .unwrap_or_default();
    Ok((found, lifetime))
}

/// The web identity source from `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`.
pub(super) async fn web_identity_from_env(
    upstream: &Upstream,
    provider: &str,
    store: &CredentialStore,
) -> Result<Attempt> {
    let Some(values) = all_or_none(store, &["AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"])
        .map_err(|c| credential_error(provider, &c))?
    else {
        return Ok(Attempt::Unavailable(format!(
            "{UNSET} (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN not set)"
        )));
    };
    let endpoint = Endpoint::of(store).map_err(|c| credential_error(provider, &c))?;
    let found = web_identity(
        upstream,
        provider,
        store,
        &endpoint,
        &values[0],
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        &values[1],
        store.get("AWS_ROLE_SESSION_NAME"),
    )
    .await?;
    Ok(Attempt::Found(found))
}

/// Credentials of `role_arn` for the token in `file`, cached; the file is read at each
/// refresh.
#[allow(clippy::too_many_arguments)]
pub(super) async fn web_identity(
    upstream: &Upstream,
    provider: &str,
    store: &CredentialStore,
    endpoint: &Endpoint,
    file: &str,
    file_var: &str,
    role_arn: &str,
    session_name: Option<String>,
) -> Result<AwsCredentials> {
    let key = token::cache_key(
        provider,
        &[
            b"aws",
            b"web_identity",
            endpoint.url.as_str().as_bytes(),
            file.as_bytes(),
            role_arn.as_bytes(),
            session_name.as_deref().unwrap_or_default().as_bytes(),
        ],
    );
    let session = RoleSession::for_profile(
        role_arn.to_owned(),
        None,
        Duration::from_secs(3600),
        session_name,
    );
    let value = token::single_flight(store, key, || async {
        let (found, lifetime) =
            assume_role_with_web_identity(upstream, provider, endpoint, file, file_var, &session)
                .await?;
        Ok((found.encode(), lifetime))
    })
    .await?;
    AwsCredentials::decode(&value)
}

/// A profile's `role_arn` assumed from `base`, cached.
#[allow(clippy::too_many_arguments)]
pub(super) async fn profile_role(
    upstream: &Upstream,
    provider: &str,
    store: &CredentialStore,
    base: &AwsCredentials,
    role_arn: String,
    external_id: Option<String>,
    duration: Duration,
    session_name: Option<String>,
) -> Result<AwsCredentials> {
    let endpoint = Endpoint::of(store).map_err(|c| credential_error(provider, &c))?;
    let key = token::cache_key(
        provider,
        &[
            b"aws",
            b"profile_role",
            endpoint.url.as_str().as_bytes(),
            role_arn.as_bytes(),
            external_id.as_deref().unwrap_or_default().as_bytes(),
            base.key_id.as_bytes(),
            base.secret.as_bytes(),
        ],
    );
    let session = RoleSession::for_profile(role_arn, external_id, duration, session_name);
    let value = token::single_flight(store, key, || async {
        let (found, lifetime) = assume_role(upstream, provider, &endpoint, base, &session).await?;
        Ok((found.encode(), lifetime))
    })
    .await?;
    AwsCredentials::decode(&value)
}

/// The web identity source without a network call: `Ok(true)` when both variables are set
/// and the token file is readable.
pub(super) fn check_web_identity(
    credentials: &dyn CredentialSource,
) -> std::result::Result<bool, String> {
    match all_or_none(
        credentials,
        &["AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"],
    )? {
        None => Err(format!(
            "{UNSET} (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN not set)"
        )),
        Some(values) => {
            Endpoint::of(credentials)?;
            read_token_file(&values[0], "AWS_WEB_IDENTITY_TOKEN_FILE").map(|_| true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sts_answers_parse() {
        let body = br#"<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleResult>
    <SourceIdentity>alice</SourceIdentity>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/demo/acme.alice</Arn>
      <AssumedRoleId>ARO123EXAMPLE123:acme.alice</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <AccessKeyId>ASIAIOSFODNN7EXAMPLE</AccessKeyId>
      <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY</SecretAccessKey>
      <SessionToken>IQoJb3JpZ2luX2VjEOz////////////////////wEXAMPLE</SessionToken>
      <Expiration>2099-11-09T13:34:41Z</Expiration>
    </Credentials>
    <PackedPolicySize>6</PackedPolicySize>
  </AssumeRoleResult>
  <ResponseMetadata><RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId></ResponseMetadata>
</AssumeRoleResponse>"#;
        let (found, lifetime) = parse_credentials(body, "AssumeRole").unwrap();
        assert_eq!(found.key_id, "ASIAIOSFODNN7EXAMPLE");
        assert_eq!(found.secret, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY");
        assert!(found.session_token.is_some());
        assert!(lifetime > Duration::from_secs(3600));
        assert!(parse_credentials(body, "AssumeRoleWithWebIdentity").is_err());
        assert!(parse_credentials(b"{}", "AssumeRole").is_err());
        let error = br#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>User: arn:aws:iam::1:user/x is not authorized</Message></Error><RequestId>r</RequestId></ErrorResponse>"#;
        assert_eq!(error_code(error), " (AccessDenied)");
    }

    #[test]
    fn sessions_name_the_tenant_and_principal_within_sts_limits() {
        let role = AwsRole {
            role_arn: "arn:aws:iam::123456789012:role/acme-reader".into(),
            external_id: None,
            duration: Duration::from_secs(900),
        };
        let session = RoleSession::for_caller(
            &role,
            Caller {
                tenant: "acme",
                principal: "alice (https://idp.example.com)",
                subject_token: None,
            },
        );
        assert_eq!(session.session_name, "acme.alice__https___idp.example.com_");
        assert_eq!(session.source_identity, "alice__https___idp.example.com_");
        assert_eq!(
            session.tags,
            vec![
                ("querygate-tenant", "acme".to_owned()),
                (
                    "querygate-principal",
                    "alice _https://idp.example.com_".to_owned()
                )
            ]
        );
        let long = "x".repeat(300);
        let session = RoleSession::for_caller(
            &role,
            Caller {
                tenant: "t",
                principal: &long,
                subject_token: None,
            },
        );
        assert_eq!(session.session_name.len(), 64);
        assert_eq!(session.tags[1].1.len(), 256);
        assert_eq!(sanitized("", 64, name_char), "__");
    }

    #[test]
    fn endpoints_follow_the_sdk_variables() {
        let store = |pairs: &[(&str, &str)]| {
            CredentialStore::fixed(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
            )
        };
        assert_eq!(
            Endpoint::of(&store(&[])).unwrap().url.as_str(),
            "https://sts.amazonaws.com/"
        );
        let regional = Endpoint::of(&store(&[("AWS_REGION", "eu-west-1")])).unwrap();
        assert_eq!(
            regional.url.as_str(),
            "https://sts.eu-west-1.amazonaws.com/"
        );
        assert_eq!(regional.region, "eu-west-1");
        assert_eq!(
            Endpoint::of(&store(&[("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9")]))
                .unwrap()
                .url
                .as_str(),
            "http://127.0.0.1:9/"
        );
        let err = Endpoint::of(&store(&[(
            "AWS_ENDPOINT_URL_STS",
            "http://sts.example.com",
        )]))
        .unwrap_err();
        assert!(err.contains("AWS_ENDPOINT_URL_STS"), "{err}");
    }
}
