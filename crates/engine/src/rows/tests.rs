//! Tests of the row decoder, the locator parser, the binder and the skims.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use rusqlite::Connection;

fn key(k: &str) -> Step {
    Step::Key(k.to_owned())
}

fn path(steps: Vec<Step>) -> RowLocator {
    RowLocator::Path(steps)
}

fn cols(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

/// Creates table `t` with `columns` (+ `extra` columns for fixed params), loads `body`,
/// and returns (rows inserted, connection).
fn load_with(
    body: &str,
    locator: &RowLocator,
    columns: &[&str],
    extra: &[&str],
    fixed: &[(usize, Value)],
) -> (u64, Connection) {
    let conn = Connection::open_in_memory().unwrap();
    let all: Vec<String> = columns
        .iter()
        .chain(extra)
        .map(|c| format!("\"{c}\""))
        .collect();
    conn.execute_batch(&format!("CREATE TABLE t ({})", all.join(", ")))
        .unwrap();
    let binder = ColumnBinder::new(&cols(columns));
    let n = {
        let mut writer = RowWriter::new(&conn, "t", all.len());
        load_rows(body.as_bytes(), locator, &binder, fixed, &mut writer, &[])
            .unwrap()
            .rows
    };
    (n, conn)
}

fn load(body: &str, locator: &RowLocator, columns: &[&str]) -> (u64, Connection) {
    load_with(body, locator, columns, &[], &[])
}

fn query(conn: &Connection, sql: &str) -> Vec<Vec<Value>> {
    let mut stmt = conn.prepare(sql).unwrap();
    let n = stmt.column_count();
    stmt.query_map([], |row| (0..n).map(|i| row.get::<_, Value>(i)).collect())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

// --- locator parsing ---------------------------------------------------------------------

#[test]
fn parses_jsonpath_forms() {
    let p = |s: &str| RowLocator::parse(s).unwrap();
    assert_eq!(p("$"), path(vec![]));
    assert_eq!(p("  $  "), path(vec![]));
    assert_eq!(p("$.value"), path(vec![key("value")]));
    assert_eq!(p("$[*]"), path(vec![Step::Each]));
    assert_eq!(p("$.policyResults"), path(vec![key("policyResults")]));
    assert_eq!(
        p("$.items[*].instances[*]"),
        path(vec![key("items"), Step::Each, key("instances"), Step::Each])
    );
    assert_eq!(p("$.items.*"), path(vec![key("items"), Step::Each]));
    assert_eq!(p("$['key.with.dots']"), path(vec![key("key.with.dots")]));
    assert_eq!(p("$[\"k\"]"), path(vec![key("k")]));
    assert_eq!(p("$[ 'a b' ][*]"), path(vec![key("a b"), Step::Each]));
    assert_eq!(p(r"$['it\'s']"), path(vec![key("it's")]));
    assert_eq!(p("$['a]b']"), path(vec![key("a]b")]));
    assert_eq!(p("$.a['b'].c"), path(vec![key("a"), key("b"), key("c")]));
    assert_eq!(p("$.data-set_1"), path(vec![key("data-set_1")]));
}

#[test]
fn parses_legacy_keys() {
    let p = |s: &str| RowLocator::parse(s).unwrap();
    assert_eq!(p("subnetworks"), path(vec![key("subnetworks")]));
    assert_eq!(p("items"), path(vec![key("items")]));
    assert_eq!(p("a.b"), path(vec![key("a"), key("b")]));
    assert_eq!(p("items[*]"), path(vec![key("items"), Step::Each]));
}

#[test]
fn rejects_unsupported_object_keys() {
    for bad in [
        "",
        "   ",
        "$..items",
        "$.items[?(@.x == 1)]",
        "$.items[0:2]",
        "$.items[:1]",
        "$.items[0]",
        "$.items['a','b']",
        "$.items[*",
        "$.items]",
        "$['unterminated",
        "$['a'",
        "$.",
        "$.items.",
        "$a",
        "$.a b",
        "a..b",
        "$.items[]",
        "$.items[(@.length-1)]",
        "$.items[abc]",
    ] {
        let err = RowLocator::parse(bad).expect_err(bad);
        assert!(err.contains(&format!("`{bad}`")), "{bad:?} → {err}");
    }
}

// --- column binder -----------------------------------------------------------------------

#[test]
fn binder_binds_wire_names_to_their_columns_first() {
    let wire = [
        ("public_access".to_owned(), "publicAccess".to_owned()),
        ("vpc_id".to_owned(), "VpcId".to_owned()),
        ("gone".to_owned(), "Gone".to_owned()),
    ];
    let binder =
        ColumnBinder::with_wire_names(&cols(&["name", "public_access", "vpc_id", "VpcId"]), &wire);
    assert_eq!(binder.position("publicAccess"), Some(2));
    assert_eq!(binder.position("PUBLICACCESS"), Some(2));
    assert_eq!(binder.position("public_access"), Some(2));
    // A wire name that is also a column of its own (a parameter) binds the aliased column.
    assert_eq!(binder.position("VpcId"), Some(3));
    assert_eq!(binder.position("name"), Some(1));
    // A wire name of a column not in the table binds nothing.
    assert_eq!(binder.position("Gone"), None);
}

#[test]
fn binder_is_case_insensitive_and_prefers_exact() {
    let binder = ColumnBinder::new(&cols(&["id", "selfLink", "ID", "Name", "id"]));
    assert_eq!(binder.position("id"), Some(1));
    assert_eq!(binder.position("ID"), Some(3));
    assert_eq!(binder.position("Id"), Some(1));
    assert_eq!(binder.position("selflink"), Some(2));
    assert_eq!(binder.position("SELFLINK"), Some(2));
    assert_eq!(binder.position("name"), Some(4));
    assert_eq!(binder.position("nope"), None);
    assert_eq!(binder.position(""), None);
    assert_eq!(binder.value_pos, None);
    let many: Vec<String> = (0..300).map(|i| format!("Col{i}")).collect();
    let binder = ColumnBinder::new(&many);
    for i in 0..300 {
        assert_eq!(binder.position(&format!("col{i}")), Some(i + 1));
    }
    assert_eq!(ColumnBinder::new(&[]).position("x"), None);
}

// --- loading rows ------------------------------------------------------------------------

#[test]
fn array_root() {
    let body = r#"[{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {}]"#;
    let (n, conn) = load(body, &RowLocator::Auto, &["id", "name"]);
    assert_eq!(n, 3);
    let rows = query(&conn, "SELECT id, name FROM t ORDER BY rowid");
    assert_eq!(
        rows,
        vec![
            vec![Value::Integer(1), text("a")],
            vec![Value::Integer(2), text("b")],
            vec![Value::Null, Value::Null],
        ]
    );
    let (n, _) = load(body, &RowLocator::parse("$").unwrap(), &["id"]);
    assert_eq!(n, 3);
    let (n, _) = load(body, &RowLocator::parse("$[*]").unwrap(), &["id"]);
    assert_eq!(n, 3);
}

#[test]
fn auto_items_array() {
    let body = r#"{"kind": "list", "items": [{"id": "x"}, {"id": "y"}], "nextPageToken": "t",
                   "items2": 1}"#;
    let (n, conn) = load(body, &RowLocator::Auto, &["id", "kind"]);
    assert_eq!(n, 2);
    let rows = query(&conn, "SELECT id, kind FROM t ORDER BY rowid");
    assert_eq!(
        rows,
        vec![vec![text("x"), Value::Null], vec![text("y"), Value::Null]]
    );
    let (n, _) = load(
        r#"{"items": [], "kind": "x"}"#,
        &RowLocator::Auto,
        &["kind"],
    );
    assert_eq!(n, 0);
}

#[test]
fn auto_single_object_and_empty() {
    let body = r#"{"id": 7, "name": "solo", "items": {"a": [1, 2]}, "tags": ["x"]}"#;
    let (n, conn) = load(body, &RowLocator::Auto, &["id", "name", "items", "tags"]);
    assert_eq!(n, 1);
    let rows = query(
        &conn,
        "SELECT id, name, json_extract(items, '$.a[1]'), json_extract(tags, '$[0]') FROM t",
    );
    assert_eq!(
        rows,
        vec![vec![
            Value::Integer(7),
            text("solo"),
            Value::Integer(2),
            text("x")
        ]]
    );
    let (n, _) = load("{}", &RowLocator::Auto, &["id"]);
    assert_eq!(n, 0);
    let (n, _) = load(" {} ", &RowLocator::parse("$").unwrap(), &["id"]);
    assert_eq!(n, 0);
    let (n, _) = load("null", &RowLocator::Auto, &["id"]);
    assert_eq!(n, 0);
    let (n, _) = load("  ", &RowLocator::Auto, &["id"]);
    assert_eq!(n, 0);
    // Scalar `items` under Auto: still a single row.
    let (n, conn) = load(
        r#"{"items": "s", "id": 3}"#,
        &RowLocator::Auto,
        &["items", "id"],
    );
    assert_eq!(n, 1);
    assert_eq!(
        query(&conn, "SELECT items, id FROM t"),
        vec![vec![text("s"), Value::Integer(3)]]
    );
}

#[test]
fn path_reaching_single_object_or_nothing() {
    let body = r#"{"result": {"id": 1, "name": "one"}, "empty": {}, "n": null, "s": "x"}"#;
    let (n, conn) = load(
        body,
        &RowLocator::parse("$.result").unwrap(),
        &["id", "name"],
    );
    assert_eq!(n, 1);
    assert_eq!(
        query(&conn, "SELECT id, name FROM t"),
        vec![vec![Value::Integer(1), text("one")]]
    );
    for key in [
        "$.empty",
        "$.n",
        "$.s",
        "$.missing",
        "$.result.id.deeper",
        "$.s[*]",
    ] {
        let (n, _) = load(body, &RowLocator::parse(key).unwrap(), &["id"]);
        assert_eq!(n, 0, "{key}");
    }
}

#[test]
fn google_aggregated_list() {
    let body = r#"{
      "kind": "compute#instanceAggregatedList",
      "items": {
        "zones/us-east1-b": {
          "instances": [
            {"id": "1001", "name": "vm-a", "zone": "us-east1-b"},
            {"id": "1002", "name": "vm-b", "zone": "us-east1-b"}
          ]
        },
        "zones/us-west1-a": {
          "warning": {"code": "NO_RESULTS_ON_PAGE", "message": "none",
                      "data": [{"key": "scope", "value": "zones/us-west1-a"}]}
        },
        "zones/europe-west1-c": {
          "instances": [{"id": "2001", "name": "vm-c", "zone": "europe-west1-c"}]
        }
      },
      "nextPageToken": "abc"
    }"#;
    let locator = RowLocator::parse("$.items[*].instances[*]").unwrap();
    let (n, conn) = load(body, &locator, &["id", "name", "zone"]);
    assert_eq!(n, 3);
    let rows = query(&conn, "SELECT id, name FROM t ORDER BY rowid");
    assert_eq!(
        rows,
        vec![
            vec![text("1001"), text("vm-a")],
            vec![text("1002"), text("vm-b")],
            vec![text("2001"), text("vm-c")],
        ]
    );
    // Without the trailing [*] the reached arrays are rows all the same.
    let (n, _) = load(
        body,
        &RowLocator::parse("$.items[*].instances").unwrap(),
        &["id"],
    );
    assert_eq!(n, 3);
    // Object values as rows.
    let (n, conn) = load(
        body,
        &RowLocator::parse("$.items[*]").unwrap(),
        &["warning"],
    );
    assert_eq!(n, 3);
    assert_eq!(
        query(
            &conn,
            "SELECT json_extract(warning, '$.code') FROM t WHERE warning IS NOT NULL"
        ),
        vec![vec![text("NO_RESULTS_ON_PAGE")]]
    );
}

