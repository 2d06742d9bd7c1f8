//! Configuration: one YAML file (`--config FILE` or `QUERYGATE_CONFIG`) plus environment
//! overrides (`QUERYGATE_<SECTION>__<KEY>`, `__` between nesting levels), validated into a
//! typed [`Config`]. Unknown keys are errors that name the key.
//!
//! Each section lives in its own file: its serde types (`Raw…`, unknown keys refused) and one
//! `check_<section>(raw, …, &mut Problems) -> Validated` function that records every problem
//! with its key and returns the validated value. [`Config::validate`] calls the checks in file
//! order and fails once, with every problem. A new section adds a file, a field of
//! `raw::RawConfig`, a field of [`Config`] and one line in `validate`.

mod approval;
mod approvers;
mod audit;
mod audit_otlp;
mod database;
mod env;
mod identity;
mod limits;
mod paths;
mod principal_name;
mod problems;
mod providers;
mod quotas;
mod raw;
mod registry;
mod server;
mod tasks;
mod telemetry;
mod tenants;
mod upstream;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

pub use crate::policy::Mode;
pub use approval::{
    ApprovalConfig, ApprovalStoreKind, ApproverRule, OutOfBand, WebConfig, WebhookConfig,
};
pub use database::{DatabaseConfig, DatabaseUrl, SecretUrl, check_url as check_database_url};
pub use env::Flag;
pub use identity::{
    AuthConfig, CertIdentity, ClientAuth, IssuerConfig, JWT_ALGORITHMS, JwtConfig, KeySource,
    MtlsConfig, TenantLimits, TlsConfig, exposed_unauthenticated,
};
pub use limits::AdmissionLimits;
pub use principal_name::{GroupName, PrincipalName};
pub use problems::{Problem, Problems};
pub use quotas::{
    ClassQuotas, Quota, QuotaClass, QuotaConfig, QuotaStoreKind, StoreFailure, TenantQuotas,
};
pub use raw::Render;
pub use server::{DEFAULT_LISTEN, DrainConfig, ServerConfig};
pub use tasks::TasksConfig;
pub use telemetry::{LogConfig, LogFormat, TelemetryConfig, TracesConfig};
pub use tenants::TenantCache;

use crate::engine::EngineConfig;

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
    /// Values that parse but are out of range or make no sense together: every problem
    /// found, each with its key.
    #[error("invalid configuration: {0}")]
    Validation(Problems),
}

/// The most keys that fail to parse reported at once.
const MAX_PARSE_ERRORS: usize = 20;

/// Deserializes `tree`, collecting every key that does not parse: each failing key is
/// reported (`upstream.timout: unknown field …`) and taken out, and the rest parsed again,
/// so one run names them all. A key missing only because a key inside it was taken out is
/// not reported again. The configuration is `None` when what is left still does not parse.
/// A key an environment variable set is reported by the variable ([`key_problem`]).
fn parse_all(
    mut tree: serde_json::Value,
    overrides: &env::Overrides,
) -> (Option<raw::RawConfig>, Vec<String>) {
    let mut failed: Vec<String> = Vec::new();
    let mut errors = Vec::new();
    while errors.len() < MAX_PARSE_ERRORS {
        let err = match serde_path_to_error::deserialize::<_, raw::RawConfig>(tree.clone()) {
            Ok(raw) => return (Some(raw), errors),
            Err(err) => err,
        };
        let path = err.path().to_string();
        if path == "." {
            errors.push(err.inner().to_string());
            break;
        }
        let inside_a_failed_key = failed.iter().any(|f| {
            f.strip_prefix(path.as_str())
                .is_some_and(|rest| rest.starts_with(['.', '[']))
        });
        if !inside_a_failed_key {
            errors.push(key_problem(&path, &err.inner().to_string(), overrides));
        }
        let segments: Vec<serde_path_to_error::Segment> = err.path().iter().cloned().collect();
        if !remove(&mut tree, &segments) {
            break;
        }
        failed.push(path);
    }
    (None, errors)
}

