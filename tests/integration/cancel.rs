//! Work that stops when nobody waits: a paginated select whose second page is slow, and a
//! client that goes away after the first page (an HTTP client that disconnects; a stdio
//! client that sends `notifications/cancelled`). The mock never sees the third page, and the
//! audit records the call as cancelled long before the slow page would have answered.

use std::path::Path;
use std::time::Duration;

use querygate::audit::chain::Stored;
use querygate::audit::format::parse_line;
use querygate::audit::{FileLocation, location};
use serde_json::json;

use crate::mcp_support::{install_crypto_provider, start, terminate, test_config};
use crate::mock::{Mock, Reply};
use crate::support::raw::RawCall;
use crate::support::served;
use crate::support::stdio::{INITIALIZE, INITIALIZED, Raw};

/// How long the second page takes: far longer than any wait below.
const SLOW_PAGE: Duration = Duration::from_secs(60);
/// A guard against hung tests (not a speed target).
const LIMIT: Duration = Duration::from_secs(20);

const SELECT: &str = "SELECT id FROM testapi.items.tokens";

/// Three pages; the second is slow.
fn route_pages(mock: &Mock) {
    mock.route(
        "/tokens",
        Reply::json(json!({"items": [{"id": 1}], "nextPageToken": "t2"})),
    );
    mock.route(
        "/tokens?pageToken=t2",
        Reply::json(json!({"items": [{"id": 2}], "nextPageToken": "t3"})).delayed(SLOW_PAGE),
    );
    mock.route(
        "/tokens?pageToken=t3",
        Reply::json(json!({"items": [{"id": 3}]})),
    );
}

fn page_requested(mock: &Mock, query: &str) -> bool {
    mock.requests()
        .iter()
        .any(|r| r.path == "/tokens" && r.query.as_deref() == Some(query))
}

/// Waits until `what` holds, polling; panics after [`LIMIT`].
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    crate::support::wait::eventually(what, LIMIT, Duration::from_millis(20), || {
        std::future::ready(check())
    })
    .await;
}

/// The outcome records in the audit folder `dir` (none while it does not exist).
fn outcomes(dir: &Path) -> Vec<Stored> {
    let Ok(files) = location::files_of(&FileLocation::Dir(dir.to_owned())) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for file in files {
        for line in std::fs::read_to_string(file).unwrap_or_default().lines() {
            if let Ok(parsed) = parse_line(line)
                && parsed.stored.record.phase.as_str() == "outcome"
            {
                out.push(parsed.stored);
            }
        }
    }
    out
}

/// Waits until querygate has closed the connection of the slow second page (the
/// pagination's request dropped with the call).
async fn slow_page_abandoned(mock: &Mock) {
    eventually("the slow page's request abandoned", || {
        mock.abandoned() == ["/tokens?pageToken=t2"]
    })
    .await;
}

fn cancelled_select(dir: &Path) -> bool {
    outcomes(dir).iter().any(|r| {
        r.record.tool == "run_select_query"
            && r.record.error_code.as_deref() == Some("call.cancelled")
    })
}

/// A `tools/call` of [`SELECT`] posted to `url` in the background, as a client without a
/// session sends it.
fn post_select(url: &str) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let request = RawCall::new("run_select_query", json!({"sql": SELECT}))
        .request(&reqwest::Client::new(), url);
    tokio::spawn(request.send())
}

#[tokio::test]
async fn an_http_client_that_disconnects_stops_the_pagination() {
    let server = start("read_only", "").await;
    route_pages(&server.mock);
    let client = post_select(&server.url);

    eventually("the second page is requested", || {
        page_requested(&server.mock, "pageToken=t2")
    })
    .await;
    // The client goes away while the slow page is on its way.
    let gone = std::time::Instant::now();
    client.abort();
    let _ = client.await;

    let audit = server._dir.path().join("audit");
    eventually("the call is recorded as cancelled", || {
        cancelled_select(&audit)
    })
    .await;
    eprintln!(
        "cancelled and recorded {} ms after the client went away",
        gone.elapsed().as_millis()
    );
    // The call's work is dropped: the slow page's request is abandoned, so the third
    // page, named only in its answer, is never asked for.
    slow_page_abandoned(&server.mock).await;
    assert!(!page_requested(&server.mock, "pageToken=t3"));
}

