//! Cedar policies (`tenants[].policy_files`) over the real provider documents, through real
//! MCP clients over HTTP against a mock upstream that counts every request: an allow list,
//! DELETE only in project `sandbox`, rules on the JWT's groups, a reload that picks up a
//! changed policy (that a broken one keeps the policies in force is a unit test of
//! `querygate::cedar`), and `querygate policy check` and `querygate policy explain` as
//! users run them.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::Reply;
use crate::support::identity::{JwksServer, SigningKey, claims, jwt_server, rmcp_client};
use crate::support::querygate_command;
use crate::support::wait::eventually;

/// Reads of google compute, and DELETE of instances only in project `sandbox`.
const POLICIES: &str = r#"
@id("compute-reads")
permit(principal, action == Querygate::Action::"select", resource)
when { resource.provider == "google" && resource.service == "compute" };

@id("delete-in-sandbox")
permit(
  principal,
  action == Querygate::Action::"mutation_delete",
  resource == Querygate::Method::"google.compute.instances.delete"
);

@id("no-delete-outside-sandbox")
forbid(principal, action == Querygate::Action::"mutation_delete", resource)
unless { resource.hasTag("project") && ["sandbox"].containsAll(resource.getTag("project")) };
"#;

const READ_SANDBOX: &str =
    "SELECT name FROM google.compute.instances WHERE project = 'sandbox' AND zone = 'z1'";
const DELETE_PROD: &str = "DELETE FROM google.compute.instances WHERE project = 'prod' AND zone = 'z1' AND instance = 'vm1'";
const DELETE_SANDBOX: &str = "DELETE FROM google.compute.instances WHERE project = 'sandbox' AND zone = 'z1' AND instance = 'vm1'";
const BUCKETS: &str = "SELECT name FROM google.storage.buckets WHERE project = 'sandbox'";

/// The configuration of a server over the real documents whose google calls go to `mock`,
/// tenant `default` in `full_access` (the mode runs everything: the policies decide) with
/// the policies of `policies` (a file or folder).
fn config_yaml(mock: &str, dir: &Path, policies: &Path) -> String {
    let env_file = dir.join("creds.env");
    std::fs::write(&env_file, "GOOGLE_TOKEN=google-token\n").unwrap();
    format!(
        "registry:\n  root: {root}\n  url: {mock}/registry\nproviders:\n  google:\n    base_url: {mock}\n    auth: {{type: bearer, credentialsenvvar: GOOGLE_TOKEN}}\ncredentials:\n  env_file: {env}\n  process_env: false\naudit:\n  file:\n    dir: {audit}\ntenants:\n  - id: default\n    mode: full_access\n    policy_files: [{policies}]\n    policy_reload_interval: 50ms\nserver:\n  listen: 127.0.0.1:0\n",
        root = crate::support::corpus::providers_root().display(),
        env = env_file.display(),
        audit = dir.join("audit").display(),
        policies = policies.display(),
    )
}

