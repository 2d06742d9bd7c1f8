//! The query library tools through an rmcp client: the embedded snapshot, the remote index
//! served by the mock, and the fallback when the mock fails.

use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::Reply;

#[tokio::test]
async fn search_hits_misses_and_filters() {
    let server = start("read_only", "").await;
    let client = modern_client(&server.url).await;
    let tools = client.list_all_tools().await.unwrap();
    for name in ["query_library_search", "query_library_get"] {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        assert_eq!(
            tool.annotations.as_ref().unwrap().read_only_hint,
            Some(true)
        );
    }

    let hit = call(
        &client,
        "query_library_search",
        json!({"intent": "list the repositories of my github org"}),
    )
    .await;
    assert_ne!(hit.is_error, Some(true));
    let structured = hit.structured_content.clone().unwrap();
    assert_eq!(structured["miss"], false);
    assert_eq!(structured["hits"][0]["id"], "github/repos/repos-by-org");
    assert_eq!(structured["hits"][0]["required_params"], json!(["org"]));
    assert_eq!(structured["source_tier"], "snapshot");
    assert_eq!(
        structured["source_url"],
        "embedded://content/library/index.json"
    );
    assert!(structured.get("stale").is_none());
    // Mutations are left out by default.
    assert!(
        structured["hits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["mutation"] == false)
    );
    let text = text_of(&hit);
    assert!(
        text.starts_with("| id | mutation | required_params | score | title |\n|---|---|---|---|---|\n| github/repos/repos-by-org | false | org |"),
        "{text}"
    );
    assert!(
        text.contains("\n\nSource: embedded://content/library/index.json"),
        "{text}"
    );

    let miss = call(
        &client,
        "query_library_search",
        json!({"intent": "kubernetes pod restarts"}),
    )
    .await;
    let structured = miss.structured_content.clone().unwrap();
    assert_eq!(structured["miss"], true);
    assert_eq!(structured["hits"], json!([]));
    assert!(
        structured["guidance"]
            .as_str()
            .unwrap()
            .contains("discovery workflow")
    );
    let text = text_of(&miss);
    assert!(text.starts_with("**no results**\n\nSource: "), "{text}");
    assert!(
        text.ends_with(structured["guidance"].as_str().unwrap()),
        "{text}"
    );

    // Filters: provider, service, tags, limit.
    let google = call(
        &client,
        "query_library_search",
        json!({"intent": "inventory", "provider": "google", "format": "json"}),
    )
    .await;
    let parsed: Value = serde_json::from_str(&text_of(&google)).unwrap();
    let ids: Vec<&str> = parsed["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.iter().all(|id| id.starts_with("google/")), "{ids:?}");
    let tagged = call(
        &client,
        "query_library_search",
        json!({"intent": "github", "tags": ["security"], "limit": 1}),
    )
    .await;
    let structured = tagged.structured_content.unwrap();
    assert_eq!(structured["hits"].as_array().unwrap().len(), 1);
    assert_eq!(structured["hits"][0]["id"], "github/orgs/members-by-org");

    // Read-only tenants never see mutations, even when asked.
    let asked = call(
        &client,
        "query_library_search",
        json!({"intent": "create a new repository", "include_mutations": true}),
    )
    .await;
    let structured = asked.structured_content.unwrap();
    assert!(
        structured["hits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["mutation"] == false),
        "{structured}"
    );
}

#[tokio::test]
async fn writers_can_find_mutations_and_exec() {
    let server = start("full_access", "").await;
    let client = modern_client(&server.url).await;
    let asked = call(
        &client,
        "query_library_search",
        json!({"intent": "create a new repository", "include_mutations": true}),
    )
    .await;
    let structured = asked.structured_content.unwrap();
    assert_eq!(
        structured["hits"][0]["id"],
        "github/repos/create-repo-in-org"
    );
    assert_eq!(structured["hits"][0]["mutation"], true);

    let exec = call(
        &client,
        "query_library_get",
        json!({"id": "github/orgs/webhook-ping", "params": {"org": "acme", "hook_id": 42}}),
    )
    .await;
    let structured = exec.structured_content.unwrap();
    assert_eq!(structured["valid"], true);
    assert_eq!(structured["next_tool"], "run_lifecycle_operation");
    assert_eq!(
        structured["sql"],
        "EXEC github.orgs.webhooks.ping_webhook @org = 'acme', @hook_id = 42"
    );
    let insert = call(
        &client,
        "query_library_get",
        json!({"id": "github/repos/create-repo-in-org", "params": {"org": "acme", "name": "sandbox"}}),
    )
    .await;
    let structured = insert.structured_content.unwrap();
    assert_eq!(structured["next_tool"], "run_mutation_query");
    assert!(
        structured["sql"]
            .as_str()
            .unwrap()
            .contains("VALUES ('acme', 'sandbox', '', true)"),
        "{structured}"
    );
}

#[tokio::test]
async fn get_teaches_renders_validates_and_refuses_bad_ids() {
    let server = start("read_only", "").await;
    let client = modern_client(&server.url).await;
    let raw = call(
        &client,
        "query_library_get",
        json!({"id": "google/compute/instances-by-zone"}),
    )
    .await;
    let structured = raw.structured_content.clone().unwrap();
    assert_eq!(structured["rendered"], false);
    assert_eq!(structured["valid"], false);
    assert!(
        structured["template"]
            .as_str()
            .unwrap()
            .contains("zone = {{zone}}")
    );
    assert_eq!(structured["params"][1]["name"], "zone");
    assert_eq!(structured["next_tool"], "run_select_query");
    assert!(structured.get("sql").is_none());
    let text = text_of(&raw);
    assert!(
        text.starts_with("# Query Library Entry\n\nid: google/compute/instances-by-zone\n"),
        "{text}"
    );
    assert!(text.contains("template:\n\n```sql\nSELECT"), "{text}");

    let rendered = call(
        &client,
        "query_library_get",
        json!({"id": "google/compute/instances-by-zone", "params": {"project": "my-project-123", "zone": "us-central1-a"}}),
    )
    .await;
    let structured = rendered.structured_content.clone().unwrap();
    assert_eq!(structured["rendered"], true);
    assert_eq!(structured["valid"], true);
    let sql = structured["sql"].as_str().unwrap();
    assert!(
        sql.contains("WHERE project = 'my-project-123' AND zone = 'us-central1-a'"),
        "{sql}"
    );
    assert!(text_of(&rendered).contains("next_tool: run_select_query"));
    // Optional params take their defaults.
    let defaulted = call(
        &client,
        "query_library_get",
        json!({"id": "github/orgs/members-by-org", "params": {"org": "acme"}}),
    )
    .await;
    assert!(
        defaulted.structured_content.unwrap()["sql"]
            .as_str()
            .unwrap()
            .contains("org = 'acme' AND role = 'all'")
    );

    // Bad values are data, not a tool error.
    let invalid = call(
        &client,
        "query_library_get",
        json!({"id": "google/compute/instances-by-zone", "params": {"zone": "us-central1-a' OR '1'='1", "colour": "red"}}),
    )
    .await;
    assert_ne!(invalid.is_error, Some(true));
    let structured = invalid.structured_content.unwrap();
    assert_eq!(structured["valid"], false);
    assert_eq!(structured["rendered"], true);
    assert!(structured.get("sql").is_none());
    assert_eq!(structured["unknown_params"], json!(["colour"]));
    assert_eq!(structured["missing_params"][0]["name"], "project");
    let errors: Vec<&str> = structured["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        errors.contains(&"unknown params rejected: colour"),
        "{errors:?}"
    );
    assert!(
        errors.contains(&"missing required params: project"),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("param \"zone\" must match pattern")),
        "{errors:?}"
    );
    let enum_error = call(
        &client,
        "query_library_get",
        json!({"id": "github/orgs/members-by-org", "params": {"org": "acme", "role": "owner"}}),
    )
    .await;
    assert_eq!(
        enum_error.structured_content.unwrap()["errors"],
        json!(["param \"role\" must be one of [all admin member], got \"owner\""])
    );

    let bad_id = call(&client, "query_library_get", json!({"id": "../etc/passwd"})).await;
    assert_eq!(bad_id.is_error, Some(true));
    assert_eq!(
        text_of(&bad_id),
        r#"invalid query id "../etc/passwd" [arguments.invalid]"#
    );
    let unknown = call(
        &client,
        "query_library_get",
        json!({"id": "aws/ec2/regions-enabled"}),
    )
    .await;
    assert_eq!(unknown.is_error, Some(true));
    assert_eq!(
        text_of(&unknown),
        r#"unknown query id "aws/ec2/regions-enabled"; use query_library_search to find valid ids [not_found]"#
    );
    let no_id = try_call(&client, "query_library_get", json!({}))
        .await
        .unwrap_err();
    assert!(no_id.contains("id"), "{no_id}");
}

fn remote_index() -> Value {
    json!({
        "build_id": "remote-7",
        "entries": [{
            "id": "testapi/items/items-by-org",
            "title": "Items of an organization",
            "providers": ["testapi"],
            "services": ["items"],
            "intent_keywords": ["items of org"],
            "mutation": false,
            "required_params": ["org"]
        }]
    })
}

#[tokio::test]
async fn a_remote_index_is_served_and_its_sql_runs() {
    let server = start_with("read_only", |mock| {
        format!("  query_library_url: {mock}/library/\n")
    })
    .await;
    let mock = &server.mock;
    mock.route(
        "/library/manifest.json",
        Reply::json(json!({"build_id": "remote-7"})),
    );
    mock.route("/library/index.json", Reply::json(remote_index()));
    mock.route(
        "/library/queries/testapi/items/items-by-org.json",
        Reply::json(json!({
            "id": "testapi/items/items-by-org",
            "title": "Items of an organization",
            "mutation": false,
            "params": [{"name": "org", "type": "string", "required": true}],
            "template": "SELECT id, name FROM testapi.items.items WHERE org = {{org}} ORDER BY id"
        })),
    );
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "one"}])),
    );
    let client = modern_client(&server.url).await;

    let search = call(
        &client,
        "query_library_search",
        json!({"intent": "items of org acme"}),
    )
    .await;
    let structured = search.structured_content.unwrap();
    assert_eq!(structured["source_tier"], "primary");
    assert_eq!(
        structured["source_url"],
        format!("{}/library/index.json", server.mock.url())
    );
    assert_eq!(structured["hits"][0]["id"], "testapi/items/items-by-org");
    // Entries only the snapshot has are unknown to the remote tier.
    let gone = call(
        &client,
        "query_library_get",
        json!({"id": "github/repos/repos-by-org"}),
    )
    .await;
    assert_eq!(gone.is_error, Some(true));

    let got = call(
        &client,
        "query_library_get",
        json!({"id": "testapi/items/items-by-org", "params": {"org": "acme"}}),
    )
    .await;
    let structured = got.structured_content.unwrap();
    assert_eq!(structured["source_tier"], "primary");
    let sql = structured["sql"].as_str().unwrap().to_owned();
    assert_eq!(
        sql,
        "SELECT id, name FROM testapi.items.items WHERE org = 'acme' ORDER BY id"
    );
    let rows = call(
        &client,
        "run_select_query",
        json!({"sql": sql, "source": "testapi/items/items-by-org"}),
    )
    .await;
    assert_eq!(
        rows.structured_content.unwrap()["rows"],
        json!([{"id": 1, "name": "one"}])
    );

    // The index is cached: a second search does not fetch it again.
    call(&client, "query_library_search", json!({"intent": "items"})).await;
    assert_eq!(server.mock.count("/library/index.json"), 1);
}

