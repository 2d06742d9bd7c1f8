//! Three `querygate serve` replicas behind a real nginx (round robin, upstream keep-alive),
//! sharing an approval key ring and PostgreSQL (approval store and audit), restarted one at a
//! time with SIGTERM under a steady mixed load: reads, approved writes (the approval issued by
//! one replica is often redeemed on another) and refusals. Nothing may fail: every call is
//! answered, is in the audit exactly once, and no write reaches the upstream twice.
//!
//! nginx open source has no active health checks. In a first round of restarts the test
//! plays the platform's part the way Kubernetes does with a Service: it polls each replica's
//! `/readyz` and takes a replica that is not ready out of the upstream (`down`, then a
//! reload), and puts it back once ready. In a second round nginx is alone: it keeps sending
//! to a draining replica (answered, with `Connection: close`) until its listener closes, and
//! retries refused connections on the next replica. Clients open a connection per call, as
//! nginx reloads close idle client connections.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::ElicitationAction;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::json;
use sqlx_core::query_as::query_as;
use sqlx_core::query_scalar::query_scalar;

use crate::mcp_support::{error_code, install_crypto_provider, text_of};
use crate::mock::{Mock, Reply};
use crate::support::gate::{Approver, ApproverClient, SELECT, params};
use crate::support::ports::restartable_port;
use crate::support::{SECRET, fixture_registry, pg, required};

use crate::support::fleet::*;

/// What every replica shares.
struct Fleet {
    mock: Mock,
    key: PathBuf,
    database_url: String,
    nginx_port: u16,
    dir: tempfile::TempDir,
}

impl Fleet {
    async fn spawn(&self, port: u16, name: &str) -> Replica {
        let env_file = self.dir.path().join("creds.env");
        std::fs::write(&env_file, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
        let yaml = format!(
            "registry:\n  root: {}\nproviders:\n  testapi:\n    base_url: {}\n\
credentials:\n  env_file: {}\n  process_env: false\n\
tenants:\n  - id: default\n    mode: safe\n\
server:\n  listen: 127.0.0.1:{port}\n  allowed_hosts: ['127.0.0.1:{}']\n  drain:\n    delay: 1500ms\n    timeout: 20s\n\
approval:\n  key_files: [{}]\n  store: postgres\n\
audit:\n  sink: postgres\n  replica: {name}\n\
database:\n  url: {}\n",
            fixture_registry().display(),
            self.mock.url(),
            env_file.display(),
            self.nginx_port,
            self.key.display(),
            self.database_url,
        );
        let config = self.dir.path().join(format!("{name}.yaml"));
        std::fs::write(&config, yaml).unwrap();
        Replica::spawn(&config, port, name).await
    }
}

/// A client through nginx, opening a connection per request.
async fn client(url: &str, approver: Approver) -> ApproverClient {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let transport = StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
    );
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![approver.version.clone()],
    };
    approver
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .expect("client starts through nginx")
}

/// What the clients saw.
#[derive(Default)]
struct Tally {
    reads: AtomicUsize,
    writes: Mutex<Vec<String>>,
    refusals: AtomicUsize,
    failures: Mutex<Vec<String>>,
}

/// How many calls of each kind succeeded (or were refused as expected) so far.
#[derive(Clone, Default)]
struct Counts {
    reads: usize,
    writes: usize,
    refusals: usize,
    /// Not waited for; shown when a wait fails.
    failures: usize,
}

impl Tally {
    fn counts(&self) -> Counts {
        Counts {
            reads: self.reads.load(Ordering::SeqCst),
            writes: self.writes.lock().unwrap().len(),
            refusals: self.refusals.load(Ordering::SeqCst),
            failures: self.failures.lock().unwrap().len(),
        }
    }

    /// Waits until every kind of call has answered [`LOAD_STEP`] more times than `since`.
    async fn wait_for_more(&self, since: &Counts, what: &str) {
        crate::support::wait::eventually(
            what,
            Duration::from_secs(60),
            Duration::from_millis(20),
            || {
                let now = self.counts();
                std::future::ready(
                    if now.reads >= since.reads + LOAD_STEP
                        && now.writes >= since.writes + LOAD_STEP
                        && now.refusals >= since.refusals + LOAD_STEP
                    {
                        Ok(())
                    } else {
                        Err(format!(
                            "{} reads, {} writes, {} refusals, {} failures",
                            now.reads, now.writes, now.refusals, now.failures
                        ))
                    },
                )
            },
        )
        .await;
    }
}

/// How many more answers of each kind show the load flowing.
const LOAD_STEP: usize = 5;

#[derive(Clone, Copy)]
enum Kind {
    Read,
    Write,
    Refused,
}