#[test]
fn legacy_key() {
    let body = r#"{"subnetworks": [{"name": "a"}, {"name": "b"}], "other": [{"name": "z"}]}"#;
    let (n, conn) = load(body, &RowLocator::parse("subnetworks").unwrap(), &["name"]);
    assert_eq!(n, 2);
    assert_eq!(
        query(&conn, "SELECT name FROM t ORDER BY rowid"),
        vec![vec![text("a")], vec![text("b")]]
    );
    let body = r#"{"a": {"b": [{"name": "deep"}]}}"#;
    let (n, _) = load(body, &RowLocator::parse("a.b").unwrap(), &["name"]);
    assert_eq!(n, 1);
}

#[test]
fn value_types() {
    let body = r#"[{
        "big": 18446744073709551615,
        "id": 9223372036854775807,
        "neg": -9223372036854775808,
        "huge": 123456789012345678901234567890,
        "f": 1.5, "e": 2e3, "negf": -0.25,
        "t": true, "fl": false, "nul": null,
        "esc": "a\"b\u00e9\n",
        "plain": "héllo",
        "empty": "",
        "nested": {"a": {"b": [1, {"c": "d"}]}},
        "arr": [1, 2, 3]
    }]"#;
    let columns = [
        "big", "id", "neg", "huge", "f", "e", "negf", "t", "fl", "nul", "esc", "plain", "empty",
        "nested", "arr",
    ];
    let (n, conn) = load(body, &RowLocator::Auto, &columns);
    assert_eq!(n, 1);
    let rows = query(&conn, &format!("SELECT {} FROM t", columns.join(", ")));
    assert_eq!(
        rows[0],
        vec![
            text("18446744073709551615"),
            Value::Integer(i64::MAX),
            Value::Integer(i64::MIN),
            Value::Real(1.2345678901234568e29),
            Value::Real(1.5),
            Value::Real(2000.0),
            Value::Real(-0.25),
            Value::Integer(1),
            Value::Integer(0),
            Value::Null,
            text("a\"b\u{e9}\n"),
            text("héllo"),
            text(""),
            text(r#"{"a": {"b": [1, {"c": "d"}]}}"#),
            text("[1, 2, 3]"),
        ]
    );
    let types = query(
        &conn,
        "SELECT typeof(big), typeof(id), typeof(f), typeof(t), typeof(nul), typeof(nested) \
         FROM t",
    );
    assert_eq!(
        types[0],
        ["text", "integer", "real", "integer", "null", "text"].map(text)
    );
    let extracted = query(
        &conn,
        "SELECT json_extract(nested, '$.a.b[1].c'), json_extract(arr, '$[2]') FROM t",
    );
    assert_eq!(extracted[0], vec![text("d"), Value::Integer(3)]);
}

