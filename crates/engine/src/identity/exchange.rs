//! Token exchange on behalf of the caller (`tenants[].providers.<name>.token_exchange`):
//! the caller's bearer token is traded at the configured token endpoint for an upstream
//! access token, which the provider's requests then carry as `Authorization: Bearer`. The
//! caller's token itself is never sent upstream. Two flavours: RFC 8693 token exchange and
//! Entra's on-behalf-of. Exchanged tokens are cached in the tenant's token cache under
//! `<provider>/<sha256 of endpoint, client, scope and the caller's token>`, so that two
//! principals (or two tokens of one principal) never share one.

use super::aws::Caller;
use super::credential_error;
use super::static_keys::read_var;
use super::token::{self, TokenRequest};
use crate::credentials::{CredentialSource, CredentialStore, ExchangeKind, TokenExchange};
use crate::error::{Error, ErrorKind, Result};
use crate::upstream::Upstream;

/// RFC 8693's grant type.
const TOKEN_EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";

/// The JWT bearer grant Entra's on-behalf-of flow uses.
const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// The error for a call that carries no bearer token to exchange.
fn no_subject_token(provider: &str, exchange: &TokenExchange) -> Error {
    Error::new(
        ErrorKind::SubjectTokenMissing,
        format!(
            "provider '{provider}' needs the caller's bearer token (source: token_exchange, {}): this call carries none (stdio, the command line, mTLS or no authentication); call over HTTP with a JWT",
            exchange.kind.as_str()
        ),
    )
}

/// The `Authorization` value for `provider`'s requests on behalf of `caller`: cached, or
/// exchanged now.
pub(super) async fn authorization(
    upstream: &Upstream,
    provider: &str,
    exchange: &TokenExchange,
    credentials: &CredentialStore,
    caller: Caller<'_>,
) -> Result<String> {
    let subject = caller
        .subject_token
        .ok_or_else(|| no_subject_token(provider, exchange))?;
    let (client_id, client_secret) =
        client_pair(exchange, credentials).map_err(|cause| credential_error(provider, &cause))?;
    let scope = exchange.scope.clone().unwrap_or_default();
    let key = token::cache_key(
        provider,
        &[
            b"token_exchange",
            exchange.kind.as_str().as_bytes(),
            exchange.token_url.as_bytes(),
            client_id.as_bytes(),
            client_secret.as_bytes(),
            exchange.audience.as_deref().unwrap_or_default().as_bytes(),
            exchange.resource.as_deref().unwrap_or_default().as_bytes(),
            scope.as_bytes(),
            exchange.subject_token_type.as_bytes(),
            caller.tenant.as_bytes(),
            caller.principal.as_bytes(),
            subject.expose().as_bytes(),
        ],
    );
    let mut form: Vec<(&str, String)> = Vec::new();
    let mut basic = None;
    match exchange.kind {
        ExchangeKind::Rfc8693 => {
            form.push(("grant_type", TOKEN_EXCHANGE_GRANT.to_owned()));
            form.push(("subject_token", subject.expose().to_owned()));
            form.push(("subject_token_type", exchange.subject_token_type.clone()));
            if let Some(audience) = &exchange.audience {
                form.push(("audience", audience.clone()));
            }
            if let Some(resource) = &exchange.resource {
                form.push(("resource", resource.clone()));
            }
            if !scope.is_empty() {
                form.push(("scope", scope));
            }
            if exchange.client_secret_in_body {
                form.push(("client_id", client_id));
                form.push(("client_secret", client_secret));
            } else {
                basic = Some((client_id, client_secret));
            }
        }
        ExchangeKind::EntraObo => {
            form.push(("grant_type", JWT_BEARER_GRANT.to_owned()));
            form.push(("client_id", client_id));
            form.push(("client_secret", client_secret));
            form.push(("assertion", subject.expose().to_owned()));
            form.push(("scope", scope));
            form.push(("requested_token_use", "on_behalf_of".to_owned()));
        }
    }
    let value = token::exchange(
        upstream,
        credentials,
        key,
        TokenRequest {
            provider,
            token_url: &exchange.token_url,
            shown_url: None,
            form,
            basic,
        },
    )
    .await?;
    credentials
        .tokens()
        .note_source(provider, &source_name(exchange));
    Ok(value)
}

/// The source `server_info` and `reload_credentials` show: `token_exchange:<kind>`.
pub(crate) fn source_name(exchange: &TokenExchange) -> String {
    format!("token_exchange:{}", exchange.kind.as_str())
}

/// Checks that the client id and secret variables are set.
pub(crate) fn check(
    exchange: &TokenExchange,
    credentials: &dyn CredentialSource,
) -> std::result::Result<(), String> {
    client_pair(exchange, credentials).map(|_| ())
}

fn client_pair(
    exchange: &TokenExchange,
    credentials: &dyn CredentialSource,
) -> std::result::Result<(String, String), String> {
    Ok((
        read_var(credentials, &exchange.client_id_env)?,
        read_var(credentials, &exchange.client_secret_env)?,
    ))
}
