//! Out-of-band approvals as the tests drive them: a client that cannot be asked in the
//! call, the approval API (list, show, decide) and what reached the mock and the audit.

use std::sync::{Arc, Mutex};

use rmcp::model::{CallToolResult, ClientConfig, ProtocolVersion};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};

use crate::mcp_support::{Client, TestServer, call, error_code, error_message, text_of};
use crate::support::gate::DELETE;

/// A webhook receiver on 127.0.0.1: the JSON bodies it got, and a signal per arrival.
pub struct Hook {
    pub url: String,
    pub bodies: Arc<Mutex<Vec<Value>>>,
    arrived: Arc<tokio::sync::Notify>,
}

impl Hook {
    pub async fn start() -> Hook {
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let arrived = Arc::new(tokio::sync::Notify::new());
        let (seen, signal) = (bodies.clone(), arrived.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let (seen, signal) = (seen.clone(), signal.clone());
                async move {
                    seen.lock().unwrap().push(body);
                    signal.notify_one();
                    "ok"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Hook {
            url: format!("http://{addr}/hook"),
            bodies,
            arrived,
        }
    }

    /// Waits for the next announcement (one that came while nobody waited counts).
    pub async fn arrival(&self) {
        self.arrived.notified().await;
    }
}

/// The `approval.link_base` of the tests: pending results link to `<LINK_BASE>/<id>`.
pub const LINK_BASE: &str = "https://approvals.example.test/approvals";

/// An MCP client of 2025-11-25 (no way to be asked in the call over stateless HTTP).
pub async fn legacy(url: &str, token: &str) -> Client {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned()),
    );
    ClientConfig::default()
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await
        .expect("legacy client starts")
}

pub async fn delete(client: &Client) -> CallToolResult {
    call(client, "run_mutation_query", json!({"sql": DELETE})).await
}

/// The pending approval's id, checking the pending result says what to do.
pub fn pending_id(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "{}", text_of(result));
    assert_eq!(
        error_code(result),
        "policy.approval_pending",
        "{}",
        text_of(result)
    );
    let message = error_message(result);
    assert!(message.contains("Repeat this same call"), "{message}");
    let error = &result.structured_content.as_ref().unwrap()["error"];
    let id = error["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(error["link"], format!("{LINK_BASE}/{id}"));
    assert!(error["expires_at"].as_str().is_some());
    assert!(message.contains(&id), "{message}");
    id
}

/// The API's base URL of a server (its MCP URL without `/mcp`).
pub fn api(server: &TestServer) -> String {
    server.url.trim_end_matches("/mcp").to_owned()
}

pub async fn get(server: &TestServer, path: &str, token: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(format!("{}{path}", api(server)))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub async fn decide(
    server: &TestServer,
    id: &str,
    verb: &str,
    token: &str,
    reason: &str,
) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/approvals/{id}/{verb}", api(server)))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(json!({ "reason": reason }).to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub fn deletes(server: &TestServer) -> usize {
    server
        .mock
        .requests()
        .iter()
        .filter(|r| r.method == "DELETE")
        .count()
}

/// Every audit record of the server's folder.
pub fn audit_records(server: &TestServer) -> Vec<Value> {
    let dir = server._dir.path().join("audit");
    let mut records = Vec::new();
    for file in
        querygate::audit::location::files_of(&querygate::audit::FileLocation::Dir(dir)).unwrap()
    {
        let text = std::fs::read_to_string(file).unwrap();
        records.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    records
}
