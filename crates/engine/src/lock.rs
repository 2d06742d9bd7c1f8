//! The provider lock (`providers.lock`): which provider versions a registry holds, with the
//! SHA-256 of every document of each, so that every replica can tell it serves the same
//! documents as the others (as Terraform's `.terraform.lock.hcl` pins providers).
//!
//! The file is JSON:
//! `{"lock_version": 1, "providers": {"googleapis.com/v0.1.2": {"documents":
//! {"provider.yaml": "sha256:…", "services/storage-v1.yaml": "sha256:…"}}}}`,
//! keyed by the version's folder under `<registry.root>/src/` (the package folder,
//! `googleapis.com` for `google`, then the version), documents by their path inside it
//! (`/`-separated). Signature files (`*.sig`) and dot-files are not documents.
//!
//! `registry pull` checks a package against the lock before it is installed (a locked version
//! whose documents differ is refused) and records a version the lock does not hold yet;
//! [`LockChecker`] compares what is installed with the lock (at start and for `/readyz`):
//! a locked document missing or different, or a provider version installed but not locked,
//! is a difference, named by its path.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The lock's file name in the registry root, when `registry.lock_file` does not name one.
pub const LOCK_FILE_NAME: &str = "providers.lock";

/// The format version this engine reads and writes.
const LOCK_VERSION: u32 = 1;

/// The largest lock file read.
const MAX_LOCK_BYTES: u64 = 16 * 1024 * 1024;

/// SHA-256 of `bytes`, lower-case hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The lock: provider versions and their documents' digests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderLock {
    /// The format version (1).
    pub lock_version: u32,
    /// By version folder under `src/`: `<package folder>/<version>`.
    pub providers: BTreeMap<String, LockedProvider>,
}

/// One locked provider version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedProvider {
    /// Document path inside the version folder → `sha256:<hex>`.
    pub documents: BTreeMap<String, String>,
}

/// Why a lock cannot be read or written, or what differs from it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LockError(pub String);

impl ProviderLock {
    /// An empty lock.
    pub fn new() -> Self {
        ProviderLock {
            lock_version: LOCK_VERSION,
            providers: BTreeMap::new(),
        }
    }

    /// The lock at `path`; `None` when there is no such file.
    pub fn read(path: &Path) -> Result<Option<ProviderLock>, LockError> {
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => {
                return Err(LockError(format!(
                    "cannot read '{}': {err}",
                    path.display()
                )));
            }
        };
        if meta.len() > MAX_LOCK_BYTES {
            return Err(LockError(format!(
                "'{}' is {} bytes, over the {MAX_LOCK_BYTES}-byte limit",
                path.display(),
                meta.len()
            )));
        }
        let text = std::fs::read(path)
            .map_err(|err| LockError(format!("cannot read '{}': {err}", path.display())))?;
        let lock: ProviderLock = serde_json::from_slice(&text).map_err(|err| {
            LockError(format!(
                "'{}' is not a provider lock: {err}",
                path.display()
            ))
        })?;
        if lock.lock_version != LOCK_VERSION {
            return Err(LockError(format!(
                "'{}' has lock_version {}; this querygate reads {LOCK_VERSION}",
                path.display(),
                lock.lock_version
            )));
        }
        Ok(Some(lock))
    }

    /// Writes the lock to `path` atomically (a file beside it, then renamed over it).
    pub fn write(&self, path: &Path) -> Result<(), LockError> {
        let mut text = serde_json::to_vec_pretty(self)
            .map_err(|err| LockError(format!("cannot encode the provider lock: {err}")))?;
        text.push(b'\n');
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let temp = dir.join(format!(
            ".{}.{}.tmp",
            path.file_name()
                .map_or_else(|| LOCK_FILE_NAME.into(), |n| n.to_string_lossy()),
            std::process::id()
        ));
        std::fs::write(&temp, &text)
            .and_then(|()| std::fs::rename(&temp, path))
            .map_err(|err| {
                let _ = std::fs::remove_file(&temp);
                LockError(format!("cannot write '{}': {err}", path.display()))
            })
    }

    /// Checks the documents of `folder` at `version` (`digests`, as [`digest_dir`] gives
    /// them) against the lock: `Ok(true)` when the lock must record them (it does not hold
    /// that version), `Ok(false)` when it holds exactly them.
    pub fn admits(
        &self,
        folder: &str,
        version: &str,
        digests: &BTreeMap<String, String>,
    ) -> Result<bool, LockError> {
        match self.providers.get(&format!("{folder}/{version}")) {
            Some(locked) => match first_difference(&locked.documents, digests) {
                None => Ok(false),
                Some(file) => Err(LockError(format!(
                    "{folder}/{version}: {file}: the package differs from the provider lock"
                ))),
            },
            None => Ok(true),
        }
    }

    /// A lock of every provider version installed under `src` (`<registry.root>/src`): what
    /// a registry without a lock holds when its first pull makes one.
    pub fn of_installed(src: &Path) -> Result<ProviderLock, LockError> {
        let mut lock = ProviderLock::new();
        for (folder, version, dir) in installed_versions(src)? {
            lock.record(&folder, &version, digest_dir(&dir)?);
        }
        Ok(lock)
    }

    /// Records the documents of `folder` at `version`.
    pub fn record(&mut self, folder: &str, version: &str, digests: BTreeMap<String, String>) {
        self.providers.insert(
            format!("{folder}/{version}"),
            LockedProvider { documents: digests },
        );
    }
}

