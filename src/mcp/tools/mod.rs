//! The tools: one [`ToolSpec`] per tool (name, hints, schemas, the function that runs it),
//! listed in [`CATALOGUE`]. Tools reach the engine only through its public facade.
//!
//! To add a tool: write its module, add its spec to `CATALOGUE`, and add
//! `content/tools/<name>.md` (the server refuses to start otherwise).

mod credentials;
mod discovery;
mod effects;
mod library;
mod query;
mod registry;
mod server_info;
mod validate;
mod validate_mutation;

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::library::Library;
use super::offload::RenderPool;
use super::render::View;
use super::transport::Transport;
use crate::code::Code;
use crate::config::Mode;
use crate::engine::{Cell, Engine, ExecContext, PreparedStatement, QueryOutput};
use crate::mismatch::Mismatch;
use crate::policy::QueryClass;
use crate::thread_priority::BulkPriority;

/// What a tool does, for its annotations.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hints {
    /// Changes nothing anywhere.
    pub(crate) read_only: bool,
    /// May delete or overwrite (meaningful when not read-only).
    pub(crate) destructive: bool,
    /// Repeating it with the same arguments has no further effect.
    pub(crate) idempotent: bool,
    /// Reaches systems outside querygate (cloud and SaaS APIs, the registry).
    pub(crate) open_world: bool,
}

impl Hints {
    /// Reads only what querygate holds itself (provider documents, the query library):
    /// changes nothing and reaches no outside system.
    pub(crate) const READ_LOCAL: Hints = Hints {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    };
}

/// What a tool may change, for the mode gate.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Effect {
    /// Changes nothing anywhere: allowed in every mode (class `select`).
    Read,
    /// Runs its `sql` argument; the statement's class must be one of these, and the
    /// tenant's mode decides.
    Sql(&'static [QueryClass]),
    /// Installs provider documents into the local registry every tenant reads: allowed in
    /// every mode (it changes no infrastructure), for tenants with `allow_pull_provider`.
    RegistryInstall,
}

/// Parses a call's arguments into a tool's input type ([`parse`]), or says what is wrong.
pub(crate) type InputParser = fn(&Map<String, Value>) -> Result<Box<dyn ToolInput>, String>;

/// The future a tool returns.
pub(crate) type ToolFuture = Pin<Box<dyn Future<Output = Result<ToolResult, ToolError>> + Send>>;

/// One tool.
pub(crate) struct ToolSpec {
    pub(crate) name: &'static str,
    pub(crate) title: &'static str,
    pub(crate) hints: Hints,
    /// What the tool may change.
    pub(crate) effect: Effect,
    /// Whether the tool takes an `sql` argument, parsed once by the pipeline.
    pub(crate) takes_sql: bool,
    /// Whether the tool takes the `format` argument (all but `server_info` and
    /// `list_providers`, as in StackQL).
    pub(crate) takes_format: bool,
    pub(crate) input_schema: fn() -> JsonObject,
    pub(crate) output_schema: fn() -> JsonObject,
    /// Parses the arguments into the tool's input type, once, before any layer runs.
    pub(crate) parse: InputParser,
    pub(crate) run: fn(Invocation) -> ToolFuture,
}

impl std::fmt::Debug for ToolSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSpec")
            .field("name", &self.name)
            .field("effect", &self.effect)
            .finish_non_exhaustive()
    }
}

/// The tools the server offers (all of the catalogue, or those `server.enabled_tools`
/// names), by name.
#[derive(Debug)]
pub(crate) struct OfferedTools {
    by_name: HashMap<&'static str, &'static ToolSpec>,
}

impl OfferedTools {
    /// The tools of the catalogue that `enabled` names (`None`: every one).
    pub(crate) fn new(enabled: Option<&[String]>) -> Self {
        let by_name = CATALOGUE
            .iter()
            .filter(|t| enabled.is_none_or(|list| list.iter().any(|n| n == t.name)))
            .map(|t| (t.name, t))
            .collect();
        OfferedTools { by_name }
    }

    /// An offered tool.
    pub(crate) fn get(&self, name: &str) -> Option<&'static ToolSpec> {
        self.by_name.get(name).copied()
    }

    /// Offered tools, in catalogue order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &'static ToolSpec> + '_ {
        CATALOGUE
            .iter()
            .filter(|t| self.by_name.contains_key(t.name))
    }
}

