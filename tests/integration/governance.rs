//! Governance through real MCP clients over HTTP, against a mock upstream that records every
//! request: a SELECT bound to POST is classed by what it sends (refused in `read_only`, held
//! for approval in `safe`) unless `tenants[].read_methods` names its method, and is never
//! retried; `tenants[].pinned_parameters` refuses a statement that gives a pinned parameter
//! another value or leaves it to its default, before any request.

use std::path::{Path, PathBuf};

use querygate::config::{Config, Sources};
use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::Reply;
use crate::support::SECRET;

/// A SELECT of `govapi.d1.database.query`, a method bound to POST (as cloudflare's D1).
const POST_SELECT: &str =
    "SELECT id, name FROM govapi.d1.database WHERE account_id = 'a1' AND database_id = 'db1'";
const POST_PATH: &str = "/accounts/a1/d1/database/db1/query";
/// A SELECT of a GET method of the same provider.
const GET_SELECT: &str = "SELECT name FROM govapi.d1.databases WHERE account_id = 'a1'";
const GET_PATH: &str = "/accounts/a1/d1/database";

fn registry() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/governance")
}

/// A server over the governance fixture registry whose default tenant has `mode` and the
/// extra tenant settings `tenant` (indented four spaces).
async fn server(mode: &str, tenant: &str) -> TestServer {
    start_yaml(|mock, dir| {
        let env_file = dir.join("creds.env");
        std::fs::write(&env_file, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
        format!(
            "registry:\n  root: {root}\n  url: {mock}/registry\nproviders:\n  govapi:\n    base_url: {mock}\nupstream:\n  retry:\n    initial_backoff: 10ms\n    max_backoff: 100ms\ncredentials:\n  env_file: {env}\n  process_env: false\naudit:\n  file:\n    dir: {audit}\ntenants:\n  - id: default\n    mode: {mode}\n{tenant}server:\n  listen: 127.0.0.1:0\n",
            root = registry().display(),
            env = env_file.display(),
            audit = dir.join("audit").display(),
        )
    })
    .await
}

/// The audit records (JSON) of a server's folder.
fn audit_records(dir: &Path) -> Vec<Value> {
    let mut records = Vec::new();
    // The audit files (not `.querygate_heads`, the streams' heads).
    let location = querygate::audit::FileLocation::Dir(dir.join("audit"));
    for file in querygate::audit::location::files_of(&location).unwrap() {
        let text = std::fs::read_to_string(file).unwrap();
        records.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    records
}

/// The outcome record of the call whose SQL is `sql` (the last one).
fn outcome_of(server: &TestServer, sql: &str) -> Value {
    audit_records(server._dir.path())
        .into_iter()
        .rev()
        .find(|r| r["phase"] == "outcome" && r["sql"] == sql)
        .unwrap_or_else(|| panic!("no outcome record for {sql}"))
}

async fn select(client: &Client, sql: &str) -> rmcp::model::CallToolResult {
    call(client, "run_select_query", json!({ "sql": sql })).await
}

fn rows(result: &rmcp::model::CallToolResult) -> Vec<Value> {
    result.structured_content.as_ref().unwrap()["rows"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn a_select_bound_to_post_is_refused_in_read_only_and_held_in_safe() {
    let server = server("read_only", "").await;
    server.mock.route(
        &format!("POST {POST_PATH}"),
        Reply::json(json!([{"id": 1, "name": "a"}])),
    );
    server.mock.route(
        GET_PATH,
        Reply::json(json!([{"uuid": "u1", "name": "db1"}])),
    );
    let client = modern_client(&server.url).await;

    let refused = select(&client, POST_SELECT).await;
    assert_eq!(
        error_code(&refused),
        "policy.refused",
        "{}",
        text_of(&refused)
    );
    let message = error_message(&refused);
    assert!(
        message.starts_with("tool \"run_select_query\" refused: server is in 'read_only' mode; this SELECT runs govapi.d1.database.query with POST"),
        "{message}"
    );
    assert!(message.contains("tenants[].read_methods"), "{message}");
    assert_eq!(
        server.mock.requests().len(),
        0,
        "nothing may reach the upstream"
    );
    let record = outcome_of(&server, POST_SELECT);
    assert_eq!(record["query_class"], "lifecycle");
    assert_eq!(record["decision"], "refuse_immediate");
    assert_eq!(record["error_code"], "policy.refused");

    // A SELECT of a GET method of the same provider is a read.
    let read = select(&client, GET_SELECT).await;
    assert_ne!(read.is_error, Some(true), "{}", text_of(&read));
    assert_eq!(rows(&read).len(), 1);
    assert_eq!(server.mock.count(GET_PATH), 1);
    drop(server);

    // In safe mode it needs approval like an EXEC; a client that cannot be asked is refused.
    let server = server_safe().await;
    let client = modern_client(&server.url).await;
    let held = select(&client, POST_SELECT).await;
    assert_eq!(
        error_code(&held),
        "policy.approval_required",
        "{}",
        text_of(&held)
    );
    assert_eq!(server.mock.requests().len(), 0);
    assert_eq!(outcome_of(&server, POST_SELECT)["query_class"], "lifecycle");
}

async fn server_safe() -> TestServer {
    server("safe", "").await
}

#[tokio::test]
async fn a_post_read_named_in_read_methods_runs_once_and_is_never_retried() {
    let server = server(
        "read_only",
        "    read_methods: [govapi.d1.database.query]\n",
    )
    .await;
    let key = format!("POST {POST_PATH}");
    server.mock.route(
        &key,
        Reply::json(json!([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])),
    );
    let client = modern_client(&server.url).await;
    let ran = select(&client, POST_SELECT).await;
    assert_ne!(ran.is_error, Some(true), "{}", text_of(&ran));
    assert_eq!(rows(&ran).len(), 2);
    let sent = server.mock.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].method, "POST");
    assert_eq!(outcome_of(&server, POST_SELECT)["query_class"], "select");

    // 503: sent once, not retried (the request may have done something).
    server.mock.route(&key, Reply::status(503, "busy"));
    let failed = select(&client, POST_SELECT).await;
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(server.mock.count(POST_PATH), 2, "the POST read was retried");

    // A GET read on 503 is retried (upstream.retry.attempts, 3 by default).
    server.mock.route(GET_PATH, Reply::status(503, "busy"));
    let failed = select(&client, GET_SELECT).await;
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(server.mock.count(GET_PATH), 3);
}

const PINS: &str = "    pinned_parameters:\n      project: [sandbox, dev]\n      account_id: a1\n";

#[tokio::test]
async fn pinned_parameters_refuse_other_and_default_values_before_any_request() {
    // full_access: the mode runs everything, the pins alone refuse.
    let server = server("full_access", PINS).await;
    server
        .mock
        .route("/instances", Reply::json(json!([{"name": "vm1"}])));
    server
        .mock
        .route("/projects", Reply::json(json!([{"name": "prod"}])));
    server
        .mock
        .route("DELETE /instances/vm1", Reply::status(204, ""));
    let client = modern_client(&server.url).await;
    let refusals = [
        (
            "run_select_query",
            "SELECT name FROM govapi.compute.instances WHERE project = 'prod'",
            "the statement gives it 'prod' in govapi.compute.instances.list",
        ),
        (
            "run_select_query",
            "SELECT name FROM govapi.compute.instances",
            "govapi.compute.instances.list would run with its default",
        ),
        (
            "run_select_query",
            "SELECT name FROM govapi.compute.instances WHERE project IN ('sandbox', 'prod')",
            "gives it 'prod'",
        ),
        (
            "run_select_query",
            "SELECT i.name FROM govapi.compute.projects p JOIN govapi.compute.instances i ON i.project = p.name",
            "comes from another table's rows or an expression",
        ),
        (
            "run_select_query",
            "SELECT id FROM govapi.d1.database WHERE account_id = 'a2' AND database_id = 'db1'",
            "parameter 'account_id' is pinned to 'a1'",
        ),
        (
            "run_mutation_query",
            "DELETE FROM govapi.compute.instances WHERE name = 'vm1' AND project = 'prod'",
            "gives it 'prod' in govapi.compute.instances.delete",
        ),
        (
            "run_lifecycle_operation",
            "EXEC govapi.compute.instances.restart @name = 'vm1'",
            "govapi.compute.instances.restart would run with its default",
        ),
    ];
    for (tool, sql, why) in refusals {
        let result = call(&client, tool, json!({ "sql": sql })).await;
        assert_eq!(
            error_code(&result),
            "policy.parameter_pinned",
            "{sql}: {}",
            text_of(&result)
        );
        let message = error_message(&result);
        assert!(message.contains(why), "{sql}: {message}");
        assert!(message.ends_with("nothing was sent"), "{message}");
        assert_eq!(
            server.mock.requests().len(),
            0,
            "{sql} reached the upstream"
        );
        let record = outcome_of(&server, sql);
        assert_eq!(record["error_code"], "policy.parameter_pinned", "{sql}");
        assert_eq!(record["decision"], "refuse_immediate", "{sql}");
    }

    // Allowed values run: a fan-out over both, one request each.
    let ran = select(
        &client,
        "SELECT name FROM govapi.compute.instances WHERE project IN ('sandbox', 'dev')",
    )
    .await;
    assert_ne!(ran.is_error, Some(true), "{}", text_of(&ran));
    let mut queries: Vec<String> = server
        .mock
        .requests()
        .iter()
        .map(|r| r.query.clone().unwrap_or_default())
        .collect();
    queries.sort();
    assert_eq!(queries, ["project=dev", "project=sandbox"]);
    let deleted = call(
        &client,
        "run_mutation_query",
        json!({ "sql": "DELETE FROM govapi.compute.instances WHERE name = 'vm1' AND project = 'dev'" }),
    )
    .await;
    assert_ne!(deleted.is_error, Some(true), "{}", text_of(&deleted));
    assert_eq!(server.mock.count("/instances/vm1"), 1);
}

#[test]
fn misconfigured_rules_are_refused_at_load_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "tenants:\n  - id: default\n    read_methods: [govapi.d1.query]\n    pinned_parameters:\n      project: []\n",
    )
    .unwrap();
    let err = Config::load(&Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("tenants[0].read_methods[0]"), "{err}");
    assert!(
        err.contains("tenants[0].pinned_parameters.project"),
        "{err}"
    );
}

