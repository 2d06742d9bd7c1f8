//! The plan an approval is bound to, shown: `validate_mutation_query` through the real App
//! and an rmcp client over HTTP previews each upstream request of a write (method, URL,
//! body; secrets masked) without sending it, shows the rows a DELETE would act on, and
//! gives the plan hash the elicitation prompt then shows; the approved run sends exactly
//! the previewed requests.

use rmcp::model::{CallToolResult, ElicitationAction};
use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::{Recorded, Reply};
use crate::support::SECRET;
use crate::support::gate::{Approver, approver_client, route_all, run};

const DELETE: &str = "DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-1'";

/// An INSERT with a query parameter, a body field whose value is the tenant's credential,
/// and a nested body field whose name looks secret.
fn insert() -> String {
    format!(
        r#"INSERT INTO testapi.widgets.widgets (org, dry_run, name, size, labels) VALUES ('acme', true, '{SECRET}', 3, '{{"password": "hunter2-pw", "team": "core"}}')"#
    )
}

fn structured(result: &CallToolResult) -> Value {
    assert_ne!(result.is_error, Some(true), "{}", text_of(result));
    result
        .structured_content
        .clone()
        .expect("structured content")
}

/// The one request of the verdict's one write.
fn only_request(verdict: &Value) -> &Value {
    let writes = verdict["writes"].as_array().expect("writes");
    assert_eq!(writes.len(), 1, "{verdict}");
    let requests = writes[0]["requests"].as_array().expect("requests");
    assert_eq!(requests.len(), 1, "{verdict}");
    assert_eq!(writes[0]["request_count"], 1, "{verdict}");
    assert_eq!(writes[0]["requests_not_shown"], 0, "{verdict}");
    &requests[0]
}

/// The URL the mock saw for `recorded`, as querygate wrote it.
fn url_of(base: &str, recorded: &Recorded) -> String {
    match &recorded.query {
        Some(query) => format!("{base}{}?{query}", recorded.path),
        None => format!("{base}{}", recorded.path),
    }
}

fn plan_line(prompt: &str) -> &str {
    prompt
        .lines()
        .find_map(|l| l.strip_prefix("Plan: "))
        .unwrap_or_else(|| panic!("{prompt}"))
}

