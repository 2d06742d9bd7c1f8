//! Admission, driven over JWT-authenticated HTTP as the clients of two tenants call it:
//! a flood of slow statements from one tenant holds only its share of the evaluation slots,
//! the other tenant's small call is served meanwhile, and the flood's calls over the share
//! get `server.busy` (nothing sent upstream) once the admission wait has passed.

use std::time::Duration;

use serde_json::{Value, json};

use crate::identity::{JwksServer, SigningKey, claims, jwt_server};
use crate::mock::Reply;

/// A `tools/call` of `run_select_query` as a 2026-07-28 client sends it; the JSON-RPC reply.
async fn select(http: &reqwest::Client, url: &str, token: &str, sql: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "run_select_query", "arguments": {"sql": sql, "format": "json"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let response = http
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "run_select_query")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

fn error_code(reply: &Value) -> &str {
    reply["result"]["structuredContent"]["error"]["code"]
        .as_str()
        .unwrap_or("")
}

#[tokio::test]
async fn a_flooding_tenant_holds_only_its_share_and_the_rest_get_busy_after_the_wait() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = jwt_server(
        &jwks,
        "30s",
        "",
        "limits:\n  max_concurrent_evaluations: 3\n  max_tenant_evaluations: 2\n  admission_wait: 400ms\n",
    )
    .await;
    // The flood's statements are slow (far longer than the admission wait); the other
    // tenant's is quick.
    server.mock.route(
        "/orgs/slow/items",
        Reply::json(json!([{"id": 9, "name": "slow"}])).delayed(Duration::from_secs(4)),
    );
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
    // Wait until acme's share is in use (its two admitted statements reached the upstream).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while server
        .mock
        .requests()
        .iter()
        .filter(|r| r.path == "/orgs/slow/items")
        .count()
        < 2
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the flood never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // globex is served while acme's flood runs.
    let small = select(
        &http,
        &server.url,
        &globex,
        "SELECT name FROM testapi.items.items WHERE org = 'small'",
    )
    .await;
    assert_eq!(
        small["result"]["structuredContent"],
        json!({"rows": [{"name": "small"}]}),
        "{small}"
    );

    let mut served = 0;
    let mut busy = Vec::new();
    for call in flood {
        let reply = call.await.unwrap();
        match error_code(&reply) {
            "" => served += 1,
            "server.busy" => busy.push(reply),
            other => panic!("unexpected {other}: {reply}"),
        }
    }
    assert_eq!((served, busy.len()), (2, 2));
    for reply in &busy {
        let result = &reply["result"];
        assert_eq!(result["isError"], true, "{reply}");
        assert_eq!(
            result["structuredContent"]["error"]["retry_after_seconds"],
            1
        );
        let message = result["structuredContent"]["error"]["message"]
            .as_str()
            .unwrap();
        assert!(
            message.starts_with("server busy: tenant 'acme' already has 2 statements running"),
            "{message}"
        );
        assert!(message.contains("retry after 1s"), "{message}");
    }
    // The busy calls never reached the upstream.
    assert_eq!(
        server
            .mock
            .requests()
            .iter()
            .filter(|r| r.path == "/orgs/slow/items")
            .count(),
        2
    );
}
