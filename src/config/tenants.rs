//! `credentials:` and `tenants:` — who calls run for, what they may do, and where each
//! tenant's credentials come from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::Deserialize;

use super::paths::PathResolver;
use super::problems::Problems;
use super::{Mode, TenantConfig};
use crate::engine::{AwsRole, ExchangeKind, TokenExchange};
use crate::governance::{MethodPattern, TenantRules};

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
    #[serde(default)]
    pub(super) read_methods: Vec<String>,
    #[serde(default)]
    pub(super) not_read_methods: Vec<String>,
    #[serde(default)]
    pub(super) pinned_parameters: BTreeMap<String, PinnedValues>,
    #[serde(default)]
    pub(super) quotas: Option<super::quotas::RawTenantQuotas>,
    pub(super) cache: Option<RawTenantCache>,
    #[serde(default)]
    pub(super) providers: BTreeMap<String, RawTenantProvider>,
    #[serde(default)]
    pub(super) policy_files: Vec<PathBuf>,
    #[serde(default, with = "humantime_serde")]
    pub(super) policy_reload_interval: Option<std::time::Duration>,
}

/// `tenants[].cache`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTenantCache {
    #[serde(default = "default_cache_ttl", with = "humantime_serde")]
    ttl: std::time::Duration,
    #[serde(default = "default_cache_entries")]
    max_entries: usize,
    #[serde(default = "default_cache_bytes")]
    max_bytes: usize,
}

fn default_cache_ttl() -> std::time::Duration {
    std::time::Duration::from_secs(30)
}
fn default_cache_entries() -> usize {
    256
}
fn default_cache_bytes() -> usize {
    8 * 1024 * 1024
}

/// A tenant's result cache (`tenants[].cache`): SELECT results kept for `ttl`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantCache {
    /// How long a result is served from the cache.
    pub ttl: std::time::Duration,
    /// Results kept at most (the least recently used go first).
    pub max_entries: usize,
    /// Bytes of results kept at most (text and structured content, about as sent).
    pub max_bytes: usize,
}

/// `tenants[].cache`, checked.
fn check_cache(
    key: &str,
    raw: Option<RawTenantCache>,
    problems: &mut Problems,
) -> Option<TenantCache> {
    let raw = raw?;
    if raw.ttl.is_zero() {
        problems.push(format!("{key}.cache.ttl"), "must be greater than 0");
    }
    if raw.max_entries == 0 {
        problems.push(format!("{key}.cache.max_entries"), "must be at least 1");
    }
    if raw.max_bytes == 0 {
        problems.push(format!("{key}.cache.max_bytes"), "must be at least 1");
    }
    Some(TenantCache {
        ttl: raw.ttl,
        max_entries: raw.max_entries,
        max_bytes: raw.max_bytes,
    })
}

/// `tenants[].providers.<name>`: the AWS role the tenant's calls to the provider assume,
/// and/or the token exchange they use.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTenantProvider {
    pub(super) role_arn: Option<String>,
    pub(super) external_id: Option<String>,
    #[serde(default, with = "humantime_serde")]
    pub(super) duration: Option<std::time::Duration>,
    pub(super) token_exchange: Option<RawTokenExchange>,
}

/// `tenants[].providers.<name>.token_exchange`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTokenExchange {
    kind: String,
    token_url: String,
    client_id_env: String,
    client_secret_env: String,
    audience: Option<String>,
    resource: Option<String>,
    scope: Option<String>,
    subject_token_type: Option<String>,
    client_auth: Option<String>,
}

/// RFC 8693's token type URIs `subject_token_type` may name (or their last word).
const SUBJECT_TOKEN_TYPES: [&str; 2] = [
    "urn:ietf:params:oauth:token-type:access_token",
    "urn:ietf:params:oauth:token-type:jwt",
];

