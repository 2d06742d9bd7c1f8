//! Provenance of upstream calls: every request to a provider carries
//! `User-Agent: querygate/<version>`, and the request ids the upstream answered with are in
//! the call's audit outcome record (bounded, cut and escaped), so that an auditor can join
//! the call to the provider's own log.

use querygate::audit::{FailureMode, Phase};
use serde_json::json;

use crate::mock::Reply;
use crate::support::audited::{file_auditor, records, start};
use crate::support::gate::{Approver, SELECT, approver_client, run};

#[tokio::test]
async fn upstream_requests_carry_the_user_agent_and_their_ids_reach_the_audit() {
    let audit_dir = tempfile::tempdir().unwrap();
    let (auditor, _sink) = file_auditor(audit_dir.path(), FailureMode::Strict);
    let server = start("read_only", "", auditor).await;
    let hostile = format!("req\t{}", "z".repeat(300));
    server.mock.route_sequence(
        "/orgs/acme/items",
        vec![
            Reply::json(json!([{"id": 1}]))
                .header("x-ms-request-id", "0f4b6c1e-8a2d-4c55-9e1a-6d2b7f3c9a10")
                .header("x-request-id", "not-the-first-header"),
            Reply::json(json!([{"id": 2}])).header("x-amzn-RequestId", &hostile),
            Reply::json(json!([{"id": 3}])),
        ],
    );
    let client = approver_client(&server.url, Approver::new(None)).await;
    for _ in 0..3 {
        let result = run(&client, "run_select_query", SELECT).await;
        assert_ne!(result.is_error, Some(true), "{result:?}");
    }

    let agent = concat!("querygate/", env!("CARGO_PKG_VERSION"));
    let requests = server.mock.requests();
    assert_eq!(requests.len(), 3);
    for r in &requests {
        assert_eq!(
            r.headers.get("user-agent").and_then(|v| v.to_str().ok()),
            Some(agent)
        );
    }

    let outcomes: Vec<Option<Vec<String>>> = records(audit_dir.path())
        .into_iter()
        .filter(|r| r.record.phase == Phase::Outcome && r.record.tool == "run_select_query")
        .map(|r| r.record.upstream_request_ids)
        .collect();
    let cut: String = format!("x-amzn-requestid=req\\u{{9}}{}", "z".repeat(300))
        .chars()
        .take(128)
        .collect();
    assert_eq!(
        outcomes,
        vec![
            Some(vec![
                "x-ms-request-id=0f4b6c1e-8a2d-4c55-9e1a-6d2b7f3c9a10".to_owned()
            ]),
            Some(vec![cut]),
            None,
        ]
    );
}