/// What is wrong with the key at `path`, serde's `message` about it said as a person would: a
/// number of the wrong kind says what it must be (`server.max_rows: must be a whole number
/// ≥ 0, got -3`), and a key an environment variable set names the variable and its value as
/// written (`QUERYGATE_SERVER__MAX_ROWS (server.max_rows): must be …, got '-3'`).
fn key_problem(path: &str, message: &str, overrides: &env::Overrides) -> String {
    let mismatch = crate::mismatch::Mismatch::of(message);
    let Some(set) = overrides.at(path) else {
        return match mismatch {
            Some(mismatch) => format!("{path}: {mismatch}"),
            None => format!("{path}: {message}"),
        };
    };
    let said = match mismatch {
        // The value as the variable holds it, not as YAML read it.
        Some(mismatch) if set.key == path => {
            format!("must be {}, got '{}'", mismatch.must_be, set.raw)
        }
        Some(mismatch) => mismatch.to_string(),
        None => message.to_owned(),
    };
    format!("{} ({path}): {said}", set.variable)
}

/// Takes the value at `path` out of `tree`; whether there was one.
fn remove(tree: &mut serde_json::Value, path: &[serde_path_to_error::Segment]) -> bool {
    use serde_path_to_error::Segment;
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut node = tree;
    for segment in parents {
        let next = match (segment, node) {
            (Segment::Map { key }, serde_json::Value::Object(map)) => map.get_mut(key),
            (Segment::Seq { index }, serde_json::Value::Array(items)) => items.get_mut(*index),
            _ => None,
        };
        match next {
            Some(next) => node = next,
            None => return false,
        }
    }
    match (last, node) {
        (Segment::Map { key }, serde_json::Value::Object(map)) => map.remove(key).is_some(),
        (Segment::Seq { index }, serde_json::Value::Array(items)) if *index < items.len() => {
            items.remove(*index);
            true
        }
        _ => false,
    }
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
#[derive(Debug, Clone, PartialEq)]
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
    /// Tools the tenant may call; `None`: every offered tool.
    pub allowed_tools: Option<BTreeSet<String>>,
    /// Request rate and in-flight limits (per replica).
    pub limits: TenantLimits,
    /// Methods run as reads whatever their HTTP method (`read_methods`) and parameters
    /// whose values are fixed (`pinned_parameters`).
    pub rules: crate::governance::TenantRules,
    /// The tenant's result cache (`cache:`); `None`: results are not cached.
    pub cache: Option<TenantCache>,
    /// Calls per window by query class, for the tenant and per principal
    /// (`tenants[].quotas`).
    pub quotas: TenantQuotas,
    /// AWS roles the tenant's calls assume, by provider (`tenants[].providers.<name>`).
    pub aws_roles: std::collections::BTreeMap<String, crate::engine::AwsRole>,
    /// Token exchanges the tenant's calls use, by provider
    /// (`tenants[].providers.<name>.token_exchange`).
    pub token_exchanges: std::collections::BTreeMap<String, crate::engine::TokenExchange>,
    /// The tenant's Cedar policy files (`policy_files`), resolved; empty: no policies, nothing
    /// asked. The composition root loads them ([`crate::tenant::Tenants::open`]).
    pub policy_files: Vec<std::path::PathBuf>,
    /// How often the policy files are checked for changes (`policy_reload_interval`).
    pub policy_reload_interval: std::time::Duration,
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
    /// How HTTP callers are authenticated.
    pub auth: AuthConfig,
    /// Auditing of tool calls.
    pub audit: crate::audit::AuditSettings,
    /// Log format and level.
    pub log: LogConfig,
    /// Metrics and traces.
    pub telemetry: TelemetryConfig,
    /// How many statements run at once, overall and per tenant (`limits:`).
    pub admission: AdmissionLimits,
    /// Where quota counters live and how they are leased (`quotas:`).
    pub quotas: QuotaConfig,
    /// Long-running calls as MCP tasks (`tasks:`).
    pub tasks: TasksConfig,
}

impl Config {
    /// Loads defaults < YAML file < environment overrides, then validates.
    pub fn load(sources: &Sources) -> Result<Self, ConfigError> {
        Config::load_with_flags(sources, &[])
    }

