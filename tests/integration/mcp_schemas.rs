//! Every tool's structured output against the `outputSchema` it declares in `tools/list`,
//! checked with a JSON Schema validator (as the official SDKs and MCP Inspector check it), on
//! success and on the paths that report a failure.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::Reply;
use crate::registry::{good_items, tgz};

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
            json!({"id": "google/compute/instances-by-zone", "params": {"project": "my-project-123", "zone": "us-central1-a"}}),
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
        Reply::bytes("application/gzip", tgz(good_items("things"))),
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
