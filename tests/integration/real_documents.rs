//! The real provider documents of `tests/fixtures/providers` (unchanged copies from
//! StackQL's registry) load whole and answer as StackQL does, one behaviour class per test.

use querygate::engine::{Engine, EngineConfig, ErrorKind};
use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::corpus::{providers_context, providers_engine, row_lines};

async fn run(engine: &Engine, sql: &str) -> querygate::engine::QueryOutput {
    match engine.execute(&providers_context(), sql).await {
        Ok(out) => out,
        Err(err) => panic!("query failed: {sql}\n{err}"),
    }
}

#[tokio::test]
async fn okta_upper_case_method_keys_resolve_for_select_and_exec() {
    let mock = Mock::start().await;
    mock.route(
        "/api/v1/apps",
        Reply::json(json!([{"id": "a1", "label": "One", "status": "INACTIVE"}])),
    );
    mock.route(
        "POST /api/v1/apps/a1/lifecycle/activate",
        Reply::json(json!({})),
    );
    let e = providers_engine(&mock);
    let out = run(&e, "SELECT id, label, status FROM okta.application.apps").await;
    assert_eq!(row_lines(&out), ["a1|One|INACTIVE"]);
    // `activate` is `…/lifecycle~1activate/POST` in the document.
    run(&e, "EXEC okta.application.apps.activate @appId = 'a1'").await;
    let requests = mock.requests();
    assert_eq!(requests[0].headers["authorization"], "SSWS okta-key");
    let last = requests.last().unwrap();
    assert_eq!(
        (last.method.as_str(), last.path.as_str()),
        ("POST", "/api/v1/apps/a1/lifecycle/activate")
    );
}

#[tokio::test]
async fn google_split_layout_resolves_operations_in_the_resource_service_doc() {
    // firewalls' operations are `googleapis.com/v2.0.1/services-split/…#/paths/…` while the
    // installed version is v0.1.2: StackQL looks the path up in the resource's serviceDoc.
    let mock = Mock::start().await;
    mock.route(
        "/projects/p1/global/firewalls",
        Reply::json(json!({"items": [{"name": "allow-ssh", "direction": "INGRESS"}]})),
    );
    mock.route(
        "/projects/p1/zones/z1/disks",
        Reply::json(json!({"items": [{"name": "d1"}, {"name": "d2"}], "nextPageToken": ""})),
    );
    let e = providers_engine(&mock);
    let out = run(
        &e,
        "SELECT name, direction FROM google.compute.firewalls WHERE project = 'p1'",
    )
    .await;
    assert_eq!(row_lines(&out), ["allow-ssh|INGRESS"]);
    // A split-layout list method whose answer is `{"items": [...], "nextPageToken"}`.
    let out = run(
        &e,
        "SELECT name FROM google.compute.disks WHERE project = 'p1' AND zone = 'z1' ORDER BY name",
    )
    .await;
    assert_eq!(row_lines(&out), ["d1", "d2"]);
}

/// A registry with one resource whose `delete` points at an operation that does not exist.
fn broken_registry() -> tempfile::TempDir {
    crate::support::things_registry(
        "brk",
        r#"      methods:
        list:
          operation: {$ref: '#/paths/~1things/get'}
          response: {mediaType: application/json, openAPIDocKey: '200'}
        delete:
          operation: {$ref: '#/paths/~1things~1{id}/delete'}
          response: {mediaType: application/json, openAPIDocKey: '204'}
      sqlVerbs:
        select: [{$ref: '#/components/x-stackQL-resources/things/methods/list'}]
        delete: [{$ref: '#/components/x-stackQL-resources/things/methods/delete'}]
"#,
    )
}

