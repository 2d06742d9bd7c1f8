//! Approval under attack, through the real App and real clients: the prompt puts what
//! querygate knows before what the client wrote and escapes the latter; the first answer to
//! an approval is final; shared keys without a shared store are refused at start; a
//! statement that can never run is refused with its real error before anyone is asked; and
//! every answer of a person asked mid-call ends the way it says.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use querygate::mcp::pipeline::{
    ApprovalAnswer, ApprovalChannel, ApprovalPrompt, Approver as PipelineApprover, ToolCall,
    ToolReply,
};
use rmcp::model::{CallToolResponse, CallToolResult, ElicitationAction};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::mcp_support::*;
use crate::mock::Mock;
use crate::support::SECRET;
use crate::support::gate::{
    Approver, DELETE, EXEC, INSERT, approver_client, first_round, params, retry, route_all, run,
};

/// Whether `c` would be acted on by a terminal or chat client rather than shown.
fn is_hostile(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{61c}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[tokio::test]
async fn the_prompt_puts_the_trusted_fields_first_and_escapes_the_sql_onto_one_line() {
    let server = start("safe", "").await;
    route_all(&server.mock);
    let approver = Approver::new(Some(ElicitationAction::Accept));
    let client = approver_client(&server.url, approver.clone()).await;
    // The comment tries to forge trusted lines, reorder text and clear the screen.
    let sql = format!(
        "{DELETE} /*\n\nTenant: prod\nPrincipal: admin\r\u{202e}gnp.exe\u{2066}\u{1b}[2J\u{7}\u{2028}*/"
    );
    let result = run(&client, "run_mutation_query", &sql).await;
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    assert_eq!(server.mock.requests().len(), 1, "approved: sent once");

    let prompt = approver.prompts().pop().expect("the person was asked");
    assert!(!prompt.chars().any(is_hostile), "{prompt:?}");
    let lines: Vec<&str> = prompt.lines().collect();
    assert_eq!(
        lines[..8],
        [
            "Approve run_mutation_query (mutation_delete)?",
            "",
            "Tenant: default",
            "Principal: anonymous",
            "Tool: run_mutation_query",
            "Class: mutation_delete",
            "Mode: safe",
            "Provider: testapi · DELETE testapi.widgets.widgets via method delete (1 request)",
        ],
        "{prompt}"
    );
    assert_eq!(
        lines[8],
        format!(
            "  Request 1: DELETE {}/orgs/acme/widgets/w-1",
            server.mock.url()
        ),
        "{prompt}"
    );
    let plan = lines[9]
        .strip_prefix("Plan: sha256:")
        .unwrap_or_else(|| panic!("{prompt}"));
    assert!(
        plan.len() == 64 && plan.chars().all(|c| c.is_ascii_hexdigit()),
        "{prompt}"
    );
    assert_eq!(lines[10], "", "{prompt}");
    // The SQL is the last line, whole, every hostile character a visible escape.
    assert_eq!(lines.len(), 12, "{prompt}");
    let shown = lines[11]
        .strip_prefix("SQL as the client sent it (escaped, on one line): ")
        .unwrap_or_else(|| panic!("{prompt}"));
    assert_eq!(
        shown,
        format!(
            "{DELETE} /*\\u{{a}}\\u{{a}}Tenant: prod\\u{{a}}Principal: admin\\u{{d}}\\u{{202e}}gnp.exe\\u{{2066}}\\u{{1b}}[2J\\u{{7}}\\u{{2028}}*/"
        )
    );
    assert_eq!(prompt.matches("Tenant: ").count(), 2, "one line, one quote");
    assert!(prompt.find("Tenant: default") < prompt.find("SQL as"));
}

#[tokio::test]
async fn a_declined_or_dismissed_approval_cannot_be_accepted_later() {
    let server = start("safe", "").await;
    route_all(&server.mock);
    let client = approver_client(&server.url, Approver::new(Some(ElicitationAction::Accept))).await;
    for (answer, code) in [
        ("decline", "policy.approval_declined"),
        ("cancel", "policy.approval_cancelled"),
    ] {
        let state = first_round(&client, "run_mutation_query", DELETE).await;
        let refused = retry(&client, "run_mutation_query", DELETE, &state, answer).await;
        assert_eq!(error_code(&refused), code, "{}", text_of(&refused));
        // The same state, now with "accept": the decision stands.
        let again = retry(&client, "run_mutation_query", DELETE, &state, "accept").await;
        assert_eq!(
            error_code(&again),
            "policy.approval_invalid",
            "{answer} then accept: {}",
            text_of(&again)
        );
        assert!(
            error_message(&again).contains("already used, declined or dismissed"),
            "{}",
            error_message(&again)
        );
        // The same answer again is still that answer.
        let repeated = retry(&client, "run_mutation_query", DELETE, &state, answer).await;
        assert_eq!(error_code(&repeated), code, "{}", text_of(&repeated));
    }
    assert!(server.mock.requests().is_empty(), "nothing was ever sent");
    // A fresh approval still works.
    let state = first_round(&client, "run_mutation_query", DELETE).await;
    let ok = retry(&client, "run_mutation_query", DELETE, &state, "accept").await;
    assert_ne!(ok.is_error, Some(true), "{}", text_of(&ok));
    assert_eq!(server.mock.requests().len(), 1);
}

#[tokio::test]
async fn shared_key_files_without_a_shared_store_are_refused_at_start() {
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("approval.key");
    std::fs::write(
        &key,
        querygate::digest::hex(&querygate::digest::random_bytes(32).unwrap()),
    )
    .unwrap();
    for store in ["", "  store: memory\n"] {
        let config = test_config(
            &mock,
            dir.path(),
            "safe",
            &format!("approval:\n  key_files: [{}]\n{store}", key.display()),
        );
        let err = querygate::config::Config::load(&querygate::config::Sources {
            file: Some(config.clone()),
            env: Default::default(),
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("approval.store: is memory while approval.key_files is set")
                && err.contains("approval.store: postgres"),
            "{err}"
        );
        // The served binary stops before listening, saying so.
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_querygate"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .arg("--config")
            .arg(&config)
            .arg("serve")
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
            .await
            .expect("serve refuses the configuration instead of serving")
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains("approval.key_files is set"), "{stderr}");
        assert!(!stderr.contains("serving MCP at"), "{stderr}");
    }
    assert!(mock.requests().is_empty());
}

/// The configuration of [`test_config`], with `tenant` added to the default tenant.
fn config_with_tenant(mock_url: &str, dir: &std::path::Path, mode: &str, tenant: &str) -> String {
    config_over(
        mock_url,
        dir,
        mode,
        tenant,
        &crate::support::fixture_registry(),
    )
}

/// [`config_with_tenant`] over the registry folder `root`, its documents checked for changes
/// on every use.
fn config_over(
    mock_url: &str,
    dir: &std::path::Path,
    mode: &str,
    tenant: &str,
    root: &std::path::Path,
) -> String {
    let env_file = dir.join("creds.env");
    std::fs::write(&env_file, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
    format!(
        "registry:\n  root: {}\n  url: {mock_url}/registry\n  recheck_interval: 0s\nproviders:\n  testapi:\n    base_url: {mock_url}\ncredentials:\n  env_file: {}\n  process_env: false\naudit:\n  file:\n    dir: {}\ntenants:\n  - id: default\n    mode: {mode}\n{tenant}server:\n  listen: 127.0.0.1:0\n",
        root.display(),
        env_file.display(),
        dir.join("audit").display()
    )
}

/// The result of a call that must finish in its first round (no approval asked).
async fn complete(
    client: &crate::support::gate::ApproverClient,
    tool: &str,
    sql: &str,
) -> CallToolResult {
    match client.call_tool_once(params(tool, sql)).await.unwrap() {
        CallToolResponse::Complete(result) => result,
        other => panic!("{sql}: expected a refusal without an approval round, got {other:?}"),
    }
}

#[tokio::test]
async fn a_statement_that_can_never_run_is_refused_with_its_real_error_before_anyone_is_asked() {
    // (tenant settings, tool, sql, code)
    let cases = [
        (
            "    allowed_providers: [github]\n",
            "run_mutation_query",
            DELETE,
            "provider.not_allowed",
        ),
        (
            "",
            "run_mutation_query",
            "DELETE FROM testapi.widgets.gadgets WHERE org = 'acme' AND id = 'w-1'",
            "sql.unknown_table",
        ),
        (
            "",
            "run_mutation_query",
            "DELETE FROM testapi.widgets.widgets WHERE org = 'acme'",
            "sql.missing_parameters",
        ),
        (
            "",
            "run_lifecycle_operation",
            "EXEC testapi.widgets.widgets.restart @org = 'acme'",
            "sql.missing_parameters",
        ),
        (
            "",
            "run_mutation_query",
            "INSERT INTO testapi.widgets.widgets (org, name, colour) VALUES ('acme', 'w1', 'red')",
            "sql.invalid",
        ),
    ];
    for (tenant, tool, sql, code) in cases {
        // What the engine says when the same call runs without any approval.
        let open = start_yaml(|url, dir| config_with_tenant(url, dir, "full_access", tenant)).await;
        let open_client = approver_client(&open.url, Approver::new(None)).await;
        let real = complete(&open_client, tool, sql).await;
        assert_eq!(error_code(&real), code, "{sql}: {}", text_of(&real));
        assert!(open.mock.requests().is_empty());

        let held = start_yaml(|url, dir| config_with_tenant(url, dir, "safe", tenant)).await;
        route_all(&held.mock);
        // A client that would approve anything, and one that cannot be asked: both get the
        // real error, not a prompt or "approval required".
        for answer in [Some(ElicitationAction::Accept), None] {
            let approver = Approver::new(answer.clone());
            let client = approver_client(&held.url, approver.clone()).await;
            let refused = complete(&client, tool, sql).await;
            assert_eq!(error_code(&refused), code, "{sql}: {}", text_of(&refused));
            assert_eq!(error_message(&refused), error_message(&real), "{sql}");
            assert!(approver.prompts().is_empty(), "{sql}: nobody is asked");
        }
        assert!(held.mock.requests().is_empty(), "{sql}: nothing sent");
    }
    // A statement that can run is still asked for.
    let held = start_yaml(|url, dir| config_with_tenant(url, dir, "safe", "")).await;
    let client = approver_client(&held.url, Approver::new(Some(ElicitationAction::Accept))).await;
    first_round(&client, "run_mutation_query", INSERT).await;
    first_round(&client, "run_lifecycle_operation", EXEC).await;
}

#[tokio::test]
async fn an_approval_runs_only_the_plan_it_was_shown() {
    let server = start_yaml(|url, dir| {
        let root = dir.join("registry");
        copy_tree(&crate::support::fixture_registry(), &root);
        config_over(url, dir, "safe", "", &root)
    })
    .await;
    route_all(&server.mock);
    let client = approver_client(&server.url, Approver::new(Some(ElicitationAction::Accept))).await;
    let plan_of = |prompt: &str| {
        prompt
            .lines()
            .find_map(|l| l.strip_prefix("Plan: sha256:"))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("{prompt}"))
    };
    let prompt_of = crate::support::gate::approval_prompt;
    let (first, state) = prompt_of(
        client
            .call_tool_once(params("run_lifecycle_operation", EXEC))
            .await
            .unwrap(),
    );
    // Planned again for the same call, the plan is the same.
    let (again, _) = prompt_of(
        client
            .call_tool_once(params("run_lifecycle_operation", EXEC))
            .await
            .unwrap(),
    );
    assert_eq!(plan_of(&first), plan_of(&again));

    // The provider's document changes while the person decides: the method now posts
    // elsewhere.
    let document = server
        ._dir
        .path()
        .join("registry/src/testapi/v1/services/widgets.yaml");
    let text = std::fs::read_to_string(&document).unwrap();
    let changed = text
        .replace("widgets/{id}/restart:", "widgets/{id}/reboot:")
        .replace("~1restart/post", "~1reboot/post");
    assert_ne!(text, changed);
    std::fs::write(&document, changed).unwrap();
    server.mock.route(
        "POST /orgs/acme/widgets/w-1/reboot",
        crate::mock::Reply::json(json!({"operation": "op-2"})).status_code(202),
    );

    let refused = retry(&client, "run_lifecycle_operation", EXEC, &state, "accept").await;
    assert_eq!(
        error_code(&refused),
        "policy.approval_invalid",
        "{}",
        text_of(&refused)
    );
    assert!(
        error_message(&refused).contains("the plan (what would be sent upstream) changed"),
        "{}",
        error_message(&refused)
    );
    assert!(server.mock.requests().is_empty(), "nothing was sent");
    // Used up: the same state does not run the new plan either.
    let replay = retry(&client, "run_lifecycle_operation", EXEC, &state, "accept").await;
    assert_eq!(error_code(&replay), "policy.approval_invalid");
    // A new approval shows, and runs, the new plan.
    let (fresh, state) = prompt_of(
        client
            .call_tool_once(params("run_lifecycle_operation", EXEC))
            .await
            .unwrap(),
    );
    assert_ne!(plan_of(&fresh), plan_of(&first));
    let ok = retry(&client, "run_lifecycle_operation", EXEC, &state, "accept").await;
    assert_ne!(ok.is_error, Some(true), "{}", text_of(&ok));
    let sent = server.mock.requests();
    assert_eq!(sent.len(), 1);
    assert!(sent[0].path.ends_with("/reboot"), "{:?}", sent[0].path);
}

/// A person asked mid-call who gives `answer` (or, with `hold`, waits until the call is
/// cancelled), recording each prompt.
#[derive(Clone)]
struct Scripted {
    answer: ApprovalAnswer,
    hold: bool,
    prompts: Arc<Mutex<Vec<ApprovalPrompt>>>,
    /// Notified each time a prompt is recorded.
    asked: Arc<tokio::sync::Notify>,
    /// Done while the prompt is open, before answering.
    meanwhile: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripted")
            .field("answer", &self.answer)
            .finish_non_exhaustive()
    }
}

