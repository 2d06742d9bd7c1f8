//! Quotas per tenant, principal and query class (`tenants[].quotas`), driven over
//! JWT-authenticated HTTP as two tenants' clients call them: counted in memory on one
//! replica; a call over quota gets `quota.exceeded` with `retry_after_seconds` and sends
//! nothing upstream; another tenant, and another principal under its own quota, are not
//! affected; with the shared store down, reads run and writes are refused
//! (`quotas.on_store_failure: reads_open`, the default). The refusal and store-failure
//! counters are covered by the unit tests of `telemetry::metrics`. Fleet-wide counting through
//! PostgreSQL is in `quota_fleet`.

use serde_json::json;

use crate::mcp_support::TestServer;
use crate::support::gate::{INSERT, SELECT, route_all};
use crate::support::identity::{JwksServer, SigningKey, claims, jwt_server};

use crate::support::quota_calls::*;

/// A server whose tenants (`default`, `acme`, `globex`) come from ES256 tokens signed by the
/// returned key; `acme` gets `acme_extra` (YAML at its level) and the top level `extra`.
async fn server(acme_extra: &str, extra: &str) -> (TestServer, SigningKey, JwksServer) {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = jwt_server(&jwks, "30s", acme_extra, extra).await;
    route_all(&server.mock);
    (server, key, jwks)
}

fn token_of(key: &SigningKey, tenant: &str, subject: &str) -> String {
    let mut claims = claims(tenant);
    claims["sub"] = json!(subject);
    key.sign(&claims)
}

#[tokio::test]
async fn a_tenant_over_its_read_quota_is_refused_with_the_wait_and_others_are_served() {
    let (server, key, _jwks) = server(
        "    mode: full_access\n    quotas:\n      read: 3/hour\n      write: 1/hour\n",
        "",
    )
    .await;
    let http = reqwest::Client::new();
    let acme = token_of(&key, "acme", "acme-agent");
    let globex = token_of(&key, "globex", "globex-agent");
    let mut codes = Vec::new();
    for _ in 0..5 {
        let reply = call_sql(&http, &server.url, &acme, "run_select_query", SELECT).await;
        codes.push(code_of(&reply).to_owned());
        if code_of(&reply) == "quota.exceeded" {
            let error = &reply["result"]["structuredContent"]["error"];
            let retry = error["retry_after_seconds"].as_u64().unwrap();
            assert!((1..=3600).contains(&retry), "{reply}");
            assert_eq!(error["scope"], "tenant");
            assert_eq!(error["class"], "read");
            assert_eq!(error["limit"], 3);
            assert_eq!(error["window"], "hour");
            assert_eq!(reply["result"]["isError"], true);
            let message = error["message"].as_str().unwrap();
            assert!(
                message.starts_with("quota exceeded: tenant 'acme' has used its 3 read calls per hour (tenants[].quotas.read); tool 'run_select_query' did not run: retry after"),
                "{message}"
            );
        }
    }
    assert_eq!(
        codes,
        ["", "", "", "quota.exceeded", "quota.exceeded"],
        "three admitted, then refused"
    );
    // A refused call sends nothing upstream.
    assert_eq!(server.mock.count("/orgs/acme/items"), 3);
    // Writes count apart from reads, with their own (lower) quota.
    let write = call_sql(&http, &server.url, &acme, "run_mutation_query", INSERT).await;
    assert_eq!(code_of(&write), "", "{write}");
    let write = call_sql(&http, &server.url, &acme, "run_mutation_query", INSERT).await;
    assert_eq!(code_of(&write), "quota.exceeded", "{write}");
    // Another tenant, without quotas, is served.
    for _ in 0..5 {
        let reply = call_sql(&http, &server.url, &globex, "run_select_query", SELECT).await;
        assert_eq!(code_of(&reply), "", "{reply}");
    }
}

#[tokio::test]
async fn a_principal_over_its_own_quota_leaves_the_tenant_s_to_the_others() {
    let (server, key, _jwks) = server(
        "    quotas:\n      read: 4/hour\n      per_principal:\n        read: 2/hour\n",
        "",
    )
    .await;
    let http = reqwest::Client::new();
    let alice = token_of(&key, "acme", "alice");
    let bob = token_of(&key, "acme", "bob");
    let carol = token_of(&key, "acme", "carol");
    let mut alice_codes = Vec::new();
    for _ in 0..5 {
        let reply = call_sql(&http, &server.url, &alice, "run_select_query", SELECT).await;
        alice_codes.push(code_of(&reply).to_owned());
        if code_of(&reply) == "quota.exceeded" {
            let error = &reply["result"]["structuredContent"]["error"];
            assert_eq!(error["scope"], "principal", "{reply}");
            assert!(
                error["message"]
                    .as_str()
                    .unwrap()
                    .contains("principal 'alice' of tenant 'acme' has used its 2 read calls per hour (tenants[].quotas.per_principal.read)"),
                "{reply}"
            );
        }
    }
    assert_eq!(alice_codes[..2], ["", ""]);
    assert!(alice_codes[2..].iter().all(|c| c == "quota.exceeded"));
    // Alice's refusals took nothing of the tenant's quota: Bob gets the other two.
    for _ in 0..2 {
        let reply = call_sql(&http, &server.url, &bob, "run_select_query", SELECT).await;
        assert_eq!(code_of(&reply), "", "{reply}");
    }
    let reply = call_sql(&http, &server.url, &carol, "run_select_query", SELECT).await;
    assert_eq!(code_of(&reply), "quota.exceeded", "{reply}");
    assert_eq!(
        reply["result"]["structuredContent"]["error"]["scope"],
        "tenant"
    );
    assert_eq!(server.mock.count("/orgs/acme/items"), 4);
}

#[tokio::test]
async fn with_the_shared_store_down_reads_run_and_writes_are_refused() {
    // A database nobody listens on: the pool connects lazily, so the server starts.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (server, key, _jwks) = server(
        "    mode: full_access\n    quotas:\n      read: 100/min\n      write: 100/min\n",
        &format!(
            "database:\n  url: postgres://qg:secret-pw@127.0.0.1:{port}/qg\n  connect_timeout: 500ms\n"
        ),
    )
    .await;
    let http = reqwest::Client::new();
    let acme = token_of(&key, "acme", "acme-agent");
    for _ in 0..3 {
        let reply = call_sql(&http, &server.url, &acme, "run_select_query", SELECT).await;
        assert_eq!(code_of(&reply), "", "{reply}");
    }
    let write = call_sql(&http, &server.url, &acme, "run_mutation_query", INSERT).await;
    assert_eq!(code_of(&write), "quota.unavailable", "{write}");
    let error = &write["result"]["structuredContent"]["error"];
    assert_eq!(error["retry_after_seconds"], 1);
    assert!(!write.to_string().contains("secret-pw"), "{write}");
    assert_eq!(
        server.mock.count("/orgs/acme/widgets"),
        0,
        "the write was not sent"
    );
}
