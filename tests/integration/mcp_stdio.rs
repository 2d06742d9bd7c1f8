//! `querygate stdio` as a desktop client runs it: the real binary as a child process, driven
//! by rmcp's child-process client (both protocol generations) and by raw bytes on stdin
//! (framing: LF, CRLF, malformed, truncated, bare tokens, non-JSON-RPC objects, EOF).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{ClientConfig, ProtocolVersion};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::mcp_support::{Client, call, test_config, test_config_at, text_of};
use crate::mock::{Mock, Reply};
use crate::support::SECRET;

/// A mock with one `items` route and a config pointing at it.
async fn setup() -> (Mock, tempfile::TempDir, PathBuf) {
    let mock = Mock::start().await;
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "one"}, {"id": 2, "name": "two"}])),
    );
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&mock, dir.path(), "read_only", "");
    (mock, dir, config)
}

async fn child_client(
    config: &Path,
    mode: ClientLifecycleMode,
    version: ProtocolVersion,
) -> Client {
    let (transport, _stderr) = TokioChildProcess::builder(command(config))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::timeout(
        LIMIT,
        ClientConfig::default()
            .with_protocol_version(version)
            .serve_with_lifecycle(transport, mode),
    )
    .await
    .expect("the stdio client starts in time")
    .expect("the stdio client starts")
}

async fn exercise(client: &Client, mock: &Mock) {
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "run_select_query"));
    let info = call(client, "server_info", json!({})).await;
    let structured = info.structured_content.clone().unwrap();
    assert_eq!(structured["transport"], "stdio");
    assert_eq!(structured["mode"], "read_only");
    let rows = call(
        client,
        "run_select_query",
        json!({"sql": "SELECT id, name FROM testapi.items.items WHERE org = 'acme' ORDER BY id"}),
    )
    .await;
    assert_ne!(rows.is_error, Some(true), "{}", text_of(&rows));
    assert_eq!(
        rows.structured_content.clone().unwrap()["rows"],
        json!([{"id": 1, "name": "one"}, {"id": 2, "name": "two"}])
    );
    assert!(text_of(&rows).starts_with("| id | name |"));
    let last = mock.requests().last().cloned().unwrap();
    assert_eq!(last.headers["x-api-key"], SECRET);
}

