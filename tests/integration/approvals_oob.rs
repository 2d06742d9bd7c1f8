//! Out-of-band approval through the real App, with a real MCP client that cannot be asked in
//! the call (rmcp on 2025-11-25 over stateless HTTP): the call makes a pending approval and
//! returns its id and link; an approver of the tenant decides it through the HTTP API; the
//! same call repeated runs once after an approval, is refused after a denial or the expiry,
//! and never runs twice. Four eyes refuses the requester as approver, a decider of one
//! tenant never sees or decides another's, the webhook is told, and with PostgreSQL a
//! second replica runs what the first one asked.

use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::json;

use crate::mcp_support::{
    Client, TestServer, call, error_code, error_message, start_yaml, text_of,
};
use crate::support::gate::{DELETE, route_all};
use crate::support::identity::{ISSUER, JwksServer, RESOURCE, SigningKey, base_yaml, now};
use crate::support::wait::eventually;

/// A second issuer trusted for the same tenants, whose subjects and groups are its own.
const ISSUER_B: &str = "https://idp-b.test";

/// A token of `issuer` for `sub` in `tenant` with `groups`.
fn token(key: &SigningKey, issuer: &str, sub: &str, tenant: &str, groups: &[&str]) -> String {
    key.sign(
        &json!({"iss": issuer, "aud": RESOURCE, "sub": sub, "tenant": tenant,
        "groups": groups, "exp": now() + 600, "iat": now()}),
    )
}

/// What a test's server is made of.
struct Setup {
    key: SigningKey,
    _jwks: JwksServer,
    jwks_url: String,
    key_b: SigningKey,
    _jwks_b: JwksServer,
    jwks_url_b: String,
}

impl Setup {
    async fn new() -> Setup {
        let key = SigningKey::new("k1");
        let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
        let key_b = SigningKey::new("k2");
        let jwks_b = JwksServer::start(json!({"keys": [key_b.jwk()]})).await;
        Setup {
            jwks_url: jwks.url.clone(),
            key,
            _jwks: jwks,
            jwks_url_b: jwks_b.url.clone(),
            key_b,
            _jwks_b: jwks_b,
        }
    }

    /// A server with out-of-band approval (`approval_extra`: more `approval:` keys).
    async fn server(&self, approval_extra: &str, extra: &str) -> TestServer {
        self.server_over(approval_extra, extra, None).await
    }

    /// [`Setup::server`] whose upstream is `upstream` (another server's mock) when given.
    async fn server_over(
        &self,
        approval_extra: &str,
        extra: &str,
        upstream: Option<String>,
    ) -> TestServer {
        self.server_audited(approval_extra, extra, upstream, None)
            .await
    }

    /// [`Setup::server_over`] whose `audit:` section is `audit` (default: files in the
    /// server's folder).
    async fn server_audited(
        &self,
        approval_extra: &str,
        extra: &str,
        upstream: Option<String>,
        audit: Option<String>,
    ) -> TestServer {
        let jwks = self.jwks_url.clone();
        let jwks_b = self.jwks_url_b.clone();
        let approval_extra = approval_extra.to_owned();
        let extra = extra.to_owned();
        start_yaml(move |mock, dir| {
            let mock = upstream.as_deref().unwrap_or(mock);
            let audit = audit.unwrap_or_else(|| {
                format!("audit:\n  file:\n    dir: {}\n", dir.join("audit").display())
            });
            format!(
                "{base}server:\n  listen: 127.0.0.1:0\nauth:\n  resource: {RESOURCE}\n  authorization_servers: [{ISSUER}]\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        jwks_url: {jwks}\n        algorithms: [ES256]\n        tenants: [default, acme, globex]\n      - issuer: {ISSUER_B}\n        jwks_url: {jwks_b}\n        algorithms: [ES256]\n        tenants: [acme, globex]\n{audit}approval:\n  out_of_band: fallback\n  link_base: {LINK_BASE}\n  approvers:\n    - tenant: acme\n      groups: ['jwt:{ISSUER}#sre']\n      subjects: ['uri:spiffe://acme/approver']\n    - tenant: globex\n      subjects: ['jwt:{ISSUER}#gina']\n{approval_extra}{extra}",
                base = base_yaml(mock, dir, "    mode: safe\n"),
            )
        })
        .await
    }

