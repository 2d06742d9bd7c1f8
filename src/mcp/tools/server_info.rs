//! `server_info`: identity and runtime of this server, for diagnosing a refusal or checking
//! version-specific behaviour.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::{Effect, Hints, Invocation, ToolFuture, ToolResult, ToolSpec, schema};
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
    input_schema: schema::<NoArguments>,
    output_schema: schema::<ServerInfo>,
    run,
};

/// `server_info` takes no arguments (any sent are ignored).
#[derive(JsonSchema)]
pub(crate) struct NoArguments {}

/// What `server_info` reports.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ServerInfo {
    /// querygate's version (the crate version).
    version: String,
    /// The git commit it was built from.
    commit: String,
    /// When it was built (RFC 3339, UTC).
    build_date: String,
    /// Operating system and CPU architecture.
    platform: String,
    /// `http` or `stdio`.
    transport: String,
    /// The SQL engine statements run on: `sqlite3`.
    sql_backend: String,
    /// The local registry folder and the remote registry URL.
    provider_registry: String,
    /// The caller's tenant.
    tenant: String,
    /// The tenant's mode: read_only, safe, delete_safe or full_access.
    mode: String,
    /// Whether the tenant may only read.
    is_read_only: bool,
}

fn run(invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let shared = &invocation.shared;
        let info = ServerInfo {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            commit: env!("QUERYGATE_COMMIT").to_owned(),
            build_date: env!("QUERYGATE_BUILD_DATE").to_owned(),
            platform: format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
            transport: shared.transport.as_str().to_owned(),
            sql_backend: "sqlite3".to_owned(),
            provider_registry: shared.registry_description.clone(),
            tenant: invocation.cx.tenant.clone(),
            mode: invocation.mode.as_str().to_owned(),
            is_read_only: invocation.mode == Mode::ReadOnly,
        };
        let structured = serde_json::to_value(&info).unwrap_or(Value::Null);
        let record = match &structured {
            Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            _ => Vec::new(),
        };
        Ok(ToolResult {
            structured,
            view: View::Records {
                title: "Server Info".to_owned(),
                records: vec![record],
            },
        })
    })
}
