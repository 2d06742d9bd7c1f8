//! Local sessions writing one audit folder: two `querygate stdio` processes at once keep two
//! linear chains in the day's one file (`audit verify` finds no break), a client that starts
//! a process per call fills one file, not one per start, and a start that is refused leaves
//! no file behind.

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};

use querygate::audit::{FileLocation, location};
use serde_json::json;

use crate::mcp_support::test_config;
use crate::mock::Mock;
use crate::support::audited::records;
use crate::support::querygate_command;

/// Runs one stdio session of `config`: initialize, then `calls` calls of `server_info`, each
/// answered before the next; returns whether the process exited 0, and its stderr.
fn session(config: &Path, calls: usize) -> (bool, String) {
    let mut child = querygate_command()
        .env("USER", "ops")
        .arg("--config")
        .arg(config)
        .arg("stdio")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut send = |message: serde_json::Value| writeln!(stdin, "{message}").is_ok();
    let mut read = || {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap_or(0) > 0
    };
    let started = send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    ) && read()
        && send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    if started {
        for id in 1..=calls {
            if !send(
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "server_info", "arguments": {}}}),
            ) || !read()
            {
                break;
            }
        }
    }
    drop(stdin);
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.success(), stderr)
}

fn files(dir: &Path) -> Vec<PathBuf> {
    location::files_of(&FileLocation::Dir(dir.to_owned())).unwrap_or_default()
}

fn verify(dir: &Path) -> (bool, String) {
    let output = querygate_command()
        .args(["audit", "verify"])
        .arg(dir)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[tokio::test]
async fn two_stdio_sessions_at_once_keep_two_linear_chains_in_one_file() {
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&mock, dir.path(), "read_only", "");
    let audit = dir.path().join("audit");
    let sessions: Vec<_> = (0..2)
        .map(|_| {
            let config = config.clone();
            tokio::task::spawn_blocking(move || session(&config, 40))
        })
        .collect();
    for session in sessions {
        let (ok, stderr) = session.await.unwrap();
        assert!(ok, "{stderr}");
    }
    assert_eq!(files(&audit).len(), 1, "{:?}", files(&audit));
    let all = records(&audit);
    assert_eq!(all.len(), 80);
    let mut streams: Vec<&str> = all.iter().map(|r| r.stream.as_str()).collect();
    streams.sort_unstable();
    streams.dedup();
    assert_eq!(streams.len(), 2, "one stream per process: {streams:?}");
    let (ok, report) = verify(&audit);
    assert!(ok, "{report}");
    assert!(
        report.contains("80 records in 2 streams, no break"),
        "{report}"
    );
}

#[tokio::test]
async fn a_process_per_call_fills_one_file_and_a_refused_start_leaves_none() {
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&mock, dir.path(), "read_only", "");
    let audit = dir.path().join("audit");
    let config_for = config.clone();
    tokio::task::spawn_blocking(move || {
        for _ in 0..10 {
            let (ok, stderr) = session(&config_for, 1);
            assert!(ok, "{stderr}");
        }
    })
    .await
    .unwrap();
    assert_eq!(files(&audit).len(), 1, "{:?}", files(&audit));
    assert_eq!(records(&audit).len(), 10);
    let (ok, report) = verify(&audit);
    assert!(ok, "{report}");
    assert!(
        report.contains("10 records in 10 streams, no break"),
        "{report}"
    );

    // A start refused after its audit was opened (an allowlist naming no tool).
    let refused_dir = tempfile::tempdir().unwrap();
    let refused = test_config(
        &mock,
        refused_dir.path(),
        "read_only",
        "  allowed_tools: [no_such_tool]\n",
    );
    let (ok, stderr) = tokio::task::spawn_blocking(move || session(&refused, 1))
        .await
        .unwrap();
    assert!(!ok, "the start should be refused: {stderr}");
    assert_eq!(
        files(&refused_dir.path().join("audit")),
        Vec::<PathBuf>::new(),
        "{stderr}"
    );
}
