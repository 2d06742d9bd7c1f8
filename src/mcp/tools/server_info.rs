//! `server_info`: identity and runtime of this server, for diagnosing a refusal or checking
//! version-specific behaviour.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::{
    Effect, Hints, Invocation, NoArguments, ToolFuture, ToolResult, ToolSpec, input_schema, parse,
    schema,
};
use crate::config::Mode;
use crate::mcp::render::View;

/// The tool.
pub(crate) const SPEC: ToolSpec = ToolSpec {
    name: "server_info",
    title: "Server info",
    hints: Hints {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    },
    effect: Effect::Read,
    takes_sql: false,
    takes_format: false,
    input_schema: input_schema::<NoArguments>,
    output_schema: schema::<ServerInfo>,
    parse: parse::<NoArguments>,
    run,
};

/// Operating system and CPU architecture, e.g. `linux/x86_64`.
static PLATFORM: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH));

/// What `server_info` reports.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ServerInfo<'a> {
    /// querygate's version (the crate version).
    version: &'static str,
    /// The git commit it was built from.
    commit: &'static str,
    /// When it was built (RFC 3339, UTC).
    build_date: &'static str,
    /// Operating system and CPU architecture.
    platform: &'static str,
    /// `http` or `stdio`.
    transport: &'static str,
    /// The SQL engine statements run on: `sqlite3`.
    sql_backend: &'static str,
    /// The local registry folder and the remote registry URL.
    provider_registry: &'a str,
    /// The caller's tenant.
    tenant: &'a str,
    /// The tenant's mode: read_only, safe, delete_safe or full_access.
    mode: &'static str,
    /// Whether the tenant may only read.
    is_read_only: bool,
    /// MCP tasks: `off`, or where tasks are kept, `memory` (this replica) or `postgres`
    /// (every replica). With tasks on, a call that may wait on an upstream operation, from
    /// a client that declares the `io.modelcontextprotocol/tasks` extension, answers with a
    /// task.
    tasks: &'static str,
    /// Per installed provider the tenant may use, which credential source resolves and when
    /// its cached token expires. Names only, never a secret.
    credentials: Vec<CredentialRow>,
}

/// One provider's credential source.
#[derive(Serialize, JsonSchema)]
pub(crate) struct CredentialRow {
    /// Provider SQL name.
    provider: String,
    /// Auth type in effect (`api_key`, `oauth2`, `azure_default`, `null_auth`, …).
    auth_type: String,
    /// Which source resolves: `env:<VAR>` names for static keys,
    /// `azure_default:<Credential>` (EnvironmentCredential, WorkloadIdentityCredential,
    /// ManagedIdentityCredential, AzureCliCredential), `oauth2_client_credentials:…`,
    /// `service_account:…`, `inline`, or `none`.
    resolved_source: String,
    /// When the cached token expires (RFC 3339, UTC); null when no token is cached.
    token_expires_at: Option<String>,
}

fn run(invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let services = &invocation.services;
        let credentials = services
            .engine
            .credential_sources(&invocation.cx)
            .await?
            .into_iter()
            .map(|row| CredentialRow {
                provider: row.provider,
                auth_type: row.auth_type,
                resolved_source: row.resolved_source,
                token_expires_at: row.token_expires_at,
            })
            .collect();
        let info = ServerInfo {
            version: env!("CARGO_PKG_VERSION"),
            commit: env!("QUERYGATE_COMMIT"),
            build_date: env!("QUERYGATE_BUILD_DATE"),
            platform: &PLATFORM,
            transport: services.transport.as_str(),
            sql_backend: "sqlite3",
            provider_registry: &services.registry_description,
            tenant: &invocation.cx.tenant,
            mode: invocation.mode.as_str(),
            is_read_only: invocation.mode == Mode::ReadOnly,
            tasks: services.tasks,
            credentials,
        };
        Ok(ToolResult {
            upstream_status: None,
            typed: None,
            structured: serde_json::to_value(&info).unwrap_or(Value::Null),
            view: View::Record {
                title: "Server Info".to_owned(),
            },
        })
    })
}
