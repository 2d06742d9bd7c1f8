//! IN fan-out, the request cap, joins that pass parameters, and 404 legs.

use querygate::engine::ErrorKind;
use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::*;

#[tokio::test]
async fn in_list_fans_out_one_request_per_value() {
    let mock = Mock::start().await;
    mock.route(
        "/orgs/a/items",
        Reply::json(json!([{"id": 1, "name": "a1"}])),
    );
    mock.route(
        "/orgs/b/items",
        Reply::json(json!([{"id": 2, "name": "b1"}, {"id": 3, "name": "b2"}])),
    );
    let out = query(
        &engine(&mock),
        "SELECT org, count(*) AS n FROM testapi.items.items WHERE org IN ('a', 'b') GROUP BY org ORDER BY org",
    )
    .await;
    assert_eq!(
        out.rows,
        vec![vec![text("a"), int(1)], vec![text("b"), int(2)]]
    );
    assert_eq!(mock.paths(), vec!["/orgs/a/items", "/orgs/b/items"]);
}

#[tokio::test]
async fn a_404_leg_contributes_no_rows() {
    let mock = Mock::start().await;
    mock.route("/orgs/a/items", Reply::json(json!([{"id": 1}])));
    // /orgs/gone/items is not routed: the mock answers 404.
    let out = query(
        &engine(&mock),
        "SELECT id, org FROM testapi.items.items WHERE org IN ('a', 'gone')",
    )
    .await;
    assert_eq!(out.rows, vec![vec![int(1), text("a")]]);
    let none = query(
        &engine(&mock),
        "SELECT id FROM testapi.items.items WHERE org = 'gone'",
    )
    .await;
    assert!(none.rows.is_empty());
}

#[tokio::test]
async fn the_request_cap_is_enforced_before_any_request() {
    let mock = Mock::start().await;
    let e = engine_with(&mock, |c| c.upstream.max_requests_per_statement = 2);
    let err = query_err(
        &e,
        "SELECT id FROM testapi.items.items WHERE org IN ('a', 'b', 'c')",
    )
    .await;
    assert_eq!(err.kind(), ErrorKind::LimitExceeded, "{err}");
    assert!(err.to_string().contains("over the limit of 2"), "{err}");
    assert!(mock.requests().is_empty());
    // Across UNION legs and subqueries: each fits alone, together they do not, and nothing
    // is sent (every leg would be answered).
    for org in ["a", "b", "c", "d", "e", "f"] {
        mock.route(&format!("/orgs/{org}/items"), Reply::json(json!([])));
    }
    let e = engine_with(&mock, |c| c.upstream.max_requests_per_statement = 4);
    let err = query_err(
        &e,
        "SELECT id FROM testapi.items.items WHERE org IN ('a', 'b', 'c') \
         UNION ALL SELECT id FROM testapi.items.items WHERE org IN ('d', 'e') \
         UNION ALL SELECT id FROM (SELECT id FROM testapi.items.items WHERE org = 'f')",
    )
    .await;
    assert_eq!(
        err.to_string(),
        "the statement needs 6 upstream requests ('testapi.items.items': 3, 'testapi.items.items': 2, 'testapi.items.items': 1), over the limit of 4 (upstream.max_requests_per_statement); nothing more was sent; narrow the IN lists or joins"
    );
    assert!(mock.requests().is_empty(), "{:?}", mock.paths());
}

#[tokio::test]
async fn a_join_supplies_another_tables_required_param() {
    let mock = Mock::start().await;
    mock.route("/orgs", Reply::json(json!([{"login": "a", "plan": "free"}, {"login": "b", "plan": "pro"}, {"login": "gone", "plan": "x"}])));
    mock.route(
        "/orgs/a/members",
        Reply::json(json!([{"login": "ann", "role": "admin"}])),
    );
    mock.route(
        "/orgs/b/members",
        Reply::json(json!([{"login": "bob", "role": "member"}, {"login": "bea", "role": "admin"}])),
    );
    let out = query(
        &engine(&mock),
        "SELECT o.login AS org, m.login AS member FROM testapi.items.orgs o \
         JOIN testapi.items.members m ON m.org = o.login WHERE m.role = 'admin' ORDER BY org",
    )
    .await;
    assert_eq!(
        out.rows,
        vec![vec![text("a"), text("ann")], vec![text("b"), text("bea")]]
    );
    assert_eq!(
        mock.paths(),
        vec![
            "/orgs",
            "/orgs/a/members",
            "/orgs/b/members",
            "/orgs/gone/members"
        ]
    );
}

#[tokio::test]
async fn union_legs_and_subqueries_are_planned_separately() {
    let mock = Mock::start().await;
    mock.route(
        "/orgs/a/items",
        Reply::json(json!([{"id": 1, "name": "x"}])),
    );
    mock.route(
        "/orgs/b/items",
        Reply::json(json!([{"id": 2, "name": "y"}])),
    );
    let out = query(
        &engine(&mock),
        "SELECT name FROM testapi.items.items WHERE org = 'a' \
         UNION SELECT name FROM (SELECT name FROM testapi.items.items WHERE org = 'b') ORDER BY name",
    )
    .await;
    assert_eq!(column(&out, "name"), vec![text("x"), text("y")]);
}