/// `token_exchange`, checked: a known kind, an http(s) token URL, variable names, a scope
/// for Entra on-behalf-of, a known subject token type and client authentication.
fn check_exchange(
    at: &str,
    raw: RawTokenExchange,
    problems: &mut Problems,
) -> Option<TokenExchange> {
    let at = format!("{at}.token_exchange");
    let kind = match raw.kind.as_str() {
        "rfc8693" => Some(ExchangeKind::Rfc8693),
        "entra_obo" => Some(ExchangeKind::EntraObo),
        _ => {
            problems.push(format!("{at}.kind"), "must be rfc8693 or entra_obo");
            None
        }
    };
    let url_ok = url::Url::parse(&raw.token_url)
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
    if !url_ok {
        problems.push(format!("{at}.token_url"), "must be an http(s) URL");
    }
    for (name, value) in [
        ("client_id_env", &raw.client_id_env),
        ("client_secret_env", &raw.client_secret_env),
    ] {
        if value.is_empty()
            || value
                .chars()
                .any(|c| !(c.is_ascii_alphanumeric() || c == '_'))
        {
            problems.push(
                format!("{at}.{name}"),
                "must name a credential variable (letters, digits, _)",
            );
        }
    }
    let scope = raw.scope.filter(|s| !s.trim().is_empty());
    if kind == Some(ExchangeKind::EntraObo) && scope.is_none() {
        problems.push(
            format!("{at}.scope"),
            "is required for entra_obo (e.g. https://graph.microsoft.com/.default)",
        );
    }
    let subject_token_type = match raw.subject_token_type.as_deref() {
        None | Some("access_token") => SUBJECT_TOKEN_TYPES[0].to_owned(),
        Some("jwt") => SUBJECT_TOKEN_TYPES[1].to_owned(),
        Some(t) if SUBJECT_TOKEN_TYPES.contains(&t) => t.to_owned(),
        Some(_) => {
            problems.push(
                format!("{at}.subject_token_type"),
                "must be access_token or jwt (or their urn:ietf:params:oauth:token-type: URIs)",
            );
            String::new()
        }
    };
    let client_secret_in_body = match raw.client_auth.as_deref() {
        None | Some("basic") => false,
        Some("body") => true,
        Some(_) => {
            problems.push(format!("{at}.client_auth"), "must be basic or body");
            false
        }
    };
    Some(TokenExchange {
        kind: kind?,
        token_url: raw.token_url,
        client_id_env: raw.client_id_env,
        client_secret_env: raw.client_secret_env,
        audience: raw.audience.filter(|s| !s.is_empty()),
        resource: raw.resource.filter(|s| !s.is_empty()),
        scope,
        subject_token_type,
        client_secret_in_body,
    })
}

/// The session length asked for when `duration` is not set (STS's default too).
const DEFAULT_ROLE_DURATION: std::time::Duration = std::time::Duration::from_secs(3600);

/// `tenants[].providers`, checked: an IAM role ARN, an external id STS accepts, a duration
/// of 15 minutes to 12 hours.
fn check_roles(
    key: &str,
    raw: BTreeMap<String, RawTenantProvider>,
    problems: &mut Problems,
) -> (BTreeMap<String, AwsRole>, BTreeMap<String, TokenExchange>) {
    let mut roles = BTreeMap::new();
    let mut exchanges = BTreeMap::new();
    for (provider, mut role) in raw {
        let at = format!("{key}.providers.{}", provider.escape_debug());
        let has_exchange = role.token_exchange.is_some();
        if let Some(exchange) = role.token_exchange.take()
            && let Some(exchange) = check_exchange(&at, exchange, problems)
        {
            exchanges.insert(provider.clone(), exchange);
        }
        let Some(role_arn) = role.role_arn.take() else {
            if role.external_id.is_some() || role.duration.is_some() {
                problems.push(
                    format!("{at}.role_arn"),
                    "is required with external_id or duration",
                );
            } else if !has_exchange {
                problems.push(at, "names neither role_arn nor token_exchange");
            }
            continue;
        };
        let role = RoleFields {
            role_arn,
            external_id: role.external_id,
            duration: role.duration,
        };
        let arn_ok = role.role_arn.starts_with("arn:")
            && role.role_arn.split(':').count() == 6
            && role.role_arn.split(':').nth(2) == Some("iam")
            && role
                .role_arn
                .split(':')
                .nth(5)
                .is_some_and(|r| r.starts_with("role/") && r.len() > 5)
            && !role.role_arn.chars().any(char::is_whitespace);
        if !arn_ok {
            problems.push(
                format!("{at}.role_arn"),
                "must be an IAM role ARN (arn:<partition>:iam::<account>:role/<name>)",
            );
        }
        if let Some(id) = &role.external_id
            && (!(2..=1224).contains(&id.len())
                || id
                    .chars()
                    .any(|c| !(c.is_ascii_alphanumeric() || "+=,.@:/-_".contains(c))))
        {
            problems.push(
                format!("{at}.external_id"),
                "must be 2 to 1224 of the characters STS accepts (letters, digits, +=,.@:/-_)",
            );
        }
        let duration = role.duration.unwrap_or(DEFAULT_ROLE_DURATION);
        if !(900..=43_200).contains(&duration.as_secs()) {
            problems.push(
                format!("{at}.duration"),
                "must be from 15m to 12h (STS's DurationSeconds)",
            );
        }
        roles.insert(
            provider,
            AwsRole {
                role_arn: role.role_arn,
                external_id: role.external_id,
                duration,
            },
        );
    }
    (roles, exchanges)
}

/// The role half of a `tenants[].providers.<name>` entry.
struct RoleFields {
    role_arn: String,
    external_id: Option<String>,
    duration: Option<std::time::Duration>,
}

