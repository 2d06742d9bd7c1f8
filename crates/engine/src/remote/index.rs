//! The remote registry's index, `<registry>/dist/providers.yaml`: provider names and the
//! versions published for each, plus the name ↔ package folder aliases StackQL applies.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};
use crate::registry::{compare_versions, is_safe_name};

/// Index names whose packages live in a folder of another name (`google` is published as
/// `googleapis.com/<version>.tgz` and installed as `src/googleapis.com/<version>/`).
const FOLDER_ALIASES: &[(&str, &str)] = &[("google", "googleapis.com")];

/// Providers and versions, as the index lists them (versions oldest first).
#[derive(Debug, Default)]
pub(crate) struct Index {
    providers: BTreeMap<String, Vec<String>>,
}

impl Index {
    /// Parses the index YAML. Entries whose names could not be path components are left out
    /// (logged): they could never be pulled.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Self> {
        let invalid = |what: &str| {
            Error::new(
                ErrorKind::Registry,
                format!("the remote registry's providers.yaml is not a provider index: {what}"),
            )
        };
        let text = std::str::from_utf8(bytes).map_err(|_| invalid("not UTF-8 text"))?;
        let value: Value =
            serde_norway::from_str(text).map_err(|err| invalid(&format!("not YAML: {err}")))?;
        let entries = value
            .get("providers")
            .and_then(Value::as_object)
            .ok_or_else(|| invalid("no 'providers' mapping"))?;
        let mut providers = BTreeMap::new();
        for (name, entry) in entries {
            if !is_safe_name(name) {
                tracing::warn!(provider = ?name, "remote index names an unusable provider");
                continue;
            }
            let mut versions: Vec<String> = entry
                .get("versions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter(|v| {
                    let ok = is_safe_name(v);
                    if !ok {
                        tracing::warn!(provider = ?name, version = ?v, "remote index names an unusable version");
                    }
                    ok
                })
                .map(str::to_owned)
                .collect();
            versions.sort_by(|a, b| compare_versions(a, b));
            versions.dedup();
            providers.insert(name.clone(), versions);
        }
        Ok(Index { providers })
    }

    /// Every provider with its versions, sorted by name; versions oldest first.
    pub(crate) fn all(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.providers
            .iter()
            .map(|(name, versions)| (name.as_str(), versions.as_slice()))
    }

    /// The provider `requested` names (its index name or its package folder), as its index
    /// name and versions.
    pub(crate) fn find(&self, requested: &str) -> Option<(&str, &[String])> {
        let name = index_name(requested);
        self.providers
            .get_key_value(name)
            .map(|(name, versions)| (name.as_str(), versions.as_slice()))
    }
}

/// The index (and SQL) name for `requested`, which may be a package folder (`googleapis.com`
/// → `google`).
pub(crate) fn index_name(requested: &str) -> &str {
    FOLDER_ALIASES
        .iter()
        .find(|(_, folder)| *folder == requested)
        .map_or(requested, |(name, _)| name)
}

/// The package (and local) folder of an index name (`google` → `googleapis.com`).
pub(crate) fn package_folder(name: &str) -> &str {
    FOLDER_ALIASES
        .iter()
        .find(|(index, _)| *index == name)
        .map_or(name, |(_, folder)| folder)
}

/// Versions newest first, for trying the newest usable one.
pub(crate) fn newest_first(versions: &[String]) -> Vec<&str> {
    let mut out: Vec<&str> = versions.iter().map(String::as_str).collect();
    out.sort_by(|a, b| match compare_versions(b, a) {
        Ordering::Equal => b.cmp(a),
        other => other,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_maps_aliases() {
        let index = Index::parse(
            b"providers:\n  google:\n    versions: [v0.2.1, v0.1.2, 'bad/one']\n  okta:\n    versions:\n    - v0.1.0\n  '../x':\n    versions: [v1]\n",
        )
        .unwrap();
        let names: Vec<&str> = index.all().map(|(n, _)| n).collect();
        assert_eq!(names, ["google", "okta"]);
        let (name, versions) = index.find("googleapis.com").unwrap();
        assert_eq!(name, "google");
        assert_eq!(versions, ["v0.1.2", "v0.2.1"]);
        assert_eq!(newest_first(versions), ["v0.2.1", "v0.1.2"]);
        assert_eq!(package_folder("google"), "googleapis.com");
        assert_eq!(package_folder("okta"), "okta");
        assert!(Index::parse(b"nope: 1").is_err());
    }
}
