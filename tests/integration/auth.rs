//! The token and signing auth types against the mock: `oauth2` (client credentials),
//! `service_account` (JWT assertion exchanged for a token) and `aws_signing_v4`, configured
//! as auth overrides of the `testapi` provider.

use std::collections::HashMap;
use std::sync::Arc;

use querygate::engine::{
    CredentialStatus, CredentialStore, Engine, ErrorKind, ExecContext, ProviderCredentials,
};
use serde_json::{Value, json};

use crate::mock::{Mock, Recorded, Reply};
use crate::support::{SECRET, column, engine_with, int, text};

fn cx(vars: &[(&str, &str)]) -> ExecContext {
    ExecContext {
        credentials: Arc::new(CredentialStore::fixed(
            vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )),
        ..ExecContext::anonymous_default()
    }
}

fn with_auth(mock: &Mock, auth: Value) -> Engine {
    engine_with(mock, |c| {
        c.providers.get_mut("testapi").unwrap().auth = Some(auth);
    })
}

fn form(request: &Recorded) -> HashMap<String, String> {
    url::form_urlencoded::parse(&request.body)
        .into_owned()
        .collect()
}

fn requests_to(mock: &Mock, method: &str, path: &str) -> Vec<Recorded> {
    mock.requests()
        .into_iter()
        .filter(|r| r.method == method && r.path == path)
        .collect()
}

fn b64(text: &str) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, text)
}

async fn report_row(engine: &Engine, cx: &ExecContext) -> ProviderCredentials {
    let report = engine
        .reload_credentials(cx, Some("testapi"))
        .await
        .unwrap();
    let row = report.providers.into_iter().next().unwrap();
    let shown = format!("{row:?}");
    assert!(!shown.contains(SECRET), "secret in report: {shown}");
    row
}

// ---------------------------------------------------------------------------------------
// oauth2

fn oauth2_auth(mock: &Mock) -> Value {
    json!({
        "type": "oauth2",
        "token_url": format!("{}/token", mock.url()),
        "grant_type": "client_credentials",
        "client_id_env_var": "OAUTH_CLIENT_ID",
        "client_secret_env_var": "OAUTH_CLIENT_SECRET",
        "scopes": ["items.read", "items.list"],
        "values": {"audience": "https://api.testapi.example"}
    })
}

#[tokio::test]
async fn oauth2_fetches_a_token_once_and_sends_it_as_bearer() {
    let mock = Mock::start().await;
    mock.route(
        "POST /token",
        Reply::json(json!({"access_token": "at-1", "token_type": "bearer", "expires_in": 3600})),
    );
    mock.route("/single", Reply::json(json!({"id": 1, "name": "solo"})));
    let engine = with_auth(&mock, oauth2_auth(&mock));
    let cx = cx(&[
        ("OAUTH_CLIENT_ID", "client-1"),
        ("OAUTH_CLIENT_SECRET", SECRET),
    ]);
    for _ in 0..2 {
        let out = engine
            .execute(&cx, "SELECT name FROM testapi.items.single")
            .await
            .unwrap();
        assert_eq!(out.rows, vec![vec![text("solo")]]);
    }
    let tokens = requests_to(&mock, "POST", "/token");
    assert_eq!(tokens.len(), 1, "the second query reuses the cached token");
    let token = &tokens[0];
    assert_eq!(
        token.headers["content-type"],
        "application/x-www-form-urlencoded"
    );
    assert_eq!(
        token.headers["authorization"],
        format!("Basic {}", b64(&format!("client-1:{SECRET}"))).as_str()
    );
    let body = form(token);
    assert_eq!(body["grant_type"], "client_credentials");
    assert_eq!(body["scope"], "items.read items.list");
    assert_eq!(body["audience"], "https://api.testapi.example");
    assert!(!body.contains_key("client_secret"));
    assert!(!token.body_text().contains(SECRET));
    let calls = requests_to(&mock, "GET", "/single");
    assert_eq!(calls.len(), 2);
    for call in &calls {
        assert_eq!(call.headers["authorization"], "Bearer at-1");
    }

    // A reload drops the cached token: the next query asks again.
    engine.reload_credentials(&cx, None).await.unwrap();
    engine
        .execute(&cx, "SELECT name FROM testapi.items.single")
        .await
        .unwrap();
    assert_eq!(requests_to(&mock, "POST", "/token").len(), 2);

    // A rotated secret never reuses the old token (the cache key digests the material).
    let rotated = self::cx(&[
        ("OAUTH_CLIENT_ID", "client-1"),
        ("OAUTH_CLIENT_SECRET", "another-secret"),
    ]);
    engine
        .execute(&rotated, "SELECT name FROM testapi.items.single")
        .await
        .unwrap();
    assert_eq!(requests_to(&mock, "POST", "/token").len(), 3);
}