#[test]
fn case_insensitive_columns_and_unknown_properties() {
    let body = r#"[{"SelfLink": "l", "NAME": "n", "unknown": {"deep": [1, 2, {"x": null}]},
                    "zz": "ignored", "Id": 5}]"#;
    let (n, conn) = load(body, &RowLocator::Auto, &["selfLink", "name", "id"]);
    assert_eq!(n, 1);
    assert_eq!(
        query(&conn, "SELECT selfLink, name, id FROM t"),
        vec![vec![text("l"), text("n"), Value::Integer(5)]]
    );
}

#[test]
fn fixed_params_and_overrides() {
    // Columns: id, org (both from JSON), then `region` only fixed. org is also fixed.
    let body = r#"[{"id": 1}, {"id": 2, "org": "json-org"}, {"id": 3, "org": null},
                   {"id": 4, "region": "json-region"}]"#;
    let fixed = vec![(2, text("param-org")), (3, text("param-region"))];
    let (n, conn) = load_with(body, &RowLocator::Auto, &["id", "org"], &["region"], &fixed);
    assert_eq!(n, 4);
    assert_eq!(
        query(&conn, "SELECT id, org, region FROM t ORDER BY id"),
        vec![
            vec![Value::Integer(1), text("param-org"), text("param-region")],
            vec![Value::Integer(2), text("json-org"), text("param-region")],
            vec![Value::Integer(3), text("param-org"), text("param-region")],
            // `region` is not a binder column: the fixed value stays.
            vec![Value::Integer(4), text("param-org"), text("param-region")],
        ]
    );
}

