//! `querygate query` (the real binary) through the tool-call pipeline: the tenant's mode
//! decides as for MCP clients, `--yes` approves in advance and nothing else does without a
//! terminal, and the audit records what the pipeline decided (reads only with
//! `audit.cli_reads`).

use std::path::Path;

use querygate::audit::format::parse_line;
use querygate::audit::{AuditRecord, FileLocation, location};
use serde_json::json;

use crate::mcp_support::test_config;
use crate::mock::{Mock, Reply};
use crate::support::gate::{DELETE, SELECT};

/// The upstream answers of the read and the delete.
fn route(mock: &Mock) {
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1}, {"id": 2}])),
    );
    mock.route("DELETE /orgs/acme/widgets/w-1", Reply::status(204, ""));
}

/// Runs `querygate query ARGS` over a config in `mode` with stdin not a terminal, off the
/// test's runtime (which serves the mock), with extra environment `env`.
async fn query(
    mock: &Mock,
    dir: &Path,
    mode: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> std::process::Output {
    query_with(mock, dir, mode, "", env, args).await
}

/// [`query`] with extra `server:` settings (indented two spaces).
async fn query_with(
    mock: &Mock,
    dir: &Path,
    mode: &str,
    server_extra: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> std::process::Output {
    let config = test_config(mock, dir, mode, server_extra);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_querygate"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("USER", "ops-person")
        .envs(env.iter().copied())
        .arg("--config")
        .arg(&config)
        .arg("query")
        .args(args)
        .stdin(std::process::Stdio::null());
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// Every record in the audit folder of `dir` (`test_config` puts it at `<dir>/audit`).
fn records(dir: &Path) -> Vec<AuditRecord> {
    let audit = dir.join("audit");
    if !audit.exists() {
        return Vec::new();
    }
    let files = location::files_of(&FileLocation::Dir(audit)).unwrap();
    files
        .iter()
        .flat_map(|file| {
            std::fs::read_to_string(file)
                .unwrap()
                .lines()
                .map(|line| parse_line(line).expect("an intact record").stored.record)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `phase tool decision outcome error_code` of each record.
fn summaries(records: &[AuditRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {} {}",
                r.phase.as_str(),
                r.tool,
                r.decision.as_str(),
                r.outcome.map_or("-", |o| o.as_str()),
                r.error_code.as_deref().unwrap_or("-")
            )
        })
        .collect()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn deletes(mock: &Mock) -> usize {
    mock.requests()
        .iter()
        .filter(|r| r.method == "DELETE")
        .count()
}

#[tokio::test]
async fn a_write_in_read_only_is_refused_and_audited_as_the_gate_decided() {
    let mock = Mock::start().await;
    route(&mock);
    let dir = tempfile::tempdir().unwrap();
    let out = query(&mock, dir.path(), "read_only", &[], &[DELETE]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("error: tool \"query\" refused: server is in 'read_only' mode"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
    assert_eq!(deletes(&mock), 0, "nothing was sent");
    let records = records(dir.path());
    assert_eq!(
        summaries(&records),
        vec!["outcome query refuse_immediate error policy.refused"]
    );
    let r = &records[0];
    assert_eq!(
        (
            r.principal.as_str(),
            r.auth_method.as_str(),
            r.os_user.as_deref(),
            r.client_name.as_deref(),
            r.mode.as_str(),
            r.query_class.as_deref(),
            r.sql.as_deref(),
        ),
        (
            "local",
            "local",
            Some(crate::support::uid_user().as_str()),
            Some("querygate-cli"),
            "read_only",
            Some("mutation_delete"),
            Some(DELETE),
        )
    );
}

#[tokio::test]
async fn a_write_in_safe_runs_with_yes_and_is_refused_without_a_terminal() {
    let mock = Mock::start().await;
    route(&mock);
    let dir = tempfile::tempdir().unwrap();

    let held = query(&mock, dir.path(), "safe", &[], &[DELETE]).await;
    assert_eq!(held.status.code(), Some(1), "{}", stderr(&held));
    assert!(
        stderr(&held).contains(
            "server is in 'safe' mode; this mutation_delete statement needs approval: run it again with --yes"
        ),
        "{}",
        stderr(&held)
    );
    assert!(!stderr(&held).contains("[y/N]"), "nobody was asked");
    assert_eq!(deletes(&mock), 0, "nothing was sent");
    assert_eq!(
        summaries(&records(dir.path())),
        vec!["outcome query needs_approval_unavailable error policy.approval_required"]
    );

    let approved = query(&mock, dir.path(), "safe", &[], &["--yes", DELETE]).await;
    assert!(approved.status.success(), "{}", stderr(&approved));
    assert_eq!(deletes(&mock), 1);
    let records = records(dir.path());
    assert_eq!(
        summaries(&records[1..]),
        vec![
            "intent query needs_approval_accepted - -",
            "outcome query needs_approval_accepted ok -"
        ]
    );
    assert!(
        records[2]
            .approval_id
            .as_deref()
            .is_some_and(|id| !id.is_empty())
    );
    assert_eq!(records[1].call_id, records[2].call_id);
}

#[tokio::test]
async fn reads_are_audited_only_with_audit_cli_reads() {
    let mock = Mock::start().await;
    route(&mock);
    let dir = tempfile::tempdir().unwrap();

    let quiet = query(&mock, dir.path(), "read_only", &[], &["-o", "csv", SELECT]).await;
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    assert_eq!(String::from_utf8_lossy(&quiet.stdout), "id\r\n1\r\n2\r\n");
    assert!(
        !dir.path().join("audit").exists(),
        "a read without audit.cli_reads opens no audit file"
    );

    let env = [("QUERYGATE_AUDIT__CLI_READS", "true")];
    let audited = query(&mock, dir.path(), "read_only", &env, &["-o", "csv", SELECT]).await;
    assert!(audited.status.success(), "{}", stderr(&audited));
    assert_eq!(String::from_utf8_lossy(&audited.stdout), "id\r\n1\r\n2\r\n");
    let records = records(dir.path());
    assert_eq!(summaries(&records), vec!["outcome query allow ok -"]);
    assert_eq!(records[0].rows_returned, Some(2));
    assert_eq!(records[0].query_class.as_deref(), Some("select"));
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn a_tool_the_server_does_not_offer_is_refused_with_its_code_in_the_record() {
    let mock = Mock::start().await;
    route(&mock);
    let dir = tempfile::tempdir().unwrap();
    let extra = "  enabled_tools: [run_select_query]\n";
    let out = query_with(&mock, dir.path(), "full_access", extra, &[], &[DELETE]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("error: unknown tool 'run_mutation_query'"),
        "{}",
        stderr(&out)
    );
    assert_eq!(deletes(&mock), 0, "nothing was sent");
    assert_eq!(
        summaries(&records(dir.path())),
        vec!["outcome query refuse_immediate error arguments.invalid"]
    );
}
