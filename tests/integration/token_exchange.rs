//! Token exchange on behalf of the caller (`tenants[].providers.<name>.token_exchange`):
//! a JWT caller's own token is traded at a mock token endpoint on 127.0.0.1 (RFC 8693 and
//! Entra on-behalf-of) for an upstream token; the mock upstream sees the exchanged token and
//! never the caller's. Exchanged tokens are cached per caller token; a refusal is a typed
//! error without secrets; a call without a bearer token fails closed before any request.

use std::collections::HashMap;

use serde_json::json;

use crate::mcp_support::{TestServer, call, error_code, start_yaml, text_of};
use crate::mock::{Recorded, Reply};
use crate::support::identity::{
    ISSUER, JwksServer, RESOURCE, SigningKey, base_yaml, claims, rmcp_client,
};

const SELECT: &str = "SELECT id FROM testapi.items.items WHERE org = 'acme'";
const CLIENT_ID: &str = "qg-client";
const CLIENT_SECRET: &str = "tx-client-secret-5521";
const TOKEN_PATH: &str = "/oauth2/token";

/// A JWT server whose tenant `acme` exchanges callers' tokens for `testapi` with
/// `exchange` (YAML lines under `token_exchange:`, `{mock}` replaced); audit in `dir/audit`.
async fn server(jwks: &JwksServer, exchange: &str) -> TestServer {
    server_with(jwks, exchange, "").await
}

/// [`server`], with `extra` (YAML lines at the tenant's indentation) added to tenant `acme`.
async fn server_with(jwks: &JwksServer, exchange: &str, extra: &str) -> TestServer {
    let url = jwks.url.clone();
    let (exchange, extra) = (exchange.to_owned(), extra.to_owned());
    start_yaml(move |mock, dir| {
        let lines: String = exchange
            .replace("{mock}", mock)
            .lines()
            .map(|l| format!("          {l}\n"))
            .collect();
        let tenant =
            format!("{extra}    providers:\n      testapi:\n        token_exchange:\n{lines}");
        let base = base_yaml(mock, dir, &tenant);
        let env = dir.join("acme.env");
        let mut text = std::fs::read_to_string(&env).unwrap();
        text.push_str(&format!(
            "TX_CLIENT_ID={CLIENT_ID}\nTX_CLIENT_SECRET={CLIENT_SECRET}\n"
        ));
        std::fs::write(&env, text).unwrap();
        format!(
            "{base}server:\n  listen: 127.0.0.1:0\nauth:\n  resource: {RESOURCE}\n  authorization_servers: [{ISSUER}]\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        jwks_url: {url}\n        algorithms: [ES256]\n        tenants: [default, acme, globex]\naudit:\n  file:\n    dir: {audit}\n",
            audit = dir.join("audit").display(),
        )
    })
    .await
}

const RFC8693: &str = "kind: rfc8693\ntoken_url: {mock}/oauth2/token\nclient_id_env: TX_CLIENT_ID\nclient_secret_env: TX_CLIENT_SECRET\naudience: https://api.testapi.example\nscope: items.read\n";

