//! `providers:` — per-provider overrides (base URL, pinned version, auth). The auth's
//! `credentialsfilepath` is a path of the configuration: `~` expanded, relative to the
//! configuration file's folder.

use std::collections::HashMap;

use serde::Deserialize;

use super::paths::PathResolver;
use super::problems::Problems;
use crate::engine::ProviderSettings;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    pub(super) base_url: Option<String>,
    pub(super) version: Option<String>,
    pub(super) auth: Option<serde_json::Value>,
    pub(super) max_requests_per_second: Option<f64>,
}

/// The auth key holding a file path (a `service_account` key file).
const FILE_PATH_KEY: &str = "credentialsfilepath";

/// Checks `providers:`, resolving the auth's key file path as every configured path is;
/// also returns each provider's `max_requests_per_second` (per tenant).
pub(super) fn check_providers(
    raw: HashMap<String, RawProvider>,
    paths: &PathResolver,
    problems: &mut Problems,
) -> (HashMap<String, ProviderSettings>, HashMap<String, f64>) {
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
        if let Some(rate) = settings.max_requests_per_second
            && !(rate.is_finite() && rate > 0.0 && rate <= 1_000_000.0)
        {
            problems.push(
                format!("providers.{name}.max_requests_per_second"),
                format!("{rate} must be above 0 and at most 1000000"),
            );
        }
    }
    let rates = raw
        .iter()
        .filter_map(|(name, p)| Some((name.clone(), p.max_requests_per_second?)))
        .filter(|(_, rate)| rate.is_finite() && *rate > 0.0)
        .collect();
    let settings = raw
        .into_iter()
        .map(|(name, settings)| {
            let mut auth = settings.auth;
            if let Some(serde_json::Value::String(path)) = auth
                .as_mut()
                .and_then(|auth| auth.get_mut(FILE_PATH_KEY))
                .filter(|path| path.as_str().is_some_and(|p| !p.is_empty()))
            {
                let resolved = paths.resolve_or_report(
                    std::path::Path::new(path.as_str()),
                    &format!("providers.{name}.auth.{FILE_PATH_KEY}"),
                    problems,
                );
                *path = resolved.to_string_lossy().into_owned();
            }
            let settings = ProviderSettings {
                base_url: settings.base_url,
                version: settings.version,
                auth,
            };
            (name, settings)
        })
        .collect();
    (settings, rates)
}
