//! mTLS: the verified client certificate's identity (URI SAN such as a SPIFFE id, then DNS
//! SAN, then subject CN; the first one `auth.mtls.identities` names) mapped to a tenant.
//! rustls has verified the chain against the client CA bundle and the validity period
//! before any request is read.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use http::request::Parts;
use sha2::{Digest, Sha256};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::{AuthError, Authenticator, Method, PeerCertificates, Principal};
use crate::config::MtlsConfig;

/// Maps client certificates to principals.
#[derive(Debug)]
pub struct MtlsAuthenticator {
    identities: BTreeMap<String, String>,
}

impl MtlsAuthenticator {
    /// From `auth.mtls`.
    pub fn new(config: &MtlsConfig) -> Self {
        MtlsAuthenticator {
            identities: config.identities.clone(),
        }
    }

    fn principal(&self, leaf: &[u8]) -> Result<Principal, AuthError> {
        let (_, cert) = X509Certificate::from_der(leaf)
            .map_err(|_| AuthError::Forbidden("the client certificate cannot be parsed".into()))?;
        let identity = identities(&cert)
            .into_iter()
            .find(|id| self.identities.contains_key(id))
            .ok_or_else(|| {
                AuthError::Forbidden(
                    "the client certificate's identity is not mapped to a tenant".into(),
                )
            })?;
        let tenant = self.identities.get(&identity).cloned().unwrap_or_default();
        Ok(Principal {
            subject: identity,
            tenant,
            method: Method::Mtls,
            fingerprint: Some(fingerprint(leaf)),
            tools: None,
        })
    }
}

impl Authenticator for MtlsAuthenticator {
    fn authenticate<'a>(
        &'a self,
        parts: &'a Parts,
    ) -> BoxFuture<'a, Result<Option<Principal>, AuthError>> {
        let result = match parts
            .extensions
            .get::<PeerCertificates>()
            .and_then(|certs| certs.0.first())
        {
            Some(leaf) => self.principal(leaf.as_ref()).map(Some),
            None => Ok(None),
        };
        Box::pin(async move { result })
    }
}

/// The certificate's candidate identities in order: URI SANs, DNS SANs, subject CNs.
pub fn identities(cert: &X509Certificate<'_>) -> Vec<String> {
    let mut uris = Vec::new();
    let mut dns = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::URI(uri) => uris.push((*uri).to_owned()),
                GeneralName::DNSName(name) => dns.push((*name).to_owned()),
                _ => {}
            }
        }
    }
    let cns = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_owned));
    uris.into_iter().chain(dns).chain(cns).collect()
}

/// SHA-256 of a DER certificate, lower-case hex.
pub fn fingerprint(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