fn form(request: &Recorded) -> HashMap<String, String> {
    url::form_urlencoded::parse(&request.body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn exchanges(server: &TestServer) -> Vec<Recorded> {
    server
        .mock
        .requests()
        .into_iter()
        .filter(|r| r.path == TOKEN_PATH)
        .collect()
}

fn upstream(server: &TestServer) -> Vec<Recorded> {
    server
        .mock
        .requests()
        .into_iter()
        .filter(|r| r.path != TOKEN_PATH)
        .collect()
}

/// Every header value, the query and the body of `request`, as one text.
fn everything(request: &Recorded) -> String {
    let mut text = format!("{} {:?} ", request.path, request.query);
    for (name, value) in &request.headers {
        text.push_str(&format!(
            "{name}: {} ",
            String::from_utf8_lossy(value.as_bytes())
        ));
    }
    text.push_str(&request.body_text());
    text
}

fn token_for(key: &SigningKey, subject: &str) -> String {
    let mut c = claims("acme");
    c["sub"] = json!(subject);
    key.sign(&c)
}

fn issued(token: &str, expires_in: u64) -> Reply {
    Reply::json(
        json!({"access_token": token, "token_type": "Bearer", "expires_in": expires_in,
                       "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"}),
    )
}

fn audit_text(server: &TestServer) -> String {
    let mut text = String::new();
    for entry in walk(&server._dir.path().join("audit")) {
        text.push_str(&String::from_utf8_lossy(&std::fs::read(entry).unwrap()));
    }
    text
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test]
async fn the_callers_token_is_exchanged_cached_and_never_sent_upstream() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = server(&jwks, RFC8693).await;
    server
        .mock
        .route("/orgs/acme/items", Reply::json(json!([{"id": 1}])));
    server.mock.route_sequence(
        TOKEN_PATH,
        vec![issued("xchg-alice", 3600), issued("xchg-bob", 3600)],
    );
    let http = reqwest::Client::new();
    let alice_jwt = token_for(&key, "alice");
    let alice = rmcp_client(http.clone(), &server.url, Some(&alice_jwt)).await;

    // The first call exchanges alice's token; the upstream sees the exchanged token.
    for _ in 0..2 {
        let result = call(&alice, "run_select_query", json!({"sql": SELECT})).await;
        assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    }
    let sent = exchanges(&server);
    assert_eq!(sent.len(), 1, "the second call used the cached token");
    let fields = form(&sent[0]);
    assert_eq!(
        fields["grant_type"],
        "urn:ietf:params:oauth:grant-type:token-exchange"
    );
    assert_eq!(fields["subject_token"], alice_jwt);
    assert_eq!(
        fields["subject_token_type"],
        "urn:ietf:params:oauth:token-type:access_token"
    );
    assert_eq!(fields["audience"], "https://api.testapi.example");
    assert_eq!(fields["scope"], "items.read");
    assert!(!fields.contains_key("client_secret"));
    let basic = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("{CLIENT_ID}:{CLIENT_SECRET}")
        )
    );
    assert_eq!(sent[0].headers["authorization"], basic.as_str());
    let calls = upstream(&server);
    assert_eq!(calls.len(), 2);
    for request in &calls {
        assert_eq!(request.headers["authorization"], "Bearer xchg-alice");
        let seen = everything(request);
        assert!(!seen.contains(&alice_jwt), "the caller's JWT went upstream");
        assert!(
            !seen.contains(super::support::SECRET),
            "the document's key was sent"
        );
    }

    // Another principal of the same tenant: its own exchange, its own token.
    let bob_jwt = token_for(&key, "bob");
    let bob = rmcp_client(http.clone(), &server.url, Some(&bob_jwt)).await;
    let result = call(&bob, "run_select_query", json!({"sql": SELECT})).await;
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    let sent = exchanges(&server);
    assert_eq!(sent.len(), 2);
    assert_eq!(form(&sent[1])["subject_token"], bob_jwt);
    let last = upstream(&server).pop().unwrap();
    assert_eq!(last.headers["authorization"], "Bearer xchg-bob");
    assert!(!everything(&last).contains(&bob_jwt));

    // server_info names the source, never a token or secret.
    let info = call(&alice, "server_info", json!({})).await;
    let rows = info.structured_content.as_ref().unwrap()["credentials"].clone();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["provider"] == "testapi")
        .unwrap()
        .clone();
    assert_eq!(row["resolved_source"], "token_exchange:rfc8693");
    assert!(row["token_expires_at"].is_string(), "{row}");
    let shown = info.structured_content.as_ref().unwrap().to_string();
    for secret in [CLIENT_SECRET, "xchg-alice", "xchg-bob", alice_jwt.as_str()] {
        assert!(!shown.contains(secret));
    }
    let audit = audit_text(&server);
    assert!(!audit.is_empty());
    for secret in [
        CLIENT_SECRET,
        "xchg-alice",
        "xchg-bob",
        alice_jwt.as_str(),
        bob_jwt.as_str(),
    ] {
        assert!(!audit.contains(secret), "audit holds a secret");
    }
}