/// What the tools use of the server, shared by every call.
#[derive(Debug)]
pub(crate) struct ToolServices {
    /// The engine every tool reaches through its facade.
    pub(crate) engine: Engine,
    /// The gate's rules, for the validate tools: the class a statement takes, the mode's
    /// verdict, and whether a read may be sent unattended.
    pub(crate) keeper: crate::mcp::gatekeeper::Gatekeeper,
    /// `server.max_rows`: no result holds more rows.
    pub(crate) max_rows: usize,
    /// The threads large results are turned into JSON on.
    pub(crate) render: Arc<RenderPool>,
    /// The OS priority of that work (`limits.admission.bulk_work_priority`).
    pub(crate) bulk_priority: BulkPriority,
    /// The transport serving the calls, for `server_info`.
    pub(crate) transport: Transport,
    /// The local registry root and the remote registry URL, for `server_info`.
    pub(crate) registry_description: String,
    /// The query library (embedded snapshot and optional remote index).
    pub(crate) library: Library,
    /// MCP tasks, for `server_info`: `off`, `memory` or `postgres`.
    pub(crate) tasks: &'static str,
}

/// Everything a tool run gets.
pub(crate) struct Invocation {
    /// What the tools use of the server.
    pub(crate) services: Arc<ToolServices>,
    /// The caller's tenant context.
    pub(crate) cx: ExecContext,
    /// The tenant's mode.
    pub(crate) mode: Mode,
    /// The arguments, parsed into the tool's input type by `prepare` (see
    /// [`Invocation::input`]).
    pub(crate) input: Box<dyn ToolInput>,
    /// The parsed `sql` argument, for tools that take one (for SQL tools the gate has
    /// checked that it parsed and is the tool's class).
    pub(crate) statement: Option<crate::engine::Result<PreparedStatement>>,
    /// Whether the caller takes the engine's output as it is ([`ToolResult::typed`]): the
    /// CLI renders rows itself, as tables, JSON or CSV.
    pub(crate) typed: bool,
}

impl Invocation {
    /// The tool's arguments as its input type `T`.
    pub(crate) fn input<T: ToolInput>(&mut self) -> Result<T, ToolError> {
        let input = std::mem::replace(&mut self.input, Box::new(NoArguments {}));
        let input: Box<dyn Any> = input;
        input.downcast::<T>().map(|input| *input).map_err(|_| {
            ToolError::failed(
                Code::Internal,
                "the pipeline passed arguments of another tool",
            )
        })
    }
}

/// A tool's input type: its arguments, parsed once by the pipeline's `prepare` and handed
/// to the tool as they are. Says what the layers before the tool read of them (`format` is
/// the pipeline's: the tool never reads it).
pub(crate) trait ToolInput: Any + Send + Sync + std::fmt::Debug {
    /// The `sql` argument, for tools that take one.
    fn sql(&self) -> Option<&str> {
        None
    }

    /// The `row_limit` argument, for tools that take one.
    fn row_limit(&self) -> Option<u64> {
        None
    }

    /// The `format` argument, taken by the pipeline (which renders the result), for tools
    /// that take one.
    fn take_format(&mut self) -> Option<Value> {
        None
    }
}

/// A successful tool result: the structured payload and how its markdown looks, or the
/// engine's output itself for a caller that renders it (the CLI).
pub(crate) struct ToolResult {
    pub(crate) structured: Value,
    pub(crate) view: View,
    /// The HTTP status the upstream answered the write or EXEC with, for the audit.
    pub(crate) upstream_status: Option<u16>,
    /// The engine's output, unrendered and uncapped (`structured` is then `null`).
    pub(crate) typed: Option<QueryOutput>,
}

impl ToolResult {
    /// A result handed on as the engine's output, for [`Invocation::typed`] callers.
    pub(crate) fn typed(output: QueryOutput) -> Self {
        ToolResult {
            structured: Value::Null,
            view: View::Records {
                title: String::new(),
                records: Vec::new(),
            },
            upstream_status: output.upstream_status,
            typed: Some(output),
        }
    }
}

