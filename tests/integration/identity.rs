//! Identity end to end: HTTPS with client certificates (rcgen-generated PKI), JWT bearer
//! tokens against a JWKS server on 127.0.0.1, tenants from identity, per-tenant tools and
//! limits. Every refusal is an HTTP answer of the auth layer, before rmcp reads JSON-RPC.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, SanType,
};
use rmcp::model::{ClientConfig, ProtocolVersion};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

use crate::mcp_support::{
    Client, TestServer, call, error_code, error_message, install_crypto_provider, start_yaml,
    text_of,
};
use crate::mock::Reply;
use crate::support::{SECRET, fixture_registry};

pub(crate) const RESOURCE: &str = "https://querygate.test/mcp";
pub(crate) const ISSUER: &str = "https://idp.test";
pub(crate) const OTHER_SECRET: &str = "tk-globex-secret-7731";

// === PKI ===

/// A CA that issues server and client certificates.
pub struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Pki {
            ca: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// A certificate and key (PEM) for `sans`, with subject CN `cn`; `expired` puts its
    /// validity in the past.
    pub fn issue(
        &self,
        cn: &str,
        sans: Vec<SanType>,
        server: bool,
        expired: bool,
    ) -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.subject_alt_names = sans;
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    pub fn server_pair(&self) -> (String, String) {
        self.issue(
            "querygate",
            vec![
                SanType::IpAddress("127.0.0.1".parse().unwrap()),
                SanType::DnsName("localhost".try_into().unwrap()),
            ],
            true,
            false,
        )
    }

    pub fn spiffe_client(&self, id: &str, expired: bool) -> (String, String) {
        self.issue(
            "agent",
            vec![SanType::URI(id.try_into().unwrap())],
            false,
            expired,
        )
    }
}

/// A reqwest client trusting `ca_pem`, presenting `identity` (cert, key PEM) if given.
pub fn https_client(ca_pem: &str, identity: Option<&(String, String)>) -> reqwest::Client {
    install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    reqwest::Client::builder()
        .tls_backend_preconfigured(config)
        .http1_only()
        .build()
        .unwrap()
}

/// An rmcp client (2026-07-28) over `http`, sending `token` as a bearer token if given.
pub async fn rmcp_client(http: reqwest::Client, url: &str, token: Option<&str>) -> Client {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(token) = token {
        config = config.auth_header(token.to_owned());
    }
    let transport = StreamableHttpClientTransport::with_client(http, config);
    ClientConfig::default()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("client starts")
}

/// A raw 2026-07-28 `tools/call` of `server_info`.
pub async fn raw_call(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
) -> reqwest::Result<reqwest::Response> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "server_info", "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}
        }
    }});
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "server_info")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await
}

