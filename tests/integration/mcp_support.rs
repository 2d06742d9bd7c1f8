//! An MCP server started in-process on 127.0.0.1:0 over the fixture registry (its `testapi`
//! provider calling a mock upstream), and real rmcp clients for both protocol generations.

use std::path::PathBuf;
use std::sync::Arc;

use querygate::app::App;
use querygate::clock::TestClock;
use querygate::config::{Config, Sources};
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::mock::Mock;
use crate::support::{SECRET, fixture_registry, served};

/// A running server and what it needs.
pub struct TestServer {
    pub url: String,
    pub mock: Mock,
    pub _dir: tempfile::TempDir,
    /// The server's clock (`Config::clock`): the system clock until the test advances it
    /// past a TTL, a refetch floor or a refill instead of sleeping.
    pub clock: Arc<TestClock>,
    shutdown: CancellationToken,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The YAML configuration of a test server; `extra` is appended (more keys of `server:`
/// go after the `server:` line).
pub fn test_config(mock: &Mock, dir: &std::path::Path, mode: &str, server_extra: &str) -> PathBuf {
    test_config_at(mock, dir, mode, server_extra, &fixture_registry())
}

/// [`test_config`] over the registry folder `root`.
pub fn test_config_at(
    mock: &Mock,
    dir: &std::path::Path,
    mode: &str,
    server_extra: &str,
    root: &std::path::Path,
) -> PathBuf {
    let env_file = dir.join("creds.env");
    std::fs::write(&env_file, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
    // Audit records of `serve`/`stdio` processes go into the test's folder.
    let yaml = format!(
        "registry:\n  root: {}\n  url: {}/registry\n  trusted_certificates: [{}]\nproviders:\n  testapi:\n    base_url: {}\ncredentials:\n  env_file: {}\n  process_env: false\naudit:\n  file:\n    dir: {}\ntenants:\n  - id: default\n    mode: {mode}\nserver:\n  listen: 127.0.0.1:0\n{server_extra}",
        root.display(),
        mock.url(),
        crate::support::signing::signer().cert_path().display(),
        mock.url(),
        env_file.display(),
        dir.join("audit").display()
    );
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// rmcp's HTTP client builds a default reqwest client, which needs a process-wide rustls
/// provider: ring, as querygate's own client uses.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Starts a server in `mode` with extra `server:` settings (indented two spaces).
pub async fn start(mode: &str, server_extra: &str) -> TestServer {
    start_over(mode, server_extra, false).await
}

/// [`start`] over a copy of the fixture registry in the server's temporary folder
/// (`<dir>/registry`), for tests that install providers.
pub async fn start_with_registry_copy(mode: &str, server_extra: &str) -> TestServer {
    start_over(mode, server_extra, true).await
}

/// Copies the folder `from` to `to`, recursively.
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

async fn start_over(mode: &str, server_extra: &str, copy_registry: bool) -> TestServer {
    install_crypto_provider();
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = if copy_registry {
        let root = dir.path().join("registry");
        copy_tree(&fixture_registry(), &root);
        test_config_at(&mock, dir.path(), mode, server_extra, &root)
    } else {
        test_config(&mock, dir.path(), mode, server_extra)
    };
    serve(file, mock, dir).await
}

pub type Client = RunningService<RoleClient, ClientConfig>;

/// A 2026-07-28 client: no handshake, per-request `_meta`.
pub async fn modern_client(url: &str) -> Client {
    client(
        url,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
}

/// A client of an older revision, with the `initialize` handshake.
pub async fn legacy_client(url: &str, version: ProtocolVersion) -> Client {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
    );
    ClientConfig::default()
        .with_protocol_version(version)
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await
        .expect("legacy client starts")
}

async fn client(url: &str, mode: ClientLifecycleMode) -> Client {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
    );
    ClientConfig::default()
        .serve_with_lifecycle(transport, mode)
        .await
        .expect("client starts")
}

/// Calls a tool; a protocol error panics.
pub async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    try_call(client, tool, arguments)
        .await
        .unwrap_or_else(|err| panic!("{tool} failed at the protocol level: {err}"))
}

/// Calls a tool, returning protocol errors as text.
pub async fn try_call(
    client: &Client,
    tool: &str,
    arguments: Value,
) -> Result<CallToolResult, String> {
    let arguments: Map<String, Value> = match arguments {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let result = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .map_err(|err| err.to_string())?;
    let text = text_of(&result);
    assert!(!text.contains(SECRET), "secret in tool output: {text}");
    Ok(result)
}

/// The text content of a result.
pub fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Like [`start`], with `server:` settings computed from the mock's URL (e.g. a query library
/// URL served by the mock).
pub async fn start_with(mode: &str, server_extra: impl FnOnce(&str) -> String) -> TestServer {
    install_crypto_provider();
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let extra = server_extra(&mock.url());
    let file = test_config(&mock, dir.path(), mode, &extra);
    serve(file, mock, dir).await
}

/// Starts a server for the YAML configuration `yaml(mock_url, dir)` returns (a whole file;
/// `dir` is the server's temporary folder, for key and credential files).
pub async fn start_yaml(yaml: impl FnOnce(&str, &std::path::Path) -> String) -> TestServer {
    install_crypto_provider();
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = yaml(&mock.url(), dir.path());
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, text).unwrap();
    serve(file, mock, dir).await
}

/// Starts `querygate serve` in-process (through [`App`], as the CLI does) for the
/// configuration in `file`.
async fn serve(file: PathBuf, mock: Mock, dir: tempfile::TempDir) -> TestServer {
    let config = Config::load(&Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap();
    let clock = TestClock::new();
    let app = App::builder(config)
        .clock(clock.clock())
        .build()
        .await
        .unwrap();
    let url = app.mcp_url();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(app.run_until(async move { stop.cancelled().await }));
    TestServer {
        url,
        mock,
        _dir: dir,
        clock,
        shutdown,
    }
}

/// The message of a tool error, checked against its structured form: the text is
/// `<message> [<code>]` and `structuredContent.error` holds the same code and message.
pub fn error_message(result: &CallToolResult) -> String {
    let text = text_of(result);
    let error = result
        .structured_content
        .as_ref()
        .and_then(|s| s.get("error"))
        .unwrap_or_else(|| panic!("tool error without structured error: {text}"));
    let code = error["code"].as_str().expect("error code");
    let message = error["message"].as_str().expect("error message");
    assert_eq!(text, format!("{message} [{code}]"));
    message.to_owned()
}

/// The code of a tool error.
pub fn error_code(result: &CallToolResult) -> String {
    result
        .structured_content
        .as_ref()
        .and_then(|s| s["error"]["code"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Reads the rest of a served process's stderr in the background; the lines, once it ends.
pub fn collect_lines(
    mut stderr: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut lines = Vec::new();
        while let Ok(Some(line)) = stderr.next_line().await {
            lines.push(line);
        }
        lines
    })
}

/// Sends SIGTERM to a served process (the `kill` command must succeed).
pub fn terminate(child: &tokio::process::Child) {
    let pid = child.id().expect("the process is running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
}

/// Starts `querygate --config CONFIG serve --listen 127.0.0.1:0` and waits for the URL it
/// announces on stderr; the rest of stderr is returned for the caller to read.
pub async fn spawn_serve(
    config: &std::path::Path,
) -> (String, tokio::process::Child, served::StderrLines) {
    let served =
        served::spawn_announced(served::serve_command(config).args(["--listen", "127.0.0.1:0"]))
            .await;
    (served.url, served.child, served.stderr)
}
