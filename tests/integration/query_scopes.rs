//! JWT scopes per query class (`auth.jwt.enforce_query_scopes`): a tools/call beyond the
//! token's scopes is answered `403` with MCP's step-up challenge (`WWW-Authenticate: Bearer
//! error="insufficient_scope", scope="…", resource_metadata="…"`) before anything is sent
//! upstream, and audited as a refusal; the protected resource metadata lists the scopes;
//! the pipeline without HTTP answers a tool error with the stable code.

use serde_json::{Value, json};

use crate::mcp_support::{TestServer, call, start_yaml};
use crate::mock::Reply;
use crate::support::audited::{records, summary};
use crate::support::identity::{
    ISSUER, JwksServer, RESOURCE, SigningKey, base_yaml, claims, rmcp_client,
};
use crate::support::raw::RawCall;

const SELECT: &str = "SELECT id FROM testapi.widgets.widgets WHERE org = 'acme'";
const DELETE: &str = "DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-1'";

/// A server whose issuer's tokens need the scopes of their query classes; tenant `acme` in
/// `full_access` (so only scopes stand between a token and a DELETE); audit in `dir/audit`.
async fn scoped_server(jwks: &JwksServer) -> TestServer {
    let url = jwks.url.clone();
    start_yaml(|mock, dir| {
        format!(
            "{}audit:\n  file:\n    dir: {}\nserver:\n  listen: 127.0.0.1:0\nauth:\n  resource: {RESOURCE}\n  authorization_servers: [{ISSUER}]\n  jwt:\n    enforce_query_scopes: true\n    issuers:\n      - issuer: {ISSUER}\n        jwks_url: {url}\n        algorithms: [ES256]\n        tenants: [default, acme, globex]\n",
            base_yaml(mock, dir, "    mode: full_access\n"),
            dir.join("audit").display(),
        )
    })
    .await
}

async fn raw_delete(url: &str, token: &str) -> reqwest::Response {
    RawCall::new("run_mutation_query", json!({"sql": DELETE}))
        .id(7)
        .bearer(token)
        .send(&reqwest::Client::new(), url)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_call_beyond_the_tokens_scopes_gets_a_step_up_403_before_any_request() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = scoped_server(&jwks).await;
    server.mock.route(
        "/orgs/acme/widgets",
        Reply::json(json!([{"id": "w-1", "name": "one"}])),
    );
    server
        .mock
        .route("DELETE /orgs/acme/widgets/w-1", Reply::status(204, ""));
    let token = |scope: &str| {
        let mut c = claims("acme");
        c["scope"] = json!(scope);
        key.sign(&c)
    };
    let http = reqwest::Client::new();
    let metadata_url = "http://".to_owned()
        + server
            .url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
        + "/.well-known/oauth-protected-resource/mcp";
    let metadata: Value = http
        .get(&metadata_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        metadata["scopes_supported"],
        json!([
            "querygate:delete",
            "querygate:exec",
            "querygate:read",
            "querygate:write"
        ])
    );

    // A reader reads.
    let reader = rmcp_client(http.clone(), &server.url, Some(&token("querygate:read"))).await;
    let read = call(&reader, "run_select_query", json!({"sql": SELECT})).await;
    assert_ne!(read.is_error, Some(true), "{read:?}");
    assert_eq!(server.mock.requests().len(), 1);

    // A reader's DELETE: the rmcp client sees the 403 and its step-up challenge.
    let err = reader
        .call_tool(
            rmcp::model::CallToolRequestParams::new("run_mutation_query")
                .with_arguments(json!({"sql": DELETE}).as_object().cloned().unwrap()),
        )
        .await
        .expect_err("a DELETE beyond the token's scopes was answered");
    let challenge = err
        .auth_challenge()
        .unwrap_or_else(|| panic!("no challenge in {err:?}"))
        .to_owned();
    let expected = format!(
        "Bearer error=\"insufficient_scope\", scope=\"querygate:delete\", resource_metadata=\"{}\"",
        "https://querygate.test/.well-known/oauth-protected-resource/mcp"
    );
    assert!(challenge.starts_with(&expected), "{challenge}");

    // The same as raw HTTP: 403, the header, a JSON body with the stable code.
    let response = raw_delete(&server.url, &token("querygate:read")).await;
    assert_eq!(response.status(), 403);
    let header = response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(header.starts_with(&expected), "{header}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "auth.insufficient_scope");
    assert_eq!(body["required_scopes"], json!(["querygate:delete"]));
    assert!(
        server.mock.requests().iter().all(|r| r.method != "DELETE"),
        "a refused DELETE reached the upstream"
    );

    // With the scope, the DELETE runs.
    let writer = rmcp_client(
        http.clone(),
        &server.url,
        Some(&token("querygate:read querygate:delete")),
    )
    .await;
    let deleted = call(&writer, "run_mutation_query", json!({"sql": DELETE})).await;
    assert_ne!(deleted.is_error, Some(true), "{deleted:?}");
    assert_eq!(
        server
            .mock
            .requests()
            .iter()
            .filter(|r| r.method == "DELETE")
            .count(),
        1
    );
    // A token with no querygate scope may not even read.
    let none = raw_delete(&server.url, &token("profile")).await;
    assert_eq!(none.status(), 403);

    // Both refusals are audited with their code; the allowed calls ran.
    let lines: Vec<String> = records(&server._dir.path().join("audit"))
        .iter()
        .map(summary)
        .filter(|line| line.starts_with("outcome"))
        .collect();
    assert_eq!(
        lines,
        vec![
            "outcome run_select_query allow ok -",
            "outcome run_mutation_query refuse_immediate error auth.insufficient_scope",
            "outcome run_mutation_query refuse_immediate error auth.insufficient_scope",
            "outcome run_mutation_query allow ok -",
            "outcome run_mutation_query refuse_immediate error auth.insufficient_scope",
        ],
        "{lines:#?}"
    );
}

#[tokio::test]
async fn without_http_a_missing_scope_is_a_tool_error_with_its_code() {
    use crate::support::pipeline::tool_call;
    use querygate::tenant::Principal;

    let mock = crate::mock::Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = crate::mcp_support::test_config(&mock, dir.path(), "full_access", "");
    let config = querygate::config::Config::load(&querygate::config::Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap();
    let handler = querygate::app::App::builder(config.clone())
        .handler(querygate::mcp::Transport::Stdio)
        .unwrap();
    let principal = Principal {
        query_scopes: Some(std::sync::Arc::new(["querygate:read".to_owned()].into())),
        ..Principal::anonymous()
    };
    let reply = handler
        .pipeline()
        .call(tool_call(
            "run_mutation_query",
            json!({"sql": DELETE}),
            Some(principal),
        ))
        .await
        .unwrap();
    let outcome = reply.outcome().unwrap();
    assert_eq!(
        outcome.code().map(|c| c.as_str()),
        Some("auth.insufficient_scope")
    );
    assert!(
        outcome.text.contains("querygate:delete"),
        "{}",
        outcome.text
    );
    assert_eq!(
        outcome.structured.as_ref().unwrap()["error"]["required_scopes"],
        json!(["querygate:delete"])
    );
    assert!(mock.requests().is_empty());
}