#[tokio::test]
async fn a_served_process_logs_no_error_when_an_http_client_goes_away() {
    install_crypto_provider();
    let mock = Mock::start().await;
    route_pages(&mock);
    let dir = tempfile::tempdir().unwrap();
    let drain = "  drain:\n    delay: 0s\n";
    let config = test_config(&mock, dir.path(), "read_only", drain);
    // The default level, plus rmcp's INFO line that ends each request's service: it comes
    // after rmcp has tried to hand the response over (and reported it if that failed), so
    // the test knows the report it checks for had its chance to be written.
    let served = served::spawn_announced(
        served::serve_command(&config)
            .args(["--listen", "127.0.0.1:0"])
            .env("QUERYGATE_LOG", "warn,rmcp::service=info"),
    )
    .await;
    let (child, mut stderr) = (served.child, served.stderr);
    let (lines_tx, mut lines_rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            let _ = lines_tx.send(line);
        }
    });
    let client = post_select(&served.url);
    eventually("the second page is requested", || {
        page_requested(&mock, "pageToken=t2")
    })
    .await;
    client.abort();
    let _ = client.await;
    let audit = dir.path().join("audit");
    eventually("the call is recorded as cancelled", || {
        cancelled_select(&audit)
    })
    .await;
    let mut lines = Vec::new();
    tokio::time::timeout(LIMIT, async {
        while let Some(line) = lines_rx.recv().await {
            let finished = line.contains("serve finished");
            lines.push(line);
            if finished {
                return;
            }
        }
        panic!("the process's log ended before the request's service finished: {lines:#?}");
    })
    .await
    .expect("rmcp ends the abandoned request's service");
    terminate(&child);
    tokio::time::timeout(LIMIT, reader).await.unwrap().unwrap();
    while let Ok(line) = lines_rx.try_recv() {
        lines.push(line);
    }
    // A client that went away is not an error.
    let errors: Vec<&String> = lines.iter().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

#[tokio::test]
async fn notifications_cancelled_over_stdio_stops_the_pagination() {
    let mock = Mock::start().await;
    route_pages(&mock);
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&mock, dir.path(), "read_only", "");
    let mut raw = Raw::spawn(&config);
    raw.send(format!("{INITIALIZE}\n{INITIALIZED}\n").as_bytes())
        .await;
    assert_eq!(raw.next().await["id"], 1);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "run_select_query", "arguments": {"sql": SELECT}}});
    raw.send(format!("{call}\n").as_bytes()).await;

    eventually("the second page is requested", || {
        page_requested(&mock, "pageToken=t2")
    })
    .await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 7, "reason": "the user moved on"}});
    let sent = std::time::Instant::now();
    raw.send(format!("{cancel}\n").as_bytes()).await;

    let audit = dir.path().join("audit");
    eventually("the call is recorded as cancelled", || {
        cancelled_select(&audit)
    })
    .await;
    eprintln!(
        "cancelled and recorded {} ms after notifications/cancelled",
        sent.elapsed().as_millis()
    );
    slow_page_abandoned(&mock).await;
    assert!(!page_requested(&mock, "pageToken=t3"));

    session_goes_on_after_cancelling_7(raw).await;
}

/// A cancelled request (id 7) got no response: the next message is the answer to a ping
/// sent after it; the session goes on, and the server exits cleanly at EOF. The ping has an
/// id of its own, as MCP requires: a ping reusing id 7 could be answered with the cancelled
/// call's late result, which rmcp drops only while no request of that id is open.
async fn session_goes_on_after_cancelling_7(mut raw: Raw) {
    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"}\n")
        .await;
    assert_eq!(
        raw.next().await,
        json!({"jsonrpc": "2.0", "id": 8, "result": {}})
    );
    assert_eq!(raw.finish().await, 0);
}

#[tokio::test]
async fn notifications_cancelled_over_stdio_withdraws_an_open_approval_prompt() {
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&mock, dir.path(), "safe", "");
    let mut raw = Raw::spawn(&config);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "raw", "version": "1"}}});
    raw.send(format!("{initialize}\n{INITIALIZED}\n").as_bytes())
        .await;
    assert_eq!(raw.next().await["id"], 1);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "run_mutation_query", "arguments": {"sql": crate::support::gate::INSERT}}});
    raw.send(format!("{call}\n").as_bytes()).await;
    let prompt = raw.next().await;
    assert_eq!(prompt["method"], "elicitation/create", "{prompt}");

    // The client cancels the call instead of answering the prompt.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 7, "reason": "the user moved on"}});
    raw.send(format!("{cancel}\n").as_bytes()).await;
    // The prompt is withdrawn, and the call gets no response.
    let withdrawn = raw.next().await;
    assert_eq!(
        withdrawn["method"], "notifications/cancelled",
        "{withdrawn}"
    );
    assert_eq!(
        withdrawn["params"]["requestId"], prompt["id"],
        "{withdrawn}"
    );

    let audit = dir.path().join("audit");
    eventually("the call is recorded as cancelled", || {
        outcomes(&audit).iter().any(|r| {
            r.record.tool == "run_mutation_query"
                && r.record.error_code.as_deref() == Some("call.cancelled")
        })
    })
    .await;
    assert!(mock.requests().is_empty(), "nothing was sent");
    session_goes_on_after_cancelling_7(raw).await;
}
