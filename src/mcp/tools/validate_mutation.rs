//! `validate_mutation_query`: plans an INSERT, UPDATE, REPLACE, DELETE or EXEC, or a SELECT
//! that runs a method that is not a read (a statement the mode may hold), as running it
//! would and stops before anything is sent. It answers with the class the statement takes
//! from the effects of its requests, each request's effect and evidence, the writes (and
//! the held SELECT's requests) the engine resolved, a preview of each upstream request
//! (secrets masked), the plan hash an approval of the statement is bound to, and, for an
//! UPDATE, REPLACE or DELETE, the rows a SELECT with the same `WHERE` returns now. An
//! invalid statement is data (`valid: false` with the errors), not a tool error.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    Effect, Hints, Invocation, ToolError, ToolFuture, ToolInput, ToolResult, ToolSpec, cell_json,
    input_schema, parse, schema,
};
use crate::code::Code;
use crate::engine::{PlannedWrite, PreparedStatement, RequestPreview, StatementKind};
use crate::mcp::gatekeeper::Gatekeeper;
use crate::mcp::render::View;
use crate::policy::{QueryClass, Verdict};

/// How many of the rows the matching read returns are shown.
pub(crate) const CURRENT_ROWS: usize = 20;

/// The tool.
pub(crate) const SPEC: ToolSpec = ToolSpec {
    name: "validate_mutation_query",
    title: "Validate a write and show its plan without running it",
    hints: Hints {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: true,
    },
    effect: Effect::Read,
    takes_sql: true,
    takes_format: true,
    input_schema: input_schema::<ValidateMutationInput>,
    output_schema: schema::<MutationValidation>,
    parse: parse::<ValidateMutationInput>,
    run,
};

/// Input of `validate_mutation_query`.
#[derive(Deserialize, JsonSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct ValidateMutationInput {
    /// One INSERT, UPDATE, REPLACE, DELETE or EXEC statement, or a SELECT that runs a
    /// method that is not a read.
    #[serde(deserialize_with = "super::sql_text")]
    #[schemars(with = "String")]
    sql: String,
    /// Text content render format: markdown (default) or json.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    format: Option<Value>,
}

impl ToolInput for ValidateMutationInput {
    fn take_format(&mut self) -> Option<Value> {
        self.format.take()
    }

    fn sql(&self) -> Option<&str> {
        Some(&self.sql)
    }
}

/// The verdict and the plan.
#[derive(Serialize, JsonSchema)]
pub(crate) struct MutationValidation {
    /// Whether the statement would plan and be sent (the tenant's mode and approvals
    /// aside: see `approval`).
    valid: bool,
    /// Why not (empty when valid): the error running it would report first.
    errors: Vec<String>,
    /// What the tenant's mode does with the statement: `allow` (runs), `needs_approval`
    /// (runs once a person approves it) or `refuse_immediate` (never runs in this mode).
    approval: String,
    /// The statement's class, from the strongest effect of its requests (absent when it
    /// does not parse).
    class: Option<String>,
    /// Each upstream request it would make, with its effect and the evidence for it.
    effects: Vec<super::effects::RequestEffect>,
    /// The writes the engine resolved, in order (empty when not valid).
    writes: Vec<WriteShown>,
    /// The hash an approval of this statement is bound to, as the prompt and the approval
    /// page show it (`sha256:<hex>`); the approved call runs only if planning it again gives
    /// the same. Absent when not valid.
    plan_hash: Option<String>,
    /// For an UPDATE, REPLACE or DELETE: the rows `SELECT * FROM` its table `WHERE` the
    /// same conditions returns now, when such a read exists and may be made.
    current_rows: CurrentRows,
}

/// One planned write.
#[derive(Serialize, JsonSchema)]
pub(crate) struct WriteShown {
    /// `INSERT`, `UPDATE`, `REPLACE`, `DELETE`, `EXEC`, or `SELECT` for a table a held
    /// SELECT reads.
    verb: String,
    /// The provider.
    provider: String,
    /// `provider.service.resource`.
    resource: String,
    /// The provider method the requests call.
    method: String,
    /// How many upstream requests it sends (0: an INSERT whose rows come from a SELECT,
    /// known only when it runs).
    request_count: u64,
    /// The first requests as they would be sent, before auth, secrets masked as `***`.
    requests: Vec<RequestShown>,
    /// How many requests are not shown (beyond the preview's bound).
    requests_not_shown: u64,
}

