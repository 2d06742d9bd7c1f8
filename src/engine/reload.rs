//! `reload_credentials` in three ordered phases: re-source the tenant's env file, drop the
//! auth state derived from it, then report every installed provider against the values now
//! in force. The report is a function of the documents and the store alone, so it is the
//! same before and after a provider's first query.

use std::collections::HashMap;

use super::Inner;
use super::credentials::{self, CredentialReport, ProviderCredentials, ProviderSource};
use super::discovery::{open_provider, providers};
use super::error::{Error, ErrorKind, Result};
use super::types::ExecContext;

pub(crate) fn reload_credentials(
    inner: &Inner,
    cx: &ExecContext,
    only: Option<&str>,
) -> Result<CredentialReport> {
    let installed = providers(inner, cx)?;
    if let Some(name) = only
        && !installed.iter().any(|p| p.name == name)
    {
        return Err(Error::new(
            ErrorKind::UnknownTable,
            format!("provider '{name}' is not installed"),
        ));
    }
    let mut auths = Vec::new();
    for info in installed
        .iter()
        .filter(|p| only.is_none_or(|name| p.name == name))
    {
        let provider = open_provider(inner, cx, &info.name)?;
        auths.push((info.name.clone(), inner.effective_auth(&provider)));
    }
    let store = cx.credentials.as_ref();
    let before: HashMap<&str, [u8; 32]> = auths
        .iter()
        .map(|(name, auth)| (name.as_str(), credentials::fingerprint(auth, store)))
        .collect();

    // Phase 1: re-source. Phase 2: drop derived auth state (tokens) of the providers in scope.
    let outcome = store.source()?;
    match only {
        Some(name) => store.tokens().clear(&format!("{name}/")),
        None => store.tokens().clear(""),
    }

    // Phase 3: report.
    let mut rows: Vec<ProviderCredentials> = auths
        .iter()
        .map(|(name, auth)| {
            let (status, detail) = credentials::status(auth, store);
            let after = credentials::fingerprint(auth, store);
            ProviderCredentials {
                provider: name.clone(),
                auth_type: credentials::auth_type(auth),
                sourced_from: credentials::sourced_from(auth),
                status,
                detail,
                changed: before.get(name.as_str()) != Some(&after),
                resolved_source: credentials::resolved_source(name, auth, store),
                token_expires_at: credentials::token_expires_at(name, store),
            }
        })
        .collect();
    rows.sort_by(|a, b| a.provider.cmp(&b.provider));
    tracing::info!(
        tenant = %cx.tenant,
        providers = rows.len(),
        changed = rows.iter().filter(|r| r.changed).count(),
        "credentials reloaded"
    );
    Ok(CredentialReport {
        env_file: outcome.env_file.map(|p| p.display().to_string()),
        env_file_sourced: outcome.sourced,
        sourced_vars: outcome.names,
        providers: rows,
    })
}

/// Per installed provider the tenant may use, which credential source resolves and when its
/// cached token expires, without re-reading anything or dropping any token.
pub(crate) fn credential_sources(inner: &Inner, cx: &ExecContext) -> Result<Vec<ProviderSource>> {
    let store = cx.credentials.as_ref();
    store.reread_env_file_if_changed();
    let mut rows = Vec::new();
    for info in providers(inner, cx)? {
        let provider = open_provider(inner, cx, &info.name)?;
        let auth = inner.effective_auth(&provider);
        rows.push(credentials::provider_source(&info.name, &auth, store));
    }
    rows.sort_by(|a, b| a.provider.cmp(&b.provider));
    Ok(rows)
}
