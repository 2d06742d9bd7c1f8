//! Projection push-down: a statement loads only the columns it uses, and gives the same rows
//! as running it over every column. The oracle is a plain SQLite database holding the mock's
//! rows with every column (and the parameter columns), queried with the same SQL.

use querygate::engine::Cell;
use rusqlite::Connection;
use rusqlite::types::ValueRef;
use serde_json::{Value, json};

use crate::mock::{Mock, Reply};
use crate::support::*;

fn items() -> Value {
    json!([
        {"id": 1, "name": "alpha", "score": 1.5, "active": true,
         "meta": {"owner": {"login": "ann"}}, "tags": ["x", "y"], "ignored": 1},
        {"id": 2, "name": "beta", "score": 2.5, "active": false, "meta": null, "tags": []},
        {"id": 3, "name": "gamma", "score": 3, "active": true,
         "meta": {"owner": {"login": "bob"}}, "tags": ["y"]},
        {"id": 4, "name": "delta", "active": false,
         "meta": {"owner": {"login": "ann"}}, "tags": ["z", "x"]},
        {"name": "epsilon", "score": 0.5, "extra": {"a": 1}}
    ])
}

fn members() -> Value {
    json!([
        {"login": "ann", "role": "admin"},
        {"login": "bob", "role": "member"},
        {"login": "cid", "role": "member"}
    ])
}

/// A database holding the rows with every column: items (schema properties, then the
/// parameter columns `org` and `state`) and members (`login`, `role`, `org`).
fn oracle() -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "CREATE TABLE items (id, name, score, active, meta, tags, org, state);
         CREATE TABLE members (login, role, org);",
    )
    .unwrap();
    let sql_value = |v: Option<&Value>| -> rusqlite::types::Value {
        use rusqlite::types::Value as V;
        match v {
            None | Some(Value::Null) => V::Null,
            Some(Value::Bool(b)) => V::Integer(i64::from(*b)),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(i) => V::Integer(i),
                None => V::Real(n.as_f64().unwrap()),
            },
            Some(Value::String(s)) => V::Text(s.clone()),
            Some(other) => V::Text(other.to_string()),
        }
    };
    for row in items().as_array().unwrap() {
        let cells: Vec<_> = ["id", "name", "score", "active", "meta", "tags"]
            .iter()
            .map(|c| sql_value(row.get(*c)))
            .collect();
        conn.execute(
            "INSERT INTO items VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'acme', NULL)",
            rusqlite::params_from_iter(cells),
        )
        .unwrap();
    }
    for row in members().as_array().unwrap() {
        conn.execute(
            "INSERT INTO members VALUES (?1, ?2, 'acme')",
            rusqlite::params_from_iter([sql_value(row.get("login")), sql_value(row.get("role"))]),
        )
        .unwrap();
    }
    conn
}

/// Cells as comparable text (booleans as SQLite stores them).
fn engine_cell(cell: &Cell) -> String {
    match cell {
        Cell::Null => "NULL".to_owned(),
        Cell::Boolean(b) => i64::from(*b).to_string(),
        Cell::Integer(i) => i.to_string(),
        Cell::Real(r) => format!("{r:?}"),
        Cell::Text(t) => format!("'{t}'"),
        Cell::Blob(b) => format!("{b:?}"),
    }
}

fn oracle_rows(conn: &Connection, sql: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut statement = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let columns: Vec<String> = statement.column_names().map(str::to_owned).collect();
    let width = columns.len();
    let rows = statement
        .query_map([], |row| {
            Ok((0..width)
                .map(|i| match row.get_ref(i).unwrap() {
                    ValueRef::Null => "NULL".to_owned(),
                    ValueRef::Integer(i) => i.to_string(),
                    ValueRef::Real(r) => format!("{r:?}"),
                    ValueRef::Text(t) => format!("'{}'", String::from_utf8_lossy(t)),
                    ValueRef::Blob(b) => format!("{b:?}"),
                })
                .collect::<Vec<_>>())
        })
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    (columns, rows)
}

