//! Unpacks a provider package (`<version>.tgz`) into a folder, trusting nothing in it.
//!
//! Only regular files and directories are accepted, every path must stay inside the
//! package's `<version>/` folder, and sizes are bounded: entries counted, each file's size
//! checked against its header and while it is written, and the whole decompressed stream
//! (headers included) capped, so a decompression bomb stops early. File modes, owners and
//! times in the archive are ignored. `.sig` signature files are unpacked like any file:
//! `verify` checks them before the package is used.

use std::cell::Cell;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use flate2::read::GzDecoder;
use tar::EntryType;

/// Bounds for one package.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Decompressed bytes of the whole archive (tar headers included).
    pub(crate) max_unpacked_bytes: u64,
    /// Bytes of any one file.
    pub(crate) max_entry_bytes: u64,
    /// Entries (files, directories and extension headers).
    pub(crate) max_entries: usize,
}

/// Why a package was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArchiveError {
    /// An entry's path climbs out with `..`.
    #[error("entry '{0}' climbs out of the package with '..'")]
    Traversal(String),
    /// An entry's path is absolute.
    #[error("entry '{0}' has an absolute path")]
    Absolute(String),
    /// An entry's path is not plain UTF-8 without control characters or backslashes.
    #[error("entry '{0}' has a path with forbidden characters")]
    BadPath(String),
    /// An entry lies outside the `<version>/` folder the package must hold.
    #[error("entry '{path}' is outside the package folder '{folder}/'")]
    OutsideFolder {
        /// The entry path.
        path: String,
        /// The expected top folder (the version).
        folder: String,
    },
    /// A symlink, hard link, device, fifo or other non-regular entry.
    #[error("entry '{path}' is a {kind}, not a regular file or directory")]
    NotRegular {
        /// The entry path.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// One file is larger than allowed.
    #[error("entry '{path}' is larger than {limit} bytes")]
    EntryTooLarge {
        /// The entry path.
        path: String,
        /// The per-file limit.
        limit: u64,
    },
    /// More entries than allowed.
    #[error("the package has more than {0} entries")]
    TooManyEntries(usize),
    /// The decompressed archive is larger than allowed.
    #[error("the package unpacks to more than {0} bytes")]
    TooLarge(u64),
    /// The same file appears twice.
    #[error("entry '{0}' appears twice")]
    Duplicate(String),
    /// Not a gzip-compressed tar archive, or truncated.
    #[error("the package is not a readable .tgz archive: {0}")]
    Corrupt(String),
    /// Writing the unpacked files failed.
    #[error("cannot write the unpacked package: {0}")]
    Write(String),
}

/// What was unpacked.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Unpacked {
    /// Files written.
    pub(crate) files: usize,
    /// Bytes written.
    pub(crate) bytes: u64,
    /// Of the files, `.sig` signature files.
    pub(crate) signatures: usize,
}

/// Unpacks `tgz`, whose entries must all lie under `folder/`, into `dest` (created; must not
/// exist), with `folder/` stripped. On error `dest` may hold part of the package: the caller
/// unpacks into a temporary folder and discards it.
pub(crate) fn unpack(
    tgz: &[u8],
    folder: &str,
    dest: &Path,
    limits: Limits,
) -> Result<Unpacked, ArchiveError> {
    std::fs::create_dir(dest).map_err(|err| ArchiveError::Write(err.to_string()))?;
    let read = Rc::new(Cell::new(0u64));
    let capped = Capped {
        inner: GzDecoder::new(tgz),
        read: read.clone(),
        limit: limits.max_unpacked_bytes,
    };
    let over_limit = || read.get() > limits.max_unpacked_bytes;
    let corrupt = |err: std::io::Error| {
        if over_limit() {
            ArchiveError::TooLarge(limits.max_unpacked_bytes)
        } else {
            ArchiveError::Corrupt(err.to_string())
        }
    };
    let mut archive = tar::Archive::new(capped);
    let mut done = Unpacked::default();
    let mut seen = 0usize;
    for entry in archive.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        seen += 1;
        if seen > limits.max_entries {
            return Err(ArchiveError::TooManyEntries(limits.max_entries));
        }
        let raw_path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let kind = entry.header().entry_type();
        if kind == EntryType::XGlobalHeader {
            continue; // archive-wide pax metadata: nothing to unpack
        }
        let parts = relative_parts(&raw_path)?;
        let rest = match parts.split_first() {
            Some((top, rest)) if top == folder => rest,
            Some(_) => {
                return Err(ArchiveError::OutsideFolder {
                    path: raw_path,
                    folder: folder.to_owned(),
                });
            }
            None if kind == EntryType::Directory => continue,
            None => return Err(ArchiveError::BadPath(raw_path)),
        };
        let target: PathBuf = rest.iter().fold(dest.to_path_buf(), |p, part| p.join(part));
        match kind {
            EntryType::Directory => {
                std::fs::create_dir_all(&target)
                    .map_err(|err| ArchiveError::Write(format!("{raw_path}: {err}")))?;
            }
            EntryType::Regular => {
                if rest.is_empty() {
                    return Err(ArchiveError::BadPath(raw_path));
                }
                let size = entry.header().size().map_err(corrupt)?;
                if size > limits.max_entry_bytes {
                    return Err(ArchiveError::EntryTooLarge {
                        path: raw_path,
                        limit: limits.max_entry_bytes,
                    });
                }
                let written = write_file(&mut entry, &target, &raw_path, limits).map_err(
                    |err| match err {
                        WriteFailure::Read(err) => corrupt(err),
                        WriteFailure::Other(err) => err,
                    },
                )?;
                done.files += 1;
                done.bytes += written;
                if raw_path.ends_with(".sig") {
                    done.signatures += 1;
                }
            }
            other => {
                return Err(ArchiveError::NotRegular {
                    path: raw_path,
                    kind: kind_name(other),
                });
            }
        }
    }
    Ok(done)
}

