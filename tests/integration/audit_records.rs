//! Records say what happened, and only that: a write the upstream acknowledged and that
//! failed afterwards is `unknown` (not `error`), successful writes carry their upstream
//! status, a 2025-protocol HTTP client that sends no client info gets no `client_name`
//! (not rmcp's own), `pull_provider` names its provider and has no statement class, and a
//! local session without `$USER` still names its OS user.

use std::io::{BufRead as _, Write as _};

use querygate::audit::FailureMode;
use serde_json::{Value, json};

use crate::mcp_support::{error_code, test_config};
use crate::mock::{Mock, Reply};
use crate::support::audited::{file_auditor, records, start, summary};
use crate::support::gate::{Approver, approver_client, run};
use crate::support::querygate_command;

const INSERT_TWO: &str =
    "INSERT INTO testapi.widgets.widgets (org, name) VALUES ('acme', 'a'), ('acme', 'b')";
const INSERT_ONE: &str = "INSERT INTO testapi.widgets.widgets (org, name) VALUES ('acme', 'c')";

#[tokio::test]
async fn an_acknowledged_write_that_fails_later_is_unknown_and_writes_carry_their_status() {
    let audit_dir = tempfile::tempdir().unwrap();
    let (auditor, _sink) = file_auditor(audit_dir.path(), FailureMode::Strict);
    let server = start("full_access", "", auditor).await;
    server.mock.route_sequence(
        "POST /orgs/acme/widgets",
        vec![
            Reply::json(json!({"id": "w-a"})).status_code(201),
            Reply::status(500, "boom"),
            Reply::json(json!({"id": "w-c"})).status_code(201),
        ],
    );
    let client = approver_client(&server.url, Approver::new(None)).await;
    let partial = run(&client, "run_mutation_query", INSERT_TWO).await;
    assert_eq!(error_code(&partial), "upstream.rejected");
    let done = run(&client, "run_mutation_query", INSERT_ONE).await;
    assert_ne!(done.is_error, Some(true), "{done:?}");

    let all = records(audit_dir.path());
    let lines: Vec<String> = all.iter().map(summary).collect();
    assert_eq!(
        lines,
        vec![
            "intent run_mutation_query allow - -",
            // The first row was created: the call's outcome is not known, not an error.
            "outcome run_mutation_query allow unknown upstream.rejected",
            "intent run_mutation_query allow - -",
            "outcome run_mutation_query allow ok -",
        ],
        "{lines:#?}"
    );
    let partial = &all[1].record;
    assert_eq!(partial.upstream_status, Some(500));
    assert!(
        partial
            .error
            .as_deref()
            .is_some_and(|e| e.contains("the 1 before it succeeded")),
        "{partial:?}"
    );
    assert_eq!(all[3].record.upstream_status, Some(201));
    for r in &all {
        assert_eq!(r.record.mode, "full_access");
        assert_eq!(r.record.query_class.as_deref(), Some("mutation_create"));
    }
}

/// A `tools/call` of a 2025-06-18 client over stateless HTTP: no `_meta` client info.
async fn call_2025(url: &str, name: &str, arguments: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"name": name, "arguments": arguments}})
            .to_string(),
        )
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn http_records_name_no_client_they_were_not_told_of_and_pulls_name_their_provider() {
    let audit_dir = tempfile::tempdir().unwrap();
    let (auditor, _sink) = file_auditor(audit_dir.path(), FailureMode::Strict);
    let server = start("full_access", "", auditor).await;
    let response = call_2025(&server.url, "server_info", json!({})).await;
    assert_eq!(response.status(), 200);
    let _ = response.text().await.unwrap();
    // A provider the (mock) registry does not have: the pull fails, its record says which.
    let response = call_2025(&server.url, "pull_provider", json!({"provider": "nosuch"})).await;
    assert_eq!(response.status(), 200);
    let _ = response.text().await.unwrap();

    let all = records(audit_dir.path());
    let tools: Vec<&str> = all.iter().map(|r| r.record.tool.as_str()).collect();
    assert_eq!(tools, vec!["server_info", "pull_provider", "pull_provider"]);
    for r in &all {
        assert_eq!(r.record.client_name, None, "{:?}", r.record);
        assert_eq!(r.record.client_version, None);
        assert_eq!(r.record.protocol_version.as_deref(), Some("2025-06-18"));
    }
    assert_eq!(all[0].record.query_class, None, "server_info runs no SQL");
    let (intent, outcome) = (&all[1].record, &all[2].record);
    assert_eq!(intent.phase.as_str(), "intent");
    for r in [intent, outcome] {
        assert_eq!(r.query_class, None, "a pull is no select: {r:?}");
        assert_eq!(
            r.args.as_ref().and_then(|a| a.get("provider")),
            Some(&json!("nosuch"))
        );
    }
    assert_eq!(outcome.outcome.map(|o| o.as_str()), Some("error"));
    // `audit tail` names the provider.
    let output = querygate_command()
        .args(["audit", "tail", "-n", "1"])
        .arg(audit_dir.path())
        .output()
        .unwrap();
    let tail = String::from_utf8_lossy(&output.stdout);
    assert!(
        tail.contains("pull_provider") && tail.contains("provider=nosuch"),
        "{tail}"
    );
}

