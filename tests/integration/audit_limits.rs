//! Bounded records and a visible failing sink: a statement with a 3 MB literal makes a
//! record of tens of KiB (the SQL once, cut, digested), and an audit sink that cannot write
//! (a full disk) shows in `/readyz`, `/metrics` and the log rather than only in the
//! refusals every tenant gets.

use std::sync::Arc;
use std::time::Duration;

use querygate::audit::FailureMode;
use querygate::audit::limits::MAX_SQL_BYTES;
use querygate::audit::memory::MemorySink;
use querygate::config::{Config, Sources};
use sha2::{Digest as _, Sha256};

use crate::mcp_support::{error_code, install_crypto_provider, test_config};
use crate::mock::Mock;
use crate::support::audited::{file_auditor, records, start};
use crate::support::gate::{Approver, approver_client, run};

#[tokio::test]
async fn a_huge_literal_makes_a_small_record_that_names_what_was_cut() {
    let audit_dir = tempfile::tempdir().unwrap();
    let (auditor, _sink) = file_auditor(audit_dir.path(), FailureMode::Strict);
    let server = start("read_only", "", auditor).await;
    let client = approver_client(&server.url, Approver::new(None)).await;
    let literal = "x".repeat(3 * 1024 * 1024);
    let sql = format!("SELECT id FROM testapi.items.items WHERE org = '{literal}'");
    let _ = run(&client, "run_select_query", &sql).await;

    let all = records(audit_dir.path());
    assert_eq!(all.len(), 1);
    let bytes: u64 = std::fs::read_dir(audit_dir.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(bytes < 100 * 1024, "{bytes} bytes of audit for one call");
    let r = &all[0].record;
    let kept = r.sql.as_deref().unwrap();
    assert!(kept.len() <= MAX_SQL_BYTES && sql.starts_with(kept));
    let digest = querygate::digest::sha256_hex(sql.as_bytes());
    assert_eq!(r.sql_sha256.as_deref(), Some(digest.as_str()));
    let cut = &r.cut.as_ref().expect("a cut field")["sql"];
    assert_eq!(cut.bytes, sql.len() as u64);
    assert_eq!(cut.sha256, format!("{:x}", Sha256::digest(sql.as_bytes())));
    assert!(
        r.args.as_ref().is_none_or(|a| a.get("sql").is_none()),
        "the SQL once"
    );
}

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn a_sink_that_cannot_write_takes_the_replica_out_of_readiness_until_it_writes_again() {
    install_crypto_provider();
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = test_config(&mock, dir.path(), "read_only", "");
    // The configured folder exists and takes probe files; the injected sink is what fails.
    std::fs::create_dir_all(dir.path().join("audit")).unwrap();
    let config = Config::load(&Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap();
    let sink = Arc::new(MemorySink::new("r1"));
    let auditor = querygate::audit::Auditor::new(sink.clone(), FailureMode::Strict, "r1", None);
    let app = querygate::app::App::builder(config)
        .audit(Some(auditor))
        .build()
        .await
        .unwrap();
    let url = app.mcp_url();
    let base = url.trim_end_matches("/mcp").to_owned();
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(app.run_until(async move { stopped.cancelled().await }));
    let client = approver_client(&url, Approver::new(None)).await;
    let select = "SELECT id FROM testapi.items.items WHERE org = 'acme'";
    mock.route(
        "/orgs/acme/items",
        crate::mock::Reply::json(serde_json::json!([{"id": 1}])),
    );
    assert_ne!(
        run(&client, "run_select_query", select).await.is_error,
        Some(true)
    );
    let (status, body) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, 200, "{body}");

    // The disk is full: every call is refused (strict), and the operator sees it.
    sink.set_failing(true);
    let refused = run(&client, "run_select_query", select).await;
    assert_eq!(error_code(&refused), "audit.unavailable");
    let (status, body) = wait_for_readyz(&base, 503).await;
    assert_eq!(status, 503);
    assert!(body.contains("\"audit\":\"write failing\""), "{body}");
    let (_, metrics) = get(&format!("{base}/metrics")).await;
    assert!(
        metrics.contains("querygate_audit_write_failures_total{sink=\"memory\"} 1"),
        "{metrics}"
    );

    // Space again: the next write succeeds and the replica is ready.
    sink.set_failing(false);
    assert_ne!(
        run(&client, "run_select_query", select).await.is_error,
        Some(true)
    );
    let (status, body) = wait_for_readyz(&base, 200).await;
    assert_eq!(status, 200, "{body}");
    stop.cancel();
}

/// `/readyz` until it answers `want` (its result is cached for a second), at most 10 s.
async fn wait_for_readyz(base: &str, want: u16) -> (u16, String) {
    let url = format!("{base}/readyz");
    crate::support::wait::eventually(
        &format!("{url} answering {want}"),
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            let (status, body) = get(&url).await;
            if status == want {
                Ok((status, body))
            } else {
                Err((status, body))
            }
        },
    )
    .await
}
