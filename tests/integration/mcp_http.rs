//! The MCP server over streamable HTTP, driven by rmcp's client: both protocol generations,
//! statelessness, tool listing, `server_info` and `run_select_query`.

use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::Reply;
use crate::support::SECRET;

#[tokio::test]
async fn current_revision_client_lists_tools_and_reads_server_info() {
    let server = start("read_only", "").await;
    let client = modern_client(&server.url).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in [
        "server_info",
        "run_select_query",
        "run_mutation_query",
        "run_lifecycle_operation",
    ] {
        assert!(names.contains(&expected), "{names:?}");
    }
    for tool in &tools {
        assert!(
            tool.description.as_ref().is_some_and(|d| !d.is_empty()),
            "{}",
            tool.name
        );
        assert!(tool.output_schema.is_some(), "{}", tool.name);
        assert!(tool.annotations.is_some(), "{}", tool.name);
    }
    let select = tools.iter().find(|t| t.name == "run_select_query").unwrap();
    assert_eq!(
        select.annotations.as_ref().unwrap().read_only_hint,
        Some(true)
    );
    let mutation = tools
        .iter()
        .find(|t| t.name == "run_mutation_query")
        .unwrap();
    assert_eq!(
        mutation.annotations.as_ref().unwrap().destructive_hint,
        Some(true)
    );
    assert_eq!(select.input_schema.get("required"), Some(&json!(["sql"])));

    let info = call(&client, "server_info", json!({})).await;
    let structured = info.structured_content.clone().unwrap();
    assert_eq!(structured["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(structured["transport"], "http");
    assert_eq!(structured["sql_backend"], "sqlite3");
    assert_eq!(structured["mode"], "read_only");
    assert_eq!(structured["is_read_only"], true);
    assert!(!structured["commit"].as_str().unwrap().is_empty());
    assert!(structured["build_date"].as_str().unwrap().starts_with("20"));
    assert!(
        text_of(&info).starts_with("# Server Info"),
        "{}",
        text_of(&info)
    );
}

#[tokio::test]
async fn run_select_query_in_both_formats_with_row_limit() {
    let server = start("read_only", "").await;
    server.mock.route(
        "/orgs/acme/items",
        Reply::json(
            json!([{"id": 1, "name": "a|b"}, {"id": 2, "name": "two"}, {"id": 3, "name": "three"}]),
        ),
    );
    let client = modern_client(&server.url).await;
    let markdown = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT id, name FROM testapi.items.items WHERE org = 'acme' ORDER BY id"}),
    )
    .await;
    assert_ne!(markdown.is_error, Some(true));
    let text = text_of(&markdown);
    assert!(
        text.starts_with("| id | name |\n|---|---|\n| 1 | a\\|b |"),
        "{text}"
    );
    assert_eq!(
        markdown.structured_content.unwrap()["rows"][2],
        json!({"id": 3, "name": "three"})
    );
    // The upstream received the tenant's key from its env file.
    assert_eq!(server.mock.requests()[0].headers["x-api-key"], SECRET);

    let json_text = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT id FROM testapi.items.items WHERE org = 'acme' ORDER BY id", "format": "json", "row_limit": 2}),
    )
    .await;
    let parsed: Value = serde_json::from_str(&text_of(&json_text)).unwrap();
    assert_eq!(
        parsed,
        json!({"rows": [{"id": 1}, {"id": 2}], "truncated": true, "rows_seen": 3})
    );
    assert_eq!(json_text.structured_content.unwrap(), parsed);

    let empty = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT 1 AS n WHERE 0"}),
    )
    .await;
    assert_eq!(text_of(&empty), "**no results**");
    assert_eq!(empty.structured_content.unwrap(), json!({"rows": []}));
    assert_ne!(empty.is_error, Some(true));

    let yaml = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT 1", "format": "yaml"}),
    )
    .await;
    assert_eq!(yaml.is_error, Some(true));
    assert_eq!(
        text_of(&yaml),
        r#"invalid format "yaml" (legal: markdown, json) [arguments.invalid]"#
    );
}

