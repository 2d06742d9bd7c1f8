//! Admission, driven over JWT-authenticated HTTP as the clients of two tenants call it:
//! statements waiting on their upstream hold no evaluation slot (another call of the same
//! tenant runs meanwhile, even with one slot per tenant, and a flood of them leaves both
//! tenants served), and a tenant whose client does not take its responses gets
//! `server.busy` (nothing sent upstream) while the other tenant is served; a large statement
//! waiting on its upstream holds a bulk permit its tenant's next large statement waits
//! for, while the other tenant's large statements run. Slots held by
//! local work, and their `server.busy`, are covered by the unit tests of
//! `mcp::pipeline::admission`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};

use crate::mcp_support::TestServer;
use crate::mock::Reply;
use crate::support::identity::{JwksServer, SigningKey, claims, jwt_server};
use crate::support::raw::RawCall;
use crate::support::wait::eventually;

/// A `tools/call` of `run_select_query` as a 2026-07-28 client sends it; the JSON-RPC reply.
async fn select(http: &reqwest::Client, url: &str, token: &str, sql: &str) -> Value {
    RawCall::select(sql).bearer(token).reply(http, url).await
}

fn error_code(reply: &Value) -> &str {
    reply["result"]["structuredContent"]["error"]["code"]
        .as_str()
        .unwrap_or("")
}

/// A server whose tenants come from ES256 tokens signed by the returned key (its JWKS
/// server must live as long as the test), with `limits` (YAML) added.
async fn jwt_server_with(limits: &str) -> (TestServer, SigningKey, JwksServer) {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = jwt_server(&jwks, "30s", "", limits).await;
    (server, key, jwks)
}

#[tokio::test]
async fn a_call_waiting_on_a_slow_upstream_holds_no_slot() {
    // One slot per tenant, and a wait long enough that a slot held by the waiting call
    // would show as `server.busy` rather than as a hang.
    let (server, key, _jwks) = jwt_server_with(
        "limits:\n  max_concurrent_evaluations: 2\n  max_tenant_evaluations: 1\n  admission_wait: 2s\n",
    )
    .await;
    let (slow, release) = Reply::json(json!([{"id": 9, "name": "slow"}])).held();
    server.mock.route("/orgs/slow/items", slow);
    server.mock.route(
        "/orgs/small/items",
        Reply::json(json!([{"id": 1, "name": "small"}])),
    );
    let http = reqwest::Client::new();
    let acme = key.sign(&claims("acme"));

    let waiting = {
        let (http, url, token) = (http.clone(), server.url.clone(), acme.clone());
        tokio::spawn(async move {
            select(
                &http,
                &url,
                &token,
                "SELECT name FROM testapi.items.items WHERE org = 'slow'",
            )
            .await
        })
    };
    server
        .mock
        .wait_for(
            "/orgs/slow/items",
            1,
            Duration::from_secs(20),
            "the slow call never reached the upstream",
        )
        .await;

    // The same tenant's next call runs to its end while the first waits for its page.
    assert_small_select_served(&http, &server.url, &acme).await;
    assert!(!waiting.is_finished(), "the slow call did not wait");

    release.release();
    let reply = waiting.await.unwrap();
    assert_eq!(
        reply["result"]["structuredContent"],
        json!({"rows": [{"name": "slow"}]}),
        "{reply}"
    );
}