#[tokio::test]
async fn an_expiring_exchanged_token_is_exchanged_again() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = server(&jwks, RFC8693).await;
    server
        .mock
        .route("/orgs/acme/items", Reply::json(json!([{"id": 1}])));
    // 60 s is within the expiry margin: the token is used once and not kept.
    server.mock.route_sequence(
        TOKEN_PATH,
        vec![issued("short-1", 60), issued("short-2", 3600)],
    );
    let jwt = token_for(&key, "alice");
    let client = rmcp_client(reqwest::Client::new(), &server.url, Some(&jwt)).await;
    for _ in 0..3 {
        let result = call(&client, "run_select_query", json!({"sql": SELECT})).await;
        assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    }
    assert_eq!(
        exchanges(&server).len(),
        2,
        "re-exchanged once, then cached"
    );
    let seen: Vec<String> = upstream(&server)
        .iter()
        .map(|r| r.headers["authorization"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(seen, ["Bearer short-1", "Bearer short-2", "Bearer short-2"]);
}

#[tokio::test]
async fn entra_on_behalf_of_sends_the_assertion_and_a_refusal_is_a_typed_error() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = server(
        &jwks,
        "kind: entra_obo\ntoken_url: {mock}/oauth2/token\nclient_id_env: TX_CLIENT_ID\nclient_secret_env: TX_CLIENT_SECRET\nscope: https://graph.microsoft.com/.default\n",
    )
    .await;
    server
        .mock
        .route("/orgs/acme/items", Reply::json(json!([{"id": 1}])));
    let jwt = token_for(&key, "alice");
    server.mock.route(
        TOKEN_PATH,
        Reply::status(
            400,
            &json!({"error": "invalid_grant", "error_description": format!("AADSTS50013: assertion {jwt} with {CLIENT_SECRET} is invalid")}).to_string(),
        ),
    );
    let client = rmcp_client(reqwest::Client::new(), &server.url, Some(&jwt)).await;
    let result = call(&client, "run_select_query", json!({"sql": SELECT})).await;
    assert_eq!(result.is_error, Some(true));
    assert_eq!(error_code(&result), "credentials.unresolved");
    let shown = serde_json::to_string(&result).unwrap();
    assert!(shown.contains("invalid_grant"), "{shown}");
    assert!(shown.contains("400"), "{shown}");
    assert!(!shown.contains(&jwt) && !shown.contains(CLIENT_SECRET) && !shown.contains("AADSTS"));
    assert!(upstream(&server).is_empty(), "nothing went upstream");
    let sent = exchanges(&server);
    assert_eq!(sent.len(), 1);
    let fields = form(&sent[0]);
    assert_eq!(
        fields["grant_type"],
        "urn:ietf:params:oauth:grant-type:jwt-bearer"
    );
    assert_eq!(fields["requested_token_use"], "on_behalf_of");
    assert_eq!(fields["assertion"], jwt);
    assert_eq!(fields["scope"], "https://graph.microsoft.com/.default");
    assert_eq!(fields["client_id"], CLIENT_ID);
    assert_eq!(fields["client_secret"], CLIENT_SECRET);
    assert!(!sent[0].headers.contains_key("authorization"));
    let audit = audit_text(&server);
    assert!(audit.contains("credentials.unresolved"));
    assert!(!audit.contains(&jwt) && !audit.contains(CLIENT_SECRET));

    // Once the endpoint accepts, the refusal was not cached.
    server.mock.route(TOKEN_PATH, issued("obo-token", 3600));
    let result = call(&client, "run_select_query", json!({"sql": SELECT})).await;
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    assert_eq!(
        upstream(&server)[0].headers["authorization"],
        "Bearer obo-token"
    );
}

