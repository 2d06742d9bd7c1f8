//! The write path: INSERT/UPDATE/REPLACE/DELETE and EXEC against the mock, checking the
//! request line, headers and body the upstream received, and the error paths.

use querygate::engine::ErrorKind;
use serde_json::{Value, json};

use crate::mock::{Mock, Reply};
use crate::support::*;

fn body_json(mock: &Mock, index: usize) -> Value {
    let request = &mock.requests()[index];
    serde_json::from_slice(&request.body)
        .unwrap_or_else(|_| panic!("not JSON: {}", request.body_text()))
}

#[tokio::test]
async fn insert_values_posts_a_typed_body_and_returns_the_created_row() {
    let mock = Mock::start().await;
    mock.route(
        "POST /orgs/acme/widgets",
        Reply::json(json!({"id": "w-1", "name": "w1", "size": 3})).status_code(201),
    );
    let e = engine(&mock);
    let out = query(
        &e,
        r#"INSERT INTO testapi.widgets.widgets (org, data__name, size, enabled, labels, tags, dry_run)
           VALUES ('acme', 'w1', '3', true, '{"env": "prod"}', '["a", "b"]', false)
           RETURNING id, name"#,
    )
    .await;
    assert_eq!(out.columns, vec!["id", "name"]);
    assert_eq!(out.rows, vec![vec![text("w-1"), text("w1")]]);
    assert_eq!(out.messages.len(), 1);
    assert!(
        out.messages[0].contains("answered 201"),
        "{:?}",
        out.messages
    );
    assert!(out.timestamp.is_some());

    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/orgs/acme/widgets");
    assert_eq!(request.query.as_deref(), Some("dry_run=false"));
    assert_eq!(request.headers["x-api-key"], SECRET);
    assert_eq!(request.headers["content-type"], "application/json");
    assert_eq!(
        body_json(&mock, 0),
        json!({"name": "w1", "size": 3, "enabled": true, "labels": {"env": "prod"}, "tags": ["a", "b"]})
    );
}

#[tokio::test]
async fn insert_select_sends_one_request_per_row() {
    let mock = Mock::start().await;
    mock.route(
        "/orgs/src/items",
        Reply::json(json!([{"id": 1, "name": "one"}, {"id": 2, "name": "two"}])),
    );
    mock.route(
        "POST /orgs/acme/widgets",
        Reply::json(json!({})).status_code(201),
    );
    let e = engine(&mock);
    let out = query(
        &e,
        "INSERT INTO testapi.widgets.widgets (org, name, size) SELECT 'acme', name, id FROM testapi.items.items WHERE org = 'src'",
    )
    .await;
    assert_eq!(out.messages.len(), 2);
    assert!(out.rows.is_empty());
    let posts: Vec<Value> = (0..mock.requests().len())
        .filter(|i| mock.requests()[*i].method == "POST")
        .map(|i| body_json(&mock, i))
        .collect();
    assert_eq!(
        posts,
        vec![
            json!({"name": "one", "size": 1}),
            json!({"name": "two", "size": 2})
        ]
    );
}

#[tokio::test]
async fn update_replace_and_delete_use_patch_put_and_delete() {
    let mock = Mock::start().await;
    mock.route(
        "PATCH /orgs/acme/widgets/w-1",
        Reply::json(json!({"id": "w-1", "size": 9})),
    );
    mock.route(
        "PUT /orgs/acme/widgets/w-1",
        Reply::json(json!({"id": "w-1"})),
    );
    mock.route("DELETE /orgs/acme/widgets/w-1", Reply::status(204, ""));
    let e = engine(&mock);
    let updated = query(
        &e,
        "UPDATE testapi.widgets.widgets SET size = 9 WHERE org = 'acme' AND id = 'w-1' RETURNING size",
    )
    .await;
    assert_eq!(updated.rows, vec![vec![int(9)]]);
    query(
        &e,
        "REPLACE testapi.widgets.widgets SET name = 'n', enabled = 'false' WHERE org = 'acme' AND id = 'w-1'",
    )
    .await;
    let deleted = query(
        &e,
        "DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-1'",
    )
    .await;
    assert_eq!(deleted.messages.len(), 1);
    let requests = mock.requests();
    let lines: Vec<(String, String)> = requests
        .iter()
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect();
    assert_eq!(
        lines,
        vec![
            ("PATCH".into(), "/orgs/acme/widgets/w-1".into()),
            ("PUT".into(), "/orgs/acme/widgets/w-1".into()),
            ("DELETE".into(), "/orgs/acme/widgets/w-1".into()),
        ]
    );
    assert_eq!(body_json(&mock, 0), json!({"size": 9}));
    assert_eq!(body_json(&mock, 1), json!({"name": "n", "enabled": false}));
    assert!(requests[2].body.is_empty());
    assert!(requests.iter().all(|r| r.headers["x-api-key"] == SECRET));
}

