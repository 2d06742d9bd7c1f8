//! The metadata, validation, registry and credential tools, driven through rmcp's client
//! against an in-process server over the fixture registry (and, for pulls, a copy of it).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::{Mock, Reply};
use crate::support::{SECRET, compat_registry, context, engine};

fn structured(result: &rmcp::model::CallToolResult) -> Value {
    result
        .structured_content
        .clone()
        .expect("structured content")
}

fn rows(result: &rmcp::model::CallToolResult) -> Vec<Value> {
    structured(result)["rows"].as_array().cloned().unwrap()
}

fn is_error(result: &rmcp::model::CallToolResult) -> bool {
    result.is_error == Some(true)
}

/// Calls a tool expecting a tool error; returns its text.
async fn tool_error(client: &Client, tool: &str, arguments: Value) -> String {
    let result = call(client, tool, arguments.clone()).await;
    assert!(
        is_error(&result),
        "{tool} {arguments}: expected a tool error, got {}",
        text_of(&result)
    );
    error_message(&result)
}

#[tokio::test]
async fn tools_are_listed_in_order_with_annotations() {
    let server = start("read_only", "").await;
    let client = modern_client(&server.url).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    let expected = [
        "server_info",
        "list_providers",
        "list_services",
        "list_resources",
        "list_methods",
        "describe_resource",
        "describe_method",
        "validate_select_query",
        "validate_mutation_query",
        "run_select_query",
        "run_mutation_query",
        "run_lifecycle_operation",
        "list_registry",
        "pull_provider",
        "reload_credentials",
    ];
    let positions: Vec<usize> = expected
        .iter()
        .map(|n| {
            names
                .iter()
                .position(|m| m == n)
                .unwrap_or_else(|| panic!("{n} not listed: {names:?}"))
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{names:?}");
    let annotations = |name: &str| {
        tools
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.annotations.clone())
            .unwrap()
    };
    for name in &expected[1..8] {
        let a = annotations(name);
        assert_eq!(a.read_only_hint, Some(true), "{name}");
        assert_eq!(a.open_world_hint, Some(false), "{name}");
    }
    // It sends nothing, but reads the rows a write would act on.
    let plan = annotations("validate_mutation_query");
    assert_eq!(plan.read_only_hint, Some(true));
    assert_eq!(plan.open_world_hint, Some(true));
    let list = annotations("list_registry");
    assert_eq!(list.read_only_hint, Some(true));
    for name in ["pull_provider", "reload_credentials"] {
        let a = annotations(name);
        assert_eq!(a.read_only_hint, Some(false), "{name}");
        assert_eq!(a.destructive_hint, Some(false), "{name}");
        assert_eq!(a.idempotent_hint, Some(true), "{name}");
    }
    assert_eq!(annotations("pull_provider").open_world_hint, Some(true));
    assert_eq!(
        annotations("reload_credentials").open_world_hint,
        Some(false)
    );
    // No hierarchy field is schema-required; the tools name what is missing.
    let services = tools.iter().find(|t| t.name == "list_services").unwrap();
    assert!(services.input_schema.get("required").is_none());
    let providers = tools.iter().find(|t| t.name == "list_providers").unwrap();
    assert!(
        !providers
            .input_schema
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| p.contains_key("format")),
        "list_providers takes no format"
    );
}

