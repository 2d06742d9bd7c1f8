//! The install record: `<version>/.querygate-install.json`, written into a package as it is
//! installed, saying where it came from, when, and whether and how its signatures were
//! verified. The engine never reads it back; it is for the operator (and a later audit of
//! the registry folder).

use std::path::Path;

use serde_json::{Value, json};

use super::trust::TrustedCertificates;
use super::verify::PackageSignatures;

/// The record's file name, inside the installed version folder. A package holding a file
/// of this name is refused.
pub(crate) const RECORD_FILE: &str = ".querygate-install.json";

/// How a package's signatures were checked.
#[derive(Debug, Clone)]
pub(crate) enum Checked {
    /// Every document verified.
    Verified(PackageSignatures),
    /// Not checked: `registry.verify` is false.
    Skipped,
}

/// The record of `provider` `version` fetched from `package` (a URL without credentials).
pub(crate) fn record(
    provider: &str,
    version: &str,
    package: &str,
    checked: &Checked,
    trust: Option<&TrustedCertificates>,
) -> Value {
    let signatures = match checked {
        Checked::Skipped => json!({
            "verified": false,
            "reason": "registry.verify is false",
        }),
        Checked::Verified(found) => {
            let certificates: Vec<Value> = trust
                .map(TrustedCertificates::all)
                .unwrap_or_default()
                .iter()
                .zip(&found.by_certificate)
                .filter(|(_, count)| **count > 0)
                .map(|(cert, count)| {
                    json!({
                        "subject": cert.subject,
                        "sha256": cert.sha256,
                        "source": cert.source,
                        "not_before": cert.not_before.to_string(),
                        "not_after": cert.not_after.to_string(),
                        "documents": count,
                    })
                })
                .collect();
            json!({
                "verified": true,
                "scheme": "stackql-ed25519",
                "documents": found.documents,
                "signed_from": found.signed.map(|(first, _)| first.to_string()),
                "signed_to": found.signed.map(|(_, last)| last.to_string()),
                "certificates": certificates,
            })
        }
    };
    json!({
        "provider": provider,
        "version": version,
        "package": package,
        "installed_at": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "signatures": signatures,
    })
}

/// Writes `record` as `dir/.querygate-install.json`.
pub(crate) fn write(dir: &Path, record: &Value) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(record).map_err(std::io::Error::other)?;
    text.push('\n');
    std::fs::write(dir.join(RECORD_FILE), text)
}