    /// Loads defaults < YAML file < environment overrides < command-line `flags`, then
    /// validates the result as a whole (a flag's value is checked like the file's, and a
    /// problem with it names the option).
    pub fn load_with_flags(sources: &Sources, flags: &[Flag]) -> Result<Self, ConfigError> {
        let file = sources
            .file
            .as_deref()
            .map(|f| paths::config_file(f, &sources.env));
        let mut tree = match &file {
            Some(path) => read_yaml(path)?,
            None => serde_json::Value::Object(Default::default()),
        };
        let mut overrides = env::apply_overrides(&mut tree, &sources.env)?;
        let from_environment = !overrides.is_empty();
        env::apply_flags(&mut tree, flags, &mut overrides)?;
        let origin = match &file {
            Some(path) if from_environment => {
                format!("{} with environment overrides", path.display())
            }
            Some(path) => path.display().to_string(),
            None => "environment".to_owned(),
        };
        let paths = paths::PathResolver::new(&sources.env, file.as_deref());
        let (raw, mut errors) = parse_all(tree, &overrides);
        let checked = raw.map(|raw| {
            Config::validate(raw, &sources.env, &paths).map_err(|err| match err {
                ConfigError::Validation(mut problems) => {
                    // A value an override set is named by where it came from.
                    problems.relabel(|key| {
                        overrides
                            .set_exactly(key)
                            .map(|set| format!("{} ({key})", set.variable))
                    });
                    ConfigError::Validation(problems)
                }
                other => other,
            })
        });
        if errors.is_empty() {
            // Parsed whole: `checked` is there.
            return checked.unwrap_or_else(|| Err(ConfigError::Validation(Problems::default())));
        }
        // Every problem of the file at once: the keys that do not parse, then what the
        // checks find in the rest.
        if let Some(Err(ConfigError::Validation(problems))) = checked {
            errors.extend(problems.iter().map(ToString::to_string));
        }
        Err(ConfigError::Invalid {
            origin,
            message: errors.join("; "),
        })
    }

