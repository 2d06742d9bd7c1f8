//! Reads retry 408/429/502/503/504 with backoff and `Retry-After`, within bounds.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::*;

#[tokio::test]
async fn a_read_retries_transient_statuses_then_succeeds() {
    let mock = Mock::start().await;
    mock.route_sequence(
        "/orgs/acme/items",
        vec![
            Reply::status(503, "busy"),
            Reply::status(502, "bad gateway"),
            Reply::json(json!([{"id": 1, "name": "one"}])),
        ],
    );
    let e = engine(&mock);
    let out = query(
        &e,
        "SELECT name FROM testapi.items.items WHERE org = 'acme'",
    )
    .await;
    assert_eq!(out.rows, vec![vec![text("one")]]);
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn attempts_are_bounded() {
    let mock = Mock::start().await;
    mock.route("/orgs/acme/items", Reply::status(503, "down"));
    let e = engine(&mock);
    let err = query_err(
        &e,
        "SELECT name FROM testapi.items.items WHERE org = 'acme'",
    )
    .await;
    assert_eq!(err.upstream_failure().unwrap().status, 503);
    assert_eq!(
        mock.requests().len(),
        3,
        "the default policy makes 3 attempts"
    );
}

#[tokio::test]
async fn permanent_errors_are_not_retried() {
    let mock = Mock::start().await;
    mock.route("/orgs/acme/items", Reply::status(500, "bug"));
    mock.route("/orgs/other/items", Reply::status(403, "no"));
    let e = engine(&mock);
    query_err(
        &e,
        "SELECT name FROM testapi.items.items WHERE org = 'acme'",
    )
    .await;
    query_err(
        &e,
        "SELECT name FROM testapi.items.items WHERE org = 'other'",
    )
    .await;
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn retry_after_is_honoured_and_a_long_one_is_not_waited_for() {
    let mock = Mock::start().await;
    mock.route_sequence(
        "/orgs/acme/items",
        vec![
            Reply::status(429, "slow down").header("retry-after", "1"),
            Reply::json(json!([{"id": 1, "name": "one"}])),
        ],
    );
    mock.route(
        "/orgs/later/items",
        Reply::status(429, "come back tomorrow").header("retry-after", "86400"),
    );
    let e = engine(&mock);
    let started = Instant::now();
    query(
        &e,
        "SELECT name FROM testapi.items.items WHERE org = 'acme'",
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "Retry-After: 1 was not waited for"
    );
    let started = Instant::now();
    let err = query_err(
        &e,
        "SELECT name FROM testapi.items.items WHERE org = 'later'",
    )
    .await;
    assert_eq!(err.upstream_failure().unwrap().status, 429);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn connection_failures_are_retried() {
    // A port with nothing listening: every attempt fails to connect.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let mock = Mock::start().await;
    let e = engine_with(&mock, |c| {
        c.providers.get_mut("testapi").unwrap().base_url = Some(url);
        c.upstream.retry.initial_backoff = Duration::from_millis(50);
    });
    let started = Instant::now();
    let err = query_err(
        &e,
        "SELECT name FROM testapi.items.items WHERE org = 'acme'",
    )
    .await;
    assert_eq!(
        err.kind(),
        querygate::engine::ErrorKind::UpstreamUnavailable
    );
    // Two backoffs (50 ms, then 100 ms) separate the three attempts.
    assert!(
        started.elapsed() >= Duration::from_millis(140),
        "{:?}",
        started.elapsed()
    );
}

/// A one-resource provider whose method carries `config.retry`.
fn retry_registry() -> tempfile::TempDir {
    crate::support::things_registry(
        "rty",
        r#"      config:
        retry:
          max_attempts: 5
          initial_delay_ms: 1
          retryable_conditions:
            status_codes: [500]
      methods:
        list:
          operation: {$ref: '#/paths/~1things/get'}
          response: {mediaType: application/json, openAPIDocKey: '200'}
      sqlVerbs:
        select: [{$ref: '#/components/x-stackQL-resources/things/methods/list'}]
"#,
    )
}

#[tokio::test]
async fn a_documents_retry_config_replaces_the_configured_defaults() {
    let mock = Mock::start().await;
    // Five attempts (the configured default is 3), on 500 (not retried by default).
    mock.route_sequence(
        "/things",
        vec![
            Reply::status(500, "oops"),
            Reply::status(500, "oops"),
            Reply::status(500, "oops"),
            Reply::status(500, "oops"),
            Reply::json(json!([{"id": "t1"}])),
        ],
    );
    let dir = retry_registry();
    let mut config = querygate::engine::EngineConfig::new(dir.path().to_path_buf());
    config.upstream.retry.initial_backoff = Duration::from_secs(5);
    crate::support::upstream_at(&mut config, "rty", mock.url());
    let e = querygate::engine::Engine::new(config).unwrap();
    let started = Instant::now();
    let out = query(&e, "SELECT id FROM rty.things.things").await;
    assert_eq!(out.rows, vec![vec![text("t1")]]);
    assert_eq!(mock.requests().len(), 5);
    // initial_delay_ms: 1 replaced the configured 5 s.
    assert!(started.elapsed() < Duration::from_secs(3));
    // 503 is not in the document's status codes: not retried.
    let mock = Mock::start().await;
    mock.route("/things", Reply::status(503, "busy"));
    let mut config = querygate::engine::EngineConfig::new(dir.path().to_path_buf());
    crate::support::upstream_at(&mut config, "rty", mock.url());
    let e = querygate::engine::Engine::new(config).unwrap();
    query_err(&e, "SELECT id FROM rty.things.things").await;
    assert_eq!(mock.requests().len(), 1);
}
