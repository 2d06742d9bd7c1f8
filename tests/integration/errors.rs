//! Errors: typed upstream statuses, missing params, unknown names, bad SQL, bad documents.

use querygate::engine::ErrorKind;
use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::*;

#[tokio::test]
async fn upstream_statuses_travel_as_values() {
    let mock = Mock::start().await;
    mock.route(
        "/status/403",
        Reply::status(403, r#"{"message":"rate limited"}"#),
    );
    mock.route("/status/429", Reply::status(429, "slow down"));
    mock.route("/status/503", Reply::status(503, &"x".repeat(5000)));
    let e = engine(&mock);
    let forbidden = query_err(&e, "SELECT * FROM testapi.items.status WHERE code = 403").await;
    assert_eq!(forbidden.kind(), ErrorKind::Upstream);
    let failure = forbidden.upstream_failure().unwrap();
    assert_eq!((failure.status, failure.retryable), (403, false));
    assert!(failure.body.contains("rate limited"));
    assert!(
        forbidden
            .to_string()
            .starts_with(r#"upstream http error: {"http_status": 403, "retryable": false}"#),
        "{forbidden}"
    );
    let throttled = query_err(&e, "SELECT * FROM testapi.items.status WHERE code = 429").await;
    assert!(throttled.upstream_failure().unwrap().retryable);
    let unavailable = query_err(&e, "SELECT * FROM testapi.items.status WHERE code = 503").await;
    let failure = unavailable.upstream_failure().unwrap();
    assert!(failure.retryable);
    assert!(failure.body.len() < 1200 && failure.body.ends_with("(truncated)"));
}

#[tokio::test]
async fn secrets_echoed_by_the_upstream_are_scrubbed() {
    use base64::Engine as _;
    let other = "other-tenant-secret-7731";
    let mock = Mock::start().await;
    mock.route(
        "/status/401",
        Reply::status(401, &format!("invalid key; also saw {other}")).echoing(),
    );
    let e = engine(&mock);
    let cx = querygate::engine::ExecContext {
        credentials: std::sync::Arc::new(querygate::engine::CredentialStore::fixed([
            ("TESTAPI_KEY".to_owned(), SECRET.to_owned()),
            ("OTHER_TOKEN".to_owned(), other.to_owned()),
        ])),
        ..context()
    };
    let err = e
        .execute(&cx, "SELECT * FROM testapi.items.status WHERE code = 401")
        .await
        .unwrap_err();
    let b64 = base64::engine::general_purpose::STANDARD.encode(SECRET);
    let text = err.to_string();
    let body = &err.upstream_failure().unwrap().body;
    // The mock did echo the key: the scrubbing is what keeps it out.
    assert_eq!(mock.requests()[0].headers["x-api-key"], SECRET);
    assert!(
        body.contains("x-api-key: [REDACTED] ([REDACTED])"),
        "{body}"
    );
    assert!(body.contains("also saw [REDACTED]"), "{body}");
    for leaked in [SECRET, b64.as_str(), other] {
        assert!(!text.contains(leaked), "{leaked} in {text}");
        assert!(!body.contains(leaked), "{leaked} in {body}");
    }
}

#[tokio::test]
async fn a_required_parameter_compared_with_like_is_named() {
    let mock = Mock::start().await;
    let e = engine(&mock);
    let err = query_err(
        &e,
        "SELECT i.id FROM testapi.items.items i WHERE i.org LIKE 'ac%' AND i.id > 3",
    )
    .await;
    assert_eq!(err.kind(), ErrorKind::MissingParameters);
    let text = err.to_string();
    assert!(
        text.starts_with("'org' is a required parameter of 'testapi.items.items' (method get_item, list_items): give it with = or IN"),
        "{text}"
    );
    assert!(text.contains("`org LIKE` only filters rows"), "{text}");
    assert!(!text.contains("__qg_t"), "{text}");
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn a_slow_upstream_times_out_as_unavailable() {
    let mock = Mock::start().await;
    mock.route(
        "/single",
        Reply::json(json!({"id": 1})).delayed(std::time::Duration::from_secs(3)),
    );
    let e = engine_with(&mock, |c| {
        c.upstream.timeout = std::time::Duration::from_millis(300)
    });
    let started = std::time::Instant::now();
    let err = query_err(&e, "SELECT * FROM testapi.items.single").await;
    assert_eq!(err.kind(), ErrorKind::UpstreamUnavailable);
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
}

#[tokio::test]
async fn missing_required_params_list_every_method() {
    let mock = Mock::start().await;
    let err = query_err(&engine(&mock), "SELECT name FROM testapi.items.items").await;
    assert_eq!(err.kind(), ErrorKind::MissingParameters);
    let text = err.to_string();
    assert!(text.contains("testapi.items.items"), "{text}");
    assert!(
        text.contains("get_item(org, id)") && text.contains("list_items(org)"),
        "{text}"
    );
}

#[tokio::test]
async fn unknown_names_are_named() {
    let mock = Mock::start().await;
    let e = engine(&mock);
    for (sql, kind, expected) in [
        (
            "SELECT * FROM nope.items.items",
            ErrorKind::UnknownTable,
            "provider 'nope' is not installed; list_registry (REGISTRY LIST) shows what the registry offers and pull_provider (REGISTRY PULL nope) installs it",
        ),
        (
            "SELECT * FROM testapi.nope.items",
            ErrorKind::UnknownTable,
            "service 'nope' not found in provider 'testapi'",
        ),
        (
            "SELECT * FROM testapi.items.nope",
            ErrorKind::UnknownTable,
            "resource 'nope' not found in service 'testapi.items'",
        ),
        (
            "SELECT * FROM testapi.items",
            ErrorKind::InvalidSql,
            "not of the form provider.service.resource",
        ),
    ] {
        let err = query_err(&e, sql).await;
        assert_eq!(err.kind(), kind, "{sql}: {err}");
        assert!(err.to_string().contains(expected), "{sql}: {err}");
    }
}

#[tokio::test]
async fn bad_and_unsupported_sql_is_refused() {
    let mock = Mock::start().await;
    let e = engine(&mock);
    assert_eq!(query_err(&e, "SELEC 1").await.kind(), ErrorKind::InvalidSql);
    assert_eq!(
        query_err(&e, "SELECT 1; SELECT 2").await.kind(),
        ErrorKind::InvalidSql
    );
    assert_eq!(
        query_err(&e, "CREATE TABLE t (a)").await.kind(),
        ErrorKind::UnsupportedStatement
    );
    assert_eq!(
        query_err(&e, "DROP TABLE testapi.items.items").await.kind(),
        ErrorKind::UnsupportedStatement
    );
    let err = query_err(&e, "SELECT no_such_column FROM testapi.items.single").await;
    assert_eq!(err.kind(), ErrorKind::InvalidSql);
    assert!(mock.requests().len() <= 1);
}

#[tokio::test]
async fn malformed_documents_name_file_and_pointer() {
    let mock = Mock::start().await;
    let e = engine(&mock);
    let err = query_err(&e, "SELECT * FROM testapi.items.broken").await;
    assert_eq!(err.kind(), ErrorKind::BadDocument);
    let text = err.to_string();
    assert!(
        text.contains("testapi/v1/services/items.yaml") && text.contains("/paths/~1nowhere/get"),
        "{text}"
    );
    let absent = query_err(&e, "SELECT * FROM testapi.absent.things").await;
    assert!(
        absent
            .to_string()
            .contains("testapi/v1/services/absent.yaml"),
        "{absent}"
    );
}

#[tokio::test]
async fn invalid_upstream_json_is_an_error() {
    let mock = Mock::start().await;
    mock.route("/single", Reply::status(200, "<html>oops</html>"));
    let err = query_err(&engine(&mock), "SELECT * FROM testapi.items.single").await;
    assert_eq!(err.kind(), ErrorKind::Upstream, "{err}");
    assert!(err.to_string().contains("not valid JSON"), "{err}");
}

/// Bytes that are not UTF-8 fail a statement only in a key or value it reads: inside `meta`,
/// which `SELECT name` skips, they are passed over (as serde_json passes over them); a
/// statement that reads `meta` fails on the same body.
#[tokio::test]
async fn bytes_that_are_not_utf8_fail_only_where_they_are_read() {
    let mock = Mock::start().await;
    let text = r#"[{"id":1,"name":"a","meta":{"kx":1}},{"id":2,"name":"b","meta":{"kx":2}}]"#;
    let mut body = text.as_bytes().to_vec();
    for at in 0..body.len().saturating_sub(1) {
        if &body[at..at + 2] == b"kx" {
            body[at + 1] = 0xff;
        }
    }
    assert!(std::str::from_utf8(&body).is_err());
    mock.route("/orgs/acme/items", Reply::bytes("application/json", body));
    let e = engine(&mock);
    let out = query(
        &e,
        "SELECT name FROM testapi.items.items WHERE org = 'acme' ORDER BY name",
    )
    .await;
    let names: Vec<String> = out.rows.iter().map(|row| row[0].to_string()).collect();
    assert_eq!(names, ["a", "b"]);
    let err = query_err(
        &e,
        "SELECT meta FROM testapi.items.items WHERE org = 'acme'",
    )
    .await;
    assert_eq!(err.kind(), ErrorKind::Upstream, "{err}");
    assert!(err.to_string().contains("not valid JSON"), "{err}");
}

#[tokio::test]
async fn missing_credentials_name_the_variable_only() {
    let mock = Mock::start().await;
    mock.route("/single", Reply::json(json!({"id": 1})));
    let cx = querygate::engine::ExecContext {
        credentials: std::sync::Arc::new(querygate::engine::CredentialStore::empty()),
        ..querygate::engine::ExecContext::anonymous_default()
    };
    let err = engine(&mock)
        .execute(&cx, "SELECT * FROM testapi.items.single")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Credentials);
    assert_eq!(
        err.to_string(),
        "credential resolution failed for provider 'testapi' (variable TESTAPI_KEY is not set) - fix the configured env file, call reload_credentials, then retry"
    );
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn tenant_allowlist_refuses_other_providers_by_name() {
    let mock = Mock::start().await;
    let cx = querygate::engine::ExecContext {
        tenant: "acme".to_owned(),
        allowed_providers: Some(["github".to_owned()].into_iter().collect()),
        ..context()
    };
    let err = engine(&mock)
        .execute(&cx, "SELECT * FROM testapi.items.single")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ProviderNotAllowed);
    assert_eq!(
        err.to_string(),
        "provider 'testapi' is not allowed for tenant 'acme'"
    );
    let listed = engine(&mock).providers(&cx).await.unwrap();
    assert!(listed.is_empty());
}
