//! Upstream faults, through a real MCP client: a connection reset mid-body, a body that
//! stalls, truncated JSON (or JSON broken where the statement reads nothing, or nested too
//! deep), a gzip body that does not decompress, 5xx and 429 storms with
//! `Retry-After`, a host name that does not resolve. Each call ends, well within its guard,
//! in a tool error with a stable code; reads are retried within bounds and writes never
//! (the mock counts the requests), and a write whose answer broke off after it was sent is
//! `call.outcome_unknown`.

use std::time::Duration;

use serde_json::json;

use crate::mcp_support::{
    Client, call, error_code, error_message, modern_client, start, start_yaml,
};
use crate::mock::{BodyFault, Mock, Reply};
use crate::support::{SECRET, fixture_registry};

/// A guard against hung calls (not a speed target): every fault here ends far sooner.
const GUARD: Duration = Duration::from_secs(30);

/// Short upstream bounds, so that stalls and storms end quickly.
const UPSTREAM: &str = "upstream:\n  timeout: 1s\n  connect_timeout: 2s\n  retry:\n    attempts: 3\n    initial_backoff: 50ms\n    max_backoff: 200ms\n    max_elapsed: 5s\n";

const ROWS: &str = r#"[{"id": 1, "name": "one"}, {"id": 2, "name": "two"}]"#;

async fn run(client: &Client, tool: &str, sql: &str) -> (String, String) {
    let result = tokio::time::timeout(GUARD, call(client, tool, json!({"sql": sql})))
        .await
        .unwrap_or_else(|_| panic!("hung: {sql}"));
    assert_eq!(result.is_error, Some(true), "{sql} did not fail");
    (error_code(&result), error_message(&result))
}

async fn read(client: &Client, org: &str) -> (String, String) {
    run(
        client,
        "run_select_query",
        &format!("SELECT name FROM testapi.items.items WHERE org = '{org}'"),
    )
    .await
}

async fn write(client: &Client, org: &str) -> (String, String) {
    run(
        client,
        "run_mutation_query",
        &format!("INSERT INTO testapi.widgets.widgets (org, name) VALUES ('{org}', 'x')"),
    )
    .await
}

fn requests_to(mock: &Mock, method: &str, path: &str) -> usize {
    mock.requests()
        .iter()
        .filter(|r| r.method == method && r.path == path)
        .count()
}

fn json_body(body: &str) -> Reply {
    Reply::bytes("application/json", body.as_bytes().to_vec())
}

