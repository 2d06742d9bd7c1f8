//! Identity end to end: HTTPS with client certificates (rcgen-generated PKI), JWT bearer
//! tokens against a JWKS server on 127.0.0.1, tenants from identity, per-tenant tools and
//! limits. Every refusal is an HTTP answer of the auth layer, before rmcp reads JSON-RPC.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};

use crate::mcp_support::{call, error_code, error_message, start_yaml, text_of};
use crate::mock::Reply;
use crate::support::SECRET;
use crate::support::raw::RawCall;

use crate::support::identity::*;

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
    // A broken pair is not taken; the last good one stays. The reload that refused it
    // says so in the log (naming the file): after that line the server has looked.
    crate::logs::capture();
    std::fs::write(&cert_file, "not a certificate").unwrap();
    crate::support::wait::eventually(
        "the broken certificate refused by a reload",
        std::time::Duration::from_secs(5),
        std::time::Duration::from_millis(20),
        || async {
            crate::logs::recorded().lines().any(|line| {
                line.contains("TLS certificate not reloaded") && line.contains(&cert_file)
            })
        },
    )
    .await;
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

    let public_pem = key.public_pem();
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
    // The floor is long; the test moves the server's clock past it instead of waiting.
    let server = jwt_server(&jwks, "30s", "", "").await;
    let past_the_floor = || server.clock.advance(std::time::Duration::from_secs(31));
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
    past_the_floor();
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
    past_the_floor();
    let calls = (0..8).map(|_| raw_call(&http, &server.url, Some(&token)));
    for response in futures::future::join_all(calls).await {
        assert_eq!(response.unwrap().status(), 401);
    }
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 3);

    // Rotation: the issuer publishes a new key; its tokens are accepted after one fetch.
    past_the_floor();
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
        // A token every 10 s: no refill while the burst is spent, however slow the machine.
        "    limits:\n      requests_per_second: 0.1\n      burst: 3\n      max_in_flight: 1\n",
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
            assert!((5..=10).contains(&retry), "{retry}");
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
    // The bucket refilled first (the server's clock moved past 30 s: 3 tokens).
    server.clock.advance(std::time::Duration::from_secs(30));
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
    let call = RawCall::new(
        "run_select_query",
        json!({"sql": format!("SELECT id FROM testapi.items.items WHERE org = '{org}'")}),
    )
    .id(2)
    .bearer(&token);
    tokio::spawn(async move { call.send(&http, &url).await.unwrap().status().as_u16() })
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
