//! Configuration: one YAML file (`--config FILE` or `QUERYGATE_CONFIG`) plus environment
//! overrides (`QUERYGATE_<SECTION>__<KEY>`, `__` between nesting levels), validated into a
//! typed [`Config`]. Unknown keys are errors that name the key.

mod approval;
mod database;
mod env;
mod limits;
mod raw;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

pub use crate::policy::Mode;
pub use approval::{ApprovalConfig, ApprovalStoreKind};
pub use database::{DatabaseConfig, DatabaseUrl, SecretUrl, check_url as check_database_url};
pub use raw::Render;

use crate::engine::{
    EngineConfig, ProviderSettings, RemoteRegistryConfig, RetryPolicy, UpstreamLimits,
};

/// Why configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file '{path}': {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The YAML or an environment override is malformed, or names an unknown key.
    #[error("invalid configuration ({origin}): {message}")]
    Invalid {
        /// The file path or "environment".
        origin: String,
        /// What is wrong, naming the key.
        message: String,
    },
    /// Values that parse but make no sense together.
    #[error("invalid configuration: {0}")]
    Validation(String),
}

/// Where configuration comes from. `main` passes the process environment; tests pass maps.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    /// The YAML file, if any.
    pub file: Option<PathBuf>,
    /// Environment variables (only `QUERYGATE_*` ones are read).
    pub env: HashMap<String, String>,
}

impl Sources {
    /// The process environment, with the file from `explicit` or `QUERYGATE_CONFIG`.
    pub fn from_process(explicit: Option<PathBuf>) -> Self {
        let env: HashMap<String, String> = std::env::vars().collect();
        let file = explicit.or_else(|| {
            env.get("QUERYGATE_CONFIG")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        Sources { file, env }
    }
}

/// One tenant's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantConfig {
    /// Tenant id.
    pub id: String,
    /// What the tenant's calls may do (enforced by the mode gate of the tool-call stage).
    pub mode: Mode,
    /// Providers the tenant may use; `None` allows all installed providers.
    pub allowed_providers: Option<BTreeSet<String>>,
    /// The tenant's dotenv credential file, if any.
    pub env_file: Option<PathBuf>,
    /// Whether the tenant also reads the process environment (only `default` may).
    pub process_env: bool,
    /// Whether the tenant's calls may install providers into the shared local registry
    /// (`pull_provider`); by default only the `default` tenant's.
    pub allow_pull_provider: bool,
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Engine settings: registry, providers, upstream limits.
    pub engine: EngineConfig,
    /// Tenants; always at least `default`.
    pub tenants: Vec<TenantConfig>,
    /// The MCP server (`querygate serve` and `querygate stdio`).
    pub server: ServerConfig,
    /// Approval of single calls (sealing keys, lifetime, redemption store).
    pub approval: ApprovalConfig,
    /// The PostgreSQL database for shared state (audit events, approvals).
    pub database: DatabaseConfig,
}

/// MCP server settings. Name allowlists are checked against what the server offers when it
/// starts (an unknown name is an error there).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `host:port` for `querygate serve`.
    pub listen: String,
    /// `Host` header values accepted; `None`: loopback names with the listen port.
    pub allowed_hosts: Option<Vec<String>>,
    /// `Origin` header values accepted (browsers); empty: requests with an `Origin` header
    /// are refused unless it is a loopback origin.
    pub allowed_origins: Vec<String>,
    /// Largest request body accepted.
    pub max_request_bytes: usize,
    /// Longest a tool call may run.
    pub call_timeout: std::time::Duration,
    /// Default text rendering of tool results.
    pub render: Render,
    /// Rows a tool result carries at most, whatever `row_limit` the model asks for.
    pub max_rows: usize,
    /// Tools offered (`None`: all).
    pub enabled_tools: Option<Vec<String>>,
    /// Prompts offered (`None`: all).
    pub enabled_prompts: Option<Vec<String>>,
    /// Resources offered, by name (`None`: all).
    pub enabled_resources: Option<Vec<String>>,
    /// Whether to leave the server instructions out.
    pub disable_instructions: bool,
    /// Base URL of a remote query library index (`<base>/manifest.json`, `index.json`,
    /// `queries/<id>.json`); `None`: the embedded snapshot only.
    pub query_library_url: Option<String>,
}

