//! Audit through the tool-call pipeline, driven by real MCP clients over HTTP (and the
//! `stdio` and `serve` binaries): one outcome record per call, refusals and approval prompts
//! included; an intent before every side effect; a real PostgreSQL stopped mid-run in each
//! failure mode (strict refuses a mutation before the upstream sees it) and restarted (the
//! same server records again).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use querygate::audit::postgres::{PgSink, PgSinkConfig};
use querygate::audit::verify::{verify_database, verify_files};
use querygate::audit::{AuditSink, Auditor, FailureMode, FileLocation, location};
use rmcp::model::ElicitationAction;
use serde_json::json;

use crate::mcp_support::{error_code, test_config};
use crate::mock::{BodyFault, Mock, Reply};
use crate::support::gate::{Approver, DELETE, SELECT, approver_client, params, run};
use crate::support::{SECRET, pg, querygate_command};

use crate::support::audited::*;

#[tokio::test]
async fn every_call_gets_one_outcome_record_and_side_effects_an_intent_first() {
    let audit_dir = tempfile::tempdir().unwrap();
    let (auditor, _sink) = file_auditor(audit_dir.path(), FailureMode::Strict);
    let server = start("safe", "", auditor).await;
    route(&server.mock);
    let accept = approver_client(&server.url, Approver::new(Some(ElicitationAction::Accept))).await;
    let decline =
        approver_client(&server.url, Approver::new(Some(ElicitationAction::Decline))).await;
    let cannot_ask = approver_client(&server.url, Approver::new(None)).await;

    let info = accept
        .call_tool(rmcp::model::CallToolRequestParams::new("server_info"))
        .await
        .unwrap();
    assert_ne!(info.is_error, Some(true));
    let select = run(&accept, "run_select_query", SELECT).await;
    assert_ne!(select.is_error, Some(true));
    let delete = run(&accept, "run_mutation_query", DELETE).await; // two rounds: prompt, retry
    assert_ne!(delete.is_error, Some(true), "{delete:?}");
    let wrong_tool = run(&accept, "run_select_query", DELETE).await;
    assert_eq!(error_code(&wrong_tool), "policy.wrong_tool");
    let declined = run(&decline, "run_mutation_query", DELETE).await;
    assert_eq!(error_code(&declined), "policy.approval_declined");
    let unavailable = run(&cannot_ask, "run_mutation_query", DELETE).await;
    assert_eq!(error_code(&unavailable), "policy.approval_required");
    // A call `prepare` refuses (no such tool) is recorded too.
    assert!(
        accept
            .call_tool(params("no_such_tool", "SELECT 1"))
            .await
            .is_err()
    );

    let all = records(audit_dir.path());
    let lines: Vec<String> = all.iter().map(summary).collect();
    assert_eq!(
        lines,
        vec![
            "outcome server_info allow ok -",
            "outcome run_select_query allow ok -",
            "outcome run_mutation_query needs_approval_requested - -",
            "intent run_mutation_query needs_approval_accepted - -",
            "outcome run_mutation_query needs_approval_accepted ok -",
            "outcome run_select_query refuse_immediate error policy.wrong_tool",
            "outcome run_mutation_query needs_approval_requested - -",
            "outcome run_mutation_query needs_approval_declined error policy.approval_declined",
            "outcome run_mutation_query needs_approval_unavailable error policy.approval_required",
            "outcome no_such_tool refuse_immediate error arguments.invalid",
        ],
        "{lines:#?}"
    );
    // The approved delete: its intent and outcome share the call id and the approval id;
    // the prompt's record names the same approval.
    let (requested, intent, outcome) = (&all[2].record, &all[3].record, &all[4].record);
    assert_eq!(intent.call_id, outcome.call_id);
    assert!(intent.approval_id.is_some());
    assert_eq!(intent.approval_id, outcome.approval_id);
    assert_eq!(requested.approval_id, outcome.approval_id);
    assert_eq!(outcome.query_class.as_deref(), Some("mutation_delete"));
    assert_eq!(outcome.sql.as_deref(), Some(DELETE));
    assert_eq!(
        outcome.upstream_status,
        Some(204),
        "a successful write's status"
    );
    assert_eq!(all[1].record.rows_returned, Some(1));
    for r in &all {
        assert_eq!(r.record.tenant, "default");
        let mode = if r.record.tool == "no_such_tool" {
            ""
        } else {
            "safe"
        };
        assert_eq!(r.record.mode, mode);
        assert_eq!(
            r.record.protocol_version.as_deref(),
            Some("2026-07-28"),
            "{r:?}"
        );
        assert!(r.record.request_id.is_some());
        assert!(r.record.sql_sha256.is_some() || r.record.sql.is_none());
    }
    // Only the approved delete reached the upstream (plus the select).
    let writes = server
        .mock
        .requests()
        .iter()
        .filter(|r| r.method == "DELETE")
        .count();
    assert_eq!(writes, 1);
    let text = std::fs::read_to_string(
        location::files_of(&FileLocation::Dir(audit_dir.path().to_owned())).unwrap()[0].clone(),
    )
    .unwrap();
    assert!(!text.contains(SECRET), "a credential in the audit log");
    let report =
        verify_files(&location::files_of(&FileLocation::Dir(audit_dir.path().to_owned())).unwrap())
            .unwrap();
    assert!(report.ok(), "{}", report.render());
}