/// Calls of `kind` in a loop until `stop`; every answer is checked.
async fn load(url: String, kind: Kind, worker: usize, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let answer = match kind {
        Kind::Refused => None,
        _ => Some(ElicitationAction::Accept),
    };
    let client = client(&url, Approver::new(answer)).await;
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let (tool, sql, name) = match kind {
            Kind::Read => ("run_select_query", SELECT.to_owned(), String::new()),
            Kind::Write | Kind::Refused => {
                let name = format!("w-{worker}-{n}");
                let sql = format!(
                    "INSERT INTO testapi.widgets.widgets (org, name) VALUES ('acme', '{name}')"
                );
                ("run_mutation_query", sql, name)
            }
        };
        let result = client.call_tool(params(tool, &sql)).await;
        let problem = match (kind, result) {
            (_, Err(err)) => Some(format!("{tool} {sql}: {err}")),
            (Kind::Read, Ok(r)) if r.is_error != Some(true) => {
                tally.reads.fetch_add(1, Ordering::SeqCst);
                None
            }
            (Kind::Write, Ok(r)) if r.is_error != Some(true) => {
                tally.writes.lock().unwrap().push(name);
                None
            }
            (Kind::Refused, Ok(r)) if error_code(&r) == "policy.approval_required" => {
                tally.refusals.fetch_add(1, Ordering::SeqCst);
                None
            }
            (_, Ok(r)) => Some(format!("{tool} {sql}: {}", text_of(&r))),
        };
        if let Some(problem) = problem {
            tally.failures.lock().unwrap().push(problem);
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

/// Follows each replica's `/readyz` and takes the ones not ready out of nginx's upstream,
/// while `follow` is set (when it is not, every replica is in).
async fn follow_readiness(
    nginx: Arc<Nginx>,
    ports: Vec<u16>,
    follow: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> usize {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut down: Vec<u16> = Vec::new();
    let mut reloads = 0;
    while !stop.load(Ordering::SeqCst) {
        if !follow.load(Ordering::SeqCst) {
            if !down.is_empty() {
                nginx.set_down(&[]);
                reloads += 1;
                down.clear();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let mut now_down = Vec::new();
        for port in &ports {
            let ready = http
                .get(format!("http://127.0.0.1:{port}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().as_u16() == 200);
            if !ready {
                now_down.push(*port);
            }
        }
        if now_down != down {
            nginx.set_down(&now_down);
            reloads += 1;
            down = now_down;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    reloads
}

#[tokio::test]
async fn three_replicas_behind_nginx_restart_one_at_a_time_without_losing_a_call() {
    let Some(nginx_binary) = nginx_binary() else {
        assert!(
            !required(),
            "nginx is not installed: under CI the replica test must run (scripts/test.sh installs it)"
        );
        eprintln!("note: nginx not found; skipping the three-replica test");
        return;
    };
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = database.pool(2).await;
    querygate::db::migrate(&pool).await.unwrap();
    install_crypto_provider();

    let mock = Mock::start().await;
    mock.route("/orgs/acme/items", Reply::json(json!([{"id": 1}])));
    mock.route(
        "POST /orgs/acme/widgets",
        Reply::json(json!({"id": "w"}))
            .status_code(201)
            .delayed(Duration::from_millis(100)),
    );
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("approval.key");
    std::fs::write(
        &key,
        querygate::digest::hex(&querygate::digest::random_bytes(32).unwrap()),
    )
    .unwrap();
    let ports: Vec<u16> = (0..3).map(|_| restartable_port()).collect();
    // The replicas accept nginx's Host header (the clients'), so its port comes first.
    let nginx_port = restartable_port();
    let fleet = Fleet {
        mock,
        key,
        database_url: database.url.clone(),
        nginx_port,
        dir,
    };
    let mut replicas = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        replicas.push(Some(fleet.spawn(*port, &format!("r{i}-0")).await));
    }
    let nginx = Arc::new(Nginx::start(nginx_binary, nginx_port, ports.clone()).await);

    let stop_control = Arc::new(AtomicBool::new(false));
    let follow = Arc::new(AtomicBool::new(true));
    let controller = tokio::spawn(follow_readiness(
        nginx.clone(),
        ports.clone(),
        follow.clone(),
        stop_control.clone(),
    ));
    let stop_load = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let kinds = [
        Kind::Read,
        Kind::Read,
        Kind::Read,
        Kind::Write,
        Kind::Write,
        Kind::Refused,
    ];
    let workers: Vec<_> = kinds
        .iter()
        .enumerate()
        .map(|(worker, kind)| {
            tokio::spawn(load(
                nginx.url(),
                *kind,
                worker,
                stop_load.clone(),
                tally.clone(),
            ))
        })
        .collect();

    // Steady load first, then each replica in turn: SIGTERM, wait for its exit (0), start
    // its successor on the same port and wait until it is ready. Twice: first with the
    // platform following /readyz, then with nginx alone, which learns of a stopped replica
    // only from its refused connections (and retries those elsewhere).
    tally
        .wait_for_more(&Counts::default(), "steady load first")
        .await;
    let restarts_started = Instant::now();
    for round in 1..=2 {
        follow.store(round == 1, Ordering::SeqCst);
        for (i, port) in ports.iter().enumerate() {
            let old = replicas[i].take().unwrap();
            old.stop().await;
            replicas[i] = Some(fleet.spawn(*port, &format!("r{i}-{round}")).await);
            // Nginx puts it back before the next one leaves.
            nginx
                .wait_until_routing_to(*port, Duration::from_secs(30))
                .await;
        }
    }
    let restarts_took = restarts_started.elapsed();
    // The load goes on after the last restart.
    let after_restarts = tally.counts();
    tally
        .wait_for_more(&after_restarts, "load after the restarts")
        .await;
    stop_load.store(true, Ordering::SeqCst);
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(60), worker)
            .await
            .expect("load workers end")
            .unwrap();
    }
    stop_control.store(true, Ordering::SeqCst);
    let reloads = controller.await.unwrap();
    for replica in replicas.into_iter().flatten() {
        replica.stop().await;
    }

    let failures = tally.failures.lock().unwrap().clone();
    let reads = tally.reads.load(Ordering::SeqCst);
    let writes = tally.writes.lock().unwrap().clone();
    let refusals = tally.refusals.load(Ordering::SeqCst);
    eprintln!(
        "three replicas: {reads} reads, {} writes, {refusals} refusals; restarts took {restarts_took:?}; {reloads} nginx reloads",
        writes.len()
    );
    assert!(
        failures.is_empty(),
        "{} failed calls: {failures:#?}\nnginx: {}",
        failures.len(),
        nginx.error_log()
    );
    assert!(reads > 0 && !writes.is_empty() && refusals > 0);
    assert!(
        reloads >= 6,
        "each restart took a replica out and back: {reloads}"
    );

    // No write reached the upstream twice; every acknowledged one reached it once.
    let sent: Vec<String> = fleet
        .mock
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .map(|r| r.body_text())
        .collect();
    for name in &writes {
        let times = sent
            .iter()
            .filter(|b| b.contains(&format!("\"{name}\"")))
            .count();
        assert_eq!(times, 1, "{name} sent {times} times");
    }
    assert_eq!(
        sent.len(),
        writes.len(),
        "no write was sent that was not acknowledged"
    );

    // Every call is in the audit exactly once: one outcome record per round, no call id
    // twice. An approved write is two rounds (requested, then accepted).
    let rows: Vec<(String, String, i64, i64)> = query_as(
        "SELECT tool, decision, count(*), count(DISTINCT call_id) FROM audit_events \
         WHERE phase = 'outcome' GROUP BY tool, decision ORDER BY tool, decision",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let count = |tool: &str, decision: &str| {
        let row = rows
            .iter()
            .find(|(t, d, _, _)| t == tool && d == decision)
            .unwrap_or_else(|| panic!("{tool} {decision} in {rows:?}"));
        assert_eq!(row.2, row.3, "a call id recorded twice: {row:?}");
        row.2 as usize
    };
    assert_eq!(count("run_select_query", "allow"), reads, "{rows:?}");
    assert_eq!(
        count("run_mutation_query", "needs_approval_accepted"),
        writes.len(),
        "{rows:?}"
    );
    assert_eq!(
        count("run_mutation_query", "needs_approval_requested"),
        writes.len(),
        "{rows:?}"
    );
    assert_eq!(
        count("run_mutation_query", "needs_approval_unavailable"),
        refusals,
        "{rows:?}"
    );
    assert_eq!(rows.len(), 4, "no other kind of record: {rows:?}");
    let failed: i64 = query_scalar(
        "SELECT count(*) FROM audit_events WHERE phase = 'outcome' AND outcome <> 'ok' \
         AND decision <> 'needs_approval_unavailable' AND decision <> 'needs_approval_requested'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(failed, 0);
    // Approvals crossed replicas: issued by one, redeemed on another.
    let crossed: i64 = query_scalar(
        "SELECT count(*) FROM audit_events a JOIN audit_events b ON a.approval_id = b.approval_id \
         WHERE a.phase = 'outcome' AND a.decision = 'needs_approval_requested' \
         AND b.phase = 'outcome' AND b.decision = 'needs_approval_accepted' \
         AND a.replica <> b.replica",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        crossed > 0,
        "some approvals were redeemed on another replica"
    );
    let report = querygate::audit::verify::verify_database(&pool)
        .await
        .unwrap();
    assert!(report.ok(), "{}", report.render());
}
