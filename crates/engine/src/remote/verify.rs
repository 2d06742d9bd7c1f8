//! Verifies provider documents against their `.sig` files, as StackQL's verifier does: a
//! trusted certificate valid now, whose validity strictly contains the signing time, whose
//! Ed25519 key verifies the signature over the document followed by the encoded signing
//! time. A package is verified file by file: every file but the `.sig` files must be
//! signed, and one refusal refuses the package.

use std::path::{Path, PathBuf};

use ring::signature::{ED25519, UnparsedPublicKey};

use super::signature::{self, MAX_SIGNATURE_FILE_BYTES, SignatureFile, UnixTime};
use super::trust::{SigningCertificate, TrustedCertificates};

/// Why a document was refused. Each names the document by its path in the package.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    /// No `.sig` beside the document.
    #[error("'{0}' is not signed: '{0}.sig' is missing")]
    Unsigned(String),
    /// The `.sig` file is unreadable.
    #[error("'{document}.sig' is not a StackQL signature: {reason}")]
    Malformed {
        /// The document.
        document: String,
        /// What is wrong with its signature file.
        reason: String,
    },
    /// No trusted key verifies the signature.
    #[error(
        "the signature of '{0}' does not verify with any trusted certificate: the document was changed after it was signed, its .sig belongs to another file, or it was signed by a key that is not trusted (registry.trusted_certificates adds certificates)"
    )]
    Untrusted(String),
    /// The key of a trusted certificate verifies the signature, but the signing time is
    /// outside that certificate's validity.
    #[error(
        "'{document}' was signed at {signed_at}, outside the validity of the certificate whose key verifies it, {certificate}"
    )]
    SignedOutsideValidity {
        /// The document.
        document: String,
        /// The signing time.
        signed_at: UnixTime,
        /// The certificate, described.
        certificate: String,
    },
    /// The certificate whose key verifies the signature is expired or not yet valid.
    #[error("'{document}' is signed by a certificate that is not valid now ({now}): {certificate}")]
    CertificateNotValid {
        /// The document.
        document: String,
        /// The time of the check.
        now: UnixTime,
        /// The certificate, described.
        certificate: String,
    },
    /// A file could not be read.
    #[error("cannot read '{path}': {reason}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        reason: String,
    },
}

/// A verified document: which certificate verified it, and when it was signed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Verified {
    /// Index of the certificate in [`TrustedCertificates::all`].
    pub(crate) certificate: usize,
    /// The signing time.
    pub(crate) signed_at: UnixTime,
}

/// Verifies `document` (named `name` in messages) against the `.sig` file `sig` at `now`.
/// The certificate at `preferred` (the one that verified the previous document) is tried
/// first, so a package signed by one key costs one hash of each document.
pub(crate) fn document(
    name: &str,
    document: &[u8],
    sig: &[u8],
    trust: &TrustedCertificates,
    now: UnixTime,
    preferred: Option<usize>,
) -> Result<Verified, Refusal> {
    let parsed = signature::parse(sig).map_err(|err| Refusal::Malformed {
        document: name.to_owned(),
        reason: err.to_string(),
    })?;
    let mut message = Vec::with_capacity(document.len() + parsed.time_bytes.len());
    message.extend_from_slice(document);
    message.extend_from_slice(&parsed.time_bytes);
    let all = trust.all();
    let usable =
        |c: &SigningCertificate| c.valid_at(now) && c.covers_signing_time(parsed.signed_at);
    let mut order: Vec<usize> = preferred.into_iter().filter(|i| *i < all.len()).collect();
    order.extend((0..all.len()).filter(|i| Some(*i) != preferred));
    for &index in &order {
        if let Some(cert) = all.get(index)
            && usable(cert)
            && verifies(cert, &message, &parsed)
        {
            return Ok(Verified {
                certificate: index,
                signed_at: parsed.signed_at,
            });
        }
    }
    // Refused: say why, from the certificates whose dates ruled them out. A certificate
    // of the signing time that is no longer valid explains more than one issued later.
    let matching: Vec<&SigningCertificate> = all
        .iter()
        .filter(|c| !usable(c) && verifies(c, &message, &parsed))
        .collect();
    if let Some(cert) = matching
        .iter()
        .find(|c| c.covers_signing_time(parsed.signed_at))
    {
        return Err(Refusal::CertificateNotValid {
            document: name.to_owned(),
            now,
            certificate: cert.describe(),
        });
    }
    if let Some(cert) = matching.first() {
        return Err(Refusal::SignedOutsideValidity {
            document: name.to_owned(),
            signed_at: parsed.signed_at,
            certificate: cert.describe(),
        });
    }
    Err(Refusal::Untrusted(name.to_owned()))
}

