//! Refused requests leave a trace: a count per reason in `/metrics` (served on the admin
//! listener only while authentication is on), one `auth_failure` audit record and one log
//! line per reason and client address per minute, naming what the credential claimed and
//! never the credential itself.

use std::path::Path;
use std::time::Duration;

use querygate::config::{Config, Sources};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::mcp_support::install_crypto_provider;
use crate::mock::Mock;
use crate::support::identity::{
    ISSUER, Pki, RESOURCE, SigningKey, base_yaml, claims, https_client, raw_call, write,
};

/// A JWT-authenticated server with an admin listener; its MCP URL, admin base URL, audit
/// folder and stop token.
struct Served {
    url: String,
    admin: String,
    audit: std::path::PathBuf,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
    _mock: Mock,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn config_text(mock: &Mock, dir: &Path, key: &SigningKey) -> String {
    let pem = write(dir, "signer.pem", &key.public_pem());
    format!(
        "{}audit:\n  file:\n    dir: {}\nserver:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\nauth:\n  resource: {RESOURCE}\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        public_keys: [{pem}]\n        algorithms: [ES256]\n        tenants: [acme]\n",
        base_yaml(&mock.url(), dir, ""),
        dir.join("audit").display(),
    )
}

async fn serve(key: &SigningKey) -> Served {
    serve_with(|mock, dir| config_text(mock, dir, key)).await
}

async fn serve_with(text: impl FnOnce(&Mock, &Path) -> String) -> Served {
    install_crypto_provider();
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, text(&mock, dir.path())).unwrap();
    let config = Config::load(&Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap();
    let app = querygate::app::App::build(config).await.unwrap();
    let url = app.mcp_url();
    let admin = format!("http://{}", app.admin_addr().expect("an admin listener"));
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(app.run_until(async move { stopped.cancelled().await }));
    Served {
        url,
        admin,
        audit: dir.path().join("audit"),
        stop,
        _dir: dir,
        _mock: mock,
    }
}

fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in {text}"))
}

