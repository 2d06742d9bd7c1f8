//! The result cache (`tenants[].cache`), driven through rmcp clients of two tenants (JWT):
//! a repeated SELECT is served without a request upstream and says so (`cached`, its age,
//! the audit's `cache_hit`); it expires after its TTL (tokio's clock, paused and advanced);
//! a write drops the results of the resource it touches and only those; each tenant has its
//! own cache; a credential reload drops the tenant's results.

use std::time::Duration;

use serde_json::{Value, json};

use crate::mcp_support::{Client, TestServer, call, start_yaml, text_of};
use crate::mock::Reply;
use crate::support::audited::records;
use crate::support::identity::{
    ISSUER, JwksServer, RESOURCE, SigningKey, base_yaml, claims, rmcp_client,
};

const ITEMS: &str = "SELECT id, name FROM testapi.items.items WHERE org = 'acme'";
/// The same query written otherwise: one cache entry.
const ITEMS_AGAIN: &str = "select id,   name from testapi.items.items where org = 'acme'";
const WIDGETS: &str = "SELECT id FROM testapi.widgets.widgets WHERE org = 'acme'";
const DELETE: &str = "DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-1'";

/// Tenants `acme` (`full_access`) and `globex`, both caching for `ttl`; audit in
/// `dir/audit`.
async fn server(jwks: &JwksServer, ttl: &str) -> TestServer {
    let url = jwks.url.clone();
    let cache =
        format!("    cache:\n      ttl: {ttl}\n      max_entries: 16\n      max_bytes: 65536\n");
    start_yaml(|mock, dir| {
        format!(
            // base_yaml ends with globex's entry: the second `cache` is globex's.
            "{}{cache}audit:\n  file:\n    dir: {}\nserver:\n  listen: 127.0.0.1:0\nauth:\n  resource: {RESOURCE}\n  authorization_servers: [{ISSUER}]\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        jwks_url: {url}\n        algorithms: [ES256]\n        tenants: [default, acme, globex]\n",
            base_yaml(mock, dir, &format!("    mode: full_access\n{cache}")),
            dir.join("audit").display(),
        )
    })
    .await
}

async fn client(server: &TestServer, key: &SigningKey, tenant: &str) -> Client {
    rmcp_client(
        reqwest::Client::new(),
        &server.url,
        Some(&key.sign(&claims(tenant))),
    )
    .await
}

async fn select(client: &Client, sql: &str) -> Value {
    let result = call(
        client,
        "run_select_query",
        json!({"sql": sql, "format": "json"}),
    )
    .await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let structured = result.structured_content.clone().unwrap();
    // The JSON text is the structured result, `cached` marks included.
    let text: Value = serde_json::from_str(&text_of(&result)).unwrap();
    assert_eq!(text, structured);
    structured
}

fn names(result: &Value) -> Vec<String> {
    result["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn a_repeated_select_is_served_from_the_cache_and_says_so() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = server(&jwks, "30s").await;
    server.mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "one"}])),
    );
    let acme = client(&server, &key, "acme").await;

    let first = select(&acme, ITEMS).await;
    assert_eq!(first.get("cached"), None);
    let second = select(&acme, ITEMS_AGAIN).await;
    assert_eq!(
        server.mock.count("/orgs/acme/items"),
        1,
        "two calls, one request"
    );
    assert_eq!(second["cached"], true);
    assert_eq!(second["cache_age_seconds"], 0);
    assert_eq!(second["rows"], first["rows"]);
    // Markdown says so in its text too (another rendering: another entry, from the upstream).
    call(&acme, "run_select_query", json!({"sql": ITEMS})).await;
    let markdown = call(&acme, "run_select_query", json!({"sql": ITEMS})).await;
    assert!(
        text_of(&markdown).contains("(cached result, 0 s old)"),
        "{}",
        text_of(&markdown)
    );
    assert_eq!(server.mock.count("/orgs/acme/items"), 2);

    // A row cap of its own is another entry.
    let capped = call(
        &acme,
        "run_select_query",
        json!({"sql": ITEMS, "format": "json", "row_limit": 1}),
    )
    .await;
    assert_eq!(capped.structured_content.unwrap().get("cached"), None);
    assert_eq!(server.mock.count("/orgs/acme/items"), 3);

    // The audit notes the hits (and only them).
    let hits: Vec<Option<bool>> = records(&server._dir.path().join("audit"))
        .iter()
        .filter(|r| r.record.tool == "run_select_query")
        .map(|r| r.record.cache_hit)
        .collect();
    assert_eq!(hits, vec![None, Some(true), None, Some(true), None]);
}

#[tokio::test]
async fn a_cached_result_expires_after_its_ttl() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = server(&jwks, "30s").await;
    server.mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "one"}])),
    );
    let acme = client(&server, &key, "acme").await;
    assert_eq!(select(&acme, ITEMS).await.get("cache_age_seconds"), None);
    // Younger than the TTL on the server's clock: served from the cache, with its age.
    server.clock.advance(Duration::from_secs(25));
    let hit = select(&acme, ITEMS).await;
    assert_eq!(hit["cached"], true, "{hit}");
    let age = hit["cache_age_seconds"].as_u64();
    assert!(age.is_some_and(|age| (25..30).contains(&age)), "{hit}");
    assert_eq!(server.mock.count("/orgs/acme/items"), 1);
    // Past it: the statement runs again.
    server.clock.advance(Duration::from_secs(5));
    assert_eq!(select(&acme, ITEMS).await.get("cache_age_seconds"), None);
    assert_eq!(server.mock.count("/orgs/acme/items"), 2);
}