/// The upstream answers of the select and the delete.
fn route(mock: &Mock) {
    mock.route("/orgs/acme/items", Reply::json(json!([{"id": 1}])));
    mock.route("DELETE /orgs/acme/widgets/w-1", Reply::status(204, ""));
}

/// Runs the delete against a server (with `server_extra`) whose upstream answers it with
/// `reply`, and expects `call.outcome_unknown`, recorded as an intent and an outcome
/// `unknown`.
async fn delete_is_recorded_as_unknown(server_extra: &str, reply: Reply) {
    let audit_dir = tempfile::tempdir().unwrap();
    let (auditor, _sink) = file_auditor(audit_dir.path(), FailureMode::Strict);
    let server = start("full_access", server_extra, auditor).await;
    server.mock.route("DELETE /orgs/acme/widgets/w-1", reply);
    let client = approver_client(&server.url, Approver::new(None)).await;
    let result = run(&client, "run_mutation_query", DELETE).await;
    assert_eq!(error_code(&result), "call.outcome_unknown");
    let all: Vec<String> = records(audit_dir.path()).iter().map(summary).collect();
    assert_eq!(
        all,
        vec![
            "intent run_mutation_query allow - -",
            "outcome run_mutation_query allow unknown call.outcome_unknown"
        ]
    );
}

#[tokio::test]
async fn a_timeout_after_a_write_may_have_gone_out_is_recorded_as_unknown() {
    delete_is_recorded_as_unknown(
        "  call_timeout: 300ms\n",
        Reply::status(204, "").delayed(Duration::from_secs(3)),
    )
    .await;
}

#[tokio::test]
async fn a_write_whose_answer_broke_off_after_sending_is_recorded_as_unknown() {
    delete_is_recorded_as_unknown(
        "",
        Reply::status(200, r#"{"id": "w-1", "deleted": true}"#).failing(BodyFault::ResetAfter(5)),
    )
    .await;
}

async fn pg_auditor(pool: querygate::db::PgPool, mode: FailureMode) -> Auditor {
    let sink = PgSink::start(
        pool,
        PgSinkConfig {
            stream: "r1".into(),
            max_batch: 512,
            write_timeout: Duration::from_secs(2),
            mac_key: None,
        },
    )
    .await
    .unwrap();
    Auditor::new(Arc::new(sink) as Arc<dyn AuditSink>, mode, "r1", None)
}

/// Runs a delete and a select against a server audited into a private PostgreSQL cluster,
/// stops the cluster, runs them again, restarts it and runs them once more.
async fn database_stops_mid_run(mode: FailureMode) {
    let Some(cluster) = pg::PrivateCluster::start() else {
        return;
    };
    let database = cluster.fresh_database().await;
    let pool = querygate::db::connect_url(
        &querygate::config::SecretUrl::new(&database.url),
        4,
        Duration::from_secs(1),
    )
    .await
    .unwrap();
    querygate::db::migrate(&pool).await.unwrap();
    let server = start("full_access", "", pg_auditor(pool.clone(), mode).await).await;
    route(&server.mock);
    let client = approver_client(&server.url, Approver::new(None)).await;
    let deletes = || {
        server
            .mock
            .requests()
            .iter()
            .filter(|r| r.method == "DELETE")
            .count()
    };
    let delete = run(&client, "run_mutation_query", DELETE).await;
    assert_ne!(delete.is_error, Some(true), "{delete:?}");
    assert_eq!(deletes(), 1);

    cluster.stop();
    let delete = run(&client, "run_mutation_query", DELETE).await;
    let select = run(&client, "run_select_query", SELECT).await;
    match mode {
        FailureMode::Strict => {
            assert_eq!(error_code(&delete), "audit.unavailable");
            assert!(crate::mcp_support::text_of(&delete).contains("nothing was sent"));
            assert_eq!(deletes(), 1, "strict: the upstream saw no request");
            assert_eq!(error_code(&select), "audit.unavailable");
        }
        FailureMode::StrictMutations => {
            assert_eq!(error_code(&delete), "audit.unavailable");
            assert_eq!(
                deletes(),
                1,
                "strict_mutations: the upstream saw no request"
            );
            assert_ne!(select.is_error, Some(true), "{select:?}");
        }
        FailureMode::BestEffort => {
            assert_ne!(delete.is_error, Some(true), "{delete:?}");
            assert_eq!(deletes(), 2);
            assert_ne!(select.is_error, Some(true), "{select:?}");
        }
    }
    let before = deletes();

    cluster.start_server();
    // The same server, sink and pool record again once the database is back.
    crate::support::wait::eventually(
        "recovery without a restart",
        Duration::from_secs(20),
        Duration::from_millis(250),
        || async { run(&client, "run_mutation_query", DELETE).await.is_error != Some(true) },
    )
    .await;
    assert_eq!(deletes(), before + 1);
    let report = verify_database(&pool).await.unwrap();
    assert!(report.ok(), "{}", report.render());
    let outcomes: i64 = sqlx_core::query_scalar::query_scalar(
        "SELECT count(*) FROM audit_mutations WHERE outcome = 'ok'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        outcomes, 2,
        "the delete before the stop and the one after the restart"
    );
    let unfinished: i64 =
        sqlx_core::query_scalar::query_scalar("SELECT count(*) FROM audit_unfinished_intents")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(unfinished, 0);
}

#[tokio::test]
async fn strict_refuses_mutations_while_the_database_is_down_and_recovers() {
    database_stops_mid_run(FailureMode::Strict).await;
}

#[tokio::test]
async fn strict_mutations_refuses_only_side_effects_while_the_database_is_down() {
    database_stops_mid_run(FailureMode::StrictMutations).await;
}

#[tokio::test]
async fn best_effort_proceeds_while_the_database_is_down() {
    database_stops_mid_run(FailureMode::BestEffort).await;
}

#[tokio::test]
async fn the_stdio_session_is_audited_with_the_local_user() {
    use std::io::{BufRead as _, Write as _};
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&mock, dir.path(), "read_only", "");
    let audit_dir: PathBuf = dir.path().join("audit");
    let lines = tokio::task::spawn_blocking(move || {
        let mut child = querygate_command()
            .env("USER", "ops-person")
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
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "audit-test", "version": "9.1"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "server_info", "arguments": {}}}),
        ] {
            writeln!(stdin, "{message}").unwrap();
        }
        let mut replies = Vec::new();
        for _ in 0..2 {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            replies.push(line);
        }
        drop(stdin);
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        (replies, status, stderr)
    })
    .await
    .unwrap();
    let (replies, status, stderr) = lines;
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("querygate: audit records go to file"),
        "{stderr}"
    );
    assert!(replies[1].contains("\"id\":2"), "{replies:?}");
    let all = records(&audit_dir);
    assert_eq!(all.len(), 1, "{all:?}");
    let r = &all[0].record;
    assert_eq!(
        (
            r.tool.as_str(),
            r.principal.as_str(),
            r.auth_method.as_str()
        ),
        ("server_info", "local", "local")
    );
    // The uid's name, not the $USER the process was given.
    assert_eq!(r.os_user, Some(crate::support::uid_user()));
    assert_eq!(r.client_name.as_deref(), Some("audit-test"));
    assert_eq!(r.client_version.as_deref(), Some("9.1"));
    assert_eq!(r.request_id.as_deref(), Some("2"));
}