#[tokio::test]
async fn oauth2_client_credentials_can_go_in_the_body() {
    let mock = Mock::start().await;
    // Some endpoints answer with a form rather than JSON.
    mock.route(
        "POST /token",
        Reply::bytes(
            "application/x-www-form-urlencoded",
            b"access_token=at-2&token_type=bearer&expires_in=120".to_vec(),
        ),
    );
    mock.route("/single", Reply::json(json!({"id": 1, "name": "solo"})));
    let mut auth = oauth2_auth(&mock);
    auth["auth_style"] = json!(1);
    let engine = with_auth(&mock, auth);
    let cx = cx(&[
        ("OAUTH_CLIENT_ID", "client-1"),
        ("OAUTH_CLIENT_SECRET", SECRET),
    ]);
    engine
        .execute(&cx, "SELECT name FROM testapi.items.single")
        .await
        .unwrap();
    let token = requests_to(&mock, "POST", "/token").pop().unwrap();
    assert!(token.headers.get("authorization").is_none());
    let body = form(&token);
    assert_eq!(body["client_id"], "client-1");
    assert_eq!(body["client_secret"], SECRET);
    assert_eq!(
        requests_to(&mock, "GET", "/single").pop().unwrap().headers["authorization"],
        "Bearer at-2"
    );
}

#[tokio::test]
async fn oauth2_token_endpoint_refusal_is_a_credential_error_without_secrets() {
    let mock = Mock::start().await;
    mock.route(
        "POST /token",
        Reply::status(
            401,
            &format!(
                r#"{{"error": "invalid_client", "error_description": "bad secret {SECRET}"}}"#
            ),
        ),
    );
    mock.route("/single", Reply::json(json!({"id": 1, "name": "solo"})));
    let engine = with_auth(&mock, oauth2_auth(&mock));
    let cx = cx(&[
        ("OAUTH_CLIENT_ID", "client-1"),
        ("OAUTH_CLIENT_SECRET", SECRET),
    ]);
    let err = engine
        .execute(&cx, "SELECT name FROM testapi.items.single")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.kind(), ErrorKind::Credentials, "{text}");
    assert!(
        text.contains("credential resolution failed for provider 'testapi'"),
        "{text}"
    );
    assert!(text.contains("answered 401 (invalid_client)"), "{text}");
    assert!(!text.contains(SECRET), "secret leaked: {text}");
    assert!(requests_to(&mock, "GET", "/single").is_empty());

    // A missing secret is named, not fetched.
    let missing = self::cx(&[("OAUTH_CLIENT_ID", "client-1")]);
    let err = engine
        .execute(&missing, "SELECT name FROM testapi.items.single")
        .await
        .unwrap_err();
    assert!(
        err.message()
            .contains("(variable OAUTH_CLIENT_SECRET is not set)"),
        "{err}"
    );
    assert_eq!(requests_to(&mock, "POST", "/token").len(), 1);
    let row = report_row(&engine, &missing).await;
    assert_eq!(row.status, CredentialStatus::Unresolved);
    assert_eq!(row.detail, "variable OAUTH_CLIENT_SECRET is not set");
    assert_eq!(
        row.sourced_from,
        "env:OAUTH_CLIENT_ID,env:OAUTH_CLIENT_SECRET"
    );
    assert_eq!(report_row(&engine, &cx).await.status, CredentialStatus::Ok);
}

// ---------------------------------------------------------------------------------------
// service_account

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/auth")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

fn key_json(mock: &Mock) -> String {
    json!({
        "type": "service_account",
        "project_id": "test-project",
        "private_key_id": "kid-1",
        "private_key": fixture("sa-test-key.pem"),
        "client_email": "reader@test-project.iam.gserviceaccount.com",
        "client_id": "1234",
        "token_uri": format!("{}/token", mock.url()),
    })
    .to_string()
}

#[derive(serde::Deserialize)]
struct Assertion {
    iss: String,
    aud: String,
    scope: String,
    iat: u64,
    exp: u64,
}

