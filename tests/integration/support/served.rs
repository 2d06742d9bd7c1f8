//! The querygate binary as a served process: stdin and stdout closed, stderr piped, killed
//! on drop, and awaited until it announces its MCP URL on stderr.

use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncBufReadExt as _;
use tokio::process::{Child, ChildStderr, Command};

/// The rest of a served process's stderr, line by line.
pub type StderrLines = tokio::io::Lines<tokio::io::BufReader<ChildStderr>>;

/// How long a served process may take to announce its address.
const ANNOUNCE_WITHIN: Duration = Duration::from_secs(30);

/// What stderr says once the server listens.
const ANNOUNCEMENT: &str = "querygate: serving MCP at ";

/// A served process that announced its address.
pub struct Announced {
    /// The MCP URL it announced.
    pub url: String,
    /// The process.
    pub child: Child,
    /// Its stderr after the announcement, for the caller to read (or drain).
    pub stderr: StderrLines,
    /// Its stderr lines before the announcement.
    pub before: Vec<String>,
}

/// `querygate --config CONFIG serve`, for the caller to add arguments and environment to.
pub fn serve_command(config: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_querygate"));
    cmd.arg("--config").arg(config).arg("serve");
    cmd
}

/// Spawns `cmd` and waits for the URL it announces; fails the test, with what it wrote, if
/// it exits first or takes longer than 30 s.
pub async fn spawn_announced(cmd: &mut Command) -> Announced {
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let (url, before) = tokio::time::timeout(ANNOUNCE_WITHIN, async {
        let mut seen = Vec::new();
        while let Some(line) = stderr.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix(ANNOUNCEMENT) {
                return (url.to_owned(), seen);
            }
            seen.push(line);
        }
        panic!("serve exited without announcing its address: {seen:?}");
    })
    .await
    .expect("serve announces its address");
    Announced {
        url,
        child,
        stderr,
        before,
    }
}