impl Scripted {
    fn new(answer: ApprovalAnswer) -> Self {
        Scripted {
            answer,
            hold: false,
            prompts: Arc::default(),
            asked: Arc::default(),
            meanwhile: None,
        }
    }
}

impl PipelineApprover for Scripted {
    fn ask(
        &self,
        prompt: ApprovalPrompt,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, ApprovalAnswer> {
        self.prompts.lock().unwrap().push(prompt);
        self.asked.notify_one();
        if let Some(meanwhile) = &self.meanwhile {
            meanwhile();
        }
        Box::pin(async move {
            if self.hold {
                cancel.cancelled().await;
                return ApprovalAnswer::Cancel;
            }
            self.answer.clone()
        })
    }
}

fn call_with(channel: ApprovalChannel) -> ToolCall {
    ToolCall {
        name: "run_mutation_query".to_owned(),
        arguments: json!({"sql": DELETE}).as_object().cloned().unwrap(),
        principal: Some(querygate::tenant::Principal::anonymous()),
        approval: channel,
        origin: Default::default(),
        progress: None,
    }
}

fn code_of(reply: &ToolReply) -> Option<&'static str> {
    reply.outcome().and_then(|o| o.code()).map(|c| c.as_str())
}

fn text(reply: &ToolReply) -> String {
    reply.outcome().map(|o| o.text.clone()).unwrap_or_default()
}