#[tokio::test]
async fn service_account_signs_a_jwt_and_sends_the_returned_token() {
    let mock = Mock::start().await;
    mock.route(
        "POST /token",
        Reply::json(
            json!({"access_token": "ya29.test", "token_type": "Bearer", "expires_in": 3599}),
        ),
    );
    mock.route("/single", Reply::json(json!({"id": 1, "name": "solo"})));
    let engine = with_auth(
        &mock,
        json!({"type": "service_account", "credentialsenvvar": "GCP_KEY",
               "scopes": ["https://www.googleapis.com/auth/compute.readonly"]}),
    );
    let cx = cx(&[("GCP_KEY", &key_json(&mock))]);
    for _ in 0..2 {
        engine
            .execute(&cx, "SELECT name FROM testapi.items.single")
            .await
            .unwrap();
    }
    let tokens = requests_to(&mock, "POST", "/token");
    assert_eq!(tokens.len(), 1, "the token is cached");
    let body = form(&tokens[0]);
    assert_eq!(
        body["grant_type"],
        "urn:ietf:params:oauth:grant-type:jwt-bearer"
    );
    let token_uri = format!("{}/token", mock.url());
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    validation.set_audience(&[&token_uri]);
    validation.set_issuer(&["reader@test-project.iam.gserviceaccount.com"]);
    let public =
        jsonwebtoken::DecodingKey::from_rsa_pem(fixture("sa-test-key.pub.pem").as_bytes()).unwrap();
    let decoded =
        jsonwebtoken::decode::<Assertion>(&body["assertion"], &public, &validation).unwrap();
    assert_eq!(decoded.header.kid.as_deref(), Some("kid-1"));
    let claims = decoded.claims;
    assert_eq!(claims.iss, "reader@test-project.iam.gserviceaccount.com");
    assert_eq!(claims.aud, token_uri);
    assert_eq!(
        claims.scope,
        "https://www.googleapis.com/auth/compute.readonly"
    );
    assert!(claims.exp > claims.iat && claims.exp - claims.iat <= 3600);
    for call in requests_to(&mock, "GET", "/single") {
        assert_eq!(call.headers["authorization"], "Bearer ya29.test");
    }
}

#[tokio::test]
async fn service_account_key_files_are_checked_by_the_report() {
    let mock = Mock::start().await;
    mock.route(
        "POST /token",
        Reply::json(json!({"access_token": "ya29.file", "expires_in": 3599})),
    );
    mock.route("/single", Reply::json(json!({"id": 1, "name": "solo"})));
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("key.json");
    std::fs::write(&good, key_json(&mock)).unwrap();
    let broken = dir.path().join("broken.json");
    std::fs::write(
        &broken,
        json!({"client_email": "x@y", "private_key_note": SECRET}).to_string(),
    )
    .unwrap();

    // From a file path.
    let engine = with_auth(
        &mock,
        json!({"type": "service_account", "credentialsfilepath": good.to_str().unwrap()}),
    );
    let none = cx(&[]);
    engine
        .execute(&none, "SELECT name FROM testapi.items.single")
        .await
        .unwrap();
    assert_eq!(
        requests_to(&mock, "GET", "/single").pop().unwrap().headers["authorization"],
        "Bearer ya29.file"
    );
    let row = report_row(&engine, &none).await;
    assert_eq!(row.auth_type, "service_account");
    assert_eq!(row.status, CredentialStatus::Ok);
    assert_eq!(row.sourced_from, format!("file:{}", good.display()));

    // From the path in a variable; a key without private_key is unresolved, named by path.
    let engine = with_auth(
        &mock,
        json!({"type": "service_account", "credentialsfilepathenvvar": "KEY_PATH"}),
    );
    let cx = cx(&[("KEY_PATH", broken.to_str().unwrap())]);
    let row = report_row(&engine, &cx).await;
    assert_eq!(row.sourced_from, "env:KEY_PATH");
    assert_eq!(row.status, CredentialStatus::Unresolved);
    assert_eq!(
        row.detail,
        format!(
            "key from file '{}' (from variable KEY_PATH) has no private_key",
            broken.display()
        )
    );
    let err = engine
        .execute(&cx, "SELECT name FROM testapi.items.single")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Credentials);
    assert!(err.message().contains("has no private_key"), "{err}");
    assert!(!err.to_string().contains(SECRET));
}

// ---------------------------------------------------------------------------------------
// aws_signing_v4

use crate::support::sigv4::*;

fn aws_auth() -> Value {
    json!({"type": "aws_signing_v4", "keyIDenvvar": "AWS_ACCESS_KEY_ID",
           "credentialsenvvar": "AWS_SECRET_ACCESS_KEY",
           "signing_region": "eu-west-1", "signing_service": "ec2"})
}