#[tokio::test]
async fn discovery_tools_in_both_formats() {
    let server = start("read_only", "").await;
    let client = modern_client(&server.url).await;

    // list_providers reads no arguments and, as StackQL's, ignores one sent (StackQL's own
    // tests send this one): every provider is listed.
    let filtered = call(&client, "list_providers", json!({"provider": "google"})).await;
    assert!(!is_error(&filtered));
    assert!(text_of(&filtered).contains("| testapi | v1 | v1 |"));
    let info = call(&client, "server_info", json!({"sql": ""})).await;
    assert!(!is_error(&info));
    assert!(text_of(&info).contains("version: "));
    let providers = call(&client, "list_providers", json!({})).await;
    assert!(!is_error(&providers));
    let text = text_of(&providers);
    assert!(text.contains("| name | version | versions |"), "{text}");
    assert!(text.contains("| testapi | v1 | v1 |"), "{text}");
    assert_eq!(
        rows(&providers),
        [json!({"name": "testapi", "version": "v1", "versions": "v1"})]
    );

    let services = call(&client, "list_services", json!({"provider": "testapi"})).await;
    let names: Vec<Value> = rows(&services).iter().map(|r| r["name"].clone()).collect();
    assert!(names.contains(&json!("items")) && names.contains(&json!("widgets")));
    assert!(text_of(&services).contains("| items | Test items API |"));
    let json_text = text_of(
        &call(
            &client,
            "list_services",
            json!({"provider": "testapi", "format": "json"}),
        )
        .await,
    );
    let parsed: Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(parsed, structured(&services));

    let resources = call(
        &client,
        "list_resources",
        json!({"provider": "testapi", "service": "items"}),
    )
    .await;
    assert!(
        rows(&resources)
            .iter()
            .any(|r| r["name"] == "items" && r["id"] == "testapi.items.items"),
        "{}",
        text_of(&resources)
    );
    let limited = call(
        &client,
        "list_resources",
        json!({"provider": "testapi", "service": "items", "row_limit": 1}),
    )
    .await;
    assert_eq!(rows(&limited).len(), 1);
    assert_eq!(structured(&limited)["truncated"], true);

    let methods = call(
        &client,
        "list_methods",
        json!({"provider": "testapi", "service": "items", "resource": "items"}),
    )
    .await;
    let text = text_of(&methods);
    assert!(
        text.contains("| MethodName | RequiredParams | SQLVerb |"),
        "{text}"
    );
    let list = rows(&methods)
        .into_iter()
        .find(|r| r["MethodName"] == "list_items")
        .unwrap();
    assert_eq!(list["SQLVerb"], "SELECT");
    assert_eq!(list["RequiredParams"], "org");
    let get = rows(&methods)
        .into_iter()
        .find(|r| r["MethodName"] == "get_item")
        .unwrap();
    assert!(get["RequiredParams"].as_str().unwrap().contains("id"));

    let hierarchy = json!({"provider": "testapi", "service": "items", "resource": "items"});
    let resource = call(&client, "describe_resource", hierarchy.clone()).await;
    let text = text_of(&resource);
    assert!(text.starts_with("# Resource\n\n## Record 1\n"), "{text}");
    assert!(text.contains("name: id\ntype: integer\n"), "{text}");
    assert!(rows(&resource).iter().any(|r| r["name"] == "name"));
    let mut as_json = hierarchy.clone();
    as_json["format"] = json!("json");
    let json_text = text_of(&call(&client, "describe_resource", as_json).await);
    assert!(json_text.starts_with("{\"rows\":["), "{json_text}");

    let mut with_method = hierarchy.clone();
    with_method["method"] = json!("get_item");
    let method = call(&client, "describe_method", with_method.clone()).await;
    let text = text_of(&method);
    assert!(text.starts_with("# Method\n\n## Record 1\n"), "{text}");
    assert!(text.contains("http_method: GET"), "{text}");
    assert!(text.contains("path: /orgs/{org}/items/{id}"), "{text}");
    let contract = structured(&method);
    assert_eq!(contract["method"], "get_item");
    assert_eq!(contract["sql_verb"], "select");
    let contract_rows = contract["rows"].as_array().unwrap();
    assert!(contract_rows.iter().any(|r| r["name"] == "id"
        && r["param_type"] == "input_required"
        && r["location"] == "path"));
    assert!(
        contract_rows
            .iter()
            .any(|r| r["name"] == "name" && r["param_type"] == "output")
    );
    with_method["format"] = json!("json");
    let json_text = text_of(&call(&client, "describe_method", with_method).await);
    let parsed: Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(parsed, contract);

    // Unknown names are tool errors from the engine.
    let text = tool_error(
        &client,
        "list_resources",
        json!({"provider": "testapi", "service": "nosuch"}),
    )
    .await;
    assert!(text.contains("nosuch"), "{text}");
    // Nothing here called the upstream API.
    assert!(server.mock.requests().is_empty());
}