#[tokio::test]
async fn a_server_wide_row_cap_applies_without_row_limit() {
    let server = start("read_only", "  max_rows: 2\n").await;
    let client = modern_client(&server.url).await;
    let result = call(
        &client,
        "run_select_query",
        json!({"sql": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT i FROM n", "row_limit": 50}),
    )
    .await;
    let structured = result.structured_content.unwrap();
    assert_eq!(structured["rows"].as_array().unwrap().len(), 2);
    assert_eq!(structured["truncated"], true);
    assert_eq!(structured["rows_seen"], 5);
}

#[tokio::test]
async fn booleans_are_json_booleans() {
    let server = start("read_only", "").await;
    server.mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "active": true}, {"id": 2, "active": false}])),
    );
    let client = modern_client(&server.url).await;
    let sql = "SELECT id, active FROM testapi.items.items WHERE org = 'acme' ORDER BY id";
    let result = call(&client, "run_select_query", json!({"sql": sql})).await;
    assert_eq!(
        result.structured_content.clone().unwrap(),
        json!({"rows": [{"id": 1, "active": true}, {"id": 2, "active": false}]})
    );
    assert!(
        text_of(&result).contains("| 2 | false |"),
        "{}",
        text_of(&result)
    );
    let as_json = call(
        &client,
        "run_select_query",
        json!({"sql": sql, "format": "json"}),
    )
    .await;
    assert_eq!(
        text_of(&as_json),
        r#"{"rows":[{"id":1,"active":true},{"id":2,"active":false}]}"#
    );
}

