//! `query_library_search` and `query_library_get`: find a curated query by intent, then get
//! its template or, with values, validated SQL and the tool that runs it. Neither needs
//! credentials or reaches a provider.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{
    Effect, Hints, Invocation, ToolError, ToolFuture, ToolInput, ToolResult, ToolSpec,
    input_schema, parse, schema,
};
use crate::code::Code;
use crate::config::Mode;
use crate::mcp::library::model::{Cost, OutputColumn, Param, QueryDoc, valid_id};
use crate::mcp::library::search::{self, Query};
use crate::mcp::library::{LibraryError, Source, render};
use crate::mcp::render::{View, cell, markdown};

/// `query_library_search`.
pub(crate) const QUERY_LIBRARY_SEARCH: ToolSpec = ToolSpec {
    name: "query_library_search",
    title: "Search the query library",
    hints: Hints::READ_LOCAL,
    effect: Effect::Read,
    takes_sql: false,
    takes_format: true,
    input_schema: input_schema::<SearchInput>,
    output_schema: schema::<SearchOutput>,
    parse: parse::<SearchInput>,
    run: run_search,
};

/// `query_library_get`.
pub(crate) const QUERY_LIBRARY_GET: ToolSpec = ToolSpec {
    name: "query_library_get",
    title: "Get a query library entry",
    hints: Hints::READ_LOCAL,
    effect: Effect::Read,
    takes_sql: false,
    takes_format: true,
    input_schema: input_schema::<GetInput>,
    output_schema: schema::<GetOutput>,
    parse: parse::<GetInput>,
    run: run_get,
};

/// What a miss says to do instead.
pub(crate) const GUIDANCE: &str = "No library entry matched. Compose the query yourself: follow the discovery workflow of the server instructions (also the querygate://docs/instructions resource) to find the provider.service.resource, its columns and its required parameters, put those parameters in WHERE as equalities, and run it with run_select_query.";

/// Input of `query_library_search`.
#[derive(Deserialize, JsonSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchInput {
    /// What the user wants, in plain words, e.g. "repositories of a github org".
    intent: String,
    /// Only entries for this provider (e.g. github, google).
    #[serde(default)]
    provider: Option<String>,
    /// Only entries for this service (e.g. repos, compute).
    #[serde(default)]
    service: Option<String>,
    /// Only entries carrying every one of these tags.
    #[serde(default)]
    tags: Option<Vec<String>>,
    /// Include writes and EXEC operations (never offered to read-only tenants).
    #[serde(default)]
    include_mutations: Option<bool>,
    /// Most hits to return: default 5, at most 20.
    #[serde(default)]
    limit: Option<i64>,
    /// Text content render format: markdown (default) or json.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    format: Option<Value>,
}

impl ToolInput for SearchInput {
    fn take_format(&mut self) -> Option<Value> {
        self.format.take()
    }
}

/// One search hit.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Hit {
    /// Pass to query_library_get.
    id: String,
    /// What the query answers.
    title: String,
    /// More detail.
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// Providers it queries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    providers: Vec<String>,
    /// Services it queries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    services: Vec<String>,
    /// Whether it writes (INSERT/UPDATE/DELETE/EXEC).
    mutation: bool,
    /// Values query_library_get needs (query_library_get reports any the index omits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    required_params: Vec<String>,
    /// Relevance; higher is better.
    score: f64,
}

/// Output of `query_library_search`.
#[derive(Serialize, JsonSchema)]
pub(crate) struct SearchOutput {
    /// Ranked hits, best first; always an array.
    hits: Vec<Hit>,
    /// True when nothing matched well enough: follow `guidance`.
    miss: bool,
    /// What to do on a miss.
    #[serde(skip_serializing_if = "Option::is_none")]
    guidance: Option<String>,
    /// primary (server.query_library_url) or snapshot (embedded).
    source_tier: String,
    /// The index that answered.
    source_url: String,
    /// Present and true when the configured remote could not be read and an older copy
    /// answered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    stale: bool,
}

/// Input of `query_library_get`.
#[derive(Deserialize, JsonSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetInput {
    /// A query id from query_library_search, e.g. github/repos/repos-by-org.
    id: String,
    /// Values for the template's params, one `{name, value}` per param, e.g.
    /// `[{"name": "org", "value": "acme"}]`. Absent: the raw template, params and notes.
    /// Present: validated values and the rendered SQL.
    #[serde(default, deserialize_with = "param_values")]
    #[schemars(with = "Option<Vec<ParamValue>>")]
    params: Option<Map<String, Value>>,
    /// Text content render format: markdown (default) or json.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    format: Option<Value>,
}

