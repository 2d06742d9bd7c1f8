//! What auth adds to a request (headers, query parameters, a signer), applied to each
//! request once it is fully built. How a provider's auth resolves into it is `identity`'s.

use crate::error::{Error, Result};

/// Signs a built request (AWS Signature Version 4), over its final URL, headers and body.
pub(crate) trait RequestSigner: Send + Sync + std::fmt::Debug {
    /// Signs `request` as it will be sent, now.
    fn sign(&self, request: &mut reqwest::Request) -> Result<()>;

    /// The secret values the signer holds, for scrubbing them out of error bodies.
    fn secrets(&self) -> Vec<String>;
}

/// What auth adds to a request.
#[derive(Default)]
pub(crate) struct AuthParts {
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) query: Vec<(String, String)>,
    /// Signs each request once it is built (`aws_signing_v4`).
    pub(crate) signer: Option<Box<dyn RequestSigner>>,
    /// The provider whose API the requests go to (for metrics and spans); empty for
    /// requests that are not a provider's API (token endpoints).
    pub(crate) provider: String,
}

impl std::fmt::Debug for AuthParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only.
        f.debug_struct("AuthParts")
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field(
                "query",
                &self.query.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("signer", &self.signer)
            .field("provider", &self.provider)
            .finish()
    }
}

impl AuthParts {
    /// Adds the auth to a built request: query parameters, then headers (marked
    /// sensitive so they never show in debug output), then the signature if any, over
    /// the final URL, headers and body.
    pub(crate) fn apply(&self, request: &mut reqwest::Request) -> Result<()> {
        if !self.query.is_empty() {
            let mut pairs = request.url_mut().query_pairs_mut();
            for (name, value) in &self.query {
                pairs.append_pair(name, value);
            }
        }
        for (name, value) in &self.headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| Error::internal("auth header was validated when resolved"))?;
            let mut value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|_| Error::internal("auth header was validated when resolved"))?;
            value.set_sensitive(true);
            request.headers_mut().insert(name, value);
        }
        if let Some(signer) = &self.signer {
            signer.sign(request)?;
        }
        Ok(())
    }
}