/// A folder holding `policies.cedar` with `text`.
fn policy_dir(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policies.cedar");
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

fn outcome_of(dir: &Path, sql: &str) -> Value {
    let location = querygate::audit::FileLocation::Dir(dir.join("audit"));
    let mut records = Vec::new();
    for file in querygate::audit::location::files_of(&location).unwrap() {
        let text = std::fs::read_to_string(file).unwrap();
        records.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    records
        .into_iter()
        .rev()
        .find(|r| r["phase"] == "outcome" && r["sql"] == sql)
        .unwrap_or_else(|| panic!("no outcome record for {sql}"))
}

fn structured_policies(result: &rmcp::model::CallToolResult) -> Value {
    result.structured_content.as_ref().unwrap()["error"]["policies"].clone()
}

#[tokio::test]
async fn cedar_allows_listed_reads_and_deletes_only_in_sandbox_with_nothing_sent_on_deny() {
    let (policies, _) = policy_dir(POLICIES);
    let root = policies.path().to_owned();
    let server = start_yaml(|mock, dir| config_yaml(mock, dir, &root)).await;
    server.mock.route(
        "/projects/sandbox/zones/z1/instances",
        Reply::json(json!({"items": [{"name": "vm1"}]})),
    );
    server.mock.route(
        "DELETE /projects/sandbox/zones/z1/instances/vm1",
        Reply::json(json!({"name": "op-1", "status": "DONE"})),
    );
    let client = modern_client(&server.url).await;

    // A read the allow list permits runs.
    let read = call(&client, "run_select_query", json!({ "sql": READ_SANDBOX })).await;
    assert_ne!(read.is_error, Some(true), "{}", text_of(&read));
    assert_eq!(server.mock.requests().len(), 1);

    // DELETE outside sandbox: forbidden, refused before any request, the policy named in
    // the error, its structured content and the audit record.
    let denied = call(&client, "run_mutation_query", json!({ "sql": DELETE_PROD })).await;
    assert_eq!(error_code(&denied), "policy.denied", "{}", text_of(&denied));
    let message = error_message(&denied);
    assert!(
        message.starts_with("tool \"run_mutation_query\" refused: denied by Cedar policy 'no-delete-outside-sandbox' for google.compute.instances.delete"),
        "{message}"
    );
    assert!(message.ends_with("nothing was sent"), "{message}");
    assert_eq!(
        structured_policies(&denied),
        json!(["no-delete-outside-sandbox"])
    );
    assert_eq!(server.mock.requests().len(), 1, "a denied DELETE was sent");
    let record = outcome_of(server._dir.path(), DELETE_PROD);
    assert_eq!(record["error_code"], "policy.denied");
    assert_eq!(record["decision"], "refuse_immediate");
    assert_eq!(record["policies"], json!(["no-delete-outside-sandbox"]));
    assert_eq!(record["query_class"], "mutation_delete");

    // DELETE in sandbox is permitted, and sent.
    let deleted = call(
        &client,
        "run_mutation_query",
        json!({ "sql": DELETE_SANDBOX }),
    )
    .await;
    assert_ne!(deleted.is_error, Some(true), "{}", text_of(&deleted));
    let sent = server.mock.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(
        (sent[1].method.as_str(), sent[1].path.as_str()),
        ("DELETE", "/projects/sandbox/zones/z1/instances/vm1")
    );

    // What no policy permits (storage is not on the allow list) is denied by default.
    let bucket = call(&client, "run_select_query", json!({ "sql": BUCKETS })).await;
    assert_eq!(error_code(&bucket), "policy.denied", "{}", text_of(&bucket));
    assert!(
        error_message(&bucket)
            .contains("no Cedar policy of this tenant permits google.storage.buckets.list"),
        "{}",
        error_message(&bucket)
    );
    assert_eq!(structured_policies(&bucket), json!([]));
    assert_eq!(
        outcome_of(server._dir.path(), BUCKETS)["policies"],
        json!([])
    );
    assert_eq!(server.mock.requests().len(), 2);
}

#[tokio::test]
async fn a_changed_policy_is_picked_up_without_restart() {
    let (policies, file) = policy_dir(POLICIES);
    let root = policies.path().to_owned();
    let server = start_yaml(|mock, dir| config_yaml(mock, dir, &root)).await;
    server.mock.route(
        "/projects/sandbox/zones/z1/instances",
        Reply::json(json!({"items": [{"name": "vm1"}]})),
    );
    let client = modern_client(&server.url).await;
    let read = call(&client, "run_select_query", json!({ "sql": READ_SANDBOX })).await;
    assert_ne!(read.is_error, Some(true), "{}", text_of(&read));

    // A valid change that forbids reads in sandbox is in force without a restart.
    std::fs::write(
        &file,
        format!(
            "{POLICIES}\n@id(\"no-sandbox-reads\")\nforbid(principal, action in Querygate::Action::\"read\", resource)\nwhen {{ resource.hasTag(\"project\") && resource.getTag(\"project\").contains(\"sandbox\") }};\n"
        ),
    )
    .unwrap();
    let denied = eventually(
        "the changed policy in force",
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(50),
        || {
            let client = &client;
            async move {
                let result = call(client, "run_select_query", json!({ "sql": READ_SANDBOX })).await;
                (error_code(&result) == "policy.denied").then_some(result)
            }
        },
    )
    .await;
    assert!(
        error_message(&denied).contains("'no-sandbox-reads'"),
        "{}",
        error_message(&denied)
    );
    let sent = server.mock.requests().len();
    let once_more = call(&client, "run_select_query", json!({ "sql": READ_SANDBOX })).await;
    assert_eq!(error_code(&once_more), "policy.denied");
    assert_eq!(server.mock.requests().len(), sent, "a denied read was sent");
}

#[tokio::test]
async fn group_rules_follow_the_jwt_groups_claim() {
    let policies = tempfile::tempdir().unwrap();
    let file = policies.path().join("groups.cedar");
    std::fs::write(
        &file,
        r#"
@id("readers")
permit(principal in Querygate::Group::"jwt:https://idp.test#readers", action == Querygate::Action::"select", resource);

@id("no-contractors")
forbid(principal in Querygate::Group::"jwt:https://idp.test#contractors", action, resource);
"#,
    )
    .unwrap();
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = jwt_server(
        &jwks,
        "30s",
        &format!("    policy_files: [{}]\n", file.display()),
        "",
    )
    .await;
    server.mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "one"}])),
    );
    let http = reqwest::Client::new();
    let token = |groups: Value| {
        let mut c = claims("acme");
        c["groups"] = groups;
        key.sign(&c)
    };
    let select = json!({"sql": "SELECT id FROM testapi.items.items WHERE org = 'acme'"});

    let reader = rmcp_client(http.clone(), &server.url, Some(&token(json!(["readers"])))).await;
    let ran = call(&reader, "run_select_query", select.clone()).await;
    assert_ne!(ran.is_error, Some(true), "{}", text_of(&ran));
    assert_eq!(server.mock.requests().len(), 1);

    let nobody = rmcp_client(http.clone(), &server.url, Some(&token(json!([])))).await;
    let refused = call(&nobody, "run_select_query", select.clone()).await;
    assert_eq!(
        error_code(&refused),
        "policy.denied",
        "{}",
        text_of(&refused)
    );
    assert!(
        error_message(&refused)
            .contains("no Cedar policy of this tenant permits testapi.items.items.list"),
        "{}",
        error_message(&refused)
    );

    let contractor = rmcp_client(
        http.clone(),
        &server.url,
        Some(&token(json!(["readers", "contractors"]))),
    )
    .await;
    let refused = call(&contractor, "run_select_query", select.clone()).await;
    assert_eq!(error_code(&refused), "policy.denied");
    assert_eq!(structured_policies(&refused), json!(["no-contractors"]));
    assert_eq!(server.mock.requests().len(), 1, "a denied call was sent");
}

