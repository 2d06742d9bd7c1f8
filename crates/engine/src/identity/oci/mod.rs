//! `oci_signing_v1` (the auth type of the registry's `oci` provider): every request is
//! signed with an OCI API key (see [`signer`]). The key and its identity come from the
//! statement's tenant, first found wins:
//!
//! 1. **Variables**: the tenancy OCID, user OCID, key fingerprint and private key, each from
//!    the variable the auth object names (`tenancy_ocid_env_var`, `user_ocid_env_var`,
//!    `fingerprint_env_var`, `private_key_env_var` for the PEM itself or
//!    `private_key_path_env_var` for its file), else the OCI CLI's variables
//!    (`OCI_CLI_TENANCY`, `OCI_CLI_USER`, `OCI_CLI_FINGERPRINT`, `OCI_CLI_KEY_FILE`), else
//!    the short names (`OCI_TENANCY`, `OCI_USER`, `OCI_FINGERPRINT`, `OCI_KEY_FILE`). Used
//!    when a tenancy variable is set; then the other three must be too.
//! 2. **Config file**: the OCI CLI's INI file, profile `profile` (else `OCI_CLI_PROFILE`,
//!    else `DEFAULT`), keys `tenancy`, `user`, `fingerprint`, `key_file` (a leading `~`
//!    is the tenant's `HOME`). The file named by the tenant's `OCI_CLI_CONFIG_FILE`; the
//!    auth object's `config_file_path` or `~/.oci/config` only for a tenant that may use
//!    the host's identity: a path in a shared document, or the host's home, is the host's
//!    credential and serves no other tenant.
//!
//! A passphrase (`passphrase_env_var`, `OCI_CLI_PASSPHRASE`, `OCI_PASSPHRASE`,
//! `pass_phrase`) is not used: an encrypted key is refused with a typed error (see
//! [`key`]). Errors name variables, files and profiles, never values.

pub(crate) mod key;
pub(crate) mod signer;
#[cfg(test)]
mod vectors;

use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::{credential_error, field};
use crate::credentials::{CredentialSource, read_credential_file};
use crate::error::Result;

/// The identity a request is signed as, and where its key is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Material {
    tenancy: String,
    user: String,
    fingerprint: String,
    key: KeySource,
    /// Which source gave it: `variables` or `config_file`.
    origin: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum KeySource {
    /// The PEM itself, from the variable named.
    Inline { pem: String, var: String },
    /// A file, and how it is shown in errors.
    File { path: String, shown: String },
}

/// One credential piece: the auth object's variable, else the defaults.
struct Piece {
    field: &'static str,
    defaults: &'static [&'static str],
}

const TENANCY: Piece = Piece {
    field: "tenancy_ocid_env_var",
    defaults: &["OCI_CLI_TENANCY", "OCI_TENANCY"],
};
const USER: Piece = Piece {
    field: "user_ocid_env_var",
    defaults: &["OCI_CLI_USER", "OCI_USER"],
};
const FINGERPRINT: Piece = Piece {
    field: "fingerprint_env_var",
    defaults: &["OCI_CLI_FINGERPRINT", "OCI_FINGERPRINT"],
};
const KEY_FILE: Piece = Piece {
    field: "private_key_path_env_var",
    defaults: &["OCI_CLI_KEY_FILE", "OCI_KEY_FILE"],
};

/// The variables `piece` is read from, in order.
fn names<'a>(auth: &'a Value, piece: &Piece) -> Vec<&'a str> {
    match field(auth, piece.field) {
        Some(var) => vec![var],
        None => piece.defaults.to_vec(),
    }
}

/// The first set variable of `piece`: (variable, value).
fn lookup(
    auth: &Value,
    piece: &Piece,
    credentials: &dyn CredentialSource,
) -> Option<(String, String)> {
    names(auth, piece)
        .into_iter()
        .find_map(|var| credentials.get(var).map(|value| (var.to_owned(), value)))
}

fn required(
    auth: &Value,
    piece: &Piece,
    credentials: &dyn CredentialSource,
) -> std::result::Result<String, String> {
    lookup(auth, piece, credentials)
        .map(|(_, value)| value)
        .ok_or_else(|| {
            format!(
                "oci_signing_v1: the tenancy variable is set but none of {} is",
                names(auth, piece).join(", ")
            )
        })
}