#[tokio::test]
async fn validate_mutation_query_previews_exactly_what_the_approved_run_sends() {
    let server = start("safe", "").await;
    route_all(&server.mock);
    let widget = json!({"id": "w-1", "name": "old", "size": 1});
    server
        .mock
        .route("/orgs/acme/widgets/w-1", Reply::json(widget.clone()));
    server.mock.route(
        "/orgs/acme/widgets",
        Reply::json(json!([widget, {"id": "w-2", "name": "other", "size": 2}])),
    );
    let approver = Approver::new(Some(ElicitationAction::Accept));
    let client = approver_client(&server.url, approver.clone()).await;
    let base = server.mock.url();

    // An INSERT: previewed, nothing sent, the credential and the secret-named field masked.
    let sql = insert();
    let verdict = structured(&run(&client, "validate_mutation_query", &sql).await);
    assert_eq!(verdict["valid"], true, "{verdict}");
    assert_eq!(verdict["approval"], "needs_approval", "{verdict}");
    assert!(
        server.mock.requests().is_empty(),
        "{:?}",
        server.mock.paths()
    );
    let write = &verdict["writes"][0];
    assert_eq!(
        (
            &write["verb"],
            &write["provider"],
            &write["resource"],
            &write["method"]
        ),
        (
            &json!("INSERT"),
            &json!("testapi"),
            &json!("testapi.widgets.widgets"),
            &json!("create")
        ),
        "{verdict}"
    );
    let preview = only_request(&verdict).clone();
    assert_eq!(preview["http_method"], "POST");
    assert_eq!(
        preview["url"],
        format!("{base}/orgs/acme/widgets?dry_run=true")
    );
    assert_eq!(preview["media_type"], "application/json");
    let shown_body: Value = serde_json::from_str(preview["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        shown_body,
        json!({"name": "***", "size": 3, "labels": {"password": "***", "team": "core"}})
    );
    let text = serde_json::to_string(&verdict).unwrap();
    assert!(
        !text.contains(SECRET) && !text.contains("hunter2-pw"),
        "{text}"
    );
    assert_eq!(
        verdict["current_rows"]["available"], false,
        "an INSERT names no existing rows: {verdict}"
    );
    let insert_plan = verdict["plan_hash"].as_str().unwrap().to_owned();
    assert!(insert_plan.starts_with("sha256:"), "{verdict}");

    // The approved run: the prompt shows the same requests and the same hash, and sends
    // what the preview showed, unmasked.
    let ran = run(&client, "run_mutation_query", &sql).await;
    assert_ne!(ran.is_error, Some(true), "{}", text_of(&ran));
    let prompt = approver.prompts().pop().expect("the person was asked");
    assert_eq!(plan_line(&prompt), insert_plan, "{prompt}");
    assert!(
        prompt.contains(&format!(
            "  Request 1: POST {base}/orgs/acme/widgets?dry_run=true · body (application/json, "
        )),
        "{prompt}"
    );
    // What querygate shows of the request masks them (the SQL, shown last as the client
    // wrote it, holds them: the client sent them).
    let trusted = prompt.split("SQL as the client sent it").next().unwrap();
    assert!(
        !trusted.contains(SECRET) && !trusted.contains("hunter2-pw"),
        "{prompt}"
    );
    let sent = server.mock.requests();
    assert_eq!(sent.len(), 1, "{:?}", server.mock.paths());
    assert_eq!(sent[0].method, "POST");
    assert_eq!(url_of(&base, &sent[0]), preview["url"]);
    let sent_body: Value = serde_json::from_slice(&sent[0].body).unwrap();
    assert_eq!(
        sent_body,
        json!({"name": SECRET, "size": 3, "labels": {"password": "hunter2-pw", "team": "core"}})
    );
    assert_eq!(
        preview["body_bytes"],
        sent[0].body.len(),
        "the size shown is the size sent"
    );

    // A DELETE: previewed with the rows a SELECT of the same WHERE returns now; only that
    // read is sent.
    let verdict = structured(&run(&client, "validate_mutation_query", DELETE).await);
    assert_eq!(verdict["valid"], true, "{verdict}");
    let preview = only_request(&verdict).clone();
    assert_eq!(preview["http_method"], "DELETE");
    assert_eq!(preview["url"], format!("{base}/orgs/acme/widgets/w-1"));
    assert_eq!(preview["body"], Value::Null);
    let current = &verdict["current_rows"];
    assert_eq!(current["available"], true, "{verdict}");
    let columns: Vec<&str> = current["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let rows = current["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{verdict}");
    let id = columns.iter().position(|c| *c == "id").unwrap();
    assert_eq!(rows[0][id], "w-1", "{verdict}");
    let after_validation = server.mock.requests();
    assert!(
        after_validation[1..].iter().all(|r| r.method == "GET"),
        "validation sends no write: {:?}",
        server.mock.paths()
    );
    let delete_plan = verdict["plan_hash"].as_str().unwrap().to_owned();
    assert_ne!(delete_plan, insert_plan);

    let ran = run(&client, "run_mutation_query", DELETE).await;
    assert_ne!(ran.is_error, Some(true), "{}", text_of(&ran));
    let prompt = approver.prompts().pop().expect("the person was asked");
    assert_eq!(plan_line(&prompt), delete_plan, "{prompt}");
    assert!(
        prompt.contains(&format!("  Request 1: DELETE {base}/orgs/acme/widgets/w-1")),
        "{prompt}"
    );
    let deletes: Vec<Recorded> = server
        .mock
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .collect();
    assert_eq!(deletes.len(), 1);
    assert_eq!(url_of(&base, &deletes[0]), preview["url"]);
}

#[tokio::test]
async fn validate_mutation_query_reports_the_errors_a_run_would_and_sends_nothing() {
    let server = start("read_only", "").await;
    route_all(&server.mock);
    let client = modern_client(&server.url).await;
    let verdict = |result: CallToolResult| structured(&result);
    for (sql, expected) in [
        (
            "DELETE FROM testapi.widgets.nosuch WHERE org = 'acme' AND id = 'w-1'",
            "nosuch",
        ),
        (
            "DELETE FROM testapi.widgets.widgets WHERE org = 'acme'",
            "id",
        ),
        (
            "SELECT id FROM testapi.items.items WHERE org = 'acme'",
            "this statement is a SELECT: use validate_select_query",
        ),
        ("DELET FROM x", ""),
    ] {
        let found = verdict(call(&client, "validate_mutation_query", json!({"sql": sql})).await);
        assert_eq!(found["valid"], false, "{sql}: {found}");
        let errors = found["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 1, "{sql}: {found}");
        assert!(
            errors[0].as_str().unwrap().contains(expected),
            "{sql}: {found}"
        );
        assert_eq!(found["plan_hash"], Value::Null, "{found}");
    }
    // A long IN list: every request counts towards the hash, the first 20 are shown.
    let ids: Vec<String> = (0..1000).map(|i| format!("'w-{i}'")).collect();
    let many = format!(
        "DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id IN ({})",
        ids.join(", ")
    );
    let found = verdict(call(&client, "validate_mutation_query", json!({"sql": many})).await);
    let write = &found["writes"][0];
    assert_eq!(write["request_count"], 1000, "{found}");
    assert_eq!(write["requests"].as_array().map(Vec::len), Some(20));
    assert_eq!(write["requests_not_shown"], 980);
    assert_eq!(
        write["requests"][19]["url"],
        format!("{}/orgs/acme/widgets/w-19", server.mock.url())
    );
    // Valid, but this tenant's mode never runs it: said, and its rows are not read.
    let found = verdict(call(&client, "validate_mutation_query", json!({"sql": DELETE})).await);
    assert_eq!(found["valid"], true, "{found}");
    assert_eq!(found["approval"], "refuse_immediate", "{found}");
    assert_eq!(found["current_rows"]["available"], false, "{found}");
    assert!(
        server.mock.requests().is_empty(),
        "{:?}",
        server.mock.paths()
    );
}

/// A credential value with characters a URL path encodes (`My-Secret Dep`): the path holds
/// it as `My-Secret%20Dep`, and every view of the plan masks that form too.
#[tokio::test]
async fn a_credential_percent_encoded_in_the_url_path_is_masked_in_the_preview_and_the_prompt() {
    const DEPLOY: &str = "My-Secret Dep";
    let server = start_yaml(|mock, dir| {
        let env_file = dir.join("creds.env");
        std::fs::write(
            &env_file,
            format!("TESTAPI_KEY={SECRET}\nDEPLOY_NAME={DEPLOY}\n"),
        )
        .unwrap();
        format!(
            "registry:\n  root: {}\nproviders:\n  testapi:\n    base_url: {mock}\ncredentials:\n  env_file: {}\n  process_env: false\naudit:\n  file:\n    dir: {}\ntenants:\n  - id: default\n    mode: safe\nserver:\n  listen: 127.0.0.1:0\n",
            crate::support::fixture_registry().display(),
            env_file.display(),
            dir.join("audit").display()
        )
    })
    .await;
    route_all(&server.mock);
    let approver = Approver::new(Some(ElicitationAction::Decline));
    let client = approver_client(&server.url, approver.clone()).await;
    let base = server.mock.url();
    let sql = format!("DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = '{DEPLOY}'");
    let verdict = structured(&run(&client, "validate_mutation_query", &sql).await);
    let preview = only_request(&verdict);
    assert_eq!(
        preview["url"],
        format!("{base}/orgs/acme/widgets/***"),
        "{verdict}"
    );
    let shown = verdict.to_string();
    assert!(
        !shown.contains("My-Secret%20Dep") && !shown.contains("My-Secret+Dep"),
        "{shown}"
    );
    // The person asked sees the same masked request.
    run(&client, "run_mutation_query", &sql).await;
    let prompt = approver.prompts().pop().expect("the person was asked");
    let trusted = prompt.split("SQL as the client sent it").next().unwrap();
    assert!(
        trusted.contains(&format!("DELETE {base}/orgs/acme/widgets/***")),
        "{prompt}"
    );
    assert!(!trusted.contains("My-Secret"), "{prompt}");
}

/// `INSERT … SELECT` of literal rows is planned as `VALUES` is: each row's request is
/// previewed with its body, and the plan hash changes with the rows.
#[tokio::test]
async fn insert_select_of_literal_rows_is_previewed_and_hashed_like_values() {
    let server = start("safe", "").await;
    route_all(&server.mock);
    let client = approver_client(&server.url, Approver::new(None)).await;
    let verdict_of = |sql: String| {
        let client = &client;
        async move { structured(&run(client, "validate_mutation_query", &sql).await) }
    };
    let select = verdict_of(
        "INSERT INTO testapi.widgets.widgets (org, name, size) SELECT 'acme', 'a', 1 UNION ALL SELECT 'acme', 'b', 2".to_owned(),
    )
    .await;
    let values = verdict_of(
        "INSERT INTO testapi.widgets.widgets (org, name, size) VALUES ('acme', 'a', 1), ('acme', 'b', 2)".to_owned(),
    )
    .await;
    let other_rows = verdict_of(
        "INSERT INTO testapi.widgets.widgets (org, name, size) SELECT 'acme', 'a', 1 UNION ALL SELECT 'acme', 'c', 3".to_owned(),
    )
    .await;
    let bodies = |verdict: &Value| -> Vec<Value> {
        verdict["writes"][0]["requests"]
            .as_array()
            .unwrap_or_else(|| panic!("{verdict}"))
            .iter()
            .map(|r| serde_json::from_str(r["body"].as_str().unwrap_or("null")).unwrap())
            .collect()
    };
    assert_eq!(
        bodies(&select),
        [
            json!({"name": "a", "size": 1}),
            json!({"name": "b", "size": 2})
        ],
        "{select}"
    );
    assert_eq!(bodies(&select), bodies(&values));
    assert_eq!(
        select["plan_hash"], values["plan_hash"],
        "{select}\n{values}"
    );
    assert_ne!(select["plan_hash"], other_rows["plan_hash"]);
    assert!(server.mock.requests().is_empty());
}
