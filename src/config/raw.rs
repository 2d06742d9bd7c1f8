//! What the YAML file and environment may say: serde types with unknown keys refused.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::policy::Mode;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) registry: RawRegistry,
    #[serde(default)]
    pub(super) providers: HashMap<String, RawProvider>,
    #[serde(default)]
    pub(super) upstream: RawUpstream,
    #[serde(default)]
    pub(super) limits: RawLimits,
    #[serde(default)]
    pub(super) credentials: RawCredentials,
    #[serde(default)]
    pub(super) tenants: Vec<RawTenant>,
    #[serde(default)]
    pub(super) server: RawServer,
    #[serde(default)]
    pub(super) approval: super::approval::RawApproval,
    #[serde(default)]
    pub(super) database: super::database::RawDatabase,
}

/// How text content of tool results is rendered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Render {
    /// Markdown tables and key/value blocks.
    #[default]
    Markdown,
    /// Compact JSON of the structured result.
    Json,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawServer {
    pub(super) listen: String,
    pub(super) allowed_hosts: Option<Vec<String>>,
    pub(super) allowed_origins: Vec<String>,
    pub(super) max_request_bytes: usize,
    #[serde(with = "humantime_serde")]
    pub(super) call_timeout: Duration,
    pub(super) render: Render,
    pub(super) max_rows: usize,
    pub(super) enabled_tools: Option<Vec<String>>,
    pub(super) enabled_prompts: Option<Vec<String>>,
    pub(super) enabled_resources: Option<Vec<String>>,
    pub(super) disable_instructions: bool,
    pub(super) query_library_url: Option<String>,
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            listen: "127.0.0.1:8765".to_owned(),
            allowed_hosts: None,
            allowed_origins: Vec::new(),
            max_request_bytes: 4 * 1024 * 1024,
            call_timeout: Duration::from_secs(120),
            render: Render::Markdown,
            max_rows: 1000,
            enabled_tools: None,
            enabled_prompts: None,
            enabled_resources: None,
            disable_instructions: false,
            query_library_url: None,
        }
    }
}

/// A tenant's credential store.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCredentials {
    pub(super) env_file: Option<PathBuf>,
    pub(super) process_env: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawRegistry {
    pub(super) root: Option<PathBuf>,
    pub(super) document_cache_size: usize,
    /// `null` or `""` disables listing and pulling.
    pub(super) url: Option<String>,
    pub(super) max_download_bytes: u64,
    pub(super) max_unpacked_bytes: u64,
    pub(super) max_entry_bytes: u64,
    pub(super) max_entries: usize,
}

impl Default for RawRegistry {
    fn default() -> Self {
        let remote = crate::engine::RemoteRegistryConfig::default();
        RawRegistry {
            root: None,
            document_cache_size: 64,
            url: remote.url,
            max_download_bytes: remote.max_download_bytes,
            max_unpacked_bytes: remote.max_unpacked_bytes,
            max_entry_bytes: remote.max_entry_bytes,
            max_entries: remote.max_entries,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    pub(super) base_url: Option<String>,
    pub(super) version: Option<String>,
    pub(super) auth: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawUpstream {
    #[serde(with = "humantime_serde")]
    pub(super) timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub(super) connect_timeout: Duration,
    pub(super) page_limit: u32,
    pub(super) max_concurrency: usize,
    pub(super) max_requests_per_statement: usize,
    pub(super) max_response_bytes: usize,
    pub(super) retry: RawRetry,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawRetry {
    pub(super) attempts: u32,
    #[serde(with = "humantime_serde")]
    pub(super) initial_backoff: Duration,
    #[serde(with = "humantime_serde")]
    pub(super) max_backoff: Duration,
    #[serde(with = "humantime_serde")]
    pub(super) max_elapsed: Duration,
}

impl Default for RawRetry {
    fn default() -> Self {
        let d = crate::engine::RetryPolicy::default();
        RawRetry {
            attempts: d.attempts,
            initial_backoff: d.initial_backoff,
            max_backoff: d.max_backoff,
            max_elapsed: d.max_elapsed,
        }
    }
}

impl Default for RawUpstream {
    fn default() -> Self {
        let d = crate::engine::UpstreamLimits::default();
        RawUpstream {
            timeout: d.timeout,
            connect_timeout: d.connect_timeout,
            page_limit: d.page_limit,
            max_concurrency: d.max_concurrency,
            max_requests_per_statement: d.max_requests_per_statement,
            max_response_bytes: d.max_response_bytes,
            retry: RawRetry::default(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawLimits {
    pub(super) max_result_rows: usize,
    #[serde(with = "humantime_serde")]
    pub(super) max_eval_time: Option<Duration>,
    pub(super) max_eval_value_bytes: usize,
}

impl Default for RawLimits {
    fn default() -> Self {
        RawLimits {
            max_result_rows: 100_000,
            max_eval_time: None,
            max_eval_value_bytes: crate::engine::EvalLimits::default().max_value_bytes,
        }
    }
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
}
