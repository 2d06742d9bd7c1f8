//! What an auditor sees, as a member of `querygate_auditor` over PostgreSQL: a DELETE approved
//! out of band with the CLI and one approved in the call (MRTR) show their approver, its typed
//! identity, the method and the reason in the call views; the decision is in
//! `audit_approval_decisions`; every query of docs/audit.md's "Example auditor queries" runs;
//! and `querygate audit query --database` works for the auditor and prints the decision as a
//! decision, with the approver beside the approved call.

use rmcp::model::{ElicitationAction, ProtocolVersion};
use serde_json::json;
use sqlx_core::query::query;
use sqlx_core::query_as::query_as;
use sqlx_postgres::Postgres;

use crate::mcp_support::*;
use crate::support::gate::{Approver, DELETE, approver_client, first_round, retry, route_all};
use crate::support::oob::{LINK_BASE, pending_id};
use crate::support::{SECRET, fixture_registry, querygate_command, uid_user};

/// An approved call's approver, typed identity, method and reason, as the views show them.
type Approval = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// The `sql` blocks of docs/audit.md's "Example auditor queries", one statement each.
fn documented_queries() -> Vec<String> {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/audit.md")).unwrap();
    let section = doc
        .split("### Example auditor queries")
        .nth(1)
        .expect("docs/audit.md has its auditor queries");
    let block = section
        .split("```sql")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("an sql block");
    let text: String = block
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    text.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn an_auditor_sees_who_approved_each_call_and_runs_every_documented_query() {
    let Some(db) = crate::support::pg::fresh_database().await else {
        return;
    };
    let pool = db.pool(2).await;
    querygate::db::migrate(&pool).await.unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("k1");
    std::fs::write(&key, "k".repeat(48)).unwrap();
    let (key_file, url) = (key.clone(), db.url.clone());
    let server = start_yaml(move |mock, dir| {
        let env_file = dir.join("creds.env");
        std::fs::write(&env_file, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
        format!(
            "registry:\n  root: {}\nproviders:\n  testapi:\n    base_url: {mock}\ncredentials:\n  env_file: {}\n  process_env: false\ntenants:\n  - id: default\n    mode: safe\nserver:\n  listen: 127.0.0.1:0\naudit:\n  sink: postgres\n  replica: pod-1\napproval:\n  out_of_band: fallback\n  wait: 0s\n  link_base: {LINK_BASE}\n  store: postgres\n  key_files: [{}]\ndatabase:\n  url: {url}\n",
            fixture_registry().display(),
            env_file.display(),
            key_file.display()
        )
    })
    .await;
    route_all(&server.mock);
    let config = server._dir.path().join("config.yaml");

    // Out of band: a 2025-11-25 client's DELETE waits; the operator approves it with the CLI.
    let legacy = legacy_client(&server.url, ProtocolVersion::V_2025_11_25).await;
    let delete = json!({"sql": DELETE});
    let id = pending_id(&call(&legacy, "run_mutation_query", delete.clone()).await);
    let out = querygate_command()
        .arg("--config")
        .arg(&config)
        .args([
            "approvals",
            "approve",
            &id,
            "--tenant",
            "default",
            "--reason",
            "CHG-7",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ran = call(&legacy, "run_mutation_query", delete).await;
    assert_ne!(ran.is_error, Some(true), "{}", text_of(&ran));
    // In the call: a 2026-07-28 client's person accepts.
    let modern = approver_client(&server.url, Approver::new(Some(ElicitationAction::Accept))).await;
    let state = first_round(&modern, "run_mutation_query", DELETE).await;
    let ran = retry(&modern, "run_mutation_query", DELETE, &state, "accept").await;
    assert_ne!(ran.is_error, Some(true), "{}", text_of(&ran));
    assert_eq!(server.mock.requests().len(), 2);

    // An auditor: a login role in querygate_auditor, nothing more.
    // Roles belong to the cluster: one of this test's own.
    let (base, name) = db.url.rsplit_once('/').unwrap();
    let role = format!("auditor_{name}");
    query::<Postgres>(&format!(
        "CREATE ROLE {role} LOGIN IN ROLE querygate_auditor"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let auditor_url = format!(
        "{}/{name}",
        base.replacen("postgres@", &format!("{role}@"), 1)
    );
    let auditor = querygate::db::connect_url(
        &querygate::config::SecretUrl::new(&auditor_url),
        2,
        std::time::Duration::from_secs(10),
    )
    .await
    .unwrap();
    let approved: Vec<Approval> = query_as(
        "SELECT approver, approver_id, approval_method, approval_reason FROM audit_mutations \
         WHERE query_class = 'mutation_delete' AND outcome = 'ok' ORDER BY at",
    )
    .fetch_all(&auditor)
    .await
    .unwrap();
    let cli = format!("cli:{}", uid_user());
    assert_eq!(
        approved,
        [
            (
                Some(cli.clone()),
                Some(cli.clone()),
                Some("cli".into()),
                Some("CHG-7".into())
            ),
            (
                Some("anonymous".into()),
                Some("anonymous".into()),
                Some("mrtr".into()),
                Some(String::new())
            ),
        ]
    );
    let decisions: Vec<(String, String, Option<String>, Option<String>)> = query_as(
        "SELECT approval_id, decided, approver_id, approval_method FROM audit_approval_decisions",
    )
    .fetch_all(&auditor)
    .await
    .unwrap();
    assert_eq!(
        decisions,
        [(
            id.clone(),
            "approved".into(),
            Some(cli.clone()),
            Some("cli".into())
        )]
    );
    for statement in documented_queries() {
        if let Err(err) = query::<Postgres>(&statement).execute(&auditor).await {
            panic!("the auditor cannot run a documented query: {err}\n{statement}");
        }
    }
    // The table itself stays closed to the auditor.
    let err = query::<Postgres>("SELECT count(*) FROM audit_events")
        .execute(&auditor)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("permission denied"), "{err}");

    // `audit query --database` as the auditor: the decision as a decision, the approver beside
    // the approved call.
    let auditor_config = server._dir.path().join("auditor.yaml");
    std::fs::write(
        &auditor_config,
        format!("database:\n  url: {auditor_url}\naudit:\n  sink: postgres\n"),
    )
    .unwrap();
    let out = querygate_command()
        .arg("--config")
        .arg(&auditor_config)
        .args(["audit", "query", "--database", "--class", "mutation_delete"])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decision = printed
        .lines()
        .find(|l| l.contains("APPROVAL_DECISION run_mutation_query"))
        .unwrap_or_else(|| panic!("{printed}"));
    assert!(
        decision.contains("approved") && decision.contains(&cli),
        "{decision}"
    );
    let approved_call = printed
        .lines()
        .find(|l| {
            l.contains("needs_approval_accepted")
                && l.contains(" ok ")
                && l.contains(&cli)
                && !l.contains("APPROVAL_DECISION")
        })
        .unwrap_or_else(|| panic!("{printed}"));
    assert!(
        approved_call.contains("run_mutation_query"),
        "{approved_call}"
    );
    auditor.close().await;
    for statement in [format!("DROP OWNED BY {role}"), format!("DROP ROLE {role}")] {
        query::<Postgres>(&statement).execute(&pool).await.unwrap();
    }
    pool.close().await;
}
