//! Reads are reads by what each method does, not by its HTTP verb, through the real App and
//! real MCP clients against mocks on 127.0.0.1 that record every request: AWS JSON-protocol
//! reads (POST with `X-Amz-Target`) run in `read_only` and `safe` while AWS writes do not; a
//! GraphQL query in the document reads and a mutation does not; `not_read_methods` makes a
//! GET a non-read; an EXEC of an HTTP DELETE method is a delete for Cedar and the delete
//! quota; an approved SELECT bound to POST runs only the plan it was shown.

use std::path::{Path, PathBuf};

use rmcp::model::ElicitationAction;
use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::Reply;
use crate::support::SECRET;
use crate::support::gate::{Approver, approval_prompt, approver_client, params, retry};

/// The outcome record of the last call whose SQL is `sql`.
fn outcome_of(server: &TestServer, sql: &str) -> Value {
    crate::support::audited::outcome_json(server._dir.path(), sql)
}

fn rows(result: &rmcp::model::CallToolResult) -> Vec<Value> {
    result.structured_content.as_ref().unwrap()["rows"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A server over the current registry whose `aws` provider calls the mock, signing for
/// `service`, its default tenant in `mode`.
async fn aws_server(root: &Path, mode: &str) -> TestServer {
    let root = root.to_owned();
    let mode = mode.to_owned();
    start_yaml(move |mock, dir| {
        let env_file = dir.join("creds.env");
        std::fs::write(
            &env_file,
            format!("AWS_ACCESS_KEY_ID=AKIDTEST\nAWS_SECRET_ACCESS_KEY={SECRET}\n"),
        )
        .unwrap();
        format!(
            "registry:\n  root: {root}\n  url: {mock}/registry\nproviders:\n  aws:\n    base_url: {mock}\n    auth:\n      type: aws_signing_v4\n      keyIDenvvar: AWS_ACCESS_KEY_ID\n      credentialsenvvar: AWS_SECRET_ACCESS_KEY\n      signing_region: us-east-1\n      signing_service: ecs\nupstream:\n  retry:\n    initial_backoff: 10ms\n    max_backoff: 100ms\ncredentials:\n  env_file: {env}\n  process_env: false\naudit:\n  file:\n    dir: {audit}\ntenants:\n  - id: default\n    mode: {mode}\nserver:\n  listen: 127.0.0.1:0\n",
            root = root.display(),
            env = env_file.display(),
            audit = dir.join("audit").display(),
        )
    })
    .await
}

const ECS_READ: &str = "SELECT clusters FROM aws.ecs.clusters WHERE region = 'us-east-1'";
const ECS_DELETE: &str =
    "EXEC aws.ecs.clusters.delete_cluster @region = 'us-east-1', @cluster = 'prod'";
/// An AWS query-protocol document binds every action to GET, deletes included.
const IAM_DELETE: &str = "EXEC aws.iam.users.delete_user @UserName = 'ann'";
const ECS_UPDATE: &str =
    "EXEC aws.ecs.clusters.update_cluster_settings @region = 'us-east-1', @cluster = 'prod'";

/// What the ECS API answers `DescribeClusters` with (the API reference's shape).
fn describe_clusters() -> Reply {
    Reply::bytes(
        "application/x-amz-json-1.1",
        json!({"clusters": [{"clusterArn": "arn:aws:ecs:us-east-1:123456789012:cluster/prod", "clusterName": "prod", "status": "ACTIVE"}], "failures": []})
            .to_string()
            .into_bytes(),
    )
}

#[tokio::test]
async fn aws_json_protocol_reads_run_in_read_only_and_safe_and_its_writes_do_not() {
    let Some(root) = crate::provider_rules::current_registry() else {
        return;
    };
    for mode in ["read_only", "safe"] {
        let server = aws_server(&root, mode).await;
        server
            .mock
            .route("POST /DescribeClusters", describe_clusters());
        server.mock.route("POST /", describe_clusters());
        let client = modern_client(&server.url).await;
        let read = call(&client, "run_select_query", json!({"sql": ECS_READ})).await;
        assert_ne!(read.is_error, Some(true), "{mode}: {}", text_of(&read));
        let rows = rows(&read);
        assert_eq!(rows.len(), 1, "{mode}: {rows:?}");
        assert!(
            rows[0]["clusters"].to_string().contains("cluster/prod"),
            "{rows:?}"
        );
        let sent = server.mock.requests();
        assert_eq!(sent.len(), 1, "{mode}: {:?}", server.mock.paths());
        assert_eq!(sent[0].method, "POST");
        assert_eq!(
            sent[0].headers.get("x-amz-target").unwrap(),
            "AmazonEC2ContainerServiceV20141113.DescribeClusters"
        );
        let record = outcome_of(&server, ECS_READ);
        assert_eq!(record["query_class"], "select", "{mode}: {record}");
        assert_eq!(record["decision"], "allow", "{mode}: {record}");

        // The evidence, as validate_select_query gives it.
        let validated = call(&client, "validate_select_query", json!({"sql": ECS_READ})).await;
        let verdict = validated.structured_content.clone().unwrap();
        assert_eq!(verdict["class"], "select", "{verdict}");
        assert_eq!(verdict["requests"][0]["effect"], "read", "{verdict}");
        assert_eq!(
            verdict["requests"][0]["source"], "aws_access_level",
            "{verdict}"
        );
        assert_eq!(
            verdict["requests"][0]["evidence"],
            "ecs:DescribeClusters (X-Amz-Target): AWS access level Read",
            "{verdict}"
        );

        // AWS writes: an EXEC of DeleteCluster (bound to SQL DELETE) is a delete, an EXEC of
        // UpdateClusterSettings a write; neither runs in read_only, both wait for a person in
        // safe (this client cannot be asked), and nothing is sent.
        let before = server.mock.requests().len();
        for (sql, class) in [
            (ECS_DELETE, "mutation_delete"),
            (ECS_UPDATE, "mutation_create"),
            (IAM_DELETE, "mutation_delete"),
        ] {
            let result = call(&client, "run_lifecycle_operation", json!({"sql": sql})).await;
            let want = if mode == "read_only" {
                "policy.refused"
            } else {
                "policy.approval_required"
            };
            assert_eq!(
                error_code(&result),
                want,
                "{mode} {sql}: {}",
                text_of(&result)
            );
            let record = outcome_of(&server, sql);
            assert_eq!(record["query_class"], class, "{mode} {sql}: {record}");
            if mode == "read_only" {
                let message = error_message(&result);
                assert!(
                    message.contains("AWS access level Write")
                        || message.contains("iam:DeleteUser (the Action of the path): AWS access level Permissions management"),
                    "{sql}: {message}"
                );
            }
        }
        assert_eq!(server.mock.requests().len(), before, "{mode}: nothing sent");
    }
}

#[tokio::test]
async fn an_aws_json_protocol_read_is_retried_as_reads_are_and_a_write_is_sent_once() {
    let Some(root) = crate::provider_rules::current_registry() else {
        return;
    };
    let server = aws_server(&root, "full_access").await;
    server.mock.route_sequence(
        "POST /DescribeClusters",
        vec![Reply::status(503, "slow down"), describe_clusters()],
    );
    server
        .mock
        .route("POST /DeleteCluster", Reply::status(503, "slow down"));
    let client = modern_client(&server.url).await;
    let read = call(&client, "run_select_query", json!({"sql": ECS_READ})).await;
    assert_ne!(read.is_error, Some(true), "{}", text_of(&read));
    assert_eq!(server.mock.count("/DescribeClusters"), 2, "retried once");
    let write = call(
        &client,
        "run_lifecycle_operation",
        json!({"sql": ECS_DELETE}),
    )
    .await;
    assert_eq!(write.is_error, Some(true), "{}", text_of(&write));
    assert_eq!(
        server.mock.count("/DeleteCluster"),
        1,
        "a write is sent once"
    );
}

fn effects_registry() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/effects")
}

fn governance_registry() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/governance")
}

