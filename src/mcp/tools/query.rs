//! `run_select_query`, `run_mutation_query` and `run_lifecycle_operation`: SQL through the
//! engine. The pipeline parsed the statement once and the mode gate checked that it is the
//! tool's class (a DELETE sent to `run_select_query` is refused, as is a SELECT sent to
//! `run_mutation_query`) and that the tenant's mode lets it run; the tools run exactly that
//! statement.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{
    Effect, Hints, Invocation, RowsOutput, ToolError, ToolFuture, ToolInput, ToolResult, ToolSpec,
    input_schema, parse, row_cap, rows_result, schema,
};
use crate::code::Code;
use crate::engine::PreparedStatement;
use crate::mcp::render::View;
use crate::policy::QueryClass;

/// `run_select_query`.
pub(crate) const RUN_SELECT_QUERY: ToolSpec = ToolSpec {
    name: "run_select_query",
    title: "Run a SELECT",
    hints: Hints {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: true,
    },
    effect: Effect::Sql(&[QueryClass::Select]),
    takes_sql: true,
    takes_format: true,
    input_schema: input_schema::<QueryInput>,
    output_schema: schema::<RowsOutput>,
    parse: parse::<QueryInput>,
    run: run_select,
};

/// `run_mutation_query`.
pub(crate) const RUN_MUTATION_QUERY: ToolSpec = ToolSpec {
    name: "run_mutation_query",
    title: "Run INSERT, UPDATE, REPLACE or DELETE",
    hints: Hints {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: true,
    },
    effect: Effect::Sql(&[QueryClass::MutationCreate, QueryClass::MutationDelete]),
    takes_sql: true,
    takes_format: true,
    input_schema: input_schema::<QueryInput>,
    output_schema: schema::<WriteOutput>,
    parse: parse::<QueryInput>,
    run: run_mutation,
};

/// `run_lifecycle_operation`.
pub(crate) const RUN_LIFECYCLE_OPERATION: ToolSpec = ToolSpec {
    name: "run_lifecycle_operation",
    title: "Run an EXEC lifecycle operation",
    hints: Hints {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: true,
    },
    effect: Effect::Sql(&[QueryClass::Lifecycle]),
    takes_sql: true,
    takes_format: true,
    input_schema: input_schema::<QueryInput>,
    output_schema: schema::<WriteOutput>,
    parse: parse::<QueryInput>,
    run: run_lifecycle,
};

/// Input of the SQL tools.
#[derive(Deserialize, JsonSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueryInput {
    /// One SQL statement.
    #[serde(deserialize_with = "super::sql_text")]
    #[schemars(with = "String")]
    sql: String,
    /// Most rows to return (server-side cap; the result says when it cut). 0 or absent: the
    /// server's limit.
    #[serde(default)]
    row_limit: Option<u64>,
    /// Text content render format: markdown (default) or json.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    format: Option<Value>,
    /// The query library id the SQL came from, if any (attribution only).
    #[serde(default)]
    source: Option<String>,
}

impl ToolInput for QueryInput {
    fn take_format(&mut self) -> Option<Value> {
        self.format.take()
    }

    fn sql(&self) -> Option<&str> {
        Some(&self.sql)
    }

    fn row_limit(&self) -> Option<u64> {
        self.row_limit
    }
}

/// Output of writes and lifecycle operations.
#[derive(JsonSchema)]
#[allow(dead_code)] // schema only
pub(crate) struct WriteOutput {
    /// What each upstream request did.
    messages: Vec<String>,
    /// When the operation completed (RFC 3339, UTC).
    timestamp: String,
    /// Rows of the responses, with RETURNING (and for EXEC methods that answer with data).
    rows: Option<Vec<Map<String, Value>>>,
    /// Present and true when rows were cut at the row limit.
    truncated: Option<bool>,
}

/// The tool's input and the statement the pipeline parsed from its `sql`.
fn input_and_statement(
    invocation: &mut Invocation,
) -> Result<(QueryInput, PreparedStatement), ToolError> {
    let input: QueryInput = invocation.input()?;
    if let Some(source) = &input.source {
        tracing::debug!(source = %source, "query from the query library");
    }
    let statement = invocation
        .statement
        .take()
        .ok_or_else(|| ToolError::failed(Code::Internal, "the pipeline passed no statement"))??;
    Ok((input, statement))
}

fn run_select(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let (input, statement) = input_and_statement(&mut invocation)?;
        let services = &invocation.services;
        let output = services.engine.run(&invocation.cx, statement).await?;
        if invocation.typed {
            return Ok(ToolResult::typed(output));
        }
        let cap = row_cap(input.row_limit, services.max_rows);
        // Thousands of rows become JSON values off the async workers.
        let cells = output.rows.len().min(cap) * output.columns.len();
        services
            .render
            .run(cells, services.bulk_priority, move || {
                rows_result(output, cap)
            })
            .await
            .map_err(|err| ToolError::failed(Code::Internal, err.to_string()))
    })
}

fn run_mutation(invocation: Invocation) -> ToolFuture {
    Box::pin(run_write(invocation, "Mutation Result"))
}

fn run_lifecycle(invocation: Invocation) -> ToolFuture {
    Box::pin(run_write(invocation, "Lifecycle Result"))
}

/// Runs a write the gate let through (its class is the tool's).
async fn run_write(mut invocation: Invocation, title: &str) -> Result<ToolResult, ToolError> {
    let (input, statement) = input_and_statement(&mut invocation)?;
    let services = &invocation.services;
    // In a task resumed from another replica: the stored operation is polled instead.
    let mut output =
        crate::tasks::run_or_resume(&services.engine, &invocation.cx, statement).await?;
    if invocation.typed {
        return Ok(ToolResult::typed(output));
    }
    let messages = std::mem::take(&mut output.messages);
    let timestamp = output.timestamp.take().unwrap_or_default();
    let upstream_status = output.upstream_status;
    let has_rows = !output.columns.is_empty();
    let rows = rows_result(output, row_cap(input.row_limit, services.max_rows));
    let mut structured = Map::new();
    structured.insert("messages".into(), Value::from(messages.clone()));
    structured.insert("timestamp".into(), Value::from(timestamp.clone()));
    let mut record = vec![
        ("messages".to_owned(), Value::from(messages)),
        ("timestamp".to_owned(), Value::from(timestamp)),
    ];
    if has_rows && let Value::Object(extra) = rows.structured {
        for (key, value) in extra {
            if key == "rows" {
                record.push(("rows".to_owned(), value.clone()));
            }
            structured.insert(key, value);
        }
    }
    Ok(ToolResult {
        upstream_status,
        typed: None,
        structured: Value::Object(structured),
        view: View::Records {
            title: title.to_owned(),
            records: vec![record],
        },
    })
}