#[tokio::test]
async fn a_stdio_session_without_user_variables_names_the_os_user_from_its_uid() {
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&mock, dir.path(), "read_only", "");
    let audit_dir = dir.path().join("audit");
    let (status, stderr) = tokio::task::spawn_blocking(move || {
        // `querygate_command` clears the environment: no USER, no LOGNAME.
        let mut child = querygate_command()
            .arg("--config")
            .arg(&config)
            .arg("stdio")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        for message in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "server_info", "arguments": {}}}),
        ] {
            writeln!(stdin, "{message}").unwrap();
        }
        for _ in 0..2 {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
        }
        drop(stdin);
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        (status, stderr)
    })
    .await
    .unwrap();
    assert!(status.success(), "{stderr}");
    let all = records(&audit_dir);
    assert_eq!(all.len(), 1);
    let user = all[0].record.os_user.clone().expect("an os_user");
    let uid = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let named = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.get(2) == Some(&uid.to_string().as_str())).then(|| fields[0].to_owned())
    });
    assert_eq!(user, named.unwrap_or_else(|| format!("uid:{uid}")));
}

/// The engine says when a write was acknowledged before its statement failed: an AWAIT
/// whose operation cannot be polled after the upstream accepted the insert.
#[tokio::test]
async fn an_await_that_fails_after_the_upstream_accepted_the_write_is_an_acknowledged_write() {
    use querygate::engine::{Engine, EngineConfig};
    let mock = Mock::start().await;
    let base = mock.url();
    mock.route(
        "POST /projects/p1/zones/z1/instances",
        Reply::json(json!({
            "name": "op-1", "status": "RUNNING",
            "selfLink": format!("{base}/projects/p1/zones/z1/operations/op-1")
        })),
    );
    mock.route(
        "/projects/p1/zones/z1/operations/op-1",
        Reply::status(500, "poll failed"),
    );
    let mut config = EngineConfig::new(crate::support::corpus::providers_root());
    config.upstream.await_operations.poll_interval = std::time::Duration::from_millis(10);
    config.providers.insert(
        "google".to_owned(),
        querygate::engine::ProviderSettings {
            base_url: Some(base.clone()),
            auth: Some(json!({"type": "bearer", "credentialsenvvar": "GOOGLE_TOKEN"})),
            ..Default::default()
        },
    );
    let e = Engine::new(config).unwrap();
    let err = e
        .execute(
            &crate::support::corpus::providers_context(),
            "INSERT /*+ AWAIT */ INTO google.compute.instances (project, zone, name) VALUES ('p1', 'z1', 'vm1')",
        )
        .await
        .unwrap_err();
    assert_eq!(err.acknowledged_write(), Some(200), "{err}");
    assert_eq!(err.upstream_failure().map(|f| f.status), Some(500));
    // Without AWAIT the same insert succeeds and says how the upstream answered.
    let out = e
        .execute(
            &crate::support::corpus::providers_context(),
            "INSERT INTO google.compute.instances (project, zone, name) VALUES ('p1', 'z1', 'vm1')",
        )
        .await
        .unwrap();
    assert_eq!(out.upstream_status, Some(200));
}