/// How often a tenant's policy files are checked for changes, unless configured.
const DEFAULT_POLICY_RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// `tenants[].policy_files`: each path resolved, and the reload interval; the policies
/// themselves are loaded and validated where the tenants are opened
/// ([`crate::tenant::Tenants::open`]).
fn check_policies(
    key: &str,
    files: Vec<PathBuf>,
    interval: Option<std::time::Duration>,
    paths: &PathResolver,
    problems: &mut Problems,
) -> (Vec<PathBuf>, std::time::Duration) {
    let interval = interval.unwrap_or(DEFAULT_POLICY_RELOAD_INTERVAL);
    if interval.is_zero() {
        problems.push(
            format!("{key}.policy_reload_interval"),
            "must be greater than 0",
        );
    }
    let mut resolved = Vec::new();
    for (index, file) in files.into_iter().enumerate() {
        match paths.resolve(&file) {
            Ok(file) => resolved.push(file),
            Err(message) => problems.push(format!("{key}.policy_files[{index}]"), message),
        }
    }
    (resolved, interval)
}

/// One value of a pinned parameter: text, or a number or boolean as YAML reads it.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum PinnedValue {
    Text(String),
    Integer(i64),
    Bool(bool),
}

impl PinnedValue {
    fn into_text(self) -> String {
        match self {
            PinnedValue::Text(text) => text,
            PinnedValue::Integer(i) => i.to_string(),
            PinnedValue::Bool(b) => b.to_string(),
        }
    }
}

/// A pinned parameter's values: one, or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum PinnedValues {
    One(PinnedValue),
    Many(Vec<PinnedValue>),
}

/// `tenants[].read_methods`, `tenants[].not_read_methods` and
/// `tenants[].pinned_parameters`, checked.
fn check_rules(
    key: &str,
    read_methods: Vec<String>,
    not_read_methods: Vec<String>,
    pinned: BTreeMap<String, PinnedValues>,
    problems: &mut Problems,
) -> TenantRules {
    let mut rules = TenantRules::default();
    for (index, text) in read_methods.iter().enumerate() {
        match MethodPattern::parse(text) {
            Ok(pattern) => rules.read_methods.push(pattern),
            Err(message) => problems.push(format!("{key}.read_methods[{index}]"), message),
        }
    }
    for (index, text) in not_read_methods.iter().enumerate() {
        match MethodPattern::parse(text) {
            Ok(pattern) => rules.not_read_methods.push(pattern),
            Err(message) => problems.push(format!("{key}.not_read_methods[{index}]"), message),
        }
    }
    for (name, values) in pinned {
        let values: Vec<String> = match values {
            PinnedValues::One(value) => vec![value.into_text()],
            PinnedValues::Many(values) => values.into_iter().map(PinnedValue::into_text).collect(),
        };
        let at = format!("{key}.pinned_parameters.{}", name.escape_debug());
        if name.is_empty() {
            problems.push(at, "a parameter name must not be empty");
            continue;
        }
        if values.is_empty() {
            problems.push(
                at,
                "needs at least one allowed value (an empty list would refuse every statement that uses the parameter)",
            );
            continue;
        }
        if rules
            .pinned_parameters
            .keys()
            .any(|other| other.eq_ignore_ascii_case(&name))
        {
            problems.push(at, "is pinned twice (names are compared ignoring case)");
            continue;
        }
        rules.pinned_parameters.insert(name, values);
    }
    rules
}

/// Checks `tenants:` with the top-level `credentials:` (the default tenant's store); adds a
/// `default` tenant when the list names none.
#[expect(
    clippy::too_many_lines,
    reason = "one check per key of a tenant entry, each pushing its own problem"
)]
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
        let cache = check_cache(&key, tenant.cache, problems);
        let quotas =
            super::quotas::check_tenant_quotas(&format!("{key}.quotas"), tenant.quotas, problems);
        let rules = check_rules(
            &key,
            tenant.read_methods,
            tenant.not_read_methods,
            tenant.pinned_parameters,
            problems,
        );
        let (aws_roles, token_exchanges) = check_roles(&key, tenant.providers, problems);
        let (policy_files, policy_reload_interval) = check_policies(
            &key,
            tenant.policy_files,
            tenant.policy_reload_interval,
            paths,
            problems,
        );
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
            rules,
            cache,
            quotas,
            aws_roles,
            token_exchanges,
            policy_files,
            policy_reload_interval,
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
                rules: TenantRules::default(),
                cache: None,
                quotas: super::TenantQuotas::default(),
                aws_roles: BTreeMap::new(),
                token_exchanges: BTreeMap::new(),
                policy_files: Vec::new(),
                policy_reload_interval: DEFAULT_POLICY_RELOAD_INTERVAL,
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