impl ToolInput for GetInput {
    fn take_format(&mut self) -> Option<Value> {
        self.format.take()
    }
}

/// One value of `query_library_get`'s `params`.
#[derive(JsonSchema)]
#[allow(dead_code)] // schema only
struct ParamValue {
    /// The param's name, e.g. `org`.
    name: String,
    /// Its value.
    #[schemars(schema_with = "scalar_schema")]
    value: Value,
}

/// A string, number or boolean.
fn scalar_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": ["string", "number", "boolean"]})
}

/// `params` as a list of `{name, value}` (as the schema says; a strict schema has no open
/// objects) or as an object of values by name (as earlier versions took it), into values by
/// name. A name given twice is refused.
fn param_values<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Map<String, Value>>, D::Error> {
    use serde::de::Error as _;
    let items = match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(by_name)) => return Ok(Some(by_name)),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(D::Error::custom(format!(
                "expected a list of {{\"name\", \"value\"}} objects, got {other}"
            )));
        }
    };
    let mut by_name = Map::new();
    for item in items {
        let Value::Object(mut item) = item else {
            return Err(D::Error::custom(format!(
                "expected a {{\"name\", \"value\"}} object, got {item}"
            )));
        };
        let (Some(Value::String(name)), Some(value), true) =
            (item.remove("name"), item.remove("value"), item.is_empty())
        else {
            return Err(D::Error::custom(
                "each param is an object of exactly \"name\" (a string) and \"value\"",
            ));
        };
        if by_name.insert(name.clone(), value).is_some() {
            return Err(D::Error::custom(format!("param \"{name}\" is given twice")));
        }
    }
    Ok(Some(by_name))
}

/// Output of `query_library_get`.
#[derive(Serialize, JsonSchema)]
pub(crate) struct GetOutput {
    /// The query id.
    id: String,
    /// What the query answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    /// More detail.
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// Whether it writes.
    mutation: bool,
    /// select, mutation or lifecycle.
    verb: String,
    /// How expensive it is to run.
    #[serde(skip_serializing_if = "Option::is_none")]
    cost: Option<Cost>,
    /// Columns it returns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    outputs: Vec<OutputColumn>,
    /// Environment variables the provider's credentials come from (names only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    auth: Vec<String>,
    /// Upstream permissions or scopes it needs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    permissions: Vec<String>,
    /// Related query ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    related: Vec<String>,
    /// The tool that runs the SQL: run_select_query, run_mutation_query or
    /// run_lifecycle_operation.
    next_tool: String,
    /// The raw template with {{param}} placeholders (without params, or when invalid).
    #[serde(skip_serializing_if = "Option::is_none")]
    template: Option<String>,
    /// How to use or adapt it.
    #[serde(skip_serializing_if = "Option::is_none")]
    notes: Option<String>,
    /// Upstream documentation.
    #[serde(skip_serializing_if = "Option::is_none")]
    doc_url: Option<String>,
    /// Declared params.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    params: Vec<Param>,
    /// Whether params were supplied and rendering was attempted.
    rendered: bool,
    /// Whether the values passed every check (then `sql` is set).
    valid: bool,
    /// The SQL to run, with values quoted; only when rendered and valid.
    #[serde(skip_serializing_if = "Option::is_none")]
    sql: Option<String>,
    /// Required params that were not supplied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    missing_params: Vec<Param>,
    /// Supplied names that are not params of this query.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    unknown_params: Vec<String>,
    /// Everything wrong with the values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    errors: Vec<String>,
    /// primary or snapshot.
    source_tier: String,
    /// The document that answered.
    source_url: String,
    /// Present and true when the configured remote could not be read and an older copy
    /// answered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    stale: bool,
}

