//! Bearer tokens at the edge: time claims that are not NumericDates or lie in the future are
//! refused, so is a token naming critical header parameters (`crit`), and a slow JWKS endpoint (one on 127.0.0.1 that holds its answer until the test
//! lets it go) is fetched once per refresh while cached keys keep verifying.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::mcp_support::{TestServer, start_yaml};
use crate::support::identity::{ISSUER, RESOURCE, SigningKey, base_yaml, claims, now, raw_call};

/// Long enough for any answer that does not wait for the held JWKS fetch.
const PROMPT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn time_claims_must_be_numeric_dates_and_iat_not_in_the_future() {
    let key = SigningKey::new("k1");
    let jwks = GatedJwks::start(json!({"keys": [key.jwk()]})).await;
    let server = server(&jwks, "10m", "30s").await;
    let http = reqwest::Client::new();
    let with = |name: &str, value: Value| {
        let mut c = claims("acme");
        c[name] = value;
        key.sign(&c)
    };
    let refused = [
        ("nbf", json!("soon")),
        ("nbf", Value::Null),
        ("nbf", json!(true)),
        ("nbf", json!(1e30)),
        ("nbf", json!(-5)),
        ("iat", json!("now")),
        ("iat", json!(-1)),
        ("exp", json!(1e15)),
    ];
    for (name, value) in refused {
        let response = raw_call(&http, &server.url, Some(&with(name, value.clone())))
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{name}: {value}");
        let challenge = response.headers()["www-authenticate"].to_str().unwrap();
        assert!(
            challenge.contains(&format!("the token's '{name}' is not a NumericDate")),
            "{name}: {value}: {challenge}"
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], "auth.invalid_token");
    }
    // Issued in the future beyond the leeway (30 s): refused; within it: accepted.
    let response = raw_call(&http, &server.url, Some(&with("iat", json!(now() + 3600))))
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert!(
        response.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("issued in the future")
    );
    for (name, value) in [
        ("iat", json!(now() + 10)),
        ("nbf", json!(now() as f64 - 0.5)),
    ] {
        let response = raw_call(&http, &server.url, Some(&with(name, value.clone())))
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{name}: {value}");
    }
}

#[tokio::test]
async fn cached_keys_keep_verifying_while_a_slow_refresh_runs() {
    let key = SigningKey::new("k1");
    let jwks = GatedJwks::start(json!({"keys": [key.jwk()]})).await;
    // Refreshes are not spaced; the cached set goes stale when the server's clock passes
    // its 10 minutes.
    let server = server(&jwks, "10m", "0s").await;
    let http = reqwest::Client::new();
    let token = |n: u32| {
        let mut c = claims("acme");
        c["jti"] = json!(n);
        key.sign(&c)
    };
    assert_eq!(status(&http, &server, &token(0)).await, 200);
    assert_eq!(jwks.arrivals(), 1);

    // From here on the endpoint holds its answers, and the cached set is stale.
    jwks.hold();
    server.clock.advance(Duration::from_secs(11 * 60));
    let prompt = tokio::time::timeout(PROMPT, status(&http, &server, &token(1))).await;
    assert_eq!(
        prompt.expect("a token with a cached key waited for the slow refresh"),
        200
    );
    jwks.wait_for_arrivals(2).await;
    // More requests while that refresh is held: served from the cache, no second fetch.
    let calls = (2..10).map(|n| {
        let (http, token) = (http.clone(), token(n));
        let server = &server;
        async move { status(&http, server, &token).await }
    });
    let statuses = tokio::time::timeout(PROMPT, futures::future::join_all(calls))
        .await
        .expect("requests with cached keys waited for the slow refresh");
    assert_eq!(statuses, vec![200; 8]);
    assert_eq!(jwks.arrivals(), 2, "one fetch per refresh");
    jwks.release();
}