    fn token(&self, sub: &str, tenant: &str, groups: &[&str]) -> String {
        token(&self.key, ISSUER, sub, tenant, groups)
    }

    /// A token of the second issuer.
    fn token_b(&self, sub: &str, tenant: &str, groups: &[&str]) -> String {
        token(&self.key_b, ISSUER_B, sub, tenant, groups)
    }
}

/// A fresh, migrated database and a shared approval key for replicas: the `approval:` keys
/// (`more` first) that make them share approvals through PostgreSQL. The database and the
/// key's folder live as long as the returned guards.
async fn replicated(
    more: &str,
) -> Option<(crate::support::pg::TestDatabase, tempfile::TempDir, String)> {
    let db = crate::support::pg::fresh_database().await?;
    let pool = db.pool(2).await;
    querygate::db::migrate(&pool).await.unwrap();
    pool.close().await;
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("k1");
    std::fs::write(&key, "k".repeat(48)).unwrap();
    let extra = format!(
        "  wait: 0s\n{more}  store: postgres\n  key_files: [{}]\ndatabase:\n  url: {}\n",
        key.display(),
        db.url
    );
    Some((db, keys, extra))
}

use crate::support::oob::*;

#[tokio::test]
async fn approved_out_of_band_the_call_runs_once_and_four_eyes_and_tenants_hold() {
    let setup = Setup::new().await;
    let hook = Hook::start().await;
    let server = setup
        .server(
            &format!("  wait: 0s\n  webhook:\n    url: {}\n", hook.url),
            "",
        )
        .await;
    route_all(&server.mock);
    let alice = setup.token("alice", "acme", &["sre"]);
    let bob = setup.token("bob", "acme", &["sre"]);
    let carol = setup.token("carol", "acme", &["dev"]);
    let gina = setup.token("gina", "globex", &[]);
    let client = legacy(&server.url, &alice).await;

    let id = pending_id(&delete(&client).await);
    // The same call again finds the same approval.
    assert_eq!(pending_id(&delete(&client).await), id);
    assert_eq!(deletes(&server), 0, "nothing is sent before the decision");

    // The webhook was told, with the link and the SQL.
    let text = eventually(
        "the webhook",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            hook.bodies
                .lock()
                .unwrap()
                .first()
                .and_then(|b| b["text"].as_str().map(str::to_owned))
        },
    )
    .await;
    assert!(text.contains(&format!("{LINK_BASE}/{id}")), "{text}");
    assert!(
        text.contains("tenant acme by alice (https://idp.test)"),
        "{text}"
    );
    assert!(
        text.contains("SQL (escaped, on one line): DELETE FROM testapi.widgets.widgets"),
        "{text}"
    );
    assert!(
        !text.contains('<') && !text.contains('>'),
        "Slack's control characters are escaped: {text}"
    );
    assert_eq!(hook.bodies.lock().unwrap().len(), 1, "announced once");

    // Four eyes: alice is an approver of acme, but not of her own call.
    let (status, body) = decide(&server, &id, "approve", &alice, "mine").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("approval.not_allowed")),
        "{body}"
    );
    // Not an approver at all.
    let (status, _) = decide(&server, &id, "approve", &carol, "").await;
    assert_eq!(status, 403);
    let (status, _) = get(&server, "/approvals", &carol).await;
    assert_eq!(status, 403);
    // Another tenant's approver sees nothing of acme and decides nothing.
    let (status, body) = get(&server, &format!("/approvals/{id}"), &gina).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("approval.not_found")),
        "{body}"
    );
    let (status, _) = get(&server, "/approvals?tenant=acme", &gina).await;
    assert_eq!(status, 403);
    let (status, body) = get(&server, "/approvals", &gina).await;
    assert_eq!(
        (status, body["approvals"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{body}"
    );
    let (status, _) = decide(&server, &id, "approve", &gina, "").await;
    assert_eq!(status, 404);
    assert_eq!(deletes(&server), 0);

    // Bob sees the plan and approves.
    let (status, body) = get(&server, "/approvals", &bob).await;
    assert_eq!(status, 200, "{body}");
    let listed = &body["approvals"][0];
    assert_eq!(listed["id"], id.as_str());
    assert_eq!(listed["state"], "pending");
    assert_eq!(listed["requester"]["subject"], "alice");
    assert!(
        listed["plan"]["hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(
        listed["plan"]["writes"][0],
        "testapi · DELETE testapi.widgets.widgets via method delete (1 request)"
    );
    // Each request of the write is shown as it would be sent, and the hash shown is the
    // one validate_mutation_query gives for the same statement.
    let shown = &listed["plan"]["requests"][0]["shown"][0];
    assert_eq!(shown["http_method"], "DELETE", "{listed}");
    assert_eq!(
        shown["url"],
        format!("{}/orgs/acme/widgets/w-1", server.mock.url()),
        "{listed}"
    );
    assert_eq!(listed["plan"]["requests"][0]["not_shown"], 0, "{listed}");
    assert!(
        listed["prompt"]
            .as_str()
            .unwrap()
            .contains("\n  Request 1: DELETE "),
        "{listed}"
    );
    let validated = call(&client, "validate_mutation_query", json!({"sql": DELETE})).await;
    let validated = validated.structured_content.expect("structured content");
    assert_eq!(
        validated["plan_hash"], listed["plan"]["hash"],
        "{validated}"
    );
    assert!(text.contains("\n  Request 1: DELETE "), "{text}");
    let (status, body) = decide(&server, &id, "approve", &bob, "change CHG-42").await;
    assert_eq!(
        (status, body["state"].as_str()),
        (200, Some("approved")),
        "{body}"
    );
    let (status, _) = decide(&server, &id, "deny", &bob, "too late").await;
    assert_eq!(status, 409, "one decision per approval");

    // The repeated call runs, once.
    let ran = delete(&client).await;
    assert_ne!(ran.is_error, Some(true), "{}", text_of(&ran));
    assert_eq!(deletes(&server), 1);
    let (_, body) = get(&server, &format!("/approvals/{id}"), &bob).await;
    assert_eq!(body["state"], "used");
    // A replay after use asks anew and sends nothing.
    let again = pending_id(&delete(&client).await);
    assert_ne!(again, id);
    assert_eq!(deletes(&server), 1, "used: nothing more is sent");

    // The audit has the pending call, the decision and the run, with who approved it.
    let records = audit_records(&server);
    let of = |phase: &str, decision: &str| {
        records
            .iter()
            .filter(|r| {
                r["phase"] == phase && r["decision"] == decision && r["approval_id"] == id.as_str()
            })
            .cloned()
            .collect::<Vec<_>>()
    };
    let asked = of("outcome", "needs_approval_requested");
    assert_eq!(asked.len(), 2, "{records:?}");
    assert_eq!(asked[0]["error_code"], "policy.approval_pending");
    let decided = of("approval_decision", "needs_approval_accepted");
    assert_eq!(decided.len(), 1, "{records:?}");
    assert_eq!(decided[0]["principal"], "bob");
    assert_eq!(decided[0]["approval_method"], "api");
    assert_eq!(decided[0]["approval_reason"], "change CHG-42");
    let run = of("outcome", "needs_approval_accepted");
    assert_eq!(run.len(), 1, "{records:?}");
    assert_eq!(run[0]["principal"], "alice");
    assert_eq!(run[0]["approver"], "bob (https://idp.test)");
    assert_eq!(run[0]["approval_method"], "api");
    assert_eq!(run[0]["approval_reason"], "change CHG-42");
    assert_eq!(run[0]["outcome"], "ok");
    let intent = of("intent", "needs_approval_accepted");
    assert_eq!(intent.len(), 1, "{records:?}");
    assert_eq!(intent[0]["approver"], "bob (https://idp.test)");
}

#[tokio::test]
async fn approvers_are_bound_to_their_issuer_so_another_trusted_issuer_cannot_approve() {
    let setup = Setup::new().await;
    let server = setup.server("  wait: 0s\n", "").await;
    route_all(&server.mock);
    let alice = setup.token("alice", "acme", &["dev"]);
    let id = pending_id(&delete(&legacy(&server.url, &alice).await).await);
    // Each token is valid and of tenant acme, from the other trusted issuer: a sub that
    // is an approver's name at the first issuer, a sub spelling a certificate's identity or
    // a typed name, and a group the rule names for the first issuer.
    let impostors = [
        setup.token_b("gina", "acme", &[]),
        setup.token_b("uri:spiffe://acme/approver", "acme", &[]),
        setup.token_b(&format!("jwt:{ISSUER}#bob"), "acme", &[]),
        setup.token_b("mallory", "acme", &["sre"]),
    ];
    for (n, impostor) in impostors.iter().enumerate() {
        let (status, body) = decide(&server, &id, "approve", impostor, "").await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (403, Some("approval.not_allowed")),
            "impostor {n}: {body}"
        );
        let (status, _) = get(&server, "/approvals", impostor).await;
        assert_eq!(status, 403, "impostor {n} may list");
    }
    assert_eq!(deletes(&server), 0, "an impostor's approval ran the call");
    // The group named for the first issuer decides.
    let bob = setup.token("bob", "acme", &["sre"]);
    let (status, body) = decide(&server, &id, "approve", &bob, "").await;
    assert_eq!(status, 200, "{body}");
    let done = delete(&legacy(&server.url, &alice).await).await;
    assert_ne!(done.is_error, Some(true), "{}", text_of(&done));
    assert_eq!(deletes(&server), 1);
}

/// Approvals of `ROUNDS` distinct calls made on `a`, each approved through `a` and denied
/// through `b` at the same moment: exactly one decider wins each, and the audit (`records`
/// of both servers) holds exactly that one decision.
async fn race_approve_and_deny(
    setup: &Setup,
    a: &TestServer,
    b: &TestServer,
    records: impl Fn() -> Vec<serde_json::Value>,
) {
    const ROUNDS: usize = 10;
    let alice = legacy(&a.url, &setup.token("alice", "acme", &[])).await;
    let bob = setup.token("bob", "acme", &["sre"]);
    let dave = setup.token("dave", "acme", &["sre"]);
    let mut ids = Vec::new();
    for n in 0..ROUNDS {
        let sql =
            format!("DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'r-{n}'");
        ids.push(pending_id(
            &call(&alice, "run_mutation_query", json!({"sql": sql})).await,
        ));
    }
    for id in &ids {
        let ((approved, body_a), (denied, body_b)) = tokio::join!(
            decide(a, id, "approve", &bob, "yes"),
            decide(b, id, "deny", &dave, "no")
        );
        assert_eq!(
            [approved, denied].iter().filter(|s| **s == 200).count(),
            1,
            "{id}: {body_a} {body_b}"
        );
        let winner = if approved == 200 {
            "needs_approval_accepted"
        } else {
            "needs_approval_declined"
        };
        let decisions: Vec<_> = records()
            .into_iter()
            .filter(|r| r["phase"] == "approval_decision" && r["approval_id"] == id.as_str())
            .collect();
        assert_eq!(decisions.len(), 1, "{id}: {decisions:#?}");
        assert_eq!(decisions[0]["decision"], winner, "{id}");
        let (_, shown) = get(a, &format!("/approvals/{id}"), &bob).await;
        let state = if approved == 200 {
            "approved"
        } else {
            "denied"
        };
        assert_eq!(shown["state"], state, "{shown}");
    }
}

#[tokio::test]
async fn approve_and_deny_racing_leave_one_decision_on_one_replica() {
    let setup = Setup::new().await;
    let server = setup.server("  wait: 0s\n", "").await;
    race_approve_and_deny(&setup, &server, &server, || audit_records(&server)).await;
}

#[tokio::test]
async fn approve_and_deny_racing_on_two_replicas_leave_one_decision() {
    let Some((_db, _keys, extra)) = replicated("").await else {
        return;
    };
    let setup = Setup::new().await;
    let a = setup.server(&extra, "").await;
    let b = setup.server_over(&extra, "", Some(a.mock.url())).await;
    race_approve_and_deny(&setup, &a, &b, || {
        let mut both = audit_records(&a);
        both.extend(audit_records(&b));
        both
    })
    .await;
}

/// `run_mutation_query` of a DELETE of widget `n`: a call of its own.
async fn delete_widget(client: &Client, n: usize) -> rmcp::model::CallToolResult {
    let sql = format!("DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'p-{n}'");
    call(client, "run_mutation_query", json!({"sql": sql})).await
}

#[tokio::test]
async fn one_principal_holds_a_bounded_number_of_pending_approvals_and_the_webhook_is_paced() {
    let setup = Setup::new().await;
    let hook = Hook::start().await;
    let server = setup
        .server(
            &format!(
                "  wait: 0s\n  max_pending_per_principal: 3\n  webhook:\n    url: {}\n    max_per_minute: 2\n",
                hook.url
            ),
            "",
        )
        .await;
    route_all(&server.mock);
    let alice = legacy(&server.url, &setup.token("alice", "acme", &[])).await;
    let first = pending_id(&delete_widget(&alice, 0).await);
    for n in 1..3 {
        pending_id(&delete_widget(&alice, n).await);
    }
    // A fourth call would be a fourth pending approval: refused, nothing asked or sent.
    let refused = delete_widget(&alice, 3).await;
    assert_eq!(
        error_code(&refused),
        "limit.exceeded",
        "{}",
        text_of(&refused)
    );
    assert!(
        error_message(&refused).contains("approval.max_pending_per_principal"),
        "{}",
        error_message(&refused)
    );
    // Repeating a call whose approval is pending still finds it.
    assert_eq!(pending_id(&delete_widget(&alice, 0).await), first);
    // Another principal has its own bound.
    let carol = legacy(&server.url, &setup.token("carol", "acme", &[])).await;
    pending_id(&delete_widget(&carol, 3).await);
    let (_, listed) = get(&server, "/approvals", &setup.token("bob", "acme", &["sre"])).await;
    assert_eq!(
        listed["approvals"].as_array().map(Vec::len),
        Some(4),
        "{listed}"
    );
    assert_eq!(deletes(&server), 0);
    // Four approvals were made within the minute; the webhook was told of two.
    eventually(
        "two announcements",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async { (hook.bodies.lock().unwrap().len() >= 2).then_some(()) },
    )
    .await;
    assert_eq!(hook.bodies.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn the_bound_on_pending_approvals_holds_across_replicas_through_postgres() {
    let Some((_db, _keys, extra)) = replicated("  max_pending_per_principal: 2\n").await else {
        return;
    };
    let setup = Setup::new().await;
    let a = setup.server(&extra, "").await;
    let b = setup.server_over(&extra, "", Some(a.mock.url())).await;
    let token = setup.token("alice", "acme", &[]);
    let (on_a, on_b) = (legacy(&a.url, &token).await, legacy(&b.url, &token).await);
    // Two calls at once on each replica: two become pending, two are refused.
    let (r0, r1, r2, r3) = tokio::join!(
        delete_widget(&on_a, 0),
        delete_widget(&on_b, 1),
        delete_widget(&on_a, 2),
        delete_widget(&on_b, 3)
    );
    let codes: Vec<String> = [&r0, &r1, &r2, &r3].iter().map(|r| error_code(r)).collect();
    assert_eq!(
        codes
            .iter()
            .filter(|c| *c == "policy.approval_pending")
            .count(),
        2,
        "{codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| *c == "limit.exceeded").count(),
        2,
        "{codes:?}"
    );
}

#[tokio::test]
async fn denied_or_expired_out_of_band_nothing_runs() {
    let setup = Setup::new().await;
    let server = setup.server("  wait: 0s\n  ttl: 2s\n", "").await;
    route_all(&server.mock);
    let alice = setup.token("alice", "acme", &[]);
    let bob = setup.token("bob", "acme", &["sre"]);
    let client = legacy(&server.url, &alice).await;

    // Denied: the repetition is refused with the reason, which is escaped.
    let id = pending_id(&delete(&client).await);
    let (status, body) = decide(&server, &id, "deny", &bob, "not in prod\n\u{1b}[2J").await;
    assert_eq!(
        (status, body["state"].as_str()),
        (200, Some("denied")),
        "{body}"
    );
    let refused = delete(&client).await;
    assert_eq!(
        error_code(&refused),
        "policy.approval_declined",
        "{}",
        text_of(&refused)
    );
    let message = error_message(&refused);
    assert!(
        message.contains("denied by bob (https://idp.test) (api): not in prod\\u{a}\\u{1b}[2J"),
        "{message}"
    );
    assert_eq!(deletes(&server), 0);

    // Expired: nobody decided within approval.ttl.
    let other = json!({"sql": DELETE.replace("w-1", "w-2")});
    let id = pending_id(&call(&client, "run_mutation_query", other.clone()).await);
    eventually(
        "the approval expires",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async { get(&server, &format!("/approvals/{id}"), &bob).await.1["state"] == "expired" },
    )
    .await;
    let (status, body) = decide(&server, &id, "approve", &bob, "").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("approval.conflict")),
        "{body}"
    );
    let refused = call(&client, "run_mutation_query", other.clone()).await;
    assert_eq!(
        error_code(&refused),
        "policy.approval_expired",
        "{}",
        text_of(&refused)
    );
    // Then asked anew.
    assert_ne!(
        pending_id(&call(&client, "run_mutation_query", other).await),
        id
    );
    assert!(server.mock.requests().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn an_approval_given_while_the_call_waits_runs_it_in_that_call() {
    let setup = Setup::new().await;
    let server = setup.server("  wait: 30s\n", "").await;
    route_all(&server.mock);
    let alice = setup.token("alice", "acme", &[]);
    let bob = setup.token("bob", "acme", &["sre"]);
    let client = legacy(&server.url, &alice).await;
    let waiting = tokio::spawn(async move {
        let result = delete(&client).await;
        (client, result)
    });
    let id = eventually(
        "the pending approval",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            get(&server, "/approvals", &bob).await.1["approvals"][0]["id"]
                .as_str()
                .map(str::to_owned)
        },
    )
    .await;
    let (status, _) = decide(&server, &id, "approve", &bob, "go").await;
    assert_eq!(status, 200);
    let (_client, result) = waiting.await.unwrap();
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    assert_eq!(deletes(&server), 1);
}

#[tokio::test]
async fn with_postgres_one_replica_asks_and_another_runs_it_once() {
    let Some((_db, _keys, extra)) = replicated("").await else {
        return;
    };
    let setup = Setup::new().await;
    let a = setup.server(&extra, "").await;
    // Both replicas send to one upstream: the plan (its URLs) is the same on both.
    let b = setup.server_over(&extra, "", Some(a.mock.url())).await;
    route_all(&a.mock);
    let alice = setup.token("alice", "acme", &[]);
    let bob = setup.token("bob", "acme", &["sre"]);
    let on_a = legacy(&a.url, &alice).await;
    let on_b = legacy(&b.url, &alice).await;

    let id = pending_id(&delete(&on_a).await);
    // The other replica finds the same pending approval.
    assert_eq!(pending_id(&delete(&on_b).await), id);
    let (status, _) = decide(&b, &id, "approve", &alice, "").await;
    assert_eq!(status, 403, "four eyes on every replica");
    let (status, body) = decide(&b, &id, "approve", &bob, "ok").await;
    assert_eq!(status, 200, "{body}");
    // Both replicas race to run it: exactly one does.
    let (ran_b, ran_a) = tokio::join!(delete(&on_b), delete(&on_a));
    let ran = [&ran_a, &ran_b]
        .iter()
        .filter(|r| r.is_error != Some(true))
        .count();
    assert_eq!(ran, 1, "{} / {}", text_of(&ran_a), text_of(&ran_b));
    assert_eq!(deletes(&a) + deletes(&b), 1, "exactly one write upstream");
    let (_, body) = get(&a, &format!("/approvals/{id}"), &bob).await;
    assert_eq!(body["state"], "used");
    // A replay on either replica asks anew.
    assert_ne!(pending_id(&delete(&on_a).await), id);
    assert_eq!(deletes(&a) + deletes(&b), 1);
}

#[tokio::test]
async fn approved_with_the_cli_beside_a_server_auditing_to_postgres_the_call_runs() {
    let Some(db) = crate::support::pg::fresh_database().await else {
        return;
    };
    let pool = db.pool(2).await;
    querygate::db::migrate(&pool).await.unwrap();
    let setup = Setup::new().await;
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("k1");
    std::fs::write(&key, "k".repeat(48)).unwrap();
    let extra = format!(
        "  wait: 0s\n  store: postgres\n  key_files: [{}]\ndatabase:\n  url: {}\n",
        key.display(),
        db.url
    );
    let server = setup
        .server_audited(
            &extra,
            "",
            None,
            Some("audit:\n  sink: postgres\n  replica: pod-1\n".to_owned()),
        )
        .await;
    route_all(&server.mock);
    let alice = setup.token("alice", "acme", &[]);
    let client = legacy(&server.url, &alice).await;
    let id = pending_id(&delete(&client).await);

    // The command the pending message prints, run with the server's configuration in its
    // pod: its approval_decision record goes to a stream of its own.
    let config = server._dir.path().join("config.yaml");
    let mut cmd = crate::support::querygate_command();
    cmd.env("USER", "ops").arg("--config").arg(&config).args([
        "approvals",
        "approve",
        &id,
        "--tenant",
        "acme",
        "--reason",
        "ok",
    ]);
    let out = tokio::process::Command::from(cmd).output().await.unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The approved call runs, and its records are written in the server's stream.
    let ran = delete(&client).await;
    assert_ne!(
        ran.is_error,
        Some(true),
        "[{}] {}",
        error_code(&ran),
        text_of(&ran)
    );
    assert_eq!(deletes(&server), 1);

    let streams: Vec<(String, String)> = sqlx_core::query_as::query_as(
        "SELECT stream, string_agg(phase, ',' ORDER BY seq) FROM audit_events GROUP BY stream ORDER BY stream",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(streams.len(), 2, "{streams:?}");
    assert_eq!(streams[0].0, "pod-1", "{streams:?}");
    assert!(
        streams[1].0.starts_with("pod-1.") && streams[1].1 == "approval_decision",
        "{streams:?}"
    );
    // The CLI's approver is the uid's user, not the $USER it was started with ("ops").
    let (approver,): (String,) = sqlx_core::query_as::query_as(
        "SELECT doc ->> 'approver' FROM audit_events WHERE phase = 'approval_decision'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(approver, format!("cli:{}", crate::support::uid_user()));
    let mut cmd = crate::support::querygate_command();
    cmd.arg("--config")
        .arg(&config)
        .args(["audit", "verify", "--database"]);
    let out = tokio::process::Command::from(cmd).output().await.unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Figures, not a check (ignored; no timed assertion): the latency an approval adds, call
/// start → approved write done, with the decision made at once. Out of band: a 2025-11-25
/// client's call waits while the test polls `GET /approvals` every 2 ms and approves; MRTR: a
/// 2026-07-28 client answers `accept` at once (two round trips). Baseline: the same INSERT in
/// `full_access`. Run with
/// `cargo test --test integration approvals_oob::approval_latency_figures -- --ignored --nocapture`.
#[tokio::test]
#[ignore]
async fn approval_latency_figures() {
    use crate::support::gate::{Approver, params};
    use rmcp::model::ElicitationAction;
    use std::time::Instant;

    const N: usize = 30;
    let setup = Setup::new().await;
    let server = setup.server("  wait: 30s\n", "").await;
    route_all(&server.mock);
    let jwks = setup.jwks_url.clone();
    let open = start_yaml(move |mock, dir| {
        format!(
            "{base}server:\n  listen: 127.0.0.1:0\nauth:\n  resource: {RESOURCE}\n  authorization_servers: [{ISSUER}]\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        jwks_url: {jwks}\n        algorithms: [ES256]\n        tenants: [default, acme, globex]\n",
            base = base_yaml(mock, dir, "    mode: full_access\n"),
        )
    })
    .await;
    route_all(&open.mock);
    let alice = setup.token("alice", "acme", &[]);
    let bob = setup.token("bob", "acme", &["sre"]);
    let insert = |i: usize, kind: &str| {
        format!("INSERT INTO testapi.widgets.widgets (org, name) VALUES ('acme', '{kind}-{i}')")
    };
    let summary = |name: &str, mut times: Vec<Duration>| {
        times.sort();
        let mean = times.iter().sum::<Duration>() / times.len() as u32;
        eprintln!(
            "{name}: n={} median={:?} p90={:?} mean={mean:?}",
            times.len(),
            times[times.len() / 2],
            times[times.len() * 9 / 10]
        );
    };

    // Baseline: no approval.
    let client = legacy(&open.url, &alice).await;
    let mut times = Vec::new();
    for i in 0..N {
        let started = Instant::now();
        let result = call(
            &client,
            "run_mutation_query",
            json!({"sql": insert(i, "base")}),
        )
        .await;
        times.push(started.elapsed());
        assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    }
    summary("full_access (no approval)", times);

    // Out of band, decided at once.
    let client = Arc::new(legacy(&server.url, &alice).await);
    let mut times = Vec::new();
    for i in 0..N {
        let started = Instant::now();
        let calling = {
            let client = client.clone();
            let sql = insert(i, "oob");
            tokio::spawn(
                async move { call(&client, "run_mutation_query", json!({"sql": sql})).await },
            )
        };
        let id = eventually(
            "the pending approval",
            Duration::from_secs(10),
            Duration::from_millis(2),
            || async {
                let (_, body) = get(&server, "/approvals", &bob).await;
                body["approvals"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|a| a["state"] == "pending")
                    .and_then(|a| a["id"].as_str().map(str::to_owned))
            },
        )
        .await;
        let (status, _) = decide(&server, &id, "approve", &bob, "").await;
        assert_eq!(status, 200);
        let result = calling.await.unwrap();
        times.push(started.elapsed());
        assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    }
    summary("out of band (API approval at once)", times);

    // MRTR (2026-07-28), answered at once.
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(server.url.clone())
            .auth_header(alice.clone()),
    );
    let approver = Approver::new(Some(ElicitationAction::Accept));
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![approver.version.clone()],
    };
    let client = approver
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .expect("modern client starts");
    let mut times = Vec::new();
    for i in 0..N {
        let started = Instant::now();
        let result = client
            .call_tool(params("run_mutation_query", &insert(i, "mrtr")))
            .await
            .unwrap();
        times.push(started.elapsed());
        assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    }
    summary("MRTR (accepted at once)", times);
}

/// The approval page's sign-outs are kept in PostgreSQL when approvals are: a session
/// signed out through one replica is signed out on every other, until its cookie expires.
#[tokio::test]
async fn signed_out_page_sessions_are_shared_by_replicas_through_postgres() {
    use querygate::approval::{PendingStore, PgPendingStore};
    let Some(db) = crate::support::pg::fresh_database().await else {
        return;
    };
    let pool = db.pool(2).await;
    querygate::db::migrate(&pool).await.unwrap();
    let replica_a = PgPendingStore::new(pool.clone());
    let replica_b = PgPendingStore::new(db.pool(2).await);
    let session = "a".repeat(64);
    let other = "b".repeat(64);
    assert!(!replica_b.signed_out(&session).await.unwrap());
    let until = querygate::approval::pending::now_ms() + 60_000;
    replica_a.sign_out(&session, until).await.unwrap();
    // Twice is once.
    replica_a.sign_out(&session, until).await.unwrap();
    assert!(replica_b.signed_out(&session).await.unwrap());
    assert!(!replica_b.signed_out(&other).await.unwrap());
    // A sign-out whose cookie has expired anyway is pruned by the next one.
    replica_b.sign_out(&other, 1).await.unwrap();
    replica_a.sign_out(&"c".repeat(64), until).await.unwrap();
    assert!(!replica_a.signed_out(&other).await.unwrap());
    assert!(replica_a.signed_out(&session).await.unwrap());
}