fn run_search(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let input: SearchInput = invocation.input()?;
        if input.intent.trim().is_empty() {
            return Err(ToolError::failed(
                Code::ArgumentsInvalid,
                "intent is empty: say in a few words what the user wants to know",
            ));
        }
        let (index, source) = invocation.services.library.index().await;
        let tags = input.tags.unwrap_or_default();
        let query = Query {
            intent: &input.intent,
            provider: input.provider.as_deref(),
            service: input.service.as_deref(),
            tags: &tags,
            mutations: input.include_mutations.unwrap_or(false)
                && invocation.mode != Mode::ReadOnly,
            limit: input.limit,
        };
        let (ranked, miss) = search::search(&index.entries, &query);
        let hits: Vec<Hit> = ranked
            .into_iter()
            .map(|r| Hit {
                id: r.entry.id.clone(),
                title: r.entry.title.clone(),
                description: r.entry.description.clone(),
                providers: r.entry.providers.clone(),
                services: r.entry.services.clone(),
                mutation: r.entry.mutation,
                required_params: r.entry.required_params.clone(),
                score: (r.score * 10.0).round() / 10.0,
            })
            .collect();
        let output = SearchOutput {
            hits,
            miss,
            guidance: miss.then(|| GUIDANCE.to_owned()),
            source_tier: source.tier.as_str().to_owned(),
            source_url: source.url.clone(),
            stale: source.stale,
        };
        let text = search_markdown(&output);
        Ok(ToolResult {
            upstream_status: None,
            typed: None,
            structured: serde_json::to_value(&output).unwrap_or(Value::Null),
            view: View::Markdown(text),
        })
    })
}

fn search_markdown(output: &SearchOutput) -> String {
    let columns = ["id", "mutation", "required_params", "score", "title"]
        .map(str::to_owned)
        .to_vec();
    let rows = output
        .hits
        .iter()
        .map(|h| {
            vec![
                Value::from(h.id.clone()),
                Value::from(h.mutation),
                Value::from(h.required_params.join(", ")),
                Value::from(format!("{:.1}", h.score)),
                Value::from(h.title.clone()),
            ]
        })
        .collect();
    let mut text = markdown(&View::Table { columns, rows }, &Value::Null);
    text = text.trim_end().to_owned();
    text.push_str(&format!("\n\nSource: {}", output.source_url));
    if output.stale {
        text.push_str(" (stale: the configured library could not be read)");
    }
    if let Some(guidance) = &output.guidance {
        text.push_str("\n\n");
        text.push_str(guidance);
    }
    text
}

fn next_tool(doc: &QueryDoc) -> (&'static str, &'static str) {
    match doc.verb.as_deref().map(str::to_ascii_lowercase).as_deref() {
        Some("select") => ("select", "run_select_query"),
        Some("lifecycle" | "exec") => ("lifecycle", "run_lifecycle_operation"),
        Some("mutation") => ("mutation", "run_mutation_query"),
        _ if doc.mutation => ("mutation", "run_mutation_query"),
        _ => ("select", "run_select_query"),
    }
}

fn run_get(mut invocation: Invocation) -> ToolFuture {
    Box::pin(async move {
        let input: GetInput = invocation.input()?;
        let id = input.id.trim();
        if !valid_id(id) {
            return Err(ToolError::failed(
                Code::ArgumentsInvalid,
                format!("invalid query id \"{}\"", input.id),
            ));
        }
        let (doc, source) = match invocation.services.library.document(id).await {
            Ok(found) => found,
            Err(LibraryError::Unknown(id)) => {
                return Err(ToolError::failed(
                    Code::NotFound,
                    format!(
                        "unknown query id \"{id}\"; use query_library_search to find valid ids"
                    ),
                ));
            }
            Err(LibraryError::Unavailable(message)) => {
                return Err(ToolError::failed(Code::RegistryUnavailable, message));
            }
        };
        let output = get_output(&doc, &source, input.params.as_ref());
        let text = get_markdown(&output);
        Ok(ToolResult {
            upstream_status: None,
            typed: None,
            structured: serde_json::to_value(&output).unwrap_or(Value::Null),
            view: View::Markdown(text),
        })
    })
}

fn get_output(doc: &QueryDoc, source: &Source, params: Option<&Map<String, Value>>) -> GetOutput {
    let (verb, tool) = next_tool(doc);
    let mut output = GetOutput {
        id: doc.id.clone(),
        title: doc.title.clone(),
        description: doc.description.clone(),
        mutation: doc.mutation,
        verb: verb.to_owned(),
        cost: doc.cost.clone(),
        outputs: doc.outputs.clone(),
        auth: doc.auth.clone(),
        permissions: doc.permissions.clone(),
        related: doc.related.clone(),
        next_tool: tool.to_owned(),
        template: Some(doc.template.clone()),
        notes: doc.notes.clone(),
        doc_url: doc.doc_url.clone(),
        params: doc.params.clone(),
        rendered: false,
        valid: false,
        sql: None,
        missing_params: Vec::new(),
        unknown_params: Vec::new(),
        errors: Vec::new(),
        source_tier: source.tier.as_str().to_owned(),
        source_url: source.url.clone(),
        stale: source.stale,
    };
    if let Some(values) = params {
        let rendered = render::render(&doc.template, &doc.params, values);
        output.rendered = true;
        output.valid = rendered.sql.is_some();
        if output.valid {
            output.template = None;
        }
        output.sql = rendered.sql;
        output.missing_params = rendered.missing;
        output.unknown_params = rendered.unknown;
        output.errors = rendered.errors;
    }
    output
}

