//! What the audit key requires of a set under `verify`: with `audit.mac_key_file`, every
//! record and every head carries a MAC that verifies, so someone without the key can
//! neither strip the MACs of a stream and rewrite it (drop a record, relink the chain,
//! write a head without a MAC) nor add a stream of their own (the PostgreSQL writer role
//! inserting a stream `ghost` with NULL MACs). Streams written before the key was set are
//! accepted without MACs only when named (`--allow-unsigned STREAM`); their records must
//! still chain, and once a MACed record follows, every later one needs its MAC.
//!
//! A stream has one head: two (a rolled-back copy beside the real one, in files; a second
//! row once the owner dropped the key of `audit_heads`) is a break, with or without a key,
//! never "the one that sorts last wins".

use std::collections::BTreeSet;

use super::super::anchor::MacKey;
use super::super::head::Head;

/// The anchors a set is checked against: the audit key, and the streams that may be
/// unsigned under it (written before it was set).
#[derive(Clone, Copy, Debug, Default)]
pub struct Anchors<'a> {
    /// The key of `audit.mac_key_file`, when configured.
    pub key: Option<&'a MacKey>,
    /// Streams accepted without MACs (`--allow-unsigned`).
    pub allow_unsigned: Option<&'a BTreeSet<String>>,
}

impl<'a> Anchors<'a> {
    /// Under `key`, every stream signed.
    pub fn key(key: Option<&'a MacKey>) -> Self {
        Anchors {
            key,
            allow_unsigned: None,
        }
    }

    /// Whether `stream` was named by `--allow-unsigned`.
    pub fn allows_unsigned(&self, stream: &str) -> bool {
        self.allow_unsigned.is_some_and(|s| s.contains(stream))
    }

    /// Why a record of `stream` at `seq` without a MAC is a break under the key (`None`
    /// without a key, or when the stream may be unsigned and no MACed record came before).
    pub fn unsigned_record(&self, stream: &str, seq: u64, anchored_before: bool) -> Option<String> {
        self.key?;
        if anchored_before {
            return Some(format!(
                "a record without a valid MAC after MACed records of stream {stream} (seq {seq}: appended or replaced by someone without the audit key)"
            ));
        }
        if self.allows_unsigned(stream) {
            return None;
        }
        Some(format!(
            "stream {stream} seq {seq} has no MAC, and audit.mac_key_file is set: its MACs were stripped, or the stream was written by someone without the audit key (a stream written before the key was set: --allow-unsigned {stream})"
        ))
    }

    /// Why `head` without a MAC is a break under the key.
    pub fn unsigned_head(&self, head: &Head) -> Option<String> {
        self.key?;
        if head.mac.is_some() || self.allows_unsigned(&head.stream) {
            return None;
        }
        Some(format!(
            "the head of stream {} (seq {}, written {}) has no MAC, and audit.mac_key_file is set: written by someone without the audit key (a stream written before the key was set: --allow-unsigned {})",
            head.stream, head.seq, head.at, head.stream
        ))
    }

    /// The note on streams named by `--allow-unsigned` that the set does not hold.
    pub fn unknown_streams(&self, mut known: impl FnMut(&str) -> bool) -> Option<String> {
        let missing: Vec<&str> = self
            .allow_unsigned?
            .iter()
            .map(String::as_str)
            .filter(|s| !known(s))
            .collect();
        (!missing.is_empty()).then(|| {
            format!(
                "--allow-unsigned names streams with no records here: {}",
                missing.join(", ")
            )
        })
    }
}

/// The break for a second head of one stream.
pub fn two_heads(first_location: &str, first: &Head, location: &str, second: &Head) -> String {
    format!(
        "stream {} has two heads: {first_location} (seq {}, written {}) and {location} (seq {}, written {}); a stream has one head, so one is a copy (a rolled-back head beside the real one)",
        second.stream, first.seq, first.at, second.seq, second.at
    )
}