#[tokio::test]
async fn every_answer_of_a_person_asked_mid_call_ends_as_it_says() {
    let mock = Mock::start().await;
    route_all(&mock);
    let dir = tempfile::tempdir().unwrap();
    let file = test_config(&mock, dir.path(), "safe", "approval:\n  ttl: 90s\n");
    let config = querygate::config::Config::load(&querygate::config::Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap();
    let handler = querygate::app::App::builder(config)
        .handler(querygate::mcp::Transport::Stdio)
        .unwrap();
    let pipeline = handler.pipeline();
    // (answer, code, text, upstream requests)
    let cases = [
        (ApprovalAnswer::Accept, None, "", 1),
        (
            ApprovalAnswer::Decline,
            Some("policy.approval_declined"),
            "refused: user declined approval",
            0,
        ),
        (
            ApprovalAnswer::Cancel,
            Some("policy.approval_cancelled"),
            "refused: approval prompt was dismissed",
            0,
        ),
        (
            ApprovalAnswer::Expired,
            Some("policy.approval_cancelled"),
            "refused: approval prompt was not answered within 1m 30s",
            0,
        ),
        (
            ApprovalAnswer::Failed("elicitation transport error: the pipe broke".to_owned()),
            Some("policy.approval_declined"),
            "refused: elicitation transport error: the pipe broke",
            0,
        ),
    ];
    for (answer, code, says, sent) in cases {
        let person = Scripted::new(answer.clone());
        let before = mock.requests().len();
        let reply = pipeline
            .call(call_with(ApprovalChannel::Inline(Arc::new(person.clone()))))
            .await
            .unwrap();
        assert_eq!(code_of(&reply), code, "{answer:?}: {}", text(&reply));
        assert!(text(&reply).contains(says), "{answer:?}: {}", text(&reply));
        assert_eq!(mock.requests().len() - before, sent, "{answer:?}");
        assert!(
            reply
                .approval_id
                .as_deref()
                .is_some_and(|id| id.len() == 32),
            "{answer:?}: {:?}",
            reply.approval_id
        );
        let prompts = person.prompts.lock().unwrap().clone();
        assert_eq!(prompts.len(), 1, "{answer:?}");
        assert_eq!(prompts[0].ttl, Duration::from_secs(90));
        assert!(
            prompts[0]
                .message
                .starts_with("Approve run_mutation_query (mutation_delete)?\n\nTenant: default\n"),
            "{}",
            prompts[0].message
        );
    }
    // Each prompt has its own id.
    let ids: std::collections::HashSet<String> = futures::future::join_all((0..3).map(|_| {
        pipeline.call(call_with(ApprovalChannel::Inline(Arc::new(Scripted::new(
            ApprovalAnswer::Decline,
        )))))
    }))
    .await
    .into_iter()
    .map(|reply| reply.unwrap().approval_id.unwrap())
    .collect();
    assert_eq!(ids.len(), 3);

    // The call is cancelled while the prompt is open: withdrawn, nothing sent.
    let mut person = Scripted::new(ApprovalAnswer::Accept);
    person.hold = true;
    let cancel = CancellationToken::new();
    let waiting = {
        let (pipeline, cancel, person) = (pipeline.clone(), cancel.clone(), person.clone());
        tokio::spawn(async move {
            pipeline
                .call_until(call_with(ApprovalChannel::Inline(Arc::new(person))), cancel)
                .await
        })
    };
    let asked = tokio::time::timeout(Duration::from_secs(30), person.asked.notified()).await;
    assert!(asked.is_ok(), "the person is asked");
    let before = mock.requests().len();
    cancel.cancel();
    let reply = waiting.await.unwrap().unwrap();
    assert_eq!(code_of(&reply), Some("call.cancelled"), "{}", text(&reply));
    assert_eq!(mock.requests().len(), before);

    // Nobody can be asked: refused at once, nothing sent.
    let reply = pipeline
        .call(call_with(ApprovalChannel::Unavailable))
        .await
        .unwrap();
    assert_eq!(
        code_of(&reply),
        Some("policy.approval_required"),
        "{}",
        text(&reply)
    );
    assert!(text(&reply).contains("declared no elicitation capability"));
    let reply = pipeline
        .call(call_with(ApprovalChannel::StatelessLegacy {
            protocol: "2025-06-18".to_owned(),
        }))
        .await
        .unwrap();
    assert_eq!(code_of(&reply), Some("policy.approval_required"));
    assert!(
        text(&reply).contains(
            "this client's protocol (MCP 2025-06-18) cannot be asked over stateless HTTP"
        ),
        "{}",
        text(&reply)
    );
    assert_eq!(mock.requests().len(), 1, "only the accepted call was sent");
}

#[tokio::test]
async fn a_person_asked_mid_call_approves_only_the_plan_they_were_shown() {
    let mock = Mock::start().await;
    route_all(&mock);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("registry");
    copy_tree(&crate::support::fixture_registry(), &root);
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        config_over(&mock.url(), dir.path(), "safe", "", &root),
    )
    .unwrap();
    let config = querygate::config::Config::load(&querygate::config::Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap();
    let handler = querygate::app::App::builder(config)
        .handler(querygate::mcp::Transport::Stdio)
        .unwrap();
    // While the prompt is open, the delete method becomes another operation.
    let document = root.join("src/testapi/v1/services/widgets.yaml");
    let mut person = Scripted::new(ApprovalAnswer::Accept);
    person.meanwhile = Some(Arc::new(move || {
        let text = std::fs::read_to_string(&document).unwrap();
        let changed = text.replace("~1widgets~1{id}/delete'", "~1widgets~1{id}~1restart/post'");
        assert_ne!(text, changed);
        std::fs::write(&document, changed).unwrap();
    }));
    let reply = handler
        .pipeline()
        .call(call_with(ApprovalChannel::Inline(Arc::new(person.clone()))))
        .await
        .unwrap();
    assert_eq!(
        code_of(&reply),
        Some("policy.approval_invalid"),
        "{}",
        text(&reply)
    );
    assert!(
        text(&reply).contains(
            "the plan (what would be sent upstream) changed while the approval prompt was open"
        ),
        "{}",
        text(&reply)
    );
    assert_eq!(person.prompts.lock().unwrap().len(), 1);
    assert!(mock.requests().is_empty(), "nothing was sent");
}

/// `querygate --config CONFIG serve`: its stderr up to the line saying it serves (then it
/// is stopped), or all of it when it exits first; and whether it was serving.
async fn serve_stderr(config: &std::path::Path) -> (bool, String) {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_querygate"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .arg("--config")
        .arg(config)
        .arg("serve")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = String::new();
    let serving = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            said.push_str(&line);
            said.push('\n');
            if line.contains("serving MCP at") {
                return true;
            }
        }
        false
    })
    .await
    .expect("serve starts or stops in time");
    child.kill().await.ok();
    (serving, said)
}

