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

use std::path::{Path, PathBuf};
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
use tokio::io::AsyncBufReadExt as _;

use crate::mcp_support::{error_code, install_crypto_provider, terminate, text_of};
use crate::mock::{Mock, Reply};
use crate::support::gate::{Approver, ApproverClient, SELECT, params};
use crate::support::ports::restartable_port;
use crate::support::wait::{try_eventually, try_eventually_blocking};
use crate::support::{SECRET, fixture_registry, pg};

/// Whether a missing prerequisite must fail the test (CI) rather than skip it.
pub(crate) fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The nginx binary: on PATH or Debian's `/usr/sbin/nginx`.
pub(crate) fn nginx_binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nginx"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let debian = PathBuf::from("/usr/sbin/nginx");
        debian.is_file().then_some(debian)
    })
}

/// A running `nginx -p DIR -c nginx.conf` (`daemon off`), stopped when dropped.
pub(crate) struct Nginx {
    dir: tempfile::TempDir,
    port: u16,
    upstreams: Vec<u16>,
    child: tokio::process::Child,
}

impl Nginx {
    /// Starts nginx on 127.0.0.1:`port` in front of the replicas on `upstreams`.
    pub(crate) async fn start(binary: PathBuf, port: u16, upstreams: Vec<u16>) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        write_conf(dir.path(), port, &upstreams, &[]);
        // `nginx -t` first: a bad configuration fails with its message.
        let test = std::process::Command::new(&binary)
            .arg("-p")
            .arg(dir.path())
            .args(["-c", "nginx.conf", "-t"])
            .output()
            .unwrap();
        assert!(
            test.status.success(),
            "nginx -t: {}",
            String::from_utf8_lossy(&test.stderr)
        );
        let child = tokio::process::Command::new(&binary)
            .arg("-p")
            .arg(dir.path())
            .args(["-c", "nginx.conf"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let nginx = Nginx {
            dir,
            port,
            upstreams,
            child,
        };
        let listens = try_eventually(Duration::from_secs(10), Duration::from_millis(50), || {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
        })
        .await;
        assert!(listens.is_ok(), "nginx listens: {}", nginx.error_log());
        nginx
    }

    /// Rewrites the upstream with the replicas in `down` left out, and reloads.
    fn set_down(&self, down: &[u16]) {
        write_conf(self.dir.path(), self.port, &self.upstreams, down);
        let pid = self.child.id().unwrap().to_string();
        let status = std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap();
        assert!(status.success(), "nginx reload");
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for Nginx {
    /// Stops nginx with TERM, so its master stops the worker first: a KILL of the master
    /// would leave the worker running, holding the port. KILL only if it has not ended.
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            let ended =
                try_eventually_blocking(Duration::from_secs(5), Duration::from_millis(20), || {
                    matches!(self.child.try_wait(), Ok(Some(_)))
                });
            if ended.is_ok() {
                return;
            }
        }
        let _ = self.child.start_kill();
    }
}

fn write_conf(dir: &Path, port: u16, upstreams: &[u16], down: &[u16]) {
    let servers: String = upstreams
        .iter()
        .map(|p| {
            let down = if down.contains(p) { " down" } else { "" };
            format!("    server 127.0.0.1:{p} max_fails=1 fail_timeout=1s{down};\n")
        })
        .collect();
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    // As root, workers would run as `nobody`, who cannot enter the temporary folder.
    let user = if root { "user root;\n" } else { "" };
    let d = dir.display();
    let conf = format!(
        "{user}daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
events {{ worker_connections 1024; }}\n\
http {{\n\
  access_log {d}/access.log;\n\
  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n\
  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
  upstream querygate {{\n{servers}    keepalive 16;\n    keepalive_timeout 3s;\n  }}\n\
  server {{\n    listen 127.0.0.1:{port};\n    location / {{\n\
      proxy_pass http://querygate;\n      proxy_http_version 1.1;\n\
      proxy_set_header Connection \"\";\n      proxy_set_header Host $http_host;\n\
      proxy_next_upstream error timeout;\n      proxy_connect_timeout 2s;\n\
      proxy_read_timeout 60s;\n    }}\n  }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
}

/// What every replica shares.
struct Fleet {
    mock: Mock,
    key: PathBuf,
    database_url: String,
    nginx_port: u16,
    dir: tempfile::TempDir,
}

/// One `querygate serve` process; its stderr is kept for diagnostics.
pub(crate) struct Replica {
    pub(crate) port: u16,
    pub(crate) name: String,
    pub(crate) child: tokio::process::Child,
    pub(crate) log: Arc<Mutex<Vec<String>>>,
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
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_querygate"))
            .arg("--config")
            .arg(&config)
            .arg("serve")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let kept = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                kept.lock().unwrap().push(line);
            }
        });
        let replica = Replica {
            port,
            name: name.to_owned(),
            child,
            log,
        };
        replica.wait_ready().await;
        replica
    }
}

impl Replica {
    async fn readyz(&self) -> Option<u16> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        client
            .get(format!("http://127.0.0.1:{}/readyz", self.port))
            .send()
            .await
            .ok()
            .map(|r| r.status().as_u16())
    }

    pub(crate) async fn wait_ready(&self) {
        let ready = try_eventually(
            Duration::from_secs(30),
            Duration::from_millis(50),
            || async { self.readyz().await == Some(200) },
        )
        .await;
        assert!(
            ready.is_ok(),
            "{} becomes ready: {:?}",
            self.name,
            self.log.lock().unwrap()
        );
    }

    /// SIGTERM, then the exit status (must be 0).
    async fn stop(mut self) {
        terminate(&self.child);
        let status = tokio::time::timeout(Duration::from_secs(40), self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} exits after its drain: {:?}",
                    self.name,
                    self.log.lock().unwrap()
                )
            })
            .unwrap();
        assert!(
            status.success(),
            "{} exits 0: {status}: {:?}",
            self.name,
            self.log.lock().unwrap()
        );
        let log = self.log.lock().unwrap();
        assert!(
            !log.iter().any(|l| l.contains("drain timeout")),
            "{}: {log:?}",
            self.name
        );
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
    tokio::time::sleep(Duration::from_secs(2)).await;
    let restarts_started = Instant::now();
    for round in 1..=2 {
        follow.store(round == 1, Ordering::SeqCst);
        for (i, port) in ports.iter().enumerate() {
            let old = replicas[i].take().unwrap();
            old.stop().await;
            replicas[i] = Some(fleet.spawn(*port, &format!("r{i}-{round}")).await);
            // Let nginx put it back before the next one leaves.
            tokio::time::sleep(Duration::from_millis(800)).await;
        }
    }
    let restarts_took = restarts_started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
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
