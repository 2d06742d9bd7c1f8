//! A file stream's head: the last acknowledged record (seq and hash), written and synced
//! beside the audit files after every batch and before its callers are answered, and MACed
//! under the audit key when there is one. `audit verify` compares each stream with its head,
//! so removing the newest records (or the newest file, or cutting a line) shows even though
//! what is left is a valid chain.
//!
//! Heads live in `<audit folder>/.querygate_heads/<stream>.head`: one small file per stream,
//! overwritten in place (one sector, so a crash leaves the old head or the new one). The
//! head is written (to the page cache: it survives the process) before a batch's callers
//! are answered, and synced apart from the records ([`HeadFile::sync`], see the file sink),
//! since a second `fdatasync` per batch would cost more than the records' own. The writer
//! never moves a head back: at start a server continues after its head when the files end
//! earlier, so the gap stays visible.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::anchor::{MacKey, same_mac};
use super::chain::ChainHead;

/// The folder of heads beside the audit files of `dir`.
pub const HEADS_DIR: &str = ".querygate_heads";

/// A head file's size: one sector, padded.
const HEAD_BYTES: usize = 512;

/// A stream's head as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// The stream.
    pub stream: String,
    /// The last acknowledged record's seq.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
    /// When the head was written (RFC 3339 UTC).
    pub at: String,
    /// HMAC-SHA256 under the audit key (absent without `audit.mac_key_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

/// What a head's MAC says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadTrust {
    /// The MAC verifies under the key.
    Valid,
    /// No MAC (written without a key), or no key to check it with.
    Unkeyed,
    /// The MAC does not verify: forged, edited, or another key.
    Invalid,
}

impl Head {
    /// The head of `stream` at `head`, written now, MACed when `key` is given.
    pub fn new(stream: &str, head: &ChainHead, key: Option<&MacKey>) -> Head {
        let at = super::record::timestamp_now();
        let mac = key.map(|key| key.head_mac(stream, head.seq, &head.hash, &at));
        Head {
            stream: stream.to_owned(),
            seq: head.seq,
            hash: head.hash.clone(),
            at,
            mac,
        }
    }

    /// Checks the MAC under `key`.
    pub fn trust(&self, key: Option<&MacKey>) -> HeadTrust {
        match (key, &self.mac) {
            (Some(key), Some(mac)) => {
                if same_mac(
                    mac,
                    &key.head_mac(&self.stream, self.seq, &self.hash, &self.at),
                ) {
                    HeadTrust::Valid
                } else {
                    HeadTrust::Invalid
                }
            }
            _ => HeadTrust::Unkeyed,
        }
    }

    /// The chain head it names.
    pub fn chain_head(&self) -> ChainHead {
        ChainHead {
            seq: self.seq,
            hash: self.hash.clone(),
        }
    }
}

/// The head file of `stream` in the audit folder `dir`.
pub fn head_path(dir: &Path, stream: &str) -> PathBuf {
    dir.join(HEADS_DIR).join(format!("{stream}.head"))
}

/// An open head file, overwritten after every batch.
#[derive(Debug)]
pub struct HeadFile {
    file: File,
    path: PathBuf,
    /// The file's length after the last write (only this writer writes a stream's head):
    /// `None` until then, when it is read once.
    len: Option<u64>,
}

impl HeadFile {
    /// Opens (creating 0600, its folder 0700) the head file of `stream` in `dir`.
    pub fn open(dir: &Path, stream: &str) -> std::io::Result<HeadFile> {
        let path = head_path(dir, stream);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)?;
        Ok(HeadFile {
            file,
            path,
            len: None,
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Overwrites the head in place (not synced: see [`HeadFile::sync`]).
    pub fn write(&mut self, head: &Head) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec(head).map_err(std::io::Error::other)?;
        if bytes.len() < HEAD_BYTES {
            bytes.resize(HEAD_BYTES - 1, b' ');
        }
        bytes.push(b'\n');
        self.file.write_all_at(&bytes, 0)?;
        let written = bytes.len() as u64;
        let len = match self.len.take() {
            Some(len) => len,
            None => self.file.metadata()?.len(),
        };
        if len > written {
            self.file.set_len(written)?;
        }
        self.len = Some(written);
        self.file.flush()
    }

    /// Makes the last head written durable.
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
}

/// Reads a head file: `Ok(None)` when there is none, `Ok(Some(Err(why)))` when it does not
/// hold a head.
pub fn read(path: &Path) -> std::io::Result<Option<Result<Head, String>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(parse(&bytes))),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