/// A server over the current registry whose `cloudflare` provider calls the mock.
async fn cloudflare_server(root: &Path, mode: &str, tenant: &str) -> TestServer {
    let root = root.to_owned();
    start_yaml(move |mock, dir| {
        let env_file = dir.join("creds.env");
        std::fs::write(&env_file, format!("CLOUDFLARE_API_TOKEN={SECRET}\n")).unwrap();
        format!(
            "registry:\n  root: {root}\n  url: {mock}/registry\nproviders:\n  cloudflare:\n    base_url: {mock}\ncredentials:\n  env_file: {env}\n  process_env: false\naudit:\n  file:\n    dir: {audit}\ntenants:\n  - id: default\n    mode: {mode}\n{tenant}server:\n  listen: 127.0.0.1:0\n",
            root = root.display(),
            env = env_file.display(),
            audit = dir.join("audit").display(),
        )
    })
    .await
}

#[tokio::test]
async fn cloudflare_d1_query_from_the_current_registry_is_not_a_read_unless_named() {
    let Some(root) = crate::provider_rules::current_registry() else {
        return;
    };
    let sql = "SELECT * FROM cloudflare.d1.database_query WHERE account_id = 'a1' AND database_id = 'db1'";
    let path = "/accounts/a1/d1/database/db1/query";
    let server = cloudflare_server(&root, "read_only", "").await;
    let client = modern_client(&server.url).await;
    let refused = select(&client, sql).await;
    assert_eq!(
        error_code(&refused),
        "policy.refused",
        "{}",
        text_of(&refused)
    );
    assert!(
        error_message(&refused)
            .contains("this SELECT runs cloudflare.d1.database_query.query with POST"),
        "{}",
        text_of(&refused)
    );
    assert_eq!(server.mock.requests().len(), 0);
    drop(server);

    let server = cloudflare_server(
        &root,
        "read_only",
        "    read_methods: [cloudflare.d1.database_query.query]\n    pinned_parameters:\n      account_id: a1\n",
    )
    .await;
    let client = modern_client(&server.url).await;
    let pinned = select(
        &client,
        "SELECT * FROM cloudflare.d1.database_query WHERE account_id = 'a2' AND database_id = 'db1'",
    )
    .await;
    assert_eq!(
        error_code(&pinned),
        "policy.parameter_pinned",
        "{}",
        text_of(&pinned)
    );
    assert_eq!(server.mock.requests().len(), 0);
    // Named as a read and on the pinned account: sent, once, even on 503.
    server
        .mock
        .route(&format!("POST {path}"), Reply::status(503, "busy"));
    let failed = select(&client, sql).await;
    assert_eq!(failed.is_error, Some(true), "{}", text_of(&failed));
    assert_ne!(error_code(&failed), "policy.refused");
    assert_eq!(server.mock.count(path), 1, "{}", text_of(&failed));
}

