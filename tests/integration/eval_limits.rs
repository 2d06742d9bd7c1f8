//! Bounds on local evaluation: a statement whose SQL runs past `limits.max_eval_time` or
//! builds a value past `limits.max_eval_value_bytes` fails with `LimitExceeded`, and the
//! engine keeps serving the next statement.

use std::time::{Duration, Instant};

use querygate::engine::{Cell, EngineConfig, ErrorKind};
use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::*;

/// acme's items: two rows.
fn serve_two_items(mock: &Mock) {
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "alpha"}, {"id": 2, "name": "beta"}])),
    );
}

fn bounded(config: &mut EngineConfig) {
    config.eval.max_time = Duration::from_millis(500);
    config.eval.max_value_bytes = 1024 * 1024;
}

#[tokio::test]
async fn a_recursive_cte_without_end_stops_at_the_time_budget() {
    let mock = Mock::start().await;
    let engine = engine_with(&mock, bounded);
    let started = Instant::now();
    let err = query_err(
        &engine,
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) \
         SELECT count(*) FROM n",
    )
    .await;
    // Generous: the budget is 500 ms; without it the statement never ends.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(err.kind(), ErrorKind::LimitExceeded, "{err}");
    assert!(err.message().contains("limits.max_eval_time"), "{err}");
    assert!(err.message().contains("500ms"), "{err}");

    let out = query(&engine, "SELECT 1 AS n").await;
    assert_eq!(out.rows, vec![vec![int(1)]]);
}

#[tokio::test]
async fn a_statement_over_fetched_rows_stops_at_the_time_budget() {
    let mock = Mock::start().await;
    serve_two_items(&mock);
    let engine = engine_with(&mock, bounded);
    let err = query_err(
        &engine,
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) \
         SELECT i.name, count(*) FROM testapi.items.items i, n WHERE i.org = 'acme' GROUP BY i.name",
    )
    .await;
    assert_eq!(err.kind(), ErrorKind::LimitExceeded, "{err}");
    assert!(err.message().contains("limits.max_eval_time"), "{err}");
}

#[tokio::test]
async fn values_past_the_length_limit_fail_clearly_and_the_next_statement_runs() {
    let mock = Mock::start().await;
    serve_two_items(&mock);
    let engine = engine_with(&mock, bounded);
    for sql in [
        "SELECT length(zeroblob(100000000)) AS n",
        "SELECT length(printf('%.*c', 100000000, 'x')) AS n",
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n LIMIT 20000) \
         SELECT length(group_concat(hex(zeroblob(100)))) AS n FROM n",
        "SELECT length(group_concat(i.name || hex(zeroblob(1000)))) AS n \
         FROM testapi.items.items i, (WITH RECURSIVE n(x) AS \
         (SELECT 1 UNION ALL SELECT x + 1 FROM n LIMIT 2000) SELECT x FROM n) \
         WHERE i.org = 'acme'",
    ] {
        let err = query_err(&engine, sql).await;
        assert_eq!(err.kind(), ErrorKind::LimitExceeded, "{sql}: {err}");
        assert!(
            err.message().contains("limits.max_eval_value_bytes"),
            "{sql}: {err}"
        );
        assert!(err.message().contains("1048576 bytes"), "{sql}: {err}");
    }

    // Under the limit, the same functions work, and so does an ordinary query.
    let out = query(&engine, "SELECT length(zeroblob(1000)) AS n").await;
    assert_eq!(out.rows, vec![vec![int(1000)]]);
    let out = query(
        &engine,
        "SELECT group_concat(name, ',') AS names FROM \
         (SELECT name FROM testapi.items.items WHERE org = 'acme' ORDER BY name)",
    )
    .await;
    assert_eq!(out.rows, vec![vec![text("alpha,beta")]]);
}