/// Statements as the engine runs them (`{items}`, `{members}` name the API tables) and, where
/// the oracle needs other SQL (`*` shows only the response's properties), the oracle's.
const CASES: &[(&str, Option<&str>)] = &[
    // projection
    (
        "SELECT name, score FROM {items} WHERE org = 'acme' ORDER BY name",
        None,
    ),
    // case-insensitive, quoted names
    (
        "SELECT NAME, \"Score\" FROM {items} WHERE org = 'acme' ORDER BY Name",
        None,
    ),
    // WHERE, ORDER BY on columns not selected
    (
        "SELECT name FROM {items} WHERE org = 'acme' AND score > 1 AND active ORDER BY score DESC",
        None,
    ),
    (
        "SELECT id FROM {items} WHERE org = 'acme' ORDER BY json_array_length(tags), name",
        None,
    ),
    // GROUP BY, HAVING, aggregates
    (
        "SELECT active, count(*), sum(score), group_concat(name) FROM {items} \
         WHERE org = 'acme' GROUP BY active HAVING count(*) > 0 ORDER BY active",
        None,
    ),
    ("SELECT count(*) FROM {items} WHERE org = 'acme'", None),
    ("SELECT 1 AS one FROM {items} WHERE org = 'acme'", None),
    // JOIN over a nested value, with columns from both sides
    (
        "SELECT i.name, m.role FROM {items} AS i \
         JOIN {members} AS m ON m.login = json_extract(i.meta, '$.owner.login') \
         WHERE i.org = 'acme' AND m.org = 'acme' ORDER BY i.name",
        None,
    ),
    (
        "SELECT a.name, b.score FROM {items} AS a JOIN {items} AS b USING (id) \
         WHERE a.org = 'acme' AND b.org = 'acme' ORDER BY a.name",
        None,
    ),
    // subqueries and CTEs
    (
        "SELECT name FROM {items} WHERE org = 'acme' \
         AND score >= (SELECT avg(score) FROM {items} WHERE org = 'acme') ORDER BY name",
        None,
    ),
    (
        "WITH x AS (SELECT name, score FROM {items} WHERE org = 'acme') \
         SELECT name FROM x WHERE score < 3 ORDER BY 1",
        None,
    ),
    (
        "SELECT * FROM (SELECT name, tags FROM {items} WHERE org = 'acme') ORDER BY name",
        None,
    ),
    (
        "SELECT name, rank() OVER (ORDER BY score DESC) AS r FROM {items} \
         WHERE org = 'acme' ORDER BY name",
        None,
    ),
    // `*` and `alias.*`: the response's properties
    (
        "SELECT * FROM {items} WHERE org = 'acme' ORDER BY name",
        Some("SELECT id, name, score, active, meta, tags FROM items ORDER BY name"),
    ),
    (
        "SELECT i.*, m.role FROM {items} AS i \
         LEFT JOIN {members} AS m ON m.login = json_extract(i.meta, '$.owner.login') \
         WHERE i.org = 'acme' AND m.org = 'acme' ORDER BY i.name",
        // `m.org = 'acme'` fills the right table's request parameter and is consumed, as
        // StackQL consumes it: the rows without a member stay (as if it were in the ON).
        Some(
            "SELECT i.id, i.name, i.score, i.active, i.meta, i.tags, m.role FROM items AS i \
             LEFT JOIN members AS m ON m.login = json_extract(i.meta, '$.owner.login') \
             AND m.org = 'acme' WHERE i.org = 'acme' ORDER BY i.name",
        ),
    ),
];

#[tokio::test]
async fn every_statement_gives_the_rows_of_all_columns() {
    let mock = Mock::start().await;
    mock.route("/orgs/acme/items", Reply::json(items()));
    mock.route("/orgs/acme/members", Reply::json(members()));
    let engine = engine(&mock);
    let conn = oracle();
    for (sql, oracle_sql) in CASES {
        let engine_sql = sql
            .replace("{items}", "testapi.items.items")
            .replace("{members}", "testapi.items.members");
        let local_sql = oracle_sql.map(str::to_owned).unwrap_or_else(|| {
            sql.replace("{items}", "items")
                .replace("{members}", "members")
        });
        let out = query(&engine, &engine_sql).await;
        let got: Vec<Vec<String>> = out
            .rows
            .iter()
            .map(|row| row.iter().map(engine_cell).collect())
            .collect();
        let (columns, want) = oracle_rows(&conn, &local_sql);
        assert_eq!(out.columns, columns, "{engine_sql}");
        assert_eq!(got, want, "{engine_sql}");
        assert!(!want.is_empty(), "the case selects nothing: {engine_sql}");
    }
}

#[tokio::test]
async fn the_local_table_holds_only_the_columns_used() {
    let mock = Mock::start().await;
    mock.route("/orgs/acme/items", Reply::json(items()));
    let engine = engine(&mock);
    // `__qg_t0` is the local name of the statement's first API table.
    let loaded = "(SELECT group_concat(name, ',') FROM pragma_table_info('__qg_t0')) AS loaded";
    let out = query(
        &engine,
        &format!("SELECT score, {loaded} FROM testapi.items.items WHERE org = 'acme' LIMIT 1"),
    )
    .await;
    // `org = 'acme'` filled the request's parameter and is not applied again: `org` is
    // not loaded.
    assert_eq!(out.rows[0][1], text("name,score"));
    let out = query(
        &engine,
        &format!("SELECT *, {loaded} FROM testapi.items.items WHERE org = 'acme' LIMIT 1"),
    )
    .await;
    assert_eq!(
        out.rows[0].last(),
        Some(&text("id,name,score,active,meta,tags"))
    );
}