/// One upstream request as it would be sent, before auth is added (no `Authorization`
/// header is part of it), secrets masked as `***`.
#[derive(Serialize, JsonSchema)]
pub(crate) struct RequestShown {
    /// The HTTP method.
    http_method: String,
    /// The URL, query string included.
    url: String,
    /// The headers before auth, in order.
    headers: Vec<Header>,
    /// The body's media type, when it has a body.
    media_type: Option<String>,
    /// The body as it would be sent (cut with a marker when long).
    body: Option<String>,
    /// How many bytes the body really has.
    body_bytes: u64,
}

/// One header of a request.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Header {
    /// Its name.
    name: String,
    /// Its value (`***` when masked).
    value: String,
}

/// The rows the write would act on now, or why they are not shown.
#[derive(Serialize, JsonSchema, Default)]
pub(crate) struct CurrentRows {
    /// Whether the read was made and its rows are here.
    available: bool,
    /// The columns of the read.
    columns: Vec<String>,
    /// Up to 20 rows, one value per column.
    #[schemars(schema_with = "rows_schema")]
    rows: Vec<Vec<Value>>,
    /// Present and true when the read returned more rows than shown.
    truncated: Option<bool>,
    /// Why no rows are shown (no matching read, the read failed, …), or what to know.
    note: Option<String>,
}

/// Rows of cells, each a string, number, boolean or null (what a column of a result holds).
fn rows_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {
            "type": "array",
            "items": {"type": ["string", "number", "boolean", "null"]}
        }
    })
}

impl CurrentRows {
    fn unavailable(note: impl Into<String>) -> Self {
        CurrentRows {
            note: Some(note.into()),
            ..CurrentRows::default()
        }
    }
}

fn shown(preview: RequestPreview) -> RequestShown {
    RequestShown {
        http_method: preview.http_method,
        url: preview.url,
        headers: preview
            .headers
            .into_iter()
            .map(|(name, value)| Header { name, value })
            .collect(),
        media_type: preview.media_type,
        body: preview.body,
        body_bytes: preview.body_bytes as u64,
    }
}

fn write_shown(write: PlannedWrite) -> WriteShown {
    let not_shown = write.requests.saturating_sub(write.previews.len());
    WriteShown {
        verb: write.verb,
        provider: write.provider,
        resource: write.resource,
        method: write.method,
        request_count: write.requests as u64,
        requests: write.previews.into_iter().map(shown).collect(),
        requests_not_shown: not_shown as u64,
    }
}

fn run(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let input: ValidateMutationInput = invocation.input()?;
        if input.sql.trim().is_empty() {
            return Err(ToolError::failed(Code::ArgumentsInvalid, "no SQL provided"));
        }
        let parsed = invocation
            .statement
            .take()
            .ok_or_else(|| ToolError::failed(Code::Internal, "the pipeline passed no statement"))?;
        let verdict = validate(&invocation, parsed).await;
        let structured = serde_json::to_value(&verdict).unwrap_or(Value::Null);
        Ok(ToolResult {
            upstream_status: None,
            typed: None,
            structured,
            view: View::Record {
                title: "Mutation Validation Result".to_owned(),
            },
        })
    })
}