enum WriteFailure {
    Read(std::io::Error),
    Other(ArchiveError),
}

fn write_file(
    entry: &mut impl Read,
    target: &Path,
    raw_path: &str,
    limits: Limits,
) -> Result<u64, WriteFailure> {
    let write_err = |err: std::io::Error| {
        WriteFailure::Other(ArchiveError::Write(format!("{raw_path}: {err}")))
    };
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(write_err)?;
    }
    let mut file = match std::fs::File::create_new(target) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(WriteFailure::Other(ArchiveError::Duplicate(
                raw_path.to_owned(),
            )));
        }
        Err(err) => return Err(write_err(err)),
    };
    let mut buf = [0u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        let n = entry.read(&mut buf).map_err(WriteFailure::Read)?;
        if n == 0 {
            break;
        }
        written += n as u64;
        if written > limits.max_entry_bytes {
            return Err(WriteFailure::Other(ArchiveError::EntryTooLarge {
                path: raw_path.to_owned(),
                limit: limits.max_entry_bytes,
            }));
        }
        std::io::Write::write_all(&mut file, &buf[..n]).map_err(write_err)?;
    }
    Ok(written)
}

/// Splits an archive path into plain components, refusing absolute paths, `..`, backslashes
/// and control characters. `.` and empty components (`a//b`, a trailing `/`) are dropped.
fn relative_parts(path: &str) -> Result<Vec<String>, ArchiveError> {
    if path.starts_with('/') {
        return Err(ArchiveError::Absolute(path.to_owned()));
    }
    if path.contains(['\\', '\u{fffd}']) || path.chars().any(char::is_control) {
        return Err(ArchiveError::BadPath(path.to_owned()));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(ArchiveError::Traversal(path.to_owned())),
            part if part.contains(':') && parts.is_empty() => {
                return Err(ArchiveError::Absolute(path.to_owned()));
            }
            part => parts.push(part.to_owned()),
        }
    }
    Ok(parts)
}

fn kind_name(kind: EntryType) -> &'static str {
    match kind {
        EntryType::Symlink => "symbolic link",
        EntryType::Link => "hard link",
        EntryType::Char => "character device",
        EntryType::Block => "block device",
        EntryType::Fifo => "fifo",
        EntryType::GNUSparse => "sparse file",
        EntryType::Continuous => "contiguous file",
        _ => "special entry",
    }
}

/// Counts decompressed bytes and fails the read once more than `limit` have come out.
struct Capped<R> {
    inner: R,
    read: Rc<Cell<u64>>,
    limit: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let total = self.read.get().saturating_add(n as u64);
        self.read.set(total);
        if total > self.limit {
            return Err(std::io::Error::other("decompressed size limit reached"));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked() {
        assert_eq!(relative_parts("v1/./a//b/").unwrap(), ["v1", "a", "b"]);
        assert!(matches!(
            relative_parts("v1/../../x"),
            Err(ArchiveError::Traversal(_))
        ));
        assert!(matches!(
            relative_parts("/etc/passwd"),
            Err(ArchiveError::Absolute(_))
        ));
        assert!(matches!(
            relative_parts("C:/x"),
            Err(ArchiveError::Absolute(_))
        ));
        assert!(matches!(
            relative_parts("v1\\x"),
            Err(ArchiveError::BadPath(_))
        ));
    }
}