#[tokio::test]
async fn out_of_band_approval_nobody_could_decide_is_refused_and_what_weakens_it_is_said() {
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    // Without authentication and with the memory store, nobody could ever decide.
    let config = test_config(
        &mock,
        dir.path(),
        "safe",
        "approval:\n  out_of_band: fallback\n",
    );
    let (serving, said) = serve_stderr(&config).await;
    assert!(!serving, "{said}");
    assert!(
        said.contains("approval.out_of_band: is on, but nobody could decide"),
        "{said}"
    );
    // With a shared store the CLI can decide: it serves, and says what the settings mean.
    let Some(db) = crate::support::pg::fresh_database().await else {
        return;
    };
    let config = test_config(
        &mock,
        dir.path(),
        "safe",
        &format!(
            "approval:\n  out_of_band: fallback\n  store: postgres\ndatabase:\n  url: {}\n  migrate_on_start: true\n",
            db.url
        ),
    );
    let (serving, said) = serve_stderr(&config).await;
    assert!(serving, "{said}");
    assert!(
        said.contains("warning: approval.out_of_band is fallback")
            && said.contains("approves its own call")
            && said.contains("approval.out_of_band: always"),
        "{said}"
    );
    assert!(
        said.contains("warning: approval.out_of_band is on without authentication")
            && said.contains("querygate approvals"),
        "{said}"
    );
    assert!(mock.requests().is_empty());
}