/// How a tool failed.
#[derive(Debug)]
pub(crate) enum ToolError {
    /// A failure the model can act on: a tool result with `isError: true`.
    Failed {
        /// The stable code.
        code: Code,
        /// What went wrong.
        message: String,
        /// The upstream HTTP status, when the upstream answered with an error (else the
        /// status of the write it acknowledged before the failure).
        upstream_status: Option<u16>,
        /// The upstream acknowledged a write of the call before it failed: the side effect
        /// may have happened.
        acknowledged: bool,
        /// How long to wait before retrying, when the failure says (`upstream.throttled`).
        retry_after: Option<std::time::Duration>,
    },
}

impl ToolError {
    /// A failure with this code and message.
    pub(crate) fn failed(code: Code, message: impl Into<String>) -> Self {
        ToolError::Failed {
            code,
            message: message.into(),
            upstream_status: None,
            acknowledged: false,
            retry_after: None,
        }
    }
}

impl From<crate::engine::Error> for ToolError {
    fn from(err: crate::engine::Error) -> Self {
        ToolError::Failed {
            code: Code::from(err.kind()),
            message: err.message().to_owned(),
            upstream_status: err
                .upstream_failure()
                .map(|f| f.status)
                .or(err.acknowledged_write()),
            acknowledged: err.acknowledged_write().is_some(),
            retry_after: err.retry_after(),
        }
    }
}

/// Every tool the server has, in listing order.
pub(crate) static CATALOGUE: &[ToolSpec] = &[
    server_info::SPEC,
    discovery::LIST_PROVIDERS,
    discovery::LIST_SERVICES,
    discovery::LIST_RESOURCES,
    discovery::LIST_METHODS,
    discovery::DESCRIBE_RESOURCE,
    discovery::DESCRIBE_METHOD,
    validate::SPEC,
    validate_mutation::SPEC,
    query::RUN_SELECT_QUERY,
    query::RUN_MUTATION_QUERY,
    query::RUN_LIFECYCLE_OPERATION,
    registry::LIST_REGISTRY,
    registry::PULL_PROVIDER,
    credentials::SPEC,
    library::QUERY_LIBRARY_SEARCH,
    library::QUERY_LIBRARY_GET,
];

/// Parses a tool's arguments into its input type `T` (unknown fields refused, but by
/// [`NoArguments`]): what goes wrong names the field, and a number of the wrong kind says
/// what it must be (`row_limit: must be a whole number ≥ 0, got -1`).
pub(crate) fn parse<T: ToolInput + DeserializeOwned>(
    arguments: &Map<String, Value>,
) -> Result<Box<dyn ToolInput>, String> {
    match serde_path_to_error::deserialize::<_, T>(arguments) {
        Ok(input) => Ok(Box::new(input)),
        Err(err) => {
            let path = err.path().to_string();
            let inner = err.inner().to_string();
            // A number of the wrong kind says what it must be, not serde's Rust type.
            let what = Mismatch::of(&inner).map_or(inner, |m| m.to_string());
            Err(if path == "." {
                what
            } else {
                format!("{path}: {what}")
            })
        }
    }
}

/// An `sql` argument: a string, else `expected a string, got <value>`.
pub(crate) fn sql_text<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<String, D::Error> {
    use serde::Deserialize as _;
    match Value::deserialize(deserializer)? {
        Value::String(sql) => Ok(sql),
        other => Err(serde::de::Error::custom(format!(
            "expected a string, got {other}"
        ))),
    }
}

/// The JSON schema of `T` as an object, for an output: every subschema written where it is
/// used, never a `$ref` into `$defs` (strict conversions such as the OpenAI Agents SDK's fall
/// back on schemas with references), without the `$schema` keyword and the numeric
/// `format`s schemars writes (`uint64`, `int64`, `double`, …), which JSON Schema does not
/// define and validators such as Ajv (the TypeScript SDK's, the Inspector's) warn about on
/// every call; `type` and `minimum` already say what they meant.
pub(crate) fn schema<T: JsonSchema>() -> JsonObject {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator();
    let mut object = match serde_json::to_value(generator.into_root_schema_for::<T>()) {
        Ok(Value::Object(object)) => object,
        _ => JsonObject::new(),
    };
    object.remove("$schema");
    visit_schemas(&mut object, &mut |node| {
        if node
            .get("format")
            .and_then(Value::as_str)
            .is_some_and(is_numeric_format)
        {
            node.remove("format");
        }
    });
    object
}