#[tokio::test]
async fn a_flood_waiting_on_its_upstream_takes_no_slots_from_its_tenant_or_the_others() {
    let (server, key, _jwks) = jwt_server_with(
        "limits:\n  max_concurrent_evaluations: 3\n  max_tenant_evaluations: 2\n  admission_wait: 400ms\n",
    )
    .await;
    // The flood's statements wait on their upstream far longer than the admission wait.
    let (slow, release) = Reply::json(json!([{"id": 9, "name": "slow"}])).held();
    server.mock.route("/orgs/slow/items", slow);
    server.mock.route(
        "/orgs/small/items",
        Reply::json(json!([{"id": 1, "name": "small"}])),
    );
    let http = reqwest::Client::new();
    let acme = key.sign(&claims("acme"));
    let globex = key.sign(&claims("globex"));

    let flood: Vec<_> = (0..4)
        .map(|_| {
            let (http, url, token) = (http.clone(), server.url.clone(), acme.clone());
            tokio::spawn(async move {
                select(
                    &http,
                    &url,
                    &token,
                    "SELECT name FROM testapi.items.items WHERE org = 'slow'",
                )
                .await
            })
        })
        .collect();
    // Every call of the flood was admitted and sent its request, twice acme's share.
    server
        .mock
        .wait_for(
            "/orgs/slow/items",
            4,
            Duration::from_secs(20),
            "the flood's calls did not all reach the upstream",
        )
        .await;

    // Both tenants are served while the flood waits.
    assert_small_select_served(&http, &server.url, &globex).await;
    assert_small_select_served(&http, &server.url, &acme).await;

    release.release();
    for call in flood {
        let reply = call.await.unwrap();
        assert_eq!(
            reply["result"]["structuredContent"],
            json!({"rows": [{"name": "slow"}]}),
            "{reply}"
        );
    }
    assert_eq!(server.mock.count("/orgs/slow/items"), 4);
}

/// Sends a `tools/call` over a raw TCP connection with a tiny receive buffer, reads the
/// response's status line and then stops reading: a client that does not take its response.
async fn stalled_select(url: &str, token: &str, sql: &str) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let url = reqwest::Url::parse(url).unwrap();
    let host = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
    let request = RawCall::select(sql).bearer(token).http1(&host, url.path());
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(host.parse().unwrap()).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0_u8; 2048];
    let read = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut head))
        .await
        .expect("no response in time")
        .unwrap();
    let status = String::from_utf8_lossy(&head[..read]).into_owned();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    stream
}

#[tokio::test]
async fn responses_a_client_does_not_take_hold_its_tenants_bytes_until_it_goes_away() {
    let (server, key, _jwks) = jwt_server_with(
        "limits:\n  max_response_bytes_in_flight: 1048576\n  max_tenant_response_bytes_in_flight: 65536\n  admission_wait: 300ms\n",
    )
    .await;
    // 64 rows of 128 KiB: a response of about 16 MiB, far more than the socket buffers hold.
    server
        .mock
        .route("/orgs/big/items", Reply::json(long_rows(64, 128 * 1024)));
    server.mock.route(
        "/orgs/small/items",
        Reply::json(json!([{"id": 1, "name": "small"}])),
    );
    server.mock.route(
        "/orgs/probe/items",
        Reply::json(json!([{"id": 2, "name": "probe"}])),
    );
    let http = reqwest::Client::new();
    let acme = key.sign(&claims("acme"));
    let globex = key.sign(&claims("globex"));
    let probe = "SELECT name FROM testapi.items.items WHERE org = 'probe'";
    let probes_sent = || server.mock.count("/orgs/probe/items");

    // acme's client asks for the large result and does not read it.
    let stalled = stalled_select(&server.url, &acme, BIG_SELECT).await;

    // acme's next statement waits for its bytes, then is busy; nothing was sent upstream.
    let busy = select(&http, &server.url, &acme, probe).await;
    assert_eq!(error_code(&busy), "server.busy", "{busy}");
    let error = &busy["result"]["structuredContent"]["error"];
    assert_eq!(error["retry_after_seconds"], 1);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "server busy: tenant 'acme' already has 64.0 KiB of responses being sent (limits.max_tenant_response_bytes_in_flight) and they were not sent within 300ms"
        ),
        "{message}"
    );
    assert_eq!(probes_sent(), 0);

    // globex is served meanwhile.
    assert_small_select_served(&http, &server.url, &globex).await;

    // The client goes away: its response is dropped and acme is served again.
    drop(stalled);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let reply = select(&http, &server.url, &acme, probe).await;
        match error_code(&reply) {
            "" => {
                assert_eq!(
                    reply["result"]["structuredContent"],
                    json!({"rows": [{"name": "probe"}]})
                );
                break;
            }
            "server.busy" => assert!(
                tokio::time::Instant::now() < deadline,
                "acme's bytes were never released"
            ),
            other => panic!("unexpected {other}: {reply}"),
        }
    }
    assert_eq!(probes_sent(), 1);
}

