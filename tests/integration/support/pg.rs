//! PostgreSQL for the tests: a fresh, uniquely named database per test on the throwaway
//! cluster that `scripts/test.sh` starts (`QUERYGATE_TEST_DATABASE_URL`, an admin URL), and
//! private clusters for tests that stop and restart their server.
//!
//! Without the variable a test prints a note and skips; under CI (`CI=true`) it fails.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use querygate::config::SecretUrl;
use querygate::db::PgPool;
use sqlx_core::query::query;
use sqlx_postgres::Postgres;

const URL_VAR: &str = "QUERYGATE_TEST_DATABASE_URL";

use super::required;

/// The admin URL of the test cluster, or `None` (with a note) when it is not set and we are
/// not under CI.
pub fn admin_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if required() => panic!(
            "{URL_VAR} is not set: under CI the PostgreSQL tests must run (scripts/test.sh starts a cluster)"
        ),
        _ => {
            eprintln!(
                "note: {URL_VAR} is not set; skipping a PostgreSQL test (run it through scripts/test.sh or scripts/pg-test-cluster.sh run -- cargo test)"
            );
            None
        }
    }
}

/// A database made for one test.
#[derive(Debug, Clone)]
pub struct TestDatabase {
    /// Its URL (admin role).
    pub url: String,
}

impl TestDatabase {
    /// A pool of `size` connections to it.
    pub async fn pool(&self, size: u32) -> PgPool {
        querygate::db::connect_url(&SecretUrl::new(&self.url), size, Duration::from_secs(10))
            .await
            .expect("connect to the test database")
    }
}

/// Creates a new, empty database on the test cluster; `None` when there is none (not CI).
pub async fn fresh_database() -> Option<TestDatabase> {
    let admin = admin_url()?;
    Some(create_database(&admin).await)
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

async fn create_database(admin: &str) -> TestDatabase {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let name = format!(
        "qg_test_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let pool = querygate::db::connect_url(&SecretUrl::new(admin), 1, Duration::from_secs(10))
        .await
        .expect("connect to the test cluster");
    query::<Postgres>(&format!("CREATE DATABASE {name}"))
        .execute(&pool)
        .await
        .expect("create a test database");
    pool.close().await;
    let mut url = url::Url::parse(admin).expect("admin URL");
    url.set_path(&format!("/{name}"));
    TestDatabase {
        url: url.to_string(),
    }
}

/// A PostgreSQL cluster of one test's own, so the test can stop and restart it without
/// disturbing others. Stopped and deleted on drop.
#[derive(Debug)]
pub struct PrivateCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    /// Its port on 127.0.0.1 (the same after a restart).
    pub port: u16,
}

impl PrivateCluster {
    /// Starts a new cluster; `None` when PostgreSQL is not available (not CI).
    pub fn start() -> Option<Self> {
        admin_url()?;
        let bin = PathBuf::from(
            std::env::var("QUERYGATE_TEST_PG_BIN")
                .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".to_owned()),
        );
        let dir = tempfile::Builder::new()
            .prefix("querygate-pg-private.")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let cluster = PrivateCluster {
            bin,
            port: super::ports::restartable_port(),
            dir,
        };
        if is_root() {
            let status = Command::new("chown")
                .args(["postgres:", cluster.dir.path().to_str().unwrap()])
                .status()
                .unwrap();
            assert!(status.success(), "chown the private cluster folder");
        }
        let data = cluster.data();
        let out = cluster
            .owner_command("initdb")
            .args([
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
            ])
            .args(["--locale=C.UTF-8"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.start_server();
        Some(cluster)
    }

    /// The admin URL of a new database on this cluster.
    pub async fn fresh_database(&self) -> TestDatabase {
        create_database(&self.admin_url()).await
    }

    /// The admin URL (database `postgres`).
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server at once (like a crash: connections are cut).
    pub fn stop(&self) {
        let out = self
            .owner_command("pg_ctl")
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the server again on the same port.
    pub fn start_server(&self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c port={} -c unix_socket_directories={}",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("server.log");
        let out = self
            .owner_command("pg_ctl")
            .args(["-D", &self.data(), "-l", log.to_str().unwrap()])
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.server_log()
        );
    }

    /// What the server wrote to its log so far (for failure messages).
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn data(&self) -> String {
        self.dir.path().join("data").to_string_lossy().into_owned()
    }

    fn owner_command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if is_root() {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(program);
            cmd
        } else {
            Command::new(program)
        }
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = self
            .owner_command("pg_ctl")
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .output();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}
