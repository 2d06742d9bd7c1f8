//! Loads provider documents (YAML) from the local registry, lazily, into an LRU cache.
//!
//! Documents are addressed by their path relative to the registry's `src/` folder, as
//! StackQL's `$ref`s spell them (`github/v0.3.1/services/repos.yaml`). A cached document is
//! reused without touching its file for the store's recheck interval after it was read or
//! last checked; after that, the next load compares the file's modification time and
//! re-reads a changed file. A pull drops the pulled version's documents at once
//! ([`DocumentStore::forget`]).
//!
//! Work derived from documents (a resource model) can be remembered across statements:
//! [`DocumentStore::recording`] notes every document a piece of work loads, and
//! [`DocumentStore::unchanged`] tells later whether loading them now gives the very same
//! documents (the same `Arc`s), in which case the work would come out the same.

use std::cell::RefCell;
use std::num::NonZeroUsize;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use lru::LruCache;
use serde_json::Value;

use crate::error::{Error, Result};

/// One parsed provider document.
#[derive(Debug)]
pub(crate) struct Doc {
    /// Path relative to the registry's `src/` folder, used in error messages and `$ref`s.
    pub(crate) rel: String,
    /// The parsed YAML as a JSON value tree.
    pub(crate) value: Value,
    /// SHA-256 (hex) of the file as read: what a plan's digest binds to.
    pub(crate) sha256: String,
}

impl Doc {
    /// Follows a JSON pointer (`/paths/~1orgs~1{org}~1repos/get`) inside this document.
    pub(crate) fn at(&self, pointer: &str) -> Result<&Value> {
        if pointer.is_empty() {
            return Ok(&self.value);
        }
        self.value.pointer(pointer).ok_or_else(|| {
            Error::bad_document(format!(
                "provider document '{}' has nothing at JSON pointer '#{pointer}'",
                self.rel
            ))
        })
    }
}

struct Cached {
    modified: Option<SystemTime>,
    /// When the file was last read or found unchanged.
    checked: Instant,
    doc: Arc<Doc>,
}

/// The documents a piece of work loaded through a store, in first-load order.
#[derive(Debug, Default)]
pub(crate) struct Reads {
    /// Each document's path and the document as loaded; weak, so that remembering what was
    /// read keeps no document alive.
    docs: Vec<(String, Weak<Doc>)>,
    /// Some load failed: the work's outcome depended on a file that could not be read or
    /// parsed, which a later load may read.
    failed: bool,
}

impl Reads {
    /// Whether every load succeeded, so that the same documents give the same outcome.
    pub(crate) fn complete(&self) -> bool {
        !self.failed
    }

    fn note(&mut self, loaded: Result<&Arc<Doc>, ()>) {
        match loaded {
            Ok(doc) => {
                let weak = Arc::downgrade(doc);
                if !self.docs.iter().any(|(_, seen)| seen.ptr_eq(&weak)) {
                    self.docs.push((doc.rel.clone(), weak));
                }
            }
            Err(()) => self.failed = true,
        }
    }
}

thread_local! {
    /// The recordings under way on this thread, innermost last, each with the address of
    /// the store it records.
    static RECORDINGS: RefCell<Vec<(usize, Reads)>> = const { RefCell::new(Vec::new()) };
}

/// Ends its recording when dropped (also when the recorded work panics).
struct Recording {
    store: usize,
}

impl Recording {
    fn start(store: usize) -> Self {
        RECORDINGS.with(|r| r.borrow_mut().push((store, Reads::default())));
        Recording { store }
    }

    fn finish(self) -> Reads {
        let reads = RECORDINGS.with(|r| match r.borrow_mut().pop() {
            Some((store, reads)) if store == self.store => reads,
            _ => Reads {
                docs: Vec::new(),
                failed: true,
            },
        });
        std::mem::forget(self);
        reads
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        RECORDINGS.with(|r| {
            r.borrow_mut().pop();
        });
    }
}

/// Reads and caches documents under one registry `src/` folder.
pub(crate) struct DocumentStore {
    src: PathBuf,
    recheck: Duration,
    cache: Mutex<LruCache<String, Cached>>,
}

impl std::fmt::Debug for DocumentStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DocumentStore")
            .field("src", &self.src)
            .finish_non_exhaustive()
    }
}

/// Largest document the engine agrees to parse (the largest real one is ~2 MB).
const MAX_DOCUMENT_BYTES: u64 = 64 * 1024 * 1024;

impl DocumentStore {
    /// A store over `src` (the registry root's `src/` folder) keeping `capacity` documents,
    /// each used without looking at its file for `recheck` after it was last read or checked.
    pub(crate) fn new(src: PathBuf, capacity: usize, recheck: Duration) -> Self {
        let capacity = NonZeroUsize::new(capacity.max(1)).unwrap_or(NonZeroUsize::MIN);
        DocumentStore {
            src,
            recheck,
            cache: Mutex::new(LruCache::new(capacity)),
        }
    }