impl Config {
    /// Loads defaults < YAML file < environment overrides, then validates.
    pub fn load(sources: &Sources) -> Result<Self, ConfigError> {
        let mut tree = match &sources.file {
            Some(path) => read_yaml(path)?,
            None => serde_json::Value::Object(Default::default()),
        };
        env::apply_overrides(&mut tree, &sources.env)?;
        let origin = match &sources.file {
            Some(path) => format!("{} with environment overrides", path.display()),
            None => "environment".to_owned(),
        };
        let raw: raw::RawConfig = serde_path_to_error::deserialize(tree).map_err(|err| {
            let path = err.path().to_string();
            let message = if path == "." {
                err.inner().to_string()
            } else {
                format!("{path}: {}", err.inner())
            };
            ConfigError::Invalid { origin, message }
        })?;
        Config::validate(raw, &sources.env)
    }

    fn validate(raw: raw::RawConfig, env: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let mut problems = Vec::new();
        let upstream = raw.upstream;
        for (name, value) in [
            ("upstream.timeout", upstream.timeout),
            ("upstream.connect_timeout", upstream.connect_timeout),
        ] {
            if value.is_zero() {
                problems.push(format!("{name} must be greater than 0"));
            }
        }
        for (name, value) in [
            ("upstream.max_concurrency", upstream.max_concurrency),
            (
                "upstream.max_requests_per_statement",
                upstream.max_requests_per_statement,
            ),
            ("upstream.max_response_bytes", upstream.max_response_bytes),
            ("limits.max_result_rows", raw.limits.max_result_rows),
            (
                "registry.document_cache_size",
                raw.registry.document_cache_size,
            ),
            ("registry.max_entries", raw.registry.max_entries),
        ] {
            if value == 0 {
                problems.push(format!("{name} must be greater than 0"));
            }
        }
        if upstream.retry.attempts == 0 {
            problems.push("upstream.retry.attempts must be at least 1".to_owned());
        }
        for (name, value) in [
            (
                "registry.max_download_bytes",
                raw.registry.max_download_bytes,
            ),
            (
                "registry.max_unpacked_bytes",
                raw.registry.max_unpacked_bytes,
            ),
            ("registry.max_entry_bytes", raw.registry.max_entry_bytes),
        ] {
            if value == 0 {
                problems.push(format!("{name} must be greater than 0"));
            }
        }
        let registry_url = raw
            .registry
            .url
            .clone()
            .map(|u| u.trim().to_owned())
            .filter(|u| !u.is_empty());
        if let Some(url) = &registry_url {
            match url::Url::parse(url) {
                Ok(parsed) if matches!(parsed.scheme(), "http" | "https" | "file") => {}
                _ => problems.push(format!("registry.url '{url}' is not an http(s) URL")),
            }
        }
        let mut providers = HashMap::new();
        for (name, settings) in raw.providers {
            if let Some(url) = &settings.base_url {
                match url::Url::parse(url) {
                    Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {}
                    _ => problems.push(format!(
                        "providers.{name}.base_url '{url}' is not an http(s) URL"
                    )),
                }
            }
            if let Some(auth) = &settings.auth
                && auth
                    .get("type")
                    .and_then(serde_json::Value::as_str)
                    .is_none()
            {
                problems.push(format!("providers.{name}.auth needs a 'type'"));
            }
            providers.insert(
                name,
                ProviderSettings {
                    base_url: settings.base_url,
                    version: settings.version,
                    auth: settings.auth,
                },
            );
        }
        let mut tenants = Vec::new();
        for tenant in raw.tenants {
            let id_ok = !tenant.id.is_empty()
                && tenant
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            if !id_ok {
                problems.push(format!(
                    "tenant id '{}' must be non-empty letters, digits, '-', '_' or '.'",
                    tenant.id
                ));
            }
            if tenants.iter().any(|t: &TenantConfig| t.id == tenant.id) {
                problems.push(format!("tenant id '{}' appears twice", tenant.id));
            }
            let is_default = tenant.id == "default";
            let credentials = match (&tenant.credentials, is_default) {
                (Some(own), true) if raw.credentials.env_file.is_some() => {
                    problems.push(
                        "credentials.env_file and the default tenant's credentials.env_file are both set; keep one".to_owned(),
                    );
                    own.clone()
                }
                (Some(own), _) => own.clone(),
                (None, true) => raw.credentials.clone(),
                (None, false) => raw::RawCredentials::default(),
            };
            let process_env = credentials.process_env.unwrap_or(is_default);
            if process_env && !is_default {
                problems.push(format!(
                    "tenant '{}': only the default tenant may read the process environment (credentials.process_env)",
                    tenant.id
                ));
            }
            tenants.push(TenantConfig {
                id: tenant.id,
                mode: tenant.mode,
                allowed_providers: tenant.allowed_providers.map(|p| p.into_iter().collect()),
                env_file: credentials.env_file,
                process_env,
                allow_pull_provider: tenant.allow_pull_provider.unwrap_or(is_default),
            });
        }
        if !tenants.iter().any(|t| t.id == "default") {
            tenants.insert(
                0,
                TenantConfig {
                    id: "default".to_owned(),
                    mode: Mode::default(),
                    allowed_providers: None,
                    env_file: raw.credentials.env_file.clone(),
                    process_env: raw.credentials.process_env.unwrap_or(true),
                    allow_pull_provider: true,
                },
            );
        }
        for (i, tenant) in tenants.iter().enumerate() {
            if let Some(file) = &tenant.env_file
                && let Some(other) = tenants[..i]
                    .iter()
                    .find(|t| t.env_file.as_ref() == Some(file))
            {
                problems.push(format!(
                    "tenants '{}' and '{}' share the env file '{}'; each tenant needs its own",
                    other.id,
                    tenant.id,
                    file.display()
                ));
            }
        }
        let approval = approval::check_approval(raw.approval, &mut problems);
        let database = database::check_database(raw.database, &mut problems);
        let eval = limits::check_eval_limits(&raw.limits, raw.server.call_timeout, &mut problems);
        if !problems.is_empty() {
            return Err(ConfigError::Validation(problems.join("; ")));
        }
        let server = raw.server;
        for (name, value) in [
            ("server.max_request_bytes", server.max_request_bytes),
            ("server.max_rows", server.max_rows),
        ] {
            if value == 0 {
                problems.push(format!("{name} must be greater than 0"));
            }
        }
        if server.call_timeout.is_zero() {
            problems.push("server.call_timeout must be greater than 0".to_owned());
        }
        if server.listen.parse::<std::net::SocketAddr>().is_err() {
            problems.push(format!(
                "server.listen '{}' is not an address such as 127.0.0.1:8765",
                server.listen
            ));
        }
        if let Some(url) = &server.query_library_url {
            match url::Url::parse(url) {
                Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {}
                _ => problems.push(format!(
                    "server.query_library_url '{url}' is not an http(s) URL"
                )),
            }
        }
        if !problems.is_empty() {
            return Err(ConfigError::Validation(problems.join("; ")));
        }
        let registry_root = raw
            .registry
            .root
            .unwrap_or_else(|| default_registry_root(env));
        Ok(Config {
            engine: EngineConfig {
                registry_root,
                providers,
                upstream: UpstreamLimits {
                    timeout: upstream.timeout,
                    connect_timeout: upstream.connect_timeout,
                    page_limit: upstream.page_limit,
                    max_concurrency: upstream.max_concurrency,
                    max_requests_per_statement: upstream.max_requests_per_statement,
                    max_response_bytes: upstream.max_response_bytes,
                    retry: RetryPolicy {
                        attempts: upstream.retry.attempts,
                        initial_backoff: upstream.retry.initial_backoff,
                        max_backoff: upstream.retry.max_backoff,
                        max_elapsed: upstream.retry.max_elapsed,
                    },
                    await_operations: Default::default(),
                },
                document_cache_size: raw.registry.document_cache_size,
                max_result_rows: raw.limits.max_result_rows,
                eval,
                remote: RemoteRegistryConfig {
                    url: registry_url,
                    max_download_bytes: raw.registry.max_download_bytes,
                    max_unpacked_bytes: raw.registry.max_unpacked_bytes,
                    max_entry_bytes: raw.registry.max_entry_bytes,
                    max_entries: raw.registry.max_entries,
                },
            },
            tenants,
            server: ServerConfig {
                listen: server.listen,
                allowed_hosts: server.allowed_hosts,
                allowed_origins: server.allowed_origins,
                max_request_bytes: server.max_request_bytes,
                call_timeout: server.call_timeout,
                render: server.render,
                max_rows: server.max_rows,
                enabled_tools: server.enabled_tools,
                enabled_prompts: server.enabled_prompts,
                enabled_resources: server.enabled_resources,
                disable_instructions: server.disable_instructions,
                query_library_url: server.query_library_url,
            },
            approval,
            database,
        })
    }