#[tokio::test]
async fn current_revision_client_over_stdio() {
    let (mock, _dir, config) = setup().await;
    let client = child_client(
        &config,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
        ProtocolVersion::V_2026_07_28,
    )
    .await;
    exercise(&client, &mock).await;
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn legacy_client_over_stdio() {
    let (mock, _dir, config) = setup().await;
    let client = child_client(
        &config,
        ClientLifecycleMode::Initialize,
        ProtocolVersion::V_2025_06_18,
    )
    .await;
    assert_eq!(
        client.peer_info().map(|i| i.protocol_version.clone()),
        Some(ProtocolVersion::V_2025_06_18)
    );
    exercise(&client, &mock).await;
    client.cancel().await.unwrap();
}

use crate::support::stdio::*;

const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

async fn handshake_and_list(raw: &mut Raw, eol: &str) {
    raw.send(format!("{INITIALIZE}{eol}{INITIALIZED}{eol}{TOOLS_LIST}{eol}").as_bytes())
        .await;
    let init = raw.next().await;
    assert_eq!(init["id"], 1);
    assert_eq!(init["result"]["serverInfo"]["name"], "querygate");
    let tools = raw.next().await;
    assert_eq!(tools["id"], 2);
    assert!(
        tools["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "run_select_query"),
        "{tools}"
    );
}

#[tokio::test]
async fn lf_terminated_frames() {
    let (_mock, _dir, config) = setup().await;
    let mut raw = Raw::spawn(&config);
    handshake_and_list(&mut raw, "\n").await;
    assert_eq!(raw.finish().await, 0);
}

#[tokio::test]
async fn crlf_terminated_frames_and_blank_lines() {
    let (_mock, _dir, config) = setup().await;
    let mut raw = Raw::spawn(&config);
    raw.send(b"\r\n\n  \r\n").await;
    handshake_and_list(&mut raw, "\r\n").await;
    raw.ping(3).await;
    assert_eq!(raw.finish().await, 0);
}

#[tokio::test]
async fn bad_frames_get_error_responses_and_the_session_goes_on() {
    let (mock, _dir, config) = setup().await;
    let mut raw = Raw::spawn(&config);
    // Before any handshake, too.
    raw.expect_error(b"{this is not json\n", -32700).await;
    handshake_and_list(&mut raw, "\n").await;

    let malformed = raw.expect_error(b"{this is not json\n", -32700).await;
    assert!(
        malformed["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("parse error: "),
        "{malformed}"
    );
    raw.ping(10).await;
    raw.expect_error(b"{\"jsonrpc\":\r\n", -32700).await;
    raw.ping(11).await;
    raw.expect_error(b"not-json-token\n", -32700).await;
    raw.expect_error(b"hello\n", -32700).await;
    raw.expect_error(b"42\n", -32600).await;
    raw.expect_error(b"{\"foo\":1}\n", -32600).await;
    raw.expect_error(b"{\"jsonrpc\":\"2.0\",\"nonsense\":true}\n", -32600)
        .await;
    raw.ping(12).await;

    // A valid tool call is still answered.
    raw.send(
        json!({"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "run_select_query", "arguments": {"sql": "SELECT name FROM testapi.items.items WHERE org = 'acme' ORDER BY id", "format": "json"}}})
            .to_string()
            .as_bytes(),
    )
    .await;
    raw.send(b"\n").await;
    let reply = raw.next().await;
    assert_eq!(reply["id"], 13);
    assert_eq!(
        reply["result"]["structuredContent"],
        json!({"rows": [{"name": "one"}, {"name": "two"}]})
    );
    assert_eq!(mock.requests().len(), 1);
    // Every stdout line was a JSON-RPC message (checked line by line in `next`).
    assert_eq!(raw.finish().await, 0);
}

#[tokio::test]
async fn a_second_request_with_an_id_in_flight_is_refused() {
    let (mock, _dir, config) = setup().await;
    mock.route(
        "/orgs/slow/items",
        Reply::json(json!([{"id": 7, "name": "late"}])).delayed(Duration::from_millis(800)),
    );
    let mut raw = Raw::spawn(&config);
    handshake_and_list(&mut raw, "\n").await;
    let call = |id: u64, org: &str| {
        let mut line = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "run_select_query", "arguments": {"sql": format!("SELECT name FROM testapi.items.items WHERE org = '{org}'"), "format": "json"}}}).to_string();
        line.push('\n');
        line
    };
    raw.send(call(5, "slow").as_bytes()).await;
    raw.send(call(5, "acme").as_bytes()).await;
    let refused = raw.next().await;
    assert_eq!(refused["id"], 5, "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("a request with id 5 is still in flight"),
        "{refused}"
    );
    let answered = raw.next().await;
    assert_eq!(answered["id"], 5);
    assert_eq!(
        answered["result"]["structuredContent"],
        json!({"rows": [{"name": "late"}]})
    );
    // Once answered, the id may be used again.
    raw.send(call(5, "acme").as_bytes()).await;
    let again = raw.next().await;
    assert_eq!(
        again["result"]["structuredContent"],
        json!({"rows": [{"name": "one"}, {"name": "two"}]}),
        "{again}"
    );
    assert_eq!(raw.finish().await, 0);
}

#[tokio::test]
async fn arguments_of_the_wrong_type_are_invalid_params() {
    let (mock, _dir, config) = setup().await;
    let mut raw = Raw::spawn(&config);
    handshake_and_list(&mut raw, "\n").await;
    for (id, params, expected) in [
        (
            3,
            json!({"name": "run_select_query", "arguments": "SELECT 1"}),
            "invalid params for tools/call: arguments: invalid type: string \"SELECT 1\", expected a map",
        ),
        (
            4,
            json!({"name": "run_select_query", "arguments": [1]}),
            "invalid params for tools/call: arguments: invalid type: sequence, expected a map",
        ),
        (
            5,
            json!({"arguments": {}}),
            "invalid params for tools/call: missing field `name`",
        ),
    ] {
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
                .to_string();
        line.push('\n');
        raw.send(line.as_bytes()).await;
        let reply = raw.next().await;
        assert_eq!(reply["id"], id, "{reply}");
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
        assert_eq!(reply["error"]["message"], expected, "{reply}");
    }
    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/explode\"}\n")
        .await;
    let unknown = raw.next().await;
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    assert_eq!(
        unknown["error"]["message"],
        "method not found: tools/explode"
    );
    assert!(mock.requests().is_empty());
    assert_eq!(raw.finish().await, 0);
}

#[tokio::test]
async fn an_empty_registry_points_to_list_registry_and_pull_provider() {
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty-registry");
    std::fs::create_dir_all(&empty).unwrap();
    let config = test_config_at(&mock, dir.path(), "read_only", "", &empty);
    let mut raw = Raw::spawn(&config);
    handshake_and_list(&mut raw, "\n").await;
    let call = |id: u64, tool: &str, arguments: Value| {
        let mut line = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}).to_string();
        line.push('\n');
        line
    };
    raw.send(call(3, "list_providers", json!({})).as_bytes())
        .await;
    let listed = raw.next().await;
    let text = listed["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.starts_with("**no results**\n\n**warning:** no provider is installed (or allowed for this tenant): list_registry shows what the registry offers and pull_provider installs one"),
        "{listed}"
    );
    assert_eq!(listed["result"]["structuredContent"]["rows"], json!([]));
    raw.send(
        call(
            4,
            "run_select_query",
            json!({"sql": "SELECT name FROM github.repos.repos WHERE org = 'acme'"}),
        )
        .as_bytes(),
    )
    .await;
    let failed = raw.next().await;
    let text = failed["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("provider 'github' is not installed; list_registry (REGISTRY LIST) shows what the registry offers and pull_provider (REGISTRY PULL github) installs it"),
        "{failed}"
    );
    assert_eq!(raw.finish().await, 0);
}

