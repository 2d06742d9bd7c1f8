//! The metadata tools: `list_providers`, `list_services`, `list_resources`, `list_methods`,
//! `describe_resource` and `describe_method`. Names are checked as identifiers and handed to
//! the engine's typed discovery calls; they never become SQL text.

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{
    Effect, Hints, Invocation, NoArguments, RowsOutput, ToolError, ToolFuture, ToolInput,
    ToolResult, ToolSpec, input_schema, parse, schema,
};
use crate::code::Code;
use crate::engine::{ColumnInfo, ParamInfo};
use crate::mcp::render::View;

/// `list_providers`.
pub(crate) const LIST_PROVIDERS: ToolSpec = ToolSpec {
    name: "list_providers",
    title: "List installed providers",
    hints: Hints::READ_LOCAL,
    effect: Effect::Read,
    takes_sql: false,
    takes_format: false,
    input_schema: input_schema::<NoArguments>,
    output_schema: schema::<RowsOutput>,
    parse: parse::<NoArguments>,
    run: list_providers,
};

/// `list_services`.
pub(crate) const LIST_SERVICES: ToolSpec = hierarchy_tool::<ProviderInput>(
    "list_services",
    "List a provider's services",
    schema::<RowsOutput>,
    list_services,
);

/// `list_resources`.
pub(crate) const LIST_RESOURCES: ToolSpec = hierarchy_tool::<ServiceInput>(
    "list_resources",
    "List a service's resources",
    schema::<RowsOutput>,
    list_resources,
);

/// `list_methods`.
pub(crate) const LIST_METHODS: ToolSpec = hierarchy_tool::<ResourceInput>(
    "list_methods",
    "List a resource's methods",
    schema::<RowsOutput>,
    list_methods,
);

/// `describe_resource`.
pub(crate) const DESCRIBE_RESOURCE: ToolSpec = hierarchy_tool::<ResourceInput>(
    "describe_resource",
    "Describe a resource's columns",
    schema::<RowsOutput>,
    describe_resource,
);

/// `describe_method`.
pub(crate) const DESCRIBE_METHOD: ToolSpec = hierarchy_tool::<MethodInput>(
    "describe_method",
    "Describe a method's contract",
    schema::<MethodOutput>,
    describe_method,
);

/// The spec of a metadata tool taking the input `T`: it reads provider documents only and
/// takes the `format` argument.
const fn hierarchy_tool<T: Hierarchy>(
    name: &'static str,
    title: &'static str,
    output_schema: fn() -> JsonObject,
    run: fn(Invocation) -> ToolFuture,
) -> ToolSpec {
    ToolSpec {
        name,
        title,
        hints: Hints::READ_LOCAL,
        effect: Effect::Read,
        takes_sql: false,
        takes_format: true,
        input_schema: input_schema::<T>,
        output_schema,
        parse: parse::<T>,
        run,
    }
}

/// A provider.
#[derive(Deserialize, JsonSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderInput {
    /// Provider SQL name, e.g. `github` or `google`.
    #[serde(default)]
    provider: Option<String>,
    /// Most rows to return; 0 or absent: the server's limit.
    #[serde(default)]
    row_limit: Option<u64>,
    /// Text content render format: markdown (default) or json.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    format: Option<Value>,
}

/// A provider's service.
#[derive(Deserialize, JsonSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServiceInput {
    /// Provider SQL name, e.g. `github` or `google`.
    #[serde(default)]
    provider: Option<String>,
    /// Service name within the provider, e.g. `repos`.
    #[serde(default)]
    service: Option<String>,
    /// Most rows to return; 0 or absent: the server's limit.
    #[serde(default)]
    row_limit: Option<u64>,
    /// Text content render format: markdown (default) or json.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    format: Option<Value>,
}

/// A resource.
#[derive(Deserialize, JsonSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResourceInput {
    /// Provider SQL name, e.g. `github` or `google`.
    #[serde(default)]
    provider: Option<String>,
    /// Service name within the provider, e.g. `repos`.
    #[serde(default)]
    service: Option<String>,
    /// Resource name within the service, e.g. `repos` or `projects.locations`.
    #[serde(default)]
    resource: Option<String>,
    /// Most rows to return; 0 or absent: the server's limit.
    #[serde(default)]
    row_limit: Option<u64>,
    /// Text content render format: markdown (default) or json.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    format: Option<Value>,
}

