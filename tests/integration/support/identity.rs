//! Identity helpers shared by the tests: a PKI of test certificates (rcgen), ES256 signing
//! keys and a JWKS server on 127.0.0.1, rmcp and raw clients, and the common configuration
//! of the identity tests (the fixture registry, tenants `default`, `acme`, `globex`).

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

use crate::mcp_support::{Client, TestServer, install_crypto_provider, start_yaml};
use crate::support::raw::RawCall;
use crate::support::{SECRET, fixture_registry};

pub const RESOURCE: &str = "https://querygate.test/mcp";
pub const ISSUER: &str = "https://idp.test";
pub const OTHER_SECRET: &str = "tk-globex-secret-7731";

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
    RawCall::new("server_info", json!({}))
        .bearer_opt(token)
        .send(http, url)
        .await
}

/// The common part of a test configuration: the fixture registry, the mock as `testapi`,
/// and tenants `default`, `acme` (key [`SECRET`]) and `globex` (key [`OTHER_SECRET`]).
pub fn base_yaml(mock: &str, dir: &Path, tenant_extra: &str) -> String {
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

pub fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

pub fn tenant_of(result: &rmcp::model::CallToolResult) -> String {
    result.structured_content.as_ref().unwrap()["tenant"]
        .as_str()
        .unwrap()
        .to_owned()
}

// === JWT ===

/// An ES256 signing key and its JWK.
pub struct SigningKey {
    kid: String,
    pair: KeyPair,
}

impl SigningKey {
    pub fn new(kid: &str) -> Self {
        SigningKey {
            kid: kid.to_owned(),
            pair: KeyPair::generate().unwrap(),
        }
    }

    pub fn jwk(&self) -> Value {
        let raw = self.pair.public_key_raw();
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        json!({"kty": "EC", "crv": "P-256", "x": b64(&raw[1..33]), "y": b64(&raw[33..65]),
               "kid": self.kid, "alg": "ES256", "use": "sig"})
    }

    /// The private key, PKCS#8 PEM (for an OpenID provider run in a test to sign with).
    pub fn private_pem(&self) -> String {
        self.pair.serialize_pem()
    }

    /// The public key, PEM (for `public_keys`).
    pub fn public_pem(&self) -> String {
        self.pair.public_key_pem()
    }

    /// A token signed with `header` as written (members jsonwebtoken's `Header` has no
    /// field for, such as `crit`, included).
    pub fn sign_with_header(&self, header: &Value, claims: &Value) -> String {
        let b64 = |v: &Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string().as_bytes())
        };
        let message = format!("{}.{}", b64(header), b64(claims));
        let key = EncodingKey::from_ec_pem(self.pair.serialize_pem().as_bytes()).unwrap();
        let signature =
            jsonwebtoken::crypto::sign(message.as_bytes(), &key, Algorithm::ES256).unwrap();
        format!("{message}.{signature}")
    }

    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        let key = EncodingKey::from_ec_pem(self.pair.serialize_pem().as_bytes()).unwrap();
        jsonwebtoken::encode(&header, claims, &key).unwrap()
    }
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub fn claims(tenant: &str) -> Value {
    json!({"iss": ISSUER, "aud": RESOURCE, "sub": format!("{tenant}-agent"), "tenant": tenant,
           "exp": now() + 600, "nbf": now() - 10, "iat": now()})
}

/// A JWKS endpoint on 127.0.0.1 serving `keys` (replaceable) and counting fetches.
pub struct JwksServer {
    pub url: String,
    pub keys: Arc<Mutex<Value>>,
    pub fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    pub async fn start(keys: Value) -> Self {
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

pub async fn jwt_server(
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
