//! The engine's configuration: registry, per-provider settings, upstream and evaluation
//! limits.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::eval::EvalLimits;
use super::remote::RemoteRegistryConfig;
use super::upstream::RetryPolicy;

/// Per-provider settings from configuration.
#[derive(Debug, Clone, Default)]
pub struct ProviderSettings {
    /// Replaces the documents' `servers` URL (for proxies and tests). May contain the
    /// server's `{variables}`.
    pub base_url: Option<String>,
    /// Pins an installed version instead of the newest.
    pub version: Option<String>,
    /// Replaces the provider document's `config.auth` (same fields, e.g.
    /// `{type: bearer, credentialsenvvar: MY_TOKEN}` or `{type: null_auth}`).
    pub auth: Option<serde_json::Value>,
}

/// Limits on upstream traffic.
#[derive(Debug, Clone)]
pub struct UpstreamLimits {
    /// Per upstream request, including reading the body.
    pub timeout: Duration,
    /// For establishing a connection.
    pub connect_timeout: Duration,
    /// Pages followed per request; 0 = unlimited.
    pub page_limit: u32,
    /// Upstream requests in flight per statement.
    pub max_concurrency: usize,
    /// Upstream requests (first pages; fan-out legs) one statement may make.
    pub max_requests_per_statement: usize,
    /// Largest response body accepted.
    pub max_response_bytes: usize,
    /// Retries of reads (GET/HEAD) on 408/429/502/503/504 and connection failures.
    pub retry: RetryPolicy,
    /// Polling of long-running operations for `/*+ AWAIT */`.
    pub await_operations: AwaitLimits,
    /// Requests per second each tenant may send to a provider, by provider SQL name
    /// (`providers.<p>.max_requests_per_second`); a provider not named is not paced but by
    /// its own `Retry-After`.
    pub max_requests_per_second: HashMap<String, f64>,
}

/// How `/*+ AWAIT */` polls an operation (StackQL polls every 10 s).
#[derive(Debug, Clone)]
pub struct AwaitLimits {
    /// Wait between polls of the operation's `selfLink`.
    pub poll_interval: Duration,
    /// The statement fails once the operation has been awaited this long (the operation
    /// itself goes on upstream).
    pub max_wait: Duration,
}

impl Default for AwaitLimits {
    fn default() -> Self {
        AwaitLimits {
            poll_interval: Duration::from_secs(10),
            max_wait: Duration::from_secs(600),
        }
    }
}

impl Default for UpstreamLimits {
    fn default() -> Self {
        UpstreamLimits {
            timeout: Duration::from_secs(45),
            connect_timeout: Duration::from_secs(10),
            page_limit: 50,
            max_concurrency: 8,
            max_requests_per_statement: 100,
            max_response_bytes: 64 * 1024 * 1024,
            retry: RetryPolicy::default(),
            await_operations: AwaitLimits::default(),
            max_requests_per_second: HashMap::new(),
        }
    }
}

/// The default of [`EngineConfig::registry_recheck`] (`registry.recheck_interval`).
pub const DEFAULT_REGISTRY_RECHECK: Duration = Duration::from_secs(2);

/// What the engine needs to run.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The local registry folder (holding `src/<provider>/<version>/…`).
    pub registry_root: PathBuf,
    /// Settings by provider SQL name.
    pub providers: HashMap<String, ProviderSettings>,
    /// Upstream limits.
    pub upstream: UpstreamLimits,
    /// Parsed provider documents kept in memory.
    pub document_cache_size: usize,
    /// How long a loaded provider document (and a resolved provider) is used without
    /// looking at the registry folder; zero looks on every statement.
    pub registry_recheck: Duration,
    /// Rows a statement may return.
    pub max_result_rows: usize,
    /// Bounds on a statement's local SQLite evaluation.
    pub eval: EvalLimits,
    /// The remote registry providers are listed and pulled from, and its download bounds.
    pub remote: RemoteRegistryConfig,
}

impl EngineConfig {
    /// Defaults over a registry folder.
    pub fn new(registry_root: impl Into<PathBuf>) -> Self {
        EngineConfig {
            registry_root: registry_root.into(),
            providers: HashMap::new(),
            upstream: UpstreamLimits::default(),
            document_cache_size: 64,
            registry_recheck: DEFAULT_REGISTRY_RECHECK,
            max_result_rows: 100_000,
            eval: EvalLimits::default(),
            remote: RemoteRegistryConfig::default(),
        }
    }
}