#[tokio::test]
async fn broken_bodies_end_in_classified_errors_and_writes_are_sent_once() {
    let server = start("full_access", UPSTREAM).await;
    let mock = &server.mock;
    let reset = json_body(ROWS).failing(BodyFault::ResetAfter(10));
    let stall = json_body(ROWS).failing(BodyFault::StallAfter(10));
    mock.route("/orgs/reset/items", reset.clone());
    mock.route("/orgs/stall/items", stall.clone());
    mock.route("/orgs/trunc/items", json_body(r#"[{"id": 1, "name": "on"#));
    // Broken inside a property the statement does not read: still not JSON.
    mock.route(
        "/orgs/skipped/items",
        json_body(r#"[{"id": 1, "name": "one", "tags": ["a",]}]"#),
    );
    let deep = format!("{}{}", "[".repeat(600), "]".repeat(600));
    mock.route(
        "/orgs/deep/items",
        json_body(&format!(
            r#"[{{"id": 1, "name": "one", "nested": {deep}}}]"#
        )),
    );
    mock.route(
        "/orgs/gzip/items",
        json_body("this is not gzip").header("content-encoding", "gzip"),
    );
    mock.route("POST /orgs/reset/widgets", reset.status_code(201));
    mock.route("POST /orgs/stall/widgets", stall.status_code(201));
    let client = modern_client(&server.url).await;

    // A cut or stalled body: the upstream could not be read; bad content: it answered wrongly.
    for (org, expected, says) in [
        ("reset", "upstream.unavailable", "failed"),
        ("stall", "upstream.unavailable", "timed out"),
        ("trunc", "upstream.rejected", "not valid JSON"),
        (
            "skipped",
            "upstream.rejected",
            "not valid JSON: expected value at line 1 column 40",
        ),
        (
            "deep",
            "upstream.rejected",
            "not valid JSON: recursion limit exceeded",
        ),
        ("gzip", "upstream.rejected", "not valid JSON"),
    ] {
        let (code, message) = read(&client, org).await;
        assert_eq!(code, expected, "{org}: {message}");
        assert!(message.contains(says), "{org}: {message}");
        let sent = requests_to(mock, "GET", &format!("/orgs/{org}/items"));
        assert!((1..=3).contains(&sent), "{org}: {sent} requests");
    }
    // A write whose answer broke off after it was sent may have been applied.
    for (org, says) in [
        ("reset", "failed after it was sent"),
        ("stall", "timed out"),
    ] {
        let (code, message) = write(&client, org).await;
        assert_eq!(code, "call.outcome_unknown", "{org}: {message}");
        assert!(message.contains(says), "{org}: {message}");
        assert!(
            message.contains("the change may have been applied"),
            "{org}: {message}"
        );
        assert_eq!(
            requests_to(mock, "POST", &format!("/orgs/{org}/widgets")),
            1
        );
    }
}

#[tokio::test]
async fn status_storms_with_retry_after_are_bounded_and_writes_are_not_retried_nor_sent_while_paused()
 {
    let server = start("full_access", UPSTREAM).await;
    let mock = &server.mock;
    mock.route(
        "/orgs/storm5/items",
        Reply::status(503, "overloaded").header("retry-after", "1"),
    );
    // A Retry-After past the longest backoff is not waited for.
    mock.route(
        "/orgs/storm4/items",
        Reply::status(429, "slow down").header("retry-after", "3600"),
    );
    mock.route(
        "POST /orgs/storm5/widgets",
        Reply::status(503, "overloaded").header("retry-after", "1"),
    );
    mock.route(
        "POST /orgs/storm4/widgets",
        Reply::status(429, "slow down").header("retry-after", "1"),
    );
    let client = modern_client(&server.url).await;

    for (org, status) in [("storm5", 503), ("storm4", 429)] {
        let (code, message) = read(&client, org).await;
        assert_eq!(code, "upstream.rejected", "{org}: {message}");
        assert!(
            message.contains(&format!("\"http_status\": {status}")),
            "{message}"
        );
        let sent = requests_to(mock, "GET", &format!("/orgs/{org}/items"));
        assert!((1..=3).contains(&sent), "{org}: {sent} requests");

        let (code, message) = write(&client, org).await;
        if status == 429 {
            // The read's `Retry-After: 3600` paused this tenant's requests to the provider
            // (outbound pacing) past the call's timeout: the write is not sent at all.
            assert_eq!(code, "upstream.throttled", "{org}: {message}");
            assert!(message.contains("provider 'testapi'"), "{message}");
            assert_eq!(
                requests_to(mock, "POST", &format!("/orgs/{org}/widgets")),
                0
            );
        } else {
            // Sent once, after the read's `Retry-After: 1` pause, and not retried.
            assert_eq!(code, "upstream.rejected", "{org}: {message}");
            assert_eq!(
                requests_to(mock, "POST", &format!("/orgs/{org}/widgets")),
                1
            );
        }
    }
}

#[tokio::test]
async fn a_host_that_does_not_resolve_is_upstream_unavailable() {
    let server = start_yaml(|_mock, dir| {
        let env_file = dir.join("creds.env");
        std::fs::write(&env_file, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
        format!(
            "registry:\n  root: {}\nproviders:\n  testapi:\n    base_url: http://upstream.invalid:9\ncredentials:\n  env_file: {}\n  process_env: false\ntenants:\n  - id: default\n    mode: full_access\nserver:\n  listen: 127.0.0.1:0\n{UPSTREAM}",
            fixture_registry().display(),
            env_file.display()
        )
    })
    .await;
    let client = modern_client(&server.url).await;
    let (code, message) = read(&client, "acme").await;
    assert_eq!(code, "upstream.unavailable", "{message}");
    // Nothing was sent: the outcome is known.
    let (code, message) = write(&client, "acme").await;
    assert_eq!(code, "upstream.unavailable", "{message}");
    assert!(!message.contains("may have been applied"), "{message}");
}
