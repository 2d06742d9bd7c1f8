//! Token exchange on behalf of the caller: the caller's own bearer token, carried to the
//! engine as an opaque value, and a tenant's exchange settings for a provider
//! (`tenants[].providers.<name>.token_exchange`).

use std::sync::Arc;

/// The bearer token the caller authenticated with, handed to the engine only so that a
/// provider configured for token exchange can trade it for an upstream token. Opaque:
/// its `Debug` shows nothing of it, it is never sent upstream itself, and two values are
/// always equal (a token does not tell principals apart; their subject and issuer do).
#[derive(Clone)]
pub struct SubjectToken(Arc<str>);

impl SubjectToken {
    /// Wraps a caller's bearer token.
    pub fn new(token: &str) -> Self {
        SubjectToken(Arc::from(token))
    }

    /// The token itself, for the exchange request's form only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SubjectToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubjectToken(redacted)")
    }
}

impl PartialEq for SubjectToken {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for SubjectToken {}

/// Which token exchange a provider's calls use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExchangeKind {
    /// RFC 8693 (`grant_type=urn:ietf:params:oauth:grant-type:token-exchange`).
    Rfc8693,
    /// Microsoft Entra's on-behalf-of flow (`grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`,
    /// `requested_token_use=on_behalf_of`).
    EntraObo,
}

impl ExchangeKind {
    /// The configuration's name of the kind (`rfc8693`, `entra_obo`).
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeKind::Rfc8693 => "rfc8693",
            ExchangeKind::EntraObo => "entra_obo",
        }
    }
}

/// How a tenant's calls to one provider trade the caller's token for an upstream token
/// (`tenants[].providers.<name>.token_exchange`). Names variables, never holds a secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenExchange {
    /// RFC 8693 or Entra on-behalf-of.
    pub kind: ExchangeKind,
    /// The token endpoint (http or https).
    pub token_url: String,
    /// The tenant's credential variable holding the client id.
    pub client_id_env: String,
    /// The tenant's credential variable holding the client secret.
    pub client_secret_env: String,
    /// `audience` (RFC 8693).
    pub audience: Option<String>,
    /// `resource` (RFC 8693).
    pub resource: Option<String>,
    /// `scope`, space-separated (required for Entra on-behalf-of).
    pub scope: Option<String>,
    /// RFC 8693's `subject_token_type`: `urn:ietf:params:oauth:token-type:access_token`
    /// (default) or `urn:ietf:params:oauth:token-type:jwt`.
    pub subject_token_type: String,
    /// RFC 8693: client id and secret as form fields instead of an HTTP Basic header
    /// (Entra on-behalf-of always sends them as form fields).
    pub client_secret_in_body: bool,
}