/// The JSON schema of a tool's input `T`: [`schema`], and every object closed
/// (`additionalProperties: false` where schemars left it open by omission), as strict schema
/// conversions (OpenAI's structured tool calls) require and as the tools that take
/// arguments parse them (unknown fields are refused).
pub(crate) fn input_schema<T: JsonSchema>() -> JsonObject {
    let mut object = schema::<T>();
    visit_schemas(&mut object, &mut |node| {
        if is_object_schema(node) && !node.contains_key("additionalProperties") {
            node.insert("additionalProperties".into(), Value::Bool(false));
        }
    });
    object
}

/// Whether a `format` value is one of the numeric formats schemars writes.
fn is_numeric_format(format: &str) -> bool {
    format.starts_with("int") || format.starts_with("uint") || matches!(format, "float" | "double")
}

/// Whether a schema describes objects (`type: object`, or `object` among its types).
fn is_object_schema(node: &Map<String, Value>) -> bool {
    match node.get("type") {
        Some(Value::String(kind)) => kind == "object",
        Some(Value::Array(kinds)) => kinds.iter().any(|k| k == "object"),
        _ => false,
    }
}

/// Calls `visit` on `node` and on every schema inside it (properties, items, additional
/// properties, combinators, definitions), not on values that merely look like schemas
/// (`default`, `examples`, `enum`).
pub(crate) fn visit_schemas(
    node: &mut Map<String, Value>,
    visit: &mut impl FnMut(&mut Map<String, Value>),
) {
    visit(node);
    for (key, value) in node.iter_mut() {
        match (key.as_str(), value) {
            ("properties" | "$defs" | "definitions" | "patternProperties", Value::Object(map)) => {
                for schema in map.values_mut() {
                    if let Value::Object(schema) = schema {
                        visit_schemas(schema, visit);
                    }
                }
            }
            ("items" | "additionalProperties" | "not" | "contains", Value::Object(schema)) => {
                visit_schemas(schema, visit);
            }
            ("anyOf" | "oneOf" | "allOf" | "prefixItems" | "items", Value::Array(schemas)) => {
                for schema in schemas {
                    if let Value::Object(schema) = schema {
                        visit_schemas(schema, visit);
                    }
                }
            }
            _ => {}
        }
    }
}

// Members sent anyway are ignored, as StackQL's `server_info` and `list_providers` ignore
// them (no `deny_unknown_fields`); the schema, closed, lists none. The doc comment is the
// schema's description, which clients show.
/// This tool takes no arguments.
#[derive(serde::Deserialize, JsonSchema, Debug)]
pub(crate) struct NoArguments {}

impl ToolInput for NoArguments {}

/// A cell as JSON.
pub(crate) fn cell_json(cell: Cell) -> Value {
    match cell {
        Cell::Null => Value::Null,
        Cell::Boolean(b) => Value::Bool(b),
        Cell::Integer(i) => Value::from(i),
        Cell::Real(r) => serde_json::Number::from_f64(r).map_or(Value::Null, Value::Number),
        Cell::Text(t) => Value::String(t),
        Cell::Blob(b) => Value::String(format!("<{} bytes>", b.len())),
    }
}

/// Rows of a query output, capped at `limit`: see [`table_result`].
pub(crate) fn rows_result(output: QueryOutput, limit: usize) -> ToolResult {
    let seen = output.rows.len();
    let rows = output
        .rows
        .into_iter()
        .take(limit)
        .map(|row| row.into_iter().map(cell_json).collect())
        .collect();
    table_result(output.columns, rows, seen, output.warnings)
}