/// `count` rows with names of 150 bytes: about 170 bytes a row in JSON.
fn wide_rows(prefix: &str, count: usize) -> Value {
    let rows: Vec<Value> = (0..count)
        .map(|i| json!({"id": i, "name": format!("{prefix}{}", "x".repeat(150))}))
        .collect();
    Value::Array(rows)
}

/// The `n` of a `run_select_query` reply's one row.
fn count_of(reply: &Value) -> &Value {
    &reply["result"]["structuredContent"]["rows"][0]["n"]
}

#[tokio::test]
async fn a_large_statement_holds_its_tenants_bulk_permit_until_it_ends() {
    let (server, key, _jwks) = jwt_server_with(ONE_BULK_PERMIT_PER_TENANT).await;
    // Pages of about 340 KiB, past the 128 KiB from which a statement needs a permit.
    for org in ["big", "other", "globex"] {
        server.mock.route(
            &format!("/orgs/{org}/items"),
            Reply::json(wide_rows(org, 2000)),
        );
    }
    let (slow, release) = Reply::json(json!([{"id": 9, "name": "slow"}])).held();
    server.mock.route("/orgs/slow/items", slow);
    server.mock.route(
        "/orgs/small/items",
        Reply::json(json!([{"id": 1, "name": "small"}])),
    );
    let http = reqwest::Client::new();
    let acme = key.sign(&claims("acme"));
    let globex = key.sign(&claims("globex"));
    let spawn_select = |token: &str, sql: &'static str| {
        let (http, url, token) = (http.clone(), server.url.clone(), token.to_owned());
        tokio::spawn(async move { select(&http, &url, &token, sql).await })
    };

    // acme's first statement loads its large page, then waits on its upstream.
    let first = spawn_select(
        &acme,
        "SELECT count(*) AS n FROM testapi.items.items WHERE org IN ('big', 'slow')",
    );
    server
        .mock
        .wait_for(
            "/orgs/slow/items",
            1,
            Duration::from_secs(20),
            "the first statement never reached its slow upstream",
        )
        .await;
    // acme's next large statement fetches its page and waits for the permit.
    let second = start_count(&server, &http, &acme, "other").await;
    // globex's large statement runs to its end meanwhile, and so do acme's small ones.
    assert_large_count_served(&http, &server.url, &globex).await;
    assert_small_select_served(&http, &server.url, &acme).await;
    assert!(
        !second.is_finished(),
        "acme's second large statement ran beside its first"
    );

    release.release();
    let first = first.await.unwrap();
    assert_eq!(count_of(&first), 2001, "{first}");
    let second = second.await.unwrap();
    assert_eq!(count_of(&second), 2000, "{second}");
}

#[tokio::test]
async fn a_large_response_its_client_does_not_take_keeps_the_bulk_permit() {
    let (server, key, _jwks) = jwt_server_with(ONE_BULK_PERMIT_PER_TENANT).await;
    // 64 rows of 128 KiB: far more than the socket buffers hold.
    server
        .mock
        .route("/orgs/big/items", Reply::json(long_rows(64, 128 * 1024)));
    for org in ["other", "globex"] {
        server.mock.route(
            &format!("/orgs/{org}/items"),
            Reply::json(wide_rows(org, 2000)),
        );
    }
    let http = reqwest::Client::new();
    let acme = key.sign(&claims("acme"));
    let globex = key.sign(&claims("globex"));

    // acme's client asks for the large result and does not read it.
    let stalled = stalled_select(
        &server.url,
        &acme,
        "SELECT id, name FROM testapi.items.items WHERE org = 'big'",
    )
    .await;
    // acme's next large statement fetches its page and waits for the permit.
    let second = start_count(&server, &http, &acme, "other").await;
    assert_large_count_served(&http, &server.url, &globex).await;
    assert!(
        !second.is_finished(),
        "the permit was freed before the response was sent"
    );

    // The client goes away: its response is dropped, and the permit with it.
    drop(stalled);
    let second = second.await.unwrap();
    assert_eq!(count_of(&second), 2000, "{second}");
}

