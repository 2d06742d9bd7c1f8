//! `reload_credentials`: re-sources the tenant's env file, drops auth state derived from it,
//! and reports per installed provider whether its credentials resolve and whether they
//! changed. Names only, never values.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::discovery::identifier;
use super::{
    Effect, Hints, Invocation, ToolFuture, ToolInput, ToolResult, ToolSpec, input_schema, parse,
    schema,
};
use crate::mcp::render::View;

/// The tool.
pub(crate) const SPEC: ToolSpec = ToolSpec {
    name: "reload_credentials",
    title: "Reload credentials",
    hints: Hints {
        read_only: false,
        destructive: false,
        idempotent: true,
        open_world: false,
    },
    effect: Effect::Read,
    takes_sql: false,
    takes_format: true,
    input_schema: input_schema::<CredentialsReloadInput>,
    output_schema: schema::<ReloadOutput>,
    parse: parse::<CredentialsReloadInput>,
    run,
};

/// Input of `reload_credentials`.
#[derive(Deserialize, JsonSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct CredentialsReloadInput {
    /// Report only this provider (the reload itself always re-reads the whole file).
    #[serde(default)]
    provider: Option<String>,
    /// Text content render format: markdown (default) or json.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    format: Option<Value>,
}

impl ToolInput for CredentialsReloadInput {
    fn take_format(&mut self) -> Option<Value> {
        self.format.take()
    }
}

/// The report.
#[derive(JsonSchema)]
#[allow(dead_code)] // schema only
pub(crate) struct ReloadOutput {
    /// The configured env file, when there is one.
    env_file: Option<String>,
    /// Whether the file was read on this call.
    env_file_sourced: bool,
    /// Names (never values) the file set, sorted.
    sourced_vars: Option<Vec<String>>,
    /// One row per installed provider (or the one asked for).
    providers: Vec<ProviderRow>,
}

/// One provider's row.
#[derive(JsonSchema)]
#[allow(dead_code)] // schema only
pub(crate) struct ProviderRow {
    /// Provider SQL name.
    provider: String,
    /// Auth type in effect (`api_key`, `custom`, `aws_signing_v4`, `null_auth`, …).
    auth_type: String,
    /// Where the credentials come from: `env:<VAR>`, `file:<path>`, `inline` or `none`.
    sourced_from: String,
    /// `ok`, `unresolved` or `not_checked`.
    status: String,
    /// Why they do not resolve; empty when they do.
    detail: String,
    /// Whether the resolved material differs from before this reload.
    changed: bool,
    /// Which credential source resolves: `env:<VAR>` names, `azure_default:<Credential>`,
    /// `oauth2_client_credentials:…`, `service_account:…`, `inline` or `none`.
    resolved_source: String,
    /// When the cached token expires (RFC 3339); null here, as a reload drops cached tokens.
    token_expires_at: Option<String>,
}

/// The markdown columns, alphabetical.
const COLUMNS: [&str; 8] = [
    "auth_type",
    "changed",
    "detail",
    "provider",
    "resolved_source",
    "sourced_from",
    "status",
    "token_expires_at",
];

fn run(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let input: CredentialsReloadInput = invocation.input()?;
        let provider = input
            .provider
            .as_deref()
            .map(str::trim)
            .filter(|p| !p.is_empty());
        if let Some(provider) = provider {
            identifier("provider", provider)?;
        }
        let report = invocation
            .services
            .engine
            .reload_credentials(&invocation.cx, provider)
            .await?;
        let structured = serde_json::to_value(&report).unwrap_or(Value::Null);
        let rows = structured
            .get("providers")
            .and_then(Value::as_array)
            .map(|rows| {
                rows.iter()
                    .map(|row| {
                        COLUMNS
                            .iter()
                            .map(|c| row.get(*c).cloned().unwrap_or(Value::String(String::new())))
                            .collect()
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(ToolResult {
            upstream_status: None,
            typed: None,
            structured,
            view: View::Table {
                columns: COLUMNS.iter().map(|c| (*c).to_owned()).collect(),
                rows,
            },
        })
    })
}