#[tokio::test]
async fn one_broken_method_does_not_take_down_its_resource() {
    let mock = Mock::start().await;
    mock.route("/things", Reply::json(json!([{"id": "t1"}])));
    let dir = broken_registry();
    let mut config = EngineConfig::new(dir.path().to_path_buf());
    crate::support::upstream_at(&mut config, "brk", mock.url());
    let e = Engine::new(config).unwrap();
    let out = run(&e, "SELECT id FROM brk.things.things").await;
    assert_eq!(row_lines(&out), ["t1"]);
    let methods = run(&e, "SHOW METHODS IN brk.things.things").await;
    assert_eq!(row_lines(&methods), ["list||SELECT"]);
    for sql in [
        "DELETE FROM brk.things.things WHERE id = 't1'",
        "EXEC brk.things.things.delete @id = 't1'",
    ] {
        let err = e.execute(&providers_context(), sql).await.expect_err(sql);
        assert_eq!(err.kind(), ErrorKind::BadDocument, "{sql}: {err}");
        let err = err.to_string();
        assert!(
            err.contains("method 'delete' of resource 'brk.things.things' cannot be used")
                && err.contains("~1things~1{id}"),
            "{sql}: {err}"
        );
    }
    assert_eq!(mock.requests().len(), 1, "the broken method sent nothing");
}

#[tokio::test]
async fn show_methods_lists_required_params_and_verbs_as_stackql() {
    let mock = Mock::start().await;
    let e = providers_engine(&mock);
    // StackQL's own expected output for this statement
    // (test/assets/expected/show/show-methods-google-storage-buckets.csv).
    let out = run(&e, "SHOW METHODS IN google.storage.buckets").await;
    assert_eq!(out.columns, ["MethodName", "RequiredParams", "SQLVerb"]);
    assert_eq!(
        row_lines(&out),
        [
            "get|bucket|SELECT",
            "list|project|SELECT",
            "insert|project, data__name|INSERT",
            "delete|bucket|DELETE",
            "patch|bucket|UPDATE",
            "update|bucket, data__acl|UPDATE",
            "getIamPolicy|bucket|EXEC",
            "lockRetentionPolicy|bucket, ifMetagenerationMatch|EXEC",
            "setIamPolicy|bucket, data__bindings|EXEC",
            "testIamPermissions|bucket, permissions|EXEC",
        ]
    );
    // A server variable is listed among the required parameters, after the others.
    let out = run(&e, "SHOW METHODS IN stackql_native_test.srvvar.items").await;
    assert_eq!(row_lines(&out), ["select|deployment|SELECT"]);
    // No sqlVerbs at all: verbs inferred from the method names.
    let out = run(&e, "SHOW METHODS IN okta.application.apps LIKE 'de%'").await;
    assert_eq!(
        row_lines(&out),
        [
            "delete|appId, subdomain|DELETE",
            "deactivate|appId, subdomain|EXEC",
            "deleteall|appId, subdomain|EXEC"
        ]
    );
}

#[tokio::test]
async fn show_services_and_resources_have_stackqls_columns() {
    let mock = Mock::start().await;
    let e = providers_engine(&mock);
    let out = run(&e, "SHOW SERVICES IN google LIKE 'compute'").await;
    assert_eq!(out.columns, ["id", "name", "title"]);
    assert_eq!(row_lines(&out), ["compute:v1|compute|Compute Engine API"]);
    let out = run(&e, "SHOW RESOURCES IN google.compute LIKE 'disk%'").await;
    assert_eq!(out.columns, ["name", "id"]);
    assert_eq!(
        row_lines(&out),
        [
            "diskTypes|google.compute.diskTypes",
            "disks|google.compute.disks"
        ]
    );
}

#[tokio::test]
async fn select_star_is_the_response_schema_without_parameters() {
    let mock = Mock::start().await;
    mock.route(
        "/v2/droplets/7",
        Reply::json(json!({"droplet": {"id": 7, "name": "web7", "memory": 1024}})),
    );
    let e = providers_engine(&mock);
    let out = run(
        &e,
        "SELECT * FROM digitalocean.droplets.droplets WHERE droplet_id = 7",
    )
    .await;
    assert_eq!(out.columns.len(), 21, "{:?}", out.columns);
    assert_eq!(&out.columns[..3], ["id", "name", "memory"]);
    assert!(!out.columns.iter().any(|c| c == "droplet_id"));
    assert_eq!(out.rows[0][..3], row_cells(&["7", "web7", "1024"]));
}

fn row_cells(values: &[&str]) -> Vec<querygate::engine::Cell> {
    values
        .iter()
        .map(|v| match v.parse::<i64>() {
            Ok(i) => querygate::engine::Cell::Integer(i),
            Err(_) => querygate::engine::Cell::Text((*v).to_owned()),
        })
        .collect()
}

