//! The result cache (`tenants[].cache`): a tenant that opts in gets the result of a SELECT
//! it ran a moment ago again without a request upstream. A step after the gate (so a hit is
//! allowed exactly as a run would be: mode, scopes, pins) and before admission (a hit takes
//! no evaluation slot).
//!
//! Results are keyed by the tenant (each tenant has its own cache), a fingerprint of the
//! tenant's credentials in force ([`CredentialStore::fingerprint`]: never a secret; the
//! tenant's env file is looked at again first, so a rotated credential is another key), the
//! caller (authentication method, issuer and subject) when the statement reads a provider
//! whose upstream identity is the caller's (`tenants[].providers.<p>.token_exchange`), the
//! query as the parser read it ([`PreparedStatement::normalized_query`]: not parsed again),
//! the row cap and the text rendering. An entry is served for `ttl`, and dropped earlier
//! when the tenant writes (INSERT, UPDATE, REPLACE, DELETE, EXEC or an unclassifiable
//! statement) to a provider resource the result read, or reloads its credentials; a write
//! whose resources are not known drops every entry of the tenant. A read that was running
//! while such a write started is not kept. Memory is bounded by `max_entries` (least
//! recently used first) and `max_bytes`.
//!
//! A hit says so: `cached: true` and `cache_age_seconds` in the structured result, a note in
//! the text, and `cache_hit: true` in the audit record.
//!
//! [`CredentialStore::fingerprint`]: crate::engine::CredentialStore::fingerprint
//! [`PreparedStatement::normalized_query`]: crate::engine::PreparedStatement::normalized_query

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};

use lru::LruCache;
use serde_json::Value;
use tokio::time::Instant;
use tower::{Service, ServiceExt as _};

use super::response_bytes::ResponseBytes;
use super::step::{Step, StepFuture, StepLayer};
use super::{Call, CallError, PreparedCall, ToolOutcome, ToolReply};
use crate::clock::Clock;
use crate::config::{Render, TenantCache};
use crate::engine::{CredentialSource as _, PlannedRequest, StatementKind};
use crate::mcp::tools::Effect;
use crate::mcp::transport::Transport;
use crate::policy::QueryClass;

/// Every tenant's result cache.
#[derive(Debug, Default)]
pub(crate) struct ResultCaches {
    tenants: HashMap<String, TenantResults>,
    /// What the TTL is measured on.
    clock: Clock,
}

impl ResultCaches {
    /// A cache for each tenant of `tenants` that has `cache:`, its entries aged on `clock`;
    /// each tenant with the providers whose upstream identity is the caller's.
    pub(crate) fn new<'a>(
        tenants: impl IntoIterator<Item = (&'a str, Option<&'a TenantCache>, BTreeSet<String>)>,
        clock: Clock,
    ) -> Self {
        ResultCaches {
            tenants: tenants
                .into_iter()
                .filter_map(|(id, cache, per_caller)| {
                    Some((id.to_owned(), TenantResults::new(cache?, per_caller)))
                })
                .collect(),
            clock,
        }
    }

    fn tenant(&self, tenant: &str) -> Option<&TenantResults> {
        self.tenants.get(tenant)
    }
}

/// One tenant's cache.
struct TenantResults {
    config: TenantCache,
    /// Providers whose upstream identity is the caller's: results that read one are keyed
    /// by the caller.
    per_caller: BTreeSet<String>,
    state: Mutex<State>,
}

impl std::fmt::Debug for TenantResults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantResults")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

struct State {
    entries: LruCache<Key, Entry>,
    /// Bytes of the entries kept.
    bytes: usize,
    /// Counts the invalidations: a result computed across one is not kept.
    generation: u64,
}

/// What a result is cached under (the tenant is the cache's own).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    credentials: [u8; 32],
    /// The caller, when the upstream identity is the caller's.
    caller: Option<String>,
    query: String,
    row_cap: usize,
    render: Render,
}

struct Entry {
    structured: Value,
    text: String,
    rows: Option<usize>,
    /// `provider.service.resource` of every request the statement made.
    resources: BTreeSet<String>,
    stored: Instant,
    bytes: usize,
}

/// A result served from the cache.
struct Hit {
    structured: Value,
    text: String,
    rows: Option<usize>,
    bytes: usize,
    age: std::time::Duration,
}

/// Which resources a write touches: those named, or (not known) every one.
enum Written {
    Resources(BTreeSet<String>),
    All,
}