/// A table result whose `rows` were already cut to the limit from `seen`: the structured
/// payload is `{rows: [{col: value}], truncated?, rows_seen?, warnings?}`, and the markdown
/// table reads those objects (the rows are held once) unless column names repeat.
pub(crate) fn table_result(
    columns: Vec<String>,
    rows: Vec<Vec<Value>>,
    seen: usize,
    warnings: Vec<String>,
) -> ToolResult {
    let truncated = seen > rows.len();
    let object = |row: Vec<Value>| Value::Object(columns.iter().cloned().zip(row).collect());
    let unique = columns
        .iter()
        .enumerate()
        .all(|(i, c)| !columns[..i].contains(c));
    let (objects, view): (Vec<Value>, View) = if unique {
        let objects = rows.into_iter().map(object).collect();
        (objects, View::Rows { columns })
    } else {
        // Objects keep one value per name: the table shows every column from the rows.
        let objects = rows.iter().cloned().map(object).collect();
        (objects, View::Table { columns, rows })
    };
    let mut structured = Map::new();
    structured.insert("rows".into(), Value::Array(objects));
    if truncated {
        structured.insert("truncated".into(), Value::Bool(true));
        structured.insert("rows_seen".into(), Value::from(seen));
    }
    if !warnings.is_empty() {
        structured.insert("warnings".into(), Value::from(warnings));
    }
    ToolResult {
        upstream_status: None,
        typed: None,
        structured: Value::Object(structured),
        view,
    }
}

/// A statement kind for messages: "a SELECT", "an INSERT", …
pub(crate) fn kind_name(kind: crate::engine::StatementKind) -> &'static str {
    use crate::engine::StatementKind;
    match kind {
        StatementKind::Select => "a SELECT",
        StatementKind::Metadata => "a SHOW or DESCRIBE",
        StatementKind::Insert => "an INSERT",
        StatementKind::Update => "an UPDATE",
        StatementKind::Replace => "a REPLACE",
        StatementKind::Delete => "a DELETE",
        StatementKind::Exec => "an EXEC",
        StatementKind::RegistryList => "a REGISTRY LIST",
        StatementKind::RegistryPull => "a REGISTRY PULL",
    }
}

/// A statement for messages: its kind ("a SELECT"), or, when writes are nested inside it,
/// those writes and where they are ("a DELETE within a query (WITH, a subquery or a set
/// operation)" for `WITH t AS (SELECT 1) DELETE FROM …`, which parses as a query carrying
/// the DELETE).
pub(crate) fn statement_name(statement: &PreparedStatement) -> String {
    let writes = statement.nested_writes();
    if writes.is_empty() {
        return kind_name(statement.kind()).to_owned();
    }
    let writes = and_list(writes.into_iter().map(|kind| kind_name(kind).to_owned()));
    format!("{writes} within a query (WITH, a subquery or a set operation)")
}

/// What to do instead of a statement that carries writes within a query (see
/// [`statement_name`]): send them on their own. `None` when it carries none.
pub(crate) fn nested_writes_advice(statement: &PreparedStatement) -> Option<String> {
    let writes = statement.nested_writes();
    if writes.is_empty() {
        return None;
    }
    let writes = and_list(writes.into_iter().map(|kind| format!("the {}", verb(kind))));
    Some(format!(
        "no tool runs a write within a query; send {writes} as a statement of its own, \
         without WITH, to run_mutation_query"
    ))
}

/// Names for messages joined with "and": "a DELETE", "an INSERT and an UPDATE".
pub(crate) fn and_list(names: impl IntoIterator<Item = String>) -> String {
    let names: Vec<String> = names.into_iter().collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The SQL verb of a statement kind, as Cedar policies see it (`resource.verb`).
pub(crate) fn verb(kind: crate::engine::StatementKind) -> &'static str {
    use crate::engine::StatementKind;
    match kind {
        StatementKind::Select => "SELECT",
        StatementKind::Metadata => "SHOW",
        StatementKind::Insert => "INSERT",
        StatementKind::Update => "UPDATE",
        StatementKind::Replace => "REPLACE",
        StatementKind::Delete => "DELETE",
        StatementKind::Exec => "EXEC",
        StatementKind::RegistryList => "REGISTRY LIST",
        StatementKind::RegistryPull => "REGISTRY PULL",
    }
}

/// The row cap of a call: the model's `row_limit` when positive, never above the server's
/// (0 or absent: the server's). A negative `row_limit` does not parse (invalid arguments).
pub(crate) fn row_cap(requested: Option<u64>, server_max: usize) -> usize {
    match requested {
        Some(n) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX).min(server_max),
        _ => server_max,
    }
}

