//! `credentials:` and `tenants:` — who calls run for, what they may do, and where each
//! tenant's credentials come from.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Deserialize;

use super::paths::PathResolver;
use super::problems::Problems;
use super::{Mode, TenantConfig};

/// A tenant's credential store.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCredentials {
    pub(super) env_file: Option<PathBuf>,
    pub(super) process_env: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTenant {
    pub(super) id: String,
    #[serde(default)]
    pub(super) mode: Mode,
    pub(super) allowed_providers: Option<Vec<String>>,
    pub(super) credentials: Option<RawCredentials>,
    pub(super) allow_pull_provider: Option<bool>,
    #[serde(default)]
    pub(super) allowed_tools: Option<Vec<String>>,
    #[serde(default)]
    pub(super) limits: Option<super::identity::RawTenantLimits>,
}

/// Checks `tenants:` with the top-level `credentials:` (the default tenant's store); adds a
/// `default` tenant when the list names none.
pub(super) fn check_tenants(
    raw: Vec<RawTenant>,
    default_credentials: RawCredentials,
    paths: &PathResolver,
    problems: &mut Problems,
) -> Vec<TenantConfig> {
    let mut tenants: Vec<TenantConfig> = Vec::new();
    // The key each tenant's credentials were configured under, for messages.
    let mut credential_keys: Vec<String> = Vec::new();
    for (index, tenant) in raw.into_iter().enumerate() {
        let key = format!("tenants[{index}]");
        let id_ok = !tenant.id.is_empty()
            && tenant
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !id_ok {
            problems.push(
                format!("{key}.id"),
                format!(
                    "'{}' must be non-empty letters, digits, '-', '_' or '.'",
                    tenant.id.escape_debug()
                ),
            );
        }
        if tenants.iter().any(|t| t.id == tenant.id) {
            problems.push(
                format!("{key}.id"),
                format!("tenant id '{}' appears twice", tenant.id.escape_debug()),
            );
        }
        let is_default = tenant.id == "default";
        credential_keys.push(match (&tenant.credentials, is_default) {
            (None, true) => "credentials".to_owned(),
            _ => format!("{key}.credentials"),
        });
        let credentials = match (tenant.credentials, is_default) {
            (Some(own), true) => {
                if default_credentials.env_file.is_some() && own.env_file.is_some() {
                    problems.push(
                        format!("{key}.credentials.env_file"),
                        "credentials.env_file and the default tenant's credentials.env_file are both set; keep one",
                    );
                }
                own
            }
            (Some(own), false) => own,
            (None, true) => default_credentials.clone(),
            (None, false) => RawCredentials::default(),
        };
        let process_env = credentials.process_env.unwrap_or(is_default);
        if process_env && !is_default {
            problems.push(
                format!("{key}.credentials.process_env"),
                format!(
                    "tenant '{}': only the default tenant may read the process environment",
                    tenant.id
                ),
            );
        }
        let limits = super::identity::check_tenant_limits(&tenant.id, tenant.limits, problems);
        tenants.push(TenantConfig {
            id: tenant.id,
            mode: tenant.mode,
            allowed_providers: tenant
                .allowed_providers
                .map(|p| p.into_iter().collect::<BTreeSet<_>>()),
            env_file: resolve_file(
                paths,
                &credential_keys[index],
                credentials.env_file,
                problems,
            ),
            process_env,
            allow_pull_provider: tenant.allow_pull_provider.unwrap_or(is_default),
            allowed_tools: tenant.allowed_tools.map(|t| t.into_iter().collect()),
            limits,
        });
    }
    if !tenants.iter().any(|t| t.id == "default") {
        credential_keys.insert(0, "credentials".to_owned());
        tenants.insert(
            0,
            TenantConfig {
                id: "default".to_owned(),
                mode: Mode::default(),
                allowed_providers: None,
                env_file: resolve_file(
                    paths,
                    "credentials",
                    default_credentials.env_file,
                    problems,
                ),
                process_env: default_credentials.process_env.unwrap_or(true),
                allow_pull_provider: true,
                allowed_tools: None,
                limits: super::TenantLimits::default(),
            },
        );
    }
    for (i, tenant) in tenants.iter().enumerate() {
        if let Some(file) = &tenant.env_file
            && let Some(other) = tenants[..i]
                .iter()
                .find(|t| t.env_file.as_ref() == Some(file))
        {
            problems.push(
                format!("{}.env_file", credential_keys[i]),
                format!(
                    "tenants '{}' and '{}' share the env file '{}'; each tenant needs its own",
                    other.id,
                    tenant.id,
                    file.display()
                ),
            );
        }
    }
    tenants
}

/// A configured env file, `~` expanded and made absolute (see [`PathResolver`]).
fn resolve_file(
    paths: &PathResolver,
    key: &str,
    file: Option<PathBuf>,
    problems: &mut Problems,
) -> Option<PathBuf> {
    let file = file?;
    Some(paths.resolve(&file).unwrap_or_else(|message| {
        problems.push(format!("{key}.env_file"), message);
        file
    }))
}
