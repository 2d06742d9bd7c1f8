//! `validate_select_query`: plans a SELECT without running it. The engine resolves the
//! tables, methods and parameters, checks that the credentials resolve and has SQLite compile
//! the statement, with no upstream call. The answer says, per upstream request, its effect
//! and the evidence for it, the class the statement takes from them and what the tenant's
//! mode does with it. An invalid query is data (`valid: false` with the errors), not a tool
//! error.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    Effect, Hints, Invocation, ToolError, ToolFuture, ToolInput, ToolResult, ToolSpec,
    input_schema, parse, schema,
};
use crate::code::Code;
use crate::engine::StatementKind;
use crate::mcp::gatekeeper::Gatekeeper;
use crate::mcp::render::View;
use crate::policy::QueryClass;

/// The tool.
pub(crate) const SPEC: ToolSpec = ToolSpec {
    name: "validate_select_query",
    title: "Validate a SELECT without running it",
    hints: Hints {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    },
    effect: Effect::Read,
    takes_sql: true,
    takes_format: true,
    input_schema: input_schema::<ValidateInput>,
    output_schema: schema::<Validation>,
    parse: parse::<ValidateInput>,
    run,
};

/// Input of `validate_select_query`.
#[derive(Deserialize, JsonSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct ValidateInput {
    /// One SELECT statement.
    #[serde(deserialize_with = "super::sql_text")]
    #[schemars(with = "String")]
    sql: String,
    /// Text content render format: markdown (default) or json.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    format: Option<Value>,
    /// The query library id the SQL came from, if any (attribution only).
    #[serde(default)]
    source: Option<String>,
}

impl ToolInput for ValidateInput {
    fn take_format(&mut self) -> Option<Value> {
        self.format.take()
    }

    fn sql(&self) -> Option<&str> {
        Some(&self.sql)
    }
}

/// The verdict.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Validation {
    /// Whether the statement would plan and run.
    valid: bool,
    /// Why not (empty when valid): the error running it would report first.
    errors: Vec<String>,
    /// The statement's class: `select` when every request only reads, else the class of
    /// the strongest effect (`lifecycle` for `other`); absent when it does not parse.
    class: Option<String>,
    /// What the tenant's mode does with it: `allow`, `needs_approval` or
    /// `refuse_immediate`; absent when it does not parse.
    approval: Option<String>,
    /// Each upstream request it would make, with its effect and the evidence for it.
    requests: Vec<super::effects::RequestEffect>,
}

fn run(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let input: ValidateInput = invocation.input()?;
        if input.sql.trim().is_empty() {
            return Err(ToolError::failed(Code::ArgumentsInvalid, "no SQL provided"));
        }
        if let Some(source) = &input.source {
            tracing::debug!(source = %source, "validating a query from the query library");
        }
        let parsed = invocation
            .statement
            .take()
            .ok_or_else(|| ToolError::failed(Code::Internal, "the pipeline passed no statement"))?;
        let mut class = None;
        let mut requests = Vec::new();
        let outcome = match parsed {
            Err(err) => Err(err.message().to_owned()),
            Ok(statement) if statement.nests_statements() => {
                class = Some(QueryClass::Unknown);
                let advice = super::nested_writes_advice(&statement)
                    .map_or_else(String::new, |advice| format!(": {advice}"));
                Err(format!(
                    "validate_select_query checks SELECT statements only; this statement is {}{advice}",
                    super::statement_name(&statement)
                ))
            }
            Ok(statement) if statement.kind() == StatementKind::Select => {
                let classified = super::effects::classify(&invocation, &statement).await;
                class = Some(classified.class);
                requests = classified.requests;
                invocation
                    .services
                    .engine
                    .check(&invocation.cx, statement)
                    .await
                    .map_err(|err| err.message().to_owned())
            }
            Ok(other) => Err(format!(
                "validate_select_query checks SELECT statements only; this statement is {}",
                super::kind_name(other.kind())
            )),
        };
        let verdict = Validation {
            valid: outcome.is_ok(),
            errors: outcome.err().into_iter().collect(),
            class: class.map(|c| c.as_str().to_owned()),
            approval: class.map(|c| Gatekeeper::verdict(invocation.mode, c).as_str().to_owned()),
            requests,
        };
        let view = View::Records {
            title: "Validation Result".to_owned(),
            records: vec![vec![
                ("valid".to_owned(), Value::Bool(verdict.valid)),
                ("errors".to_owned(), Value::from(verdict.errors.clone())),
                ("class".to_owned(), Value::from(verdict.class.clone())),
                ("approval".to_owned(), Value::from(verdict.approval.clone())),
                (
                    "requests".to_owned(),
                    serde_json::to_value(&verdict.requests).unwrap_or(Value::Null),
                ),
            ]],
        };
        Ok(ToolResult {
            upstream_status: None,
            typed: None,
            structured: serde_json::to_value(&verdict).unwrap_or(Value::Null),
            view,
        })
    })
}
