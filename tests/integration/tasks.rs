//! MCP tasks on one replica (tasks in memory): a lifecycle operation whose upstream
//! operation finishes after several polls answers a client that declared the tasks
//! extension with a task at once; `tasks/get` gives the result once the operation is done,
//! with exactly one write upstream; a cancelled task stays cancelled; the audit records
//! carry the task's id; a client without the extension waits for the result as before.

use std::time::Duration;

use serde_json::{Value, json};

use crate::mcp_support::{TestServer, start_yaml};
use crate::support::SECRET;
use crate::support::tasks::{
    Rpc, operation, operation_path, route_job, run_path, task_id, write_registry,
};
use crate::support::wait::eventually;

async fn server() -> TestServer {
    server_in("full_access").await
}

async fn server_in(mode: &'static str) -> TestServer {
    start_yaml(move |mock, dir| {
        let root = write_registry(dir);
        let env = dir.join("creds.env");
        std::fs::write(&env, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
        format!(
            "registry:\n  root: {root}\nproviders:\n  opsapi:\n    base_url: {mock}\n\
credentials:\n  env_file: {env}\n  process_env: false\n\
audit:\n  file:\n    dir: {audit}\n\
tenants:\n  - id: default\n    mode: {mode}\n\
server:\n  listen: 127.0.0.1:0\n\
upstream:\n  await_operations:\n    poll_interval: 20ms\n\
tasks:\n  lease: 1s\n  poll_interval: 50ms\n\
telemetry:\n  metrics:\n    enabled: true\n",
            root = root.display(),
            env = env.display(),
            audit = dir.join("audit").display(),
        )
    })
    .await
}

fn audit_records(server: &TestServer) -> Vec<Value> {
    crate::support::audited::records(&server._dir.path().join("audit"))
        .into_iter()
        .map(|stored| serde_json::to_value(&stored.record).unwrap())
        .collect()
}

#[tokio::test]
async fn a_lifecycle_operation_runs_as_a_task_and_its_result_is_fetched() {
    let server = server().await;
    let http = reqwest::Client::new();
    let client = Rpc {
        http: &http,
        token: None,
        tasks: true,
    };
    route_job(&server.mock, "a", 3);
    let reply = client.exec(&server.url, "a").await;
    let id = task_id(&reply);
    assert!(
        reply["result"]["pollIntervalMs"].as_u64() == Some(50),
        "{reply}"
    );
    let done = client
        .finished(&server.url, &id, Duration::from_secs(20))
        .await;
    let result = &done["result"];
    assert_eq!(result["status"], "completed", "{done}");
    assert_eq!(result["result"]["isError"], false, "{done}");
    let messages = result["result"]["structuredContent"]["messages"].to_string();
    assert!(messages.contains("operation op-a completed"), "{done}");
    assert_eq!(server.mock.count(&run_path("a")), 1, "one write");
    assert_eq!(
        server.mock.count(&operation_path("a")),
        4,
        "three polls running, one done"
    );

    // The intent and the outcome records name the task.
    let records = audit_records(&server);
    let of_task: Vec<&Value> = records
        .iter()
        .filter(|r| r["task_id"] == json!(id))
        .collect();
    let phases: Vec<&str> = of_task
        .iter()
        .map(|r| r["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["intent", "outcome"], "{records:?}");
    assert_eq!(of_task[1]["outcome"], "ok", "{records:?}");

    // The same task is not found by a request without the extension (rmcp refuses it).
    let without = Rpc {
        http: &http,
        token: None,
        tasks: false,
    };
    let refused = without.get(&server.url, &id).await;
    assert!(refused["error"].is_object(), "{refused}");
    // An unknown id is no task.
    let unknown = client.get(&server.url, "not-a-task").await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    // server_info says tasks are on, kept in memory; the metrics count the task's states.
    let info = client
        .send(
            &server.url,
            "tools/call",
            json!({"name": "server_info", "arguments": {}}),
        )
        .await;
    assert_eq!(
        info["result"]["structuredContent"]["tasks"], "memory",
        "{info}"
    );
    let metrics = http
        .get(server.url.replace("/mcp", "/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "querygate_tasks_total{state=\"working\"} 1",
        "querygate_tasks_total{state=\"completed\"} 1",
        "querygate_tasks_total{state=\"cancelled\"} 0",
    ] {
        assert!(metrics.contains(line), "{line}: {metrics}");
    }
}

#[tokio::test]
async fn a_client_without_the_extension_waits_for_the_result() {
    let server = server().await;
    let http = reqwest::Client::new();
    let client = Rpc {
        http: &http,
        token: None,
        tasks: false,
    };
    route_job(&server.mock, "b", 2);
    let reply = client.exec(&server.url, "b").await;
    let result = &reply["result"];
    assert_ne!(result["resultType"], "task", "{reply}");
    assert_eq!(result["isError"], false, "{reply}");
    assert!(
        result["structuredContent"]["messages"]
            .to_string()
            .contains("operation op-b completed"),
        "{reply}"
    );
    assert_eq!(server.mock.count(&run_path("b")), 1);
    assert_eq!(server.mock.count(&operation_path("b")), 3);
}

#[tokio::test]
async fn a_cancelled_task_stops_and_stays_cancelled() {
    let server = server().await;
    let http = reqwest::Client::new();
    let client = Rpc {
        http: &http,
        token: None,
        tasks: true,
    };
    // The operation never finishes.
    server.mock.route(
        &format!("POST {}", run_path("c")),
        operation(&server.mock, "c", false),
    );
    server
        .mock
        .route(&operation_path("c"), operation(&server.mock, "c", false));
    let id = task_id(&client.exec(&server.url, "c").await);
    server
        .mock
        .wait_for(
            &operation_path("c"),
            1,
            Duration::from_secs(10),
            "a first poll",
        )
        .await;
    let ack = client
        .send(&server.url, "tasks/cancel", json!({"taskId": id}))
        .await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let got = client.get(&server.url, &id).await;
    assert_eq!(got["result"]["status"], "cancelled", "{got}");
    // The call stops: its outcome record (with the task's id) says so.
    let outcome = eventually(
        "the cancelled call's outcome record",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            let found = audit_records(&server)
                .into_iter()
                .find(|r| r["task_id"] == json!(id) && r["phase"] == "outcome");
            async move { found }
        },
    )
    .await;
    // The write was sent and its operation goes on upstream: the outcome is unknown.
    assert_eq!(outcome["outcome"], "unknown", "{outcome}");
    assert_eq!(outcome["error_code"], "call.outcome_unknown", "{outcome}");
    // Cancelled stays cancelled.
    let again = client.get(&server.url, &id).await;
    assert_eq!(again["result"]["status"], "cancelled", "{again}");
}

#[tokio::test]
async fn a_call_the_gate_refuses_is_answered_as_before_and_names_no_task() {
    let server = server_in("read_only").await;
    let http = reqwest::Client::new();
    let client = Rpc {
        http: &http,
        token: None,
        tasks: true,
    };
    route_job(&server.mock, "r", 0);
    let reply = client.exec(&server.url, "r").await;
    let result = &reply["result"];
    assert_ne!(result["resultType"], "task", "{reply}");
    assert_eq!(result["isError"], true, "{reply}");
    assert_eq!(server.mock.count(&run_path("r")), 0, "nothing sent");
    let records = audit_records(&server);
    let outcome = records
        .iter()
        .find(|r| r["tool"] == "run_lifecycle_operation" && r["phase"] == "outcome")
        .unwrap_or_else(|| panic!("an outcome record: {records:?}"));
    assert!(outcome.get("task_id").is_none(), "{outcome}");
    assert_ne!(outcome["decision"], "allow", "{outcome}");
}

#[tokio::test]
async fn a_statement_that_waits_on_no_operation_is_answered_as_a_call_and_names_no_task() {
    let server = server().await;
    let http = reqwest::Client::new();
    let client = Rpc {
        http: &http,
        token: None,
        tasks: true,
    };
    let reply = client
        .send(
            &server.url,
            "tools/call",
            json!({"name": "run_select_query", "arguments": {"sql": "SELECT 41 + 1 AS n", "format": "json"}}),
        )
        .await;
    let result = &reply["result"];
    assert_ne!(result["resultType"], "task", "{reply}");
    assert_eq!(result["isError"], false, "{reply}");
    assert_eq!(
        result["structuredContent"]["rows"],
        json!([{"n": 42}]),
        "{reply}"
    );
    let records = audit_records(&server);
    let outcome = records
        .iter()
        .find(|r| r["tool"] == "run_select_query" && r["phase"] == "outcome")
        .unwrap_or_else(|| panic!("an outcome record: {records:?}"));
    assert!(outcome.get("task_id").is_none(), "{outcome}");
}