#[test]
fn every_row_starts_from_null() {
    let body = r#"[{"a": 1, "b": 2}, {"a": 3}, {"b": 4}]"#;
    let (_, conn) = load(body, &RowLocator::Auto, &["a", "b"]);
    assert_eq!(
        query(&conn, "SELECT a, b FROM t ORDER BY rowid"),
        vec![
            vec![Value::Integer(1), Value::Integer(2)],
            vec![Value::Integer(3), Value::Null],
            vec![Value::Null, Value::Integer(4)],
        ]
    );
}

#[test]
fn no_value_of_one_batch_stays_bound_in_the_next() {
    // 64 rows with `b`, then 66 without: the second full batch reuses the first's INSERT.
    let rows: Vec<String> = (0..130)
        .map(|i| match i < 64 {
            true => format!(r#"{{"a": {i}, "b": "x"}}"#),
            false => format!(r#"{{"a": {i}}}"#),
        })
        .collect();
    let (n, conn) = load(
        &format!("[{}]", rows.join(",")),
        &RowLocator::Auto,
        &["a", "b"],
    );
    assert_eq!(n, 130);
    assert_eq!(
        query(&conn, "SELECT count(a), count(b) FROM t"),
        vec![vec![Value::Integer(130), Value::Integer(64)]]
    );
}

#[test]
fn duplicate_keys_last_wins() {
    let (_, conn) = load(
        r#"[{"a": 1, "a": 2}, {"a": 1, "a": null}]"#,
        &RowLocator::Auto,
        &["a"],
    );
    assert_eq!(
        query(&conn, "SELECT a FROM t ORDER BY rowid"),
        vec![vec![Value::Integer(2)], vec![Value::Null]]
    );
}

#[test]
fn escaped_keys() {
    let (n, conn) = load(
        r#"[{"n\u0061me": "x", "\"q\"": 1}]"#,
        &RowLocator::Auto,
        &["name", "\"q\""],
    );
    assert_eq!(n, 1);
    assert_eq!(query(&conn, "SELECT name FROM t"), vec![vec![text("x")]]);
    let (n, _) = load(
        r#"{"w\u0061pper": [{"name": 1}]}"#,
        &RowLocator::parse("$.wapper").unwrap(),
        &["name"],
    );
    assert_eq!(n, 1);
}

#[test]
fn non_object_rows_bind_to_value() {
    let body = r#"["a", 1, 18446744073709551615, 2.5, true, null, [1, [2]], {"value": "obj"}]"#;
    let (n, conn) = load(body, &RowLocator::Auto, &["value"]);
    assert_eq!(n, 8);
    assert_eq!(
        query(&conn, "SELECT value FROM t ORDER BY rowid"),
        vec![
            vec![text("a")],
            vec![Value::Integer(1)],
            vec![text("18446744073709551615")],
            vec![Value::Real(2.5)],
            vec![Value::Integer(1)],
            vec![Value::Null],
            vec![text("[1,[2]]")],
            vec![text("obj")],
        ]
    );
    // No `value` column: non-object rows are skipped.
    let (n, _) = load(body, &RowLocator::Auto, &["other"]);
    assert_eq!(n, 1);
}

#[test]
fn invalid_json_is_an_error() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE t (id)").unwrap();
    let mut stmt = RowWriter::new(&conn, "t", 1);
    let binder = ColumnBinder::new(&cols(&["id"]));
    for bad in [
        "[{\"id\": 1},",
        "{\"items\": [1,]}",
        "[1] trailing",
        "nope",
        "{\"id\": \"\\x\"}",
        "{\"a\":}",
    ] {
        for locator in [RowLocator::Auto, RowLocator::parse("$.items").unwrap()] {
            let err =
                load_rows(bad.as_bytes(), &locator, &binder, &[], &mut stmt, &[]).expect_err(bad);
            assert!(matches!(err, RowsError::Json(_)), "{bad}: {err}");
            assert!(
                err.to_string()
                    .starts_with("response body is not valid JSON")
            );
        }
    }
}

#[test]
fn invalid_utf8_fails_only_where_it_is_read() {
    // In a skipped value: the body is read as bytes and the row loads, as before.
    let body = b"[{\"id\": 1, \"junk\": \"\xff\xfe\"}]";
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE t (id, junk)").unwrap();
    let mut stmt = RowWriter::new(&conn, "t", 2);
    let only_id = ColumnBinder::new(&cols(&["id"]));
    assert_eq!(
        load_rows(body, &path(vec![]), &only_id, &[], &mut stmt, &[])
            .unwrap()
            .rows,
        1
    );
    // In a bound value or a key: an error.
    let both = ColumnBinder::new(&cols(&["id", "junk"]));
    let err = load_rows(body, &path(vec![]), &both, &[], &mut stmt, &[]).unwrap_err();
    assert!(matches!(err, RowsError::Json(_)), "{err}");
    let bad_key = b"[{\"id\": 1, \"\xff\": 2}]";
    assert!(load_rows(bad_key, &path(vec![]), &only_id, &[], &mut stmt, &[]).is_err());
}

#[test]
fn sqlite_errors_surface() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE t (id INTEGER NOT NULL)")
        .unwrap();
    let mut stmt = RowWriter::new(&conn, "t", 1);
    let binder = ColumnBinder::new(&cols(&["id"]));
    let err = load_rows(
        b"[{\"id\": 1}, {}]",
        &RowLocator::Auto,
        &binder,
        &[],
        &mut stmt,
        &[],
    )
    .unwrap_err();
    assert!(matches!(err, RowsError::Sqlite(_)), "{err}");
    let err = load_rows(
        b"{\"x\": 1}",
        &RowLocator::Auto,
        &binder,
        &[],
        &mut stmt,
        &[],
    )
    .unwrap_err();
    assert!(matches!(err, RowsError::Sqlite(_)), "{err}");
    let err = load_rows(
        b"[{}]",
        &RowLocator::Auto,
        &binder,
        &[(5, text("x"))],
        &mut stmt,
        &[],
    )
    .unwrap_err();
    assert!(matches!(err, RowsError::Sqlite(_)), "{err}");
}

