//! `list_registry` and `pull_provider`: the remote provider registry. Names go to the
//! engine's typed registry calls, which refuse characters outside letters, digits, `-`, `_`
//! and `.`; a pull writes only the local registry root.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{
    Effect, Hints, Invocation, RowsOutput, ToolError, ToolFuture, ToolInput, ToolResult, ToolSpec,
    input_schema, parse, rows_result, schema,
};
use crate::code::Code;
use crate::mcp::render::View;

/// `list_registry`.
pub(crate) const LIST_REGISTRY: ToolSpec = ToolSpec {
    name: "list_registry",
    title: "List providers in the remote registry",
    hints: Hints {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: true,
    },
    effect: Effect::Read,
    takes_sql: false,
    takes_format: true,
    input_schema: input_schema::<ListRegistryInput>,
    output_schema: schema::<RowsOutput>,
    parse: parse::<ListRegistryInput>,
    run: list_registry,
};

/// `pull_provider`.
pub(crate) const PULL_PROVIDER: ToolSpec = ToolSpec {
    name: "pull_provider",
    title: "Install a provider from the registry",
    hints: Hints {
        read_only: false,
        destructive: false,
        idempotent: true,
        open_world: true,
    },
    effect: Effect::RegistryInstall,
    takes_sql: false,
    takes_format: true,
    input_schema: input_schema::<PullInput>,
    output_schema: schema::<PullOutput>,
    parse: parse::<PullInput>,
    run: pull_provider,
};

/// Input of `list_registry`.
#[derive(Deserialize, JsonSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListRegistryInput {
    /// A provider name, e.g. `github`: list that provider's versions; absent: every provider.
    #[serde(default)]
    provider: Option<String>,
    /// Text content render format: markdown (default) or json.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    format: Option<Value>,
}

/// Input of `pull_provider`.
#[derive(Deserialize, JsonSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct PullInput {
    /// The provider to install, e.g. `github`.
    #[serde(default)]
    provider: Option<String>,
    /// The version to install, e.g. `v24.11.00274`; absent: the newest usable one.
    #[serde(default)]
    version: Option<String>,
    /// Text content render format: markdown (default) or json.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    format: Option<Value>,
}

impl ToolInput for ListRegistryInput {
    fn take_format(&mut self) -> Option<Value> {
        self.format.take()
    }
}

impl ToolInput for PullInput {
    fn take_format(&mut self) -> Option<Value> {
        self.format.take()
    }
}

/// Output of `pull_provider`.
#[derive(JsonSchema)]
#[allow(dead_code)] // schema only
pub(crate) struct PullOutput {
    /// What was installed, and which newer versions were passed over and why.
    messages: Vec<String>,
    /// When the install completed (RFC 3339, UTC).
    timestamp: String,
    /// The provider's SQL name.
    provider: String,
    /// The version installed.
    version: String,
}

fn trimmed(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|v| !v.is_empty())
}

fn list_registry(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let input: ListRegistryInput = invocation.input()?;
        let provider = trimmed(input.provider.as_deref());
        let output = invocation
            .services
            .engine
            .registry_list_rows(provider)
            .await?;
        Ok(rows_result(output, invocation.services.max_rows))
    })
}

fn pull_provider(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let input: PullInput = invocation.input()?;
        let Some(provider) = trimmed(input.provider.as_deref()) else {
            return Err(ToolError::failed(
                Code::ArgumentsInvalid,
                "provider not specified",
            ));
        };
        let version = trimmed(input.version.as_deref());
        let outcome = invocation
            .services
            .engine
            .registry_pull_for(&invocation.cx, provider, version)
            .await?;
        if invocation.typed {
            return Ok(ToolResult::typed(crate::engine::QueryOutput {
                messages: vec![outcome.message],
                ..Default::default()
            }));
        }
        let timestamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let record = vec![
            ("messages".to_owned(), Value::from(vec![outcome.message])),
            ("timestamp".to_owned(), Value::String(timestamp)),
            ("provider".to_owned(), Value::String(outcome.provider)),
            ("version".to_owned(), Value::String(outcome.version)),
        ];
        Ok(ToolResult {
            upstream_status: None,
            typed: None,
            structured: Value::Object(record.iter().cloned().collect()),
            view: View::Records {
                title: "Pull Result".to_owned(),
                records: vec![record],
            },
        })
    })
}
