//! `providers:` — per-provider overrides (base URL, pinned version, auth).

use std::collections::HashMap;

use serde::Deserialize;

use super::problems::Problems;
use crate::engine::ProviderSettings;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    pub(super) base_url: Option<String>,
    pub(super) version: Option<String>,
    pub(super) auth: Option<serde_json::Value>,
}

/// Checks `providers:`.
pub(super) fn check_providers(
    raw: HashMap<String, RawProvider>,
    problems: &mut Problems,
) -> HashMap<String, ProviderSettings> {
    let mut names: Vec<&String> = raw.keys().collect();
    names.sort();
    for name in names {
        let settings = &raw[name];
        if let Some(url) = &settings.base_url {
            problems.url(
                &format!("providers.{name}.base_url"),
                url,
                &["http", "https"],
            );
        }
        if let Some(auth) = &settings.auth
            && auth
                .get("type")
                .and_then(serde_json::Value::as_str)
                .is_none()
        {
            problems.push(format!("providers.{name}.auth"), "needs a 'type'");
        }
    }
    raw.into_iter()
        .map(|(name, settings)| {
            let settings = ProviderSettings {
                base_url: settings.base_url,
                version: settings.version,
                auth: settings.auth,
            };
            (name, settings)
        })
        .collect()
}
