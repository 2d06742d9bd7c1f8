//! The official MCP Python SDK (`mcp` on PyPI, streamable HTTP client) against the server:
//! `tests/python/mcp_client.py` lists the tools, runs `SELECT 1 AS n, 'ok' AS status` and
//! uses the query library tools.
//! `scripts/test.sh` installs the SDK into a virtualenv and names its interpreter in
//! `QUERYGATE_PYTHON`; without it the test says it is skipped (and fails under `CI`).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::mcp_support::start;

#[tokio::test]
async fn official_python_sdk_client_lists_tools_and_runs_a_select() {
    let python = match std::env::var("QUERYGATE_PYTHON") {
        Ok(python) if !python.is_empty() => python,
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "QUERYGATE_PYTHON is not set under CI: run scripts/test.sh"
            );
            eprintln!(
                "skipped: QUERYGATE_PYTHON is not set (scripts/test.sh sets it to a Python with the mcp package)"
            );
            return;
        }
    };
    let server = start("read_only", "").await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/mcp_client.py");
    let child = Command::new(&python)
        .arg(&script)
        .arg(&server.url)
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
    assert_eq!(tools.len(), 16, "{tools:?}");
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
