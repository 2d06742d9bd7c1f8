//! The PostgreSQL audit sink against a real server: every field lands in its column, the
//! views answer what an auditor asks, the roles can do only what they should, verify finds
//! tampering, and a server that stops mid-run refuses calls and is used again when it is
//! back.

use std::sync::Arc;
use std::time::Duration;

use querygate::audit::postgres::{PgSink, PgSinkConfig};
use querygate::audit::record::{self, class};
use querygate::audit::verify::verify_database;
use querygate::audit::{
    AuditRecord, AuditSink, Auditor, Decision, FailureMode, OnFailure, Outcome, Phase,
};
use querygate::config::SecretUrl;
use querygate::db::{self, PgPool};
use sqlx_core::query::query;
use sqlx_core::query_as::query_as;
use sqlx_core::query_scalar::query_scalar;
use sqlx_postgres::Postgres;

use crate::support::pg::{self, TestDatabase};

fn config(stream: &str) -> PgSinkConfig {
    PgSinkConfig {
        stream: stream.into(),
        max_batch: 512,
        write_timeout: Duration::from_secs(3),
        mac_key: None,
    }
}

async fn migrated(database: &TestDatabase) -> PgPool {
    let pool = database.pool(4).await;
    db::migrate(&pool).await.expect("migrate");
    pool
}

fn full_record() -> AuditRecord {
    AuditRecord {
        timestamp: "2026-11-30T11:30:01.123456Z".into(),
        phase: Phase::Outcome,
        call_id: "c-full".into(),
        request_id: Some("req-1".into()),
        task_id: None,
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        span_id: Some("00f067aa0ba902b7".into()),
        replica: "r1".into(),
        tenant: "acme".into(),
        principal: "alice".into(),
        issuer: None,
        auth_method: "mtls".into(),
        cert_fingerprint: Some("ab".repeat(32)),
        os_user: Some("ops".into()),
        client_name: Some("claude".into()),
        client_version: Some("1.2".into()),
        protocol_version: Some("2025-06-18".into()),
        tool: "run_mutation_query".into(),
        mode: "safe".into(),
        decision: Decision::NeedsApprovalAccepted,
        query_class: Some(class::MUTATION_DELETE.into()),
        sql: Some("DELETE FROM testapi.items.items WHERE id = 1".into()),
        sql_sha256: Some("cd".repeat(32)),
        args: Some(
            serde_json::json!({"sql": "DELETE FROM testapi.items.items WHERE id = 1", "row_limit": 0})
                .as_object()
                .unwrap()
                .clone(),
        ),
        approval_id: Some("ap-7".into()),
        approver: None,
        approver_id: None,
        approval_method: None,
        approval_reason: None,
        outcome: Some(Outcome::Error),
        duration_ms: Some(42),
        error_code: Some("upstream.rejected".into()),
        error: Some("upstream answered 409".into()),
        policies: None,
        rows_returned: Some(0),
        upstream_status: Some(409),
        upstream_request_ids: Some(vec!["x-request-id=req-409".into()]),
        client_addr: None,
        suppressed: None,
        cut: None,
        pruned: None,
        cache_hit: None,
    }
}

fn simple(call: &str, tool: &str, decision: Decision, class_: &str, phase: Phase) -> AuditRecord {
    AuditRecord {
        timestamp: record::timestamp_now(),
        phase,
        call_id: call.into(),
        tenant: "acme".into(),
        principal: "bob".into(),
        auth_method: "jwt".into(),
        tool: tool.into(),
        mode: "safe".into(),
        decision,
        query_class: Some(class_.into()),
        sql: Some(format!("-- {call}")),
        outcome: (phase == Phase::Outcome).then_some(Outcome::Ok),
        duration_ms: (phase == Phase::Outcome).then_some(1),
        ..Default::default()
    }
}

