//! The certificates whose keys may sign provider documents: StackQL's (embedded, as
//! StackQL embeds it) plus those configured for private registries
//! (`registry.trusted_certificates`).
//!
//! Each is a signing certificate, trusted as it is: a `.sig` file names no certificate and
//! carries no chain, so the verifier tries each trusted certificate's key, as StackQL's does
//! with its signing bundle (whose one certificate is also its root). A certificate must hold
//! an Ed25519 key, and if it has a key usage extension, `digitalSignature` must be in it.

use std::path::{Path, PathBuf};

use sha2::Digest;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::signature::UnixTime;

/// StackQL's signing certificate, as `stackql/stackql-provider-registry` embeds it
/// (`signing/Ed25519/app/edcrypto/embeddedcerts/`; see `data/signing/README.md`).
const STACKQL_CERTIFICATES: &[u8] =
    include_bytes!("../../data/signing/stackql-signing-certificates.pem");

/// The Ed25519 algorithm identifier (RFC 8410).
const ED25519_OID: &str = "1.3.101.112";

/// One trusted signing certificate.
#[derive(Clone)]
pub(crate) struct SigningCertificate {
    /// The Ed25519 public key.
    pub(crate) key: [u8; 32],
    /// Start of validity.
    pub(crate) not_before: UnixTime,
    /// End of validity.
    pub(crate) not_after: UnixTime,
    /// The subject, as `O=…, CN=…`.
    pub(crate) subject: String,
    /// SHA-256 of the DER, lowercase hex.
    pub(crate) sha256: String,
    /// Where it came from: `StackQL` or the configured file.
    pub(crate) source: String,
}

impl std::fmt::Debug for SigningCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningCertificate")
            .field("subject", &self.subject)
            .field("not_before", &self.not_before.to_string())
            .field("not_after", &self.not_after.to_string())
            .field("sha256", &self.sha256)
            .field("source", &self.source)
            .finish()
    }
}

impl SigningCertificate {
    /// `O=…, CN=… (valid <from> to <to>)`: how messages name it.
    pub(crate) fn describe(&self) -> String {
        format!(
            "'{}' from {} (valid {} to {})",
            self.subject, self.source, self.not_before, self.not_after
        )
    }

    /// Whether `at` is within the validity period, bounds included (the certificate is
    /// usable now).
    pub(crate) fn valid_at(&self, at: UnixTime) -> bool {
        self.not_before <= at && at <= self.not_after
    }

    /// Whether `at` is strictly inside the validity period, as StackQL requires of a
    /// signing time.
    pub(crate) fn covers_signing_time(&self, at: UnixTime) -> bool {
        self.not_before < at && at < self.not_after
    }
}

