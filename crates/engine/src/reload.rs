//! `reload_credentials` in three ordered phases: re-source the tenant's env file, drop the
//! auth state derived from it, then report every installed provider against the values now
//! in force. The report is a function of the documents and the store alone, so it is the
//! same before and after a provider's first query.
//!
//! The credential-source summary `server_info` shows ([`credential_sources`]) is kept per
//! tenant (`SourceCache`, in `source_cache.rs`): which providers are installed, their auth and the source the
//! tenant's values select are read once, then reused until the credentials are reloaded, a
//! provider is pulled, or the registry's recheck interval has passed (a provider folder
//! changed by hand is seen then, as a provider opened for a query is). The source of a
//! cached token and its expiry are looked up on every call.

use std::collections::HashMap;
use std::sync::Arc;

use super::credential_report::{self, CredentialReport, ProviderCredentials, ProviderSource};
use super::credentials::CredentialStore;
use super::discovery::providers;
use super::error::{Error, ErrorKind, Result};
use super::source_cache::SummaryRow;
use super::state::Inner;
use super::state::open_provider;
use super::types::ExecContext;

pub(crate) fn reload_credentials(
    inner: &Inner,
    cx: &ExecContext,
    only: Option<&str>,
) -> Result<CredentialReport> {
    inner.sources.clear();
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
        .map(|(name, auth)| (name.as_str(), credential_report::fingerprint(auth, store)))
        .collect();

    // Phase 1: re-source. Phase 2: drop derived auth state (tokens) of the providers in scope.
    let outcome = store.source()?;
    match only {
        Some(name) => store.tokens().clear(&format!("{name}/")),
        None => store.tokens().clear(""),
    }
    inner.sources.clear();

    // Phase 3: report.
    let mut rows: Vec<ProviderCredentials> = auths
        .iter()
        .map(|(name, auth)| {
            let (status, detail) = credential_report::status(name, auth, store);
            let after = credential_report::fingerprint(auth, store);
            ProviderCredentials {
                provider: name.clone(),
                auth_type: credential_report::auth_type(auth),
                sourced_from: credential_report::sourced_from(auth),
                status,
                detail,
                changed: before.get(name.as_str()) != Some(&after),
                resolved_source: credential_report::resolved_source(name, auth, store),
                token_expires_at: credential_report::token_expires_at(name, store),
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
/// cached token expires, without re-reading anything or dropping any token. Reads the
/// registry folder and the documents (off the async threads) and keeps the summary for
/// [`cached_sources`].
pub(crate) fn credential_sources(inner: &Inner, cx: &ExecContext) -> Result<Vec<ProviderSource>> {
    let stamp = inner.sources.stamp(&inner.registry);
    let store = cx.credentials.as_ref();
    store.reread_env_file_if_changed();
    let mut rows = Vec::new();
    for info in providers(inner, cx)? {
        let provider = open_provider(inner, cx, &info.name)?;
        let auth = inner.effective_auth(&provider);
        rows.push(SummaryRow {
            auth_type: credential_report::auth_type(&auth),
            source: credential_report::source_summary(&info.name, &auth, store),
            provider: info.name,
        });
    }
    rows.sort_by(|a, b| a.provider.cmp(&b.provider));
    let rows: Arc<[SummaryRow]> = rows.into();
    let out = in_force(&rows, store);
    inner.sources.put(cx, stamp, rows);
    Ok(out)
}

/// [`credential_sources`] from the kept summary, when one is current for `cx` (no file is
/// read: fit for an async thread).
pub(crate) fn cached_sources(inner: &Inner, cx: &ExecContext) -> Option<Vec<ProviderSource>> {
    let rows = inner
        .sources
        .get(&inner.registry, inner.store.recheck(), cx)?;
    Some(in_force(&rows, cx.credentials.as_ref()))
}

fn in_force(rows: &[SummaryRow], store: &CredentialStore) -> Vec<ProviderSource> {
    rows.iter()
        .map(|row| ProviderSource {
            provider: row.provider.clone(),
            auth_type: row.auth_type.clone(),
            resolved_source: row.source.resolve(&row.provider, store),
            token_expires_at: credential_report::token_expires_at(&row.provider, store),
        })
        .collect()
}