#[tokio::test]
async fn every_field_lands_and_the_views_answer_an_auditor() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = migrated(&database).await;
    let sink = PgSink::start(pool.clone(), config("r1")).await.unwrap();
    sink.write(full_record()).await.unwrap();
    let records = [
        simple(
            "c-read",
            "run_select_query",
            Decision::Allow,
            class::SELECT,
            Phase::Outcome,
        ),
        simple(
            "c-del",
            "run_mutation_query",
            Decision::NeedsApprovalAccepted,
            class::MUTATION_DELETE,
            Phase::Intent,
        ),
        simple(
            "c-del",
            "run_mutation_query",
            Decision::NeedsApprovalAccepted,
            class::MUTATION_DELETE,
            Phase::Outcome,
        ),
        simple(
            "c-ref",
            "run_mutation_query",
            Decision::RefuseImmediate,
            class::MUTATION_CREATE,
            Phase::Outcome,
        ),
        simple(
            "c-dec",
            "run_lifecycle_operation",
            Decision::NeedsApprovalDeclined,
            class::LIFECYCLE,
            Phase::Outcome,
        ),
        simple(
            "c-lost",
            "run_lifecycle_operation",
            Decision::Allow,
            class::LIFECYCLE,
            Phase::Intent,
        ),
    ];
    for r in records {
        sink.write(r).await.unwrap();
    }
    sink.close().await;

    // Each column, derived from the hashed record, holds its field.
    let row: String = query_scalar(
        "SELECT (to_jsonb(e) - 'record' - 'doc' - 'id' - 'inserted_at' - 'hash' - 'prev_hash' - 'mac' \
                 || jsonb_build_object('at', to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US')))::text \
         FROM audit_events e WHERE call_id = 'c-full'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let row: serde_json::Value = serde_json::from_str(&row).unwrap();
    let expected = serde_json::json!({
        "at": "2026-11-30T11:30:01.123456",
        "stream": "r1",
        "seq": 1,
        "phase": "outcome",
        "call_id": "c-full",
        "request_id": "req-1",
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "replica": "r1",
        "tenant": "acme",
        "principal": "alice",
        "auth_method": "mtls",
        "cert_fingerprint": "ab".repeat(32),
        "os_user": "ops",
        "client_name": "claude",
        "client_version": "1.2",
        "protocol_version": "2025-06-18",
        "tool": "run_mutation_query",
        "mode": "safe",
        "decision": "needs_approval_accepted",
        "query_class": "mutation_delete",
        "sql": "DELETE FROM testapi.items.items WHERE id = 1",
        "sql_sha256": "cd".repeat(32),
        "args": {"sql": "DELETE FROM testapi.items.items WHERE id = 1", "row_limit": 0},
        "approval_id": "ap-7",
        "outcome": "error",
        "error_code": "upstream.rejected",
        "error": "upstream answered 409",
        "duration_ms": 42,
        "rows_returned": 0,
        "upstream_status": 409,
    });
    assert_eq!(row, expected);

    // What an auditor asks, through the views.
    let mutations: Vec<(String, Option<String>, bool)> = query_as(
        // Since a fixed day, not `now() - interval …`: the full record is dated 2026-11-30.
        "SELECT call_id, approval_id, intent_at IS NOT NULL FROM audit_mutations WHERE at >= timestamptz '2026-11-30 00:00:00+00' ORDER BY call_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        mutations,
        vec![
            ("c-dec".into(), None, false),
            ("c-del".into(), None, true),
            ("c-full".into(), Some("ap-7".into()), false),
            ("c-ref".into(), None, false)
        ]
    );
    let refusals: Vec<(String, String)> = query_as(
        "SELECT call_id, decision FROM audit_refusals WHERE tenant = 'acme' ORDER BY call_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        refusals,
        vec![
            ("c-dec".into(), "needs_approval_declined".into()),
            ("c-ref".into(), "refuse_immediate".into())
        ]
    );
    let activity: (i64, i64, i64) = query_as(
        "SELECT calls, side_effects, refusals FROM audit_principal_activity WHERE tenant = 'acme' AND principal = 'bob'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(activity, (4, 3, 2));
    let unfinished: Vec<String> = query_scalar("SELECT call_id FROM audit_unfinished_intents")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(unfinished, vec!["c-lost".to_owned()]);
    let report = verify_database(&pool).await.unwrap();
    assert!(report.ok(), "{}", report.render());
    assert_eq!(report.records, 7);
}

#[tokio::test]
async fn roles_writer_inserts_only_auditor_reads_views_only_nobody_changes_a_row() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = migrated(&database).await;
    // A login role for the service, member of querygate_writer (roles are cluster-wide).
    let service = format!("svc_{}", &database.url.rsplit('/').next().unwrap()[8..]);
    query::<Postgres>(&format!(
        "CREATE ROLE {service} LOGIN IN ROLE querygate_writer"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let mut url = url::Url::parse(&database.url).unwrap();
    url.set_username(&service).unwrap();
    let service_pool = db::connect_url(&SecretUrl::new(url.as_str()), 2, Duration::from_secs(10))
        .await
        .unwrap();
    let sink = PgSink::start(service_pool.clone(), config("r1"))
        .await
        .unwrap();
    write_selects(&sink, 3).await;
    sink.close().await;
    for statement in [
        "SELECT count(*) FROM audit_events",
        "UPDATE audit_events SET record = '{}'",
        "DELETE FROM audit_events",
        "SELECT count(*) FROM audit_calls",
    ] {
        let err = query::<Postgres>(statement)
            .execute(&service_pool)
            .await
            .expect_err(statement)
            .to_string();
        assert!(err.contains("permission denied"), "{statement}: {err}");
    }
    // Even the owner cannot change or remove a row: the trigger refuses.
    for statement in [
        "UPDATE audit_events SET record = record",
        "DELETE FROM audit_events WHERE seq = 1",
        "TRUNCATE audit_events",
    ] {
        let err = query::<Postgres>(statement)
            .execute(&pool)
            .await
            .expect_err(statement)
            .to_string();
        assert!(err.contains("append-only"), "{statement}: {err}");
    }
    // The auditor role: no login, the views only.
    let can_login: bool =
        query_scalar("SELECT rolcanlogin FROM pg_roles WHERE rolname = 'querygate_auditor'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(!can_login);
    let mut conn = pool.acquire().await.unwrap();
    query::<Postgres>("SET ROLE querygate_auditor")
        .execute(&mut *conn)
        .await
        .unwrap();
    let calls: i64 = query_scalar("SELECT count(*) FROM audit_calls")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(calls, 3);
    for statement in [
        "SELECT count(*) FROM audit_events",
        "INSERT INTO audit_events (stream, seq, at, record, doc, prev_hash, hash) VALUES ('x', 1, now(), '{}', '{}', repeat('0', 64), repeat('0', 64))",
        "SELECT * FROM audit_stream_head('r1')",
    ] {
        let err = query::<Postgres>(statement)
            .execute(&mut *conn)
            .await
            .expect_err(statement)
            .to_string();
        assert!(err.contains("permission denied"), "{statement}: {err}");
    }
    query::<Postgres>("RESET ROLE")
        .execute(&mut *conn)
        .await
        .unwrap();
}

#[tokio::test]
async fn verify_finds_rows_changed_or_removed_behind_the_trigger() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = migrated(&database).await;
    let sink = Arc::new(PgSink::start(pool.clone(), config("r1")).await.unwrap());
    let writes = (0..200).map(|n| {
        let sink = sink.clone();
        tokio::spawn(async move {
            sink.write(simple(
                &format!("c{n}"),
                "run_select_query",
                Decision::Allow,
                class::SELECT,
                Phase::Outcome,
            ))
            .await
        })
    });
    for result in futures::future::join_all(writes).await {
        result.unwrap().unwrap();
    }
    sink.close().await;
    let report = verify_database(&pool).await.unwrap();
    assert!(report.ok(), "{}", report.render());
    assert_eq!(report.streams["r1"].last_seq, 200);

    // A superuser switches the trigger off and edits a row's derived column.
    query::<Postgres>("ALTER TABLE audit_events DISABLE TRIGGER audit_events_append_only")
        .execute(&pool)
        .await
        .unwrap();
    query::<Postgres>(
        "UPDATE audit_events SET doc = jsonb_set(doc, '{tool}', '\"x\"') WHERE seq = 50",
    )
    .execute(&pool)
    .await
    .unwrap();
    let report = verify_database(&pool).await.unwrap();
    let b = report.first_break.expect("a break");
    assert_eq!(b.location, "stream r1 seq 50");
    assert!(b.reason.contains("derived columns"), "{b:?}");
    // … or removes one.
    query::<Postgres>("UPDATE audit_events SET doc = record::jsonb WHERE seq = 50")
        .execute(&pool)
        .await
        .unwrap();
    query::<Postgres>("DELETE FROM audit_events WHERE seq = 120")
        .execute(&pool)
        .await
        .unwrap();
    let b = verify_database(&pool)
        .await
        .unwrap()
        .first_break
        .expect("a break");
    assert_eq!(b.location, "stream r1 seq 121");
    assert!(b.reason.contains("seq 121 follows seq 119"), "{b:?}");
}

#[tokio::test]
async fn a_restarted_sink_and_a_second_writer_on_the_same_stream_keep_one_chain() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = migrated(&database).await;
    let first = PgSink::start(pool.clone(), config("r1")).await.unwrap();
    first
        .write(simple(
            "a",
            "server_info",
            Decision::Allow,
            class::SELECT,
            Phase::Outcome,
        ))
        .await
        .unwrap();
    let second = PgSink::start(pool.clone(), config("r1")).await.unwrap();
    assert_eq!(
        second
            .write(simple(
                "b",
                "server_info",
                Decision::Allow,
                class::SELECT,
                Phase::Outcome
            ))
            .await
            .unwrap()
            .seq,
        2
    );
    // The first sink's idea of the head is stale: its insert collides with the second's
    // seq 2, it re-reads the head and inserts the record again as seq 3. The caller never
    // sees the lost race.
    for (call, seq) in [("c", 3), ("d", 4)] {
        let receipt = first
            .write(simple(
                call,
                "server_info",
                Decision::Allow,
                class::SELECT,
                Phase::Outcome,
            ))
            .await
            .unwrap_or_else(|err| panic!("write {call} after a lost race: {err}"));
        assert_eq!(receipt.seq, seq);
    }
    let report = verify_database(&pool).await.unwrap();
    assert!(report.ok(), "{}", report.render());
    assert_eq!(report.records, 4);
}

#[tokio::test]
async fn writers_racing_on_one_stream_all_succeed_in_one_chain() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = migrated(&database).await;
    let mut sinks = Vec::new();
    for _ in 0..4 {
        sinks.push(PgSink::start(pool.clone(), config("r1")).await.unwrap());
    }
    // Every sink read the same (empty) head; their concurrent inserts take one another's
    // seqs again and again.
    let writes = sinks.iter().enumerate().flat_map(|(s, sink)| {
        (0..10).map(move |i| async move {
            sink.write(simple(
                &format!("s{s}-{i}"),
                "run_select_query",
                Decision::Allow,
                class::SELECT,
                Phase::Outcome,
            ))
            .await
        })
    });
    let results = futures::future::join_all(writes).await;
    let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} writes failed: {failed:?}",
        failed.len()
    );
    let mut seqs: Vec<u64> = results.iter().map(|r| r.as_ref().unwrap().seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=40).collect::<Vec<_>>());
    for sink in &sinks {
        sink.close().await;
    }
    let report = verify_database(&pool).await.unwrap();
    assert!(report.ok(), "{}", report.render());
    assert_eq!((report.records, report.streams.len()), (40, 1));
}

