//! Engines over documents of the current StackQL registry (`QUERYGATE_COMPAT_REGISTRY`),
//! unpacked per test, wired to a mock upstream.

use std::io::Read;
use std::sync::Arc;

use querygate::engine::{CredentialStore, Engine, EngineConfig, ExecContext, ProviderSettings};
use serde_json::json;

use crate::mock::Mock;
use crate::support::compat_registry;

/// The current registry's files under `prefixes`, unpacked into a registry root; `None`
/// (skipped) when `QUERYGATE_COMPAT_REGISTRY` is not set outside CI.
pub fn current_registry(prefixes: &[&str]) -> Option<tempfile::TempDir> {
    let tarball = compat_registry()?.join("current/registry-src.tar.gz");
    let file =
        std::fs::File::open(&tarball).unwrap_or_else(|err| panic!("{}: {err}", tarball.display()));
    let dir = tempfile::tempdir().unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        if prefixes.iter().any(|p| path.starts_with(p)) && entry.header().entry_type().is_file() {
            let target = dir.path().join(&path);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).unwrap();
            std::fs::write(target, bytes).unwrap();
        }
    }
    Some(dir)
}

/// An engine over `root` whose `provider` calls `mock`, with its auth replaced by a bearer
/// token from `TOKEN` (the operator's `providers.<name>.auth` override).
pub fn engine(root: &std::path::Path, provider: &str, mock: &Mock) -> Engine {
    let mut config = EngineConfig::new(root.to_path_buf());
    config.providers.insert(
        provider.to_owned(),
        ProviderSettings {
            base_url: Some(mock.url()),
            auth: Some(json!({"type": "bearer", "credentialsenvvar": "TOKEN"})),
            ..Default::default()
        },
    );
    Engine::new(config).expect("engine")
}

pub fn context() -> ExecContext {
    ExecContext {
        credentials: Arc::new(CredentialStore::fixed([(
            "TOKEN".to_owned(),
            "t0ken".to_owned(),
        )])),
        ..ExecContext::anonymous_default()
    }
}
