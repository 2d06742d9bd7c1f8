//! SELECT over one resource: rows, types, SQL features, StackQL behaviours.

use querygate::engine::Cell;
use querygate::engine::ErrorKind;
use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::*;

fn items() -> serde_json::Value {
    json!([
        {"id": 9007199254740993_i64, "name": "alpha", "score": 1.5, "active": true,
         "meta": {"owner": {"login": "ann"}}, "tags": ["x", "y"], "ignored": 1},
        {"id": 2, "name": "beta", "score": 2.5, "active": false, "meta": null, "tags": []},
        {"id": 18446744073709551615_u64, "name": "gamma", "score": 3, "active": true,
         "meta": {"owner": {"login": "bob"}}, "tags": ["y"]}
    ])
}

#[tokio::test]
async fn literal_sql_runs_without_providers() {
    let mock = Mock::start().await;
    let out = query(&engine(&mock), "SELECT 1 AS n, 'ok' AS status").await;
    assert_eq!(out.columns, vec!["n", "status"]);
    assert_eq!(out.rows, vec![vec![int(1), text("ok")]]);
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn rows_keep_types_and_nested_json_is_queryable() {
    let mock = Mock::start().await;
    mock.route("/orgs/acme/items", Reply::json(items()));
    let e = engine(&mock);
    let out = query(
        &e,
        "SELECT id, name, score, active, JSON_EXTRACT(meta, '$.owner.login') AS owner, org \
         FROM testapi.items.items WHERE org = 'acme' ORDER BY name",
    )
    .await;
    assert_eq!(
        out.columns,
        vec!["id", "name", "score", "active", "owner", "org"]
    );
    assert_eq!(
        out.rows[0],
        vec![
            int(9007199254740993),
            text("alpha"),
            Cell::Real(1.5),
            Cell::Boolean(true),
            text("ann"),
            text("acme")
        ]
    );
    assert_eq!(out.rows[1][4], Cell::Null);
    // A 64-bit id beyond i64 keeps every digit.
    assert_eq!(out.rows[2][0], text("18446744073709551615"));
    assert_eq!(out.rows[2][2], int(3));

    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("GET", "/orgs/acme/items")
    );
    assert_eq!(
        requests[0].headers["x-api-key"], SECRET,
        "custom auth header applied"
    );
    // Booleans (typed so by the schema) compare as 1/0 and come back as booleans; expressions
    // over them are numbers.
    let filtered = query(
        &e,
        "SELECT name, active, active + 0 AS n FROM testapi.items.items WHERE org = 'acme' AND active = 0",
    )
    .await;
    assert_eq!(
        filtered.rows,
        vec![vec![text("beta"), Cell::Boolean(false), int(0)]]
    );
}