#[tokio::test]
async fn an_upstream_value_past_the_length_limit_fails_the_load_clearly() {
    let mock = Mock::start().await;
    let big = "x".repeat(2 * 1024 * 1024);
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": big}])),
    );
    let engine = engine_with(&mock, bounded);
    let err = query_err(
        &engine,
        "SELECT id, name FROM testapi.items.items WHERE org = 'acme'",
    )
    .await;
    assert_eq!(err.kind(), ErrorKind::LimitExceeded, "{err}");
    assert!(
        err.message().contains("limits.max_eval_value_bytes"),
        "{err}"
    );
    // A statement that does not use the column never loads its value.
    let out = query(
        &engine,
        "SELECT id FROM testapi.items.items WHERE org = 'acme'",
    )
    .await;
    assert_eq!(out.rows, vec![vec![int(1)]]);
}

fn querygate_with(yaml: &str, args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("querygate.yaml");
    std::fs::write(&config, yaml).unwrap();
    std::process::Command::new(env!("CARGO_BIN_EXE_querygate"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .args(["--config", config.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test]
async fn the_configured_budget_and_value_limit_reach_the_cli_query() {
    let yaml = "limits:\n  max_eval_time: 300ms\n  max_eval_value_bytes: 65536\n";
    let (slow, big) = tokio::task::spawn_blocking(move || {
        (
            querygate_with(
                yaml,
                &[
                    "query",
                    "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) \
                     SELECT count(*) FROM n",
                ],
            ),
            querygate_with(yaml, &["query", "SELECT length(zeroblob(100000)) AS n"]),
        )
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&slow.stderr);
    assert!(!slow.status.success());
    assert!(
        stderr.contains("longer than 300ms (limits.max_eval_time)"),
        "{stderr}"
    );
    let stderr = String::from_utf8_lossy(&big.stderr);
    assert!(!big.status.success());
    assert!(
        stderr.contains("past 65536 bytes (limits.max_eval_value_bytes)"),
        "{stderr}"
    );
}

#[tokio::test]
async fn eval_limits_are_validated_with_their_keys() {
    let out = tokio::task::spawn_blocking(|| {
        querygate_with(
            "server:\n  call_timeout: 10s\nlimits:\n  max_eval_time: 10s\n  max_eval_value_bytes: 10\n",
            &["providers"],
        )
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("limits.max_eval_time: 10s must be shorter than server.call_timeout (10s)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("limits.max_eval_value_bytes: must be at least 1024"),
        "{stderr}"
    );

    let out = tokio::task::spawn_blocking(|| {
        querygate_with("limits:\n  max_eval_time: 0s\n", &["providers"])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("limits.max_eval_time: must be greater than 0"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_statement_sees_nothing_of_the_statements_before_it() {
    let mock = Mock::start().await;
    serve_two_items(&mock);
    let engine = engine_with(&mock, bounded);
    // Statements run one after another reuse the SQLite threads and their connections.
    for _ in 0..4 {
        let out = query(
            &engine,
            "SELECT name FROM testapi.items.items WHERE org = 'acme' ORDER BY name",
        )
        .await;
        assert_eq!(out.rows.len(), 2);
        // The same table of other columns (every column, not only name), then of the same.
        for sql in [
            "SELECT * FROM testapi.items.items WHERE org = 'acme'",
            "SELECT count(*) AS n FROM testapi.items.items WHERE org = 'acme'",
        ] {
            let out = query(&engine, sql).await;
            assert!(!out.columns.is_empty());
        }
        let counted = query(
            &engine,
            "SELECT count(*) AS n FROM testapi.items.items WHERE org = 'acme'",
        )
        .await;
        assert_eq!(
            counted.rows,
            [[Cell::Integer(2)]],
            "no row of earlier statements"
        );
        let left = query(&engine, "SELECT name FROM sqlite_master").await;
        assert!(left.rows.is_empty(), "{left:?}");
        let err = query_err(&engine, "SELECT count(*) AS n FROM __qg_t0").await;
        assert!(err.message().contains("no such table"), "{err}");
        for counter in ["changes()", "total_changes()", "last_insert_rowid()"] {
            let err = query_err(&engine, &format!("SELECT {counter} AS n")).await;
            assert_eq!(err.kind(), ErrorKind::InvalidSql, "{err}");
            assert!(err.message().contains("not available"), "{err}");
        }
    }
}
