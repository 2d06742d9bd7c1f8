//! Probes and the drain, driven like a client and a load balancer would: `/readyz` on the
//! main and admin listeners (each check failing for real: a registry folder that is a file,
//! an audit folder gone, a database that does not answer), and SIGTERM to a real
//! `querygate serve` with a slow call in flight.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::{Mock, Reply};
use crate::support::wait::eventually;

/// `GET url`: status, `Connection` header and JSON body (`Null` when not JSON).
async fn get(url: &str) -> Result<(u16, Option<String>, Value), reqwest::Error> {
    let response = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await?;
    let status = response.status().as_u16();
    let connection = response
        .headers()
        .get("connection")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response.json().await.unwrap_or(Value::Null);
    Ok((status, connection, body))
}

/// `http://host:port` of an MCP URL.
fn base(url: &str) -> String {
    url.trim_end_matches("/mcp").to_owned()
}

#[tokio::test]
async fn readyz_reports_each_check_and_recovers() {
    let server = start_with_registry_copy("read_only", "").await;
    let base = base(&server.url);
    let (status, _, body) = get(&format!("{base}/readyz")).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"status": "ready", "checks": {"registry": "ok", "audit": "ok"}})
    );

    // The registry folder replaced by a file: unreadable.
    let src = server._dir.path().join("registry/src");
    let moved = server._dir.path().join("registry/src.away");
    std::fs::rename(&src, &moved).unwrap();
    std::fs::write(&src, "not a folder").unwrap();
    // The audit folder replaced by a file: nothing can be written there.
    let audit = server._dir.path().join("audit");
    let audit_away = server._dir.path().join("audit.away");
    std::fs::rename(&audit, &audit_away).unwrap();
    std::fs::write(&audit, "not a folder").unwrap();
    // A result is reused for up to a second (on the server's clock, moved past it).
    server.clock.advance(querygate::http::ready::CACHE_FOR);
    let (status, _, body) = get(&format!("{base}/readyz")).await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body,
        json!({"status": "not_ready", "checks": {"registry": "unreadable", "audit": "not writable"}})
    );
    // The body names what failed, never where.
    assert!(
        !body
            .to_string()
            .contains(&*server._dir.path().to_string_lossy())
    );

    std::fs::remove_file(&src).unwrap();
    std::fs::rename(&moved, &src).unwrap();
    std::fs::remove_file(&audit).unwrap();
    std::fs::rename(&audit_away, &audit).unwrap();
    server.clock.advance(querygate::http::ready::CACHE_FOR);
    let (status, _, body) = get(&format!("{base}/readyz")).await.unwrap();
    assert_eq!(status, 200, "{body}");
    // Liveness does not depend on the checks.
    let health = reqwest::get(format!("{base}/healthz")).await.unwrap();
    assert_eq!(health.text().await.unwrap(), "ok");
}

#[tokio::test]
async fn readyz_fails_while_the_approval_store_database_does_not_answer() {
    // A port nothing listens on: connection refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let server = start(
        "safe",
        &format!(
            "approval:\n  store: postgres\ndatabase:\n  url: postgres://qg:secret-pw@127.0.0.1:{port}/qg\n  connect_timeout: 1s\n"
        ),
    )
    .await;
    let (status, _, body) = get(&format!("{}/readyz", base(&server.url))).await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["checks"]["approval_store"], "unreachable", "{body}");
    assert_eq!(body["checks"]["registry"], "ok", "{body}");
    assert!(!body.to_string().contains("secret-pw"));
}

#[tokio::test]
async fn readyz_checks_the_postgres_audit_sink_and_approval_store() {
    let Some(database) = crate::support::pg::fresh_database().await else {
        return;
    };
    querygate::db::migrate(&database.pool(1).await)
        .await
        .unwrap();
    let server = start_yaml(|mock, _dir| {
        format!(
            "registry:\n  root: {}\nproviders:\n  testapi:\n    base_url: {mock}\ntenants:\n  - id: default\n    mode: safe\nserver:\n  listen: 127.0.0.1:0\napproval:\n  store: postgres\naudit:\n  sink: postgres\ndatabase:\n  url: {}\n",
            crate::support::fixture_registry().display(),
            database.url
        )
    })
    .await;
    let (status, _, body) = get(&format!("{}/readyz", base(&server.url))).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["checks"],
        json!({"registry": "ok", "audit": "ok", "approval_store": "ok"})
    );
}