fn parse(bytes: &[u8]) -> Result<Head, String> {
    let text = std::str::from_utf8(bytes).map_err(|err| format!("not UTF-8: {err}"))?;
    serde_json::from_str(text.trim_end()).map_err(|err| format!("not a head: {err}"))
}

/// Every head file in the heads folder of `dir` (none when there is no folder).
pub fn read_all(dir: &Path) -> std::io::Result<Vec<(PathBuf, Result<Head, String>)>> {
    let entries = match std::fs::read_dir(dir.join(HEADS_DIR)) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let mut heads = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "head")
            && let Some(head) = read(&path)?
        {
            heads.push((path, head));
        }
    }
    heads.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(heads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_shorter_than_the_file_cuts_the_file_to_its_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = head_path(dir.path(), "r1");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // A longer file left by an earlier version, then a head longer than the padding.
        std::fs::write(&path, vec![b'x'; 3 * HEAD_BYTES]).unwrap();
        let mut file = HeadFile::open(dir.path(), "r1").unwrap();
        let chain = ChainHead {
            seq: 1,
            hash: "ab".repeat(32),
        };
        let short = Head::new("r1", &chain, None);
        let long = Head::new(&"r".repeat(2 * HEAD_BYTES), &chain, None);
        let len = || std::fs::metadata(&path).unwrap().len();
        file.write(&short).unwrap();
        assert_eq!(len(), HEAD_BYTES as u64);
        file.write(&long).unwrap();
        assert!(len() > 2 * HEAD_BYTES as u64);
        file.write(&short).unwrap();
        assert_eq!(len(), HEAD_BYTES as u64);
        assert_eq!(read(&path).unwrap().unwrap().unwrap(), short);
    }

    #[test]
    fn heads_are_overwritten_in_place_and_their_macs_checked() {
        let dir = tempfile::tempdir().unwrap();
        let key = MacKey::new(&[1u8; 32]).unwrap();
        let mut file = HeadFile::open(dir.path(), "r1").unwrap();
        let first = Head::new(
            "r1",
            &ChainHead {
                seq: 9,
                hash: "ab".repeat(32),
            },
            Some(&key),
        );
        file.write(&first).unwrap();
        let second = Head::new(
            "r1",
            &ChainHead {
                seq: 10,
                hash: "cd".repeat(32),
            },
            Some(&key),
        );
        file.write(&second).unwrap();
        file.sync().unwrap();
        let bytes = std::fs::read(file.path()).unwrap();
        assert_eq!(bytes.len(), HEAD_BYTES);
        let read_back = read(file.path()).unwrap().unwrap().unwrap();
        assert_eq!(read_back, second);
        assert_eq!(read_back.trust(Some(&key)), HeadTrust::Valid);
        assert_eq!(read_back.trust(None), HeadTrust::Unkeyed);
        let other = MacKey::new(&[2u8; 32]).unwrap();
        assert_eq!(read_back.trust(Some(&other)), HeadTrust::Invalid);
        let rewound = Head {
            seq: 9,
            hash: "ab".repeat(32),
            ..read_back.clone()
        };
        assert_eq!(rewound.trust(Some(&key)), HeadTrust::Invalid);
        let all = read_all(dir.path()).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].1.as_ref().unwrap(), &second);
        std::fs::write(file.path(), b"{\"x\":\xff}").unwrap();
        assert!(read(file.path()).unwrap().unwrap().is_err());
        assert!(read(&dir.path().join("none")).unwrap().is_none());
    }
}