/// The first document (path) that differs between `locked` and `found`: missing, extra or
/// with another digest, with what is wrong.
fn first_difference(
    locked: &BTreeMap<String, String>,
    found: &BTreeMap<String, String>,
) -> Option<String> {
    for (path, digest) in locked {
        match found.get(path) {
            None => return Some(format!("{path} is missing")),
            Some(other) if other != digest => return Some(format!("{path} has another digest")),
            Some(_) => {}
        }
    }
    found
        .keys()
        .find(|path| !locked.contains_key(*path))
        .map(|path| format!("{path} is not in the lock"))
}

/// The version folders under `src`: (package folder, version, path).
fn installed_versions(src: &Path) -> Result<Vec<(String, String, PathBuf)>, LockError> {
    let folders = match std::fs::read_dir(src) {
        Ok(entries) => entries.filter_map(Result::ok).collect::<Vec<_>>(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(err) => return Err(LockError(format!("cannot list '{}': {err}", src.display()))),
    };
    let mut out = Vec::new();
    for folder in folders {
        let name = folder.file_name().to_string_lossy().into_owned();
        if !is_document(&name) || !folder.path().is_dir() {
            continue;
        }
        for version in std::fs::read_dir(folder.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let v = version.file_name().to_string_lossy().into_owned();
            if is_document(&v) && version.path().is_dir() {
                out.push((name.clone(), v, version.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Whether a file in a provider's folder is one of its documents.
fn is_document(name: &str) -> bool {
    !name.starts_with('.') && !name.ends_with(".sig")
}

/// The documents under `dir` (recursively), by `/`-separated path inside it, with their
/// `sha256:<hex>` digests.
pub fn digest_dir(dir: &Path) -> Result<BTreeMap<String, String>, LockError> {
    let mut out = BTreeMap::new();
    walk(dir, "", &mut |rel, path| {
        let bytes = std::fs::read(path)
            .map_err(|err| LockError(format!("cannot read '{}': {err}", path.display())))?;
        out.insert(rel.to_owned(), format!("sha256:{}", sha256_hex(&bytes)));
        Ok(())
    })?;
    Ok(out)
}

/// Calls `file` for each document under `dir`, with its relative path.
fn walk(
    dir: &Path,
    prefix: &str,
    file: &mut dyn FnMut(&str, &Path) -> Result<(), LockError>,
) -> Result<(), LockError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|err| LockError(format!("cannot list '{}': {err}", dir.display())))?;
    let mut entries: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(name, _)| is_document(name))
        .collect();
    entries.sort();
    for (name, path) in entries {
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if path.is_dir() {
            walk(&path, &rel, file)?;
        } else {
            file(&rel, &path)?;
        }
    }
    Ok(())
}

/// A file's size and modification time when its digest was taken, and the digest.
type Remembered = (u64, Option<SystemTime>, String);

/// Compares what a registry holds with its lock; remembers each file's digest by its size
/// and modification time, so that a check reads only files that changed.
#[derive(Debug)]
pub struct LockChecker {
    lock_file: PathBuf,
    src: PathBuf,
    digests: Mutex<HashMap<PathBuf, Remembered>>,
}

impl LockChecker {
    /// Checks `<root>/src` against `lock_file`.
    pub fn new(lock_file: PathBuf, root: &Path) -> Self {
        LockChecker {
            lock_file,
            src: root.join("src"),
            digests: Mutex::new(HashMap::new()),
        }
    }

    /// The lock file checked.
    pub fn lock_file(&self) -> &Path {
        &self.lock_file
    }

    /// `Ok(true)` when the registry holds exactly what the lock says, `Ok(false)` when there
    /// is no lock file (nothing to compare), `Err` naming the first difference.
    pub fn check(&self) -> Result<bool, LockError> {
        let Some(lock) = ProviderLock::read(&self.lock_file)? else {
            return Ok(false);
        };
        for (key, locked) in &lock.providers {
            let safe = key.split('/').count() == 2
                && key
                    .split('/')
                    .all(|part| !part.is_empty() && is_document(part) && part != "..");
            if !safe {
                return Err(LockError(format!(
                    "'{}' locks '{key}', which is not <package folder>/<version>",
                    self.lock_file.display()
                )));
            }
            let dir = self.src.join(key);
            if !dir.is_dir() {
                return Err(LockError(format!(
                    "src/{key}: locked in '{}' but not installed",
                    self.lock_file.display()
                )));
            }
            let found = self.digests_of(&dir)?;
            if let Some(file) = first_difference(&locked.documents, &found) {
                return Err(LockError(format!(
                    "src/{key}/{file} (against '{}')",
                    self.lock_file.display()
                )));
            }
        }
        // Every installed version is locked.
        for (folder, version, _) in installed_versions(&self.src)? {
            if !lock.providers.contains_key(&format!("{folder}/{version}")) {
                return Err(LockError(format!(
                    "src/{folder}/{version}: installed but not in '{}'",
                    self.lock_file.display()
                )));
            }
        }
        Ok(true)
    }

    /// The digests of the documents under `dir`, reading only files whose size or
    /// modification time changed since the last check.
    fn digests_of(&self, dir: &Path) -> Result<BTreeMap<String, String>, LockError> {
        let mut out = BTreeMap::new();
        let mut cache = self
            .digests
            .lock()
            .map_err(|_| LockError("the lock checker's cache is poisoned".into()))?;
        walk(dir, "", &mut |rel, path| {
            let meta = std::fs::metadata(path)
                .map_err(|err| LockError(format!("cannot read '{}': {err}", path.display())))?;
            let (len, modified) = (meta.len(), meta.modified().ok());
            let digest = match cache.get(path) {
                Some((l, m, d)) if *l == len && *m == modified && modified.is_some() => d.clone(),
                _ => {
                    let bytes = std::fs::read(path).map_err(|err| {
                        LockError(format!("cannot read '{}': {err}", path.display()))
                    })?;
                    let d = format!("sha256:{}", sha256_hex(&bytes));
                    cache.insert(path.to_owned(), (len, modified, d.clone()));
                    d
                }
            };
            out.insert(rel.to_owned(), digest);
            Ok(())
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn install(root: &Path, folder: &str, version: &str, files: &[(&str, &str)]) {
        for (rel, text) in files {
            let path = root.join("src").join(folder).join(version).join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    #[test]
    fn a_registry_is_checked_against_its_lock_file_by_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        install(
            root,
            "googleapis.com",
            "v0.1.2",
            &[
                ("provider.yaml", "name: google\n"),
                ("services/storage.yaml", "a: 1\n"),
                ("provider.yaml.sig", "sig"),
            ],
        );
        let lock_file = root.join(LOCK_FILE_NAME);
        let checker = LockChecker::new(lock_file.clone(), root);
        assert_eq!(checker.check(), Ok(false), "no lock: nothing to compare");
        let digests = digest_dir(&root.join("src/googleapis.com/v0.1.2")).unwrap();
        assert_eq!(
            digests.keys().collect::<Vec<_>>(),
            ["provider.yaml", "services/storage.yaml"]
        );
        let mut lock = ProviderLock::new();
        assert_eq!(lock.admits("googleapis.com", "v0.1.2", &digests), Ok(true));
        lock.record("googleapis.com", "v0.1.2", digests.clone());
        lock.write(&lock_file).unwrap();
        assert_eq!(ProviderLock::read(&lock_file).unwrap(), Some(lock.clone()));
        assert_eq!(checker.check(), Ok(true));
        assert_eq!(lock.admits("googleapis.com", "v0.1.2", &digests), Ok(false));
        // A changed document is named.
        std::fs::write(
            root.join("src/googleapis.com/v0.1.2/services/storage.yaml"),
            "a: 2\n",
        )
        .unwrap();
        let err = checker.check().unwrap_err().0;
        assert!(
            err.starts_with("src/googleapis.com/v0.1.2/services/storage.yaml has another digest"),
            "{err}"
        );
        let changed = digest_dir(&root.join("src/googleapis.com/v0.1.2")).unwrap();
        assert!(lock.admits("googleapis.com", "v0.1.2", &changed).is_err());
        // Another version of it is recorded anew.
        assert_eq!(lock.admits("googleapis.com", "v0.2.0", &changed), Ok(true));
        std::fs::write(
            root.join("src/googleapis.com/v0.1.2/services/storage.yaml"),
            "a: 1\n",
        )
        .unwrap();
        assert_eq!(checker.check(), Ok(true));
        // An unlocked provider, or a missing document, differs too.
        install(
            root,
            "github",
            "v0.3.1",
            &[("provider.yaml", "name: github\n")],
        );
        let err = checker.check().unwrap_err().0;
        assert!(
            err.starts_with("src/github/v0.3.1: installed but not in"),
            "{err}"
        );
        std::fs::remove_dir_all(root.join("src/github")).unwrap();
        std::fs::remove_file(root.join("src/googleapis.com/v0.1.2/services/storage.yaml")).unwrap();
        let err = checker.check().unwrap_err().0;
        assert!(err.contains("services/storage.yaml is missing"), "{err}");
        // A lock of another format is refused.
        std::fs::write(&lock_file, r#"{"lock_version": 9, "providers": {}}"#).unwrap();
        assert!(checker.check().unwrap_err().0.contains("lock_version 9"));
    }
}
