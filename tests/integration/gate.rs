//! The mode gate through real MCP clients over HTTP: every mode × class, refusals that never
//! reach the upstream, and approval per request (MRTR for 2026-07-28 clients that declare
//! elicitation; a refusal for clients that cannot be asked).

use rmcp::model::{CallToolRequestParams, CallToolResult, ElicitationAction, ProtocolVersion};
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Map, Value, json};

use crate::mcp_support::*;
use crate::mock::{Mock, Reply};

use crate::support::gate::*;

fn describe(result: &CallToolResult) -> String {
    format!("{} ({:?})", text_of(result), result.structured_content)
}

#[tokio::test]
async fn every_mode_and_class_without_elicitation() {
    for mode in ["read_only", "safe", "delete_safe", "full_access"] {
        let server = start(mode, "").await;
        route_all(&server.mock);
        let client = approver_client(&server.url, Approver::new(None)).await;
        for (class, tool, sql) in CASES {
            let before = server.mock.requests().len();
            let result = run(&client, tool, sql).await;
            let sent = server.mock.requests().len() - before;
            match expected(mode, class) {
                "allow" => {
                    assert_ne!(
                        result.is_error,
                        Some(true),
                        "{mode} × {class}: {}",
                        describe(&result)
                    );
                    assert_eq!(sent, 1, "{mode} × {class}");
                }
                "refuse" => {
                    assert_eq!(error_code(&result), "policy.refused", "{mode} × {class}");
                    assert_eq!(
                        error_message(&result),
                        format!("tool \"{tool}\" refused: server is in '{mode}' mode")
                    );
                    assert_eq!(sent, 0, "{mode} × {class}: nothing may reach the upstream");
                }
                _ => {
                    assert_eq!(
                        error_code(&result),
                        "policy.approval_required",
                        "{mode} × {class}: {}",
                        describe(&result)
                    );
                    let message = error_message(&result);
                    assert!(
                        message.starts_with(&format!(
                            "tool \"{tool}\" refused: server is in '{mode}' mode and the MCP client declared no elicitation capability"
                        )),
                        "{message}"
                    );
                    assert!(
                        message.contains("ask an operator to set `approval.out_of_band: fallback`")
                            && !message.contains("change the tenant's mode"),
                        "{message}"
                    );
                    assert_eq!(sent, 0, "{mode} × {class}: nothing may reach the upstream");
                }
            }
        }
    }
}

#[tokio::test]
async fn approval_accepted_runs_the_call_once() {
    let server = start("safe", "").await;
    route_all(&server.mock);
    let approver = Approver::new(Some(ElicitationAction::Accept));
    let client = approver_client(&server.url, approver.clone()).await;
    for (class, tool, sql) in &CASES[1..] {
        let before = server.mock.requests().len();
        let result = run(&client, tool, sql).await;
        assert_ne!(
            result.is_error,
            Some(true),
            "{class}: {}",
            describe(&result)
        );
        assert_eq!(
            server.mock.requests().len() - before,
            1,
            "{class}: sent once"
        );
        let prompt = approver.prompts().pop().unwrap();
        assert!(
            prompt.starts_with(&format!(
                "Approve {tool} ({class})?\n\nTenant: default\nPrincipal: anonymous\nTool: {tool}\nClass: {class}\nMode: safe\nProvider: testapi · "
            )),
            "{prompt}"
        );
        assert!(
            prompt.ends_with(&format!(
                "\n\nSQL as the client sent it (escaped, on one line): {sql}"
            )),
            "{prompt}"
        );
    }
    // Reads are never held for approval.
    let prompts = approver.prompts().len();
    let select = run(&client, "run_select_query", SELECT).await;
    assert_ne!(select.is_error, Some(true));
    assert_eq!(approver.prompts().len(), prompts);
}

#[tokio::test]
async fn approval_declined_or_dismissed_sends_nothing() {
    let server = start("delete_safe", "").await;
    route_all(&server.mock);
    for (answer, code, why) in [
        (
            ElicitationAction::Decline,
            "policy.approval_declined",
            "user declined approval",
        ),
        (
            ElicitationAction::Cancel,
            "policy.approval_cancelled",
            "approval prompt was dismissed",
        ),
    ] {
        let client = approver_client(&server.url, Approver::new(Some(answer))).await;
        let result = run(&client, "run_mutation_query", DELETE).await;
        assert_eq!(error_code(&result), code);
        assert_eq!(
            error_message(&result),
            format!("tool \"run_mutation_query\" refused: {why}")
        );
    }
    assert!(server.mock.requests().is_empty());
}