    /// A tenant by id.
    pub fn tenant(&self, id: &str) -> Option<&TenantConfig> {
        self.tenants.iter().find(|t| t.id == id)
    }
}

/// `$XDG_DATA_HOME/querygate/registry`, else `$HOME/.local/share/querygate/registry`, else
/// `./querygate-registry`.
fn default_registry_root(env: &HashMap<String, String>) -> PathBuf {
    let non_empty = |key: &str| env.get(key).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(data) = non_empty("XDG_DATA_HOME") {
        return data.join("querygate").join("registry");
    }
    if let Some(home) = non_empty("HOME") {
        return home.join(".local/share/querygate/registry");
    }
    PathBuf::from("querygate-registry")
}

fn read_yaml(path: &Path) -> Result<serde_json::Value, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Object(Default::default()));
    }
    serde_norway::from_str(&text).map_err(|err| ConfigError::Invalid {
        origin: path.display().to_string(),
        message: err.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn load(yaml: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, yaml).unwrap();
        let env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::load(&Sources {
            file: Some(file),
            env,
        })
    }

    #[test]
    fn defaults_give_one_default_tenant() {
        let config = load("", &[("HOME", "/home/u")]).unwrap();
        assert_eq!(config.tenants.len(), 1);
        assert_eq!(config.tenants[0].id, "default");
        assert_eq!(config.tenants[0].mode, Mode::Safe);
        assert_eq!(config.engine.upstream.timeout, Duration::from_secs(45));
        assert_eq!(
            config.engine.registry_root,
            PathBuf::from("/home/u/.local/share/querygate/registry")
        );
        assert_eq!(
            config.engine.remote.url.as_deref(),
            Some(crate::engine::DEFAULT_REGISTRY_URL)
        );
    }

    #[test]
    fn registry_url_and_caps() {
        let config = load(
            "registry:\n  url: http://127.0.0.1:9/providers\n  max_entries: 10\n",
            &[("QUERYGATE_REGISTRY__MAX_ENTRY_BYTES", "1024")],
        )
        .unwrap();
        assert_eq!(
            config.engine.remote.url.as_deref(),
            Some("http://127.0.0.1:9/providers")
        );
        assert_eq!(config.engine.remote.max_entries, 10);
        assert_eq!(config.engine.remote.max_entry_bytes, 1024);
        let config = load("registry:\n  url: null\n", &[]).unwrap();
        assert_eq!(config.engine.remote.url, None);
        let err = load("registry:\n  url: ftp://x\n  max_unpacked_bytes: 0\n", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("registry.url 'ftp://x'"), "{err}");
        assert!(
            err.contains("registry.max_unpacked_bytes must be greater than 0"),
            "{err}"
        );
    }

    #[test]
    fn file_and_environment_are_layered() {
        let yaml = "registry:\n  root: /reg\nupstream:\n  timeout: 5s\n  page_limit: 3\nproviders:\n  github:\n    base_url: http://127.0.0.1:1\ntenants:\n  - id: acme\n    mode: safe\n    allowed_providers: [github]\n";
        let config = load(
            yaml,
            &[
                ("QUERYGATE_UPSTREAM__PAGE_LIMIT", "7"),
                ("QUERYGATE_PROVIDERS__GITHUB__VERSION", "v0.3.1"),
                ("QUERYGATE_COMPAT_REGISTRY", "ignored: no nesting"),
            ],
        )
        .unwrap();
        assert_eq!(config.engine.registry_root, PathBuf::from("/reg"));
        assert_eq!(config.engine.upstream.timeout, Duration::from_secs(5));
        assert_eq!(config.engine.upstream.page_limit, 7);
        let github = &config.engine.providers["github"];
        assert_eq!(github.base_url.as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(github.version.as_deref(), Some("v0.3.1"));
        let acme = config.tenant("acme").unwrap();
        assert_eq!(acme.mode, Mode::Safe);
        assert!(acme.allowed_providers.as_ref().unwrap().contains("github"));
        assert!(config.tenant("default").is_some());
    }

    #[test]
    fn server_problems_are_reported() {
        let err = load("server:\n  max_rows: 0\n  listen: nowhere\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("server.max_rows must be greater than 0"),
            "{err}"
        );
        assert!(err.contains("server.listen 'nowhere'"), "{err}");
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = load("upstream:\n  timout: 5s\n", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("upstream") && err.contains("timout"), "{err}");
        let err = load("", &[("QUERYGATE_UPSTREAM__NOPE", "1")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("nope"), "{err}");
        let err = load("tenants:\n  - id: a\n    colour: red\n", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("colour"), "{err}");
    }

    #[test]
    fn each_tenant_has_its_own_credential_store() {
        let yaml = "credentials:\n  env_file: /s/default.env\ntenants:\n  - id: acme\n    credentials:\n      env_file: /s/acme.env\n";
        let config = load(yaml, &[]).unwrap();
        let default = config.tenant("default").unwrap();
        assert_eq!(default.env_file, Some(PathBuf::from("/s/default.env")));
        assert!(default.process_env);
        let acme = config.tenant("acme").unwrap();
        assert_eq!(acme.env_file, Some(PathBuf::from("/s/acme.env")));
        assert!(!acme.process_env);
        let shared = "tenants:\n  - id: a\n    credentials: {env_file: /x.env}\n  - id: b\n    credentials: {env_file: /x.env}\n";
        let err = load(shared, &[]).unwrap_err().to_string();
        assert!(err.contains("share the env file '/x.env'"), "{err}");
        let leaky = "tenants:\n  - id: a\n    credentials: {process_env: true}\n";
        let err = load(leaky, &[]).unwrap_err().to_string();
        assert!(err.contains("only the default tenant"), "{err}");
    }

    #[test]
    fn bad_values_are_explained() {
        let err = load("upstream:\n  max_concurrency: 0\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("upstream.max_concurrency must be greater than 0"),
            "{err}"
        );
        let err = load("tenants:\n  - id: a\n    mode: yolo\n", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("yolo"), "{err}");
        let err = load("providers:\n  github:\n    base_url: ftp://x\n", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("not an http(s) URL"), "{err}");
    }
}
