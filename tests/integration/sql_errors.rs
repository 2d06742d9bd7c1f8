//! Errors in the statement's SQL are found before any upstream request (the final SQL is
//! compiled over the planned, empty tables first) and are told in the user's terms: the
//! word at fault with its line and column in the statement as written, never the engine's
//! internal table names or its rewritten SQL.

use querygate::engine::ErrorKind;
use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::*;

#[tokio::test]
async fn compile_errors_come_before_any_request_in_the_statements_terms() {
    let mock = Mock::start().await;
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "a"}])),
    );
    let e = engine(&mock);
    for (sql, expected) in [
        (
            "SELECT nosuch(name) FROM testapi.items.items WHERE org = 'acme'",
            "no such function: nosuch (near 'nosuch' at line 1, column 8 of the statement)",
        ),
        (
            "SELECT count(*) FROM testapi.items.items\nWHERE org = 'acme' GROUP BY nosuch",
            "no such column: nosuch (near 'nosuch' at line 2, column 29 of the statement)",
        ),
        (
            "SELECT name FROM testapi.items.items a, testapi.items.items b WHERE a.org = 'acme' AND b.org = 'acme'",
            "ambiguous column name: name (near 'name' at line 1, column 8 of the statement)",
        ),
        (
            "SELECT i.nosuch FROM testapi.items.items i WHERE org = 'acme'",
            "no such column: i.nosuch (near 'i' at line 1, column 8 of the statement)",
        ),
    ] {
        let err = query_err(&e, sql).await;
        assert_eq!(err.kind(), ErrorKind::InvalidSql, "{sql}");
        assert_eq!(err.to_string(), expected, "{sql}");
    }
    assert!(mock.requests().is_empty(), "nothing was sent");

    // The same statement, correct, runs.
    let out = query(
        &e,
        "SELECT count(*) AS n FROM testapi.items.items WHERE org = 'acme' GROUP BY name",
    )
    .await;
    assert_eq!(column(&out, "n"), [int(1)]);
    assert_eq!(mock.requests().len(), 1);
}