impl TenantResults {
    fn new(config: &TenantCache, per_caller: BTreeSet<String>) -> Self {
        let capacity = NonZeroUsize::new(config.max_entries).unwrap_or(NonZeroUsize::MIN);
        TenantResults {
            config: config.clone(),
            per_caller,
            state: Mutex::new(State {
                entries: LruCache::new(capacity),
                bytes: 0,
                generation: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, key: &Key, now: Instant) -> Option<Hit> {
        let mut state = self.lock();
        let entry = state.entries.get(key)?;
        let age = now.saturating_duration_since(entry.stored);
        if age >= self.config.ttl {
            if let Some(gone) = state.entries.pop(key) {
                state.bytes = state.bytes.saturating_sub(gone.bytes);
            }
            return None;
        }
        Some(Hit {
            structured: entry.structured.clone(),
            text: entry.text.clone(),
            rows: entry.rows,
            bytes: entry.bytes,
            age,
        })
    }

    fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Keeps `entry` unless an invalidation happened since `generation` or it is larger
    /// than the whole cache; then drops the least recently used until it fits.
    fn put(&self, key: Key, entry: Entry, generation: u64) {
        if entry.bytes > self.config.max_bytes {
            return;
        }
        let mut state = self.lock();
        if state.generation != generation {
            return;
        }
        let bytes = entry.bytes;
        if let Some((_, old)) = state.entries.push(key, entry) {
            state.bytes = state.bytes.saturating_sub(old.bytes);
        }
        state.bytes += bytes;
        while state.bytes > self.config.max_bytes {
            match state.entries.pop_lru() {
                Some((_, gone)) => state.bytes = state.bytes.saturating_sub(gone.bytes),
                None => break,
            }
        }
    }

    /// Drops the entries that read what `written` names.
    fn invalidate(&self, written: &Written) {
        let mut state = self.lock();
        state.generation += 1;
        let stale: Vec<Key> = state
            .entries
            .iter()
            .filter(|(_, entry)| match written {
                Written::All => true,
                Written::Resources(resources) => !entry.resources.is_disjoint(resources),
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            if let Some(gone) = state.entries.pop(&key) {
                state.bytes = state.bytes.saturating_sub(gone.bytes);
            }
        }
    }
}

/// The cache step.
pub(super) struct Cache {
    /// The tenants' caches.
    results: Arc<ResultCaches>,
    /// The response bytes in flight, which a hit's result counts in.
    responses: Arc<ResponseBytes>,
    /// The transport: the CLI's results are not cached.
    transport: Transport,
    /// `server.max_rows`, part of a result's key.
    max_rows: usize,
}

impl Cache {
    pub(super) fn layer(
        results: Arc<ResultCaches>,
        responses: Arc<ResponseBytes>,
        transport: Transport,
        max_rows: usize,
    ) -> StepLayer<Self> {
        StepLayer::new(Cache {
            results,
            responses,
            transport,
            max_rows,
        })
    }
}

impl Step for Cache {
    fn run<S>(self: Arc<Self>, next: S, call: Call) -> StepFuture
    where
        S: Service<Call, Response = ToolReply, Error = CallError> + Send + 'static,
        S::Future: Send,
    {
        Box::pin(cached(self, next, call))
    }
}

async fn cached<S>(cache: Arc<Cache>, inner: S, call: Call) -> Result<ToolReply, CallError>
where
    S: Service<Call, Response = ToolReply, Error = CallError> + Send,
    S::Future: Send,
{
    let Some(results) = cache.results.tenant(&call.cx.tenant) else {
        return inner.oneshot(call).await;
    };
    if let Some((key, resources)) = cacheable(&cache, results, &call) {
        if let Some(hit) = results.get(&key, cache.results.clock.instant()) {
            return Ok(ToolReply::allowed(served(&cache, &call, key.render, hit)));
        }
        let generation = results.generation();
        let reply = inner.oneshot(call).await?;
        if let Some(outcome) = reply.outcome()
            && !outcome.is_error()
            && let Some(structured) = &outcome.structured
        {
            let bytes = outcome.text.len() + super::response_bytes::json_len(structured);
            let entry = Entry {
                structured: structured.clone(),
                text: outcome.text.clone(),
                rows: outcome.rows,
                resources,
                stored: cache.results.clock.instant(),
                bytes,
            };
            results.put(key, entry, generation);
        }
        return Ok(reply);
    }
    let Some(written) = written(&call) else {
        return inner.oneshot(call).await;
    };
    // Before (a read running meanwhile is not kept) and after (nor one that started while
    // the write ran).
    results.invalidate(&written);
    let reply = inner.oneshot(call).await;
    results.invalidate(&written);
    reply
}

/// The key and the resources read of a call whose result may be cached: a SELECT of
/// `run_select_query` (no EXEC in it, a class that stayed `select`) whose requests were
/// planned, for a transport that renders results (not the CLI).
fn cacheable(
    cache: &Cache,
    results: &TenantResults,
    call: &PreparedCall,
) -> Option<(Key, BTreeSet<String>)> {
    if call.tool() != "run_select_query"
        || call.class != QueryClass::Select
        || cache.transport == Transport::Cli
    {
        return None;
    }
    let statement = match &call.statement {
        Some(Ok(statement)) if statement.kind() == StatementKind::Select => statement,
        _ => return None,
    };
    let query = statement.normalized_query()?;
    let render = call.render.clone().ok()?;
    let row_cap = crate::mcp::tools::row_cap(call.input.row_limit(), cache.max_rows);
    let requests = call.plan.requests()?;
    let resources = resources_of(requests);
    // Whose rows these are: the caller's, when a provider read sees the caller's identity.
    let caller = requests
        .iter()
        .any(|r| results.per_caller.contains(&r.provider))
        .then(|| {
            let principal = &call.principal;
            format!(
                "{}\u{1f}{}\u{1f}{}",
                principal.method.as_str(),
                principal.issuer.as_deref().unwrap_or_default(),
                principal.subject
            )
        });
    // A credential file rotated on disk is read again first (at most once a second), so
    // its new values are another key.
    call.cx.credentials.reread_if_changed();
    let key = Key {
        credentials: call.cx.credentials.fingerprint(),
        caller,
        query,
        row_cap,
        render,
    };
    Some((key, resources))
}

/// What a call that may change something upstream invalidates: the resources its planned
/// requests name, else every entry; `reload_credentials` drops every entry too.
fn written(call: &PreparedCall) -> Option<Written> {
    if call.tool() == "reload_credentials" {
        return Some(Written::All);
    }
    if !matches!(call.spec.effect, Effect::Sql(_)) || call.class == QueryClass::Select {
        return None;
    }
    Some(match call.plan.requests() {
        Some(requests) if !requests.is_empty() => Written::Resources(resources_of(requests)),
        _ => Written::All,
    })
}

fn resources_of(requests: &[PlannedRequest]) -> BTreeSet<String> {
    requests
        .iter()
        .map(|r| format!("{}.{}.{}", r.provider, r.service, r.resource))
        .collect()
}

/// The outcome of a hit: the result as it was, marked `cached` with its age.
fn served(cache: &Cache, call: &PreparedCall, render: Render, hit: Hit) -> ToolOutcome {
    let age = hit.age.as_secs();
    let mut structured = hit.structured;
    if let Value::Object(map) = &mut structured {
        map.insert("cached".into(), Value::Bool(true));
        map.insert("cache_age_seconds".into(), Value::from(age));
    }
    let text = match render {
        Render::Json => crate::mcp::render::json_text(&structured),
        Render::Markdown => format!("{}\n\n_(cached result, {age} s old)_", hit.text),
    };
    ToolOutcome {
        held: Some(cache.responses.hold(&call.cx.tenant, hit.bytes)),
        structured: Some(structured),
        text,
        rows: hit.rows,
        cache_age: Some(age),
        ..ToolOutcome::empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(query: &str) -> Key {
        Key {
            credentials: [0; 32],
            caller: None,
            query: query.to_owned(),
            row_cap: 10,
            render: Render::Json,
        }
    }

    fn entry(resource: &str, bytes: usize, at: Instant) -> Entry {
        Entry {
            structured: Value::Null,
            text: String::new(),
            rows: None,
            resources: [resource.to_owned()].into(),
            stored: at,
            bytes,
        }
    }

    fn cache(max_entries: usize, max_bytes: usize) -> TenantResults {
        TenantResults::new(
            &TenantCache {
                ttl: Duration::from_secs(30),
                max_entries,
                max_bytes,
            },
            BTreeSet::new(),
        )
    }

    #[test]
    fn entries_expire_after_the_ttl_and_are_bounded_in_count_and_bytes() {
        let t0 = Instant::now();
        let results = cache(2, 100);
        results.put(key("a"), entry("p.s.r", 40, t0), 0);
        assert!(
            results
                .get(&key("a"), t0 + Duration::from_secs(29))
                .is_some()
        );
        assert!(
            results
                .get(&key("a"), t0 + Duration::from_secs(30))
                .is_none()
        );
        assert_eq!(results.lock().bytes, 0);

        for name in ["a", "b", "c"] {
            results.put(key(name), entry("p.s.r", 40, t0), 0);
        }
        assert!(results.get(&key("a"), t0).is_none(), "over max_entries");
        results.put(key("d"), entry("p.s.r", 70, t0), 0);
        assert_eq!(results.lock().entries.len(), 1, "over max_bytes");
        assert!(results.lock().bytes <= 100);
        results.put(key("e"), entry("p.s.r", 101, t0), 0);
        assert!(
            results.get(&key("e"), t0).is_none(),
            "larger than the cache"
        );
    }

    #[test]
    fn a_write_drops_what_read_its_resource_and_a_read_across_it_is_not_kept() {
        let t0 = Instant::now();
        let results = cache(10, 1000);
        results.put(key("a"), entry("p.s.items", 1, t0), 0);
        results.put(key("b"), entry("p.s.other", 1, t0), 0);
        let before = results.generation();
        results.invalidate(&Written::Resources(["p.s.items".to_owned()].into()));
        assert!(results.get(&key("a"), t0).is_none());
        assert!(results.get(&key("b"), t0).is_some());
        results.put(key("a"), entry("p.s.items", 1, t0), before);
        assert!(
            results.get(&key("a"), t0).is_none(),
            "computed across a write"
        );
        results.invalidate(&Written::All);
        assert!(results.get(&key("b"), t0).is_none());
        assert_eq!(results.lock().bytes, 0);
    }
}