async fn stop_and_recover(mode: FailureMode) {
    let Some(cluster) = pg::PrivateCluster::start() else {
        return;
    };
    let database = cluster.fresh_database().await;
    let pool = migrated(&database).await;
    let sink: Arc<dyn AuditSink> =
        Arc::new(PgSink::start(pool.clone(), config("r1")).await.unwrap());
    let auditor = Auditor::new(sink.clone(), mode, "r1", None);
    let intent = || {
        simple(
            "m",
            "run_mutation_query",
            Decision::Allow,
            class::MUTATION_DELETE,
            Phase::Intent,
        )
    };
    let read = || {
        simple(
            "s",
            "run_select_query",
            Decision::Allow,
            class::SELECT,
            Phase::Outcome,
        )
    };
    auditor.record(intent()).await.unwrap().unwrap();

    cluster.stop();
    let on_intent = auditor.record(intent()).await;
    let on_read = auditor.record(read()).await;
    match mode {
        FailureMode::Strict => {
            assert_eq!(on_intent.unwrap_err().action, OnFailure::Refuse);
            assert_eq!(on_read.unwrap_err().action, OnFailure::FailCall);
        }
        FailureMode::StrictMutations => {
            assert_eq!(on_intent.unwrap_err().action, OnFailure::Refuse);
            assert_eq!(on_read, Ok(None));
        }
        FailureMode::BestEffort => {
            assert_eq!(on_intent, Ok(None));
            assert_eq!(on_read, Ok(None));
        }
    }

    cluster.start_server();
    // The same auditor, sink and pool: used again once the server is back.
    let receipt = crate::support::wait::eventually(
        "the auditor recording again (recovered)",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async { auditor.record(intent()).await.ok().flatten() },
    )
    .await;
    assert_eq!(receipt.seq, 2);
    let report = verify_database(&pool).await.unwrap();
    assert!(report.ok(), "{}", report.render());
}