#[tokio::test]
async fn a_call_without_a_bearer_token_fails_closed() {
    use crate::support::pipeline::tool_call;
    use querygate::tenant::Principal;

    let mock = crate::mock::Mock::start().await;
    mock.route("/orgs/acme/items", Reply::json(json!([{"id": 1}])));
    mock.route(TOKEN_PATH, issued("never", 3600));
    let dir = tempfile::tempdir().unwrap();
    let lines: String = RFC8693
        .replace("{mock}", &mock.url())
        .lines()
        .map(|l| format!("          {l}\n"))
        .collect();
    let tenant = format!("    providers:\n      testapi:\n        token_exchange:\n{lines}");
    let yaml = base_yaml(&mock.url(), dir.path(), &tenant);
    std::fs::write(
        dir.path().join("acme.env"),
        format!("TX_CLIENT_ID={CLIENT_ID}\nTX_CLIENT_SECRET={CLIENT_SECRET}\n"),
    )
    .unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, yaml).unwrap();
    let config = querygate::config::Config::load(&querygate::config::Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap();
    let handler = querygate::app::App::builder(config.clone())
        .handler(querygate::mcp::Transport::Stdio)
        .unwrap();
    // A principal of acme with no bearer token (as mTLS or a local caller has).
    let principal = Principal {
        subject: "agent-a".to_owned(),
        tenant: "acme".to_owned(),
        ..Principal::local()
    };
    let reply = handler
        .pipeline()
        .call(tool_call(
            "run_select_query",
            json!({"sql": SELECT}),
            Some(principal),
        ))
        .await
        .unwrap();
    let outcome = reply.outcome().unwrap();
    assert_eq!(
        outcome.code().map(|c| c.as_str()),
        Some("credentials.no_subject_token")
    );
    assert!(outcome.text.contains("token_exchange"), "{}", outcome.text);
    assert!(!outcome.text.contains(CLIENT_SECRET));
    assert!(mock.requests().is_empty(), "{:?}", mock.paths());
}

#[test]
fn misconfigured_exchanges_are_refused_at_load_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "tenants:\n  - id: default\n    providers:\n      github:\n        token_exchange:\n          kind: saml\n          token_url: ftp://x\n          client_id_env: \"bad name\"\n          client_secret_env: S\n          subject_token_type: saml2\n          client_auth: jwt\n      graph:\n        token_exchange:\n          kind: entra_obo\n          token_url: https://login.example.com/t\n          client_id_env: ID\n          client_secret_env: S\n      empty: {}\n",
    )
    .unwrap();
    let err = querygate::config::Config::load(&querygate::config::Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap_err()
    .to_string();
    for key in [
        "tenants[0].providers.github.token_exchange.kind",
        "tenants[0].providers.github.token_exchange.token_url",
        "tenants[0].providers.github.token_exchange.client_id_env",
        "tenants[0].providers.github.token_exchange.subject_token_type",
        "tenants[0].providers.github.token_exchange.client_auth",
        "tenants[0].providers.graph.token_exchange.scope",
        "tenants[0].providers.empty",
    ] {
        assert!(err.contains(key), "{key}: {err}");
    }
    assert!(
        !err.contains("tenants[0].providers.github.token_exchange.client_secret_env"),
        "{err}"
    );
}

#[tokio::test]
async fn a_cached_result_read_with_the_callers_identity_is_never_served_to_another_caller() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = server_with(&jwks, RFC8693, "    cache: {ttl: 60s}\n").await;
    server
        .mock
        .route("/orgs/acme/items", Reply::json(json!([{"id": 1}])));
    server.mock.route_sequence(
        TOKEN_PATH,
        vec![issued("xchg-alice", 3600), issued("xchg-bob", 3600)],
    );
    let http = reqwest::Client::new();
    let alice = rmcp_client(http.clone(), &server.url, Some(&token_for(&key, "alice"))).await;
    let bob = rmcp_client(http.clone(), &server.url, Some(&token_for(&key, "bob"))).await;
    let cached = |result: &rmcp::model::CallToolResult| {
        result.structured_content.as_ref().unwrap()["cached"] == json!(true)
    };

    let first = call(&alice, "run_select_query", json!({"sql": SELECT})).await;
    assert_ne!(first.is_error, Some(true), "{}", text_of(&first));
    assert!(!cached(&first));
    // Bob's same SELECT is fetched with bob's exchanged token, not served alice's rows.
    let other = call(&bob, "run_select_query", json!({"sql": SELECT})).await;
    assert_ne!(other.is_error, Some(true), "{}", text_of(&other));
    assert!(!cached(&other), "{}", text_of(&other));
    let sent = upstream(&server);
    assert_eq!(sent.len(), 2, "{:?}", server.mock.paths());
    let auth = |r: &Recorded| {
        r.headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(auth(&sent[0]), "Bearer xchg-alice");
    assert_eq!(auth(&sent[1]), "Bearer xchg-bob");
    // Each caller's own result is cached for that caller.
    for client in [&alice, &bob] {
        let again = call(client, "run_select_query", json!({"sql": SELECT})).await;
        assert!(cached(&again), "{}", text_of(&again));
    }
    assert_eq!(upstream(&server).len(), 2);
}