#[tokio::test]
async fn a_statement_waiting_for_its_bulk_permit_leaves_its_page_unread() {
    let (server, key, _jwks) = jwt_server_with(ONE_BULK_PERMIT_PER_TENANT).await;
    let huge = route_huge_page(&server);
    let http = reqwest::Client::new();
    let acme = key.sign(&claims("acme"));
    let globex = key.sign(&claims("globex"));

    // acme's client does not read its large result: its statement keeps the permit.
    let stalled = stalled_select(&server.url, &acme, BIG_SELECT).await;
    // acme's next large statement has its page's headers and waits for the permit.
    let second = start_count(&server, &http, &acme, "huge").await;
    assert_large_count_served(&http, &server.url, &globex).await;
    let taken = huge.load(Ordering::SeqCst);
    assert!(
        taken < HUGE_PAGE / 2,
        "the page was read while its statement waited for the permit: {taken} of {HUGE_PAGE} bytes"
    );
    assert!(!second.is_finished());

    drop(stalled);
    let second = second.await.unwrap();
    assert_eq!(count_of(&second), 16, "{second}");
    assert!(huge.load(Ordering::SeqCst) >= HUGE_PAGE);
}

#[tokio::test]
async fn a_wait_for_the_bulk_permit_does_not_count_against_the_upstream_timeout() {
    let (server, key, _jwks) = jwt_server_with(&format!(
        "upstream:\n  timeout: 1s\n{ONE_BULK_PERMIT_PER_TENANT}"
    ))
    .await;
    let huge = route_huge_page(&server);
    let http = reqwest::Client::new();
    let acme = key.sign(&claims("acme"));

    let stalled = stalled_select(&server.url, &acme, BIG_SELECT).await;
    let second = start_count(&server, &http, &acme, "huge").await;
    // The permit comes after the upstream timeout: once the wait at the page's headers has
    // run out (it lasts at most that timeout) and the page has been read.
    eventually(
        "the page read once the wait at its headers ran out",
        Duration::from_secs(30),
        Duration::from_millis(20),
        || async {
            let taken = huge.load(Ordering::SeqCst);
            if taken >= HUGE_PAGE {
                Ok(())
            } else {
                Err(taken)
            }
        },
    )
    .await;
    drop(stalled);
    let second = second.await.unwrap();
    assert_eq!(count_of(&second), 16, "{second}");
    assert_eq!(
        server.mock.count("/orgs/huge/items"),
        1,
        "the page was asked for again"
    );
}

#[tokio::test]
async fn a_request_whose_last_answer_was_large_waits_for_the_bulk_permit_before_it_is_sent() {
    let (server, key, _jwks) = jwt_server_with(ONE_BULK_PERMIT_PER_TENANT).await;
    route_huge_page(&server);
    let http = reqwest::Client::new();
    let acme = key.sign(&claims("acme"));
    let globex = key.sign(&claims("globex"));
    let first = spawn_count(&http, &server.url, &acme, "huge")
        .await
        .unwrap();
    assert_eq!(count_of(&first), 16, "{first}");
    assert_eq!(server.mock.count("/orgs/huge/items"), 1);

    // With the permit held, the same request again is not sent until the permit is free.
    let stalled = stalled_select(&server.url, &acme, BIG_SELECT).await;
    let again = spawn_count(&http, &server.url, &acme, "huge");
    assert_large_count_served(&http, &server.url, &globex).await;
    assert_eq!(
        server.mock.count("/orgs/huge/items"),
        1,
        "sent while its statement waited for the permit"
    );
    assert!(!again.is_finished());

    drop(stalled);
    let again = again.await.unwrap();
    assert_eq!(count_of(&again), 16, "{again}");
    assert_eq!(server.mock.count("/orgs/huge/items"), 2);
}