    /// Checks every section, collecting every problem before failing.
    #[expect(
        clippy::too_many_lines,
        reason = "runs each section's check in order, collecting every problem before failing"
    )]
    fn validate(
        raw: raw::RawConfig,
        env: &HashMap<String, String>,
        paths: &paths::PathResolver,
    ) -> Result<Self, ConfigError> {
        let mut problems = Problems::default();
        let registry = registry::check_registry(raw.registry, env, paths, &mut problems);
        let (providers, provider_rates) =
            providers::check_providers(raw.providers, paths, &mut problems);
        let mut upstream = upstream::check_upstream(raw.upstream, &mut problems);
        upstream.max_requests_per_second = provider_rates;
        let eval = limits::check_eval_limits(&raw.limits, raw.server.call_timeout, &mut problems);
        let admission = limits::check_admission(&raw.limits, eval.bulk_priority, &mut problems);
        let max_result_rows = upstream::check_limits(raw.limits, &mut problems);
        let tenants = tenants::check_tenants(raw.tenants, raw.credentials, paths, &mut problems);
        let mut server = server::check_server(raw.server, &mut problems);
        if let Some(tls) = &mut server.tls {
            tls.cert_file =
                paths.resolve_or_report(&tls.cert_file, "server.tls.cert_file", &mut problems);
            tls.key_file =
                paths.resolve_or_report(&tls.key_file, "server.tls.key_file", &mut problems);
            if let Some(file) = &mut tls.client_ca_file {
                *file = paths.resolve_or_report(file, "server.tls.client_ca_file", &mut problems);
            }
        }
        let mut approval = approval::check_approval(raw.approval, &mut problems);
        for file in &mut approval.key_files {
            *file = paths.resolve_or_report(file, "approval.key_files", &mut problems);
        }
        let mut database = database::check_database(raw.database, &mut problems);
        if let Some(DatabaseUrl::File(file)) = &mut database.url {
            *file = paths.resolve_or_report(file, "database.url_file", &mut problems);
        }
        let quotas = quotas::check_quotas(raw.quotas, database.url.is_some(), &mut problems);
        let tasks = tasks::check_tasks(raw.tasks, &mut problems);
        let mut audit = audit::check_audit(raw.audit, &database, env, &mut problems);
        if let crate::audit::SinkSettings::File { location, .. } = &mut audit.sink {
            match location {
                crate::audit::FileLocation::Path(file) => {
                    *file = paths.resolve_or_report(file, "audit.file.path", &mut problems);
                }
                crate::audit::FileLocation::Dir(dir) => {
                    *dir = paths.resolve_or_report(dir, "audit.file.dir", &mut problems);
                }
            }
        }
        if let Some(file) = &mut audit.hmac_key_file {
            *file = paths.resolve_or_report(file, "audit.hmac_key_file", &mut problems);
        }
        if let Some(file) = &mut audit.mac_key_file {
            *file = paths.resolve_or_report(file, "audit.mac_key_file", &mut problems);
        }
        let log = telemetry::check_log(raw.log, &mut problems);
        let telemetry = telemetry::check_telemetry(raw.telemetry, env, &mut problems);
        let tenant_ids: BTreeSet<String> = tenants.iter().map(|t| t.id.clone()).collect();
        let mut auth =
            identity::check_auth(raw.auth, server.tls.as_ref(), &tenant_ids, &mut problems);
        approvers::check_approvers(&approval, &auth, &tenant_ids, &mut problems);
        approvers::check_deciders(&approval, &auth, &mut problems);
        if let Some(web) = &approval.web {
            // The ID token is verified as a bearer token of that issuer would be: its keys,
            // algorithms and tenants (the tenant mapping of auth.jwt).
            if !auth
                .jwt
                .iter()
                .flat_map(|jwt| jwt.issuers.iter())
                .any(|issuer| issuer.issuer == web.issuer)
            {
                problems.push(
                    "approval.web.issuer",
                    "must be one of auth.jwt.issuers[].issuer: its keys verify the ID token and its tenants are the ones a signed-in person may belong to",
                );
            }
            if let Some(var) = &web.client_secret_env
                && !env.contains_key(var)
            {
                problems.push(
                    "approval.web.client_secret_env",
                    format!("names {var}, which is not set"),
                );
            }
        }
        for (i, issuer) in auth
            .jwt
            .iter_mut()
            .flat_map(|jwt| jwt.issuers.iter_mut())
            .enumerate()
        {
            if let KeySource::Pem(files) = &mut issuer.keys {
                let key = format!("auth.jwt.issuers[{i}].public_keys");
                for file in files {
                    *file = paths.resolve_or_report(file, &key, &mut problems);
                }
            }
        }
        identity::check_exposure(
            server.listen,
            &auth,
            server.tls.as_ref(),
            server.allow_unauthenticated,
            &mut problems,
        );
        if !problems.is_empty() {
            return Err(ConfigError::Validation(problems));
        }
        Ok(Config {
            engine: EngineConfig {
                registry_root: registry.root,
                providers,
                upstream,
                document_cache_size: registry.document_cache_size,
                registry_recheck: registry.recheck_interval,
                max_result_rows,
                remote: registry.remote,
                eval,
            },
            tenants,
            server,
            approval,
            database,
            auth,
            audit,
            log,
            telemetry,
            admission,
            quotas,
            tasks,
        })
    }

    /// A tenant by id.
    pub fn tenant(&self, id: &str) -> Option<&TenantConfig> {
        self.tenants.iter().find(|t| t.id == id)
    }
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
    fn bulk_work_priority_reaches_evaluation_and_admission() {
        use crate::thread_priority::BulkPriority;
        let config = load(
            "limits:\n  bulk_work_priority: nice\n  bulk_work_nice: 3\n",
            &[],
        )
        .unwrap();
        assert_eq!(config.engine.eval.bulk_priority, BulkPriority::Nice(3));
        assert_eq!(config.admission.bulk_work_priority, BulkPriority::Nice(3));
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
        assert!(err.contains("registry.url: 'ftp://x'"), "{err}");
        assert!(
            err.contains("registry.max_unpacked_bytes: must be greater than 0"),
            "{err}"
        );
    }

    #[test]
    fn registry_recheck_interval_is_zero_to_an_hour() {
        let config = load("", &[]).unwrap();
        assert_eq!(config.engine.registry_recheck, Duration::from_secs(2));
        let config = load("registry:\n  recheck_interval: 0s\n", &[]).unwrap();
        assert_eq!(config.engine.registry_recheck, Duration::ZERO);
        let config = load("registry:\n  recheck_interval: 1h\n", &[]).unwrap();
        assert_eq!(config.engine.registry_recheck, Duration::from_secs(3600));
        let err = load("", &[("QUERYGATE_REGISTRY__RECHECK_INTERVAL", "61m")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "QUERYGATE_REGISTRY__RECHECK_INTERVAL (registry.recheck_interval): 1h 1m is more than the longest allowed, 1h"
            ),
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
    fn a_number_of_the_wrong_kind_says_what_it_must_be_and_which_variable_set_it() {
        let err = load("server:\n  max_rows: -3\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("server.max_rows: must be a whole number ≥ 0, got -3"),
            "{err}"
        );
        assert!(!err.contains("usize"), "{err}");
        let err = load("", &[("QUERYGATE_SERVER__MAX_ROWS", "-3")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "QUERYGATE_SERVER__MAX_ROWS (server.max_rows): must be a whole number ≥ 0, got '-3'"
            ),
            "{err}"
        );
        let err = load("", &[("QUERYGATE_UPSTREAM__PAGE_LIMIT", "lots")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "QUERYGATE_UPSTREAM__PAGE_LIMIT (upstream.page_limit): must be a whole number"
            ),
            "{err}"
        );
        assert!(err.ends_with("got 'lots'"), "{err}");
        // A variable that makes a number a section: the value YAML got, and the variable.
        let err = load("", &[("QUERYGATE_SERVER__MAX_ROWS__X", "3")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "QUERYGATE_SERVER__MAX_ROWS__X (server.max_rows): must be a whole number ≥ 0, got a map"
            ),
            "{err}"
        );
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
        assert!(
            err.contains("QUERYGATE_UPSTREAM__NOPE (upstream.nope): unknown field `nope`"),
            "{err}"
        );
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
            err.contains("upstream.max_concurrency: must be greater than 0"),
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

    fn problems(yaml: &str) -> Vec<String> {
        match load(yaml, &[]) {
            Err(ConfigError::Validation(problems)) => {
                problems.iter().map(ToString::to_string).collect()
            }
            other => panic!("expected validation problems, got {other:?}"),
        }
    }

    #[test]
    fn paths_are_relative_to_the_config_file_and_expand_home() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(
            &file,
            "registry:\n  root: reg\ncredentials:\n  env_file: ~/q.env\ntenants:\n  - id: acme\n    credentials: {env_file: acme.env}\n  - id: bob\n    credentials: {env_file: ~bob/x.env}\n",
        )
        .unwrap();
        let env = HashMap::from([("HOME".to_owned(), "/home/u".to_owned())]);
        let err = Config::load(&Sources {
            file: Some(file.clone()),
            env: env.clone(),
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("tenants[1].credentials.env_file: '~bob/x.env': ~user is not supported"),
            "{err}"
        );
        std::fs::write(
            &file,
            "registry:\n  root: reg\ncredentials:\n  env_file: ~/q.env\ntenants:\n  - id: acme\n    credentials: {env_file: acme.env}\napproval:\n  key_files: [keys/a.key]\n  store: postgres\ndatabase:\n  url_file: ~/db.url\n",
        )
        .unwrap();
        let config = Config::load(&Sources {
            file: Some(file),
            env,
        })
        .unwrap();
        assert_eq!(config.engine.registry_root, dir.path().join("reg"));
        let env_file = |id: &str| config.tenant(id).unwrap().env_file.clone().unwrap();
        assert_eq!(env_file("default"), PathBuf::from("/home/u/q.env"));
        assert_eq!(env_file("acme"), dir.path().join("acme.env"));
        assert_eq!(config.approval.key_files, [dir.path().join("keys/a.key")]);
        assert_eq!(
            config.database.url,
            Some(DatabaseUrl::File(PathBuf::from("/home/u/db.url")))
        );

        // TLS files, JWT public keys and audit locations too.
        let file = dir.path().join("t.yaml");
        std::fs::write(
            &file,
            "server:\n  tls:\n    cert_file: tls/cert.pem\n    key_file: tls/key.pem\n    client_ca_file: ~/ca.pem\nauth:\n  resource: https://q.test/mcp\n  jwt:\n    issuers:\n      - issuer: https://idp.test\n        public_keys: [keys/idp.pem]\n        algorithms: [ES256]\n        tenants: [default]\naudit:\n  file:\n    dir: audit\n  hmac_sql_literals: true\n  hmac_key_file: keys/audit.key\n",
        )
        .unwrap();
        let config = Config::load(&Sources {
            file: Some(file),
            env: HashMap::from([("HOME".to_owned(), "/home/u".to_owned())]),
        })
        .unwrap();
        let tls = config.server.tls.as_ref().unwrap();
        assert_eq!(tls.cert_file, dir.path().join("tls/cert.pem"));
        assert_eq!(tls.key_file, dir.path().join("tls/key.pem"));
        assert_eq!(tls.client_ca_file, Some(PathBuf::from("/home/u/ca.pem")));
        let issuer = &config.auth.jwt.as_ref().unwrap().issuers[0];
        assert_eq!(
            issuer.keys,
            KeySource::Pem(vec![dir.path().join("keys/idp.pem")])
        );
        match &config.audit.sink {
            crate::audit::SinkSettings::File { location, .. } => assert_eq!(
                location,
                &crate::audit::FileLocation::Dir(dir.path().join("audit"))
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            config.audit.hmac_key_file,
            Some(dir.path().join("keys/audit.key"))
        );
    }

    #[test]
    fn server_problems_are_reported() {
        let found = problems(
            "server:\n  max_request_bytes: 0\n  call_timeout: 0s\n  max_rows: 0\n  listen: nowhere\n  query_library_url: ftp://x\n",
        );
        assert_eq!(
            found,
            [
                "server.listen: 'nowhere' is not an address such as 127.0.0.1:8765 or localhost:8765",
                "server.max_request_bytes: must be greater than 0",
                "server.call_timeout: must be greater than 0",
                "server.max_rows: must be greater than 0",
                "server.query_library_url: 'ftp://x' is not an http(s) URL",
            ]
        );
        let found = problems(
            "server:\n  max_request_bytes: 18446744073709551615\n  call_timeout: 1000years\n  max_rows: 4000000000\n",
        );
        assert_eq!(
            found,
            [
                "server.max_request_bytes: 18446744073709551615 is more than the largest allowed, 1073741824",
                "server.call_timeout: 1000years is more than the longest allowed, 1day",
                "server.max_rows: 4000000000 is more than the largest allowed, 1000000",
            ]
        );
    }

    #[test]
    fn every_section_problem_is_reported_together() {
        let found = problems(
            "registry:\n  max_entries: 0\nproviders:\n  github:\n    auth: {}\nupstream:\n  timeout: 0s\n  retry: {attempts: 0}\nlimits:\n  max_result_rows: 0\ntenants:\n  - id: 'a b'\nserver:\n  max_rows: 0\n",
        );
        assert_eq!(
            found,
            [
                "registry.max_entries: must be greater than 0",
                "providers.github.auth: needs a 'type'",
                "upstream.timeout: must be greater than 0",
                "upstream.retry.attempts: must be at least 1",
                "limits.max_result_rows: must be greater than 0",
                "tenants[0].id: 'a b' must be non-empty letters, digits, '-', '_' or '.'",
                "server.max_rows: must be greater than 0",
            ]
        );
    }

    #[test]
    fn admin_listen_and_drain_are_checked() {
        let config = load(
            "server:\n  admin_listen: 127.0.0.1:9090\n  drain: {delay: 0s, timeout: 2m}\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            config.server.admin_listen.map(|a| a.to_string()).as_deref(),
            Some("127.0.0.1:9090")
        );
        assert_eq!(config.server.drain.delay, Some(std::time::Duration::ZERO));
        assert_eq!(
            config.server.drain.timeout,
            std::time::Duration::from_secs(120)
        );
        let defaults = load("", &[]).unwrap().server;
        assert_eq!(defaults.admin_listen, None);
        assert_eq!(defaults.drain, DrainConfig::default());
        assert_eq!(defaults.drain.delay, None);
        let loopback: std::net::SocketAddr = "127.0.0.1:8765".parse().unwrap();
        let any: std::net::SocketAddr = "0.0.0.0:8765".parse().unwrap();
        assert_eq!(
            defaults.drain.delay_for(loopback),
            std::time::Duration::ZERO
        );
        assert_eq!(
            defaults.drain.delay_for(any),
            std::time::Duration::from_secs(5)
        );
        assert_eq!(
            config.server.drain.delay_for(any),
            std::time::Duration::ZERO
        );
        for (yaml, expected) in [
            (
                "server:\n  listen: 0.0.0.0:8765\n  allow_unauthenticated: true\n  admin_listen: 127.0.0.1:8765\n",
                "server.admin_listen: '127.0.0.1:8765' is the address of server.listen; the admin listener needs a port of its own",
            ),
            (
                "server:\n  admin_listen: admin\n",
                "server.admin_listen: 'admin' is not an address such as 127.0.0.1:9090 or localhost:9090",
            ),
            (
                "server:\n  drain: {timeout: 0s}\n",
                "server.drain.timeout: must be greater than 0",
            ),
            (
                "server:\n  drain: {delay: 2h}\n",
                "server.drain.delay: 2h is more than the longest allowed, 1h",
            ),
        ] {
            assert_eq!(problems(yaml), [expected], "{yaml}");
        }
        // Port 0 on both picks two free ports.
        load(
            "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n",
            &[],
        )
        .unwrap();
    }
}