#[tokio::test]
async fn tampered_replayed_and_retargeted_approvals_are_refused() {
    let server = start("safe", "").await;
    route_all(&server.mock);
    let client = approver_client(&server.url, Approver::new(Some(ElicitationAction::Accept))).await;
    let state = first_round(&client, "run_mutation_query", DELETE).await;

    // Re-targeted: another statement, another tool.
    let other_sql = "DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-2'";
    let other = retry(&client, "run_mutation_query", other_sql, &state, "accept").await;
    assert_eq!(
        error_code(&other),
        "policy.approval_invalid",
        "{}",
        describe(&other)
    );
    // Tampered.
    let mut tampered = state.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let bad = retry(&client, "run_mutation_query", DELETE, &tampered, "accept").await;
    assert_eq!(error_code(&bad), "policy.approval_invalid");
    assert!(server.mock.requests().is_empty(), "nothing sent yet");

    // Redeemed once, then replayed.
    let ok = retry(&client, "run_mutation_query", DELETE, &state, "accept").await;
    assert_ne!(ok.is_error, Some(true), "{}", describe(&ok));
    assert_eq!(server.mock.requests().len(), 1);
    let replay = retry(&client, "run_mutation_query", DELETE, &state, "accept").await;
    assert_eq!(error_code(&replay), "policy.approval_invalid");
    assert!(
        error_message(&replay).contains("already used"),
        "{}",
        describe(&replay)
    );
    assert_eq!(server.mock.requests().len(), 1, "the replay sent nothing");
}

#[tokio::test]
async fn an_expired_approval_is_refused() {
    let server = start("safe", "approval:\n  ttl: 5m\n").await;
    route_all(&server.mock);
    let client = approver_client(&server.url, Approver::new(Some(ElicitationAction::Accept))).await;
    let state = first_round(&client, "run_lifecycle_operation", EXEC).await;
    // The server's clock moves past the TTL (the sealed expiry is read on it).
    server
        .clock
        .advance(std::time::Duration::from_secs(5 * 60 + 1));
    let late = retry(&client, "run_lifecycle_operation", EXEC, &state, "accept").await;
    assert_eq!(error_code(&late), "policy.approval_invalid");
    assert!(server.mock.requests().is_empty());
}

#[tokio::test]
async fn legacy_http_clients_are_refused_with_a_reason_not_left_hanging() {
    let server = start("safe", "").await;
    route_all(&server.mock);
    let mut approver = Approver::new(Some(ElicitationAction::Accept));
    approver.version = ProtocolVersion::V_2025_11_25;
    let client = approver_client(&server.url, approver.clone()).await;
    let result = run(&client, "run_mutation_query", INSERT).await;
    assert_eq!(error_code(&result), "policy.approval_required");
    // It declared elicitation; what it cannot do is be asked over stateless HTTP.
    let message = error_message(&result);
    assert!(
        message.starts_with(
            "tool \"run_mutation_query\" refused: server is in 'safe' mode; this client's protocol (MCP 2025-11-25) cannot be asked over stateless HTTP"
        ),
        "{message}"
    );
    assert!(
        !message.contains("does not support elicitation"),
        "{message}"
    );
    // What the operator can do for such a client is turn on out-of-band approval, not
    // weaken the mode.
    assert!(
        message.contains("ask an operator to set `approval.out_of_band: fallback`")
            && !message.contains("change the tenant's mode"),
        "{message}"
    );
    assert!(approver.prompts().is_empty());
    assert!(server.mock.requests().is_empty());
}

