//! OCI request signatures, version 1 (Oracle's profile of draft-cavage-http-signatures-08):
//! each request is signed just before it is sent. The signing string is the lines
//! `date: …`, `(request-target): <method> <path>?<query>` and `host: …`; POST, PUT and
//! PATCH add `content-length`, `content-type` and `x-content-sha256` (the base64 SHA-256 of
//! the body, set on the request; an absent body counts as empty, a missing content type
//! is sent as `application/json`). The string is signed with RSASSA-PKCS1-v1_5 SHA-256
//! and sent as `Authorization: Signature version="1",headers="…",keyId="<tenancy>/<user>/
//! <fingerprint>",algorithm="rsa-sha256",signature="…"`.

use std::sync::Arc;
use std::time::SystemTime;

use base64::Engine as _;
use reqwest::header::{HeaderName, HeaderValue};
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use sha2::{Digest as _, Sha256};

use super::super::credential_error;
use crate::error::{Error, Result};
use crate::upstream::RequestSigner;

/// The content type a body-bearing request is signed with when it has none.
const DEFAULT_CONTENT_TYPE: &str = "application/json";

/// What a request is signed over, before the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Headers to set on the request (`date`, and for bodies `content-length`,
    /// `content-type`, `x-content-sha256`).
    pub(crate) set: Vec<(&'static str, String)>,
    /// The signed header names, in signing order.
    pub(crate) names: Vec<&'static str>,
    /// The signing string.
    pub(crate) signing_string: String,
}

/// Whether `method` carries a body whose headers are signed.
fn has_body(method: &str) -> bool {
    matches!(method, "POST" | "PUT" | "PATCH")
}

/// The plan for a request: `method` (upper case), its final `url`, the `date` it is sent
/// at (an HTTP date), its body and its content type, if any.
pub(crate) fn plan(
    method: &str,
    url: &url::Url,
    date: &str,
    body: Option<&[u8]>,
    content_type: Option<&str>,
) -> Plan {
    let mut target = format!("{} {}", method.to_ascii_lowercase(), url.path());
    if let Some(query) = url.query() {
        target.push('?');
        target.push_str(query);
    }
    let host = match url.port() {
        Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
        None => url.host_str().unwrap_or_default().to_owned(),
    };
    let mut set = vec![("date", date.to_owned())];
    let mut lines = vec![
        ("date", date.to_owned()),
        ("(request-target)", target),
        ("host", host),
    ];
    if has_body(method) {
        let body = body.unwrap_or_default();
        let sha = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(body));
        let content_type = content_type.unwrap_or(DEFAULT_CONTENT_TYPE).to_owned();
        for (name, value) in [
            ("content-length", body.len().to_string()),
            ("content-type", content_type),
            ("x-content-sha256", sha),
        ] {
            set.push((name, value.clone()));
            lines.push((name, value));
        }
    }
    let signing_string = lines
        .iter()
        .map(|(name, value)| format!("{name}: {value}"))
        .collect::<Vec<_>>()
        .join("\n");
    Plan {
        set,
        names: lines.iter().map(|(name, _)| *name).collect(),
        signing_string,
    }
}

/// The `Authorization` value for a signature (base64) over `names` by `key_id`.
pub(crate) fn authorization(key_id: &str, names: &[&str], signature: &str) -> String {
    format!(
        "Signature version=\"1\",headers=\"{}\",keyId=\"{key_id}\",algorithm=\"rsa-sha256\",signature=\"{signature}\"",
        names.join(" ")
    )
}

/// Signs one provider's requests with one API key. Its `Debug` shows the key id (OCIDs
/// and the key's fingerprint, none of them secret), never the key.
pub(crate) struct Signer {
    provider: String,
    key_id: String,
    key: Arc<RsaKeyPair>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OciSigner")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer for `provider` as `<tenancy>/<user>/<fingerprint>` with `key`.
    pub(crate) fn new(provider: &str, key_id: String, key: Arc<RsaKeyPair>) -> Self {
        Signer {
            provider: provider.to_owned(),
            key_id,
            key,
        }
    }

    /// The base64 RSA-SHA256 signature of `message`.
    pub(crate) fn signature(&self, message: &[u8]) -> Result<String> {
        let mut out = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                message,
                &mut out,
            )
            .map_err(|_| credential_error(&self.provider, "the OCI request could not be signed"))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(out))
    }

    /// Signs `request` as sent at `date` (an HTTP date).
    pub(crate) fn sign_at(&self, request: &mut reqwest::Request, date: &str) -> Result<()> {
        let method = request.method().as_str().to_owned();
        let body = match request.body() {
            None => None,
            Some(body) => Some(body.as_bytes().ok_or_else(|| {
                credential_error(
                    &self.provider,
                    "a streamed request body cannot be signed for OCI",
                )
            })?),
        };
        let content_type = request
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let plan = plan(&method, request.url(), date, body, content_type);
        let signature = self.signature(plan.signing_string.as_bytes())?;
        let value = authorization(&self.key_id, &plan.names, &signature);
        let headers = request.headers_mut();
        for (name, value) in plan.set {
            headers.insert(HeaderName::from_static(name), header_value(&value)?);
        }
        headers.insert(reqwest::header::AUTHORIZATION, header_value(&value)?);
        Ok(())
    }
}

fn header_value(value: &str) -> Result<HeaderValue> {
    HeaderValue::from_str(value)
        .map_err(|_| Error::internal("an OCI signature header is not a valid header value"))
}

impl RequestSigner for Signer {
    fn sign(&self, request: &mut reqwest::Request) -> Result<()> {
        self.sign_at(request, &httpdate::fmt_http_date(SystemTime::now()))
    }

    fn secrets(&self) -> Vec<String> {
        // The key never leaves ring; signatures and the key id are not secret.
        Vec::new()
    }
}