#[tokio::test]
async fn sigterm_drains_a_call_in_flight_then_exits_0_with_its_audit_on_disk() {
    install_crypto_provider();
    let mock = Mock::start().await;
    mock.route(
        "/orgs/slow/items",
        Reply::json(json!([{"id": 7, "name": "late"}])).delayed(Duration::from_secs(5)),
    );
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "a"}])),
    );
    let dir = tempfile::tempdir().unwrap();
    let delay = Duration::from_secs(3);
    let config = test_config(
        &mock,
        dir.path(),
        "read_only",
        "  admin_listen: 127.0.0.1:0\n  drain:\n    delay: 3s\n    timeout: 20s\n",
    );
    let (url, mut child, mut stderr) = spawn_serve(&config).await;
    let admin_line = stderr.next_line().await.unwrap().unwrap();
    let admin = admin_line
        .strip_prefix("querygate: admin listener (/healthz, /readyz) at ")
        .unwrap_or_else(|| panic!("{admin_line}"))
        .to_owned();
    let lines = collect_lines(stderr);
    let main = base(&url);
    for probes in [&main, &admin] {
        let (status, connection, body) = get(&format!("{probes}/readyz")).await.unwrap();
        assert_eq!((status, connection), (200, None), "{probes}: {body}");
    }

    // A slow call in flight when the signal comes.
    let client = modern_client(&url).await;
    let slow = tokio::spawn(async move {
        let result = try_call(
            &client,
            "run_select_query",
            json!({"sql": "SELECT name FROM testapi.items.items WHERE org = 'slow'"}),
        )
        .await;
        (result, client)
    });
    eventually(
        "the call reached the mock",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || std::future::ready(mock.paths().iter().any(|p| p == "/orgs/slow/items")),
    )
    .await;
    terminate(&child);
    let signalled = Instant::now();

    // At once: not ready, on both listeners; responses close their connections. New
    // connections are still accepted during the delay, and calls on them are served.
    eventually(
        "readyz answered 503 within half the delay",
        (delay / 2).saturating_sub(signalled.elapsed()),
        Duration::from_millis(20),
        || async {
            let (status, _, body) = get(&format!("{main}/readyz")).await.unwrap();
            if status == 503 {
                assert_eq!(body, json!({"status": "draining"}));
            }
            status == 503
        },
    )
    .await;
    let (status, connection, _) = get(&format!("{admin}/readyz")).await.unwrap();
    assert_eq!((status, connection.as_deref()), (503, Some("close")));
    let (status, connection, _) = get(&format!("{main}/healthz")).await.unwrap();
    assert_eq!((status, connection.as_deref()), (200, Some("close")));
    let late = modern_client(&url).await;
    let quick = try_call(
        &late,
        "run_select_query",
        json!({"sql": "SELECT name FROM testapi.items.items WHERE org = 'acme'"}),
    )
    .await
    .expect("a call during the delay is served");
    assert_ne!(quick.is_error, Some(true), "{}", text_of(&quick));
    assert!(
        signalled.elapsed() < delay,
        "the checks ran within the delay"
    );
    drop(late);

    // The call in flight completes.
    let (result, client) = tokio::time::timeout(Duration::from_secs(15), slow)
        .await
        .expect("the call in flight finishes")
        .unwrap();
    let result = result.expect("the call in flight is answered, not cut");
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    assert!(text_of(&result).contains("late"), "{}", text_of(&result));
    assert!(
        signalled.elapsed() >= delay,
        "it was in flight past the delay"
    );
    // The listener is closed after the delay.
    let refused = tokio::net::TcpStream::connect(main.trim_start_matches("http://")).await;
    assert!(
        refused.is_err(),
        "the main listener is closed after the delay"
    );
    drop(client);

    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("serve exits after the drain")
        .unwrap();
    assert!(status.success(), "{status}");
    let lines = lines.await.unwrap();
    assert!(
        !lines.iter().any(|l| l.contains("drain timeout")),
        "{lines:?}"
    );

    // Every call answered is in the audit on disk.
    let files = querygate::audit::location::files_of(&querygate::audit::FileLocation::Dir(
        dir.path().join("audit"),
    ))
    .unwrap();
    let mut outcomes = Vec::new();
    for file in files {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            let record = querygate::audit::format::parse_line(line)
                .expect("an intact record")
                .stored
                .record;
            if record.phase.as_str() == "outcome" && record.tool == "run_select_query" {
                outcomes.push(record.sql.unwrap_or_default());
            }
        }
    }
    outcomes.sort();
    assert_eq!(
        outcomes,
        [
            "SELECT name FROM testapi.items.items WHERE org = 'acme'",
            "SELECT name FROM testapi.items.items WHERE org = 'slow'"
        ],
    );
}