#[tokio::test]
async fn sqlite_math_functions_are_available() {
    let mock = Mock::start().await;
    mock.route(
        "/v2/sizes",
        Reply::json(json!({"sizes": [{"slug": "s-1", "memory": 1536, "price_hourly": 0.00744}]})),
    );
    let e = providers_engine(&mock);
    let out = run(
        &e,
        "SELECT slug, floor(memory / 1024.0) AS gib, ceil(price_hourly * 100) AS cents, pow(2, 3) AS p, round(sqrt(16)) AS r FROM digitalocean.sizes.sizes",
    )
    .await;
    assert_eq!(row_lines(&out), ["s-1|1|1|8|4"]);
}

#[tokio::test]
async fn a_constant_expression_supplies_a_required_parameter() {
    let mock = Mock::start().await;
    mock.route("/orgs/acme/repos", Reply::json(json!([{"name": "a"}])));
    let e = providers_engine(&mock);
    let out = run(
        &e,
        "SELECT name, org FROM github.repos.repos WHERE org = lower('AC' || 'ME')",
    )
    .await;
    assert_eq!(row_lines(&out), ["a|acme"]);
    // Evaluated before the request: list_for_org is chosen, no other method is tried.
    assert_eq!(mock.paths(), ["/orgs/acme/repos"]);
}