#[tokio::test]
async fn bad_policies_stop_the_start_naming_the_file_and_position() {
    let (policies, file) = policy_dir(
        "@id(\"ok\")\npermit(principal, action, resource);\n\npermit(principal, action, resource)\nwhen { resource.colour == \"red\" };\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        config_yaml("http://127.0.0.1:9", dir.path(), policies.path()),
    )
    .unwrap();
    // The server does not start: exit code 2, every problem with its file and position.
    let out = crate::support::querygate_command()
        .args(["--config", config.to_str().unwrap(), "serve"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let at = format!("{}:5:", file.display());
    assert!(err.contains("tenants[0].policy_files"), "{err}");
    assert!(err.contains(&at), "{err}");
    assert!(err.contains("colour"), "{err}");
    assert!(!err.contains("serving MCP"), "{err}");
    // Nor does a command that runs a statement.
    let out = crate::support::querygate_command()
        .args(["--config", config.to_str().unwrap(), "query", "SELECT 1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&at));
}

#[tokio::test]
async fn policy_check_and_explain_from_the_command_line() {
    let (policies, file) = policy_dir(POLICIES);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        config_yaml("http://127.0.0.1:9", dir.path(), policies.path()),
    )
    .unwrap();

    // check: good files.
    let out = querygate_command()
        .args(["policy", "check"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "3 Cedar policies are valid against querygate's schema: compute-reads, delete-in-sandbox, no-delete-outside-sandbox\n"
    );
    // check: a bad file, with its position.
    let bad = policies.path().join("bad.cedar");
    std::fs::write(
        &bad,
        "permit(principal, action, resource)\nwhen { resource.http_method == 1 };\n",
    )
    .unwrap();
    let out = querygate_command()
        .args(["policy", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!("error: {}:2:", bad.display())),
        "{stderr}"
    );
    std::fs::remove_file(&bad).unwrap();

    // explain: a DELETE outside sandbox, planned and nothing sent.
    let explain = |sql: &str| {
        querygate_command()
            .arg("--config")
            .arg(&config)
            .args(["policy", "explain", "--tenant", "default", sql])
            .output()
            .unwrap()
    };
    let out = explain(DELETE_PROD);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "tenant:    default (mode full_access)");
    assert_eq!(lines[1], "principal: local");
    assert_eq!(
        lines[2],
        "statement: mutation_delete, tool run_mutation_query"
    );
    assert_eq!(
        lines[3],
        "policies:  3 in force; only what they permit runs"
    );
    assert_eq!(
        lines[4],
        "request 1: DELETE google.compute.instances.delete"
    );
    assert!(
        lines[5].starts_with("  parameters: ") && lines[5].contains("project = 'prod'"),
        "{stdout}"
    );
    assert_eq!(
        lines[6],
        "  effect: delete (HTTP DELETE deletes; source http_method)"
    );
    assert_eq!(
        lines[7],
        "  cedar: deny, denied by Cedar policy 'no-delete-outside-sandbox' for google.compute.instances.delete"
    );
    assert!(
        lines[8].starts_with("decision:  refuse [policy.denied]: tool \"run_mutation_query\" refused: denied by Cedar policy 'no-delete-outside-sandbox'"),
        "{stdout}"
    );

    let out = explain(DELETE_SANDBOX);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("  cedar: allow, permitted by 'delete-in-sandbox'\n"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("decision:  allow: the statement would run\n"),
        "{stdout}"
    );

    let out = explain(BUCKETS);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "  cedar: deny, no Cedar policy of this tenant permits google.storage.buckets.list"
        ),
        "{stdout}"
    );
}