#[tokio::test]
async fn a_failing_remote_falls_back_to_the_snapshot() {
    let server = start_with("read_only", |mock| {
        format!("  query_library_url: {mock}/library\n")
    })
    .await;
    server
        .mock
        .route("/library/manifest.json", Reply::status(503, "down"));
    let client = modern_client(&server.url).await;
    let search = call(
        &client,
        "query_library_search",
        json!({"intent": "github repositories of an org"}),
    )
    .await;
    assert_ne!(search.is_error, Some(true));
    let structured = search.structured_content.clone().unwrap();
    assert_eq!(structured["source_tier"], "snapshot");
    assert_eq!(structured["stale"], true);
    assert_eq!(structured["hits"][0]["id"], "github/repos/repos-by-org");
    assert!(text_of(&search).contains("(stale"), "{}", text_of(&search));
    let got = call(
        &client,
        "query_library_get",
        json!({"id": "github/repos/repos-by-org", "params": {"org": "acme"}}),
    )
    .await;
    let structured = got.structured_content.unwrap();
    assert_eq!(structured["valid"], true);
    assert_eq!(structured["stale"], true);
    assert_eq!(structured["source_tier"], "snapshot");
}

/// `params` as the input schema gives it (a list of `{name, value}`) renders as the object of
/// values by name does; a name given twice or an item of another shape is refused.
#[tokio::test]
async fn params_are_taken_as_a_list_of_names_and_values() {
    let server = start("read_only", "").await;
    let client = modern_client(&server.url).await;
    let listed = call(
        &client,
        "query_library_get",
        json!({"id": "github/orgs/members-by-org", "params": [{"name": "org", "value": "acme"}, {"name": "role", "value": "admin"}]}),
    )
    .await;
    let by_name = call(
        &client,
        "query_library_get",
        json!({"id": "github/orgs/members-by-org", "params": {"org": "acme", "role": "admin"}}),
    )
    .await;
    let sql = listed.structured_content.clone().unwrap()["sql"].clone();
    assert!(
        sql.as_str()
            .unwrap()
            .contains("org = 'acme' AND role = 'admin'"),
        "{sql}"
    );
    assert_eq!(sql, by_name.structured_content.unwrap()["sql"]);
    for (params, says) in [
        (
            json!([{"name": "org", "value": "a"}, {"name": "org", "value": "b"}]),
            "param \"org\" is given twice",
        ),
        (json!([{"name": "org"}]), "exactly \"name\""),
        (
            json!([{"name": "org", "value": "a", "extra": 1}]),
            "exactly \"name\"",
        ),
        (json!(["org"]), "expected a {\"name\", \"value\"} object"),
        (json!("org=acme"), "expected a list"),
    ] {
        let err = try_call(
            &client,
            "query_library_get",
            json!({"id": "github/orgs/members-by-org", "params": params}),
        )
        .await
        .unwrap_err();
        assert!(
            err.contains("params") && err.contains(says),
            "{params}: {err}"
        );
    }
}
