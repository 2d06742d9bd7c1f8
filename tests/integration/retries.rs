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