/// The common part of a test configuration: the fixture registry, the mock as `testapi`,
/// and tenants `default`, `acme` (key [`SECRET`]) and `globex` (key [`OTHER_SECRET`]).
pub(crate) fn base_yaml(mock: &str, dir: &Path, tenant_extra: &str) -> String {
    let acme = dir.join("acme.env");
    let globex = dir.join("globex.env");
    std::fs::write(&acme, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
    std::fs::write(&globex, format!("TESTAPI_KEY={OTHER_SECRET}\n")).unwrap();
    format!(
        "registry:\n  root: {root}\n  url: {mock}/registry\nproviders:\n  testapi:\n    base_url: {mock}\ncredentials:\n  process_env: false\ntenants:\n  - id: default\n  - id: acme\n    credentials:\n      env_file: {acme}\n{tenant_extra}  - id: globex\n    credentials:\n      env_file: {globex}\n",
        root = fixture_registry().display(),
        acme = acme.display(),
        globex = globex.display(),
    )
}

pub(crate) fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

pub(crate) fn tenant_of(result: &rmcp::model::CallToolResult) -> String {
    result.structured_content.as_ref().unwrap()["tenant"]
        .as_str()
        .unwrap()
        .to_owned()
}

// === mTLS ===

#[tokio::test]
async fn mtls_clients_are_mapped_to_tenants_and_bad_certificates_are_refused() {
    let pki = Pki::new("test CA");
    let server_pair = pki.server_pair();
    let ca = pki.ca_pem();
    let server = start_yaml(|mock, dir| {
        format!(
            "{}server:\n  listen: 127.0.0.1:0\n  tls:\n    cert_file: {}\n    key_file: {}\n    client_ca_file: {}\nauth:\n  mtls:\n    identities:\n      \"uri:spiffe://example.org/agent-a\": acme\n      \"uri:spiffe://example.org/agent-g\": globex\n",
            base_yaml(mock, dir, ""),
            write(dir, "server.crt", &server_pair.0),
            write(dir, "server.key", &server_pair.1),
            write(dir, "ca.crt", &ca),
        )
    })
    .await;
    assert!(
        server.url.starts_with("https://127.0.0.1:"),
        "{}",
        server.url
    );

    // A trusted certificate: its SPIFFE id maps to acme; an rmcp client works over HTTPS.
    let agent_a = pki.spiffe_client("spiffe://example.org/agent-a", false);
    let client = rmcp_client(https_client(&ca, Some(&agent_a)), &server.url, None).await;
    assert_eq!(
        tenant_of(&call(&client, "server_info", json!({})).await),
        "acme"
    );
    let agent_g = pki.spiffe_client("spiffe://example.org/agent-g", false);
    let client = rmcp_client(https_client(&ca, Some(&agent_g)), &server.url, None).await;
    assert_eq!(
        tenant_of(&call(&client, "server_info", json!({})).await),
        "globex"
    );

    // A trusted certificate whose identity maps to no tenant: 403 before the MCP layer.
    let stranger = pki.spiffe_client("spiffe://example.org/stranger", false);
    let response = raw_call(&https_client(&ca, Some(&stranger)), &server.url, None)
        .await
        .unwrap();
    assert_eq!(response.status(), 403);

    // No certificate, an untrusted one, an expired one: refused in the handshake.
    let other_ca = Pki::new("other CA");
    let untrusted = other_ca.spiffe_client("spiffe://example.org/agent-a", false);
    let expired = pki.spiffe_client("spiffe://example.org/agent-a", true);
    for (what, identity) in [
        ("no certificate", None),
        ("an untrusted certificate", Some(&untrusted)),
        ("an expired certificate", Some(&expired)),
    ] {
        let outcome = raw_call(&https_client(&ca, identity), &server.url, None).await;
        assert!(
            outcome.is_err(),
            "{what} was served: {:?}",
            outcome.map(|r| r.status())
        );
    }
    // The health check stays reachable with a certificate.
    let health = https_client(&ca, Some(&agent_a))
        .get(server.url.replace("/mcp", "/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn the_server_certificate_is_reloaded_when_its_files_change() {
    let pki = Pki::new("test CA");
    let first = pki.server_pair();
    let dir = tempfile::tempdir().unwrap();
    let cert_file = write(dir.path(), "server.crt", &first.0);
    let key_file = write(dir.path(), "server.key", &first.1);
    let ca = pki.ca_pem();
    let server = start_yaml(|mock, d| {
        format!(
            "{}server:\n  listen: 127.0.0.1:0\n  allow_unauthenticated: true\n  tls:\n    cert_file: {cert_file}\n    key_file: {key_file}\n    reload_interval: 100ms\n",
            base_yaml(mock, d, ""),
        )
    })
    .await;
    let seen = || async {
        let addr = server
            .url
            .trim_start_matches("https://")
            .trim_end_matches("/mcp")
            .to_owned();
        peer_certificate(&ca, &addr).await
    };
    let der = |pem: &str| {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    };
    assert_eq!(seen().await, der(&first.0));
    // cert-manager style: both files replaced in place.
    let second = pki.server_pair();
    std::fs::write(&key_file, &second.1).unwrap();
    std::fs::write(&cert_file, &second.0).unwrap();
    crate::support::wait::eventually(
        "the new certificate served",
        std::time::Duration::from_secs(5),
        std::time::Duration::from_millis(100),
        || async { seen().await == der(&second.0) },
    )
    .await;
    // A broken pair is not taken; the last good one stays.
    std::fs::write(&cert_file, "not a certificate").unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(seen().await, der(&second.0));
}

/// The leaf certificate the server at `addr` presents.
async fn peer_certificate(ca_pem: &str, addr: &str) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

// === JWT ===

/// An ES256 signing key and its JWK.
pub(crate) struct SigningKey {
    kid: String,
    pair: KeyPair,
}

impl SigningKey {
    pub(crate) fn new(kid: &str) -> Self {
        SigningKey {
            kid: kid.to_owned(),
            pair: KeyPair::generate().unwrap(),
        }
    }

    pub(crate) fn jwk(&self) -> Value {
        let raw = self.pair.public_key_raw();
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        json!({"kty": "EC", "crv": "P-256", "x": b64(&raw[1..33]), "y": b64(&raw[33..65]),
               "kid": self.kid, "alg": "ES256", "use": "sig"})
    }

    /// The private key, PKCS#8 PEM (for an OpenID provider run in a test to sign with).
    pub(crate) fn private_pem(&self) -> String {
        self.pair.serialize_pem()
    }

    /// The public key, PEM (for `public_keys`).
    pub(crate) fn public_pem(&self) -> String {
        self.pair.public_key_pem()
    }

    pub(crate) fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        let key = EncodingKey::from_ec_pem(self.pair.serialize_pem().as_bytes()).unwrap();
        jsonwebtoken::encode(&header, claims, &key).unwrap()
    }
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub(crate) fn claims(tenant: &str) -> Value {
    json!({"iss": ISSUER, "aud": RESOURCE, "sub": format!("{tenant}-agent"), "tenant": tenant,
           "exp": now() + 600, "nbf": now() - 10, "iat": now()})
}

/// A JWKS endpoint on 127.0.0.1 serving `keys` (replaceable) and counting fetches.
pub(crate) struct JwksServer {
    pub(crate) url: String,
    pub(crate) keys: Arc<Mutex<Value>>,
    pub(crate) fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    pub(crate) async fn start(keys: Value) -> Self {
        let keys = Arc::new(Mutex::new(keys));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (k, f) = (keys.clone(), fetches.clone());
        let app = axum::Router::new().route(
            "/jwks.json",
            axum::routing::get(move || {
                let (k, f) = (k.clone(), f.clone());
                async move {
                    f.fetch_add(1, Ordering::SeqCst);
                    axum::Json(k.lock().unwrap().clone())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        JwksServer {
            url: format!("http://{addr}/jwks.json"),
            keys,
            fetches,
        }
    }
}

pub(crate) async fn jwt_server(
    jwks: &JwksServer,
    floor: &str,
    tenant_extra: &str,
    jwt_extra: &str,
) -> TestServer {
    let url = jwks.url.clone();
    start_yaml(|mock, dir| {
        format!(
            "{}server:\n  listen: 127.0.0.1:0\nauth:\n  resource: {RESOURCE}\n  authorization_servers: [{ISSUER}]\n  jwt:\n    jwks_refresh_floor: {floor}\n    issuers:\n      - issuer: {ISSUER}\n        jwks_url: {url}\n        algorithms: [ES256]\n        tenants: [default, acme, globex]\n{jwt_extra}",
            base_yaml(mock, dir, tenant_extra),
        )
    })
    .await
}

#[tokio::test]
async fn jwt_tokens_are_verified_before_the_mcp_layer() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = jwt_server(&jwks, "300ms", "", "").await;
    let http = reqwest::Client::new();

    // A valid token: an rmcp client runs as the token's tenant.
    let token = key.sign(&claims("acme"));
    let client = rmcp_client(http.clone(), &server.url, Some(&token)).await;
    assert_eq!(
        tenant_of(&call(&client, "server_info", json!({})).await),
        "acme"
    );
    assert_eq!(
        jwks.fetches.load(Ordering::SeqCst),
        1,
        "the key set is cached"
    );

    // No token: 401 with the RFC 9728 pointer, and the document is public.
    let response = raw_call(&http, &server.url, None).await.unwrap();
    assert_eq!(response.status(), 401);
    let challenge = response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        challenge,
        "Bearer resource_metadata=\"https://querygate.test/.well-known/oauth-protected-resource/mcp\""
    );
    let base = server.url.trim_end_matches("/mcp");
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let doc: Value = http
            .get(format!("{base}{path}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(doc["resource"], RESOURCE);
        assert_eq!(doc["authorization_servers"], json!([ISSUER]));
    }

    let public_pem = key.pair.public_key_pem();
    let hs256 = {
        let header = Header::new(Algorithm::HS256);
        jsonwebtoken::encode(
            &header,
            &claims("acme"),
            &EncodingKey::from_secret(public_pem.as_bytes()),
        )
        .unwrap()
    };
    let alg_none = {
        let b64 =
            |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!(
            "{}.{}.",
            b64(&json!({"alg": "none", "typ": "JWT"})),
            b64(&claims("acme"))
        )
    };
    let with = |patch: Value| {
        let mut c = claims("acme");
        for (k, v) in patch.as_object().unwrap() {
            c[k] = v.clone();
        }
        key.sign(&c)
    };
    let refused = [
        ("expired", with(json!({"exp": now() - 3600})), 401),
        ("not yet valid", with(json!({"nbf": now() + 3600})), 401),
        (
            "wrong audience",
            with(json!({"aud": "https://other.test/mcp"})),
            401,
        ),
        (
            "wrong issuer",
            with(json!({"iss": "https://evil.test"})),
            401,
        ),
        ("alg none", alg_none, 401),
        ("HS256 signed with the public key", hs256, 401),
        ("no subject", with(json!({"sub": null})), 401),
        (
            "signed by another key",
            SigningKey::new("k1").sign(&claims("acme")),
            401,
        ),
        ("unknown tenant", with(json!({"tenant": "initech"})), 403),
    ];
    for (what, token, status) in refused {
        let response = raw_call(&http, &server.url, Some(&token)).await.unwrap();
        assert_eq!(response.status(), status, "{what}");
        if status == 401 {
            let challenge = response.headers()["www-authenticate"].to_str().unwrap();
            assert!(
                challenge.contains("error=\"invalid_token\""),
                "{what}: {challenge}"
            );
        }
        let body = response.text().await.unwrap();
        assert!(
            !body.contains("jsonrpc"),
            "{what}: the MCP layer answered: {body}"
        );
    }
}

#[tokio::test]
async fn unknown_key_ids_cause_one_refetch_and_rotation_is_picked_up() {
    let old = SigningKey::new("old");
    let jwks = JwksServer::start(json!({"keys": [old.jwk()]})).await;
    let server = jwt_server(&jwks, "400ms", "", "").await;
    let http = reqwest::Client::new();
    let ok = |r: reqwest::Response| r.status();
    assert_eq!(
        ok(
            raw_call(&http, &server.url, Some(&old.sign(&claims("acme"))))
                .await
                .unwrap()
        ),
        200
    );
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 1);

    // An unknown kid after the floor: one refetch, then refusal; again at once: no refetch.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let stranger = SigningKey::new("stranger");
    let token = stranger.sign(&claims("acme"));
    assert_eq!(
        ok(raw_call(&http, &server.url, Some(&token)).await.unwrap()),
        401
    );
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 2);
    assert_eq!(
        ok(raw_call(&http, &server.url, Some(&token)).await.unwrap()),
        401
    );
    assert_eq!(
        jwks.fetches.load(Ordering::SeqCst),
        2,
        "refetches are limited by the floor"
    );

    // Concurrent unknown kids after the floor: one fetch for all (single flight).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let calls = (0..8).map(|_| raw_call(&http, &server.url, Some(&token)));
    for response in futures::future::join_all(calls).await {
        assert_eq!(response.unwrap().status(), 401);
    }
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 3);

    // Rotation: the issuer publishes a new key; its tokens are accepted after one fetch.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let new = SigningKey::new("new");
    *jwks.keys.lock().unwrap() = json!({"keys": [new.jwk()]});
    assert_eq!(
        ok(
            raw_call(&http, &server.url, Some(&new.sign(&claims("globex"))))
                .await
                .unwrap()
        ),
        200
    );
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 4);
}

// === tenants ===

#[tokio::test]
async fn tenants_are_isolated_by_identity_tools_and_scopes() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = jwt_server(
        &jwks,
        "30s",
        "    allowed_tools: [server_info, run_select_query]\n",
        "    scopes:\n      \"mcp:read\": [server_info, run_select_query, list_providers]\n      \"mcp:info\": [server_info]\n",
    )
    .await;
    server.mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "one"}])),
    );
    let http = reqwest::Client::new();
    let token = |tenant: &str, scope: &str| {
        let mut c = claims(tenant);
        c["scope"] = json!(scope);
        key.sign(&c)
    };
    let select = json!({"sql": "SELECT id FROM testapi.items.items WHERE org = 'acme'"});

    // Each tenant's calls use its own credentials.
    let acme = rmcp_client(http.clone(), &server.url, Some(&token("acme", "mcp:read"))).await;
    let globex = rmcp_client(
        http.clone(),
        &server.url,
        Some(&token("globex", "mcp:read")),
    )
    .await;
    assert_ne!(
        call(&acme, "run_select_query", select.clone())
            .await
            .is_error,
        Some(true)
    );
    assert_ne!(
        call(&globex, "run_select_query", select.clone())
            .await
            .is_error,
        Some(true)
    );
    let keys: Vec<String> = server
        .mock
        .requests()
        .iter()
        .map(|r| r.headers["x-api-key"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys, vec![SECRET.to_owned(), OTHER_SECRET.to_owned()]);

    // acme's allowed_tools hide the rest from the list; a call is refused by the gate (and
    // so audited) with its own code.
    let mut listed: Vec<String> = acme
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    listed.sort();
    assert_eq!(listed, vec!["run_select_query", "server_info"]);
    let refused = call(&acme, "list_providers", json!({})).await;
    assert_eq!(error_code(&refused), "policy.tool_not_allowed");
    assert!(
        error_message(&refused).contains("tenants[].allowed_tools"),
        "{refused:?}"
    );
    // globex has no tool allowlist: its token's scope narrows it.
    assert!(
        crate::mcp_support::try_call(&globex, "list_providers", json!({}))
            .await
            .is_ok()
    );
    let narrow = rmcp_client(
        http.clone(),
        &server.url,
        Some(&token("globex", "mcp:info")),
    )
    .await;
    let upstream_before = server.mock.requests().len();
    let refused = call(&narrow, "run_select_query", select.clone()).await;
    assert_eq!(error_code(&refused), "policy.tool_not_allowed");
    assert!(error_message(&refused).contains("scopes"), "{refused:?}");
    assert_eq!(
        server.mock.requests().len(),
        upstream_before,
        "a refused call reached the upstream"
    );
    assert!(!text_of(&call(&narrow, "server_info", json!({})).await).is_empty());
}