#[tokio::test]
async fn select_star_yields_exactly_the_schema_properties() {
    let mock = Mock::start().await;
    mock.route("/orgs/acme/items", Reply::json(items()));
    let out = query(
        &engine(&mock),
        "SELECT * FROM testapi.items.items WHERE org = 'acme'",
    )
    .await;
    // StackQL's rule: the response schema's properties, not the supplied parameters
    // (which stay selectable by name).
    assert_eq!(
        out.columns,
        vec!["id", "name", "score", "active", "meta", "tags"]
    );
    assert_eq!(out.rows.len(), 3);
    let named = query(
        &engine(&mock),
        "SELECT org, name FROM testapi.items.items WHERE org = 'acme' LIMIT 1",
    )
    .await;
    assert_eq!(named.columns, vec!["org", "name"]);
    assert_eq!(column(&named, "org"), vec![text("acme")]);
    let tags = column(&out, "tags");
    assert_eq!(tags[0], text(r#"["x","y"]"#));
}

#[tokio::test]
async fn sql_features_run_in_sqlite() {
    let mock = Mock::start().await;
    mock.route("/orgs/acme/items", Reply::json(items()));
    let e = engine(&mock);
    let grouped = query(
        &e,
        "WITH t AS (SELECT active, score FROM testapi.items.items WHERE org = 'acme') \
         SELECT active, count(*) AS n, sum(score) AS total FROM t GROUP BY active HAVING n >= 1 ORDER BY active DESC LIMIT 5",
    )
    .await;
    assert_eq!(
        grouped.rows,
        vec![
            vec![Cell::Boolean(true), int(2), Cell::Real(4.5)],
            vec![Cell::Boolean(false), int(1), Cell::Real(2.5)]
        ]
    );

    let each = query(
        &e,
        "SELECT i.name, t.value AS tag FROM testapi.items.items i, json_each(i.tags) t \
         WHERE i.org = 'acme' ORDER BY i.name, tag",
    )
    .await;
    assert_eq!(column(&each, "tag"), vec![text("x"), text("y"), text("y")]);

    let aliased = query(
        &e,
        "SELECT name AS n FROM testapi.items.items WHERE org = 'acme' AND n = 'beta'",
    )
    .await;
    assert_eq!(aliased.rows, vec![vec![text("beta")]]);

    let union = query(
        &e,
        "SELECT name FROM testapi.items.items WHERE org = 'acme' AND name = 'beta' \
         UNION ALL SELECT 'extra' ORDER BY 1",
    )
    .await;
    assert_eq!(column(&union, "name"), vec![text("beta"), text("extra")]);
}

#[tokio::test]
async fn stackql_sql_functions_are_available() {
    let mock = Mock::start().await;
    let out = query(
        &engine(&mock),
        "SELECT split_part('a/b/c', '/', -1) AS last, regexp_like('abc', '^a') AS m, \
         regexp_replace('a1b2', '[0-9]', '') AS r, regexp_substr('x42y', '[0-9]+') AS s, \
         json_equal('{\"a\":1,\"b\":[1,2]}', '{\"b\":[1,2],\"a\":1.0}') AS j",
    )
    .await;
    assert_eq!(
        out.rows,
        vec![vec![text("c"), int(1), text("ab"), text("42"), int(1)]]
    );
}

#[tokio::test]
async fn response_shapes_follow_stackql() {
    let mock = Mock::start().await;
    mock.route("/single", Reply::json(json!({"id": 7, "name": "solo"})));
    mock.route("/empty", Reply::json(json!({})));
    mock.route(
        "/agg",
        Reply::json(json!({"items": {
            "zones/a": {"instances": [{"id": 1, "name": "a1"}, {"id": 2, "name": "a2"}]},
            "zones/b": {"warning": {"code": "NO_RESULTS_ON_PAGE"}},
            "zones/c": {"instances": [{"id": 3, "name": "c1"}]}
        }})),
    );
    mock.route(
        "/legacy",
        Reply::json(json!({"subnetworks": [{"id": 5, "name": "s"}]})),
    );
    mock.route(
        "/usable",
        Reply::json(json!({"items": [{"id": 8, "name": "u"}]})),
    );
    let e = engine(&mock);
    assert_eq!(
        query(&e, "SELECT id, name FROM testapi.items.single")
            .await
            .rows,
        vec![vec![int(7), text("solo")]]
    );
    assert!(
        query(&e, "SELECT * FROM testapi.items.empty")
            .await
            .rows
            .is_empty()
    );
    let agg = query(&e, "SELECT name FROM testapi.items.agg ORDER BY name").await;
    assert_eq!(
        column(&agg, "name"),
        vec![text("a1"), text("a2"), text("c1")]
    );
    assert_eq!(
        query(&e, "SELECT id FROM testapi.items.legacy").await.rows,
        vec![vec![int(5)]]
    );
    let dotted = query(
        &e,
        "SELECT name, project FROM testapi.items.\"projects.aggregated.usableSubnetworks\" WHERE project = 'p1'",
    )
    .await;
    assert_eq!(dotted.rows, vec![vec![text("u"), text("p1")]]);
    assert!(mock.paths().contains(&"/usable?project=p1".to_owned()));
}

#[tokio::test]
async fn optional_query_params_are_passed_through() {
    let mock = Mock::start().await;
    mock.route("/orgs/acme/items", Reply::json(items()));
    query(
        &engine(&mock),
        "SELECT name FROM testapi.items.items WHERE org = 'acme' AND state = 'open'",
    )
    .await;
    assert_eq!(mock.paths(), vec!["/orgs/acme/items?state=open"]);
}

#[tokio::test]
async fn select_method_is_chosen_by_supplied_params() {
    let mock = Mock::start().await;
    mock.route(
        "/orgs/acme/items/2",
        Reply::json(json!({"id": 2, "name": "beta"})),
    );
    let out = query(
        &engine(&mock),
        "SELECT name, id FROM testapi.items.items WHERE org = 'acme' AND id = 2",
    )
    .await;
    assert_eq!(out.rows, vec![vec![text("beta"), int(2)]]);
    assert_eq!(mock.paths(), vec!["/orgs/acme/items/2"]);
}

#[tokio::test]
async fn schemaless_rows_take_columns_from_the_data() {
    let mock = Mock::start().await;
    mock.route(
        "/free",
        Reply::json(json!([{"a": 1, "b": "x"}, {"a": 2, "c": true}])),
    );
    let out = query(&engine(&mock), "SELECT * FROM testapi.items.free").await;
    assert_eq!(out.columns, vec!["a", "b", "c"]);
    assert_eq!(out.rows[1], vec![int(2), Cell::Null, int(1)]);
}

#[tokio::test]
async fn server_variables_are_params_even_when_the_override_drops_them() {
    let mock = Mock::start().await;
    mock.route(
        "/r/eu/regional/items",
        Reply::json(json!([{"id": 1, "name": "in-eu"}])),
    );
    mock.route(
        "/regional/items",
        Reply::json(json!([{"id": 2, "name": "anywhere"}])),
    );
    // The override keeps the variable: it is substituted.
    let with_var = engine_with(&mock, |c| {
        c.providers.get_mut("testapi").unwrap().base_url =
            Some(format!("{}/r/{{region}}", mock.url()));
    });
    let out = query(
        &with_var,
        "SELECT name, region FROM testapi.items.regional WHERE region = 'eu'",
    )
    .await;
    assert_eq!(out.rows, vec![vec![text("in-eu"), text("eu")]]);
    // Values outside the enum are refused before any request.
    let err = query_err(
        &with_var,
        "SELECT name FROM testapi.items.regional WHERE region = 'evil.example/'",
    )
    .await;
    assert!(
        err.to_string()
            .contains("not allowed for server variable 'region'"),
        "{err}"
    );
    // The override drops the variable: it is still a column.
    let plain = engine(&mock);
    let out = query(
        &plain,
        "SELECT name, region FROM testapi.items.regional WHERE region = 'us'",
    )
    .await;
    assert_eq!(out.rows, vec![vec![text("anywhere"), text("us")]]);
}

#[tokio::test]
async fn configured_auth_overrides_reach_the_upstream() {
    let mock = Mock::start().await;
    mock.route("/single", Reply::json(json!({"id": 1, "name": "solo"})));
    let cases = [
        (
            json!({"type": "api_key", "credentialsenvvar": "TESTAPI_KEY", "valuePrefix": "SSWS "}),
            "authorization",
            format!("SSWS {SECRET}"),
        ),
        (
            json!({"type": "api_key", "credentialsenvvar": "TESTAPI_KEY", "location": "header", "name": "X-Key"}),
            "x-key",
            SECRET.to_owned(),
        ),
        (
            json!({"type": "bearer", "credentialsenvvar": "TESTAPI_KEY"}),
            "authorization",
            format!("Bearer {SECRET}"),
        ),
    ];
    for (auth, header, expected) in cases {
        let e = engine_with(&mock, |c| {
            c.providers.get_mut("testapi").unwrap().auth = Some(auth.clone())
        });
        let out = query(&e, "SELECT name FROM testapi.items.single").await;
        assert_eq!(out.rows, vec![vec![text("solo")]]);
        let last = mock.requests().pop().unwrap();
        assert_eq!(last.headers[header], expected.as_str(), "{auth}");
    }
    // basic from a username/password pair: base64("ann:pw")
    let e = engine_with(&mock, |c| {
        c.providers.get_mut("testapi").unwrap().auth =
            Some(json!({"type": "basic", "username_var": "U", "password_var": "P"}));
    });
    let cx = querygate::engine::ExecContext {
        credentials: std::sync::Arc::new(querygate::engine::CredentialStore::fixed([
            ("U".to_owned(), "ann".to_owned()),
            ("P".to_owned(), "pw".to_owned()),
        ])),
        ..context()
    };
    e.execute(&cx, "SELECT name FROM testapi.items.single")
        .await
        .unwrap();
    assert_eq!(
        mock.requests().pop().unwrap().headers["authorization"],
        "Basic YW5uOnB3"
    );
    // null_auth sends nothing.
    let e = engine_with(&mock, |c| {
        c.providers.get_mut("testapi").unwrap().auth = Some(json!({"type": "null_auth"}))
    });
    query(&e, "SELECT name FROM testapi.items.single").await;
    let last = mock.requests().pop().unwrap();
    assert!(last.headers.get("authorization").is_none() && last.headers.get("x-api-key").is_none());
}

#[tokio::test]
async fn a_body_is_read_whole_up_to_the_response_size_limit() {
    let mock = Mock::start().await;
    // Larger than one read from the socket, so the body arrives in many chunks.
    let rows: Vec<serde_json::Value> = (0..3000)
        .map(|i| json!({"id": i, "name": format!("item-{i:05}")}))
        .collect();
    let body = serde_json::to_vec(&rows).expect("serialises");
    let size = body.len();
    mock.route("/orgs/acme/items", Reply::bytes("application/json", body));
    let sql = "SELECT count(*) AS n, sum(id) AS ids, max(name) AS last FROM testapi.items.items WHERE org = 'acme'";
    // Exactly at the limit: every row, every byte.
    let at_limit = engine_with(&mock, |c| c.upstream.max_response_bytes = size);
    let out = query(&at_limit, sql).await;
    assert_eq!(column(&out, "n"), vec![int(3000)]);
    assert_eq!(column(&out, "ids"), vec![int(2999 * 3000 / 2)]);
    assert_eq!(column(&out, "last"), vec![Cell::Text("item-02999".into())]);
    // One byte over it: a clear error, no rows.
    let under = engine_with(&mock, |c| c.upstream.max_response_bytes = size - 1);
    let err = query_err(&under, sql).await;
    assert_eq!(err.kind(), ErrorKind::LimitExceeded, "{err}");
    assert!(
        err.to_string().contains("upstream.max_response_bytes"),
        "{err}"
    );
}
