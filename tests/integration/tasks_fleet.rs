//! MCP tasks across a fleet: two `querygate serve` replicas behind nginx sharing PostgreSQL.
//! A lifecycle operation whose upstream operation runs long is made a task on one replica;
//! the other answers `tasks/get` for it (directly and through nginx); another tenant's and
//! another principal's `tasks/get` find no such task; the replica running it is killed
//! (SIGKILL) while it polls; the other takes the expired lease over, resumes polling from
//! the stored operation handle and finishes the task: exactly one write reached the
//! upstream. A task is cancelled through the other replica; a client without the extension
//! waits through nginx as before.
//!
//! Needs nginx and PostgreSQL (`scripts/test.sh`); without them the test says it is
//! skipped, under `CI=true` it fails instead.

use std::time::Duration;

use serde_json::json;
use sqlx_core::query_scalar::query_scalar;
use sqlx_postgres::Postgres;

use crate::mcp_support::install_crypto_provider;
use crate::mock::Mock;
use crate::support::fleet::{Nginx, Replica, nginx_binary};
use crate::support::identity::{JwksServer, SigningKey, now};
use crate::support::ports::restartable_port;
use crate::support::tasks::{
    Rpc, operation, operation_path, route_job, run_path, task_id, write_registry,
};
use crate::support::wait::eventually;
use crate::support::{SECRET, pg, required};

const ISSUER: &str = "https://idp.tasks.test";
const RESOURCE: &str = "https://querygate.tasks.test/mcp";

