//! The local registry: `<root>/src/<provider folder>/<version>/provider.yaml`.
//!
//! A provider's SQL name is `provider.yaml`'s `name` (the `googleapis.com` folder holds
//! `google`). Several versions → the newest, unless configuration pins one.
//!
//! An opened provider is remembered by name: within the document store's recheck interval
//! after it was resolved, opening it again reads nothing from the folder; after that, the
//! next open resolves it afresh (a version added, removed or changed by hand is seen then).
//! A pull forgets every opened provider and the pulled version's documents at once
//! ([`LocalRegistry::forget`]).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;

use super::document::{DocumentStore, Provider};
use super::error::{Error, ErrorKind, Result};

/// The installed providers of one registry root.
#[derive(Debug)]
pub(crate) struct LocalRegistry {
    store: Arc<DocumentStore>,
    pins: HashMap<String, String>,
    /// Providers opened by SQL name, with when they were resolved from the folder.
    opened: Mutex<HashMap<String, (Arc<Provider>, Instant)>>,
    /// Counts [`LocalRegistry::forget`]s: what was derived from an older generation is
    /// stale.
    generation: AtomicU64,
}

/// A provider folder and its versions, newest first.
#[derive(Debug, Clone)]
pub(crate) struct Installed {
    pub(crate) name: String,
    pub(crate) dir: String,
    pub(crate) versions: Vec<String>,
    pub(crate) chosen: String,
}

impl LocalRegistry {
    /// A registry reading documents through `store`; `pins` maps SQL names to versions.
    pub(crate) fn new(store: Arc<DocumentStore>, pins: HashMap<String, String>) -> Self {
        LocalRegistry {
            store,
            pins,
            opened: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
        }
    }

    /// The number of [`LocalRegistry::forget`]s so far.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(AtomicOrdering::SeqCst)
    }

    /// After a version was installed into `prefix` (`googleapis.com/v0.1.2/`): forgets every
    /// opened provider, so the next open of each resolves it from the folder, and drops the
    /// cached documents under `prefix`, so they are read afresh whatever the files' times.
    pub(crate) fn forget(&self, prefix: &str) {
        if let Ok(mut opened) = self.opened.lock() {
            opened.clear();
        }
        self.store.forget(prefix);
        // After the caches are cleared: whatever read the generation before this saw the
        // old one, whatever reads it after reads the new documents.
        self.generation.fetch_add(1, AtomicOrdering::SeqCst);
    }

    /// `name`'s provider when it was resolved within the recheck interval.
    fn recently_opened(&self, name: &str) -> Option<Arc<Provider>> {
        let opened = self.opened.lock().ok()?;
        let (provider, resolved) = opened.get(name)?;
        (resolved.elapsed() < self.store.recheck()).then(|| provider.clone())
    }

    /// Every installed provider, sorted by SQL name.
    pub(crate) fn installed(&self) -> Result<Vec<Installed>> {
        super::inline::check()?;
        let src = self.store.src();
        let entries = match std::fs::read_dir(src) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => {
                return Err(Error::new(
                    ErrorKind::Registry,
                    format!("cannot read registry folder '{}': {err}", src.display()),
                ));
            }
        };
        let mut out: Vec<Installed> = entries
            .flatten()
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter_map(|dir| self.inspect(dir))
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// One provider folder: its versions and SQL name, or `None` when it holds no readable
    /// provider (logged).
    fn inspect(&self, dir: String) -> Option<Installed> {
        let path = self.store.src().join(&dir);
        if !is_safe_name(&dir) || !path.is_dir() {
            return None;
        }
        let mut versions: Vec<String> = std::fs::read_dir(&path)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|v| v.path().join("provider.yaml").is_file())
            .filter_map(|v| v.file_name().into_string().ok())
            .filter(|v| is_safe_name(v))
            .collect();
        versions.sort_by(|a, b| compare_versions(b, a));
        let newest = versions.first()?.clone();
        let name = match self.store.load(&format!("{dir}/{newest}/provider.yaml")) {
            Ok(doc) => doc
                .value
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or(&dir)
                .to_owned(),
            Err(err) => {
                tracing::warn!(provider_dir = ?dir, error = %err, "skipping unreadable provider");
                return None;
            }
        };
        let chosen = match self.pins.get(&name) {
            Some(pin) if versions.contains(pin) => pin.clone(),
            _ => newest,
        };
        Some(Installed {
            name,
            dir,
            versions,
            chosen,
        })
    }

    /// Opens the provider whose SQL name is `name`: the one opened within the recheck
    /// interval, without reading the folder, or else resolved from it. The folder of the
    /// same name is tried first, so a query reads only its own provider's `provider.yaml`;
    /// other folders are scanned only for aliases (`google` lives in `googleapis.com`).
    pub(crate) fn open(&self, name: &str) -> Result<Arc<Provider>> {
        if !is_safe_name(name) {
            return Err(Error::unknown(format!(
                "provider '{name}' is not installed"
            )));
        }
        if let Some(provider) = self.recently_opened(name) {
            return Ok(provider);
        }
        let provider = self.resolve(name)?;
        if let Ok(mut opened) = self.opened.lock() {
            opened.insert(name.to_owned(), (provider.clone(), Instant::now()));
        }
        Ok(provider)
    }

    /// Finds `name`'s folder and chosen version and loads its `provider.yaml`.
    fn resolve(&self, name: &str) -> Result<Arc<Provider>> {
        super::inline::check()?;
        let same_folder = self.inspect(name.to_owned()).filter(|p| p.name == name);
        let found = match same_folder {
            Some(found) => found,
            None => self
                .installed()?
                .into_iter()
                .find(|p| p.name == name)
                .ok_or_else(|| {
                    Error::unknown(format!(
                        "provider '{name}' is not installed; list_registry (REGISTRY LIST) shows what the registry offers and pull_provider (REGISTRY PULL {name}) installs it"
                    ))
                })?,
        };
        if let Some(pin) = self.pins.get(name)
            && &found.chosen != pin
        {
            return Err(Error::new(
                ErrorKind::Registry,
                format!(
                    "provider '{name}' is pinned to version '{pin}', which is not installed (installed: {})",
                    found.versions.join(", ")
                ),
            ));
        }
        let doc = self
            .store
            .load(&format!("{}/{}/provider.yaml", found.dir, found.chosen))?;
        Ok(Arc::new(Provider {
            name: found.name,
            doc,
        }))
    }
}

/// Names that may become path components: no separators, no `..`, no control characters.
pub(crate) fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Orders `v1.2.10` after `v1.2.9`: numeric where both parts are numbers.
pub(crate) fn compare_versions(a: &str, b: &str) -> Ordering {
    let parts = |v: &str| -> Vec<String> {
        v.trim_start_matches(['v', 'V'])
            .split(['.', '-'])
            .map(str::to_owned)
            .collect()
    };
    let (pa, pb) = (parts(a), parts(b));
    for (x, y) in pa.iter().zip(pb.iter()) {
        let ord = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            _ => x.cmp(y),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    pa.len().cmp(&pb.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(compare_versions("v0.2.10", "v0.2.9"), Ordering::Greater);
        assert_eq!(compare_versions("v1.0.0", "v1.0.0"), Ordering::Equal);
        assert_eq!(compare_versions("v0.1.2", "v0.2.1"), Ordering::Less);
    }

    #[test]
    fn unsafe_names_are_refused() {
        for bad in ["", "..", "a/b", "a\\b", "x y", "\u{0}"] {
            assert!(!is_safe_name(bad), "{bad:?}");
        }
        assert!(is_safe_name("googleapis.com"));
    }
}
