//! `oci_signing_v1` end to end over the `oci` provider's own documents
//! (`tests/fixtures/oci/registry`, its `config.auth` unchanged): SELECT and UPDATE of
//! `oci.audit.configurations` reach a mock OCI API on 127.0.0.1 that verifies each
//! request's signature as OCI does: it recomputes the signing string from the request it
//! received (the `headers` the signature names, which must include `date`,
//! `(request-target)` and `host`, and for a body `content-length`, `content-type` and an
//! `x-content-sha256` equal to the body's hash), checks it with the public key registered
//! for the `keyId`, and answers 401 `NotAuthenticated` otherwise. Each tenant signs with its
//! own key from its own variables; the host's `~/.oci/config` serves no other tenant.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::Response;
use base64::Engine as _;
use querygate::engine::{CredentialStore, Engine, EngineConfig, ExecContext, ProviderSettings};
use ring::signature::{self, RsaKeyPair};
use sha2::{Digest as _, Sha256};

use crate::support::corpus::row_lines;

pub(crate) const TENANT_A: &str = "ocid1.tenancy.oc1..aaaaaaaatenanta";
pub(crate) const USER_A: &str = "ocid1.user.oc1..aaaaaaaausera";
pub(crate) const PRINT_A: &str = "11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00";
pub(crate) const TENANT_B: &str = "ocid1.tenancy.oc1..aaaaaaaatenantb";
pub(crate) const USER_B: &str = "ocid1.user.oc1..aaaaaaaauserb";
pub(crate) const PRINT_B: &str = "00:ff:ee:dd:cc:bb:aa:99:88:77:66:55:44:33:22:11";

pub(crate) fn fixtures() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/oci")
}

pub(crate) fn key_path(name: &str) -> String {
    fixtures().join(name).display().to_string()
}

/// The RSAPublicKey DER of a PEM private key (PKCS#8 or PKCS#1).
fn public_key(file: &str) -> Vec<u8> {
    let pem = std::fs::read_to_string(fixtures().join(file)).expect("key file");
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("base64");
    let pair = if pem.contains("BEGIN RSA PRIVATE KEY") {
        RsaKeyPair::from_der(&der)
    } else {
        RsaKeyPair::from_pkcs8(&der)
    }
    .expect("key");
    pair.public().as_ref().to_vec()
}

/// One request the mock judged.
#[derive(Clone, Debug)]
pub(crate) struct Judged {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) key_id: String,
    pub(crate) body: String,
    /// `None` when the signature verified, else why not.
    pub(crate) refused: Option<String>,
}

/// A mock OCI API that verifies signatures with the public keys registered per `keyId`.
pub(crate) struct OciMock {
    pub(crate) addr: SocketAddr,
    judged: Arc<Mutex<Vec<Judged>>>,
}

/// The `k="v"` parameters of a `Signature` authorization.
fn params(authorization: &str) -> Option<HashMap<String, String>> {
    let rest = authorization.strip_prefix("Signature ")?;
    let mut out = HashMap::new();
    for part in rest.split("\",") {
        let (k, v) = part.split_once("=\"")?;
        out.insert(k.trim().to_owned(), v.trim_end_matches('"').to_owned());
    }
    Some(out)
}

/// Why the request's signature does not verify, if it does not.
fn verify(
    keys: &HashMap<String, Vec<u8>>,
    method: &str,
    target: &str,
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> (String, Option<String>) {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let Some(p) = header("authorization").as_deref().and_then(params) else {
        return (String::new(), Some("no Signature authorization".into()));
    };
    let key_id = p.get("keyId").cloned().unwrap_or_default();
    let check = || -> Result<(), String> {
        if p.get("version").map(String::as_str) != Some("1")
            || p.get("algorithm").map(String::as_str) != Some("rsa-sha256")
        {
            return Err("version or algorithm".into());
        }
        let names: Vec<&str> = p.get("headers").ok_or("no headers")?.split(' ').collect();
        let mut required = vec!["date", "(request-target)", "host"];
        if matches!(method, "POST" | "PUT" | "PATCH") {
            required.extend(["content-length", "content-type", "x-content-sha256"]);
            let sha = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(body));
            if header("x-content-sha256").as_deref() != Some(sha.as_str()) {
                return Err("x-content-sha256 is not the body's".into());
            }
            if header("content-length") != Some(body.len().to_string()) {
                return Err("content-length is not the body's".into());
            }
        }
        if let Some(missing) = required.iter().find(|r| !names.contains(r)) {
            return Err(format!("{missing} is not signed"));
        }
        let date = header("date").ok_or("no date")?;
        let sent = httpdate::parse_http_date(&date).map_err(|_| "bad date")?;
        let skew = std::time::SystemTime::now()
            .duration_since(sent)
            .unwrap_or_default();
        if skew > std::time::Duration::from_secs(300) {
            return Err("clock skew over 5 minutes".into());
        }
        let mut lines = Vec::new();
        for name in &names {
            let value = if *name == "(request-target)" {
                format!("{} {target}", method.to_ascii_lowercase())
            } else {
                header(name).ok_or_else(|| format!("signed header {name} is absent"))?
            };
            lines.push(format!("{name}: {value}"));
        }
        let public = keys.get(&key_id).ok_or("unknown keyId")?;
        let sig = base64::engine::general_purpose::STANDARD
            .decode(p.get("signature").ok_or("no signature")?)
            .map_err(|_| "signature is not base64")?;
        signature::UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, public)
            .verify(lines.join("\n").as_bytes(), &sig)
            .map_err(|_| "signature does not verify".to_owned())
    };
    let refused = check().err();
    (key_id, refused)
}