#[tokio::test]
async fn a_query_protocol_read_sent_as_a_form_post_is_still_a_read_in_read_only() {
    let Some(root) = crate::provider_rules::current_registry() else {
        return;
    };
    let server = start_yaml(move |mock, dir| {
        let env_file = dir.join("creds.env");
        std::fs::write(
            &env_file,
            format!("AWS_ACCESS_KEY_ID=AKIDTEST\nAWS_SECRET_ACCESS_KEY={SECRET}\n"),
        )
        .unwrap();
        format!(
            "registry:\n  root: {root}\n  url: {mock}/registry\nproviders:\n  aws:\n    base_url: {mock}\n    auth:\n      type: aws_signing_v4\n      keyIDenvvar: AWS_ACCESS_KEY_ID\n      credentialsenvvar: AWS_SECRET_ACCESS_KEY\n      signing_region: us-east-1\n      signing_service: iam\ncredentials:\n  env_file: {env}\n  process_env: false\naudit:\n  file:\n    dir: {audit}\ntenants:\n  - id: default\n    mode: read_only\nserver:\n  listen: 127.0.0.1:0\n",
            root = root.display(),
            env = env_file.display(),
            audit = dir.join("audit").display(),
        )
    })
    .await;
    server.mock.route(
        "/?Action=ListUsers&Version=2010-05-08",
        Reply::bytes(
            "text/xml",
            br#"<ListUsersResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><ListUsersResult><Users><member><UserId>AIDANN</UserId><Path>/</Path><UserName>ann</UserName><Arn>arn:aws:iam::123456789012:user/ann</Arn><CreateDate>2014-04-09T15:43:45Z</CreateDate></member></Users><IsTruncated>false</IsTruncated></ListUsersResult></ListUsersResponse>"#.to_vec(),
        ),
    );
    let client = modern_client(&server.url).await;
    let sql = "SELECT UserName, UserId FROM aws.iam.users";
    let result = select(&client, sql).await;
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    assert_eq!(
        rows(&result),
        [json!({"UserName": "ann", "UserId": "AIDANN"})]
    );
    // Sent as a form POST, classed by the document's GET: a read.
    let requests = server.mock.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(
        requests[0].body_text(),
        "Action=ListUsers&Version=2010-05-08"
    );
    assert_eq!(outcome_of(&server, sql)["query_class"], "select");
}
