//! `querygate serve` replicas as child processes and a real nginx in front of them
//! (round robin, upstream keep-alive, reloads), for the tests of a fleet.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt as _;

use crate::mcp_support::terminate;
use crate::support::wait::{try_eventually, try_eventually_blocking};

/// The nginx binary: on PATH or Debian's `/usr/sbin/nginx`.
pub fn nginx_binary() -> Option<PathBuf> {
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
pub struct Nginx {
    dir: tempfile::TempDir,
    port: u16,
    upstreams: Vec<u16>,
    child: tokio::process::Child,
}

impl Nginx {
    /// Starts nginx on 127.0.0.1:`port` in front of the replicas on `upstreams`.
    pub async fn start(binary: PathBuf, port: u16, upstreams: Vec<u16>) -> Nginx {
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
    pub fn set_down(&self, down: &[u16]) {
        write_conf(self.dir.path(), self.port, &self.upstreams, down);
        let pid = self.child.id().unwrap().to_string();
        let status = std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap();
        assert!(status.success(), "nginx reload");
    }

    /// Waits until nginx sends a request to the replica on `port` (each answer names its
    /// upstream in `X-Upstream`): it has put that replica back in its rotation.
    pub async fn wait_until_routing_to(&self, port: u16, within: Duration) {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let url = format!("http://127.0.0.1:{}/healthz", self.port);
        let wanted = format!("127.0.0.1:{port}");
        crate::support::wait::eventually(
            &format!("nginx routing to {wanted}"),
            within,
            Duration::from_millis(20),
            || async {
                let response = http.get(&url).send().await.map_err(|e| e.to_string())?;
                let upstream = response.headers().get("x-upstream").cloned();
                match upstream {
                    // After a retry nginx lists every upstream it tried: the last answered.
                    Some(value)
                        if value
                            .to_str()
                            .is_ok_and(|v| v.rsplit(", ").next() == Some(wanted.as_str())) =>
                    {
                        Ok(())
                    }
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    pub fn url(&self) -> String {
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
      proxy_read_timeout 60s;\n      add_header X-Upstream $upstream_addr always;\n    }}\n  }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
}

/// One `querygate serve` process; its stderr is kept for diagnostics.
pub struct Replica {
    pub port: u16,
    pub name: String,
    pub child: tokio::process::Child,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Replica {
    /// Starts `querygate --config <config> serve` listening on `port`, keeping its stderr,
    /// and waits until it is ready.
    pub async fn spawn(config: &Path, port: u16, name: &str) -> Replica {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_querygate"))
            .arg("--config")
            .arg(config)
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

    pub async fn readyz(&self) -> Option<u16> {
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

    pub async fn wait_ready(&self) {
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
    pub async fn stop(mut self) {
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