#[tokio::test]
async fn a_write_drops_the_results_of_its_resource_only() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = server(&jwks, "30s").await;
    server.mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "one"}])),
    );
    server.mock.route(
        "/orgs/acme/widgets",
        Reply::json(json!([{"id": "w-1", "name": "w"}])),
    );
    server
        .mock
        .route("DELETE /orgs/acme/widgets/w-1", Reply::status(204, ""));
    let acme = client(&server, &key, "acme").await;
    for _ in 0..2 {
        select(&acme, ITEMS).await;
        select(&acme, WIDGETS).await;
    }
    assert_eq!(server.mock.count("/orgs/acme/items"), 1);
    assert_eq!(server.mock.count("/orgs/acme/widgets"), 1);

    let deleted = call(&acme, "run_mutation_query", json!({"sql": DELETE})).await;
    assert_ne!(deleted.is_error, Some(true), "{deleted:?}");
    assert_eq!(select(&acme, WIDGETS).await.get("cached"), None);
    assert_eq!(
        server.mock.count("/orgs/acme/widgets"),
        2,
        "the write dropped it"
    );
    assert_eq!(select(&acme, ITEMS).await["cached"], true);
    assert_eq!(
        server.mock.count("/orgs/acme/items"),
        1,
        "another resource stays"
    );
}

#[tokio::test]
async fn tenants_never_share_results_and_a_credential_reload_drops_them() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = server(&jwks, "30s").await;
    // The upstream answers each request with other rows: whose request it was shows.
    server.mock.route_sequence(
        "/orgs/acme/items",
        vec![
            Reply::json(json!([{"id": 1, "name": "acme's"}])),
            Reply::json(json!([{"id": 2, "name": "globex's"}])),
            Reply::json(json!([{"id": 3, "name": "after the reload"}])),
        ],
    );
    let acme = client(&server, &key, "acme").await;
    let globex = client(&server, &key, "globex").await;

    assert_eq!(names(&select(&acme, ITEMS).await), ["acme's"]);
    assert_eq!(names(&select(&acme, ITEMS).await), ["acme's"]);
    let theirs = select(&globex, ITEMS).await;
    assert_eq!(
        names(&theirs),
        ["globex's"],
        "globex got acme's cached rows"
    );
    assert_eq!(theirs.get("cached"), None);
    assert_eq!(names(&select(&globex, ITEMS).await), ["globex's"]);
    assert_eq!(names(&select(&acme, ITEMS).await), ["acme's"]);
    let keys: Vec<String> = server
        .mock
        .requests()
        .iter()
        .map(|r| r.headers["x-api-key"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        keys,
        vec![
            crate::support::SECRET.to_owned(),
            crate::support::identity::OTHER_SECRET.to_owned()
        ]
    );

    // acme's key changes and is reloaded: its cached rows go with the old key.
    std::fs::write(
        server._dir.path().join("acme.env"),
        "TESTAPI_KEY=tk-acme-rotated-0042\n",
    )
    .unwrap();
    let reloaded = call(&acme, "reload_credentials", json!({})).await;
    assert_ne!(reloaded.is_error, Some(true), "{reloaded:?}");
    let fresh = select(&acme, ITEMS).await;
    assert_eq!(fresh.get("cached"), None);
    assert_eq!(names(&fresh), ["after the reload"]);
    let last = server.mock.requests().last().unwrap().headers["x-api-key"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(last, "tk-acme-rotated-0042");
    // globex's entry is its own.
    assert_eq!(select(&globex, ITEMS).await["cached"], true);
}

#[tokio::test]
async fn a_credential_file_rotated_on_disk_is_not_served_the_old_rows() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = server(&jwks, "60s").await;
    server.mock.route_sequence(
        "/orgs/acme/items",
        vec![
            Reply::json(json!([{"id": 1, "name": "with the old key"}])),
            Reply::json(json!([{"id": 2, "name": "with the rotated key"}])),
        ],
    );
    let acme = client(&server, &key, "acme").await;
    assert_eq!(names(&select(&acme, ITEMS).await), ["with the old key"]);
    assert_eq!(select(&acme, ITEMS).await["cached"], true);
    // The key is rotated in the tenant's env file, with no reload: the next hit looks at the
    // file (at most once a second) and its rows, read with the old key, are not served.
    std::fs::write(
        server._dir.path().join("acme.env"),
        "TESTAPI_KEY=tk-acme-rotated-0077\n",
    )
    .unwrap();
    let fresh = crate::support::wait::eventually(
        "a result read with the rotated key",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            let result = select(&acme, ITEMS).await;
            result.get("cached").is_none().then_some(result)
        },
    )
    .await;
    assert_eq!(names(&fresh), ["with the rotated key"]);
    let last = server.mock.requests().last().unwrap().headers["x-api-key"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(last, "tk-acme-rotated-0077");
}