#[tokio::test]
async fn aws_signing_v4_signs_every_page_verifiably() {
    let mock = Mock::start().await;
    mock.route(
        "/tokens",
        Reply::json(json!({"items": [{"id": 1}], "nextPageToken": "t2"})),
    );
    mock.route(
        "/tokens?pageToken=t2",
        Reply::json(json!({"items": [{"id": 2}]})),
    );
    let engine = with_auth(&mock, aws_auth());
    let cx = cx(&[
        ("AWS_ACCESS_KEY_ID", "AKIDTEST"),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_SESSION_TOKEN", "session-tok"),
    ]);
    let out = engine
        .execute(&cx, "SELECT id FROM testapi.items.tokens ORDER BY id")
        .await
        .unwrap();
    assert_eq!(column(&out, "id"), vec![int(1), int(2)]);
    let calls = requests_to(&mock, "GET", "/tokens");
    assert_eq!(calls.len(), 2, "both pages requested");
    for call in &calls {
        let authorization = call.headers["authorization"].to_str().unwrap();
        assert!(
            authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDTEST/")
                && authorization.contains("/eu-west-1/ec2/aws4_request, SignedHeaders=")
                && authorization.contains(", Signature="),
            "{authorization}"
        );
        assert!(!authorization.contains(SECRET));
        assert_eq!(call.headers["x-amz-security-token"], "session-tok");
        let signed = authorization.split("SignedHeaders=").nth(1).unwrap();
        assert!(
            signed.contains("host;") && signed.contains("x-amz-date"),
            "{signed}"
        );
        assert!(signed.contains("x-amz-security-token"), "{signed}");
        verify_sigv4(call, SECRET, "eu-west-1", "ec2");
    }
    assert_eq!(calls[1].query.as_deref(), Some("pageToken=t2"));
    let row = report_row(&engine, &cx).await;
    assert_eq!(row.auth_type, "aws_signing_v4");
    assert_eq!(row.status, CredentialStatus::Ok);
    assert_eq!(row.sourced_from, "env:AWS_SECRET_ACCESS_KEY");
}

#[tokio::test]
async fn aws_signing_v4_missing_key_id_is_named_and_nothing_is_sent() {
    let mock = Mock::start().await;
    mock.route("/single", Reply::json(json!({"id": 1, "name": "solo"})));
    let engine = with_auth(&mock, aws_auth());
    let cx = cx(&[("AWS_SECRET_ACCESS_KEY", SECRET)]);
    let err = engine
        .execute(&cx, "SELECT name FROM testapi.items.single")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Credentials);
    assert!(
        err.message().starts_with(
            "credential resolution failed for provider 'testapi' (variable AWS_ACCESS_KEY_ID is not set)"
        ),
        "{err}"
    );
    assert!(!err.to_string().contains(SECRET));
    assert!(mock.requests().is_empty());
    let row = report_row(&engine, &cx).await;
    assert_eq!(row.status, CredentialStatus::Unresolved);
    assert_eq!(row.detail, "variable AWS_ACCESS_KEY_ID is not set");

    // Without explicit region/service, a host that is not AWS's cannot be signed.
    let engine = with_auth(
        &mock,
        json!({"type": "aws_signing_v4", "keyIDenvvar": "K", "credentialsenvvar": "S"}),
    );
    let err = engine
        .execute(
            &self::cx(&[("K", "AKIDTEST"), ("S", SECRET)]),
            "SELECT name FROM testapi.items.single",
        )
        .await
        .unwrap_err();
    assert!(
        err.message()
            .contains("set signing_region and signing_service"),
        "{err}"
    );
}