#[tokio::test]
async fn join_expressions_and_in_subqueries_feed_parameters() {
    let mock = Mock::start().await;
    mock.route(
        "/orgs/acme/repos",
        Reply::json(json!([
            {"name": "a", "owner": {"login": "octo"}},
            {"name": "b", "owner": {"login": "ghost"}}
        ])),
    );
    mock.route(
        "/users/octo",
        Reply::json(json!({"login": "octo", "id": 1})),
    );
    mock.route(
        "/users/ghost",
        Reply::status(404, r#"{"message":"Not Found"}"#),
    );
    let e = providers_engine(&mock);
    // The right side's parameter comes from an expression over the left side's columns;
    // the LEFT OUTER JOIN keeps the repo whose owner answers 404, null-extended.
    let out = run(
        &e,
        "SELECT r.name, u.id FROM github.repos.repos r LEFT OUTER JOIN github.users.users u ON u.username = json_extract(r.owner, '$.login') WHERE r.org = 'acme' ORDER BY r.name",
    )
    .await;
    assert_eq!(row_lines(&out), ["a|1", "b|NULL"]);
    assert_eq!(
        mock.paths(),
        ["/orgs/acme/repos", "/users/ghost", "/users/octo"]
    );

    let mock = Mock::start().await;
    mock.route(
        "/users/octo/orgs",
        Reply::json(json!([{"login": "Acme"}, {"login": "Beta"}])),
    );
    mock.route("/orgs/acme/repos", Reply::json(json!([{"name": "a"}])));
    mock.route("/orgs/beta/repos", Reply::json(json!([{"name": "b"}])));
    let e = providers_engine(&mock);
    // `IN (SELECT …)`: one request per distinct value of the subquery's expression.
    let out = run(
        &e,
        "SELECT name FROM github.repos.repos WHERE org IN (SELECT lower(login) FROM github.orgs.orgs WHERE username = 'octo') ORDER BY name",
    )
    .await;
    assert_eq!(row_lines(&out), ["a", "b"]);
    assert_eq!(
        mock.paths(),
        ["/orgs/acme/repos", "/orgs/beta/repos", "/users/octo/orgs"]
    );
}

#[tokio::test]
async fn delete_with_an_in_list_makes_one_request_per_value() {
    let mock = Mock::start().await;
    mock.route("DELETE /v2/droplets/1", Reply::status(204, ""));
    mock.route("DELETE /v2/droplets/2", Reply::status(204, ""));
    mock.route(
        "DELETE /v2/droplets/3",
        Reply::status(404, r#"{"id":"not_found"}"#),
    );
    let e = providers_engine(&mock);
    let out = run(
        &e,
        "DELETE FROM digitalocean.droplets.droplets WHERE droplet_id IN (1, 2)",
    )
    .await;
    assert_eq!(out.messages.len(), 2, "{:?}", out.messages);
    let paths: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(paths, ["DELETE /v2/droplets/1", "DELETE /v2/droplets/2"]);
    // A failing element: the error says how many requests before it succeeded.
    let err = e
        .execute(
            &providers_context(),
            "DELETE FROM digitalocean.droplets.droplets WHERE droplet_id IN (1, 3, 2)",
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Upstream, "{err}");
    let err = err.to_string();
    assert!(
        err.contains("request 2 of 3 failed; the 1 before it succeeded and are not undone"),
        "{err}"
    );
    assert_eq!(
        mock.requests().len(),
        4,
        "nothing is sent after the failure"
    );
}

#[tokio::test]
async fn a_bare_parameter_name_equal_to_another_tables_column_fans_out() {
    let mock = Mock::start().await;
    mock.route(
        "/users/octo/orgs",
        Reply::json(json!([{"login": "acme"}, {"login": "beta"}])),
    );
    mock.route("/orgs/acme/repos", Reply::json(json!([{"name": "a"}])));
    mock.route("/orgs/beta/repos", Reply::json(json!([{"name": "b"}])));
    let e = providers_engine(&mock);
    let out = run(
        &e,
        "SELECT o.login, r.name FROM github.orgs.orgs o INNER JOIN github.repos.repos r ON org = o.login WHERE o.username = 'octo' ORDER BY r.name",
    )
    .await;
    assert_eq!(row_lines(&out), ["acme|a", "beta|b"]);
    assert_eq!(
        mock.paths(),
        ["/orgs/acme/repos", "/orgs/beta/repos", "/users/octo/orgs"]
    );
}

#[tokio::test]
async fn native_casing_methods_answer_to_snake_case_names() {
    let mock = Mock::start().await;
    mock.route(
        "/casing/echo_strict",
        Reply::json(json!({"VpcId": "vpc-1", "echoed_query": "VpcId=vpc-1"})),
    );
    mock.route(
        "POST /casing/echo",
        Reply::json(json!({"echoed_body": "{}", "ok": true})),
    );
    let e = providers_engine(&mock);
    // `VpcId` is required; the snake_case name supplies it and filters in SQLite.
    let out = run(
        &e,
        "SELECT VpcId, echoed_query FROM stackql_native_test.casing.echo_strict WHERE vpc_id = 'vpc-1'",
    )
    .await;
    assert_eq!(row_lines(&out), ["vpc-1|VpcId=vpc-1"]);
    run(
        &e,
        "INSERT INTO stackql_native_test.casing.echo (display_name, owner_id) VALUES ('n', 'o')",
    )
    .await;
    let requests = mock.requests();
    assert_eq!(requests[0].query.as_deref(), Some("VpcId=vpc-1"));
    let body: serde_json::Value = serde_json::from_slice(&requests[1].body).unwrap();
    assert_eq!(body, json!({"DisplayName": "n", "OwnerId": "o"}));
}

#[tokio::test]
async fn odata_query_options_are_pushed_down() {
    let mock = Mock::start().await;
    mock.route(
        "/odata/people",
        Reply::json(json!({"value": [
            {"name": "ann", "city": "Paris", "age": 41},
            {"name": "bob", "city": "Paris", "age": 35}
        ]})),
    );
    let e = providers_engine(&mock);
    let out = run(
        &e,
        "SELECT name, city FROM stackql_native_test.odata.people WHERE city = 'Paris' AND age > 30 ORDER BY name LIMIT 5",
    )
    .await;
    assert_eq!(row_lines(&out), ["ann|Paris", "bob|Paris"]);
    let query = |i: usize| {
        let requests = mock.requests();
        let q = requests[i].query.clone().unwrap_or_default();
        url_decode(&q)
    };
    assert_eq!(
        query(0),
        "$filter=city eq 'Paris' and age gt 30&$orderby=name asc&$select=name,city,age&$top=5"
    );
    // A predicate that cannot be pushed keeps $top back (SQLite filters after it), and a
    // column outside supportedColumns keeps $select back.
    run(
        &e,
        "SELECT name FROM stackql_native_test.odata.people_restricted WHERE city = 'Paris' AND name LIKE 'a%' LIMIT 1",
    )
    .await;
    assert_eq!(query(1), "$filter=city eq 'Paris'&$select=name,city");
    run(
        &e,
        "SELECT name FROM stackql_native_test.odata.people_restricted WHERE age >= 18",
    )
    .await;
    assert_eq!(query(2), "$filter=age ge 18");
}

fn url_decode(query: &str) -> String {
    url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

#[tokio::test]
async fn await_polls_the_operation_and_returning_reads_its_target() {
    let mock = Mock::start().await;
    let base = mock.url();
    mock.route(
        "POST /projects/p1/zones/z1/instances",
        Reply::json(json!({
            "name": "op-1", "status": "RUNNING",
            "selfLink": format!("{base}/projects/p1/zones/z1/operations/op-1")
        })),
    );
    mock.route_sequence(
        "/projects/p1/zones/z1/operations/op-1",
        vec![
            Reply::json(json!({
                "name": "op-1", "status": "RUNNING",
                "selfLink": format!("{base}/projects/p1/zones/z1/operations/op-1")
            })),
            Reply::json(json!({
                "name": "op-1", "status": "DONE", "endTime": "2026-01-01T00:00:00Z",
                "targetLink": format!("{base}/projects/p1/zones/z1/instances/vm1")
            })),
        ],
    );
    mock.route(
        "/projects/p1/zones/z1/instances/vm1",
        Reply::json(json!({"name": "vm1", "status": "PROVISIONING"})),
    );
    let mut config = EngineConfig::new(crate::support::corpus::providers_root());
    config.upstream.await_operations.poll_interval = std::time::Duration::from_millis(10);
    for provider in ["google", "github"] {
        crate::support::upstream_at(&mut config, provider, base.clone());
    }
    config.providers.get_mut("google").unwrap().auth =
        Some(json!({"type": "bearer", "credentialsenvvar": "GOOGLE_TOKEN"}));
    let e = Engine::new(config).unwrap();
    let out = run(
        &e,
        "INSERT /*+ AWAIT */ INTO google.compute.instances (project, zone, name) VALUES ('p1', 'z1', 'vm1') RETURNING name, status",
    )
    .await;
    assert_eq!(row_lines(&out), ["vm1|PROVISIONING"]);
    assert!(
        out.messages[0].ends_with("operation op-1 completed"),
        "{:?}",
        out.messages
    );
    let polls = mock
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/operations/op-1"))
        .count();
    assert_eq!(polls, 2);
    // Every poll carries the provider's auth, and only to the request's origin.
    assert!(
        mock.requests()
            .iter()
            .all(|r| r.headers["authorization"] == "Bearer google-token")
    );

    // A method whose response is no Operation cannot be awaited.
    let err = e
        .execute(
            &providers_context(),
            "INSERT /*+ AWAIT */ INTO github.repos.repos (org, name) VALUES ('acme', 'r')",
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidSql, "{err}");
    assert!(err.to_string().contains("is not awaitable"), "{err}");
}

#[tokio::test]
async fn exec_is_a_row_source_of_a_select() {
    let mock = Mock::start().await;
    mock.route(
        "/orgs/acme/repos",
        Reply::json(json!([
            {"name": "a", "private": false, "topics": ["x"]},
            {"name": "b", "private": true}
        ])),
    );
    let e = providers_engine(&mock);
    let sql = "SELECT x.name, x.topics FROM (EXEC github.repos.repos.list_for_org @org = 'acme') AS x WHERE x.private = 0";
    // It runs a method: the gate sees an EXEC (lifecycle), never a read.
    let prepared = querygate::engine::PreparedStatement::parse(sql).unwrap();
    assert_eq!(prepared.kind(), querygate::engine::StatementKind::Exec);
    let parsed = querygate::engine::ParsedSql::parse(sql);
    assert_eq!(
        querygate::policy::classify(&parsed),
        querygate::policy::QueryClass::Lifecycle
    );
    let out = run(&e, sql).await;
    assert_eq!(out.columns, ["name", "topics"]);
    assert_eq!(row_lines(&out), [r#"a|["x"]"#]);
    assert_eq!(mock.paths(), ["/orgs/acme/repos"]);
}