/// A resource's method.
#[derive(Deserialize, JsonSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct MethodInput {
    /// Provider SQL name, e.g. `github` or `google`.
    #[serde(default)]
    provider: Option<String>,
    /// Service name within the provider, e.g. `repos`.
    #[serde(default)]
    service: Option<String>,
    /// Resource name within the service, e.g. `repos` or `projects.locations`.
    #[serde(default)]
    resource: Option<String>,
    /// Method name within the resource, e.g. `list_for_org`.
    #[serde(default)]
    method: Option<String>,
    /// Most rows to return; 0 or absent: the server's limit.
    #[serde(default)]
    row_limit: Option<u64>,
    /// Text content render format: markdown (default) or json.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    format: Option<Value>,
}

/// The names a metadata tool's input gives, in hierarchy order, and its row limit.
trait Hierarchy: ToolInput + serde::de::DeserializeOwned + JsonSchema {
    /// Provider, service, resource and method, as far as this input goes.
    fn into_names(self) -> (Vec<Option<String>>, Option<u64>);
}

impl ToolInput for ProviderInput {
    fn take_format(&mut self) -> Option<Value> {
        self.format.take()
    }

    fn row_limit(&self) -> Option<u64> {
        self.row_limit
    }
}

impl Hierarchy for ProviderInput {
    fn into_names(self) -> (Vec<Option<String>>, Option<u64>) {
        (vec![self.provider], self.row_limit)
    }
}

impl ToolInput for ServiceInput {
    fn take_format(&mut self) -> Option<Value> {
        self.format.take()
    }

    fn row_limit(&self) -> Option<u64> {
        self.row_limit
    }
}

impl Hierarchy for ServiceInput {
    fn into_names(self) -> (Vec<Option<String>>, Option<u64>) {
        (vec![self.provider, self.service], self.row_limit)
    }
}

impl ToolInput for ResourceInput {
    fn take_format(&mut self) -> Option<Value> {
        self.format.take()
    }

    fn row_limit(&self) -> Option<u64> {
        self.row_limit
    }
}

impl Hierarchy for ResourceInput {
    fn into_names(self) -> (Vec<Option<String>>, Option<u64>) {
        (
            vec![self.provider, self.service, self.resource],
            self.row_limit,
        )
    }
}

impl ToolInput for MethodInput {
    fn take_format(&mut self) -> Option<Value> {
        self.format.take()
    }

    fn row_limit(&self) -> Option<u64> {
        self.row_limit
    }
}

impl Hierarchy for MethodInput {
    fn into_names(self) -> (Vec<Option<String>>, Option<u64>) {
        (
            vec![self.provider, self.service, self.resource, self.method],
            self.row_limit,
        )
    }
}

/// Output of `describe_method`.
#[derive(JsonSchema)]
#[allow(dead_code)] // schema only
pub(crate) struct MethodOutput {
    /// `provider.service.resource`.
    resource: String,
    /// The method's name.
    method: String,
    /// The SQL verb it is bound to (`select`, `insert`, …); null when only EXEC reaches it.
    sql_verb: Option<String>,
    /// HTTP method.
    http_method: String,
    /// Path template.
    path: String,
    /// Summary from the document.
    summary: Option<String>,
    /// Description from the document.
    description: Option<String>,
    /// JSON schema of the request body (fields go in INSERT columns or `@@json`).
    request_body: Option<Value>,
    /// Key of the response holding the rows.
    object_key: Option<String>,
    /// Parameters (`param_type` input_required or input_optional) then result columns
    /// (`param_type` output): `{name, type, param_type, location, default, allowed_values,
    /// description}`.
    rows: Vec<Map<String, Value>>,
}

/// The longest name accepted.
const MAX_NAME: usize = 256;

/// Checks a provider, service, resource or method name: letters, digits, `_`, `-` and `.`
/// (resource names such as `projects.aggregated.usableSubnetworks` have dots).
pub(crate) fn identifier(field: &str, value: &str) -> Result<(), ToolError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_NAME
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        return Ok(());
    }
    let shown: String = value.chars().take(64).collect();
    Err(ToolError::failed(
        Code::ArgumentsInvalid,
        format!("invalid {field} {shown:?}: names contain only letters, digits, '_', '-' and '.'"),
    ))
}

/// Parses a metadata tool's input `T`, requiring every name it has (`missing` is the error
/// when one is absent) and checking each as an identifier.
fn hierarchy<T: Hierarchy>(
    invocation: &mut Invocation,
    missing: &str,
) -> Result<(Vec<String>, Option<u64>), ToolError> {
    let input: T = invocation.input()?;
    let (fields, row_limit) = input.into_names();
    let mut names = Vec::with_capacity(fields.len());
    for (field, value) in ["provider", "service", "resource", "method"]
        .into_iter()
        .zip(fields)
    {
        let Some(value) = value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) else {
            return Err(ToolError::failed(Code::ArgumentsInvalid, missing));
        };
        identifier(field, &value)?;
        names.push(value);
    }
    Ok((names, row_limit))
}

