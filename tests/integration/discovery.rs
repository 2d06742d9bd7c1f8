//! Discovery through the engine API and SHOW / DESCRIBE.

use querygate::engine::ErrorKind;
use querygate::engine::SqlVerb;

use crate::mock::Mock;
use crate::support::*;

#[tokio::test]
async fn providers_services_resources_methods_columns() {
    let mock = Mock::start().await;
    let e = engine(&mock);
    let cx = context();
    let providers = e.providers(&cx).await.unwrap();
    assert_eq!(
        providers
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        vec!["testapi"]
    );
    assert_eq!(providers[0].version, "v1");
    let services = e.services(&cx, "testapi").await.unwrap();
    assert_eq!(
        services.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        vec!["absent", "items", "widgets"]
    );
    let resources = e.resources(&cx, "testapi", "items").await.unwrap();
    assert!(resources.iter().any(|r| r.id == "testapi.items.items"));
    let methods = e.methods(&cx, "testapi", "items", "items").await.unwrap();
    let get = methods.iter().find(|m| m.name == "get_item").unwrap();
    assert_eq!(get.sql_verb, Some(SqlVerb::Select));
    // StackQL's order: sorted by name within each group (parameters, body, server).
    assert_eq!(get.required_params, vec!["id", "org"]);
    // No sqlVerbs: StackQL's fallback names bind `list` and `get` to SELECT.
    let tokens = e.methods(&cx, "testapi", "items", "tokens").await.unwrap();
    assert_eq!(tokens[0].sql_verb, Some(SqlVerb::Select));
    let columns = e.columns(&cx, "testapi", "items", "items").await.unwrap();
    assert_eq!(
        columns
            .iter()
            .map(|c| (c.name.as_str(), c.type_name.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("id", "integer"),
            ("name", "string"),
            ("score", "number"),
            ("active", "boolean"),
            ("meta", "object"),
            ("tags", "array")
        ]
    );
    let contract = e
        .method_contract(&cx, "testapi", "items", "items", "list_items")
        .await
        .unwrap();
    assert_eq!(
        (contract.http_method.as_str(), contract.path.as_str()),
        ("GET", "/orgs/{org}/items")
    );
    let state = contract.params.iter().find(|p| p.name == "state").unwrap();
    assert_eq!((state.location.as_str(), state.required), ("query", false));
    let regional = e
        .method_contract(&cx, "testapi", "items", "regional", "list")
        .await
        .unwrap();
    let region = regional.params.iter().find(|p| p.name == "region").unwrap();
    assert_eq!(region.location, "server");
    assert_eq!(region.allowed_values, vec!["us", "eu"]);
    assert_eq!(region.default.as_deref(), Some("us"));
    let err = e
        .method_contract(&cx, "testapi", "items", "items", "nope")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnknownTable, "{err}");
    assert!(err.to_string().contains("method 'nope' not found"), "{err}");
}

#[tokio::test]
async fn show_and_describe_statements() {
    let mock = Mock::start().await;
    let e = engine(&mock);
    let providers = query(&e, "SHOW PROVIDERS").await;
    assert_eq!(providers.rows, vec![vec![text("testapi"), text("v1")]]);
    let resources = query(&e, "SHOW RESOURCES IN testapi.items LIKE 'i%'").await;
    assert_eq!(column(&resources, "name"), vec![text("items")]);
    let methods = query(&e, "SHOW METHODS IN testapi.items.items").await;
    assert_eq!(
        methods.columns,
        vec!["MethodName", "RequiredParams", "SQLVerb"]
    );
    assert_eq!(
        methods.rows[0],
        vec![text("get_item"), text("id, org"), text("SELECT")]
    );
    let described = query(&e, "DESCRIBE testapi.items.items").await;
    assert_eq!(column(&described, "name").len(), 6);
    assert!(mock.requests().is_empty());
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test]
async fn newest_version_unless_pinned_and_broken_neighbours_are_skipped() {
    let mock = Mock::start().await;
    mock.route(
        "/single",
        crate::mock::Reply::json(serde_json::json!({"id": 1, "name": "solo"})),
    );
    let root = tempfile::tempdir().unwrap();
    let fixture = fixture_registry().join("src/testapi/v1");
    for version in ["v1", "v2", "v10"] {
        copy_dir(&fixture, &root.path().join("src/testapi").join(version));
    }
    std::fs::create_dir_all(root.path().join("src/broken/v1")).unwrap();
    std::fs::write(
        root.path().join("src/broken/v1/provider.yaml"),
        "name: [unclosed",
    )
    .unwrap();

    let with = |pin: Option<&str>| {
        engine_with(&mock, |c| {
            c.registry_root = root.path().to_owned();
            c.providers.get_mut("testapi").unwrap().version = pin.map(str::to_owned);
        })
    };
    let listed = with(None).providers(&context()).await.unwrap();
    assert_eq!(
        listed.len(),
        1,
        "the unreadable provider is skipped: {listed:?}"
    );
    assert_eq!(listed[0].version, "v10");
    assert_eq!(listed[0].versions, vec!["v10", "v2", "v1"]);
    assert_eq!(
        with(Some("v1")).providers(&context()).await.unwrap()[0].version,
        "v1"
    );
    let out = query(&with(Some("v2")), "SELECT name FROM testapi.items.single").await;
    assert_eq!(out.rows, vec![vec![text("solo")]]);
    let err = with(Some("v9"))
        .execute(&context(), "SELECT name FROM testapi.items.single")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Registry, "{err}");
    assert!(err.to_string().contains("pinned to version 'v9'"), "{err}");
}