#[tokio::test]
async fn failed_writes_are_typed_errors_and_never_retried() {
    let mock = Mock::start().await;
    mock.route(
        "POST /orgs/denied/widgets",
        Reply::status(403, r#"{"message":"forbidden"}"#),
    );
    mock.route("POST /orgs/busy/widgets", Reply::status(503, "busy"));
    mock.route(
        "DELETE /orgs/acme/widgets/gone",
        Reply::status(404, "not found"),
    );
    let e = engine(&mock);
    let denied = query_err(
        &e,
        "INSERT INTO testapi.widgets.widgets (org, name) VALUES ('denied', 'x')",
    )
    .await;
    assert_eq!(denied.kind(), ErrorKind::Upstream);
    assert!(
        denied
            .to_string()
            .starts_with(r#"upstream http error: {"http_status": 403, "retryable": false}"#),
        "{denied}"
    );
    let busy = query_err(
        &e,
        "INSERT INTO testapi.widgets.widgets (org, name) VALUES ('busy', 'x')",
    )
    .await;
    assert_eq!(busy.upstream_failure().unwrap().status, 503);
    let gone = query_err(
        &e,
        "DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'gone'",
    )
    .await;
    assert_eq!(gone.upstream_failure().unwrap().status, 404);
    // One request each: a write is sent once, whatever the status.
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn a_failure_part_way_says_what_was_already_applied() {
    let mock = Mock::start().await;
    mock.route_sequence(
        "POST /orgs/acme/widgets",
        vec![
            Reply::json(json!({})).status_code(201),
            Reply::status(500, "boom"),
        ],
    );
    let e = engine(&mock);
    let err = query_err(
        &e,
        "INSERT INTO testapi.widgets.widgets (org, name) VALUES ('acme', 'a'), ('acme', 'b')",
    )
    .await;
    assert_eq!(err.upstream_failure().unwrap().status, 500);
    assert!(
        err.to_string()
            .contains("request 2 of 2 failed; the 1 before it succeeded"),
        "{err}"
    );
}

#[tokio::test]
async fn statements_the_api_cannot_take_are_explained() {
    let mock = Mock::start().await;
    let e = engine(&mock);
    let missing = query_err(&e, "DELETE FROM testapi.widgets.widgets WHERE org = 'acme'").await;
    assert_eq!(missing.kind(), ErrorKind::MissingParameters);
    assert!(missing.to_string().contains("delete(org, id)"), "{missing}");
    let unknown_field = query_err(
        &e,
        "INSERT INTO testapi.widgets.widgets (org, colour) VALUES ('acme', 'red')",
    )
    .await;
    assert!(
        unknown_field
            .to_string()
            .contains("'colour' is neither a parameter nor a request body field")
            && unknown_field
                .to_string()
                .contains("body fields: name, size, enabled, labels, tags"),
        "{unknown_field}"
    );
    let bad_type = query_err(
        &e,
        "INSERT INTO testapi.widgets.widgets (org, size) VALUES ('acme', 'big')",
    )
    .await;
    assert!(
        bad_type
            .to_string()
            .contains("body field 'size' expects a number"),
        "{bad_type}"
    );
    let not_a_param = query_err(
        &e,
        "DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'x' AND name = 'n'",
    )
    .await;
    assert!(
        not_a_param
            .to_string()
            .contains("'name' in WHERE is not a parameter"),
        "{not_a_param}"
    );
    let no_insert = query_err(&e, "INSERT INTO testapi.items.orgs (login) VALUES ('x')").await;
    assert_eq!(no_insert.kind(), ErrorKind::UnsupportedStatement);
    assert!(
        no_insert.to_string().contains("no method bound to INSERT"),
        "{no_insert}"
    );
    assert!(
        mock.requests().is_empty(),
        "nothing may be sent for a refused statement"
    );
}

#[tokio::test]
async fn exec_calls_any_method_with_params_and_a_json_body() {
    let mock = Mock::start().await;
    mock.route(
        "POST /orgs/acme/widgets/w-1/restart",
        Reply::json(json!({"operation": "op-7", "status": "RUNNING"})).status_code(202),
    );
    let e = engine(&mock);
    let out = query(
        &e,
        r#"EXEC testapi.widgets.widgets.restart @org = 'acme', @id = 'w-1', @force = true, @delay_seconds = 5, @@json = '{"reason": "stuck"}'"#,
    )
    .await;
    assert_eq!(out.columns, vec!["operation", "status"]);
    assert_eq!(out.rows, vec![vec![text("op-7"), text("RUNNING")]]);
    assert_eq!(out.messages.len(), 1);
    let request = &mock.requests()[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/orgs/acme/widgets/w-1/restart")
    );
    assert_eq!(request.query.as_deref(), Some("force=true"));
    assert_eq!(
        body_json(&mock, 0),
        json!({"reason": "stuck", "delay_seconds": 5})
    );

    let missing = query_err(&e, "EXEC testapi.widgets.widgets.restart @org = 'acme'").await;
    assert_eq!(missing.kind(), ErrorKind::MissingParameters);
    assert!(missing.to_string().contains("needs @id"), "{missing}");
    let unknown = query_err(&e, "EXEC testapi.widgets.widgets.explode @org = 'acme'").await;
    assert!(
        unknown.to_string().contains("has no method 'explode'"),
        "{unknown}"
    );
    let bad_json = query_err(
        &e,
        "EXEC testapi.widgets.widgets.restart @org = 'a', @id = 'b', @@json = '{nope'",
    )
    .await;
    assert!(
        bad_json.to_string().contains("@@json is not valid JSON"),
        "{bad_json}"
    );
    assert_eq!(mock.requests().len(), 1);
}

/// EXEC results of other shapes, one after another: each names its own columns (the SQLite
/// thread that keeps its connection, and the compiled query reading every EXEC's result,
/// must not give one statement the columns of the one before).
#[tokio::test]
async fn exec_results_of_other_shapes_in_turn_keep_their_own_columns() {
    let mock = Mock::start().await;
    mock.route(
        "POST /orgs/wide/widgets/w-1/restart",
        Reply::json(json!({"operation": "op-1", "status": "DONE", "eta": 3})),
    );
    mock.route(
        "POST /orgs/narrow/widgets/w-1/restart",
        Reply::json(json!({"operation": "op-2"})),
    );
    let e = engine(&mock);
    for _ in 0..6 {
        let wide = query(
            &e,
            "EXEC testapi.widgets.widgets.restart @org = 'wide', @id = 'w-1'",
        )
        .await;
        assert_eq!(wide.columns, ["operation", "status", "eta"]);
        assert_eq!(
            wide.rows,
            [[
                text("op-1"),
                text("DONE"),
                querygate::engine::Cell::Integer(3)
            ]]
        );
        let narrow = query(
            &e,
            "EXEC testapi.widgets.widgets.restart @org = 'narrow', @id = 'w-1'",
        )
        .await;
        // The declared columns, and those the response adds (eta above).
        assert_eq!(narrow.columns, ["operation", "status"]);
        assert_eq!(narrow.rows, [[text("op-2"), querygate::engine::Cell::Null]]);
    }
}

#[tokio::test]
async fn a_write_without_credentials_says_how_to_recover() {
    let mock = Mock::start().await;
    let e = engine(&mock);
    let cx = querygate::engine::ExecContext {
        credentials: std::sync::Arc::new(querygate::engine::CredentialStore::empty()),
        ..context()
    };
    let err = e
        .execute(
            &cx,
            "DELETE FROM testapi.widgets.widgets WHERE org = 'a' AND id = 'b'",
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Credentials);
    assert!(
        err.to_string().starts_with("credential resolution failed for provider 'testapi' (variable TESTAPI_KEY is not set) - fix the configured env file, call reload_credentials, then retry"),
        "{err}"
    );
    assert!(mock.requests().is_empty());
}