/// Limits with one bulk permit per tenant, two over all.
const ONE_BULK_PERMIT_PER_TENANT: &str =
    "limits:\n  max_bulk_statements: 2\n  max_tenant_bulk_statements: 1\n";

/// The select of acme's 64 rows of 128 KiB (`org = 'big'`, see [`route_huge_page`]).
const BIG_SELECT: &str = "SELECT id, name FROM testapi.items.items WHERE org = 'big'";

/// The bytes of the page [`route_huge_page`] serves, about: 16 rows of 1 MiB.
const HUGE_PAGE: usize = 16 * 1024 * 1024;

/// Routes `org = 'big'` (64 rows of 128 KiB) and `org = 'huge'` (16 rows of 1 MiB, far more
/// than the socket buffers hold, sent in pieces), and the wide rows of `org = 'globex'`;
/// the count of the huge page's bytes the mock has taken to send.
fn route_huge_page(server: &TestServer) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    server
        .mock
        .route("/orgs/big/items", Reply::json(long_rows(64, 128 * 1024)));
    let (huge, taken) = Reply::json(long_rows(16, 1024 * 1024)).counted();
    server.mock.route("/orgs/huge/items", huge);
    server
        .mock
        .route("/orgs/globex/items", Reply::json(wide_rows("globex", 2000)));
    taken
}

/// `count` rows whose `name` is `len` bytes long.
fn long_rows(count: usize, len: usize) -> Value {
    let rows: Vec<Value> = (0..count)
        .map(|i| json!({"id": i, "name": "x".repeat(len)}))
        .collect();
    Value::Array(rows)
}

/// Starts `token`'s count over the rows of `org`.
fn spawn_count(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    org: &'static str,
) -> tokio::task::JoinHandle<Value> {
    let (http, url, token) = (http.clone(), url.to_owned(), token.to_owned());
    tokio::spawn(async move {
        let sql = format!("SELECT count(*) AS n FROM testapi.items.items WHERE org = '{org}'");
        select(&http, &url, &token, &sql).await
    })
}

/// Starts `token`'s count over the rows of `org` and waits until it has reached the
/// upstream (`other`: 2,000 wide rows, whose page then needs a bulk permit).
async fn start_count(
    server: &TestServer,
    http: &reqwest::Client,
    token: &str,
    org: &'static str,
) -> tokio::task::JoinHandle<Value> {
    let call = spawn_count(http, &server.url, token, org);
    server
        .mock
        .wait_for(
            &format!("/orgs/{org}/items"),
            1,
            Duration::from_secs(20),
            "the statement never reached its upstream",
        )
        .await;
    call
}

/// `token`'s count over the 2,000 wide rows of `org = 'globex'` is answered.
async fn assert_large_count_served(http: &reqwest::Client, url: &str, token: &str) {
    let served = select(
        http,
        url,
        token,
        "SELECT count(*) AS n FROM testapi.items.items WHERE org = 'globex'",
    )
    .await;
    assert_eq!(count_of(&served), 2000, "{served}");
}

/// `token`'s small select (`org = 'small'`) is answered with its one row.
async fn assert_small_select_served(http: &reqwest::Client, url: &str, token: &str) {
    let small = select(
        http,
        url,
        token,
        "SELECT name FROM testapi.items.items WHERE org = 'small'",
    )
    .await;
    assert_eq!(
        small["result"]["structuredContent"],
        json!({"rows": [{"name": "small"}]}),
        "{small}"
    );
}