/// A server over `root` whose providers `gqlapi` and `govapi` call the mock, its default
/// tenant in `mode` with the extra settings `tenant` (indented four spaces).
async fn fixture_server(root: &Path, mode: &str, tenant: &str) -> TestServer {
    let root = root.to_owned();
    let (mode, tenant) = (mode.to_owned(), tenant.to_owned());
    start_yaml(move |mock, dir| {
        let env_file = dir.join("creds.env");
        std::fs::write(&env_file, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
        format!(
            "registry:\n  root: {root}\n  url: {mock}/registry\n  recheck_interval: 0s\nproviders:\n  gqlapi:\n    base_url: {mock}\n  govapi:\n    base_url: {mock}\ncredentials:\n  env_file: {env}\n  process_env: false\naudit:\n  file:\n    dir: {audit}\ntenants:\n  - id: default\n    mode: {mode}\n{tenant}server:\n  listen: 127.0.0.1:0\n",
            root = root.display(),
            env = env_file.display(),
            audit = dir.join("audit").display(),
        )
    })
    .await
}

#[tokio::test]
async fn a_graphql_query_reads_and_a_graphql_mutation_does_not_in_read_only() {
    let server = fixture_server(&effects_registry(), "read_only", "").await;
    server.mock.route(
        "POST /graphql/repositories",
        Reply::json(json!([{"name": "querygate"}])),
    );
    let client = modern_client(&server.url).await;
    let query = "SELECT name FROM gqlapi.graph.repositories WHERE owner = 'acme'";
    let read = call(&client, "run_select_query", json!({"sql": query})).await;
    assert_ne!(read.is_error, Some(true), "{}", text_of(&read));
    assert_eq!(outcome_of(&server, query)["query_class"], "select");
    assert_eq!(server.mock.count("/graphql/repositories"), 1);

    let mutation = "SELECT name FROM gqlapi.graph.archived WHERE id = 'r1'";
    let refused = call(&client, "run_select_query", json!({"sql": mutation})).await;
    assert_eq!(
        error_code(&refused),
        "policy.refused",
        "{}",
        text_of(&refused)
    );
    let message = error_message(&refused);
    assert!(
        message.contains("a GraphQL mutation operation (parsed)"),
        "{message}"
    );
    assert_eq!(server.mock.count("/graphql/archived"), 0);
    assert_eq!(
        outcome_of(&server, mutation)["query_class"],
        "mutation_create"
    );
}

#[tokio::test]
async fn not_read_methods_makes_a_get_a_non_read_and_read_methods_a_post_a_read() {
    let server = fixture_server(
        &governance_registry(),
        "read_only",
        "    not_read_methods: [govapi.d1.databases.list]\n    read_methods: [govapi.d1.database.query]\n",
    )
    .await;
    server.mock.route(
        "/accounts/a1/d1/database",
        Reply::json(json!([{"uuid": "u1", "name": "db1"}])),
    );
    server.mock.route(
        "POST /accounts/a1/d1/database/db1/query",
        Reply::json(json!([{"id": 1, "name": "a"}])),
    );
    let client = modern_client(&server.url).await;
    let get = "SELECT name FROM govapi.d1.databases WHERE account_id = 'a1'";
    let refused = call(&client, "run_select_query", json!({"sql": get})).await;
    assert_eq!(
        error_code(&refused),
        "policy.refused",
        "{}",
        text_of(&refused)
    );
    assert!(
        error_message(&refused).contains("tenants[].not_read_methods names it"),
        "{}",
        error_message(&refused)
    );
    assert_eq!(server.mock.requests().len(), 0);
    let post =
        "SELECT id, name FROM govapi.d1.database WHERE account_id = 'a1' AND database_id = 'db1'";
    let read = call(&client, "run_select_query", json!({"sql": post})).await;
    assert_ne!(read.is_error, Some(true), "{}", text_of(&read));
    assert_eq!(rows(&read).len(), 1);
}

/// Any call of the tenant may run, but no delete outside project `sandbox`.
const DELETE_POLICIES: &str = r#"
@id("all")
permit(principal, action, resource);

@id("no-delete-outside-sandbox")
forbid(principal, action == Querygate::Action::"mutation_delete", resource)
unless { resource.hasTag("project") && ["sandbox"].containsAll(resource.getTag("project")) };
"#;

#[tokio::test]
async fn an_exec_of_an_http_delete_method_is_a_delete_for_cedar_and_the_delete_quota() {
    let policies = tempfile::tempdir().unwrap();
    let file = policies.path().join("policies.cedar");
    std::fs::write(&file, DELETE_POLICIES).unwrap();
    let server = fixture_server(
        &governance_registry(),
        "full_access",
        &format!(
            "    policy_files: [{}]\n    quotas:\n      delete: 2/min\n      exec: 100/min\n",
            file.display()
        ),
    )
    .await;
    server
        .mock
        .route("DELETE /instances/i1", Reply::status(204, ""));
    let client = modern_client(&server.url).await;
    let exec = |project: &str| {
        format!("EXEC govapi.compute.instances.delete @name = 'i1', @project = '{project}'")
    };
    let prod = exec("prod");
    let denied = call(&client, "run_lifecycle_operation", json!({"sql": prod})).await;
    assert_eq!(error_code(&denied), "policy.denied", "{}", text_of(&denied));
    assert!(
        error_message(&denied).contains("no-delete-outside-sandbox"),
        "{}",
        error_message(&denied)
    );
    assert_eq!(outcome_of(&server, &prod)["query_class"], "mutation_delete");
    assert_eq!(server.mock.requests().len(), 0);

    let sandbox = exec("sandbox");
    let mut codes = Vec::new();
    for _ in 0..4 {
        let result = call(&client, "run_lifecycle_operation", json!({"sql": sandbox})).await;
        codes.push(if result.is_error == Some(true) {
            error_code(&result)
        } else {
            "ok".to_owned()
        });
    }
    assert_eq!(codes, ["ok", "ok", "quota.exceeded", "quota.exceeded"]);
    assert_eq!(server.mock.count("/instances/i1"), 2);
}

const POST_SELECT: &str =
    "SELECT id, name FROM govapi.d1.database WHERE account_id = 'a1' AND database_id = 'db1'";

#[tokio::test]
async fn an_approved_select_bound_to_post_runs_only_the_plan_it_was_shown() {
    let server = start_yaml(|mock, dir| {
        let root = dir.join("registry");
        copy_tree(&governance_registry(), &root);
        let env_file = dir.join("creds.env");
        std::fs::write(&env_file, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
        format!(
            "registry:\n  root: {root}\n  url: {mock}/registry\n  recheck_interval: 0s\nproviders:\n  govapi:\n    base_url: {mock}\ncredentials:\n  env_file: {env}\n  process_env: false\naudit:\n  file:\n    dir: {audit}\ntenants:\n  - id: default\n    mode: safe\nserver:\n  listen: 127.0.0.1:0\n",
            root = root.display(),
            env = env_file.display(),
            audit = dir.join("audit").display(),
        )
    })
    .await;
    server.mock.route(
        "POST /accounts/a1/d1/database/db1/query",
        Reply::json(json!([{"id": 1, "name": "a"}])),
    );
    server.mock.route(
        "POST /search-and-destroy",
        Reply::json(json!([{"id": 2, "name": "gone"}])),
    );
    let client = approver_client(&server.url, Approver::new(Some(ElicitationAction::Accept))).await;
    let asked = approval_prompt;
    let (prompt, state) = asked(
        client
            .call_tool_once(params("run_select_query", POST_SELECT))
            .await
            .unwrap(),
    );
    // The person sees the request the SELECT would send, and the plan it is bound to.
    assert!(
        prompt.contains("govapi · SELECT govapi.d1.database via method query (1 request)"),
        "{prompt}"
    );
    assert!(
        prompt.contains("POST ") && prompt.contains("/accounts/a1/d1/database/db1/query"),
        "{prompt}"
    );
    let plan = prompt
        .lines()
        .find_map(|l| l.strip_prefix("Plan: sha256:"))
        .unwrap_or_else(|| panic!("{prompt}"))
        .to_owned();
    // validate_mutation_query shows the same plan for the held SELECT.
    let validated = call(
        &modern_client(&server.url).await,
        "validate_mutation_query",
        json!({"sql": POST_SELECT}),
    )
    .await;
    let verdict = validated.structured_content.clone().unwrap();
    assert_eq!(verdict["valid"], true, "{verdict}");
    assert_eq!(verdict["class"], "lifecycle", "{verdict}");
    assert_eq!(verdict["approval"], "needs_approval", "{verdict}");
    assert_eq!(verdict["plan_hash"], format!("sha256:{plan}"), "{verdict}");
    assert_eq!(verdict["writes"][0]["verb"], "SELECT", "{verdict}");
    assert_eq!(verdict["effects"][0]["effect"], "other", "{verdict}");

    // The document moves the method's POST elsewhere while the person decides.
    let document = server
        ._dir
        .path()
        .join("registry/src/govapi/v1/services/d1.yaml");
    let text = std::fs::read_to_string(&document).unwrap();
    let changed = text
        .replace(
            "  /accounts/{account_id}/d1/database/{database_id}/query:",
            "  /search-and-destroy:",
        )
        .replace(
            "~1accounts~1{account_id}~1d1~1database~1{database_id}~1query/post",
            "~1search-and-destroy/post",
        )
        .replace(
            "        - name: account_id\n          in: path\n          required: true\n          schema: {type: string}\n        - name: database_id\n          in: path",
            "        - name: account_id\n          in: query\n          required: true\n          schema: {type: string}\n        - name: database_id\n          in: query",
        );
    assert_ne!(text, changed);
    std::fs::write(&document, changed).unwrap();

    let refused = retry(&client, "run_select_query", POST_SELECT, &state, "accept").await;
    assert_eq!(
        error_code(&refused),
        "policy.approval_invalid",
        "{}",
        text_of(&refused)
    );
    assert!(
        error_message(&refused).contains("the plan (what would be sent upstream) changed"),
        "{}",
        error_message(&refused)
    );
    assert!(
        server.mock.requests().is_empty(),
        "nothing was sent: {:?}",
        server.mock.paths()
    );
}

#[test]
fn query_explain_prints_each_requests_effect_and_sends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("creds.env");
    std::fs::write(&env_file, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
    let config = dir.path().join("config.yaml");
    // The upstream is a port nothing listens on: explaining sends nothing.
    std::fs::write(
        &config,
        format!(
            "registry:\n  root: {root}\n  url: null\nproviders:\n  govapi:\n    base_url: http://127.0.0.1:9\n  gqlapi:\n    base_url: http://127.0.0.1:9\ncredentials:\n  env_file: {env}\n  process_env: false\ntenants:\n  - id: default\n    mode: read_only\n",
            root = governance_registry().display(),
            env = env_file.display(),
        ),
    )
    .unwrap();
    let explain = |sql: &str| {
        crate::support::querygate_command()
            .arg("--config")
            .arg(&config)
            .args(["query", "--explain", sql])
            .output()
            .unwrap()
    };
    let refused = explain(POST_SELECT);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert!(
        stdout.contains("statement: lifecycle (written as select), tool run_select_query"),
        "{stdout}"
    );
    assert!(
        stdout.contains("request 1: POST govapi.d1.database.query\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "  effect: other (HTTP POST with no knowledge that it only reads: not a read; source unknown)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("decision:  refuse [policy.refused]: server is in 'read_only' mode"),
        "{stdout}"
    );
    let read = explain("SELECT name FROM govapi.d1.databases WHERE account_id = 'a1'");
    assert_eq!(read.status.code(), Some(0), "{read:?}");
    let stdout = String::from_utf8_lossy(&read.stdout);
    assert!(
        stdout.contains("  effect: read (HTTP GET reads; source http_method)"),
        "{stdout}"
    );
    assert!(stdout.contains("decision:  allow"), "{stdout}");
}
