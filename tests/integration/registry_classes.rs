//! The last failing classes of the current StackQL registry, each over the provider's real
//! document (`$QUERYGATE_COMPAT_REGISTRY/current/registry-src.tar.gz`, unchanged) with a
//! mock upstream on 127.0.0.1: views whose SELECT needs parameters, view columns that are
//! the underlying method's parameters, `SELECT … FROM (EXEC …)` of a read method through
//! `run_select_query`, a LEFT OUTER JOIN whose right-hand equalities fill request
//! parameters, non-JSON bodies of a SELECT method, the method chosen between `get` and
//! `list`, and path parameters named unlike their template.

use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::{Mock, Reply};
use crate::support::SECRET;
use crate::support::corpus::row_lines;
use crate::support::current::{context, current_registry, engine};

fn rows(result: &rmcp::model::CallToolResult) -> Vec<Value> {
    result.structured_content.as_ref().unwrap()["rows"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A server over `root` whose `provider` calls the mock with a bearer token, its default
/// tenant in `mode`.
async fn server(root: &std::path::Path, provider: &str, mode: &str) -> TestServer {
    let root = root.to_owned();
    let provider = provider.to_owned();
    let mode = mode.to_owned();
    start_yaml(move |mock, dir| {
        let env_file = dir.join("creds.env");
        std::fs::write(&env_file, format!("TOKEN={SECRET}\n")).unwrap();
        format!(
            "registry:\n  root: {root}\n  url: {mock}/registry\nproviders:\n  {provider}:\n    base_url: {mock}\n    auth:\n      type: bearer\n      credentialsenvvar: TOKEN\ncredentials:\n  env_file: {env}\n  process_env: false\naudit:\n  file:\n    dir: {audit}\ntenants:\n  - id: default\n    mode: {mode}\nserver:\n  listen: 127.0.0.1:0\n",
            root = root.display(),
            env = env_file.display(),
            audit = dir.join("audit").display(),
        )
    })
    .await
}

/// The `getIamPolicy` answer of StackQL's mocked Google (two bindings sharing members).
fn iam_policy() -> Reply {
    Reply::json(json!({
        "version": 1,
        "etag": "BwXhqDj2l5s=",
        "bindings": [
            {"role": "roles/owner", "members": ["user:joeblow@myoutfit.com", "user:somejimbo@gmail.com"]},
            {"role": "roles/billing.admin", "members": ["user:joeblow@myoutfit.com"]},
            {"role": "roles/resourcemanager.organizationAdmin", "members": ["user:joeblow@myoutfit.com", "user:somejimbo@gmail.com"]},
            {"role": "roles/compute.xpnAdmin", "members": ["user:joeblow@myoutfit.com"]}
        ]
    }))
}

const IAM_AGG: &str = "SELECT members, GROUP_CONCAT(role) AS roles FROM ( \
     EXEC google.cloudresourcemanager.organizations_iam_policies.get_iam_policy \
     @organizationsId = '123456789012' ) GROUP BY members ORDER BY members";

/// StackQL's "Google IAM Policy Agg": a SELECT over the rows of an EXEC of `getIamPolicy`
/// (a POST whose effect is read) runs through `run_select_query` in every mode, sending the
/// one POST; an EXEC of `setIamPolicy` (a write) or `testIamPermissions` inside a SELECT is
/// still refused there, naming `run_lifecycle_operation`, and sends nothing.
#[tokio::test]
async fn select_from_exec_of_a_read_method_runs_as_a_select() {
    let Some(registry) = current_registry(&[
        "src/googleapis.com/v00.00.00000/provider.yaml",
        "src/googleapis.com/v00.00.00000/services/cloudresourcemanager.yaml",
    ]) else {
        return;
    };
    for mode in ["read_only", "safe", "full_access"] {
        let server = server(registry.path(), "google", mode).await;
        server.mock.route(
            "POST /v3/organizations/123456789012:getIamPolicy",
            iam_policy(),
        );
        let client = modern_client(&server.url).await;
        let result = call(&client, "run_select_query", json!({"sql": IAM_AGG})).await;
        assert_ne!(result.is_error, Some(true), "{mode}: {}", text_of(&result));
        let got = rows(&result);
        assert_eq!(
            got,
            [
                json!({"members": "[\"user:joeblow@myoutfit.com\",\"user:somejimbo@gmail.com\"]", "roles": "roles/owner,roles/resourcemanager.organizationAdmin"}),
                json!({"members": "[\"user:joeblow@myoutfit.com\"]", "roles": "roles/billing.admin,roles/compute.xpnAdmin"}),
            ],
            "{mode}"
        );
        let sent = server.mock.requests();
        assert_eq!(sent.len(), 1, "{mode}: {sent:?}");
        assert_eq!(sent[0].method, "POST");

        let write = "SELECT * FROM (EXEC google.cloudresourcemanager.organizations_iam_policies.set_iam_policy \
                     @organizationsId = '123456789012', @@json = '{\"policy\": {\"bindings\": []}}')";
        let refused = call(&client, "run_select_query", json!({"sql": write})).await;
        assert_eq!(
            refused.is_error,
            Some(true),
            "{mode}: {}",
            text_of(&refused)
        );
        assert_eq!(
            error_code(&refused),
            "policy.wrong_tool",
            "{mode}: {}",
            text_of(&refused)
        );
        assert!(
            text_of(&refused).contains("run_lifecycle_operation"),
            "{mode}: {}",
            text_of(&refused)
        );
        assert_eq!(server.mock.requests().len(), 1, "{mode}: nothing more sent");
    }
}

/// StackQL's "Left Outer Join Network Infra" over github's documents: in a LEFT OUTER JOIN,
/// `t.org = 'acme'` fills the right-hand table's request parameter and is consumed (as
/// StackQL consumes it): the left rows without a matching team stay, null-extended.
#[tokio::test]
async fn left_outer_join_parameters_of_the_right_table_keep_unmatched_rows() {
    let Some(registry) = current_registry(&[
        "src/github/v00.00.00000/provider.yaml",
        "src/github/v00.00.00000/services/repos.yaml",
        "src/github/v00.00.00000/services/teams.yaml",
    ]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        "/orgs/acme/repos",
        Reply::json(
            json!([{"id": 1, "name": "api"}, {"id": 2, "name": "web"}, {"id": 3, "name": "docs"}]),
        ),
    );
    mock.route(
        "/orgs/acme/teams",
        Reply::json(json!([{"id": 10, "name": "API", "slug": "api"}, {"id": 11, "name": "Web", "slug": "web"}])),
    );
    let e = engine(registry.path(), "github", &mock);
    let sql = "SELECT r.name AS repo, t.slug AS team FROM github.repos.repos r \
               LEFT OUTER JOIN github.teams.teams t ON lower(r.name) = lower(t.name) \
               WHERE r.org = 'acme' AND t.org = 'acme' ORDER BY repo";
    let out = e
        .execute(&context(), sql)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["api|api", "docs|NULL", "web|web"]);
    let mut paths = mock.paths();
    paths.sort();
    assert_eq!(paths, ["/orgs/acme/repos", "/orgs/acme/teams"]);
}

/// What `formulae.brew.sh/api/formula/curl.json` answers (abridged to the fields the views
/// read).
fn curl_formula() -> Value {
    json!({
        "name": "curl",
        "full_name": "curl",
        "desc": "Get a file from an HTTP, HTTPS or FTP server",
        "homepage": "https://curl.se",
        "license": "curl",
        "generated_date": "2026-08-20",
        "versions": {"stable": "8.9.1", "head": "HEAD", "bottle": true},
        "urls": {
            "stable": {"url": "https://curl.se/download/curl-8.9.1.tar.bz2", "tag": null, "revision": null, "using": null, "checksum": "b57285d9"},
            "head": {"url": "https://github.com/curl/curl.git", "branch": "master", "using": null}
        },
        "dependencies": ["brotli", "libnghttp2", "openssl@3"],
        "head_dependencies": ["brotli"],
        "build_dependencies": ["pkgconf"],
        "test_dependencies": [],
        "optional_dependencies": [],
        "recommended_dependencies": [],
        "conflicts_with": [],
        "conflicts_with_reasons": [],
        "deprecated": false,
        "deprecation_date": null,
        "deprecation_reason": null,
        "disabled": false,
        "disable_date": null,
        "disable_reason": null,
        "analytics": {
            "install": {"30d": {"curl": 61234}, "90d": {"curl": 190000}, "365d": {"curl": 800000}},
            "install_on_request": {"30d": {"curl": 40000}, "90d": {"curl": 120000}, "365d": {"curl": 500000}},
            "build_error": {"30d": {"curl": 12}}
        }
    })
}

/// Every homebrew view (`vw_*`, whose DDL reads `homebrew.formula.formula WHERE
/// formula_name = 'stackql'`) takes the statement's `formula_name`: the one request goes to
/// that formula, and the row shows it.
#[tokio::test]
async fn homebrew_views_take_the_statements_parameters() {
    let Some(registry) = current_registry(&["src/homebrew/"]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route("/curl.json", Reply::json(curl_formula()));
    let e = engine(registry.path(), "homebrew", &mock);
    let views = [
        ("vw_info", "latest_version", "8.9.1"),
        ("vw_build_errors", "build_errors_30d", "12"),
        ("vw_usage_metrics", "installs_30d", "61234"),
        ("vw_dependencies", "build_dependencies", "[\"pkgconf\"]"),
        ("vw_conflicts", "conflicts_with", "[]"),
        ("vw_lifecycle", "deprecated", "false"),
        ("vw_urls", "head_branch", "master"),
        ("vw_versions", "bottle_available", "true"),
    ];
    for (view, column, value) in views {
        let before = mock.requests().len();
        let sql = format!(
            "SELECT formula_name, {column} FROM homebrew.formula.{view} WHERE formula_name = 'curl'"
        );
        let out = e
            .execute(&context(), &sql)
            .await
            .unwrap_or_else(|err| panic!("{view}: {err}"));
        assert_eq!(row_lines(&out), [format!("curl|{value}")], "{view}");
        let sent = mock.requests();
        assert_eq!(sent.len(), before + 1, "{view}");
        assert_eq!(sent[before].path, "/curl.json", "{view}");
    }
    // Without a WHERE, the DDL's own value (`formula_name = 'stackql'`) is sent.
    mock.route(
        "/stackql.json",
        Reply::json(json!({"name": "stackql", "versions": {"stable": "0.9.1"}})),
    );
    let out = e
        .execute(
            &context(),
            "SELECT formula_name, latest_version FROM homebrew.formula.vw_info",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["stackql|0.9.1"]);
    assert_eq!(mock.requests().last().unwrap().path, "/stackql.json");
}

/// The method StackQL chooses: the first of the resource's SELECT methods, in the order
/// the document lists them, whose required parameters the WHERE gives. fivetran's
/// `teams.connectors` lists the list (`teamId`) before the get (`teamId`, `connectorId`),
/// so a WHERE that gives both runs the list, and `connectorId`, a parameter the list does
/// not take, filters its rows as the column it is in StackQL's table (NULL there): no rows.
/// The row is found by the list's own column, `id`.
#[tokio::test]
async fn the_first_listed_select_method_whose_parameters_are_given_runs() {
    let Some(registry) = current_registry(&["src/fivetran/"]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        "/v1/teams/t1/connectors",
        Reply::json(json!({"code": "Success", "data": {"items": [
            {"id": "c1", "role": "Connector Administrator", "created_at": "2026-01-01T00:00:00Z"},
            {"id": "c2", "role": "Connector Reviewer", "created_at": "2026-02-01T00:00:00Z"}
        ]}})),
    );
    let e = engine(registry.path(), "fivetran", &mock);
    let both =
        "SELECT id, role FROM fivetran.teams.connectors WHERE teamId = 't1' AND connectorId = 'c1'";
    let out = e
        .execute(&context(), both)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert!(out.rows.is_empty(), "{:?}", row_lines(&out));
    assert_eq!(mock.paths(), ["/v1/teams/t1/connectors"]);

    let by_id = "SELECT id, role FROM fivetran.teams.connectors WHERE teamId = 't1' AND id = 'c1'";
    let out = e
        .execute(&context(), by_id)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["c1|Connector Administrator"]);
    assert_eq!(mock.paths().len(), 2);
    assert!(mock.paths().iter().all(|p| p == "/v1/teams/t1/connectors"));
}

/// Azure views whose DDL projects the underlying method's parameters by name
/// (`resourceScope`, `assignmentName`): the statement's `resourceScope` chooses `list`,
/// which does not take `assignmentName`; that name is still a column of the table, as in
/// StackQL, whose table carries the required parameters of every method of the resource
/// with the same row schema (NULL on these rows).
#[tokio::test]
async fn view_columns_that_are_parameters_of_the_resources_other_methods() {
    let Some(registry) = current_registry(&[
        "src/azure/v00.00.00000/provider.yaml",
        "src/azure/v00.00.00000/services/blueprints.yaml",
        "src/azure_extras/v00.00.00000/provider.yaml",
        "src/azure_extras/v00.00.00000/services/video_indexer.yaml",
    ]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        "/subscriptions/sub1/providers/Microsoft.Blueprint/blueprintAssignments",
        Reply::json(json!({"value": [{
            "id": "/subscriptions/sub1/providers/Microsoft.Blueprint/blueprintAssignments/a1",
            "name": "a1",
            "location": "eastus",
            "identity": {"type": "SystemAssigned"},
            "properties": {"displayName": "Baseline", "provisioningState": "succeeded", "blueprintId": "/b/1"}
        }]})),
    );
    let e = engine(registry.path(), "azure", &mock);
    let sql = "SELECT display_name, provisioning_state, resourceScope, assignmentName \
               FROM azure.blueprints.vw_assignments WHERE resourceScope = 'subscriptions/sub1'";
    let out = e
        .execute(&context(), sql)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        row_lines(&out),
        ["Baseline|succeeded|subscriptions/sub1|NULL"]
    );
    assert_eq!(
        mock.paths(),
        [
            "/subscriptions/sub1/providers/Microsoft.Blueprint/blueprintAssignments?api-version=2018-11-01-preview"
        ]
    );

    let mock = Mock::start().await;
    mock.route(
        "/subscriptions/sub1/providers/Microsoft.VideoIndexer/accounts",
        Reply::json(json!({"value": [{
            "id": "/subscriptions/sub1/resourceGroups/rg1/providers/Microsoft.VideoIndexer/accounts/vi1",
            "name": "vi1",
            "location": "westus",
            "properties": {"accountId": "0000-1111", "accountName": "vi1", "totalSecondsIndexed": 42}
        }]})),
    );
    let e = engine(registry.path(), "azure_extras", &mock);
    let sql = "SELECT account_name, total_seconds_indexed, subscriptionId, resourceGroupName, accountName \
               FROM azure_extras.video_indexer.vw_accounts WHERE subscriptionId = 'sub1'";
    let out = e
        .execute(&context(), sql)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["vi1|42|sub1|NULL|NULL"]);
}

