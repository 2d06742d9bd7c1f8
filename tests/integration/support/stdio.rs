//! The server as a raw stdio process: JSON-RPC lines in, lines out.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The longest wait for one line or the exit.
pub const LIMIT: Duration = Duration::from_secs(30);

/// `querygate --config <config> stdio` with an empty environment but `PATH`.
pub fn command(config: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_querygate"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .arg("--config")
        .arg(config)
        .arg("stdio");
    cmd
}

/// The server as a raw process: bytes in, lines out.
pub struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Every stdout line read so far.
    seen: Vec<String>,
}

impl Raw {
    pub(crate) fn spawn(config: &Path) -> Raw {
        let mut child = command(config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Raw {
            child,
            stdin,
            stdout,
            seen: Vec::new(),
        }
    }

    pub(crate) async fn send(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// The next stdout line, parsed; every line must be a JSON-RPC 2.0 message.
    pub(crate) async fn next(&mut self) -> Value {
        let mut line = String::new();
        let n = tokio::time::timeout(LIMIT, self.stdout.read_line(&mut line))
            .await
            .expect("a line in time")
            .unwrap();
        assert!(n > 0, "stdout closed early; seen: {:?}", self.seen);
        assert!(line.ends_with('\n'), "{line:?}");
        self.seen.push(line.clone());
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|err| panic!("stdout line is not JSON ({err}): {line:?}"));
        assert_eq!(value["jsonrpc"], "2.0", "{line}");
        value
    }

    /// Sends `frame` and expects an error response with `code` and a null id.
    pub async fn expect_error(&mut self, frame: &[u8], code: i64) -> Value {
        self.send(frame).await;
        let reply = self.next().await;
        assert_eq!(reply["id"], Value::Null, "{reply}");
        assert_eq!(reply["error"]["code"], code, "{reply}");
        reply
    }

    pub async fn ping(&mut self, id: u64) {
        self.send(format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n").as_bytes())
            .await;
        let reply = self.next().await;
        assert_eq!(reply, json!({"jsonrpc": "2.0", "id": id, "result": {}}));
    }

    /// Closes stdin and returns the exit code; stdout must then end with nothing more.
    pub(crate) async fn finish(mut self) -> i32 {
        drop(self.stdin.take());
        let mut rest = String::new();
        tokio::time::timeout(
            LIMIT,
            tokio::io::AsyncReadExt::read_to_string(&mut self.stdout, &mut rest),
        )
        .await
        .expect("stdout closes in time")
        .unwrap();
        assert_eq!(rest, "", "unexpected output after EOF");
        let status = tokio::time::timeout(LIMIT, self.child.wait())
            .await
            .expect("the server exits in time")
            .unwrap();
        status.code().unwrap_or(-1)
    }
}

pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
pub const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
