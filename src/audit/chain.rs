//! The hash chain that makes a stream of records tamper-evident. Each record carries its
//! stream (the replica that wrote it), a sequence number (1, 2, 3… per stream) and the hash
//! of the stream's previous record; its own hash is the SHA-256 of its canonical JSON.
//!
//! The canonical JSON is `{"v":2,"stream":…,"seq":…,"prev_hash":…,<the record's fields>}`
//! (compact, fields in this fixed order). A JSONL line is the canonical JSON with
//! `,"hash":"<64 hex>"` inserted before the closing brace, so the hashed bytes are exactly
//! the line without its hash, and checking a line needs no re-serialization. With an audit
//! key (`audit.mac_key_file`, [`super::anchor`]) the line ends with `,"mac":"<64 hex>"` after
//! the hash: the HMAC of the hash, which whoever edits the file cannot recompute.
//!
//! Version 1 records were written before pruning was recorded and before records were
//! MACed; version 2 streams record every pruning ([`super::record::Phase::Prune`]).

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::anchor::MacKey;
use super::record::AuditRecord;
use crate::digest::hex;

/// The record format version written in `v`.
pub const FORMAT_VERSION: u32 = 2;

/// The `prev_hash` of a stream's first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// `,"hash":"` + 64 hex + `"}`.
const HASH_SUFFIX_LEN: usize = 9 + 64 + 2;

/// `,"mac":"` + 64 hex + `"}`.
const MAC_SUFFIX_LEN: usize = 8 + 64 + 2;

/// The last record of a stream: what the next one links to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainHead {
    /// Its sequence number (0: the stream is empty).
    pub seq: u64,
    /// Its hash ([`GENESIS`] for an empty stream).
    pub hash: String,
}

impl ChainHead {
    /// The head of an empty stream.
    pub fn genesis() -> Self {
        ChainHead {
            seq: 0,
            hash: GENESIS.to_owned(),
        }
    }
}

/// A record linked into its stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Linked {
    /// Its sequence number.
    pub seq: u64,
    /// The hash of the record before it.
    pub prev_hash: String,
    /// Its own hash.
    pub hash: String,
    /// The canonical JSON (what `hash` covers).
    pub canonical: String,
    /// The HMAC of `hash` under the audit key, when there is one.
    pub mac: Option<String>,
}

impl Linked {
    /// The JSONL line (no newline): the canonical JSON with the hash (and the MAC) as its
    /// last fields.
    pub fn line(&self) -> String {
        self.parts().concat()
    }

    /// Appends the JSONL line ([`Linked::line`], no newline) to `out`, without a string of
    /// its own.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        for part in self.parts() {
            out.extend_from_slice(part.as_bytes());
        }
    }

    /// The line in pieces: the canonical JSON without its closing brace, the hash field, the
    /// MAC field (empty without a key), the closing brace.
    fn parts(&self) -> [&str; 6] {
        let body = self.canonical.strip_suffix('}').unwrap_or(&self.canonical);
        let (mac_field, mac) = match &self.mac {
            Some(mac) => ("\",\"mac\":\"", mac.as_str()),
            None => ("", ""),
        };
        [body, ",\"hash\":\"", &self.hash, mac_field, mac, "\"}"]
    }

    /// The head this record makes.
    pub fn head(&self) -> ChainHead {
        ChainHead {
            seq: self.seq,
            hash: self.hash.clone(),
        }
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    v: u32,
    stream: &'a str,
    seq: u64,
    prev_hash: &'a str,
    #[serde(flatten)]
    record: &'a AuditRecord,
}

/// A stored record: the chain fields and the record.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Stored {
    /// Format version.
    pub v: u32,
    /// The stream (replica) it belongs to.
    pub stream: String,
    /// Its sequence number.
    pub seq: u64,
    /// The hash of the record before it.
    pub prev_hash: String,
    /// The record.
    #[serde(flatten)]
    pub record: AuditRecord,
}

/// Links `record` after `head` in `stream`, MACed under `key` when given.
pub fn link(
    stream: &str,
    head: &ChainHead,
    record: &AuditRecord,
    key: Option<&MacKey>,
) -> serde_json::Result<Linked> {
    let seq = head.seq + 1;
    let canonical = serde_json::to_string(&Envelope {
        v: FORMAT_VERSION,
        stream,
        seq,
        prev_hash: &head.hash,
        record,
    })?;
    let hash = hash_of(&canonical);
    Ok(Linked {
        seq,
        prev_hash: head.hash.clone(),
        mac: key.map(|key| key.record_mac(&hash)),
        hash,
        canonical,
    })
}

/// The canonical JSON of a stored record (what its hash covers), serialized again: for
/// `otel` lines, whose records are rebuilt from their attributes.
pub fn canonical(stored: &Stored) -> serde_json::Result<String> {
    serde_json::to_string(&Envelope {
        v: stored.v,
        stream: &stored.stream,
        seq: stored.seq,
        prev_hash: &stored.prev_hash,
        record: &stored.record,
    })
}

/// SHA-256 of the canonical JSON, hex.
pub fn hash_of(canonical: &str) -> String {
    hex(&Sha256::digest(canonical.as_bytes()))
}

/// Why a line is not a well-formed record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LineError {
    /// The line does not end with a hash field.
    #[error("the line does not end with a \"hash\" field")]
    NoHash,
    /// The record's content does not match its hash (it was edited).
    #[error("the record does not match its hash (edited)")]
    HashMismatch,
    /// The JSON does not hold a record.
    #[error("not an audit record: {0}")]
    Malformed(String),
}

/// A line read back: the stored record, its hash, and the canonical JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedLine {
    /// The record and its chain fields.
    pub stored: Stored,
    /// Its hash (checked against the content).
    pub hash: String,
    /// Its MAC as written (not checked here: that needs the key).
    pub mac: Option<String>,
}