/// Why a trusted certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TrustError {
    /// The file could not be read.
    #[error("registry.trusted_certificates: cannot read '{path}': {reason}")]
    Read {
        /// The configured path.
        path: PathBuf,
        /// The I/O error.
        reason: String,
    },
    /// The file is not PEM, or holds no `CERTIFICATE` block.
    #[error("registry.trusted_certificates: '{source_name}' {reason}")]
    Pem {
        /// The configured path (or `StackQL`).
        source_name: String,
        /// What is wrong.
        reason: String,
    },
    /// A certificate is not usable for verifying document signatures.
    #[error("registry.trusted_certificates: '{source_name}': certificate {index} {reason}")]
    Certificate {
        /// The configured path (or `StackQL`).
        source_name: String,
        /// Which certificate of the file, from 1.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

/// The trusted signing certificates.
#[derive(Debug, Clone)]
pub(crate) struct TrustedCertificates {
    certificates: Vec<SigningCertificate>,
}

impl TrustedCertificates {
    /// StackQL's embedded certificate, then every certificate of each file of `extra`.
    pub(crate) fn load(extra: &[PathBuf]) -> Result<Self, TrustError> {
        let mut certificates = parse_pem(STACKQL_CERTIFICATES, "StackQL")?;
        for path in extra {
            let pem = std::fs::read(path).map_err(|err| TrustError::Read {
                path: path.clone(),
                reason: err.to_string(),
            })?;
            certificates.extend(parse_pem(&pem, &shown(path))?);
        }
        Ok(TrustedCertificates { certificates })
    }

    /// Every trusted certificate, StackQL's first.
    pub(crate) fn all(&self) -> &[SigningCertificate] {
        &self.certificates
    }

    /// Trusted certificates not valid at `now` (expired or not yet valid), described, for
    /// a warning at start: documents they signed will be refused.
    pub(crate) fn not_valid_at(&self, now: UnixTime) -> Vec<String> {
        self.certificates
            .iter()
            .filter(|c| !c.valid_at(now))
            .map(SigningCertificate::describe)
            .collect()
    }
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

/// Every `CERTIFICATE` block of `pem` (other blocks are ignored), each checked.
fn parse_pem(pem: &[u8], source: &str) -> Result<Vec<SigningCertificate>, TrustError> {
    let pem_error = |reason: String| TrustError::Pem {
        source_name: source.to_owned(),
        reason,
    };
    let mut out = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let block = block.map_err(|err| pem_error(format!("is not a PEM file: {err}")))?;
        if block.label != "CERTIFICATE" {
            continue;
        }
        let index = out.len() + 1;
        let cert_error = |reason: String| TrustError::Certificate {
            source_name: source.to_owned(),
            index,
            reason,
        };
        out.push(certificate(&block.contents, source).map_err(cert_error)?);
    }
    if out.is_empty() {
        return Err(pem_error("holds no CERTIFICATE block".to_owned()));
    }
    Ok(out)
}

fn certificate(der: &[u8], source: &str) -> Result<SigningCertificate, String> {
    let (_, cert) = X509Certificate::from_der(der)
        .map_err(|err| format!("is not an X.509 certificate: {err}"))?;
    let spki = cert.public_key();
    let algorithm = spki.algorithm.algorithm.to_id_string();
    if algorithm != ED25519_OID {
        return Err(format!(
            "('{}') holds a {algorithm} key, not Ed25519: StackQL signs documents with Ed25519",
            cert.subject()
        ));
    }
    let key: [u8; 32] = spki
        .subject_public_key
        .data
        .as_ref()
        .try_into()
        .map_err(|_| format!("('{}') holds a malformed Ed25519 key", cert.subject()))?;
    if let Ok(Some(usage)) = cert.key_usage()
        && !usage.value.digital_signature()
    {
        return Err(format!(
            "('{}') has a key usage without digitalSignature: it may not sign documents",
            cert.subject()
        ));
    }
    let validity = cert.validity();
    Ok(SigningCertificate {
        key,
        not_before: UnixTime::at_second(validity.not_before.timestamp()),
        not_after: UnixTime::at_second(validity.not_after.timestamp()),
        subject: cert.subject().to_string(),
        sha256: hex(&sha2::Sha256::digest(der)),
        source: source.to_owned(),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stackql_certificate_is_embedded() {
        let trust = TrustedCertificates::load(&[]).unwrap();
        let [stackql] = trust.all() else {
            panic!("one embedded certificate")
        };
        assert_eq!(stackql.subject, "O=StackQL Studios, CN=Jeffrey Aven");
        assert_eq!(stackql.not_before.to_string(), "2025-02-27T21:15:00Z");
        assert_eq!(stackql.not_after.to_string(), "2027-08-16T21:15:00Z");
        assert_eq!(
            stackql.sha256,
            "a38d3fd64bb04b3800eaf46f8eb07f10721b26c6907b5bec85a913764e9383bc"
        );
        assert!(stackql.valid_at(stackql.not_after));
        assert!(!stackql.covers_signing_time(stackql.not_after));
    }

    #[test]
    fn configured_files_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let old = write(
            "old.pem",
            include_str!("../../data/signing/tests/stackql-2022-02-12.pem"),
        );
        let trust = TrustedCertificates::load(std::slice::from_ref(&old)).unwrap();
        assert_eq!(trust.all().len(), 2);
        assert_eq!(trust.all()[1].source, old.display().to_string());
        let now = UnixTime::at_second(1_767_225_600); // 2026-01-01
        let stale = trust.not_valid_at(now);
        assert_eq!(stale.len(), 1);
        assert!(stale[0].contains("2024-02-12T10:55:05Z"), "{stale:?}");

        let missing = dir.path().join("missing.pem");
        let err = TrustedCertificates::load(&[missing]).unwrap_err();
        assert!(err.to_string().contains("cannot read"), "{err}");
        let err = TrustedCertificates::load(&[write("empty.pem", "hello\n")]).unwrap_err();
        assert!(
            err.to_string().contains("holds no CERTIFICATE block"),
            "{err}"
        );

        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let ecdsa = rcgen::CertificateParams::new(vec!["x".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let err = TrustedCertificates::load(&[write("ec.pem", &ecdsa.pem())]).unwrap_err();
        assert!(err.to_string().contains("not Ed25519"), "{err}");

        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["x".to_owned()]).unwrap();
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let ca_only = params.self_signed(&key).unwrap();
        let err = TrustedCertificates::load(&[write("ca.pem", &ca_only.pem())]).unwrap_err();
        assert!(err.to_string().contains("digitalSignature"), "{err}");
    }
}
