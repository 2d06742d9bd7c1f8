//! What the signature settings mean (`registry.verify`, `registry.trusted_certificates`):
//! the certificates a pull verifies against, or none when verification is off, and what to
//! warn about at start.

use std::sync::Arc;

use super::RemoteRegistryConfig;
use super::signature::UnixTime;
use super::trust::TrustedCertificates;
use crate::error::{Error, ErrorKind, Result};

/// The warning of `registry.verify: false`, at start and at each pull.
pub(crate) const VERIFY_OFF_WARNING: &str = "registry.verify is false: registry pull installs packages without verifying their signatures; use it for local development only";

/// How a package's signatures are to be checked.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SignaturePolicy<'a> {
    /// Against these certificates, at this time.
    Verify {
        /// The trusted certificates.
        trust: &'a TrustedCertificates,
        /// The time of the check.
        now: UnixTime,
    },
    /// Not at all (`registry.verify: false`).
    Skip,
}

impl<'a> SignaturePolicy<'a> {
    /// Verify against `trust` now, or skip when there is none (verification is off).
    pub(crate) fn now(trust: Option<&'a TrustedCertificates>) -> Self {
        match trust {
            Some(trust) => SignaturePolicy::Verify {
                trust,
                now: UnixTime::from_system(std::time::SystemTime::now()),
            },
            None => SignaturePolicy::Skip,
        }
    }
}

/// The certificates pulls verify against: StackQL's and the configured ones; `None` when
/// `config.verify` is false (the files are then not read). Fails naming a file that cannot
/// be read or holds a certificate that cannot verify documents.
pub(crate) fn trust_of(config: &RemoteRegistryConfig) -> Result<Option<Arc<TrustedCertificates>>> {
    if !config.verify {
        return Ok(None);
    }
    TrustedCertificates::load(&config.trusted_certificates)
        .map(|trust| Some(Arc::new(trust)))
        .map_err(|err| Error::new(ErrorKind::Registry, err.to_string()))
}

impl RemoteRegistryConfig {
    /// What whoever starts the server should know about package verification: that it is
    /// off, or that a trusted certificate is expired or not yet valid (documents it signed
    /// are refused). Unreadable certificate files are `Engine::new`'s error.
    pub fn start_warnings(&self) -> Vec<String> {
        if !self.verify {
            return vec![VERIFY_OFF_WARNING.to_owned()];
        }
        let Ok(trust) = TrustedCertificates::load(&self.trusted_certificates) else {
            return Vec::new();
        };
        trust
            .not_valid_at(UnixTime::from_system(std::time::SystemTime::now()))
            .into_iter()
            .map(|cert| {
                format!(
                    "trusted registry certificate {cert} is not valid now: packages it signed are refused by registry pull"
                )
            })
            .collect()
    }
}