async fn validate(
    invocation: &Invocation,
    parsed: crate::engine::Result<PreparedStatement>,
) -> MutationValidation {
    let invalid = |approval: &str, error: String| MutationValidation {
        valid: false,
        errors: vec![error],
        approval: approval.to_owned(),
        class: None,
        effects: Vec::new(),
        writes: Vec::new(),
        plan_hash: None,
        current_rows: CurrentRows::unavailable("not read: the statement is not valid"),
    };
    let statement = match parsed {
        Ok(statement) => statement,
        Err(err) => return invalid("refuse_immediate", err.message().to_owned()),
    };
    let classified = super::effects::classify(invocation, &statement).await;
    let class = classified.class;
    let approval = Gatekeeper::verdict(invocation.mode, class);
    let approval_name = approval.as_str();
    let writes_kind = matches!(
        statement.kind(),
        StatementKind::Insert
            | StatementKind::Update
            | StatementKind::Replace
            | StatementKind::Delete
            | StatementKind::Exec
    );
    if let Some(advice) = super::nested_writes_advice(&statement) {
        return invalid(
            approval_name,
            format!(
                "validate_mutation_query checks INSERT, UPDATE, REPLACE, DELETE and EXEC statements, and SELECTs that run a method that is not a read; this statement is {}: {advice}",
                super::statement_name(&statement)
            ),
        );
    }
    let held_read = statement.kind() == StatementKind::Select && class != QueryClass::Select;
    if !writes_kind && !held_read {
        let use_instead = if statement.kind() == StatementKind::Select {
            ": use validate_select_query"
        } else {
            ""
        };
        return invalid(
            approval_name,
            format!(
                "validate_mutation_query checks INSERT, UPDATE, REPLACE, DELETE and EXEC statements, and SELECTs that run a method that is not a read; this statement is {}{use_instead}",
                super::kind_name(statement.kind())
            ),
        );
    }
    let engine = &invocation.services.engine;
    let planned = match engine.preflight(&invocation.cx, &statement).await {
        Ok(planned) => planned,
        Err(err) => return invalid(approval_name, err.message().to_owned()),
    };
    let plan_hash = format!("sha256:{}", crate::engine::plan_hash(&planned));
    let current_rows = if matches!(approval, Verdict::Refuse(_)) {
        CurrentRows::unavailable(format!(
            "not read: the tenant's mode ({}) never runs this statement",
            invocation.mode.as_str()
        ))
    } else if held_read {
        CurrentRows::unavailable(
            "not read: a SELECT's rows are its result; what it would send is in writes",
        )
    } else {
        current_rows(invocation, &statement).await
    };
    MutationValidation {
        valid: true,
        errors: Vec::new(),
        approval: approval_name.to_owned(),
        class: Some(class.as_str().to_owned()),
        effects: classified.requests,
        writes: planned.into_iter().map(write_shown).collect(),
        plan_hash: Some(plan_hash),
        current_rows,
    }
}

/// The rows the matching read of `statement` returns now, as `run_select_query` would read
/// them for this tenant; any reason it cannot or may not be made is a note, never a failure
/// of the validation.
async fn current_rows(invocation: &Invocation, statement: &PreparedStatement) -> CurrentRows {
    let mut read = match statement.matching_read(CURRENT_ROWS + 1) {
        None => {
            return CurrentRows::unavailable(match statement.kind() {
                StatementKind::Update | StatementKind::Replace | StatementKind::Delete => {
                    "no matching read: the statement has no WHERE equalities to read by"
                }
                _ => "no matching read: only UPDATE, REPLACE and DELETE name existing rows",
            });
        }
        Some(Err(err)) => {
            return CurrentRows::unavailable(format!("no matching read: {}", err.message()));
        }
        Some(Ok(read)) => read,
    };
    let engine = &invocation.services.engine;
    let cx = &invocation.cx;
    let requests = match engine.plan_requests(cx, &mut read).await {
        Ok(requests) => requests,
        Err(err) => {
            return CurrentRows::unavailable(format!(
                "no matching read: a SELECT with the same WHERE does not plan: {}",
                err.message()
            ));
        }
    };
    if let Err(why) = invocation
        .services
        .keeper
        .unattended_read(&cx.tenant, &requests)
    {
        return CurrentRows::unavailable(format!("not read: {why}"));
    }
    match engine.run(cx, read).await {
        Ok(output) => {
            let truncated = output.rows.len() > CURRENT_ROWS;
            CurrentRows {
                available: true,
                columns: output.columns,
                rows: output
                    .rows
                    .into_iter()
                    .take(CURRENT_ROWS)
                    .map(|row| row.into_iter().map(cell_json).collect())
                    .collect(),
                truncated: truncated.then_some(true),
                note: (!output.warnings.is_empty()).then(|| output.warnings.join("; ")),
            }
        }
        Err(err) => {
            CurrentRows::unavailable(format!("the matching read failed: {}", err.message()))
        }
    }
}