#[tokio::test]
async fn an_over_long_line_is_refused_and_the_session_goes_on() {
    let (_mock, dir, _) = setup().await;
    let mock = Mock::start().await;
    let config = test_config(
        &mock,
        dir.path(),
        "read_only",
        "  max_request_bytes: 2048\n",
    );
    let mut raw = Raw::spawn(&config);
    raw.ping(1).await;
    let long = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\",\"params\":{{\"pad\":\"{}\"}}}}\n",
        "x".repeat(10_000)
    );
    let refused = raw.expect_error(long.as_bytes(), -32600).await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2048 bytes"),
        "{refused}"
    );
    raw.ping(3).await;
    assert_eq!(raw.finish().await, 0);
}

#[tokio::test]
async fn eof_without_any_frame_exits_cleanly() {
    let (_mock, _dir, config) = setup().await;
    let raw = Raw::spawn(&config);
    assert_eq!(raw.finish().await, 0);
}

#[tokio::test]
async fn a_closed_stdout_is_a_transport_failure() {
    let (_mock, _dir, config) = setup().await;
    let mut child = command(&config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    drop(child.stdout.take());
    // Writes to stdout now fail; the server says so and exits non-zero.
    stdin
        .write_all(format!("{INITIALIZE}\n").as_bytes())
        .await
        .unwrap();
    stdin.flush().await.unwrap();
    let output = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("the server exits in time")
        .unwrap();
    assert_ne!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("stdio transport failed"), "{stderr}");
}