#[tokio::test]
async fn a_tenant_over_its_limits_gets_429_and_the_other_is_served() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = jwt_server(
        &jwks,
        "30s",
        "    limits:\n      requests_per_second: 2\n      burst: 3\n      max_in_flight: 1\n",
        "",
    )
    .await;
    let http = reqwest::Client::new();
    let acme = key.sign(&claims("acme"));
    let globex = key.sign(&claims("globex"));

    // Rate: a burst of 3, then 429 with Retry-After; globex is not affected.
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let response = raw_call(&http, &server.url, Some(&acme)).await.unwrap();
        if response.status() == 429 {
            let retry: u64 = response.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=2).contains(&retry), "{retry}");
        }
        statuses.push(response.status().as_u16());
    }
    assert_eq!(&statuses[..3], &[200, 200, 200], "{statuses:?}");
    assert!(statuses[3..].iter().all(|s| *s == 429), "{statuses:?}");
    for _ in 0..6 {
        assert_eq!(
            raw_call(&http, &server.url, Some(&globex))
                .await
                .unwrap()
                .status(),
            200
        );
    }

    // In flight: one slow call holds acme's only slot; a second one at the same time gets 429.
    tokio::time::sleep(std::time::Duration::from_millis(1600)).await;
    let (slow, release) = Reply::json(json!([])).held();
    server.mock.route("/orgs/slow/items", slow);
    let slow_call = spawn_select(&http, &server.url, &acme, "slow");
    server
        .mock
        .wait_for(
            "/orgs/slow/items",
            1,
            std::time::Duration::from_secs(10),
            "the slow call reached the upstream",
        )
        .await;
    let second = raw_call(&http, &server.url, Some(&acme)).await.unwrap();
    assert_eq!(second.status(), 429);
    assert_eq!(
        raw_call(&http, &server.url, Some(&globex))
            .await
            .unwrap()
            .status(),
        200
    );
    release.release();
    assert_eq!(slow_call.await.unwrap(), 200);
}

