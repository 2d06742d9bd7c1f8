//! The sources that ask Entra ID's token endpoint with the tenant's own variables: a
//! client secret, a client certificate (RS256 assertion, `x5t` = SHA-1 thumbprint of the
//! certificate's DER), a workload-identity federated token.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use url::Url;

use super::{Attempt, UNSET, all_set};
use crate::credentials::{CredentialSource, CredentialStore};
use crate::error::{Error, Result};
use crate::identity::credential_error;
use crate::identity::token::{self, TokenRequest};
use crate::upstream::Upstream;

/// Entra's public-cloud authority.
const DEFAULT_AUTHORITY: &str = "https://login.microsoftonline.com";

const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// Client assertions are valid this long.
const ASSERTION_LIFETIME_SECS: u64 = 600;

/// Entra's token endpoint for `tenant`, and how errors show it (the tenant id as a name).
struct Endpoint {
    url: String,
    shown: String,
    authority: String,
}

fn endpoint(
    credentials: &dyn CredentialSource,
    tenant: &str,
) -> std::result::Result<Endpoint, String> {
    endpoint_at(credentials.get("AZURE_AUTHORITY_HOST"), tenant)
}

/// [`endpoint`] with the authority given (else Entra's public cloud).
fn endpoint_at(authority: Option<String>, tenant: &str) -> std::result::Result<Endpoint, String> {
    let authority = authority.unwrap_or_else(|| DEFAULT_AUTHORITY.to_owned());
    let authority = authority.trim_end_matches('/').to_owned();
    let parsed = Url::parse(&authority)
        .map_err(|_| "variable AZURE_AUTHORITY_HOST is not a URL".to_owned())?;
    let loopback = matches!(parsed.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
    match parsed.scheme() {
        "https" => {}
        "http" if loopback => {}
        _ => {
            return Err(
                "variable AZURE_AUTHORITY_HOST must be an https URL (http only to a loopback host)"
                    .to_owned(),
            );
        }
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("variable AZURE_AUTHORITY_HOST must not have a query or fragment".to_owned());
    }
    if tenant.is_empty()
        || !tenant
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
    {
        return Err(
            "variable AZURE_TENANT_ID is not a tenant id (letters, digits, '-' and '.')".to_owned(),
        );
    }
    Ok(Endpoint {
        url: format!("{authority}/{tenant}/oauth2/v2.0/token"),
        shown: format!("{authority}/{{AZURE_TENANT_ID}}/oauth2/v2.0/token"),
        authority,
    })
}

/// EnvironmentCredential: client secret, else client certificate.
pub(super) async fn environment(
    upstream: &Upstream,
    provider: &str,
    scope: &str,
    credentials: &CredentialStore,
) -> Result<Attempt> {
    let Some((tenant, client, material)) = environment_vars(credentials) else {
        return Ok(Attempt::Unavailable(environment_unset()));
    };
    let endpoint = endpoint(credentials, &tenant).map_err(|c| credential_error(provider, &c))?;
    let (kind, digest_material): (&[u8], Vec<u8>) = match &material {
        Material::Pkcs12 => return Err(credential_error(provider, PKCS12)),
        Material::Secret(secret) => (b"secret", secret.as_bytes().to_vec()),
        Material::Certificate(path) => (
            b"certificate",
            std::fs::read(path).map_err(|err| {
                credential_error(
                    provider,
                    &format!(
                        "the file named by AZURE_CLIENT_CERTIFICATE_PATH cannot be read: {}",
                        err.kind()
                    ),
                )
            })?,
        ),
    };
    let key = token::cache_key(
        provider,
        &[
            b"azure_default",
            kind,
            endpoint.authority.as_bytes(),
            tenant.as_bytes(),
            client.as_bytes(),
            &digest_material,
            scope.as_bytes(),
        ],
    );
    let form = match material {
        Material::Secret(secret) => vec![("client_secret", secret)],
        Material::Certificate(_) | Material::Pkcs12 => {
            let assertion = certificate_assertion(&digest_material, &client, &endpoint.url)
                .map_err(|cause| {
                    credential_error(
                        provider,
                        &format!("the certificate named by AZURE_CLIENT_CERTIFICATE_PATH: {cause}"),
                    )
                })?;
            vec![
                ("client_assertion_type", ASSERTION_TYPE.to_owned()),
                ("client_assertion", assertion),
            ]
        }
    };
    let value = client_credentials(
        upstream,
        provider,
        credentials,
        key,
        &endpoint,
        &client,
        scope,
        form,
    )
    .await?;
    Ok(Attempt::Token(value))
}

/// WorkloadIdentityCredential: the federated token file is the client assertion.
pub(super) async fn workload_identity(
    upstream: &Upstream,
    provider: &str,
    scope: &str,
    credentials: &CredentialStore,
) -> Result<Attempt> {
    let values = match all_set(
        credentials,
        &[
            "AZURE_FEDERATED_TOKEN_FILE",
            "AZURE_CLIENT_ID",
            "AZURE_TENANT_ID",
        ],
    ) {
        Ok(values) => values,
        Err(why) => return Ok(Attempt::Unavailable(why)),
    };
    let [file, client, tenant] = <[String; 3]>::try_from(values)
        .map_err(|_| Error::internal("three variables were asked for"))?;
    let authority = credentials.get("AZURE_AUTHORITY_HOST");
    let value = client_assertion(
        upstream,
        provider,
        scope,
        credentials,
        (&file, "AZURE_FEDERATED_TOKEN_FILE"),
        &client,
        &tenant,
        authority,
    )
    .await?;
    Ok(Attempt::Token(value))
}

/// A token for `client` of `tenant` with the federated token of `file` (read at each token
/// request; shown in errors by the name of what named it) as the client assertion, from
/// `authority` (else Entra's public cloud).
#[allow(clippy::too_many_arguments)]
pub(super) async fn client_assertion(
    upstream: &Upstream,
    provider: &str,
    scope: &str,
    credentials: &CredentialStore,
    (file, named_by): (&str, &str),
    client: &str,
    tenant: &str,
    authority: Option<String>,
) -> Result<String> {
    let endpoint = endpoint_at(authority, tenant).map_err(|c| credential_error(provider, &c))?;
    let key = token::cache_key(
        provider,
        &[
            b"azure_default",
            b"workload_identity",
            endpoint.authority.as_bytes(),
            tenant.as_bytes(),
            client.as_bytes(),
            file.as_bytes(),
            scope.as_bytes(),
        ],
    );
    token::single_flight(credentials, key, || async {
        // Read at each token request: Kubernetes rotates the projected token in place.
        let assertion =
            read_federated_token(file, named_by).map_err(|c| credential_error(provider, &c))?;
        let form = vec![
            ("client_assertion_type", ASSERTION_TYPE.to_owned()),
            ("client_assertion", assertion),
        ];
        post(upstream, provider, &endpoint, client, scope, form).await
    })
    .await
}

fn read_federated_token(path: &str, named_by: &str) -> std::result::Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("{named_by} '{path}' cannot be read: {}", err.kind()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("{named_by} '{path}' is empty"));
    }
    Ok(token.to_owned())
}