#[tokio::test]
async fn a_task_survives_the_replica_running_it() {
    install_crypto_provider();
    let Some(nginx_bin) = nginx_binary() else {
        assert!(!required(), "nginx is required under CI");
        eprintln!("skipped: nginx is not installed");
        return;
    };
    let Some(database) = pg::fresh_database().await else {
        assert!(!required(), "PostgreSQL is required under CI");
        eprintln!("skipped: no PostgreSQL test cluster");
        return;
    };
    let pool = database.pool(2).await;
    querygate::db::migrate(&pool).await.unwrap();

    let mock = Mock::start().await;
    let key = SigningKey::new("tasks");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let token = |sub: &str, tenant: &str| {
        key.sign(
            &json!({"iss": ISSUER, "aud": RESOURCE, "sub": sub, "tenant": tenant,
            "exp": now() + 3600, "iat": now()}),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let root = write_registry(dir.path());
    let env = dir.path().join("creds.env");
    std::fs::write(&env, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
    let ports: Vec<u16> = (0..2).map(|_| restartable_port()).collect();
    let nginx_port = restartable_port();
    let hosts: Vec<String> = std::iter::once(nginx_port)
        .chain(ports.iter().copied())
        .map(|p| format!("'127.0.0.1:{p}'"))
        .collect();
    let mut replicas = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let name = format!("r{i}");
        let yaml = format!(
            "registry:\n  root: {root}\nproviders:\n  opsapi:\n    base_url: {mock}\n\
credentials:\n  env_file: {env}\n  process_env: false\n\
tenants:\n  - id: default\n    mode: full_access\n  - id: other\n    mode: full_access\n\
server:\n  listen: 127.0.0.1:{port}\n  allowed_hosts: [{hosts}]\n\
auth:\n  resource: {RESOURCE}\n  authorization_servers: [{ISSUER}]\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        jwks_url: {jwks}\n        algorithms: [ES256]\n        tenants: [default, other]\n\
audit:\n  file:\n    dir: {audit}\n\
upstream:\n  await_operations:\n    poll_interval: 50ms\n\
tasks:\n  lease: 1s\n  poll_interval: 100ms\n\
database:\n  url: {db}\n",
            root = root.display(),
            mock = mock.url(),
            env = env.display(),
            hosts = hosts.join(", "),
            jwks = jwks.url,
            audit = dir.path().join(format!("audit-{name}")).display(),
            db = database.url,
        );
        let config = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&config, yaml).unwrap();
        replicas.push(Replica::spawn(&config, *port, &name).await);
    }
    let nginx = Nginx::start(nginx_bin, nginx_port, ports.clone()).await;
    let direct = |i: usize| format!("http://127.0.0.1:{}/mcp", ports[i]);
    let balanced = format!("{}/mcp", nginx.url());

    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let (alice, carol, bob) = (
        token("alice", "default"),
        token("carol", "default"),
        token("bob", "other"),
    );
    let as_alice = Rpc {
        http: &http,
        token: Some(&alice),
        tasks: true,
    };

    // The operation runs until the test lets it finish.
    mock.route(
        &format!("POST {}", run_path("k")),
        operation(&mock, "k", false),
    );
    mock.route(&operation_path("k"), operation(&mock, "k", false));
    let id = task_id(&as_alice.exec(&direct(0), "k").await);

    // Any replica answers for it: the other one directly, and both through nginx.
    for url in [direct(1), balanced.clone(), balanced.clone()] {
        let got = as_alice.get(&url, &id).await;
        assert_eq!(got["result"]["status"], "working", "{url}: {got}");
    }
    // Nobody else finds it: another tenant, or another principal of the same tenant.
    for other in [&bob, &carol] {
        let stranger = Rpc {
            http: &http,
            token: Some(other),
            tasks: true,
        };
        for url in [direct(0), direct(1)] {
            let refused = stranger.get(&url, &id).await;
            assert_eq!(refused["error"]["code"], -32602, "{url}: {refused}");
            let cancel = stranger
                .send(&url, "tasks/cancel", json!({"taskId": id}))
                .await;
            assert_eq!(cancel["error"]["code"], -32602, "{url}: {cancel}");
        }
    }

    // The operation's handle is stored; then the replica running the task dies mid-poll.
    eventually(
        "the operation handle to be stored",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || async {
            query_scalar::<Postgres, bool>(
                "SELECT handle IS NOT NULL FROM mcp_tasks WHERE task_id = $1",
            )
            .bind(&id)
            .fetch_one(&pool)
            .await
            .unwrap_or(false)
        },
    )
    .await;
    mock.wait_for(
        &operation_path("k"),
        2,
        Duration::from_secs(10),
        "polls by r0",
    )
    .await;
    let mut dead = replicas.remove(0);
    dead.child.kill().await.unwrap();
    nginx.set_down(&[ports[0]]);
    let polled_before = mock.count(&operation_path("k"));
    mock.route(&operation_path("k"), operation(&mock, "k", true));

    // The other replica takes the lease over and finishes the task from the handle.
    let done = as_alice
        .finished(&direct(1), &id, Duration::from_secs(30))
        .await;
    let result = &done["result"];
    assert_eq!(result["status"], "completed", "{done}");
    assert_eq!(result["result"]["isError"], false, "{done}");
    let messages = result["result"]["structuredContent"]["messages"].to_string();
    assert!(
        messages.contains("operation op-k completed") && messages.contains("not sent again"),
        "{done}"
    );
    assert_eq!(mock.count(&run_path("k")), 1, "exactly one write upstream");
    assert!(
        mock.count(&operation_path("k")) > polled_before,
        "r1 polled"
    );
    let again = as_alice.get(&balanced, &id).await;
    assert_eq!(again["result"]["status"], "completed", "{again}");

    // Cancel through nginx a task made through nginx.
    mock.route(
        &format!("POST {}", run_path("m")),
        operation(&mock, "m", false),
    );
    mock.route(&operation_path("m"), operation(&mock, "m", false));
    let cancelled = task_id(&as_alice.exec(&balanced, "m").await);
    let ack = as_alice
        .send(&balanced, "tasks/cancel", json!({"taskId": cancelled}))
        .await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let got = as_alice.get(&direct(1), &cancelled).await;
    assert_eq!(got["result"]["status"], "cancelled", "{got}");

    // A client without the extension waits, as before.
    route_job(&mock, "w", 2);
    let waits = Rpc {
        http: &http,
        token: Some(&alice),
        tasks: false,
    };
    let reply = waits.exec(&balanced, "w").await;
    assert_ne!(reply["result"]["resultType"], "task", "{reply}");
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    assert_eq!(mock.count(&run_path("w")), 1);

    for replica in replicas {
        replica.stop().await;
    }
    pool.close().await;
}

/// The PostgreSQL store on its own: of replicas claiming the same expired task at once,
/// exactly one gets it; the task ends once, by its holder; nobody but its owner finds it.
#[tokio::test]
async fn one_replica_takes_over_an_expired_task() {
    use querygate::tasks::{
        Finish, PgTaskStore, TaskCall, TaskOwner, TaskRecord, TaskState, TaskStore,
    };
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = database.pool(8).await;
    querygate::db::migrate(&pool).await.unwrap();
    let store = std::sync::Arc::new(PgTaskStore::new(pool.clone()));
    let owner = TaskOwner {
        tenant: "acme".into(),
        method: "jwt".into(),
        issuer: ISSUER.into(),
        subject: "alice".into(),
    };
    let record = TaskRecord {
        id: "t-1".into(),
        owner: owner.clone(),
        call: TaskCall {
            tool: "run_lifecycle_operation".into(),
            arguments: serde_json::Map::new(),
            groups: Vec::new(),
            fingerprint: None,
            call_id: None,
        },
        state: TaskState::Working,
        handle: None,
        result: None,
        status_message: None,
        cancel_requested: false,
        replica: "gone".into(),
        lease_until_ms: 1_000,
        created_ms: 500,
        updated_ms: 500,
    };
    store.create(&record, 10).await.unwrap();
    let claims = futures::future::join_all((0..6).map(|i| {
        let store = store.clone();
        async move {
            store
                .claim_expired(&format!("r{i}"), 2_000, 9_000)
                .await
                .unwrap()
        }
    }))
    .await;
    let winners: Vec<TaskRecord> = claims.into_iter().flatten().collect();
    assert_eq!(winners.len(), 1, "{winners:?}");
    let holder = winners[0].replica.clone();
    let done = Finish {
        state: TaskState::Completed,
        result: Some(json!({"content": [], "isError": false})),
        status_message: None,
    };
    assert!(!store.finish("t-1", "gone", &done, 2_500).await.unwrap());
    assert!(store.finish("t-1", &holder, &done, 2_500).await.unwrap());
    assert!(!store.finish("t-1", &holder, &done, 2_600).await.unwrap());
    let got = store.get(&owner, "t-1").await.unwrap().unwrap();
    assert_eq!(got.state, TaskState::Completed);
    assert_eq!(got.result, done.result);
    let stranger = TaskOwner {
        subject: "bob".into(),
        ..owner.clone()
    };
    assert!(store.get(&stranger, "t-1").await.unwrap().is_none());
    assert!(
        store
            .cancel(&stranger, "t-1", 3_000)
            .await
            .unwrap()
            .is_none()
    );
    pool.close().await;
}