/// databricks' `postgres.vw_branches` reads `postgres_branches`, whose list needs `parent`
/// (`projects/<id>`), a name the view does not show: the statement's `parent` goes on to
/// the table its DDL reads, as StackQL assigns a view's remaining required parameters from
/// the statement: the plan is made (no `missing_parameters`). The view itself is a document
/// defect: its DDL filters on `project_id`, which that table neither returns nor takes, so
/// it cannot be read (in StackQL either): the error names the column, before any request.
#[tokio::test]
async fn a_view_passes_parameters_it_does_not_show_to_its_tables() {
    let Some(registry) = current_registry(&[
        "src/databricks_workspace/v00.00.00000/provider.yaml",
        "src/databricks_workspace/v00.00.00000/services/postgres.yaml",
    ]) else {
        return;
    };
    let mock = Mock::start().await;
    let e = engine(registry.path(), "databricks_workspace", &mock);
    let err = e
        .execute(
            &context(),
            "SELECT name, current_state FROM databricks_workspace.postgres.vw_branches \
             WHERE project_id = 'p1' AND deployment_name = 'dbc-1' AND parent = 'projects/p1'",
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("no such column: project_id"),
        "{err}"
    );
    assert!(mock.paths().is_empty());

    // Without `parent`, nothing is sent: the missing parameter is named first.
    let err = e
        .execute(
            &context(),
            "SELECT name FROM databricks_workspace.postgres.vw_branches WHERE project_id = 'p1' AND deployment_name = 'dbc-1'",
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        querygate::engine::ErrorKind::MissingParameters,
        "{err}"
    );
    assert!(err.to_string().contains("parent"), "{err}");
    assert!(mock.paths().is_empty());
}

/// A SELECT method whose body is `application/octet-stream` (databricks' `files.download`,
/// no transform): one row, the body in `column_anon`, as StackQL gives a string body,
/// instead of `upstream.rejected` ("not valid JSON").
#[tokio::test]
async fn an_octet_stream_body_is_one_row() {
    let Some(registry) = current_registry(&[
        "src/databricks_workspace/v00.00.00000/provider.yaml",
        "src/databricks_workspace/v00.00.00000/services/files.yaml",
    ]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        "/api/2.0/fs/files/Volumes/main/default/v/hello.csv",
        Reply::bytes("application/octet-stream", b"id,name\n1,ann\n".to_vec()),
    );
    let e = engine(registry.path(), "databricks_workspace", &mock);
    let sql = "SELECT column_anon FROM databricks_workspace.files.files \
               WHERE file_path = '/Volumes/main/default/v/hello.csv' AND deployment_name = 'dbc-1'";
    let out = e
        .execute(&context(), sql)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(out.columns, ["column_anon"]);
    assert_eq!(row_lines(&out), ["id,name\n1,ann\n"]);
    assert_eq!(
        mock.paths(),
        ["/api/2.0/fs/files/Volumes/main/default/v/hello.csv"]
    );
}