/// Parses a JSONL line and checks its hash against its content (not its MAC); lines of
/// either format are read by [`super::format::parse_line`].
pub fn parse_jsonl_line(line: &str) -> Result<ParsedLine, LineError> {
    let line = line.trim_end_matches(['\n', '\r']);
    let (line, mac) = split_mac(line);
    if line.len() < HASH_SUFFIX_LEN + 2 || !line.is_char_boundary(line.len() - HASH_SUFFIX_LEN) {
        return Err(LineError::NoHash);
    }
    let (body, suffix) = line.split_at(line.len() - HASH_SUFFIX_LEN);
    let hash = suffix
        .strip_prefix(",\"hash\":\"")
        .and_then(|rest| rest.strip_suffix("\"}"))
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or(LineError::NoHash)?;
    let canonical = format!("{body}}}");
    let stored = parse_canonical(&canonical)?;
    if hash_of(&canonical) != hash {
        return Err(LineError::HashMismatch);
    }
    Ok(ParsedLine {
        stored,
        hash: hash.to_owned(),
        mac,
    })
}

/// Splits a trailing `,"mac":"<64 hex>"` off a line: the line as it would be without it
/// (ending in `}`), and the MAC.
fn split_mac(line: &str) -> (std::borrow::Cow<'_, str>, Option<String>) {
    if line.len() > MAC_SUFFIX_LEN && line.is_char_boundary(line.len() - MAC_SUFFIX_LEN) {
        let (body, suffix) = line.split_at(line.len() - MAC_SUFFIX_LEN);
        if let Some(mac) = suffix
            .strip_prefix(",\"mac\":\"")
            .and_then(|rest| rest.strip_suffix("\"}"))
            .filter(|m| m.len() == 64 && m.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return (format!("{body}}}").into(), Some(mac.to_owned()));
        }
    }
    (line.into(), None)
}

/// Parses canonical JSON (a line without its hash, or the database's `record` column).
pub fn parse_canonical(canonical: &str) -> Result<Stored, LineError> {
    serde_json::from_str(canonical).map_err(|err| LineError::Malformed(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::record::Decision;

    fn record(tool: &str) -> AuditRecord {
        AuditRecord {
            timestamp: "2026-11-30T11:30:01.000001Z".into(),
            tool: tool.into(),
            decision: Decision::RefuseImmediate,
            sql: Some("DELETE FROM x WHERE name = 'a\"b'".into()),
            ..Default::default()
        }
    }

    #[test]
    fn lines_round_trip_and_link() {
        let first = link("r1", &ChainHead::genesis(), &record("a"), None).unwrap();
        let second = link("r1", &first.head(), &record("b"), None).unwrap();
        assert_eq!((first.seq, second.seq), (1, 2));
        assert_eq!(first.prev_hash, GENESIS);
        assert_eq!(second.prev_hash, first.hash);
        let parsed = parse_jsonl_line(&second.line()).unwrap();
        assert_eq!(parsed.hash, second.hash);
        assert_eq!(parsed.stored.seq, 2);
        assert_eq!(parsed.stored.prev_hash, first.hash);
        assert_eq!(parsed.stored.record, record("b"));
        let value: serde_json::Value = serde_json::from_str(&second.line()).unwrap();
        assert_eq!(value["hash"], second.hash.as_str());
    }

    #[test]
    fn written_lines_are_the_lines() {
        let key = MacKey::new(&[3u8; 32]).unwrap();
        for key in [None, Some(&key)] {
            let linked = link("r1", &ChainHead::genesis(), &record("a"), key).unwrap();
            let body = linked.canonical.strip_suffix('}').unwrap();
            let expected = match &linked.mac {
                Some(mac) => format!("{body},\"hash\":\"{}\",\"mac\":\"{mac}\"}}", linked.hash),
                None => format!("{body},\"hash\":\"{}\"}}", linked.hash),
            };
            assert_eq!(linked.line(), expected);
            let mut out = b"before\n".to_vec();
            linked.write_line(&mut out);
            assert_eq!(out, format!("before\n{expected}").into_bytes());
        }
    }

    #[test]
    fn a_mac_follows_the_hash_and_is_read_back() {
        let key = MacKey::new(&[3u8; 32]).unwrap();
        let linked = link("r1", &ChainHead::genesis(), &record("a"), Some(&key)).unwrap();
        let line = linked.line();
        assert!(line.ends_with(&format!(",\"mac\":\"{}\"}}", key.record_mac(&linked.hash))));
        let parsed = parse_jsonl_line(&line).unwrap();
        assert_eq!(parsed.hash, linked.hash);
        assert_eq!(parsed.mac, Some(key.record_mac(&linked.hash)));
        assert_eq!(parsed.stored.v, FORMAT_VERSION);
        let plain = parse_jsonl_line(
            &link("r1", &ChainHead::genesis(), &record("a"), None)
                .unwrap()
                .line(),
        )
        .unwrap();
        assert_eq!(plain.mac, None);
        assert_eq!(plain.hash, linked.hash, "the MAC is outside what is hashed");
    }

    #[test]
    fn an_edited_line_is_detected() {
        let line = link("r1", &ChainHead::genesis(), &record("a"), None)
            .unwrap()
            .line();
        let edited = line.replace("DELETE", "SELECT");
        assert_eq!(parse_jsonl_line(&edited), Err(LineError::HashMismatch));
        assert_eq!(parse_jsonl_line("{}"), Err(LineError::NoHash));
        assert!(matches!(
            parse_jsonl_line(&line.replace("\"seq\":1", "\"seq\":\"x\"")),
            Err(LineError::Malformed(_))
        ));
    }
}