#[tokio::test]
async fn strict_the_server_stops_and_comes_back() {
    stop_and_recover(FailureMode::Strict).await;
}

#[tokio::test]
async fn strict_mutations_the_server_stops_and_comes_back() {
    stop_and_recover(FailureMode::StrictMutations).await;
}

#[tokio::test]
async fn best_effort_the_server_stops_and_comes_back() {
    stop_and_recover(FailureMode::BestEffort).await;
}

#[tokio::test]
async fn audit_verify_and_tail_read_the_database() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = migrated(&database).await;
    let sink = PgSink::start(pool.clone(), config("r1")).await.unwrap();
    write_selects(&sink, 3).await;
    sink.close().await;
    let url = database.url.clone();
    let run = move |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_querygate"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("QUERYGATE_DATABASE__URL", &url)
            .args(args)
            .output()
            .unwrap()
    };
    let (verify, tail) = tokio::task::spawn_blocking(move || {
        (
            run(&["audit", "verify", "--database"]),
            run(&["audit", "tail", "--database", "-n", "2"]),
        )
    })
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(out.contains("ok: 3 records in 1 streams"), "{out}");
    let out = String::from_utf8_lossy(&tail.stdout);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("-- c2") && !out.contains("-- c0"), "{out}");
}

/// Writes `n` allowed select outcomes, call ids `c0`, `c1`, ….
async fn write_selects(sink: &PgSink, n: usize) {
    for i in 0..n {
        sink.write(simple(
            &format!("c{i}"),
            "run_select_query",
            Decision::Allow,
            class::SELECT,
            Phase::Outcome,
        ))
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn the_views_name_the_issuer_and_list_authentication_failures() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = migrated(&database).await;
    let sink = PgSink::start(pool.clone(), config("r1")).await.unwrap();
    let of_issuer = |call: &str, issuer: &str| AuditRecord {
        issuer: Some(issuer.into()),
        ..simple(
            call,
            "run_select_query",
            Decision::Allow,
            class::SELECT,
            Phase::Outcome,
        )
    };
    sink.write(of_issuer("c-a", "https://idp-a")).await.unwrap();
    sink.write(of_issuer("c-b", "https://idp-b")).await.unwrap();
    let mut pull = simple(
        "c-pull",
        "pull_provider",
        Decision::Allow,
        class::SELECT,
        Phase::Outcome,
    );
    pull.query_class = None;
    pull.args = serde_json::json!({"provider": "github"})
        .as_object()
        .cloned();
    sink.write(pull).await.unwrap();
    sink.write(AuditRecord {
        timestamp: record::timestamp_now(),
        phase: Phase::AuthFailure,
        call_id: "c-auth".into(),
        principal: "mallory".into(),
        issuer: Some("https://idp-a".into()),
        auth_method: "jwt".into(),
        decision: Decision::RefuseImmediate,
        outcome: Some(Outcome::Error),
        error_code: Some("auth.invalid_token".into()),
        error: Some("invalid token: signature does not verify".into()),
        client_addr: Some("127.0.0.1".into()),
        suppressed: Some(41),
        ..Default::default()
    })
    .await
    .unwrap();
    sink.close().await;

    let mut conn = pool.acquire().await.unwrap();
    query::<Postgres>("SET ROLE querygate_auditor")
        .execute(&mut *conn)
        .await
        .unwrap();
    let calls: Vec<(String, Option<String>)> =
        query_as("SELECT call_id, issuer FROM audit_calls ORDER BY call_id")
            .fetch_all(&mut *conn)
            .await
            .unwrap();
    assert_eq!(
        calls,
        vec![
            ("c-a".into(), Some("https://idp-a".into())),
            ("c-b".into(), Some("https://idp-b".into())),
            ("c-pull".into(), None),
        ],
        "an auth failure is no call"
    );
    // One `bob` of two issuers is two principals.
    let activity: Vec<(Option<String>, i64)> = query_as(
        "SELECT issuer, calls FROM audit_principal_activity WHERE principal = 'bob' ORDER BY issuer NULLS LAST",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    assert_eq!(
        activity,
        vec![
            (Some("https://idp-a".into()), 1),
            (Some("https://idp-b".into()), 1),
            (None, 1)
        ]
    );
    let provider: Option<String> = query_scalar(
        "SELECT args ->> 'provider' FROM audit_mutations WHERE tool = 'pull_provider'",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(provider.as_deref(), Some("github"));
    let failure: (String, String, String, String, i64) = query_as(
        "SELECT reason, client_addr, claimed_subject, claimed_issuer, suppressed FROM audit_auth_failures",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(
        failure,
        (
            "auth.invalid_token".into(),
            "127.0.0.1".into(),
            "mallory".into(),
            "https://idp-a".into(),
            41
        )
    );
    query::<Postgres>("RESET ROLE")
        .execute(&mut *conn)
        .await
        .unwrap();
}

/// A server (`querygate serve`, in-process) auditing to PostgreSQL as replica `pod-1`, in
/// mode `safe`, and the path of its configuration, which the command line uses too (as
/// `kubectl exec` into its pod would).
async fn server_beside_the_cli(
    database: &TestDatabase,
) -> (crate::mcp_support::TestServer, std::path::PathBuf) {
    let url = database.url.clone();
    let server = crate::mcp_support::start_yaml(move |mock, dir| {
        let env_file = dir.join("creds.env");
        std::fs::write(
            &env_file,
            format!("TESTAPI_KEY={}\n", crate::support::SECRET),
        )
        .unwrap();
        format!(
            "registry:\n  root: {}\nproviders:\n  testapi:\n    base_url: {mock}\n\
credentials:\n  env_file: {}\n  process_env: false\n\
tenants:\n  - id: default\n    mode: safe\n\
server:\n  listen: 127.0.0.1:0\n\
audit:\n  sink: postgres\n  replica: pod-1\n\
database:\n  url: {url}\n",
            crate::support::fixture_registry().display(),
            env_file.display(),
        )
    })
    .await;
    server.mock.route(
        "/orgs/acme/items",
        crate::mock::Reply::json(serde_json::json!([{"id": 1}])),
    );
    server.mock.route(
        "DELETE /orgs/acme/widgets/w-1",
        crate::mock::Reply::status(204, ""),
    );
    let config = server._dir.path().join("config.yaml");
    (server, config)
}

/// A read through the server's MCP endpoint; panics unless it succeeds.
async fn server_read(client: &crate::mcp_support::Client, what: &str) {
    let result = crate::mcp_support::try_call(
        client,
        "run_select_query",
        serde_json::json!({"sql": crate::support::gate::SELECT}),
    )
    .await
    .unwrap_or_else(|err| panic!("{what}: {err}"));
    assert_ne!(
        result.is_error,
        Some(true),
        "{what}: [{}] {}",
        crate::mcp_support::error_code(&result),
        crate::mcp_support::text_of(&result)
    );
}

/// `querygate --config CONFIG query --yes DELETE`, the real binary, as a person runs it in
/// the server's pod (stdin not a terminal).
fn cli_delete(config: &std::path::Path) -> tokio::process::Command {
    let mut cmd = crate::support::querygate_command();
    cmd.env("USER", "ops")
        .arg("--config")
        .arg(config)
        .args(["query", "--yes", crate::support::gate::DELETE])
        .stdin(std::process::Stdio::null());
    tokio::process::Command::from(cmd)
}

fn describe(out: &std::process::Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `querygate --config CONFIG audit verify --database`: whether it passed, and its output.
async fn verify_cli(config: &std::path::Path) -> (bool, String) {
    let mut cmd = crate::support::querygate_command();
    cmd.arg("--config")
        .arg(config)
        .args(["audit", "verify", "--database"]);
    let out = tokio::process::Command::from(cmd).output().await.unwrap();
    (out.status.success(), describe(&out))
}

/// Every stream in `audit_events` with its number of records.
async fn streams(pool: &PgPool) -> Vec<(String, i64)> {
    query_as("SELECT stream, count(*) FROM audit_events GROUP BY stream ORDER BY stream")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_query_beside_the_server_writes_a_stream_of_its_own_and_the_server_carries_on() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = migrated(&database).await;
    let (server, config) = server_beside_the_cli(&database).await;
    let client = crate::mcp_support::modern_client(&server.url).await;
    server_read(&client, "the server's first call").await;

    // The command line in the server's pod, with the server's configuration (replica
    // pod-1): an approved delete, an intent and an outcome record.
    let out = cli_delete(&config).output().await.unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        server
            .mock
            .requests()
            .iter()
            .filter(|r| r.method == "DELETE")
            .count(),
        1
    );

    // The server's next calls still get their records written.
    server_read(&client, "the server's call after the command").await;
    server_read(&client, "the server's next call").await;

    let streams = streams(&pool).await;
    assert_eq!(streams.len(), 2, "{streams:?}");
    assert_eq!(streams[0], ("pod-1".to_owned(), 3), "{streams:?}");
    let (cli_stream, cli_records) = &streams[1];
    assert_eq!(*cli_records, 2, "{streams:?}");
    let suffix = cli_stream
        .strip_prefix("pod-1.")
        .unwrap_or_else(|| panic!("the command's stream names the replica: {cli_stream}"));
    let (pid, millis) = suffix.split_once('-').expect("<pid>-<unix ms>");
    assert!(
        pid.parse::<u32>().is_ok() && millis.parse::<u128>().is_ok(),
        "{cli_stream}"
    );
    let replicas: Vec<String> = query_scalar("SELECT DISTINCT replica FROM audit_events")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(replicas, ["pod-1"]);

    let (ok, out) = verify_cli(&config).await;
    assert!(ok, "{out}");
    assert!(out.contains("ok: 5 records in 2 streams"), "{out}");
}

#[tokio::test]
async fn concurrent_queries_beside_the_server_all_succeed() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = migrated(&database).await;
    let (server, config) = server_beside_the_cli(&database).await;
    let client = crate::mcp_support::modern_client(&server.url).await;
    server_read(&client, "the server's first call").await;

    const COMMANDS: usize = 8;
    let commands: Vec<_> = (0..COMMANDS)
        .map(|_| cli_delete(&config).output())
        .collect();
    let (outputs, ()) = tokio::join!(futures::future::join_all(commands), async {
        for i in 0..4 {
            server_read(&client, &format!("server call {i} while the commands run")).await;
        }
    });
    let failed: Vec<String> = outputs
        .iter()
        .map(|out| out.as_ref().unwrap())
        .filter(|out| !out.status.success())
        .map(describe)
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {COMMANDS} commands failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
    server_read(&client, "the server's call after the commands").await;

    // One stream per command, each its intent and outcome; the server's own.
    let streams = streams(&pool).await;
    assert_eq!(streams.len(), COMMANDS + 1, "{streams:?}");
    assert!(streams.contains(&("pod-1".to_owned(), 6)), "{streams:?}");
    assert!(
        streams
            .iter()
            .filter(|(s, _)| s != "pod-1")
            .all(|(s, n)| s.starts_with("pod-1.") && *n == 2),
        "{streams:?}"
    );
    let outcomes: i64 = query_scalar(
        "SELECT count(*) FROM audit_events WHERE tool = 'query' AND phase = 'outcome' AND outcome = 'ok'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(outcomes, COMMANDS as i64);

    let (ok, out) = verify_cli(&config).await;
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!(
            "ok: {} records in {} streams",
            6 + 2 * COMMANDS,
            COMMANDS + 1
        )),
        "{out}"
    );
}