/// A `run_select_query` of `org` as `token`, in a task: its HTTP status.
fn spawn_select(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    org: &str,
) -> tokio::task::JoinHandle<u16> {
    let (http, url, token) = (http.clone(), url.to_owned(), token.to_owned());
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "run_select_query",
        "arguments": {"sql": format!("SELECT id FROM testapi.items.items WHERE org = '{org}'")},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    tokio::spawn(async move {
        http.post(&url)
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "run_select_query")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    })
}

#[tokio::test]
async fn requests_refused_by_their_tenant_or_auth_never_wait_on_the_shared_in_flight_cap() {
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let url = jwks.url.clone();
    // Two requests at once over all tenants; acme may have one of them.
    let server = start_yaml(|mock, dir| {
        format!(
            "{}server:\n  listen: 127.0.0.1:0\n  max_in_flight: 2\nauth:\n  resource: {RESOURCE}\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        jwks_url: {url}\n        algorithms: [ES256]\n        tenants: [acme, globex]\n",
            base_yaml(mock, dir, "    limits:\n      max_in_flight: 1\n"),
        )
    })
    .await;
    let http = reqwest::Client::new();
    let acme = key.sign(&claims("acme"));
    let globex = key.sign(&claims("globex"));
    server.mock.route(
        "/orgs/slow/items",
        Reply::json(json!([])).delayed(std::time::Duration::from_secs(3)),
    );
    server
        .mock
        .route("/orgs/fast/items", Reply::json(json!([])));

    // One slow call of each tenant fills the shared cap (and acme's own).
    let slow_acme = spawn_select(&http, &server.url, &acme, "slow");
    let slow_globex = spawn_select(&http, &server.url, &globex, "slow");
    server
        .mock
        .wait_for(
            "/orgs/slow/items",
            2,
            std::time::Duration::from_secs(10),
            "the slow calls did not start",
        )
        .await;

    // A third globex request waits for a slot of the shared cap.
    let waiting = spawn_select(&http, &server.url, &globex, "fast");

    // acme over its own limit: 429 at once, while the shared cap is still full; so do a
    // flood of them, and a request with a bad token gets its 401 at once too.
    let refusals: Vec<_> = (0..16)
        .map(|_| {
            let (http, url, acme) = (http.clone(), server.url.clone(), acme.clone());
            tokio::spawn(async move { raw_call(&http, &url, Some(&acme)).await.unwrap() })
        })
        .collect();
    for refusal in refusals {
        let response = refusal.await.unwrap();
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "1");
    }
    let unauthenticated = raw_call(&http, &server.url, Some("not-a-token"))
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    // The probes are not behind the cap.
    assert_eq!(
        http.get(server.url.replace("/mcp", "/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert!(
        !slow_acme.is_finished() && !slow_globex.is_finished(),
        "the refusals came only after the slow calls had freed the shared cap"
    );
    assert!(
        !waiting.is_finished(),
        "a request past server.max_in_flight did not wait"
    );

    assert_eq!(slow_acme.await.unwrap(), 200);
    assert_eq!(slow_globex.await.unwrap(), 200);
    assert_eq!(waiting.await.unwrap(), 200);
}