#[allow(clippy::too_many_arguments)]
async fn client_credentials(
    upstream: &Upstream,
    provider: &str,
    credentials: &CredentialStore,
    key: String,
    endpoint: &Endpoint,
    client: &str,
    scope: &str,
    form: Vec<(&'static str, String)>,
) -> Result<String> {
    token::single_flight(credentials, key, || {
        post(upstream, provider, endpoint, client, scope, form)
    })
    .await
}

/// The client-credentials request to Entra with `extra` (secret or assertion).
async fn post(
    upstream: &Upstream,
    provider: &str,
    endpoint: &Endpoint,
    client: &str,
    scope: &str,
    extra: Vec<(&'static str, String)>,
) -> Result<(String, std::time::Duration)> {
    let mut form = vec![
        ("grant_type", "client_credentials".to_owned()),
        ("client_id", client.to_owned()),
        ("scope", scope.to_owned()),
    ];
    form.extend(extra);
    token::post_form(
        upstream,
        TokenRequest {
            provider,
            token_url: &endpoint.url,
            shown_url: Some(&endpoint.shown),
            form,
            basic: None,
        },
    )
    .await
}

enum Material {
    Secret(String),
    Certificate(String),
    /// A certificate with a password: PKCS#12, which is not read.
    Pkcs12,
}

const PKCS12: &str = "AZURE_CLIENT_CERTIFICATE_PASSWORD is set, so the certificate is PKCS#12, which is not read: convert it to PEM (`openssl pkcs12 -nodes`) and unset AZURE_CLIENT_CERTIFICATE_PASSWORD";

fn environment_vars(credentials: &dyn CredentialSource) -> Option<(String, String, Material)> {
    let tenant = credentials.get("AZURE_TENANT_ID")?;
    let client = credentials.get("AZURE_CLIENT_ID")?;
    let material = match credentials.get("AZURE_CLIENT_SECRET") {
        Some(secret) => Material::Secret(secret),
        None => {
            let path = credentials.get("AZURE_CLIENT_CERTIFICATE_PATH")?;
            if credentials
                .get("AZURE_CLIENT_CERTIFICATE_PASSWORD")
                .is_some()
            {
                Material::Pkcs12
            } else {
                Material::Certificate(path)
            }
        }
    };
    Some((tenant, client, material))
}

fn environment_unset() -> String {
    format!(
        "{UNSET} (AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET or AZURE_CLIENT_CERTIFICATE_PATH not set)"
    )
}

/// `Ok(true)` when configured and usable; `Err` starting with "not configured" when not set.
pub(super) fn check_environment(
    credentials: &dyn CredentialSource,
) -> std::result::Result<bool, String> {
    let Some((tenant, _, material)) = environment_vars(credentials) else {
        return Err(environment_unset());
    };
    endpoint(credentials, &tenant)?;
    if let Material::Pkcs12 = material {
        return Err(PKCS12.to_owned());
    }
    if let Material::Certificate(path) = material {
        let pem = std::fs::read(&path).map_err(|err| {
            format!(
                "the file named by AZURE_CLIENT_CERTIFICATE_PATH cannot be read: {}",
                err.kind()
            )
        })?;
        parse_certificate(&pem)
            .map_err(|c| format!("the certificate named by AZURE_CLIENT_CERTIFICATE_PATH: {c}"))?;
    }
    Ok(true)
}

/// `Ok(true)` when configured and the token file is readable.
pub(super) fn check_workload_identity(
    credentials: &dyn CredentialSource,
) -> std::result::Result<bool, String> {
    let values = all_set(
        credentials,
        &[
            "AZURE_FEDERATED_TOKEN_FILE",
            "AZURE_CLIENT_ID",
            "AZURE_TENANT_ID",
        ],
    )?;
    endpoint(credentials, &values[2])?;
    read_federated_token(&values[0], "AZURE_FEDERATED_TOKEN_FILE").map(|_| true)
}

/// The certificate's DER and its RSA private key as PEM. Holds a key: no `Debug`.
struct Certificate {
    der: Vec<u8>,
    key_pem: String,
}

/// Reads a PEM file holding a `CERTIFICATE` and a `PRIVATE KEY` / `RSA PRIVATE KEY` block.
fn parse_certificate(pem: &[u8]) -> std::result::Result<Certificate, String> {
    let mut der = None;
    let mut key_pem = None;
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let block = block.map_err(|_| {
            "is not a PEM file (PKCS#12 is not read: convert it with `openssl pkcs12 -nodes`)"
                .to_owned()
        })?;
        match block.label.as_str() {
            "CERTIFICATE" if der.is_none() => der = Some(block.contents),
            "PRIVATE KEY" | "RSA PRIVATE KEY" if key_pem.is_none() => {
                let body = base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    &block.contents,
                );
                let mut text = format!("-----BEGIN {}-----\n", block.label);
                for chunk in body.as_bytes().chunks(64) {
                    text.push_str(&String::from_utf8_lossy(chunk));
                    text.push('\n');
                }
                text.push_str(&format!("-----END {}-----\n", block.label));
                key_pem = Some(text);
            }
            _ => {}
        }
    }
    match (der, key_pem) {
        (Some(der), Some(key_pem)) => Ok(Certificate { der, key_pem }),
        (None, _) => Err("holds no CERTIFICATE block".to_owned()),
        (_, None) => Err("holds no PRIVATE KEY block".to_owned()),
    }
}