fn get_markdown(output: &GetOutput) -> String {
    let mut text = String::from("# Query Library Entry\n\n");
    let mut line = |key: &str, value: String| {
        text.push_str(&format!("{key}: {}\n", value.replace(['\r', '\n'], " ")));
    };
    line("id", output.id.clone());
    if let Some(title) = &output.title {
        line("title", title.clone());
    }
    line("mutation", output.mutation.to_string());
    line("next_tool", output.next_tool.clone());
    line("rendered", output.rendered.to_string());
    line("valid", output.valid.to_string());
    if !output.params.is_empty() {
        let params: Vec<String> = output
            .params
            .iter()
            .map(|p| {
                let mut s = format!("{} ({}", p.name, p.kind);
                if p.required && p.default.is_none() {
                    s.push_str(", required");
                }
                if let Some(default) = &p.default {
                    s.push_str(&format!(", default {}", cell(default)));
                }
                if let Some(choices) = &p.choices {
                    s.push_str(&format!(", one of {}", choices.join("|")));
                }
                s.push(')');
                s
            })
            .collect();
        line("params", params.join(", "));
    }
    if !output.errors.is_empty() {
        line("errors", output.errors.join("; "));
    }
    if let Some(notes) = &output.notes {
        line("notes", notes.clone());
    }
    if let Some(doc_url) = &output.doc_url {
        line("doc_url", doc_url.clone());
    }
    let mut source = output.source_url.clone();
    if output.stale {
        source.push_str(" (stale: the configured library could not be read)");
    }
    line("source", source);
    if let Some(sql) = &output.sql {
        text.push_str(&format!("\nsql:\n\n```sql\n{}\n```\n", sql.trim()));
    } else if let Some(template) = &output.template {
        text.push_str(&format!(
            "\ntemplate:\n\n```sql\n{}\n```\n",
            template.trim()
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::library::Tier;

    fn doc() -> QueryDoc {
        serde_json::from_value(serde_json::json!({
            "id": "github/repos/repos-by-org",
            "title": "Repositories of an organization",
            "mutation": false,
            "params": [{"name": "org", "type": "string", "required": true}],
            "template": "SELECT name FROM github.repos.repos WHERE org = {{org}}"
        }))
        .unwrap()
    }

    #[test]
    fn get_renders_or_teaches() {
        let source = Source {
            tier: Tier::Snapshot,
            url: "embedded://content/library/queries/github/repos/repos-by-org.json".into(),
            stale: false,
        };
        let teaching = get_output(&doc(), &source, None);
        assert!(!teaching.rendered && !teaching.valid);
        assert!(teaching.template.as_deref().unwrap().contains("{{org}}"));
        assert_eq!(teaching.next_tool, "run_select_query");

        let mut values = Map::new();
        values.insert("org".into(), Value::from("it's"));
        let rendered = get_output(&doc(), &source, Some(&values));
        assert!(rendered.valid);
        assert_eq!(
            rendered.sql.as_deref(),
            Some("SELECT name FROM github.repos.repos WHERE org = 'it''s'")
        );
        assert!(rendered.template.is_none());
        let text = get_markdown(&rendered);
        assert!(
            text.starts_with("# Query Library Entry\n\nid: github/repos/repos-by-org\n"),
            "{text}"
        );
        assert!(
            text.contains("```sql\nSELECT name FROM github.repos.repos WHERE org = 'it''s'\n```"),
            "{text}"
        );

        let invalid = get_output(&doc(), &source, Some(&Map::new()));
        assert!(invalid.rendered && !invalid.valid);
        assert_eq!(invalid.errors, ["missing required params: org"]);
        assert_eq!(invalid.missing_params.len(), 1);
    }
}