/// Source 1, when a tenancy variable is set.
fn from_variables(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<Option<Material>, String> {
    let Some((_, tenancy)) = lookup(auth, &TENANCY, credentials) else {
        return Ok(None);
    };
    let user = required(auth, &USER, credentials)?;
    let fingerprint = required(auth, &FINGERPRINT, credentials)?;
    let inline = field(auth, "private_key_env_var")
        .and_then(|var| credentials.get(var).map(|pem| (var.to_owned(), pem)));
    let key = match inline {
        Some((var, pem)) => KeySource::Inline { pem, var },
        None => {
            let (var, path) = lookup(auth, &KEY_FILE, credentials).ok_or_else(|| {
                let mut vars = field(auth, "private_key_env_var")
                    .map(|v| vec![v])
                    .unwrap_or_default();
                vars.extend(names(auth, &KEY_FILE));
                format!(
                    "oci_signing_v1: the tenancy variable is set but no private key is ({} not set)",
                    vars.join(", ")
                )
            })?;
            let shown = format!("key file '{path}' (from variable {var})");
            KeySource::File { path, shown }
        }
    };
    Ok(Some(Material {
        tenancy,
        user,
        fingerprint,
        key,
        origin: "variables",
    }))
}

/// Source 2: the config file, if one may be read for this tenant.
fn from_config_file(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<Material, String> {
    let host = credentials.allows_host_identity();
    let home = credentials.get("HOME");
    let (path, shown) = if let Some(path) = credentials.get("OCI_CLI_CONFIG_FILE") {
        let shown = format!("config file '{path}' (from variable OCI_CLI_CONFIG_FILE)");
        (path, shown)
    } else if let (Some(path), true) = (field(auth, "config_file_path"), host) {
        let path = expand_home(path, home.as_deref());
        (path.clone(), format!("config file '{path}'"))
    } else if let (Some(home), true) = (home.as_deref(), host) {
        let path = format!("{}/.oci/config", home.trim_end_matches('/'));
        (path.clone(), format!("config file '{path}'"))
    } else {
        let mut vars = names(auth, &TENANCY);
        vars.push("OCI_CLI_CONFIG_FILE");
        return Err(format!(
            "oci_signing_v1 found no credential: {} not set{}",
            vars.join(", "),
            if host {
                ""
            } else {
                " (a config file the document names, or the host's ~/.oci/config, serves only the tenant that reads the process environment)"
            }
        ));
    };
    let profile = field(auth, "profile")
        .map(str::to_owned)
        .or_else(|| credentials.get("OCI_CLI_PROFILE"))
        .unwrap_or_else(|| "DEFAULT".to_owned());
    let text = read_credential_file(std::path::Path::new(&path))
        .map_err(|err| format!("oci_signing_v1: {shown} cannot be read: {err}"))?;
    let section = profile_section(&text, &profile)
        .ok_or_else(|| format!("oci_signing_v1: {shown} has no profile [{profile}]"))?;
    let get = |key: &str| {
        section
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("oci_signing_v1: profile [{profile}] of {shown} has no '{key}'"))
    };
    let key_path = expand_home(&get("key_file")?, home.as_deref());
    Ok(Material {
        tenancy: get("tenancy")?,
        user: get("user")?,
        fingerprint: get("fingerprint")?,
        key: KeySource::File {
            shown: format!("key file '{key_path}' (from profile [{profile}] of {shown})"),
            path: key_path,
        },
        origin: "config_file",
    })
}

fn expand_home(path: &str, home: Option<&str>) -> String {
    match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => format!("{}/{rest}", home.trim_end_matches('/')),
        _ => path.to_owned(),
    }
}

/// The `key = value` pairs of `[profile]` in an INI text (`#`/`;` comments skipped).
fn profile_section(text: &str, profile: &str) -> Option<Vec<(String, String)>> {
    let mut found = None;
    let mut current = false;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.trim() == profile;
            if current {
                found.get_or_insert_with(Vec::new);
            }
            continue;
        }
        if current && let Some((k, v)) = line.split_once('=') {
            found
                .get_or_insert_with(Vec::new)
                .push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    found
}