fn limit(invocation: &Invocation, requested: Option<u64>) -> usize {
    super::row_cap(requested, invocation.services.max_rows)
}

/// A table result: `{rows: [{column: value}], truncated?, rows_seen?}`.
fn table(columns: &[&str], mut rows: Vec<Vec<Value>>, limit: usize) -> ToolResult {
    let seen = rows.len();
    rows.truncate(limit);
    let columns = columns.iter().map(|c| (*c).to_owned()).collect();
    super::table_result(columns, rows, seen, Vec::new())
}

fn text(value: Option<String>) -> Value {
    value.map_or(Value::Null, Value::String)
}

fn list_providers(invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let services = &invocation.services;
        let providers = services.engine.providers(&invocation.cx).await?;
        let rows = providers
            .into_iter()
            .map(|p| {
                vec![
                    Value::String(p.name),
                    Value::String(p.version),
                    Value::String(p.versions.join(", ")),
                ]
            })
            .collect::<Vec<_>>();
        let columns = ["name", "version", "versions"];
        if rows.is_empty() {
            // A new installation: say how to get a provider.
            let columns = columns.iter().map(|c| (*c).to_owned()).collect();
            return Ok(super::table_result(
                columns,
                rows,
                0,
                vec![NO_PROVIDERS.to_owned()],
            ));
        }
        Ok(table(&columns, rows, services.max_rows))
    })
}

/// What `list_providers` says when nothing is installed.
const NO_PROVIDERS: &str = "no provider is installed (or allowed for this tenant): list_registry shows what the registry offers and pull_provider installs one";

fn list_services(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let (names, row_limit) =
            hierarchy::<ProviderInput>(&mut invocation, "provider not specified")?;
        let services = invocation
            .services
            .engine
            .services(&invocation.cx, &names[0])
            .await?;
        let rows = services
            .into_iter()
            .map(|s| vec![Value::String(s.id), Value::String(s.name), text(s.title)])
            .collect();
        Ok(table(
            &["id", "name", "title"],
            rows,
            limit(&invocation, row_limit),
        ))
    })
}

fn list_resources(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let (names, row_limit) =
            hierarchy::<ServiceInput>(&mut invocation, "provider and / or service not specified")?;
        let resources = invocation
            .services
            .engine
            .resources(&invocation.cx, &names[0], &names[1])
            .await?;
        let rows = resources
            .into_iter()
            .map(|r| vec![Value::String(r.name), Value::String(r.id)])
            .collect();
        Ok(table(&["name", "id"], rows, limit(&invocation, row_limit)))
    })
}

const RESOURCE_MISSING: &str = "provider, service and / or resource not specified";

fn list_methods(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let (names, row_limit) = hierarchy::<ResourceInput>(&mut invocation, RESOURCE_MISSING)?;
        let methods = invocation
            .services
            .engine
            .methods(&invocation.cx, &names[0], &names[1], &names[2])
            .await?;
        let rows = methods
            .into_iter()
            .map(|m| {
                vec![
                    Value::String(m.name),
                    Value::String(m.required_params.join(", ")),
                    Value::String(
                        m.sql_verb
                            .map_or("EXEC".to_owned(), |v| v.as_str().to_ascii_uppercase()),
                    ),
                ]
            })
            .collect();
        Ok(table(
            &["MethodName", "RequiredParams", "SQLVerb"],
            rows,
            limit(&invocation, row_limit),
        ))
    })
}

fn column_record(column: ColumnInfo) -> Vec<(String, Value)> {
    vec![
        ("name".to_owned(), Value::String(column.name)),
        ("type".to_owned(), Value::String(column.type_name)),
        ("description".to_owned(), text(column.description)),
    ]
}

fn describe_resource(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let (names, row_limit) = hierarchy::<ResourceInput>(&mut invocation, RESOURCE_MISSING)?;
        let columns = invocation
            .services
            .engine
            .columns(&invocation.cx, &names[0], &names[1], &names[2])
            .await?;
        let cap = limit(&invocation, row_limit);
        let seen = columns.len();
        let records: Vec<Vec<(String, Value)>> =
            columns.into_iter().take(cap).map(column_record).collect();
        let mut structured = Map::new();
        insert_rows(&mut structured, &records, seen);
        Ok(ToolResult {
            upstream_status: None,
            typed: None,
            structured: Value::Object(structured),
            view: View::Records {
                title: "Resource".to_owned(),
                records,
            },
        })
    })
}

