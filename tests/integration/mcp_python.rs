//! The official MCP Python SDK (`mcp` on PyPI, streamable HTTP client) against the server:
//! `tests/python/mcp_client.py` lists the tools, runs `SELECT 1 AS n, 'ok' AS status` and
//! uses the query library tools.
//! `scripts/test.sh` installs the SDK into a virtualenv and names its interpreter in
//! `QUERYGATE_PYTHON`; without it the test says it is skipped (and fails under `CI`).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::mcp_support::{start, start_yaml};
use crate::support::identity::Pki;

/// The Python interpreter with the SDK, or `None` (the test then says it is skipped; under
/// `CI` it fails).
fn python() -> Option<String> {
    match std::env::var("QUERYGATE_PYTHON") {
        Ok(python) if !python.is_empty() => Some(python),
        _ => {
            assert!(
                !crate::support::required(),
                "QUERYGATE_PYTHON is not set under CI: run scripts/test.sh"
            );
            eprintln!(
                "skipped: QUERYGATE_PYTHON is not set (scripts/test.sh sets it to a Python with the mcp package)"
            );
            None
        }
    }
}

/// Runs `tests/python/mcp_client.py` with `args`; checks what it printed.
async fn run_client(python: &str, args: &[String]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/mcp_client.py");
    let child = Command::new(python)
        .arg(&script)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run {python}: {err}"));
    let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the Python client finishes within 120 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python client failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let tools = stdout
        .lines()
        .find_map(|l| l.strip_prefix("tools: "))
        .unwrap_or_else(|| panic!("no tool list in:\n{stdout}"));
    let tools: Vec<&str> = tools.split(", ").collect();
    assert_eq!(tools.len(), 17, "{tools:?}");
    assert!(tools.contains(&"server_info") && tools.contains(&"run_select_query"));
    assert!(
        stdout.contains("structured: {'rows': [{'n': 1, 'status': 'ok'}]}"),
        "{stdout}"
    );
    assert!(
        stdout.contains("library search: github/repos/repos-by-org"),
        "{stdout}"
    );
    assert!(stdout.contains("library get: run_select_query"), "{stdout}");
    assert!(stdout.contains("tool error: "), "{stdout}");
    assert!(stdout.contains("python mcp client: ok"), "{stdout}");
}

#[tokio::test]
async fn official_python_sdk_client_lists_tools_and_runs_a_select() {
    let Some(python) = python() else { return };
    let server = start("read_only", "").await;
    run_client(&python, std::slice::from_ref(&server.url)).await;
}

#[tokio::test]
async fn official_python_sdk_client_over_https_with_a_client_certificate() {
    let Some(python) = python() else { return };
    let pki = Pki::new("test CA");
    let server_pair = pki.server_pair();
    let client_pair = pki.spiffe_client("spiffe://example.org/agent-a", false);
    let ca = pki.ca_pem();
    let files = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = files.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let (ca_file, cert_file, key_file) = (
        file("ca.pem", &ca),
        file("client.pem", &client_pair.0),
        file("client.key", &client_pair.1),
    );
    let server = start_yaml(|mock, dir| {
        let server_cert = dir.join("server.crt");
        let server_key = dir.join("server.key");
        std::fs::write(&server_cert, &server_pair.0).unwrap();
        std::fs::write(&server_key, &server_pair.1).unwrap();
        format!(
            "registry:\n  root: {}\nproviders:\n  testapi:\n    base_url: {mock}\ncredentials:\n  process_env: false\nserver:\n  listen: 127.0.0.1:0\n  tls:\n    cert_file: {}\n    key_file: {}\n    client_ca_file: {ca_file}\nauth:\n  mtls:\n    identities:\n      \"uri:spiffe://example.org/agent-a\": default\n",
            crate::support::fixture_registry().display(),
            server_cert.display(),
            server_key.display(),
        )
    })
    .await;
    assert!(server.url.starts_with("https://"));
    run_client(&python, &[server.url.clone(), ca_file, cert_file, key_file]).await;
}