#[tokio::test]
async fn incomplete_results_say_so_in_the_text() {
    // `upstream:` is a top-level section after the `server:` lines.
    let server = start("read_only", "  max_rows: 2\nupstream:\n  page_limit: 2\n").await;
    server.mock.route(
        "/tokens",
        Reply::json(json!({"items": [{"id": 0}], "nextPageToken": "p1"})),
    );
    for i in 1..5 {
        server.mock.route(
            &format!("/tokens?pageToken=p{i}"),
            Reply::json(json!({"items": [{"id": i}], "nextPageToken": format!("p{}", i + 1)})),
        );
    }
    let client = modern_client(&server.url).await;
    let cut = call(
        &client,
        "run_select_query",
        json!({"sql": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT i FROM n"}),
    )
    .await;
    let text = text_of(&cut);
    assert!(
        text.ends_with("| 2 |\n\n**truncated:** 2 of 5 rows shown (row_limit or server.max_rows); the result is incomplete\n"),
        "{text}"
    );
    let paged = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT id FROM testapi.items.tokens", "row_limit": 1}),
    )
    .await;
    let text = text_of(&paged);
    assert!(text.contains("**truncated:** 1 of 2 rows shown"), "{text}");
    assert!(
        text.contains("**warning:** 'testapi.items.tokens': stopped after 2 pages (upstream.page_limit); the result may be incomplete"),
        "{text}"
    );
}

#[tokio::test]
async fn upstream_errors_are_tool_errors_the_model_can_read() {
    let server = start("read_only", "").await;
    server.mock.route(
        "/status/403",
        Reply::status(403, r#"{"message":"forbidden"}"#),
    );
    server.mock.route(
        "/status/429",
        Reply::status(429, "slow down").header("retry-after", "3600"),
    );
    server
        .mock
        .route("/orgs/gone/items", Reply::status(404, "not found"));
    let client = modern_client(&server.url).await;
    let forbidden = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT * FROM testapi.items.status WHERE code = 403"}),
    )
    .await;
    assert_eq!(forbidden.is_error, Some(true));
    assert!(
        text_of(&forbidden)
            .starts_with(r#"upstream http error: {"http_status": 403, "retryable": false}: "#),
        "{}",
        text_of(&forbidden)
    );
    assert!(!text_of(&forbidden).contains(r#""rows":[]"#));
    let gone = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT name FROM testapi.items.items WHERE org = 'gone'", "format": "json"}),
    )
    .await;
    assert_ne!(gone.is_error, Some(true));
    assert_eq!(text_of(&gone), r#"{"rows":[]}"#);
    // Last: its `Retry-After: 3600` pauses the tenant's later requests to the provider.
    let throttled = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT * FROM testapi.items.status WHERE code = 429"}),
    )
    .await;
    assert!(
        text_of(&throttled).contains(r#""retryable": true"#),
        "{}",
        text_of(&throttled)
    );
}

#[tokio::test]
async fn control_characters_from_upstreams_are_escaped() {
    let server = start("read_only", "").await;
    server.mock.route(
        "/status/400",
        Reply::status(
            400,
            "\u{1b}[2J\u{1b}[31mboom\r\nINFO querygate: forged line\u{7}",
        ),
    );
    let client = modern_client(&server.url).await;
    let result = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT * FROM testapi.items.status WHERE code = 400"}),
    )
    .await;
    assert_eq!(result.is_error, Some(true));
    let text = text_of(&result);
    assert!(
        text.contains(r"\u{1b}[2J\u{1b}[31mboom\r\nINFO querygate: forged line\u{7}"),
        "{text:?}"
    );
    assert!(!text.chars().any(char::is_control), "{text:?}");
}

#[tokio::test]
async fn bad_calls_are_refused_before_any_tool_runs() {
    let server = start("full_access", "").await;
    let client = modern_client(&server.url).await;
    let unknown = try_call(&client, "drop_everything", json!({}))
        .await
        .unwrap_err();
    assert!(unknown.contains("drop_everything"), "{unknown}");
    let malformed = try_call(&client, "run_select_query", json!({"sql": 7}))
        .await
        .unwrap_err();
    assert!(malformed.contains("sql"), "{malformed}");
    let extra = try_call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT 1", "sqll": "x"}),
    )
    .await
    .unwrap_err();
    assert!(extra.contains("sqll"), "{extra}");
    // A negative or fractional row_limit is refused by every tool that takes one, saying
    // what it must be (not serde's "expected u64"); 0 means the server's cap.
    for (tool, arguments, got) in [
        (
            "run_select_query",
            json!({"sql": "SELECT 1", "row_limit": -1}),
            "-1",
        ),
        (
            "list_services",
            json!({"provider": "testapi", "row_limit": -1}),
            "-1",
        ),
        (
            "run_select_query",
            json!({"sql": "SELECT 1", "row_limit": 2.5}),
            "2.5",
        ),
    ] {
        let err = try_call(&client, tool, arguments).await.unwrap_err();
        assert!(
            err.contains(&format!(
                "invalid arguments for tool '{tool}': row_limit: must be a whole number ≥ 0, got {got}"
            )) && !err.contains("u64"),
            "{tool}: {err}"
        );
    }
    let zero = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT 1 AS n", "row_limit": 0}),
    )
    .await;
    assert_eq!(
        zero.structured_content.unwrap(),
        json!({"rows": [{"n": 1}]})
    );
    // A write sent to the read tool is refused, not run.
    let write = call(
        &client,
        "run_select_query",
        json!({"sql": "DELETE FROM testapi.widgets.widgets WHERE org = 'a' AND id = 'b'"}),
    )
    .await;
    assert_eq!(write.is_error, Some(true));
    assert!(
        text_of(&write).contains("use run_mutation_query"),
        "{}",
        text_of(&write)
    );
    let two = call(&client, "run_select_query", json!({"sql": "SELECT 1; DELETE FROM testapi.widgets.widgets WHERE org = 'a' AND id = 'b'"})).await;
    assert_eq!(two.is_error, Some(true));
    assert!(
        server.mock.requests().is_empty(),
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn legacy_clients_are_served_statelessly_on_the_same_endpoint() {
    let server = start("read_only", "").await;
    for version in [ProtocolVersion::V_2025_06_18, ProtocolVersion::V_2025_11_25] {
        let client = legacy_client(&server.url, version.clone()).await;
        let negotiated = client.peer_info().map(|info| info.protocol_version.clone());
        assert_eq!(negotiated, Some(version.clone()));
        let tools = client.list_all_tools().await.unwrap();
        assert!(tools.iter().any(|t| t.name == "run_select_query"));
        let result = call(
            &client,
            "run_select_query",
            json!({"sql": "SELECT 1 AS n, 'ok' AS status"}),
        )
        .await;
        assert!(
            text_of(&result).contains("| 1 | ok |"),
            "{}",
            text_of(&result)
        );
    }
    // No session is issued: the initialize answer carries no Mcp-Session-Id.
    let response = reqwest::Client::new()
        .post(&server.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    assert!(response.headers().get("mcp-session-id").is_none());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["result"]["protocolVersion"], "2025-06-18");
    // GET (a legacy stream) is not offered.
    let get = reqwest::Client::new()
        .get(&server.url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status().as_u16(), 405);
}

#[tokio::test]
async fn foreign_hosts_and_origins_are_refused() {
    let server = start("read_only", "").await;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let post = |host: Option<&str>, origin: Option<&str>| {
        let mut request = reqwest::Client::new()
            .post(&server.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body);
        if let Some(host) = host {
            request = request.header("host", host);
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    assert!(post(None, None).await.unwrap().status().is_success());
    assert_eq!(
        post(Some("evil.example"), None)
            .await
            .unwrap()
            .status()
            .as_u16(),
        403
    );
    assert_eq!(
        post(None, Some("https://evil.example"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        403
    );
}

#[tokio::test]
async fn a_call_past_the_timeout_ends_with_a_tool_error() {
    let server = start("read_only", "  call_timeout: 300ms\n").await;
    server.mock.route(
        "/orgs/slow/items",
        Reply::json(json!([{"id": 1, "name": "late"}])).delayed(std::time::Duration::from_secs(5)),
    );
    let client = modern_client(&server.url).await;
    let started = std::time::Instant::now();
    let result = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT name FROM testapi.items.items WHERE org = 'slow'"}),
    )
    .await;
    assert_eq!(result.is_error, Some(true));
    assert!(
        text_of(&result).contains("did not finish within 300ms (server.call_timeout)"),
        "{}",
        text_of(&result)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
}

#[tokio::test]
async fn the_serve_command_answers_clients_and_stops_cleanly_on_sigterm() {
    install_crypto_provider();
    let mock = crate::mock::Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    // No drain delay: nothing balances load here (tests/integration/drain.rs drains).
    let config = test_config(&mock, dir.path(), "read_only", "  drain:\n    delay: 0s\n");
    let (url, mut child, mut stderr) = spawn_serve(&config).await;

    let health = reqwest::get(url.replace("/mcp", "/healthz")).await.unwrap();
    assert_eq!(health.text().await.unwrap(), "ok");
    let client = modern_client(&url).await;
    let info = call(&client, "server_info", json!({})).await;
    assert_eq!(info.structured_content.unwrap()["transport"], "http");
    // Its idle keep-alive connection would hold the drain until it times out.
    drop(client);

    terminate(&child);
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait())
        .await
        .expect("serve stops after SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    let mut rest = Vec::new();
    while let Some(line) = stderr.next_line().await.unwrap() {
        rest.push(line);
    }
    assert!(
        rest.iter()
            .any(|l| l.contains("stopping; finishing requests in flight")),
        "{rest:?}"
    );
}

/// `initialize` on the 2026-07-28 wire (per-request `_meta`, where that method was removed)
/// is `-32601` with HTTP 404 and the request's id, as the conformance suite's
/// `sep-2575-http-server-method-not-found-404-initialize` requires, whether or not its params
/// would fit an older `initialize`; an older client's `initialize` still negotiates, and one
/// with params that do not fit is still `-32602`.
#[tokio::test]
async fn initialize_on_the_per_request_meta_wire_is_method_not_found() {
    let server = start("read_only", "").await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let post = |header: Option<&'static str>, body: Value| {
        let mut request = reqwest::Client::new()
            .post(&server.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-method", "initialize")
            .body(body.to_string());
        if let Some(version) = header {
            request = request.header("mcp-protocol-version", version);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let only_meta =
        json!({"jsonrpc": "2.0", "id": 500, "method": "initialize", "params": {"_meta": meta}});
    let full = json!({"jsonrpc": "2.0", "id": "i-2", "method": "initialize", "params": {
        "_meta": meta, "protocolVersion": "2026-07-28", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    for (body, id) in [(only_meta, json!(500)), (full, json!("i-2"))] {
        let (status, answer) = post(Some("2026-07-28"), body).await;
        assert_eq!(status, 404, "{answer}");
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["error"]["code"], -32601, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("2026-07-28"), "{message}");
    }
    // The older generation is unchanged.
    let (status, answer) = post(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-11-25",
        "{answer}"
    );
    let (_, answer) = post(
        None,
        json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"capabilities": {}}}),
    )
    .await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
}
