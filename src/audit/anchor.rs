//! The audit key and the MACs that anchor the hash chains (`audit.mac_key_file`). The chain
//! alone shows edits, but anyone who can write the records can recompute every hash; a MAC
//! under a key that only querygate and the auditor hold (never the database role, never the
//! log folder) cannot be recomputed.
//!
//! - A record's MAC is HMAC-SHA256 over its hash (which covers its canonical JSON, stream,
//!   seq and predecessor): one HMAC of 64 bytes per record.
//! - A head's MAC covers the stream, the seq, the hash and the time it was written, under
//!   another label, so a record's MAC can never pass for a head's.

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

use crate::digest::hex;

/// The shortest key accepted.
pub const MIN_KEY_BYTES: usize = 32;

/// What a record's MAC covers before its hash.
const RECORD_LABEL: &[u8] = b"querygate-audit-record-v2\0";

/// What a head's MAC covers before its fields.
const HEAD_LABEL: &[u8] = b"querygate-audit-head-v2\0";

/// What a retention cut's MAC covers before its fields.
const CUT_LABEL: &[u8] = b"querygate-audit-cut-v1\0";

/// The audit key, ready to MAC (the key's pads computed once).
#[derive(Clone)]
pub struct MacKey {
    prepared: Hmac<Sha256>,
    id: String,
}

impl std::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MacKey").field("id", &self.id).finish()
    }
}

impl PartialEq for MacKey {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for MacKey {}

/// Why a key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read.
    #[error("cannot read audit.mac_key_file '{path}': {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The key is too short.
    #[error("audit.mac_key_file '{0}' must hold at least {MIN_KEY_BYTES} bytes")]
    TooShort(String),
}

impl MacKey {
    /// A key from bytes; `None` when shorter than [`MIN_KEY_BYTES`].
    pub fn new(bytes: &[u8]) -> Option<MacKey> {
        if bytes.len() < MIN_KEY_BYTES {
            return None;
        }
        let prepared = Hmac::<Sha256>::new_from_slice(bytes).ok()?;
        // An id that names the key without revealing it (for "another key" messages).
        let mut id = Hmac::<Sha256>::new_from_slice(bytes).ok()?;
        id.update(b"querygate-audit-key-id\0");
        let id = hex(&id.finalize().into_bytes())[..16].to_owned();
        Some(MacKey { prepared, id })
    }

    /// Reads the key file (its bytes as they are, at least [`MIN_KEY_BYTES`]).
    pub fn load(path: &std::path::Path) -> Result<MacKey, KeyError> {
        let bytes = std::fs::read(path).map_err(|source| KeyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        MacKey::new(&bytes).ok_or_else(|| KeyError::TooShort(path.display().to_string()))
    }

    /// A short public id of the key (an HMAC of a fixed label).
    pub fn id(&self) -> &str {
        &self.id
    }

    fn mac(&self, parts: &[&[u8]]) -> String {
        let mut mac = self.prepared.clone();
        for part in parts {
            mac.update(part);
        }
        hex(&mac.finalize().into_bytes())
    }

    /// The MAC of the record whose hash is `hash`.
    pub fn record_mac(&self, hash: &str) -> String {
        self.mac(&[RECORD_LABEL, hash.as_bytes()])
    }

    /// The MAC of a head: `stream` reached `seq` with `hash`, written at `at`.
    pub fn head_mac(&self, stream: &str, seq: u64, hash: &str, at: &str) -> String {
        self.mac(&[
            HEAD_LABEL,
            stream.as_bytes(),
            b"\0",
            seq.to_string().as_bytes(),
            b"\0",
            hash.as_bytes(),
            b"\0",
            at.as_bytes(),
        ])
    }
}

impl MacKey {
    /// The MAC of a retention cut: its fields (partition, range, action, stream, seqs, last
    /// hash, count, time) in order, each followed by a NUL.
    pub fn cut_mac(&self, fields: &[&str]) -> String {
        let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * fields.len() + 1);
        parts.push(CUT_LABEL);
        for field in fields {
            parts.push(field.as_bytes());
            parts.push(b"\0");
        }
        self.mac(&parts)
    }
}

/// Compares two hex MACs in time that does not depend on where they differ.
pub fn same_mac(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_depend_on_the_key_the_label_and_every_field() {
        let key = MacKey::new(&[7u8; 32]).unwrap();
        let other = MacKey::new(&[8u8; 32]).unwrap();
        assert!(MacKey::new(&[7u8; 31]).is_none());
        let hash = "ab".repeat(32);
        let mac = key.record_mac(&hash);
        assert_eq!(mac.len(), 64);
        assert_eq!(mac, key.record_mac(&hash), "deterministic");
        assert_ne!(mac, other.record_mac(&hash));
        assert_ne!(mac, key.record_mac(&"ac".repeat(32)));
        let head = key.head_mac("r1", 3, &hash, "t");
        assert_ne!(head, mac, "a record's MAC is never a head's");
        for changed in [
            key.head_mac("r2", 3, &hash, "t"),
            key.head_mac("r1", 4, &hash, "t"),
            key.head_mac("r1", 3, &"cd".repeat(32), "t"),
            key.head_mac("r1", 3, &hash, "u"),
        ] {
            assert_ne!(changed, head);
        }
        assert_ne!(key.id(), other.id());
        assert!(!format!("{key:?}").contains("0707"));
        assert!(same_mac(&mac, &mac.clone()));
        assert!(!same_mac(&mac, &head));
        assert!(!same_mac(&mac, &mac[..63]));
    }

    #[test]
    fn a_cut_mac_covers_every_field_and_their_boundaries() {
        let key = MacKey::new(&[7u8; 32]).unwrap();
        let mac = key.cut_mac(&["p1", "drop", "r1", "1", "4"]);
        assert_eq!(mac, key.cut_mac(&["p1", "drop", "r1", "1", "4"]));
        assert_ne!(mac, key.cut_mac(&["p1", "drop", "r1", "1", "5"]));
        assert_ne!(mac, key.cut_mac(&["p1", "drop", "r11", "", "4"]));
        assert_ne!(
            mac,
            MacKey::new(&[8u8; 32])
                .unwrap()
                .cut_mac(&["p1", "drop", "r1", "1", "4"])
        );
        assert_ne!(key.cut_mac(&["ab"]), key.record_mac("ab"));
    }
}