    /// How long a document (and an opened provider) is used without looking at its files.
    pub(crate) fn recheck(&self) -> Duration {
        self.recheck
    }

    /// The registry's `src/` folder.
    pub(crate) fn src(&self) -> &Path {
        &self.src
    }

    /// Loads `rel` (relative to `src/`): from the cache without any file access when it was
    /// read or checked within the recheck interval, from the cache after a look at the
    /// file's modification time when that is unchanged, else from the file. Every
    /// recording of this store under way on this thread notes the outcome.
    pub(crate) fn load(&self, rel: &str) -> Result<Arc<Doc>> {
        let loaded = self.load_uncounted(rel);
        RECORDINGS.with(|r| {
            if let Ok(mut recordings) = r.try_borrow_mut() {
                for (_, reads) in recordings.iter_mut().filter(|(s, _)| *s == self.id()) {
                    reads.note(loaded.as_ref().map_err(|_| ()));
                }
            }
        });
        loaded
    }

    /// Runs `work`, noting every document it loads through this store (on this thread).
    pub(crate) fn recording<T>(&self, work: impl FnOnce() -> T) -> (T, Reads) {
        let recording = Recording::start(self.id());
        let out = work();
        (out, recording.finish())
    }

    /// Whether loading the documents of `reads` now gives the very documents recorded (so
    /// work done from them would come out the same). Loading them follows [`Self::load`]'s
    /// rules: a file is looked at again after the recheck interval, and a changed, evicted
    /// or forgotten document is a new one.
    pub(crate) fn unchanged(&self, reads: &Reads) -> bool {
        reads.complete()
            && reads.docs.iter().all(|(rel, recorded)| {
                self.load(rel)
                    .is_ok_and(|now| std::ptr::eq(Arc::as_ptr(&now), recorded.as_ptr()))
            })
    }

    /// This store's identity for recordings.
    fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    fn load_uncounted(&self, rel: &str) -> Result<Arc<Doc>> {
        let cached = self.cache.lock().ok().and_then(|mut cache| {
            cache
                .get(rel)
                .map(|hit| (hit.doc.clone(), hit.modified, hit.checked.elapsed()))
        });
        // A cached path was checked when it was first read.
        if let Some((doc, _, age)) = &cached
            && *age < self.recheck
        {
            return Ok(doc.clone());
        }
        crate::inline::check()?;
        let path = self.checked_path(rel)?;
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        let doc = match cached {
            Some((doc, was, _)) if was == modified => doc,
            _ => Arc::new(parse_file(&path, rel)?),
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.put(
                rel.to_owned(),
                Cached {
                    modified,
                    checked: Instant::now(),
                    doc: doc.clone(),
                },
            );
        }
        Ok(doc)
    }

    /// Drops every cached document whose path starts with `prefix` (`googleapis.com/v0.1.2/`),
    /// so a version installed over an old one is read afresh whatever the files' times.
    pub(crate) fn forget(&self, prefix: &str) {
        if let Ok(mut cache) = self.cache.lock() {
            let stale: Vec<String> = cache
                .iter()
                .filter(|(rel, _)| rel.starts_with(prefix))
                .map(|(rel, _)| rel.clone())
                .collect();
            for rel in stale {
                cache.pop(&rel);
            }
        }
    }

    /// Joins `rel` onto `src/`, refusing absolute paths and `..` (documents are untrusted).
    fn checked_path(&self, rel: &str) -> Result<PathBuf> {
        let candidate = Path::new(rel);
        let safe = !rel.is_empty()
            && candidate
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !safe {
            return Err(Error::bad_document(format!(
                "refusing document path '{rel}': only paths inside the registry are allowed"
            )));
        }
        Ok(self.src.join(candidate))
    }
}

fn parse_file(path: &Path, rel: &str) -> Result<Doc> {
    let meta = std::fs::metadata(path).map_err(|err| {
        Error::bad_document(format!("provider document '{rel}' cannot be read: {err}"))
    })?;
    if meta.len() > MAX_DOCUMENT_BYTES {
        return Err(Error::bad_document(format!(
            "provider document '{rel}' is {} bytes, over the {MAX_DOCUMENT_BYTES}-byte limit",
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|err| {
        Error::bad_document(format!("provider document '{rel}' cannot be read: {err}"))
    })?;
    let value: Value = super::yaml::parse(&text).map_err(|err| {
        Error::bad_document(format!(
            "provider document '{rel}' is not valid YAML: {err}"
        ))
    })?;
    Ok(Doc {
        rel: rel.to_owned(),
        value,
        sha256: crate::lock::sha256_hex(text.as_bytes()),
    })
}

/// Splits a `$ref` into (file part, JSON pointer). `#/a/b` → ("", "/a/b").
pub(crate) fn split_ref(reference: &str) -> (&str, &str) {
    match reference.split_once('#') {
        Some((file, pointer)) => (file, pointer),
        None => (reference, ""),
    }
}
