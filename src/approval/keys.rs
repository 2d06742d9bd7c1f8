//! The key ring that seals approval states: keys from mounted secret files (the first seals,
//! every one opens, so keys rotate without downtime), or one random key for a lone replica.

use std::path::Path;

use rmcp::model::RequestStateCodec;

use super::ApprovalError;
use crate::digest;

/// Fewest bytes a key may have.
pub const MIN_KEY_BYTES: usize = 32;

/// HMAC keys, the sealing one first. Key material never appears in `Debug` output.
pub struct KeyRing {
    keys: Vec<(String, Vec<u8>)>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(kid, _)| kid.as_str()).collect();
        f.debug_struct("KeyRing").field("key_ids", &ids).finish()
    }
}

impl KeyRing {
    /// Reads each file as one key: a text file (valid UTF-8, e.g. base64 from
    /// `openssl rand -base64 48`) without its trailing whitespace, so a final newline does
    /// not count; any other file byte for byte (raw random bytes may end in a byte that
    /// looks like whitespace). A file that cannot be read, or holds fewer than 32 bytes, is
    /// an error naming the file, never its content.
    pub fn from_files(files: &[impl AsRef<Path>]) -> Result<Self, ApprovalError> {
        let mut keys = Vec::new();
        for file in files {
            let file = file.as_ref();
            let mut bytes = std::fs::read(file).map_err(|err| {
                ApprovalError::Keys(format!("cannot read key file '{}': {err}", file.display()))
            })?;
            if std::str::from_utf8(&bytes).is_ok() {
                while bytes.last().is_some_and(u8::is_ascii_whitespace) {
                    bytes.pop();
                }
            }
            if bytes.len() < MIN_KEY_BYTES {
                return Err(ApprovalError::Keys(format!(
                    "key file '{}' holds {} bytes; a key needs at least {MIN_KEY_BYTES}",
                    file.display(),
                    bytes.len()
                )));
            }
            keys.push(bytes);
        }
        Self::from_keys(keys)
    }

    /// A ring of these keys, the first sealing. Empty: one random key.
    pub fn from_keys(keys: Vec<Vec<u8>>) -> Result<Self, ApprovalError> {
        let keys = if keys.is_empty() {
            vec![
                digest::random_bytes(MIN_KEY_BYTES)
                    .map_err(|_| ApprovalError::Keys("no randomness for a key".into()))?,
            ]
        } else {
            keys
        };
        let mut ring = Vec::new();
        for key in keys {
            if key.len() < MIN_KEY_BYTES {
                return Err(ApprovalError::Keys(format!(
                    "a key needs at least {MIN_KEY_BYTES} bytes"
                )));
            }
            // The key id is derived from the key, so replicas agree without configuration.
            let kid = digest::sha256_hex(&key)[..16].to_owned();
            if !ring.iter().any(|(k, _)| k == &kid) {
                ring.push((kid, key));
            }
        }
        Ok(KeyRing { keys: ring })
    }

    /// How many keys the ring holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the ring has no key (never true for a built ring).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub(super) fn codec(&self) -> Result<RequestStateCodec, ApprovalError> {
        let active = self
            .keys
            .first()
            .map(|(kid, _)| kid.clone())
            .ok_or_else(|| ApprovalError::Keys("no key".into()))?;
        RequestStateCodec::new_with_keyring(
            active,
            self.keys.iter().map(|(k, v)| (k.clone(), v.clone())),
        )
        .map_err(|err| ApprovalError::Keys(err.to_string()))
    }

    /// A codec over keys derived from this ring's for `purpose` (HMAC-SHA256 of the purpose
    /// under each key), rotating as the ring does: what it seals (the approval page's
    /// session cookies) never opens as an approval state, nor the other way round.
    pub fn derived_codec(&self, purpose: &str) -> Result<RequestStateCodec, ApprovalError> {
        let derived: Vec<(String, Vec<u8>)> = self
            .keys
            .iter()
            .map(|(kid, key)| {
                let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
                let tag = ring::hmac::sign(&key, purpose.as_bytes());
                (kid.clone(), tag.as_ref().to_vec())
            })
            .collect();
        let active = derived
            .first()
            .map(|(kid, _)| kid.clone())
            .ok_or_else(|| ApprovalError::Keys("no key".into()))?;
        RequestStateCodec::new_with_keyring(active, derived)
            .map_err(|err| ApprovalError::Keys(err.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_or_missing_files_are_refused_by_name_only() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, "s3cr3t-but-short\n").unwrap();
        let err = KeyRing::from_files(&[&short]).unwrap_err().to_string();
        assert!(err.contains("short") && !err.contains("s3cr3t"), "{err}");
        let err = KeyRing::from_files(&[dir.path().join("absent")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("absent"), "{err}");
        let good = dir.path().join("good");
        std::fs::write(&good, format!("{}\n", "k".repeat(32))).unwrap();
        let ring = KeyRing::from_files(&[&good]).unwrap();
        assert_eq!(ring.len(), 1);
        // Raw bytes are used as they are, even when they end in a newline byte.
        let raw = dir.path().join("raw");
        let mut bytes = vec![0xff; 31];
        bytes.push(b'\n');
        std::fs::write(&raw, &bytes).unwrap();
        assert!(KeyRing::from_files(&[&raw]).is_ok());
        assert!(!format!("{ring:?}").contains("kkkk"));
    }
}