// --- extract_scalars ---------------------------------------------------------------------

#[test]
fn extracts_scalars() {
    let body = br#"{
        "nextPageToken": "tok\"en",
        "result_info": {"page": 2, "per_page": 50, "total": 1.50, "more": true, "n": null,
                        "obj": {"x": 1}},
        "@odata.nextLink": "https://x/y?$skip=10",
        "rows": [{"nextPageToken": "inner"}],
        "big": 18446744073709551615
    }"#;
    let paths: Vec<Vec<String>> = [
        &["nextPageToken"][..],
        &["result_info", "page"],
        &["result_info", "total"],
        &["result_info", "more"],
        &["result_info", "n"],
        &["result_info", "obj"],
        &["result_info", "missing"],
        &["@odata.nextLink"],
        &["rows"],
        &["rows", "nextPageToken"],
        &["nextPageToken", "deeper"],
        &["big"],
        &["absent", "x"],
    ]
    .iter()
    .map(|p| p.iter().map(|s| (*s).to_owned()).collect())
    .collect();
    let got = extract_scalars(body, &paths).unwrap();
    let want: Vec<Option<String>> = [
        Some("tok\"en"),
        Some("2"),
        Some("1.50"),
        Some("true"),
        None,
        None,
        None,
        Some("https://x/y?$skip=10"),
        None,
        None,
        None,
        Some("18446744073709551615"),
        None,
    ]
    .iter()
    .map(|v| v.map(str::to_owned))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn extract_scalars_edge_cases() {
    let paths = vec![vec!["a".to_owned()], vec!["a".to_owned(), "b".to_owned()]];
    assert_eq!(extract_scalars(b"", &paths).unwrap(), vec![None, None]);
    assert_eq!(extract_scalars(b" \n", &paths).unwrap(), vec![None, None]);
    assert_eq!(
        extract_scalars(b"[1, 2]", &paths).unwrap(),
        vec![None, None]
    );
    // A path ending where another continues: whichever shape the value has.
    assert_eq!(
        extract_scalars(br#"{"a": {"b": -3}}"#, &paths).unwrap(),
        vec![None, Some("-3".to_owned())]
    );
    assert_eq!(
        extract_scalars(br#"{"a": 2.5}"#, &paths).unwrap(),
        vec![Some("2.5".to_owned()), None]
    );
    assert_eq!(
        extract_scalars(br#"{"a": false}"#, &paths).unwrap(),
        vec![Some("false".to_owned()), None]
    );
    // Root path.
    assert_eq!(
        extract_scalars(b"\"x\"", &[vec![]]).unwrap(),
        vec![Some("x".to_owned())]
    );
    assert!(extract_scalars(b"{\"a\": ", &paths).is_err());
    assert!(extract_scalars(b"{\"a\": 1} x", &[]).is_err());
}

// --- discover_columns --------------------------------------------------------------------

/// The names [`discover_columns`] finds (no scalars wanted).
fn discover_names(body: &[u8], locator: &RowLocator) -> serde_json::Result<Vec<String>> {
    discover_columns(body, locator, &[]).map(|(names, _)| names)
}

#[test]
fn discovers_columns() {
    let body = br#"{"items": [{"id": 1, "name": "a"}, {"name": "b", "Labels": {"k": "v"}},
                              {"ID": 3, "extra": null}], "nextPageToken": "x"}"#;
    assert_eq!(
        discover_names(body, &RowLocator::Auto).unwrap(),
        cols(&["id", "name", "Labels", "extra"])
    );
    assert_eq!(
        discover_names(body, &RowLocator::parse("$").unwrap()).unwrap(),
        cols(&["items", "nextPageToken"])
    );
    assert_eq!(
        discover_names(br#"["a", "b"]"#, &RowLocator::Auto).unwrap(),
        cols(&["value"])
    );
    assert!(discover_names(b"", &RowLocator::Auto).unwrap().is_empty());
    assert!(discover_names(b"{}", &RowLocator::Auto).unwrap().is_empty());
    let wide: String = (0..600)
        .map(|i| format!("\"c{i}\": {i}"))
        .collect::<Vec<_>>()
        .join(",");
    let got = discover_names(format!("[{{{wide}}}]").as_bytes(), &RowLocator::Auto).unwrap();
    assert_eq!(got.len(), MAX_DISCOVERED_COLUMNS);
    assert_eq!(got[511], "c511");
    assert!(discover_names(b"[{\"a\": 1", &RowLocator::Auto).is_err());
}

// --- scalars read while loading ----------------------------------------------------------

/// Loads `body` into a table of `id` and returns the ids loaded and the scalars at `wanted`.
fn load_scanning(
    body: &str,
    locator: &RowLocator,
    wanted: &[Vec<String>],
) -> (Vec<Vec<Value>>, Vec<Option<String>>) {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE t (id)").unwrap();
    let binder = ColumnBinder::new(&cols(&["id"]));
    let loaded = {
        let mut stmt = RowWriter::new(&conn, "t", 1);
        load_rows(body.as_bytes(), locator, &binder, &[], &mut stmt, wanted).unwrap()
    };
    let ids = query(&conn, "SELECT id FROM t");
    assert_eq!(loaded.rows as usize, ids.len());
    let names = discover_columns(body.as_bytes(), locator, wanted).unwrap();
    assert_eq!(names.1, loaded.scalars, "discover and load agree on {body}");
    (ids, loaded.scalars)
}

#[test]
fn scalars_are_found_wherever_they_sit_in_the_body() {
    let wanted = vec![
        cols(&["nextPageToken"]),
        cols(&["@odata.nextLink"]),
        cols(&["next_cursor"]),
        cols(&["response_metadata", "next_cursor"]),
        cols(&["result_info", "page"]),
        cols(&["result_info", "total_pages"]),
    ];
    let rows = r#"[{"id": 1}, {"id": 2, "nextPageToken": "inside-a-row"}]"#;
    let meta = r#""response_metadata": {"next_cursor": "c2"}, "result_info": {"page": 2, "total_pages": 7}"#;
    let token = r#""nextPageToken": "t\"1""#;
    let mut bodies = Vec::new();
    for key in ["items", "value", "data"] {
        bodies.push(format!(r#"{{{token}, "{key}": {rows}, {meta}}}"#));
        bodies.push(format!(r#"{{"{key}": {rows}, {token}, {meta}}}"#));
        bodies.push(format!(r#"{{{meta}, "{key}": {rows}, {token}}}"#));
        bodies.push(format!(
            r#"{{"other": [{rows}], "{key}": {rows}, {meta}, {token}, "x": null}}"#
        ));
    }
    let expected = extract_scalars(bodies[0].as_bytes(), &wanted).unwrap();
    assert_eq!(expected[0].as_deref(), Some("t\"1"));
    assert_eq!(expected[3].as_deref(), Some("c2"));
    assert_eq!(expected[4].as_deref(), Some("2"));
    for body in &bodies {
        let key = ["items", "value", "data"]
            .into_iter()
            .find(|k| body.contains(&format!("\"{k}\": [")))
            .unwrap();
        for locator in [
            RowLocator::Auto,
            RowLocator::parse(&format!("$.{key}")).unwrap(),
            RowLocator::parse(&format!("$.{key}[*]")).unwrap(),
        ] {
            let (ids, found) = load_scanning(body, &locator, &wanted);
            let skimmed = extract_scalars(body.as_bytes(), &wanted).unwrap();
            assert_eq!(found, skimmed, "{body} at {locator:?}");
            if locator != RowLocator::Auto || key == "items" {
                assert_eq!(ids, vec![vec![Value::Integer(1)], vec![Value::Integer(2)]]);
            }
        }
    }
}

#[test]
fn scalars_beside_nested_rows_and_under_each_steps() {
    let wanted = vec![
        cols(&["nextPageToken"]),
        cols(&["data", "next"]),
        cols(&["data"]),
    ];
    // Rows two levels down: `data.next` leaves the rows' path at depth 1.
    let body = r#"{"data": {"next": "n1", "items": [{"id": 1}]}, "nextPageToken": "p1"}"#;
    let (ids, found) = load_scanning(body, &RowLocator::parse("$.data.items").unwrap(), &wanted);
    assert_eq!(ids, vec![vec![Value::Integer(1)]]);
    assert_eq!(
        found,
        vec![Some("p1".to_owned()), Some("n1".to_owned()), None]
    );
    // Aggregated lists: rows under `items[*].instances`; the token sits at the root.
    let body = r#"{"items": {"zones/a": {"instances": [{"id": 7}]}, "zones/b": {}}, "nextPageToken": "z"}"#;
    let locator = RowLocator::parse("$.items[*].instances[*]").unwrap();
    let (ids, found) = load_scanning(body, &locator, &wanted);
    assert_eq!(ids, vec![vec![Value::Integer(7)]]);
    assert_eq!(found, vec![Some("z".to_owned()), None, None]);
    // Rows at the root (a path into the rows is read by a separate skim).
    let body = r#"{"id": 5, "nextPageToken": "root", "data": "d"}"#;
    let (ids, found) = load_scanning(body, &RowLocator::parse("$").unwrap(), &wanted);
    assert_eq!(ids, vec![vec![Value::Integer(5)]]);
    assert_eq!(
        found,
        vec![Some("root".to_owned()), None, Some("d".to_owned())]
    );
    // Rows in a root array (the last page of a Link-paged list): no property to find,
    // whether the rows carry the names or not.
    let body = r#" [{"id": 1, "nextPageToken": "in-a-row"}, {"id": 2, "data": "d"}]"#;
    for locator in ["$", "$[*]"] {
        let (ids, found) = load_scanning(body, &RowLocator::parse(locator).unwrap(), &wanted);
        assert_eq!(ids, vec![vec![Value::Integer(1)], vec![Value::Integer(2)]]);
        assert_eq!(found, vec![None, None, None], "{locator}");
        assert_eq!(found, extract_scalars(body.as_bytes(), &wanted).unwrap());
    }
    // Blank body: nothing found; later duplicates win.
    assert_eq!(
        load_scanning(" ", &RowLocator::Auto, &wanted).1,
        vec![None, None, None]
    );
    let body = r#"{"nextPageToken": "a", "items": [], "nextPageToken": "b"}"#;
    assert_eq!(
        load_scanning(body, &RowLocator::Auto, &wanted).1[0].as_deref(),
        Some("b")
    );
}

#[test]
fn rows_across_insert_batches_keep_their_own_values() {
    // 150 rows: two full batches and a remainder; absent and null properties stay NULL in
    // their own row, fixed values fill every row unless the row has a non-null value.
    let rows: Vec<String> = (0..150)
        .map(|i| match i % 3 {
            0 => format!(r#"{{"id": {i}, "name": "n{i}", "org": "own"}}"#),
            1 => format!(r#"{{"id": {i}, "org": null}}"#),
            _ => format!(r#"{{"name": "only{i}"}}"#),
        })
        .collect();
    let body = format!("[{}]", rows.join(","));
    let (n, conn) = load_with(
        &body,
        &RowLocator::Auto,
        &["id", "name", "org"],
        &[],
        &[(3, text("acme"))],
    );
    assert_eq!(n, 150);
    let got = query(&conn, "SELECT rowid, id, name, org FROM t ORDER BY rowid");
    assert_eq!(got.len(), 150);
    for (i, row) in got.iter().enumerate() {
        let expected = match i % 3 {
            0 => vec![
                Value::Integer(i as i64),
                text(&format!("n{i}")),
                text("own"),
            ],
            1 => vec![Value::Integer(i as i64), Value::Null, text("acme")],
            _ => vec![Value::Null, text(&format!("only{i}")), text("acme")],
        };
        assert_eq!(row[1..], expected[..], "row {i}");
    }
}
