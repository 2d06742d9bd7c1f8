//! mTLS: the verified client certificate's identities mapped to a tenant. Identities are
//! typed ([`CertIdentity`]): a URI SAN (a SPIFFE id), a DNS SAN, or the subject CN, which
//! counts only for a certificate without any SAN unless `auth.mtls.cn_with_sans` is set.
//! A name of one type never matches an identity of another, so a CN that reads like a
//! SPIFFE id is only a CN. rustls has verified the chain against the client CA bundle and
//! the validity period before any request is read.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use http::request::Parts;
use sha2::{Digest, Sha256};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::{AuthError, Authenticator, Forbidden, Method, PeerCertificates, Principal};
use crate::config::{CertIdentity, MtlsConfig};

/// Maps client certificates to principals.
#[derive(Debug)]
pub struct MtlsAuthenticator {
    identities: BTreeMap<CertIdentity, String>,
    cn_with_sans: bool,
}

impl MtlsAuthenticator {
    /// From `auth.mtls`.
    pub fn new(config: &MtlsConfig) -> Self {
        MtlsAuthenticator {
            identities: config.identities.clone(),
            cn_with_sans: config.cn_with_sans,
        }
    }

    fn principal(&self, leaf: &[u8]) -> Result<Principal, AuthError> {
        let invalid = || {
            AuthError::Forbidden(
                Forbidden::CertificateInvalid,
                "the client certificate cannot be parsed".into(),
            )
        };
        let (_, cert) = X509Certificate::from_der(leaf).map_err(|_| invalid())?;
        let names = CertificateNames::of(&cert).ok_or_else(invalid)?;
        let mut mapped = names
            .identities(self.cn_with_sans)
            .into_iter()
            .filter_map(|id| self.identities.get(&id).map(|tenant| (id, tenant)));
        let Some((identity, tenant)) = mapped.next() else {
            return Err(AuthError::Forbidden(
                Forbidden::CertificateUnmapped,
                "the client certificate's identity is not mapped to a tenant".into(),
            ));
        };
        if mapped.any(|(_, other)| other != tenant) {
            return Err(AuthError::Forbidden(
                Forbidden::CertificateAmbiguous,
                "the client certificate's identities are mapped to different tenants".into(),
            ));
        }
        Ok(Principal {
            subject: identity.to_string(),
            tenant: tenant.clone(),
            method: Method::Mtls,
            issuer: None,
            fingerprint: Some(fingerprint(leaf)),
            tools: None,
            query_scopes: None,
            claims: None,
            groups: Vec::new(),
            subject_token: None,
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

/// The names a certificate carries.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CertificateNames {
    /// URI SANs.
    pub uris: Vec<String>,
    /// DNS SANs.
    pub dns: Vec<String>,
    /// Subject CNs.
    pub cns: Vec<String>,
    /// Whether the certificate has a SAN of any kind (also IP addresses, e-mail, …).
    pub has_sans: bool,
}

impl CertificateNames {
    /// The names of `cert`; `None` when its SAN extension cannot be read.
    pub fn of(cert: &X509Certificate<'_>) -> Option<Self> {
        let mut names = CertificateNames::default();
        if let Some(san) = cert.subject_alternative_name().ok()? {
            names.has_sans = !san.value.general_names.is_empty();
            for name in &san.value.general_names {
                match name {
                    GeneralName::URI(uri) => names.uris.push((*uri).to_owned()),
                    GeneralName::DNSName(name) => names.dns.push((*name).to_owned()),
                    _ => {}
                }
            }
        }
        names.cns = cert
            .subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
            .collect();
        Some(names)
    }

    /// The identities to look up, in order: URI SANs, DNS SANs, then the CNs when the
    /// certificate has no SAN or `cn_with_sans` says they count anyway.
    pub fn identities(&self, cn_with_sans: bool) -> Vec<CertIdentity> {
        let cns = (!self.has_sans || cn_with_sans).then_some(&self.cns);
        self.uris
            .iter()
            .map(|uri| CertIdentity::Uri(uri.clone()))
            .chain(self.dns.iter().map(|name| CertIdentity::dns(name)))
            .chain(
                cns.into_iter()
                    .flatten()
                    .map(|cn| CertIdentity::Cn(cn.clone())),
            )
            .collect()
    }
}

/// SHA-256 of a DER certificate, lower-case hex.
pub fn fingerprint(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(uris: &[&str], dns: &[&str], cns: &[&str], other_sans: bool) -> CertificateNames {
        let own = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect();
        CertificateNames {
            uris: own(uris),
            dns: own(dns),
            cns: own(cns),
            has_sans: other_sans || !uris.is_empty() || !dns.is_empty(),
        }
    }

    #[test]
    fn the_cn_counts_only_without_sans_unless_configured() {
        let typed = |n: &CertificateNames, with: bool| -> Vec<String> {
            n.identities(with).iter().map(ToString::to_string).collect()
        };
        let with_sans = names(
            &["spiffe://x/a"],
            &["Host.Example"],
            &["spiffe://x/b"],
            false,
        );
        assert_eq!(
            typed(&with_sans, false),
            ["uri:spiffe://x/a", "dns:host.example"]
        );
        assert_eq!(
            typed(&with_sans, true),
            ["uri:spiffe://x/a", "dns:host.example", "cn:spiffe://x/b"]
        );
        // An IP address SAN is a SAN too.
        assert_eq!(
            typed(&names(&[], &[], &["agent"], true), false),
            Vec::<String>::new()
        );
        assert_eq!(
            typed(&names(&[], &[], &["agent"], false), false),
            ["cn:agent"]
        );
    }
}