#[tokio::test]
async fn missing_and_invalid_names_are_refused() {
    let server = start("read_only", "").await;
    let client = modern_client(&server.url).await;
    let cases = [
        ("list_services", json!({}), "provider not specified"),
        (
            "list_resources",
            json!({"provider": "testapi"}),
            "provider and / or service not specified",
        ),
        (
            "list_methods",
            json!({"provider": "testapi", "service": "items"}),
            "provider, service and / or resource not specified",
        ),
        (
            "describe_resource",
            json!({"service": "items", "resource": "items"}),
            "provider, service and / or resource not specified",
        ),
        (
            "describe_method",
            json!({"provider": "testapi", "service": "items", "resource": "items"}),
            "provider, service, resource and / or method not specified",
        ),
        (
            "list_services",
            json!({"provider": "  "}),
            "provider not specified",
        ),
    ];
    for (tool, arguments, expected) in cases {
        assert_eq!(
            tool_error(&client, tool, arguments).await,
            expected,
            "{tool}"
        );
    }
    for (tool, arguments, field) in [
        (
            "list_services",
            json!({"provider": "testapi; DROP"}),
            "provider",
        ),
        (
            "list_resources",
            json!({"provider": "testapi", "service": "items' OR '1'='1"}),
            "service",
        ),
        (
            "describe_resource",
            json!({"provider": "testapi", "service": "items", "resource": "items/../x"}),
            "resource",
        ),
        (
            "describe_method",
            json!({"provider": "testapi", "service": "items", "resource": "items", "method": "get item"}),
            "method",
        ),
        (
            "reload_credentials",
            json!({"provider": "testapi; DROP"}),
            "provider",
        ),
    ] {
        let text = tool_error(&client, tool, arguments).await;
        assert!(
            text.starts_with(&format!("invalid {field} ")) && text.contains("letters, digits"),
            "{tool}: {text}"
        );
    }
    // Unknown fields and wrong types are protocol errors, before any tool runs.
    let err = try_call(
        &client,
        "list_services",
        json!({"provider": "testapi", "table": "x"}),
    )
    .await
    .unwrap_err();
    assert!(err.contains("table"), "{err}");
    // So is a name the tool does not take.
    let err = try_call(
        &client,
        "list_services",
        json!({"provider": "testapi", "service": "items"}),
    )
    .await
    .unwrap_err();
    assert!(err.contains("unknown field `service`"), "{err}");
    let err = try_call(&client, "list_methods", json!({"provider": 7}))
        .await
        .unwrap_err();
    assert!(err.contains("provider"), "{err}");
    let text = tool_error(
        &client,
        "list_services",
        json!({"provider": "testapi", "format": "yaml"}),
    )
    .await;
    assert!(text.contains("invalid format"), "{text}");
}