#[tokio::test]
async fn an_unknown_key_id_waits_for_one_fetch_shared_by_all() {
    let old = SigningKey::new("old");
    let new = SigningKey::new("new");
    let jwks = GatedJwks::start(json!({"keys": [old.jwk()]})).await;
    let server = server(&jwks, "10m", "0s").await;
    let http = reqwest::Client::new();
    let token = |key: &SigningKey, n: u32| {
        let mut c = claims("acme");
        c["jti"] = json!(n);
        key.sign(&c)
    };
    assert_eq!(status(&http, &server, &token(&old, 0)).await, 200);

    // The issuer rotates to a new key; the endpoint is slow to answer.
    jwks.hold();
    *jwks.keys.lock().unwrap() = json!({"keys": [old.jwk(), new.jwk()]});
    let spawn = |n: u32| {
        let (http, url, token) = (http.clone(), server.url.clone(), token(&new, n));
        tokio::spawn(async move {
            raw_call(&http, &url, Some(&token))
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    let first = spawn(0);
    jwks.wait_for_arrivals(2).await;
    let others: Vec<_> = (1..8).map(spawn).collect();
    // The old key still verifies meanwhile.
    let prompt = tokio::time::timeout(PROMPT, status(&http, &server, &token(&old, 1))).await;
    assert_eq!(prompt.expect("a cached key waited for the fetch"), 200);

    jwks.release();
    assert_eq!(first.await.unwrap(), 200);
    for other in others {
        assert_eq!(other.await.unwrap(), 200);
    }
    assert_eq!(
        jwks.arrivals(),
        2,
        "the requests with the new kid shared one fetch"
    );
}

/// A server trusting [`ISSUER`] with `jwks`'s key set.
async fn server(jwks: &GatedJwks, max_age: &str, floor: &str) -> TestServer {
    let url = jwks.url.clone();
    let (max_age, floor) = (max_age.to_owned(), floor.to_owned());
    start_yaml(|mock, dir| {
        format!(
            "{}server:\n  listen: 127.0.0.1:0\nauth:\n  resource: {RESOURCE}\n  jwt:\n    jwks_max_age: {max_age}\n    jwks_refresh_floor: {floor}\n    issuers:\n      - issuer: {ISSUER}\n        jwks_url: {url}\n        algorithms: [ES256]\n        tenants: [acme]\n",
            base_yaml(mock, dir, ""),
        )
    })
    .await
}

async fn status(http: &reqwest::Client, server: &TestServer, token: &str) -> u16 {
    raw_call(http, &server.url, Some(token))
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// A JWKS endpoint on 127.0.0.1 that counts the requests reaching it and, while held,
/// answers none of them until released.
struct GatedJwks {
    url: String,
    keys: Arc<Mutex<Value>>,
    open: watch::Sender<bool>,
    arrivals: watch::Receiver<usize>,
}

impl GatedJwks {
    async fn start(keys: Value) -> Self {
        let keys = Arc::new(Mutex::new(keys));
        let (open, gate) = watch::channel(true);
        let (arrived, arrivals) = watch::channel(0usize);
        let arrived = Arc::new(arrived);
        let served = keys.clone();
        let app = axum::Router::new().route(
            "/jwks.json",
            axum::routing::get(move || {
                let (served, arrived, mut gate) = (served.clone(), arrived.clone(), gate.clone());
                async move {
                    arrived.send_modify(|n| *n += 1);
                    gate.wait_for(|open| *open).await.unwrap();
                    axum::Json(served.lock().unwrap().clone())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        GatedJwks {
            url: format!("http://{addr}/jwks.json"),
            keys,
            open,
            arrivals,
        }
    }

    /// Requests that arrive from now on wait for [`GatedJwks::release`].
    fn hold(&self) {
        self.open.send_replace(false);
    }

    fn release(&self) {
        self.open.send_replace(true);
    }

    fn arrivals(&self) -> usize {
        *self.arrivals.borrow()
    }

    async fn wait_for_arrivals(&self, n: usize) {
        let mut arrivals = self.arrivals.clone();
        tokio::time::timeout(PROMPT, arrivals.wait_for(|a| *a >= n))
            .await
            .unwrap_or_else(|_| panic!("fewer than {n} JWKS fetches arrived"))
            .unwrap();
    }
}

#[tokio::test]
async fn a_token_naming_critical_header_parameters_is_refused() {
    let key = SigningKey::new("k1");
    let jwks = GatedJwks::start(json!({"keys": [key.jwk()]})).await;
    let server = server(&jwks, "10m", "30s").await;
    let http = reqwest::Client::new();
    // The same header and claims without `crit`: accepted (the signature is sound).
    let plain = json!({"alg": "ES256", "typ": "JWT", "kid": "k1"});
    let response = raw_call(
        &http,
        &server.url,
        Some(&key.sign_with_header(&plain, &claims("acme"))),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let critical =
        json!({"alg": "ES256", "typ": "JWT", "kid": "k1", "crit": ["qg-ext"], "qg-ext": true});
    let response = raw_call(
        &http,
        &server.url,
        Some(&key.sign_with_header(&critical, &claims("acme"))),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 401);
    assert!(
        response.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("critical parameters (crit)"),
        "{:?}",
        response.headers()
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "auth.invalid_token");
}