fn material(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<Material, String> {
    match from_variables(auth, credentials)? {
        Some(found) => Ok(found),
        None => from_config_file(auth, credentials),
    }
}

/// Keys parsed lately, by the SHA-256 of their PEM text: a statement resolves its auth
/// once, and parsing (and ring's validation of) an RSA key each time is work for nothing
/// while the key is unchanged. A rotated key has other text, so it is parsed afresh.
static PARSED_KEYS: std::sync::LazyLock<
    std::sync::Mutex<lru::LruCache<[u8; 32], Arc<ring::signature::RsaKeyPair>>>,
> = std::sync::LazyLock::new(|| {
    std::sync::Mutex::new(lru::LruCache::new(
        std::num::NonZeroUsize::MIN.saturating_add(63),
    ))
});

fn load_key(key: &KeySource) -> std::result::Result<Arc<ring::signature::RsaKeyPair>, String> {
    let (pem, shown) = match key {
        KeySource::Inline { pem, var } => (pem.clone(), format!("variable {var}")),
        KeySource::File { path, shown } => (
            read_credential_file(std::path::Path::new(path))
                .map_err(|err| format!("oci_signing_v1: {shown} cannot be read: {err}"))?,
            shown.clone(),
        ),
    };
    let digest: [u8; 32] = Sha256::digest(pem.as_bytes()).into();
    let cached = PARSED_KEYS
        .lock()
        .ok()
        .and_then(|mut keys| keys.get(&digest).cloned());
    if let Some(parsed) = cached {
        return Ok(parsed);
    }
    let parsed = Arc::new(
        key::load(&pem).map_err(|err| format!("oci_signing_v1: {}", err.describe(&shown)))?,
    );
    if let Ok(mut keys) = PARSED_KEYS.lock() {
        keys.put(digest, parsed.clone());
    }
    Ok(parsed)
}

/// The signer for `provider`'s requests from `credentials`' tenant.
pub(super) fn signer(
    provider: &str,
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> Result<signer::Signer> {
    let found = material(auth, credentials).map_err(|c| credential_error(provider, &c))?;
    let key = load_key(&found.key).map_err(|c| credential_error(provider, &c))?;
    let key_id = format!("{}/{}/{}", found.tenancy, found.user, found.fingerprint);
    Ok(signer::Signer::new(provider, key_id, key))
}

/// Checks without a network call that the tenant has a usable key.
pub(super) fn check(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<bool, String> {
    let found = material(auth, credentials)?;
    load_key(&found.key)?;
    Ok(true)
}

/// The configured source, for the credential report: `variables` or `config_file`.
pub(crate) fn configured_source(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> Option<String> {
    material(auth, credentials)
        .ok()
        .map(|found| found.origin.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::CredentialStore;
    use serde_json::json;

    const KEY: &str = include_str!("../../../../../tests/fixtures/oci/tenant_a_key.pem");

    fn store(pairs: &[(&str, &str)]) -> CredentialStore {
        CredentialStore::fixed(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
    }

    #[test]
    fn variables_named_by_the_document_else_the_cli_names() {
        let auth = json!({"type": "oci_signing_v1"});
        let s = store(&[
            ("OCI_CLI_TENANCY", "ocid1.tenancy.oc1..t"),
            ("OCI_USER", "ocid1.user.oc1..u"),
            ("OCI_CLI_FINGERPRINT", "aa:bb"),
            ("OCI_PRIVATE_KEY", KEY),
        ]);
        let err = material(&auth, &s).err().unwrap_or_default();
        assert!(
            err.contains("OCI_CLI_KEY_FILE, OCI_KEY_FILE not set"),
            "{err}"
        );
        let named = json!({"type": "oci_signing_v1", "private_key_env_var": "OCI_PRIVATE_KEY"});
        let found = material(&named, &s).expect("material");
        assert_eq!(found.tenancy, "ocid1.tenancy.oc1..t");
        assert_eq!(found.user, "ocid1.user.oc1..u");
        assert!(signer("oci", &named, &s).is_ok());
        let only_tenancy = store(&[("OCI_TENANCY", "t")]);
        let err = material(&auth, &only_tenancy).err().unwrap_or_default();
        assert!(err.contains("none of OCI_CLI_USER, OCI_USER is"), "{err}");
    }

    #[test]
    fn the_config_file_of_the_host_serves_only_a_host_identity_tenant() {
        let dir = tempfile::tempdir().expect("dir");
        let config = dir.path().join("config");
        let key = dir.path().join("key.pem");
        std::fs::write(&key, KEY).expect("key");
        std::fs::write(
            &config,
            format!(
                "[DEFAULT]\ntenancy=ocid1.tenancy.oc1..d\nuser=u\nfingerprint=f\nkey_file={}\n\n[OTHER]\ntenancy = ocid1.tenancy.oc1..o\nuser = u2\nfingerprint = f2\nkey_file = ~/key.pem\n",
                key.display()
            ),
        )
        .expect("config");
        let path = config.display().to_string();
        let home = dir.path().display().to_string();
        let auth = json!({"type": "oci_signing_v1", "config_file_path": path, "profile": "OTHER"});
        let tenant = store(&[("HOME", &home)]);
        let err = material(&auth, &tenant).err().unwrap_or_default();
        assert!(
            err.contains("serves only the tenant that reads the process environment"),
            "{err}"
        );
        let host = store(&[("HOME", &home)]).with_host_identity(true);
        let found = material(&auth, &host).expect("host material");
        assert_eq!(found.tenancy, "ocid1.tenancy.oc1..o");
        assert!(check(&auth, &host).is_ok());
        // The tenant's own variable may name a config file; the default profile is read.
        let own = store(&[("OCI_CLI_CONFIG_FILE", &path)]);
        let plain = json!({"type": "oci_signing_v1"});
        assert_eq!(
            material(&plain, &own).expect("own").tenancy,
            "ocid1.tenancy.oc1..d"
        );
        assert_eq!(
            configured_source(&plain, &own).as_deref(),
            Some("config_file")
        );
        let missing = json!({"type": "oci_signing_v1", "profile": "NOPE"});
        let err = material(&missing, &own).err().unwrap_or_default();
        assert!(err.contains("has no profile [NOPE]"), "{err}");
    }
}
