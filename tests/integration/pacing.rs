//! Outbound pacing per tenant × provider: once a provider answers `429` with
//! `Retry-After`, the tenant's next requests to it wait until then (never sent early); a
//! wait past the call's deadline fails at once with `upstream.throttled` (nothing sent);
//! another tenant is not paused; `providers.<p>.max_requests_per_second` spaces a tenant's
//! requests. Driven through the engine (requests counted at the mock) and, for the tool
//! error, through the MCP server.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::*;

const SQL: &str = "SELECT name FROM testapi.items.items WHERE org = 'acme'";

fn items() -> Reply {
    Reply::json(json!([{"id": 1, "name": "one"}]))
}

/// An engine that does not retry (so every request the mock sees was paced by itself).
fn engine_without_retries(mock: &Mock, rate: Option<f64>) -> querygate::engine::Engine {
    engine_with(mock, |config| {
        config.upstream.retry.attempts = 1;
        if let Some(rate) = rate {
            config
                .upstream
                .max_requests_per_second
                .insert("testapi".to_owned(), rate);
        }
    })
}

fn tenant(id: &str) -> querygate::engine::ExecContext {
    querygate::engine::ExecContext {
        tenant: id.to_owned(),
        ..context()
    }
}

#[tokio::test]
async fn after_a_retry_after_the_tenant_s_next_requests_wait_and_others_do_not() {
    let mock = Mock::start().await;
    mock.route_sequence(
        "/orgs/acme/items",
        vec![
            Reply::status(429, "slow down").header("retry-after", "1"),
            items(),
        ],
    );
    let e = engine_without_retries(&mock, None);
    let acme = tenant("acme");
    let err = e.execute(&acme, SQL).await.unwrap_err();
    assert_eq!(err.upstream_failure().unwrap().status, 429);
    let paused_at = Instant::now();

    // Another tenant is not paused by acme's 429.
    let globex = e.execute(&tenant("globex"), SQL).await.unwrap();
    assert_eq!(globex.rows.len(), 1);
    assert!(paused_at.elapsed() < Duration::from_millis(900));
    assert_eq!(mock.count("/orgs/acme/items"), 2);

    // Three calls of acme at once: each waits out the pause before its request is sent.
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let (e, acme) = (e.clone(), acme.clone());
            tokio::spawn(async move {
                let out = e.execute(&acme, SQL).await;
                (
                    out.map(|o| o.rows.len()).map_err(|e| e.to_string()),
                    Instant::now(),
                )
            })
        })
        .collect();
    for call in calls {
        let (rows, done) = call.await.unwrap();
        assert_eq!(rows, Ok(1));
        let waited = done.duration_since(paused_at);
        assert!(
            waited >= Duration::from_millis(900),
            "answered {waited:?} after the 429 asked for 1s"
        );
    }
    assert_eq!(
        mock.count("/orgs/acme/items"),
        5,
        "one request per call, none more"
    );
}

#[tokio::test]
async fn a_wait_past_the_call_s_deadline_fails_at_once_and_sends_nothing() {
    let mock = Mock::start().await;
    mock.route_sequence(
        "/orgs/acme/items",
        vec![
            Reply::status(503, "maintenance").header("retry-after", "30"),
            items(),
        ],
    );
    let e = engine_without_retries(&mock, None);
    let acme = tenant("acme");
    e.execute(&acme, SQL).await.unwrap_err();
    let started = Instant::now();
    let cx = querygate::engine::ExecContext {
        deadline: Some(tokio::time::Instant::now() + Duration::from_secs(2)),
        ..acme.clone()
    };
    let err = e.execute(&cx, SQL).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "failed fast");
    assert_eq!(err.kind(), querygate::engine::ErrorKind::UpstreamThrottled);
    let wait = err.retry_after().unwrap();
    assert!(
        wait > Duration::from_secs(25) && wait <= Duration::from_secs(30),
        "{wait:?}"
    );
    assert!(
        err.message().contains("provider 'testapi'") && err.message().contains("retry after"),
        "{err}"
    );
    assert_eq!(mock.count("/orgs/acme/items"), 1, "nothing more was sent");
}

#[tokio::test]
async fn a_configured_rate_spaces_each_tenant_s_requests() {
    let mock = Mock::start().await;
    mock.route("/orgs/acme/items", items());
    // 5 per second: a burst of 5, then one every 200 ms.
    let e = engine_without_retries(&mock, Some(5.0));
    let acme = tenant("acme");
    let started = Instant::now();
    for _ in 0..10 {
        e.execute(&acme, SQL).await.unwrap();
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(950),
        "10 requests at 5/s after a burst of 5 took {took:?}"
    );
    // Another tenant has its own pace: its burst is not taken.
    let started = Instant::now();
    for _ in 0..5 {
        e.execute(&tenant("globex"), SQL).await.unwrap();
    }
    assert!(started.elapsed() < Duration::from_millis(900));
    assert_eq!(mock.count("/orgs/acme/items"), 15);
}

#[tokio::test]
async fn over_mcp_a_throttled_call_is_a_retryable_tool_error_naming_the_provider() {
    let server = crate::mcp_support::start(
        "safe",
        "  call_timeout: 3s\nupstream:\n  retry:\n    attempts: 1\n",
    )
    .await;
    server.mock.route_sequence(
        "/orgs/acme/items",
        vec![
            Reply::status(429, "slow down").header("retry-after", "20"),
            items(),
        ],
    );
    let client = crate::mcp_support::modern_client(&server.url).await;
    let args = json!({"sql": "SELECT id, name FROM testapi.items.items WHERE org = 'acme'"});
    let first = crate::mcp_support::call(&client, "run_select_query", args.clone()).await;
    assert_eq!(crate::mcp_support::error_code(&first), "upstream.rejected");
    let second = crate::mcp_support::call(&client, "run_select_query", args).await;
    assert_eq!(
        crate::mcp_support::error_code(&second),
        "upstream.throttled"
    );
    let error = &second.structured_content.as_ref().unwrap()["error"];
    let retry = error["retry_after_seconds"].as_u64().unwrap();
    assert!((15..=20).contains(&retry), "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("provider 'testapi'"),
        "{error}"
    );
    assert_eq!(server.mock.count("/orgs/acme/items"), 1);
}