#[derive(Serialize)]
struct AssertionClaims<'a> {
    aud: &'a str,
    iss: &'a str,
    sub: &'a str,
    jti: String,
    nbf: u64,
    iat: u64,
    exp: u64,
}

/// An RS256 client assertion for `client` at `audience` (the token endpoint), signed with
/// the certificate's key, its header carrying the certificate's SHA-1 thumbprint (`x5t`).
fn certificate_assertion(
    pem: &[u8],
    client: &str,
    audience: &str,
) -> std::result::Result<String, String> {
    let certificate = parse_certificate(pem)?;
    let thumbprint =
        ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &certificate.der);
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.x5t = Some(base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        thumbprint.as_ref(),
    ));
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(certificate.key_pem.as_bytes())
        .map_err(|_| "its private key is not an RSA key".to_owned())?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| "the system clock is before 1970".to_owned())?
        .as_secs();
    let mut nonce = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce)
        .map_err(|_| "no randomness for the assertion id".to_owned())?;
    let jti = nonce.iter().map(|b| format!("{b:02x}")).collect();
    let claims = AssertionClaims {
        aud: audience,
        iss: client,
        sub: client,
        jti,
        nbf: now,
        iat: now,
        exp: now + ASSERTION_LIFETIME_SECS,
    };
    jsonwebtoken::encode(&header, &claims, &key)
        .map_err(|_| "signing the client assertion failed".to_owned())
}