fn verifies(cert: &SigningCertificate, message: &[u8], sig: &SignatureFile) -> bool {
    UnparsedPublicKey::new(&ED25519, cert.key)
        .verify(message, &sig.signature)
        .is_ok()
}

/// What verifying a package found.
#[derive(Debug, Clone, Default)]
pub(crate) struct PackageSignatures {
    /// Documents verified.
    pub(crate) documents: usize,
    /// How many documents each trusted certificate verified, by index.
    pub(crate) by_certificate: Vec<usize>,
    /// The earliest and latest signing times.
    pub(crate) signed: Option<(UnixTime, UnixTime)>,
}

/// Verifies every file under `dir` (an unpacked package; `prefix` is how messages name
/// `dir`, e.g. `v0.1.2`) except `.sig` files against its `.sig`, at `now`.
pub(crate) fn package(
    dir: &Path,
    prefix: &str,
    trust: &TrustedCertificates,
    now: UnixTime,
) -> Result<PackageSignatures, Refusal> {
    let mut files = Vec::new();
    walk(dir, &mut files)?;
    files.sort();
    let mut found = PackageSignatures {
        by_certificate: vec![0; trust.all().len()],
        ..Default::default()
    };
    let mut last = None;
    for path in files {
        if path.extension().is_some_and(|e| e == "sig") {
            continue;
        }
        let relative = path.strip_prefix(dir).unwrap_or(&path);
        let name = format!("{prefix}/{}", relative.display());
        let mut sig_path = path.clone().into_os_string();
        sig_path.push(".sig");
        let sig_path = PathBuf::from(sig_path);
        let sig = match read_capped(&sig_path, MAX_SIGNATURE_FILE_BYTES as u64 + 1) {
            Ok(sig) => sig,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(Refusal::Unsigned(name));
            }
            Err(err) => return Err(read_error(&sig_path, err)),
        };
        let body = std::fs::read(&path).map_err(|err| read_error(&path, err))?;
        let verified = document(&name, &body, &sig, trust, now, last)?;
        last = Some(verified.certificate);
        found.documents += 1;
        if let Some(count) = found.by_certificate.get_mut(verified.certificate) {
            *count += 1;
        }
        let at = verified.signed_at;
        found.signed = Some(match found.signed {
            None => (at, at),
            Some((first, latest)) => (first.min(at), latest.max(at)),
        });
    }
    Ok(found)
}

fn read_error(path: &Path, err: std::io::Error) -> Refusal {
    Refusal::Read {
        path: path.display().to_string(),
        reason: err.to_string(),
    }
}

/// Reads at most `limit` bytes of `path` (a `.sig` file larger than a signature is refused
/// by [`signature::parse`] without reading it all).
fn read_capped(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    std::fs::File::open(path)?
        .take(limit)
        .read_to_end(&mut out)?;
    Ok(out)
}

/// Regular files under `dir`, recursively (the unpacked package holds nothing else).
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Refusal> {
    let entries = std::fs::read_dir(dir).map_err(|err| read_error(dir, err))?;
    for entry in entries {
        let entry = entry.map_err(|err| read_error(dir, err))?;
        let kind = entry
            .file_type()
            .map_err(|err| read_error(&entry.path(), err))?;
        if kind.is_dir() {
            walk(&entry.path(), out)?;
        } else {
            out.push(entry.path());
        }
    }
    Ok(())
}

/// Verifies every document of the unpacked package `dir` (named `prefix` in messages)
/// against StackQL's certificate and those of `trusted_certificates`, now; the number of
/// documents verified. For tests and measurements.
#[cfg(any(test, feature = "test-support"))]
pub fn verify_folder(
    dir: &Path,
    prefix: &str,
    trusted_certificates: &[PathBuf],
) -> Result<usize, String> {
    let trust = TrustedCertificates::load(trusted_certificates).map_err(|err| err.to_string())?;
    let now = UnixTime::from_system(std::time::SystemTime::now());
    package(dir, prefix, &trust, now)
        .map(|found| found.documents)
        .map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests;