#[tokio::test]
async fn validate_select_query_reports_without_calling_upstream() {
    let server = start("read_only", "").await;
    let client = modern_client(&server.url).await;
    let validate = |sql: &str| {
        let client = &client;
        let sql = sql.to_owned();
        async move {
            let result = call(client, "validate_select_query", json!({"sql": sql})).await;
            assert!(!is_error(&result), "{}", text_of(&result));
            result
        }
    };

    let ok = validate("SELECT id, name FROM testapi.items.items WHERE org = 'acme'").await;
    let verdict = structured(&ok);
    assert_eq!(verdict["valid"], true, "{verdict}");
    assert_eq!(verdict["errors"], json!([]), "{verdict}");
    // The class the gate gives it, what the mode does, and each request's effect.
    assert_eq!(verdict["class"], "select", "{verdict}");
    assert_eq!(verdict["approval"], "allow", "{verdict}");
    let requests = verdict["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 1, "{verdict}");
    assert_eq!(requests[0]["http_method"], "GET", "{verdict}");
    assert_eq!(requests[0]["effect"], "read", "{verdict}");
    assert_eq!(requests[0]["source"], "http_method", "{verdict}");
    assert_eq!(requests[0]["evidence"], "HTTP GET reads", "{verdict}");
    assert!(
        text_of(&ok).starts_with(
            "# Validation Result\n\nvalid: true\nerrors: []\nclass: select\napproval: allow\n"
        ),
        "{}",
        text_of(&ok)
    );
    let joined = validate(
        "SELECT i.name, t.id FROM testapi.items.items i JOIN testapi.items.items t ON t.name = i.name WHERE i.org = 'a' AND t.org = 'b'",
    )
    .await;
    assert_eq!(structured(&joined)["valid"], true, "{}", text_of(&joined));
    assert_eq!(structured(&validate("SELECT 1 AS n").await)["valid"], true);

    for (sql, expected) in [
        (
            "SELECT * FROM testapi.items.items2 WHERE org = 'acme'",
            "items2",
        ),
        ("SELECT id FROM testapi.items.items", "org"),
        (
            "SELECT nosuchcolumn FROM testapi.items.items WHERE org = 'acme'",
            "nosuchcolumn",
        ),
        ("SELEC id FROM x", ""),
        (
            "DELETE FROM testapi.items.items WHERE org = 'acme'",
            "SELECT statements only; this statement is a DELETE",
        ),
    ] {
        let result = validate(sql).await;
        let verdict = structured(&result);
        assert_eq!(verdict["valid"], false, "{sql}: {verdict}");
        let errors = verdict["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 1, "{sql}");
        assert!(
            errors[0].as_str().unwrap().contains(expected),
            "{sql}: {errors:?}"
        );
        assert!(text_of(&result).contains("valid: false"));
    }
    let json_text = text_of(
        &call(
            &client,
            "validate_select_query",
            json!({"sql": "SELECT 1", "format": "json"}),
        )
        .await,
    );
    assert_eq!(
        json_text,
        r#"{"valid":true,"errors":[],"class":"select","approval":"allow","requests":[]}"#
    );
    assert_eq!(
        tool_error(&client, "validate_select_query", json!({"sql": " "})).await,
        "no SQL provided"
    );
    assert!(
        server.mock.requests().is_empty(),
        "{:?}",
        server.mock.paths()
    );
}

#[tokio::test]
async fn engine_validate_checks_credentials_without_fetching() {
    let mock = Mock::start().await;
    let e = engine(&mock);
    let sql = "SELECT id FROM testapi.items.items WHERE org = 'acme'";
    e.validate(&context(), sql).await.unwrap();
    let no_key = querygate::engine::ExecContext {
        credentials: std::sync::Arc::new(querygate::engine::CredentialStore::empty()),
        ..context()
    };
    let err = e.validate(&no_key, sql).await.unwrap_err();
    assert!(
        err.message()
            .starts_with("credential resolution failed for provider 'testapi'"),
        "{err}"
    );
    assert!(!err.message().contains(SECRET));
    let err = e
        .validate(
            &context(),
            "DELETE FROM testapi.items.items WHERE org = 'a'",
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        querygate::engine::ErrorKind::UnsupportedStatement
    );
    assert!(mock.requests().is_empty());
}

/// The compat registry's `dist/` (its packages); `None` only outside CI without it (under
/// CI a missing registry fails the test: [`compat_registry`]).
fn compat_dist() -> Option<PathBuf> {
    compat_registry().map(|root| root.join("dist"))
}

/// Serves the compat `dist/` at `<mock>/registry`, the test config's `registry.url`, its
/// packages re-signed by the test root the test servers trust.
fn serve_registry(mock: &Mock, dist: &Path) {
    crate::support::packages::serve_compat_dist(mock, "/registry", dist, |p| {
        crate::support::signing::signer().resign_package(p)
    });
}

#[tokio::test]
async fn registry_argument_checks_need_no_registry() {
    let server = start("read_only", "").await;
    let client = modern_client(&server.url).await;
    assert_eq!(
        tool_error(&client, "list_registry", json!({"provider": "a;b"})).await,
        "forbidden characters in provider"
    );
    assert_eq!(
        tool_error(&client, "pull_provider", json!({})).await,
        "provider not specified"
    );
    assert_eq!(
        tool_error(&client, "pull_provider", json!({"provider": ""})).await,
        "provider not specified"
    );
    for arguments in [
        json!({"provider": "go ogle"}),
        json!({"provider": "google", "version": "../v1"}),
    ] {
        assert_eq!(
            tool_error(&client, "pull_provider", arguments).await,
            "forbidden characters in provider or version"
        );
    }
    assert!(server.mock.requests().is_empty());
}

#[tokio::test]
async fn list_registry_and_pull_provider_into_a_temporary_root() {
    let Some(dist) = compat_dist() else { return };
    // Pulls write only the local registry: allowed even in read_only mode.
    let server = start_with_registry_copy("read_only", "").await;
    serve_registry(&server.mock, &dist);
    let client = modern_client(&server.url).await;

    let all = call(&client, "list_registry", json!({})).await;
    let text = text_of(&all);
    assert!(text.starts_with("| provider | versions |"), "{text}");
    assert!(
        text.contains("| google | v0.1.0, v0.1.1-alpha01, v0.1.2, v0.2.1 |"),
        "{text}"
    );
    let one = call(&client, "list_registry", json!({"provider": "google"})).await;
    assert_eq!(rows(&one).len(), 4);
    assert_eq!(
        rows(&one)[2],
        json!({"provider": "google", "version": "v0.1.2"})
    );
    let json_text = text_of(
        &call(
            &client,
            "list_registry",
            json!({"provider": "google", "format": "json"}),
        )
        .await,
    );
    assert!(json_text.starts_with("{\"rows\":[{"), "{json_text}");
    let text = tool_error(&client, "list_registry", json!({"provider": "nosuch"})).await;
    assert!(text.contains("not in the remote registry"), "{text}");

    let pulled = call(&client, "pull_provider", json!({"provider": "google"})).await;
    assert!(!is_error(&pulled), "{}", text_of(&pulled));
    let result = structured(&pulled);
    assert!(
        result["messages"][0]
            .as_str()
            .unwrap()
            .starts_with("google provider, version 'v0.1.2' successfully installed"),
        "{result}"
    );
    assert!(result["timestamp"].as_str().unwrap().starts_with("20"));
    assert_eq!(result["version"], "v0.1.2");
    let text = text_of(&pulled);
    assert!(text.starts_with("# Pull Result\n\nmessages: "), "{text}");
    assert!(text.contains("successfully installed"), "{text}");

    // Installed into the server's copy, visible at once; the fixture is untouched.
    let installed = server
        ._dir
        .path()
        .join("registry/src/googleapis.com/v0.1.2");
    assert!(installed.join("provider.yaml").is_file());
    assert!(
        !crate::support::fixture_registry()
            .join("src/googleapis.com")
            .exists()
    );
    let providers = call(&client, "list_providers", json!({})).await;
    assert!(
        text_of(&providers).contains("| google | v0.1.2 | v0.1.2 |"),
        "{}",
        text_of(&providers)
    );
    let services = call(&client, "list_services", json!({"provider": "google"})).await;
    assert!(rows(&services).iter().any(|r| r["name"] == "storage"));

    // Again, explicitly versioned, in JSON: same version, replaced in place.
    let again = call(
        &client,
        "pull_provider",
        json!({"provider": "google", "version": "v0.1.2", "format": "json"}),
    )
    .await;
    let parsed: Value = serde_json::from_str(&text_of(&again)).unwrap();
    assert_eq!(
        parsed["messages"],
        json!(["google provider, version 'v0.1.2' successfully installed"])
    );
    let text = tool_error(
        &client,
        "pull_provider",
        json!({"provider": "google", "version": "v7.7.7"}),
    )
    .await;
    assert!(text.contains("no version 'v7.7.7'"), "{text}");
}

fn env_file(server: &TestServer) -> PathBuf {
    server._dir.path().join("creds.env")
}

#[tokio::test]
async fn reload_credentials_reports_changes_and_never_values() {
    let server = start("read_only", "").await;
    let client = modern_client(&server.url).await;
    let path = env_file(&server);

    let unscoped = call(&client, "reload_credentials", json!({})).await;
    assert!(!is_error(&unscoped), "{}", text_of(&unscoped));
    let report = structured(&unscoped);
    assert_eq!(report["env_file"], path.display().to_string());
    assert_eq!(report["env_file_sourced"], true);
    assert_eq!(report["sourced_vars"], json!(["TESTAPI_KEY"]));
    assert_eq!(
        report["providers"],
        json!([{
            "provider": "testapi",
            "auth_type": "custom",
            "sourced_from": "env:TESTAPI_KEY",
            "status": "ok",
            "detail": "",
            "changed": false,
            "resolved_source": "env:TESTAPI_KEY",
            "token_expires_at": null
        }])
    );
    assert_eq!(
        text_of(&unscoped),
        "| auth_type | changed | detail | provider | resolved_source | sourced_from | status | token_expires_at |\n|---|---|---|---|---|---|---|---|\n| custom | false |  | testapi | env:TESTAPI_KEY | env:TESTAPI_KEY | ok |  |\n"
    );

    let scoped = call(
        &client,
        "reload_credentials",
        json!({"provider": "testapi", "format": "json"}),
    )
    .await;
    let parsed: Value = serde_json::from_str(&text_of(&scoped)).unwrap();
    assert_eq!(parsed["providers"].as_array().unwrap().len(), 1);
    assert_eq!(parsed, structured(&scoped));

    assert_eq!(
        tool_error(&client, "reload_credentials", json!({"provider": "nosuch"})).await,
        "provider 'nosuch' is not installed"
    );

    // Rotate the key: one reload says changed, the next does not.
    let rotated = "tk-rotated-secret-7731";
    std::fs::write(&path, format!("TESTAPI_KEY={rotated}\n")).unwrap();
    let after = call(
        &client,
        "reload_credentials",
        json!({"provider": "testapi"}),
    )
    .await;
    let text = text_of(&after);
    assert!(
        text.contains("| custom | true |  | testapi | env:TESTAPI_KEY | env:TESTAPI_KEY | ok |  |"),
        "{text}"
    );
    let again = call(&client, "reload_credentials", json!({})).await;
    assert_eq!(structured(&again)["providers"][0]["changed"], false);
    for result in [&unscoped, &scoped, &after, &again] {
        let all = format!("{}{}", text_of(result), structured(result));
        assert!(!all.contains(SECRET) && !all.contains(rotated), "{all}");
    }

    // The rotated key is the one queries send.
    server
        .mock
        .route("/orgs/acme/items", Reply::json(json!([])));
    let query = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT id FROM testapi.items.items WHERE org = 'acme'"}),
    )
    .await;
    assert!(!is_error(&query), "{}", text_of(&query));
    let sent = server.mock.requests();
    assert!(
        sent.iter()
            .any(|r| r.headers.get("x-api-key").is_some_and(|v| v == rotated)),
        "the rotated key was not sent"
    );

    // A configured file that has gone missing is an error naming it.
    std::fs::remove_file(&path).unwrap();
    let text = tool_error(&client, "reload_credentials", json!({})).await;
    assert!(text.contains("creds.env' not found"), "{text}");
    assert!(!text.contains(rotated));
}