/// Adds `rows` (one object per record) to `structured`, and `truncated` and `rows_seen`
/// when `seen` records were found but fewer are given.
fn insert_rows(structured: &mut Map<String, Value>, records: &[Vec<(String, Value)>], seen: usize) {
    let rows = records
        .iter()
        .map(|r| Value::Object(r.iter().cloned().collect()))
        .collect();
    structured.insert("rows".into(), Value::Array(rows));
    if seen > records.len() {
        structured.insert("truncated".into(), Value::Bool(true));
        structured.insert("rows_seen".into(), Value::from(seen));
    }
}

fn param_record(param: ParamInfo) -> Vec<(String, Value)> {
    vec![
        ("name".to_owned(), Value::String(param.name)),
        ("type".to_owned(), text(param.type_name)),
        (
            "param_type".to_owned(),
            Value::from(if param.required {
                "input_required"
            } else {
                "input_optional"
            }),
        ),
        ("location".to_owned(), Value::String(param.location)),
        ("default".to_owned(), text(param.default)),
        (
            "allowed_values".to_owned(),
            if param.allowed_values.is_empty() {
                Value::Null
            } else {
                Value::from(param.allowed_values)
            },
        ),
        ("description".to_owned(), text(param.description)),
    ]
}

fn output_record(column: ColumnInfo) -> Vec<(String, Value)> {
    vec![
        ("name".to_owned(), Value::String(column.name)),
        ("type".to_owned(), Value::String(column.type_name)),
        ("param_type".to_owned(), Value::from("output")),
        ("location".to_owned(), Value::Null),
        ("default".to_owned(), Value::Null),
        ("allowed_values".to_owned(), Value::Null),
        ("description".to_owned(), text(column.description)),
    ]
}

fn describe_method(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let (names, row_limit) = hierarchy::<MethodInput>(
            &mut invocation,
            "provider, service, resource and / or method not specified",
        )?;
        let contract = invocation
            .services
            .engine
            .method_contract(&invocation.cx, &names[0], &names[1], &names[2], &names[3])
            .await?;
        let cap = limit(&invocation, row_limit);
        let summary = vec![
            ("resource".to_owned(), Value::String(contract.resource)),
            ("method".to_owned(), Value::String(contract.name)),
            (
                "sql_verb".to_owned(),
                contract
                    .sql_verb
                    .map_or(Value::Null, |v| Value::from(v.as_str())),
            ),
            (
                "http_method".to_owned(),
                Value::String(contract.http_method),
            ),
            ("path".to_owned(), Value::String(contract.path)),
            ("summary".to_owned(), text(contract.summary)),
            ("description".to_owned(), text(contract.description)),
            (
                "request_body".to_owned(),
                contract.request_body.unwrap_or(Value::Null),
            ),
            ("object_key".to_owned(), text(contract.object_key)),
        ];
        let rows: Vec<Vec<(String, Value)>> = contract
            .params
            .into_iter()
            .map(param_record)
            .chain(contract.columns.into_iter().map(output_record))
            .collect();
        let seen = rows.len();
        let rows: Vec<Vec<(String, Value)>> = rows.into_iter().take(cap).collect();
        let mut structured: Map<String, Value> = summary.iter().cloned().collect();
        insert_rows(&mut structured, &rows, seen);
        let mut records = vec![summary];
        records.extend(rows);
        Ok(ToolResult {
            upstream_status: None,
            typed: None,
            structured: Value::Object(structured),
            view: View::Records {
                title: "Method".to_owned(),
                records,
            },
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_allow_stackql_names_only() {
        for good in [
            "google",
            "googleapis.com",
            "projects.aggregated.usableSubnetworks",
            "list_for_org",
            "azure_extras",
            "v1-beta",
        ] {
            assert!(identifier("resource", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "testapi; DROP",
            "a b",
            "a'b",
            "a\"b",
            "a/b",
            "a\\b",
            "x\n",
            "é",
        ] {
            assert!(identifier("provider", bad).is_err(), "{bad:?}");
        }
        assert!(identifier("provider", &"a".repeat(MAX_NAME + 1)).is_err());
    }

    #[test]
    fn rows_say_when_records_were_cut() {
        let records = vec![vec![("name".to_owned(), Value::from("id"))]];
        let mut whole = Map::new();
        insert_rows(&mut whole, &records, 1);
        assert_eq!(
            Value::Object(whole),
            serde_json::json!({"rows": [{"name": "id"}]})
        );

        let mut cut = Map::new();
        cut.insert("method".into(), Value::from("get"));
        insert_rows(&mut cut, &records, 3);
        assert_eq!(
            serde_json::to_string(&cut).unwrap(),
            r#"{"method":"get","rows":[{"name":"id"}],"truncated":true,"rows_seen":3}"#
        );
    }
}
