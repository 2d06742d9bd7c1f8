//! The key id, secret and session token a request is signed with, and the line form the
//! token cache keeps them in.

use crate::error::{Error, Result};

/// Credentials to sign with. Holds secrets: `Debug` shows the key id's first characters.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct AwsCredentials {
    pub(crate) key_id: String,
    pub(crate) secret: String,
    pub(crate) session_token: Option<String>,
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("session", &self.session_token.is_some())
            .finish_non_exhaustive()
    }
}

impl AwsCredentials {
    /// The form kept in the token cache: the three parts on lines of their own.
    pub(super) fn encode(&self) -> String {
        format!(
            "{}\n{}\n{}",
            self.key_id,
            self.secret,
            self.session_token.as_deref().unwrap_or_default()
        )
    }

    pub(super) fn decode(text: &str) -> Result<Self> {
        let mut parts = text.splitn(3, '\n');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(key_id), Some(secret), Some(token)) => Ok(AwsCredentials {
                key_id: key_id.to_owned(),
                secret: secret.to_owned(),
                session_token: (!token.is_empty()).then(|| token.to_owned()),
            }),
            _ => Err(Error::internal("cached AWS credentials have three parts")),
        }
    }

    /// Checks what an endpoint answered: non-empty parts of visible ASCII (so that they
    /// go into headers and the cache's line form).
    pub(super) fn checked(self, from: &str) -> std::result::Result<Self, String> {
        let plain = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic());
        if plain(&self.key_id)
            && plain(&self.secret)
            && self.session_token.as_deref().is_none_or(plain)
        {
            Ok(self)
        } else {
            Err(format!(
                "{from} answered with credentials that are not plain text"
            ))
        }
    }
}
