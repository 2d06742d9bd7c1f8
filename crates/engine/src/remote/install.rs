//! Installs a downloaded package: unpack into a temporary folder inside the registry root,
//! verify its signatures (unless `registry.verify` is false), check it, then move it into
//! `src/<folder>/<version>/` with a rename, so no reader ever sees half a provider, nor a
//! provider whose documents failed verification. A failed install leaves the registry root
//! as it was.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tempfile::TempDir;

use super::archive::{self, Limits, Unpacked};
use super::record::{self, Checked, RECORD_FILE};
use super::signing_policy::SignaturePolicy;
use super::verify;
use crate::error::{Error, ErrorKind, Result};
use crate::registry::compare_versions;

/// The StackQL version whose provider document format querygate reads. A package whose
/// `config.minStackQLVersion` is newer is refused.
pub(crate) const STACKQL_COMPATIBLE_VERSION: &str = "v0.9.0";

/// A package unpacked into a temporary folder, not yet visible to the engine.
#[derive(Debug)]
pub(crate) struct Staged {
    /// Removed (with whatever it holds) when dropped.
    temp: TempDir,
    /// `<temp>/<version>`: the unpacked package.
    dir: PathBuf,
    /// The parsed `provider.yaml`.
    provider: Value,
    /// What was unpacked.
    pub(crate) unpacked: Unpacked,
    /// How its signatures were checked.
    pub(crate) checked: Checked,
}

fn registry_error(message: String) -> Error {
    Error::new(ErrorKind::Registry, message)
}

/// Unpacks `tgz` (the package of `name` at `version`) into a temporary folder under `root`,
/// verifies every document's signature as `signatures` says (before anything in the package
/// is read), and checks that it holds a parseable `provider.yaml` naming `name`.
pub(crate) fn stage(
    root: &Path,
    name: &str,
    version: &str,
    tgz: &[u8],
    limits: Limits,
    signatures: SignaturePolicy<'_>,
) -> Result<Staged> {
    std::fs::create_dir_all(root).map_err(|err| {
        registry_error(format!(
            "cannot create registry folder '{}': {err}",
            root.display()
        ))
    })?;
    let temp = tempfile::Builder::new()
        .prefix(".querygate-pull-")
        .tempdir_in(root)
        .map_err(|err| {
            registry_error(format!(
                "cannot create a temporary folder in '{}': {err}",
                root.display()
            ))
        })?;
    let dir = temp.path().join(version);
    let unpacked = archive::unpack(tgz, version, &dir, limits).map_err(|err| {
        registry_error(format!(
            "refusing package {name} {version} from the registry: {err}"
        ))
    })?;
    let invalid = |what: String| {
        registry_error(format!(
            "refusing package {name} {version} from the registry: {what}"
        ))
    };
    if std::fs::symlink_metadata(dir.join(RECORD_FILE)).is_ok() {
        return Err(invalid(format!(
            "it holds '{version}/{RECORD_FILE}', a name querygate keeps for its install record"
        )));
    }
    let checked = match signatures {
        SignaturePolicy::Verify { trust, now } => {
            let found = verify::package(&dir, version, trust, now).map_err(|refusal| {
                let kind = match refusal {
                    verify::Refusal::Read { .. } => ErrorKind::Registry,
                    _ => ErrorKind::RegistrySignature,
                };
                Error::new(
                    kind,
                    format!("refusing package {name} {version} from the registry: {refusal}"),
                )
            })?;
            Checked::Verified(found)
        }
        SignaturePolicy::Skip => Checked::Skipped,
    };
    let doc_path = dir.join("provider.yaml");
    if !doc_path.is_file() {
        return Err(invalid(format!("it has no '{version}/provider.yaml'")));
    }
    let text = std::fs::read_to_string(&doc_path)
        .map_err(|err| invalid(format!("provider.yaml cannot be read: {err}")))?;
    let provider: Value = serde_norway::from_str(&text)
        .map_err(|err| invalid(format!("provider.yaml is not valid YAML: {err}")))?;
    match provider.get("name").and_then(Value::as_str) {
        Some(found) if found == name => {}
        Some(found) => {
            return Err(invalid(format!(
                "its provider.yaml names provider '{found}', not '{name}'"
            )));
        }
        None => return Err(invalid("its provider.yaml has no 'name'".to_owned())),
    }
    Ok(Staged {
        temp,
        dir,
        provider,
        unpacked,
        checked,
    })
}