#[tokio::test]
async fn statements_are_classed_by_what_they_do_not_their_first_word() {
    let server = start("full_access", "").await;
    route_all(&server.mock);
    let client = approver_client(&server.url, Approver::new(None)).await;
    let cases = [
        // Several statements: refused on every tool, whatever the mode.
        (
            "run_select_query",
            "SELECT 1; DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-1'",
            "policy.multiple_statements",
        ),
        (
            "run_mutation_query",
            "DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-1'; SELECT 1",
            "policy.multiple_statements",
        ),
        // A comment first does not hide a DELETE from the class check.
        (
            "run_select_query",
            "/* just a select */ DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-1'",
            "policy.wrong_tool",
        ),
        (
            "run_select_query",
            "-- read\nDELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-1'",
            "policy.wrong_tool",
        ),
        // DML carried by a CTE is unknown: no tool runs it.
        (
            "run_mutation_query",
            "WITH t AS (SELECT 1) DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-1'",
            "policy.wrong_tool",
        ),
        (
            "run_select_query",
            "EXEC testapi.widgets.widgets.restart @org = 'acme', @id = 'w-1'",
            "policy.wrong_tool",
        ),
        ("run_lifecycle_operation", "SELECT 1", "policy.wrong_tool"),
        ("run_select_query", "SELEC 1", "sql.invalid"),
    ];
    for (tool, sql, code) in cases {
        let result = run(&client, tool, sql).await;
        assert_eq!(
            error_code(&result),
            code,
            "{tool}: {sql}: {}",
            describe(&result)
        );
    }
    let wrong = run(&client, "run_select_query", DELETE).await;
    assert!(error_message(&wrong).contains("use run_mutation_query"));
    // A DELETE headed by a CTE parses as a query carrying it: the refusal names the DELETE
    // and what to send instead, not "a SELECT".
    let headed = "WITH t AS (SELECT 1) DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-1'";
    for tool in ["run_mutation_query", "run_select_query"] {
        let message = error_message(&run(&client, tool, headed).await);
        assert!(
            message.ends_with(
                "; this statement is a DELETE within a query (WITH, a subquery or a set \
                 operation) (unknown): no tool runs a write within a query; send the DELETE as \
                 a statement of its own, without WITH, to run_mutation_query"
            ),
            "{tool}: {message}"
        );
    }
    // The validators say the same, and that the mode never runs it (full_access included).
    for tool in ["validate_mutation_query", "validate_select_query"] {
        let result = run(&client, tool, headed).await;
        let verdict = result.structured_content.clone().unwrap();
        assert_eq!(verdict["valid"], false, "{tool}: {verdict}");
        assert_eq!(verdict["approval"], "refuse_immediate", "{tool}: {verdict}");
        let error = verdict["errors"][0].as_str().unwrap();
        assert!(
            error.starts_with(&format!("{tool} checks "))
                && error.ends_with(
                    "; this statement is a DELETE within a query (WITH, a subquery or a set \
                     operation): no tool runs a write within a query; send the DELETE as a \
                     statement of its own, without WITH, to run_mutation_query"
                ),
            "{tool}: {error}"
        );
    }
    assert!(
        server.mock.requests().is_empty(),
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn pull_provider_follows_the_tenants_switch() {
    // The tenant's mode line is followed by its switch (the helper writes `mode: <mode>`).
    let server = start("full_access\n    allow_pull_provider: false", "").await;
    let client = approver_client(&server.url, Approver::new(None)).await;
    let mut arguments = Map::new();
    arguments.insert("provider".into(), Value::from("testapi"));
    let result = client
        .call_tool(CallToolRequestParams::new("pull_provider").with_arguments(arguments))
        .await
        .unwrap();
    assert_eq!(
        error_code(&result),
        "policy.refused",
        "{}",
        describe(&result)
    );
    assert!(error_message(&result).contains("allow_pull_provider"));
    assert!(
        server.mock.requests().is_empty(),
        "the registry was not asked"
    );
}

/// A `querygate serve` process; killed when dropped.
struct Replica {
    url: String,
    _child: tokio::process::Child,
}

async fn spawn_replica(config: &std::path::Path) -> Replica {
    let (url, child, mut stderr) = spawn_serve(config).await;
    // Keep reading stderr so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    Replica { url, _child: child }
}

#[tokio::test]
async fn an_approval_issued_by_one_replica_is_redeemed_once_on_another() {
    let Some(database) = crate::support::pg::fresh_database().await else {
        return;
    };
    let pool = database.pool(1).await;
    querygate::db::migrate(&pool).await.unwrap();
    install_crypto_provider();
    let mock = crate::mock::Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("approval.key");
    std::fs::write(
        &key,
        querygate::digest::hex(&querygate::digest::random_bytes(32).unwrap()),
    )
    .unwrap();
    let extra = format!(
        "approval:\n  key_files: [{}]\n  store: postgres\ndatabase:\n  url: {}\n",
        key.display(),
        database.url
    );
    // Each replica has its own folder (its own audit files); they share the key and the
    // database.
    let other_dir = tempfile::tempdir().unwrap();
    let config = test_config(&mock, dir.path(), "safe", &extra);
    let other_config = test_config(&mock, other_dir.path(), "safe", &extra);
    let (one, two) = tokio::join!(spawn_replica(&config), spawn_replica(&other_config));
    route_all(&mock);
    let approver = || Approver::new(Some(ElicitationAction::Accept));
    let on_one = approver_client(&one.url, approver()).await;
    let on_two = approver_client(&two.url, approver()).await;

    let state = first_round(&on_one, "run_mutation_query", DELETE).await;
    let ok = retry(&on_two, "run_mutation_query", DELETE, &state, "accept").await;
    assert_ne!(ok.is_error, Some(true), "{}", describe(&ok));
    assert_eq!(mock.requests().len(), 1);
    for client in [&on_one, &on_two] {
        let replay = retry(client, "run_mutation_query", DELETE, &state, "accept").await;
        assert_eq!(
            error_code(&replay),
            "policy.approval_invalid",
            "{}",
            describe(&replay)
        );
    }
    assert_eq!(mock.requests().len(), 1, "the write ran exactly once");
    // A state sealed by a replica with another key opens nowhere here.
    let stranger = start("safe", "").await;
    let foreign_client = approver_client(&stranger.url, approver()).await;
    let foreign = first_round(&foreign_client, "run_mutation_query", DELETE).await;
    let refused = retry(&on_one, "run_mutation_query", DELETE, &foreign, "accept").await;
    assert_eq!(error_code(&refused), "policy.approval_invalid");
    assert_eq!(mock.requests().len(), 1);
}

/// `querygate stdio` for `config`, driven by `approver` over the child's stdin/stdout.
async fn stdio_client(config: &std::path::Path, approver: Approver) -> ApproverClient {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_querygate"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .arg("--config")
        .arg(config)
        .arg("stdio");
    let (transport, _stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lifecycle = if approver.version.has_initialize() {
        ClientLifecycleMode::Initialize
    } else {
        ClientLifecycleMode::Discover {
            preferred_versions: vec![approver.version.clone()],
        }
    };
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        approver.serve_with_lifecycle(transport, lifecycle),
    )
    .await
    .expect("the stdio client starts in time")
    .expect("the stdio client starts")
}

#[tokio::test]
async fn stdio_sessions_ask_mid_call_or_resume_and_refuse_without_elicitation() {
    let mock = Mock::start().await;
    route_all(&mock);
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&mock, dir.path(), "safe", "");
    // Older revisions in a session: elicitation/create in the middle of the call.
    for (answer, code) in [
        (ElicitationAction::Accept, None),
        (ElicitationAction::Decline, Some("policy.approval_declined")),
        (ElicitationAction::Cancel, Some("policy.approval_cancelled")),
    ] {
        let mut approver = Approver::new(Some(answer));
        approver.version = ProtocolVersion::V_2025_11_25;
        let client = stdio_client(&config, approver.clone()).await;
        let before = mock.requests().len();
        let result = run(&client, "run_mutation_query", INSERT).await;
        match code {
            None => {
                assert_ne!(result.is_error, Some(true), "{}", describe(&result));
                assert_eq!(mock.requests().len() - before, 1);
            }
            Some(code) => {
                assert_eq!(error_code(&result), code, "{}", describe(&result));
                assert_eq!(mock.requests().len(), before, "nothing sent");
            }
        }
        let prompts = approver.prompts();
        assert_eq!(prompts.len(), 1, "{prompts:?}");
        assert!(prompts[0].starts_with("Approve run_mutation_query (mutation_create)?"));
    }
    // 2026-07-28 over stdio: the MRTR round trip.
    let client = stdio_client(&config, Approver::new(Some(ElicitationAction::Accept))).await;
    let before = mock.requests().len();
    let result = run(&client, "run_lifecycle_operation", EXEC).await;
    assert_ne!(result.is_error, Some(true), "{}", describe(&result));
    assert_eq!(mock.requests().len() - before, 1);
    // A client that declared no elicitation is refused, not left waiting.
    let mut silent = Approver::new(None);
    silent.version = ProtocolVersion::V_2025_06_18;
    let client = stdio_client(&config, silent).await;
    let before = mock.requests().len();
    let result = run(&client, "run_mutation_query", DELETE).await;
    assert_eq!(error_code(&result), "policy.approval_required");
    assert_eq!(mock.requests().len(), before);
}

/// Runs `querygate query ARGS` over a config in `mode`, off the test's runtime (which serves
/// the mock).
async fn query_command(
    mock: &Mock,
    dir: &std::path::Path,
    mode: &str,
    args: &[&str],
) -> std::process::Output {
    let config = test_config(mock, dir, mode, "");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_querygate"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .arg("--config")
        .arg(&config)
        .arg("query")
        .args(args)
        .stdin(std::process::Stdio::null());
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn the_query_command_applies_the_same_gate() {
    let mock = Mock::start().await;
    route_all(&mock);
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let stderr = |out: &std::process::Output| String::from_utf8_lossy(&out.stderr).into_owned();

    let refused = query_command(&mock, dir, "read_only", &[DELETE]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("refused: server is in 'read_only' mode"),
        "{}",
        stderr(&refused)
    );
    let held = query_command(&mock, dir, "safe", &[DELETE]).await;
    assert_eq!(held.status.code(), Some(1));
    assert!(
        stderr(&held).contains("run it again with --yes"),
        "{}",
        stderr(&held)
    );
    let several = query_command(&mock, dir, "full_access", &[&format!("SELECT 1; {DELETE}")]).await;
    assert!(
        stderr(&several).contains("2 statements"),
        "{}",
        stderr(&several)
    );
    assert!(mock.requests().is_empty(), "nothing was sent");

    let approved = query_command(&mock, dir, "safe", &["--yes", DELETE]).await;
    assert!(approved.status.success(), "{}", stderr(&approved));
    let allowed = query_command(&mock, dir, "delete_safe", &[INSERT]).await;
    assert!(allowed.status.success(), "{}", stderr(&allowed));
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn a_call_without_a_principal_is_refused_before_any_layer() {
    use querygate::mcp::pipeline::CallError;

    use crate::support::pipeline::tool_call;
    let mock = Mock::start().await;
    route_all(&mock);
    let dir = tempfile::tempdir().unwrap();
    let file = test_config(&mock, dir.path(), "full_access", "");
    let config = querygate::config::Config::load(&querygate::config::Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap();
    let handler = querygate::app::App::builder(config)
        .handler(querygate::mcp::Transport::Http)
        .unwrap();
    let call = |principal| tool_call("run_select_query", json!({"sql": SELECT}), principal);
    let refused = handler.pipeline().call(call(None)).await.unwrap_err();
    assert_eq!(refused, CallError::Unauthenticated);
    assert!(mock.requests().is_empty());
    let served = handler
        .pipeline()
        .call(call(Some(querygate::tenant::Principal::anonymous())))
        .await
        .unwrap();
    assert!(served.outcome().is_some_and(|o| !o.is_error()));
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn every_mode_and_class_over_stdio_with_an_approving_person() {
    for mode in ["read_only", "safe", "delete_safe", "full_access"] {
        let mock = Mock::start().await;
        route_all(&mock);
        let dir = tempfile::tempdir().unwrap();
        let config = test_config(&mock, dir.path(), mode, "");
        let mut approver = Approver::new(Some(ElicitationAction::Accept));
        approver.version = ProtocolVersion::V_2025_11_25;
        let client = stdio_client(&config, approver.clone()).await;
        for (class, tool, sql) in CASES {
            let asked = approver.prompts().len();
            let before = mock.requests().len();
            let result = run(&client, tool, sql).await;
            let sent = mock.requests().len() - before;
            let prompted = approver.prompts().len() - asked;
            match expected(mode, class) {
                "refuse" => {
                    assert_eq!(error_code(&result), "policy.refused", "{mode} × {class}");
                    assert_eq!((sent, prompted), (0, 0), "{mode} × {class}");
                }
                verdict => {
                    assert_ne!(
                        result.is_error,
                        Some(true),
                        "{mode} × {class}: {}",
                        describe(&result)
                    );
                    let asks = usize::from(verdict == "approval");
                    assert_eq!((sent, prompted), (1, asks), "{mode} × {class}");
                }
            }
        }
    }
}

#[tokio::test]
async fn a_write_cut_by_the_call_timeout_says_its_outcome_is_unknown() {
    let server = start("full_access", "  call_timeout: 300ms\n").await;
    server.mock.route(
        "DELETE /orgs/acme/widgets/w-1",
        Reply::status(204, "").delayed(std::time::Duration::from_secs(3)),
    );
    server.mock.route(
        "/orgs/acme/items",
        Reply::json(json!([])).delayed(std::time::Duration::from_secs(3)),
    );
    let client = approver_client(&server.url, Approver::new(None)).await;
    let write = run(&client, "run_mutation_query", DELETE).await;
    assert_eq!(
        error_code(&write),
        "call.outcome_unknown",
        "{}",
        describe(&write)
    );
    assert!(error_message(&write).contains("outcome is unknown: check the provider"));
    let read = run(&client, "run_select_query", SELECT).await;
    assert_eq!(error_code(&read), "call.timeout", "{}", describe(&read));
    assert!(error_message(&read).contains("nothing more will be done"));
}