fn audit_lines(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    // The audit files (not `.querygate_heads`, the streams' heads).
    for file in
        querygate::audit::location::files_of(&querygate::audit::FileLocation::Dir(dir.to_owned()))
            .unwrap()
    {
        let text = std::fs::read_to_string(file).unwrap();
        // Complete lines only: a batch may be being written.
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        out.extend(
            complete
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    out
}

#[tokio::test]
async fn refusals_are_counted_recorded_once_per_window_and_never_show_the_token() {
    let key = SigningKey::new("k1");
    let forger = SigningKey::new("k1");
    let server = serve(&key).await;
    let http = reqwest::Client::new();
    let mut forged_claims = claims("acme");
    forged_claims["sub"] = "mallory\u{1b}[2J".into();
    let forged = forger.sign(&forged_claims);
    for _ in 0..5 {
        let response = raw_call(&http, &server.url, Some(&forged)).await.unwrap();
        assert_eq!(response.status(), 401);
    }
    let response = raw_call(&http, &server.url, None).await.unwrap();
    assert_eq!(response.status(), 401);
    let other_tenant = key.sign(&claims("globex"));
    let response = raw_call(&http, &server.url, Some(&other_tenant))
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let good = key.sign(&claims("acme"));
    assert_eq!(
        raw_call(&http, &server.url, Some(&good))
            .await
            .unwrap()
            .status(),
        200
    );

    let metrics = http
        .get(format!("{}/metrics", server.admin))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let count = |reason: &str| {
        sample(
            &metrics,
            &format!("querygate_auth_failures_total{{reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(count("auth.invalid_token"), 5.0, "{metrics}");
    assert_eq!(count("auth.missing"), 1.0);
    assert_eq!(count("auth.tenant_not_allowed"), 1.0);
    assert_eq!(
        count("auth.certificate_unmapped"),
        0.0,
        "every reason from 0"
    );

    // Records are written before the refusal is answered.
    let records = audit_lines(&server.audit);
    let failures: Vec<&Value> = records
        .iter()
        .filter(|r| r["phase"] == "auth_failure")
        .collect();
    assert_eq!(
        failures.len(),
        3,
        "one per reason and address: {failures:#?}"
    );
    let invalid = failures
        .iter()
        .find(|r| r["error_code"] == "auth.invalid_token")
        .unwrap();
    assert_eq!(invalid["client_addr"], "127.0.0.1");
    assert_eq!(invalid["issuer"], ISSUER);
    assert_eq!(
        invalid["principal"], "mallory\\u{1b}[2J",
        "claimed, escaped"
    );
    assert_eq!(invalid["auth_method"], "jwt");
    assert_eq!(invalid["suppressed"], 0);
    assert_eq!(invalid["error"], "invalid token: signature does not verify");
    assert!(invalid.get("tool").is_none() && invalid.get("mode").is_none());
    assert!(
        invalid["request_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
    );
    let missing = failures
        .iter()
        .find(|r| r["error_code"] == "auth.missing")
        .unwrap();
    assert_eq!(missing["auth_method"], "none");
    assert!(missing.get("principal").is_none() && missing.get("tenant").is_none());
    let not_allowed = failures
        .iter()
        .find(|r| r["error_code"] == "auth.tenant_not_allowed")
        .unwrap();
    assert_eq!(not_allowed["principal"], "globex-agent");
    // Every file of the audit folder, the streams' heads included.
    let heads = server.audit.join(".querygate_heads");
    let all = std::fs::read_dir(&server.audit)
        .unwrap()
        .chain(std::fs::read_dir(&heads).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|path| path.is_file())
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect::<String>();
    for token in [&forged, &other_tenant, &good] {
        let signature = token.rsplit('.').next().unwrap();
        assert!(!all.contains(signature), "a token reached the audit");
    }

    // The chain of these records verifies.
    let output = crate::support::querygate_command()
        .args(["audit", "verify"])
        .arg(&server.audit)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    // `audit tail` shows them, with the issuer.
    let output = crate::support::querygate_command()
        .args(["audit", "tail", "-n", "10"])
        .arg(&server.audit)
        .output()
        .unwrap();
    let tail = String::from_utf8_lossy(&output.stdout);
    let line = tail
        .lines()
        .find(|l| l.contains("auth.invalid_token"))
        .unwrap_or_else(|| panic!("{tail}"));
    assert!(
        line.contains("AUTH_FAILURE")
            && line.contains("from 127.0.0.1")
            && line.contains(&format!("({ISSUER})")),
        "{line}"
    );
}

#[tokio::test]
async fn with_authentication_metrics_are_served_on_the_admin_listener_only() {
    let key = SigningKey::new("k1");
    let server = serve(&key).await;
    let http = reqwest::Client::new();
    let main = server.url.trim_end_matches("/mcp").to_owned();
    let response = http.get(format!("{main}/metrics")).send().await.unwrap();
    assert_eq!(
        response.status(),
        404,
        "no tenant ids for unauthenticated callers"
    );
    let response = http
        .get(format!("{main}/metrics"))
        .bearer_auth(key.sign(&claims("acme")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404, "not to tenants either");
    // The probes stay public on both listeners.
    for base in [&main, &server.admin] {
        let response = http.get(format!("{base}/healthz")).send().await.unwrap();
        assert_eq!(response.status(), 200, "{base}");
    }
    let text = http
        .get(format!("{}/metrics", server.admin))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("querygate_build_info"), "{text}");
}

/// The served binary logs a refusal at the default level (warn), once per window.
#[tokio::test]
async fn the_served_binary_logs_refusals_at_the_default_level() {
    install_crypto_provider();
    let key = SigningKey::new("k1");
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, config_text(&mock, dir.path(), &key)).unwrap();
    let served = crate::support::served::spawn_announced(
        crate::support::served::serve_command(&file).env_remove("QUERYGATE_LOG"),
    )
    .await;
    let (url, mut child, mut stderr) = (served.url, served.child, served.stderr);
    let http = reqwest::Client::new();
    let forged = SigningKey::new("k1").sign(&claims("acme"));
    for _ in 0..3 {
        let response = raw_call(&http, &url, Some(&forged)).await.unwrap();
        assert_eq!(response.status(), 401);
    }
    // A good call after the refusals: its answer means their log lines were written.
    let good = key.sign(&claims("acme"));
    assert_eq!(
        raw_call(&http, &url, Some(&good)).await.unwrap().status(),
        200
    );
    let _ = child.start_kill();
    let mut lines = Vec::new();
    while let Ok(Some(line)) = stderr.next_line().await {
        lines.push(line);
    }
    let refused: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("request refused by authentication"))
        .collect();
    assert_eq!(refused.len(), 1, "{lines:#?}");
    assert!(
        refused[0].contains("auth.invalid_token") && refused[0].contains("127.0.0.1"),
        "{}",
        refused[0]
    );
    let signature = forged.rsplit('.').next().unwrap();
    assert!(!lines.iter().any(|l| l.contains(signature)));
}

#[tokio::test]
async fn refused_client_certificates_are_counted_and_recorded_with_their_fingerprint() {
    let pki = Pki::new("test CA");
    let server_pair = pki.server_pair();
    let ca = pki.ca_pem();
    let server = serve_with(|mock, dir| {
        format!(
            "{}audit:\n  file:\n    dir: {}\nserver:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  tls:\n    cert_file: {}\n    key_file: {}\n    client_ca_file: {}\nauth:\n  mtls:\n    identities:\n      \"uri:spiffe://example.org/agent-a\": acme\n",
            base_yaml(&mock.url(), dir, ""),
            dir.join("audit").display(),
            write(dir, "server.crt", &server_pair.0),
            write(dir, "server.key", &server_pair.1),
            write(dir, "ca.crt", &ca),
        )
    })
    .await;
    // Trusted, but mapped to no tenant: 403 from the auth layer.
    let stranger = pki.spiffe_client("spiffe://example.org/stranger", false);
    for _ in 0..2 {
        let response = raw_call(&https_client(&ca, Some(&stranger)), &server.url, None)
            .await
            .unwrap();
        assert_eq!(response.status(), 403);
    }
    // Of another CA: refused in the handshake, before any request.
    let untrusted = Pki::new("other CA").spiffe_client("spiffe://example.org/agent-a", false);
    for _ in 0..2 {
        assert!(
            raw_call(&https_client(&ca, Some(&untrusted)), &server.url, None)
                .await
                .is_err()
        );
    }
    let count = |text: &str, reason: &str| {
        sample(
            text,
            &format!("querygate_auth_failures_total{{reason=\"{reason}\"}}"),
        )
    };
    let metrics_url = format!("{}/metrics", server.admin);
    // The handshake's refusal is reported on the connection's task, after the client has
    // seen it fail: wait for its count and its record.
    let rejected_recorded = |dir: &Path| {
        audit_lines(dir)
            .iter()
            .any(|r| r["error_code"] == "auth.certificate_rejected")
    };
    let metrics = crate::support::wait::eventually(
        "two rejected certificates counted and recorded",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            let text = reqwest::get(&metrics_url)
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let done = count(&text, "auth.certificate_rejected") >= 2.0
                && rejected_recorded(&server.audit);
            if done { Ok(text) } else { Err(text) }
        },
    )
    .await;
    assert_eq!(
        count(&metrics, "auth.certificate_unmapped"),
        2.0,
        "{metrics}"
    );
    assert_eq!(
        count(&metrics, "auth.certificate_rejected"),
        2.0,
        "{metrics}"
    );

    let records = audit_lines(&server.audit);
    let failures: Vec<&Value> = records
        .iter()
        .filter(|r| r["phase"] == "auth_failure")
        .collect();
    assert_eq!(failures.len(), 2, "{failures:#?}");
    let unmapped = failures
        .iter()
        .find(|r| r["error_code"] == "auth.certificate_unmapped")
        .unwrap();
    use rustls::pki_types::pem::PemObject as _;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(stranger.0.as_bytes()).unwrap();
    assert_eq!(
        unmapped["cert_fingerprint"],
        querygate::digest::sha256_hex(der.as_ref())
    );
    assert_eq!(unmapped["auth_method"], "mtls");
    let rejected = failures
        .iter()
        .find(|r| r["error_code"] == "auth.certificate_rejected")
        .unwrap();
    assert_eq!(rejected["client_addr"], "127.0.0.1");
    assert!(
        rejected["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("the client certificate was refused")),
        "{rejected}"
    );
}