#[tokio::test]
async fn serve_stops_at_start_when_the_audit_location_is_unwritable() {
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "").unwrap();
    let config = test_config(&mock, dir.path(), "read_only", "");
    let output = tokio::task::spawn_blocking(move || {
        querygate_command()
            .env("QUERYGATE_AUDIT__FILE__DIR", blocker.join("audit"))
            .arg("--config")
            .arg(&config)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("audit: the audit log is unavailable: cannot create audit folder"),
        "{stderr}"
    );
}

#[tokio::test]
async fn writes_through_querygate_query_are_audited_and_refused_when_the_audit_cannot_be_written() {
    let mock = Mock::start().await;
    route(&mock);
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&mock, dir.path(), "full_access", "");
    let audit_dir = dir.path().join("audit");
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "").unwrap();
    let run = move |audit_override: Option<PathBuf>, sql: &'static str| {
        let config = config.clone();
        tokio::task::spawn_blocking(move || {
            let mut cmd = querygate_command();
            cmd.env("USER", "ops-person")
                .arg("--config")
                .arg(&config)
                .args(["query", sql]);
            if let Some(dir) = audit_override {
                cmd.env("QUERYGATE_AUDIT__FILE__DIR", dir);
            }
            cmd.output().unwrap()
        })
    };
    // A read is not audited; a write is, intent first.
    let read = run(None, SELECT).await.unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    assert!(!audit_dir.exists());
    let write = run(None, DELETE).await.unwrap();
    assert!(
        write.status.success(),
        "{}",
        String::from_utf8_lossy(&write.stderr)
    );
    let all: Vec<String> = records(&audit_dir).iter().map(summary).collect();
    assert_eq!(
        all,
        vec!["intent query allow - -", "outcome query allow ok -"]
    );
    let r = &records(&audit_dir)[1].record;
    assert_eq!(
        (
            r.principal.as_str(),
            r.auth_method.as_str(),
            r.os_user.as_deref()
        ),
        ("local", "local", Some(crate::support::uid_user().as_str()))
    );
    assert_eq!(r.query_class.as_deref(), Some("mutation_delete"));
    let deletes = || {
        mock.requests()
            .iter()
            .filter(|r| r.method == "DELETE")
            .count()
    };
    assert_eq!(deletes(), 1);
    // The audit cannot be written (strict): refused, nothing sent.
    let refused = run(Some(blocker.join("audit")), DELETE).await.unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot create audit folder"), "{stderr}");
    assert_eq!(deletes(), 1, "the upstream saw no request");
}
