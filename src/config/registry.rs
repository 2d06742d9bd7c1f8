//! `registry:` — the local registry folder, the document cache and the remote registry.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::paths::PathResolver;
use super::problems::{GIB, HOUR, Problems};
use crate::engine::{DEFAULT_REGISTRY_RECHECK, RemoteRegistryConfig};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawRegistry {
    pub(super) root: Option<PathBuf>,
    pub(super) document_cache_size: usize,
    #[serde(with = "humantime_serde")]
    pub(super) recheck_interval: Duration,
    /// `null` or `""` disables listing and pulling.
    pub(super) url: Option<String>,
    pub(super) max_download_bytes: u64,
    pub(super) max_unpacked_bytes: u64,
    pub(super) max_entry_bytes: u64,
    pub(super) max_entries: usize,
    /// The provider lock; absent: `<root>/providers.lock`.
    pub(super) lock_file: Option<PathBuf>,
    /// Verify pulled packages' signatures (StackQL's `nopVerify` is `verify: false`).
    pub(super) verify: bool,
    /// PEM files of signing certificates trusted besides StackQL's.
    pub(super) trusted_certificates: Vec<PathBuf>,
}

impl Default for RawRegistry {
    fn default() -> Self {
        let remote = RemoteRegistryConfig::default();
        RawRegistry {
            root: None,
            document_cache_size: 64,
            recheck_interval: DEFAULT_REGISTRY_RECHECK,
            url: remote.url,
            max_download_bytes: remote.max_download_bytes,
            max_unpacked_bytes: remote.max_unpacked_bytes,
            max_entry_bytes: remote.max_entry_bytes,
            max_entries: remote.max_entries,
            lock_file: None,
            verify: remote.verify,
            trusted_certificates: remote.trusted_certificates,
        }
    }
}

/// The validated `registry:` section.
#[derive(Debug)]
pub(super) struct Registry {
    pub(super) root: PathBuf,
    pub(super) document_cache_size: usize,
    pub(super) recheck_interval: Duration,
    pub(super) remote: RemoteRegistryConfig,
}

/// Checks `registry:`; an unset root becomes the platform default.
pub(super) fn check_registry(
    raw: RawRegistry,
    env: &HashMap<String, String>,
    paths: &PathResolver,
    problems: &mut Problems,
) -> Registry {
    let root = match raw.root {
        Some(root) => paths.resolve(&root).unwrap_or_else(|message| {
            problems.push("registry.root", message);
            root
        }),
        None => default_registry_root(env),
    };
    problems.in_range(
        "registry.document_cache_size",
        raw.document_cache_size as u64,
        100_000,
    );
    // Zero is allowed: the folder is looked at on every statement.
    if raw.recheck_interval > HOUR {
        problems.push(
            "registry.recheck_interval",
            format!(
                "{} is more than the longest allowed, 1h",
                humantime::format_duration(raw.recheck_interval)
            ),
        );
    }
    for (key, value) in [
        ("registry.max_download_bytes", raw.max_download_bytes),
        ("registry.max_unpacked_bytes", raw.max_unpacked_bytes),
        ("registry.max_entry_bytes", raw.max_entry_bytes),
    ] {
        problems.in_range(key, value, 64 * GIB);
    }
    problems.in_range("registry.max_entries", raw.max_entries as u64, 10_000_000);
    let url = raw
        .url
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty());
    if let Some(url) = &url {
        problems.url("registry.url", url, &["http", "https", "file"]);
    }
    let lock_file = raw.lock_file.map(|file| {
        paths.resolve(&file).unwrap_or_else(|message| {
            problems.push("registry.lock_file", message);
            file
        })
    });
    let trusted_certificates = raw
        .trusted_certificates
        .iter()
        .map(|path| paths.resolve_or_report(path, "registry.trusted_certificates", problems))
        .collect();
    Registry {
        root,
        document_cache_size: raw.document_cache_size,
        recheck_interval: raw.recheck_interval,
        remote: RemoteRegistryConfig {
            url,
            max_download_bytes: raw.max_download_bytes,
            max_unpacked_bytes: raw.max_unpacked_bytes,
            max_entry_bytes: raw.max_entry_bytes,
            max_entries: raw.max_entries,
            lock_file,
            verify: raw.verify,
            trusted_certificates,
        },
    }
}

/// `$XDG_DATA_HOME/querygate/registry`, else `$HOME/.local/share/querygate/registry`, else
/// `./querygate-registry`.
fn default_registry_root(env: &HashMap<String, String>) -> PathBuf {
    let non_empty = |key: &str| env.get(key).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(data) = non_empty("XDG_DATA_HOME") {
        return data.join("querygate").join("registry");
    }
    if let Some(home) = non_empty("HOME") {
        return home.join(".local/share/querygate/registry");
    }
    PathBuf::from("querygate-registry")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_is_on_by_default_and_certificate_paths_resolve() {
        let env = HashMap::from([("HOME".to_owned(), "/home/u".to_owned())]);
        let paths = PathResolver::new(&env, Some(std::path::Path::new("/etc/qg/config.yaml")));
        let mut problems = Problems::default();
        let registry = check_registry(RawRegistry::default(), &env, &paths, &mut problems);
        assert!(registry.remote.verify);
        assert!(registry.remote.trusted_certificates.is_empty());

        let raw: RawRegistry = serde_norway::from_str(
            "verify: false\ntrusted_certificates: [certs/private.pem, ~/ca.pem, /abs.pem]\n",
        )
        .unwrap();
        let registry = check_registry(raw, &env, &paths, &mut problems);
        assert!(problems.is_empty(), "{problems}");
        assert!(!registry.remote.verify);
        assert_eq!(
            registry.remote.trusted_certificates,
            [
                PathBuf::from("/etc/qg/certs/private.pem"),
                PathBuf::from("/home/u/ca.pem"),
                PathBuf::from("/abs.pem")
            ]
        );
    }
}