impl OciMock {
    /// Serves `GET/PUT /20190901/configuration`; the retention it reports is per keyId.
    async fn start(keys: HashMap<String, Vec<u8>>, retention: HashMap<String, u32>) -> Self {
        let judged: Arc<Mutex<Vec<Judged>>> = Arc::default();
        let log = judged.clone();
        let app = Router::new().fallback(move |request: Request<Body>| {
            let (keys, retention, log) = (keys.clone(), retention.clone(), log.clone());
            async move {
                let (parts, body) = request.into_parts();
                let body = axum::body::to_bytes(body, 1 << 20)
                    .await
                    .map(|b| b.to_vec())
                    .unwrap_or_default();
                let method = parts.method.as_str().to_owned();
                let target = parts
                    .uri
                    .path_and_query()
                    .map(|p| p.as_str().to_owned())
                    .unwrap_or_default();
                let (key_id, refused) = verify(&keys, &method, &target, &parts.headers, &body);
                log.lock().unwrap().push(Judged {
                    method: method.clone(),
                    target,
                    key_id: key_id.clone(),
                    body: String::from_utf8_lossy(&body).into_owned(),
                    refused: refused.clone(),
                });
                let (status, json) = match (refused, method.as_str()) {
                    (Some(why), _) => (
                        StatusCode::UNAUTHORIZED,
                        serde_json::json!({"code": "NotAuthenticated", "message": why}),
                    ),
                    (None, "PUT") => (StatusCode::ACCEPTED, serde_json::json!({})),
                    (None, _) => (
                        StatusCode::OK,
                        serde_json::json!({"retentionPeriodDays": retention.get(&key_id).copied().unwrap_or(0)}),
                    ),
                };
                Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .header("opc-request-id", "mock-opc-request")
                    .body(Body::from(json.to_string()))
                    .unwrap()
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        OciMock { addr, judged }
    }

    pub(crate) fn judged(&self) -> Vec<Judged> {
        self.judged.lock().unwrap().clone()
    }
}

pub(crate) async fn mock() -> OciMock {
    let a = format!("{TENANT_A}/{USER_A}/{PRINT_A}");
    let b = format!("{TENANT_B}/{USER_B}/{PRINT_B}");
    OciMock::start(
        HashMap::from([
            (a.clone(), public_key("tenant_a_key.pem")),
            (b.clone(), public_key("tenant_b_key.pem")),
        ]),
        HashMap::from([(a, 90), (b, 365)]),
    )
    .await
}

fn engine(mock: &OciMock) -> Engine {
    let mut config = EngineConfig::new(fixtures().join("registry"));
    config.providers.insert(
        "oci".to_owned(),
        ProviderSettings {
            base_url: Some(format!("http://{}/20190901", mock.addr)),
            ..Default::default()
        },
    );
    Engine::new(config).expect("engine")
}

fn tenant(store: CredentialStore) -> ExecContext {
    ExecContext {
        credentials: Arc::new(store),
        ..ExecContext::anonymous_default()
    }
}

fn store(pairs: &[(&str, &str)]) -> CredentialStore {
    CredentialStore::fixed(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    )
}

/// Tenant A: the OCI CLI's variable names, a PKCS#8 key file.
fn tenant_a() -> ExecContext {
    let key = key_path("tenant_a_key.pem");
    tenant(store(&[
        ("OCI_CLI_TENANCY", TENANT_A),
        ("OCI_CLI_USER", USER_A),
        ("OCI_CLI_FINGERPRINT", PRINT_A),
        ("OCI_CLI_KEY_FILE", &key),
    ]))
}

/// Tenant B: the short names, a PKCS#1 key file.
fn tenant_b() -> ExecContext {
    let key = key_path("tenant_b_key.pem");
    tenant(store(&[
        ("OCI_TENANCY", TENANT_B),
        ("OCI_USER", USER_B),
        ("OCI_FINGERPRINT", PRINT_B),
        ("OCI_KEY_FILE", &key),
    ]))
}

pub(crate) const SELECT: &str = "SELECT retentionPeriodDays FROM oci.audit.configurations WHERE compartmentId = 'ocid1.tenancy.oc1..root'";

#[tokio::test]
async fn each_tenant_signs_with_its_own_key_and_the_mock_verifies_it() {
    let api = mock().await;
    let e = engine(&api);
    let a = e.execute(&tenant_a(), SELECT).await.expect("tenant a");
    let b = e.execute(&tenant_b(), SELECT).await.expect("tenant b");
    assert_eq!(row_lines(&a), ["90"]);
    assert_eq!(row_lines(&b), ["365"]);
    let judged = api.judged();
    assert_eq!(judged.len(), 2, "{judged:?}");
    for j in &judged {
        assert_eq!(j.refused, None, "{j:?}");
        assert_eq!(j.method, "GET");
        assert_eq!(
            j.target,
            "/20190901/configuration?compartmentId=ocid1.tenancy.oc1..root"
        );
    }
    assert_eq!(judged[0].key_id, format!("{TENANT_A}/{USER_A}/{PRINT_A}"));
    assert_eq!(judged[1].key_id, format!("{TENANT_B}/{USER_B}/{PRINT_B}"));
}

#[tokio::test]
async fn an_update_signs_its_body_headers() {
    let api = mock().await;
    let e = engine(&api);
    e.execute(
        &tenant_a(),
        "UPDATE oci.audit.configurations SET retentionPeriodDays = 120 WHERE compartmentId = 'ocid1.tenancy.oc1..root'",
    )
    .await
    .expect("update");
    let judged = api.judged();
    let put = judged
        .iter()
        .find(|j| j.method == "PUT")
        .unwrap_or_else(|| panic!("no PUT: {judged:?}"));
    assert_eq!(put.refused, None, "{put:?}");
    assert!(put.body.contains("\"retentionPeriodDays\":120"), "{put:?}");
}

#[tokio::test]
async fn a_key_that_is_not_the_key_ids_is_refused_by_the_mock() {
    // Claims tenant A's identity but holds tenant B's key: OCI (and the mock) refuse.
    let api = mock().await;
    let e = engine(&api);
    let forged = tenant(store(&[
        ("OCI_CLI_TENANCY", TENANT_A),
        ("OCI_CLI_USER", USER_A),
        ("OCI_CLI_FINGERPRINT", PRINT_A),
        ("OCI_CLI_KEY_FILE", &key_path("tenant_b_key.pem")),
    ]));
    let err = e.execute(&forged, SELECT).await.expect_err("refused");
    let judged = api.judged();
    assert!(!judged.is_empty());
    assert!(
        judged
            .iter()
            .all(|j| j.refused.as_deref() == Some("signature does not verify")),
        "{judged:?}"
    );
    let text = err.to_string();
    assert!(text.contains("401"), "{text}");
    assert!(!text.contains("PRIVATE KEY"), "{text}");
}

#[tokio::test]
async fn without_its_own_variables_a_tenant_gets_no_host_config_and_no_request_is_sent() {
    let api = mock().await;
    let e = engine(&api);
    // A home with an OCI CLI config, as the host's would be: not this tenant's to use.
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir_all(home.path().join(".oci")).expect("dir");
    std::fs::write(
        home.path().join(".oci/config"),
        format!(
            "[DEFAULT]\ntenancy={TENANT_A}\nuser={USER_A}\nfingerprint={PRINT_A}\nkey_file={}\n",
            key_path("tenant_a_key.pem")
        ),
    )
    .expect("config");
    let home_dir = home.path().display().to_string();
    let other = tenant(store(&[("HOME", &home_dir)]));
    let err = e.execute(&other, SELECT).await.expect_err("no credential");
    let text = err.to_string();
    assert!(
        text.contains("oci_signing_v1 found no credential"),
        "{text}"
    );
    assert!(
        text.contains("serves only the tenant that reads the process environment"),
        "{text}"
    );
    // The tenant that may use the host's identity reads that same file.
    let host = tenant(store(&[("HOME", &home_dir)]).with_host_identity(true));
    let rows = e.execute(&host, SELECT).await.expect("host tenant");
    assert_eq!(row_lines(&rows), ["90"]);
    assert_eq!(
        api.judged().len(),
        1,
        "only the host tenant's request was sent"
    );
}

#[tokio::test]
async fn an_encrypted_key_is_refused_before_any_request() {
    let api = mock().await;
    let e = engine(&api);
    let key = key_path("encrypted_key.pem");
    let cx = tenant(store(&[
        ("OCI_CLI_TENANCY", TENANT_A),
        ("OCI_CLI_USER", USER_A),
        ("OCI_CLI_FINGERPRINT", PRINT_A),
        ("OCI_CLI_KEY_FILE", &key),
        ("OCI_CLI_PASSPHRASE", "test-only"),
    ]));
    let err = e.execute(&cx, SELECT).await.expect_err("encrypted");
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "key file '{key}' (from variable OCI_CLI_KEY_FILE) is encrypted"
        )),
        "{text}"
    );
    assert!(!text.contains("test-only"), "{text}");
    assert!(api.judged().is_empty());
}
