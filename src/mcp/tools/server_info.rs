//! `server_info`: identity and runtime of this server, for diagnosing a refusal or checking
//! version-specific behaviour.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::{
    Effect, Hints, Invocation, NoArguments, ToolFuture, ToolResult, ToolSpec, input_schema,
    no_arguments, schema,
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
}

fn run(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        no_arguments(&mut invocation)?;
        let shared = &invocation.shared;
        let info = ServerInfo {
            version: env!("CARGO_PKG_VERSION"),
            commit: env!("QUERYGATE_COMMIT"),
            build_date: env!("QUERYGATE_BUILD_DATE"),
            platform: &PLATFORM,
            transport: shared.transport.as_str(),
            sql_backend: "sqlite3",
            provider_registry: &shared.registry_description,
            tenant: &invocation.cx.tenant,
            mode: invocation.mode.as_str(),
            is_read_only: invocation.mode == Mode::ReadOnly,
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