/// Checks the staged package against the provider lock at `lock_file` and records it there
/// when the lock does not hold its version yet (before it is installed: a package the lock
/// refuses, or that cannot be recorded, is not installed). With `enforce` (a lock the
/// configuration names) a package that differs from a locked version is refused; without, it
/// replaces that version's entry (the registry's own lock follows its pulls). Without a lock
/// file, one is made of what `root` holds already and the package.
pub(crate) fn lock(
    root: &Path,
    lock_file: &Path,
    enforce: bool,
    folder: &str,
    version: &str,
    staged: &Staged,
) -> Result<()> {
    use crate::lock::{ProviderLock, digest_dir};
    let refused = |why: String| {
        registry_error(format!(
            "refusing {folder} {version}: {why}; nothing was installed"
        ))
    };
    let digests = digest_dir(&staged.dir).map_err(|err| refused(err.0))?;
    // The first pull into a registry without a lock locks what it already holds too.
    let mut lock = match ProviderLock::read(lock_file).map_err(|err| refused(err.0))? {
        Some(lock) => lock,
        None => ProviderLock::of_installed(&root.join("src")).map_err(|err| refused(err.0))?,
    };
    let record = match lock.admits(folder, version, &digests) {
        Ok(record) => record,
        Err(err) if enforce => {
            return Err(refused(format!("{} ('{}')", err.0, lock_file.display())));
        }
        Err(_) => true,
    };
    if record {
        lock.record(folder, version, digests);
        lock.write(lock_file)
            .map_err(|err| refused(format!("cannot record it in the provider lock: {}", err.0)))?;
    }
    Ok(())
}

impl Staged {
    /// Why this package must not be used by this engine, if it must not: a
    /// `config.minStackQLVersion` newer than the format querygate reads.
    pub(crate) fn unusable_reason(&self) -> Option<String> {
        let min = self
            .provider
            .pointer("/config/minStackQLVersion")
            .and_then(Value::as_str)?;
        if compare_versions(min, STACKQL_COMPATIBLE_VERSION).is_gt() {
            Some(format!(
                "it requires StackQL {min} or later (config.minStackQLVersion), and querygate reads the provider format of StackQL {STACKQL_COMPATIBLE_VERSION}"
            ))
        } else {
            None
        }
    }

    /// Writes the install record (see `record`) into the package, then moves the package to
    /// `dest` (`<root>/src/<folder>/<version>`). An existing folder there is first moved
    /// aside into the temporary folder, restored if the move fails, and deleted with the
    /// temporary folder otherwise.
    pub(crate) fn commit(self, dest: &Path, record: &serde_json::Value) -> Result<()> {
        record::write(&self.dir, record).map_err(|err| {
            registry_error(format!(
                "cannot write the install record {RECORD_FILE}: {err}"
            ))
        })?;
        let parent = dest
            .parent()
            .ok_or_else(|| Error::internal("install destination has no parent folder"))?;
        std::fs::create_dir_all(parent).map_err(|err| {
            registry_error(format!("cannot create '{}': {err}", parent.display()))
        })?;
        let aside = self.temp.path().join(".replaced");
        let replacing = match std::fs::symlink_metadata(dest) {
            Ok(_) => {
                std::fs::rename(dest, &aside).map_err(|err| {
                    registry_error(format!(
                        "cannot move the installed '{}' aside: {err}",
                        dest.display()
                    ))
                })?;
                true
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => false,
            Err(err) => {
                return Err(registry_error(format!(
                    "cannot inspect '{}': {err}",
                    dest.display()
                )));
            }
        };
        if let Err(err) = std::fs::rename(&self.dir, dest) {
            if replacing && let Err(back) = std::fs::rename(&aside, dest) {
                tracing::error!(dest = %dest.display(), error = %back, "could not restore the replaced provider version");
            }
            return Err(registry_error(format!(
                "cannot move the package into '{}': {err}",
                dest.display()
            )));
        }
        // Dropping `temp` deletes the replaced version, if any.
        Ok(())
    }
}