/// google's real document declares `service_account` from `GCP_SERVICE_ACCOUNT_KEY` (the key
/// JSON itself); with no auth override, that is what the engine now runs.
#[tokio::test]
async fn google_document_service_account_auth_runs_as_declared() {
    let Some(root) = crate::support::compat_registry() else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        "POST /token",
        Reply::json(json!({"access_token": "ya29.google", "expires_in": 3599})),
    );
    mock.route(
        "/compute/v1/projects/p/zones/z/acceleratorTypes",
        Reply::json(json!({"items": [{"name": "nvidia-tesla-t4"}]})),
    );
    let mut config = querygate::engine::EngineConfig::new(root);
    crate::support::upstream_at(&mut config, "google", format!("{}/compute/v1", mock.url()));
    let engine = Engine::new(config).unwrap();
    let cx = cx(&[("GCP_SERVICE_ACCOUNT_KEY", &key_json(&mock))]);
    let out = engine
        .execute(
            &cx,
            "SELECT name FROM google.compute.acceleratorTypes WHERE project = 'p' AND zone = 'z'",
        )
        .await
        .unwrap();
    assert_eq!(out.rows, vec![vec![text("nvidia-tesla-t4")]]);
    let token = requests_to(&mock, "POST", "/token").pop().unwrap();
    let assertion = form(&token)["assertion"].clone();
    let claims: Assertion = jsonwebtoken::decode(
        &assertion,
        &jsonwebtoken::DecodingKey::from_rsa_pem(fixture("sa-test-key.pub.pem").as_bytes())
            .unwrap(),
        &{
            let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
            v.set_audience(&[format!("{}/token", mock.url())]);
            v
        },
    )
    .unwrap()
    .claims;
    // No scopes in the document: the cloud-platform default.
    assert_eq!(
        claims.scope,
        "https://www.googleapis.com/auth/cloud-platform"
    );
    assert_eq!(
        requests_to(
            &mock,
            "GET",
            "/compute/v1/projects/p/zones/z/acceleratorTypes"
        )
        .pop()
        .unwrap()
        .headers["authorization"],
        "Bearer ya29.google"
    );
    let report = engine
        .reload_credentials(&cx, Some("google"))
        .await
        .unwrap();
    assert_eq!(report.providers[0].status, CredentialStatus::Ok);
    assert_eq!(
        report.providers[0].sourced_from,
        "env:GCP_SERVICE_ACCOUNT_KEY"
    );
}

/// A connection failure names the request without its query string, which may carry a key.
#[tokio::test]
async fn unreachable_upstream_errors_do_not_show_query_credentials() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut config = querygate::engine::EngineConfig::new(crate::support::fixture_registry());
    config.providers.insert(
        "testapi".to_owned(),
        querygate::engine::ProviderSettings {
            base_url: Some(url),
            auth: Some(json!({"type": "api_key", "credentialsenvvar": "K",
                              "location": "query", "name": "key"})),
            ..Default::default()
        },
    );
    config.upstream.retry.attempts = 1;
    let engine = Engine::new(config).unwrap();
    let err = engine
        .execute(
            &cx(&[("K", SECRET)]),
            "SELECT name FROM testapi.items.single",
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UpstreamUnavailable, "{err}");
    assert!(!err.to_string().contains(SECRET), "secret leaked: {err}");
}

#[tokio::test]
async fn aws_signing_v4_signs_a_write_with_its_body() {
    let mock = Mock::start().await;
    mock.route(
        "POST /orgs/acme/widgets",
        Reply::json(json!({"id": "w-1"})).status_code(201),
    );
    let engine = with_auth(&mock, aws_auth());
    let cx = cx(&[
        ("AWS_ACCESS_KEY_ID", "AKIDTEST"),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
    ]);
    engine
        .execute(
            &cx,
            "INSERT INTO testapi.widgets.widgets (org, name, size) VALUES ('acme', 'w', 2)",
        )
        .await
        .unwrap();
    let calls = requests_to(&mock, "POST", "/orgs/acme/widgets");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].body_text(), r#"{"name":"w","size":2}"#);
    let signed = calls[0].headers["authorization"].to_str().unwrap();
    assert!(signed.contains("content-type"), "{signed}");
    verify_sigv4(&calls[0], SECRET, "eu-west-1", "ec2");
}

#[tokio::test]
async fn concurrent_loads_fetch_a_missing_token_once() {
    let mock = Mock::start().await;
    mock.route(
        "POST /token",
        Reply::json(json!({"access_token": "at-1", "token_type": "bearer", "expires_in": 3600}))
            .delayed(std::time::Duration::from_millis(200)),
    );
    mock.route("/single", Reply::json(json!({"id": 1, "name": "solo"})));
    mock.route("/tokens", Reply::json(json!({"items": [{"id": 7}]})));
    let engine = with_auth(&mock, oauth2_auth(&mock));
    let cx = cx(&[
        ("OAUTH_CLIENT_ID", "client-1"),
        ("OAUTH_CLIENT_SECRET", SECRET),
    ]);
    // Two tables of the same provider load concurrently; both need the token.
    let out = engine
        .execute(
            &cx,
            "SELECT a.name, b.id FROM testapi.items.single a, testapi.items.tokens b",
        )
        .await
        .unwrap();
    assert_eq!(out.rows, vec![vec![text("solo"), int(7)]]);
    assert_eq!(requests_to(&mock, "POST", "/token").len(), 1);
    for path in ["/single", "/tokens"] {
        assert_eq!(
            requests_to(&mock, "GET", path)[0].headers["authorization"],
            "Bearer at-1"
        );
    }
}
