//! The state every engine call shares ([`Inner`], behind the facade's `Engine`) and the
//! opening of providers and resources through it for a tenant.

use std::sync::Arc;

use super::config::EngineConfig;
use super::document::{self, DocumentStore, ModelCache, Provider, Resource};
use super::error::{Error, ErrorKind, Result};
use super::eval;
use super::inline;
use super::observe::UpstreamObserver;
use super::registry::LocalRegistry;
use super::remote::Remote;
use super::source_cache::SourceCache;
use super::types::ExecContext;
use super::upstream::{Upstream, UpstreamSettings};

/// What every engine call shares: configuration, the document store and model cache, the
/// registries, the upstream client and the per-tenant caches.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: EngineConfig,
    pub(crate) store: Arc<DocumentStore>,
    /// Opened resource models, reused while their documents are unchanged.
    pub(crate) models: ModelCache,
    pub(crate) registry: LocalRegistry,
    pub(crate) upstream: Upstream,
    pub(crate) remote: Remote,
    /// Providers already warned about running without settings (warned once each).
    pub(crate) warned_unconfigured: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The threads statements move to when they outgrow the calling thread.
    pub(crate) sqlite_threads: Arc<eval::SqliteThreads>,
    /// The credential-source summaries of `server_info`, by tenant.
    pub(crate) sources: SourceCache,
}

impl Inner {
    /// Builds the shared state of an engine (what `Engine::new` builds).
    pub(crate) fn new(
        config: EngineConfig,
        observer: Option<Arc<dyn UpstreamObserver>>,
    ) -> Result<Self> {
        let store = Arc::new(DocumentStore::new(
            config.registry_root.join("src"),
            config.document_cache_size,
            config.registry_recheck,
        ));
        let pins = config
            .providers
            .iter()
            .filter_map(|(name, p)| Some((name.clone(), p.version.clone()?)))
            .collect();
        let registry = LocalRegistry::new(store.clone(), pins);
        // As many resource models as documents: a model keeps its operations' documents.
        let models = ModelCache::new(config.document_cache_size);
        let upstream = Upstream::new(UpstreamSettings {
            timeout: config.upstream.timeout,
            connect_timeout: config.upstream.connect_timeout,
            page_limit: config.upstream.page_limit,
            max_response_bytes: config.upstream.max_response_bytes,
            retry: config.upstream.retry.clone(),
            max_requests_per_second: config.upstream.max_requests_per_second.clone(),
        })?
        .observed(observer);
        let remote = Remote::new(
            config.remote.clone(),
            upstream.client().clone(),
            config.registry_root.clone(),
        )?;
        Ok(Inner {
            config,
            store,
            models,
            registry,
            upstream,
            remote,
            warned_unconfigured: Default::default(),
            sqlite_threads: Arc::default(),
            sources: Default::default(),
        })
    }

    /// Names under configured provider settings that no installed provider has, sorted.
    pub(crate) fn unmatched_provider_settings(&self) -> Vec<String> {
        let installed: Vec<String> = match self.registry.installed() {
            Ok(installed) => installed.into_iter().map(|p| p.name).collect(),
            Err(_) => return Vec::new(),
        };
        let mut unmatched: Vec<String> = self
            .config
            .providers
            .keys()
            .filter(|name| !installed.contains(name))
            .cloned()
            .collect();
        unmatched.sort();
        unmatched
    }

    /// The auth a provider's requests use: the configured override, else the document's
    /// `config.auth`, else `null`. A provider without settings while some settings name no
    /// installed provider (a typo would send the real API the real credentials) is warned
    /// about, once per provider: the registry is listed for it only then.
    pub(crate) fn effective_auth(&self, provider: &document::Provider) -> serde_json::Value {
        let warned = || {
            self.warned_unconfigured
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        };
        // The warning lists the registry's providers: not on an async thread (the run is
        // done again off it, and warns there). Once given, it refuses nothing.
        if !self.config.providers.is_empty()
            && !self.config.providers.contains_key(&provider.name)
            && !warned().contains(&provider.name)
            && !inline::refused()
            && warned().insert(provider.name.clone())
        {
            for name in self.unmatched_provider_settings() {
                tracing::warn!(
                    "'{}' runs without configured settings while providers.{} names no installed provider: is it a typo?",
                    provider.name,
                    name.escape_debug()
                );
            }
        }
        self.config
            .providers
            .get(&provider.name)
            .and_then(|p| p.auth.clone())
            .or_else(|| provider.config().get("auth").cloned())
            .unwrap_or(serde_json::Value::Null)
    }
}

/// Opens a provider the tenant may use.
pub(crate) fn open_provider(inner: &Inner, cx: &ExecContext, name: &str) -> Result<Arc<Provider>> {
    if !cx.allows(name) {
        return Err(Error::new(
            ErrorKind::ProviderNotAllowed,
            format!(
                "provider '{name}' is not allowed for tenant '{}'",
                cx.tenant
            ),
        ));
    }
    inner.registry.open(name)
}

/// Opens `provider.service.resource`.
pub(crate) fn open_resource(
    inner: &Inner,
    cx: &ExecContext,
    names: &[String; 3],
) -> Result<Arc<Resource>> {
    let [provider, service, resource] = names;
    let provider = open_provider(inner, cx, provider)?;
    provider_resource(inner, &provider, service, resource)
}

/// Opens `service.resource` of an opened provider: the model built for an earlier
/// statement while its documents are unchanged, else built now.
pub(crate) fn provider_resource(
    inner: &Inner,
    provider: &Arc<Provider>,
    service: &str,
    resource: &str,
) -> Result<Arc<Resource>> {
    inner
        .models
        .resource(&inner.store, provider, service, resource)
}