/// Output schema of row results.
#[derive(JsonSchema)]
#[allow(dead_code)] // schema only
pub(crate) struct RowsOutput {
    /// One object per row, keyed by column name. Empty when nothing matched.
    rows: Vec<Map<String, Value>>,
    /// Present and true when rows were cut at the row limit.
    truncated: Option<bool>,
    /// How many rows there were before the cut.
    rows_seen: Option<u64>,
    /// What the caller should know about completeness (e.g. a page limit was reached).
    warnings: Option<Vec<String>>,
    /// Present and true when the result came from the tenant's result cache
    /// (`tenants[].cache`) instead of the upstream.
    cached: Option<bool>,
    /// With `cached`: how old the cached result is, in seconds.
    cache_age_seconds: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_agree_with_what_the_gate_lets_each_tool_do() {
        for spec in CATALOGUE {
            let reads_only = match spec.effect {
                Effect::Read => true,
                Effect::Sql(classes) => classes.iter().all(|c| *c == QueryClass::Select),
                Effect::RegistryInstall => false,
            };
            // reload_credentials changes querygate's own state (re-sourced files, dropped
            // tokens), so it is not annotated read-only, but it changes nothing upstream and
            // the gate treats it as a read, as StackQL does.
            let annotated = reads_only && spec.name != "reload_credentials";
            assert_eq!(spec.hints.read_only, annotated, "{}", spec.name);
            assert_eq!(
                spec.takes_sql,
                matches!(spec.effect, Effect::Sql(_))
                    || matches!(
                        spec.name,
                        "validate_select_query" | "validate_mutation_query"
                    ),
                "{}",
                spec.name
            );
        }
    }
    use crate::mcp::render::markdown;
    use serde_json::json;

    #[test]
    fn arguments_are_parsed_once_into_the_tools_input_and_errors_name_the_field() {
        let parse = |arguments: Value| {
            let arguments = arguments.as_object().cloned().unwrap_or_default();
            (query::RUN_SELECT_QUERY.parse)(&arguments)
        };
        let mut input = parse(json!({"sql": "SELECT 1", "row_limit": 5, "format": 7})).unwrap();
        assert_eq!(input.sql(), Some("SELECT 1"));
        assert_eq!(input.row_limit(), Some(5));
        assert_eq!(
            input.take_format(),
            Some(json!(7)),
            "the pipeline judges it"
        );
        for (arguments, message) in [
            (json!({"sql": 5}), "sql: expected a string, got 5"),
            (json!({"sql": null}), "sql: expected a string, got null"),
            (json!({"row_limit": 1}), "missing field `sql`"),
            (
                json!({"sql": "SELECT 1", "row_limit": -1}),
                "row_limit: must be a whole number ≥ 0, got -1",
            ),
            (
                json!({"sql": "SELECT 1", "row_limit": "ten"}),
                "row_limit: must be a whole number ≥ 0, got \"ten\"",
            ),
        ] {
            assert_eq!(parse(arguments).unwrap_err(), message);
        }
        let unknown = parse(json!({"sql": "SELECT 1", "sqll": 1})).unwrap_err();
        assert_eq!(
            unknown,
            "sqll: unknown field `sqll`, expected one of `sql`, `row_limit`, `format`, `source`"
        );
    }

    #[test]
    fn tables_render_from_the_row_objects_and_keep_repeated_columns() {
        let result = table_result(
            vec!["id".into(), "name".into()],
            vec![vec![json!(1), json!("a")]],
            2,
            vec![],
        );
        assert_eq!(
            result.structured,
            json!({"rows": [{"id": 1, "name": "a"}], "truncated": true, "rows_seen": 2})
        );
        assert_eq!(
            markdown(&result.view, &result.structured),
            "| id | name |\n|---|---|\n| 1 | a |\n\n**truncated:** 1 of 2 rows shown (row_limit or server.max_rows); the result is incomplete\n"
        );
        // `SELECT a.id, b.id`: the objects hold one `id`, the table shows both.
        let repeated = table_result(
            vec!["id".into(), "id".into()],
            vec![vec![json!(1), json!(2)]],
            1,
            vec![],
        );
        assert_eq!(
            markdown(&repeated.view, &repeated.structured),
            "| id | id |\n|---|---|\n| 1 | 2 |\n"
        );
    }
}