#[tokio::test]
async fn calls_past_the_drain_timeout_are_cut_and_the_process_still_exits() {
    install_crypto_provider();
    let mock = Mock::start().await;
    mock.route(
        "/orgs/slow/items",
        Reply::json(json!([])).delayed(Duration::from_secs(30)),
    );
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(
        &mock,
        dir.path(),
        "read_only",
        "  drain:\n    delay: 0s\n    timeout: 500ms\n",
    );
    let (url, mut child, stderr) = spawn_serve(&config).await;
    let lines = collect_lines(stderr);
    let client = modern_client(&url).await;
    let slow = tokio::spawn(async move {
        try_call(
            &client,
            "run_select_query",
            json!({"sql": "SELECT name FROM testapi.items.items WHERE org = 'slow'"}),
        )
        .await
    });
    eventually(
        "the call reached the mock",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || std::future::ready(!mock.requests().is_empty()),
    )
    .await;
    terminate(&child);
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("serve exits at the drain timeout")
        .unwrap();
    assert!(status.success(), "{status}");
    let lines = lines.await.unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("drain timeout (500ms) reached")),
        "{lines:?}"
    );
    let cut = slow.await.unwrap();
    assert!(cut.is_err(), "the cut call is not answered as a success");
}

#[tokio::test]
async fn a_second_signal_ends_the_drain_at_once() {
    install_crypto_provider();
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(
        &mock,
        dir.path(),
        "read_only",
        "  drain:\n    delay: 30s\n    timeout: 30s\n",
    );
    let (url, mut child, stderr) = spawn_serve(&config).await;
    let lines = collect_lines(stderr);
    terminate(&child);
    // Draining (the first signal was taken), then the second.
    eventually(
        "readyz answering 503 (draining)",
        Duration::from_secs(5),
        Duration::from_millis(20),
        || async { get(&format!("{}/readyz", base(&url))).await.unwrap().0 == 503 },
    )
    .await;
    terminate(&child);
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("serve stops at once on a second signal")
        .unwrap();
    assert!(status.success(), "{status}");
    let lines = lines.await.unwrap();
    assert!(
        lines.iter().any(|l| l.contains("stopping now")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn a_loopback_server_without_a_configured_delay_stops_without_one() {
    install_crypto_provider();
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    // No `server.drain.delay`: on 127.0.0.1 no load balancer needs one.
    let config = test_config(&mock, dir.path(), "read_only", "");
    let mut yaml = std::fs::read_to_string(&config).unwrap();
    yaml.push_str("log:\n  level: querygate=info\n");
    std::fs::write(&config, yaml).unwrap();
    let (_url, mut child, stderr) = spawn_serve(&config).await;
    let lines = collect_lines(stderr);
    terminate(&child);
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("serve exits")
        .unwrap();
    assert!(status.success(), "{status}");
    let lines = lines.await.unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("the listener closes in 0s")),
        "{lines:?}"
    );
}
