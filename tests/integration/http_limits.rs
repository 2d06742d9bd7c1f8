//! HTTP-level bounds and answers: a half-sent request does not hold a connection, the
//! connection cap answers 503, unparsable JSON-RPC gets 400 with a JSON-RPC error, and a bad
//! listen address or an unauthenticated public bind is a configuration error.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::mcp_support::start;
use crate::support::{fixture_registry, querygate_command};

fn addr_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned()
}

/// Reads until the server closes the connection (or `limit` passes); returns what came.
async fn read_to_close(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut out = Vec::new();
    let read = tokio::time::timeout(limit, stream.read_to_end(&mut out)).await;
    read.ok()
        .map(|_| String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test]
async fn half_sent_requests_do_not_hold_connections() {
    let server = start(
        "read_only",
        "  header_read_timeout: 300ms\n  body_read_timeout: 300ms\n",
    )
    .await;
    let addr = addr_of(&server.url);

    // Headers that never end: the connection is closed after the header-read timeout.
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let answer = read_to_close(&mut stream, Duration::from_secs(5)).await;
    assert!(answer.is_some(), "the connection was held open");
    assert!(started.elapsed() < Duration::from_secs(3));

    // A body that never completes: 408 after the body-read timeout.
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(
            format!(
                "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: 100\r\n\r\n{{\"jsonrpc\""
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let answer = read_to_close(&mut stream, Duration::from_secs(5))
        .await
        .expect("the connection was held open");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}

#[tokio::test]
async fn connections_over_the_cap_get_503() {
    let server = start("read_only", "  max_connections: 2\n").await;
    let addr = addr_of(&server.url);
    let _a = TcpStream::connect(&addr).await.unwrap();
    let _b = TcpStream::connect(&addr).await.unwrap();
    // Once the server has taken both, a third connection is answered 503 and closed (one
    // accepted before the server took them is held open, and is dropped for another).
    let answer = crate::support::wait::eventually(
        "a connection over the cap answered",
        Duration::from_secs(10),
        Duration::ZERO,
        || async {
            let mut third = TcpStream::connect(&addr).await.unwrap();
            read_to_close(&mut third, Duration::from_millis(200))
                .await
                .ok_or("held open")
        },
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    // Once the server has seen both go, a connection is served again.
    drop((_a, _b));
    crate::support::wait::eventually(
        "a connection served after the others closed",
        Duration::from_secs(10),
        Duration::from_millis(10),
        || async {
            let health = reqwest::get(format!("http://{addr}/healthz")).await;
            health
                .map(|r| r.status())
                .map_err(|err| err.to_string())
                .and_then(|status| {
                    if status == 200 {
                        Ok(())
                    } else {
                        Err(status.to_string())
                    }
                })
        },
    )
    .await;
}

#[tokio::test]
async fn malformed_json_and_batches_get_400_with_a_json_rpc_error() {
    let server = start("read_only", "").await;
    let http = reqwest::Client::new();
    let post = |body: &'static str| {
        http.post(&server.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .body(body)
            .send()
    };
    for (body, code) in [
        ("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ", -32700),
        ("not json", -32700),
        (
            "[{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}]",
            -32600,
        ),
        ("{\"hello\": 1}", -32600),
    ] {
        let response = post(body).await.unwrap();
        assert_eq!(response.status(), 400, "{body}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert_eq!(answer["error"]["code"], json!(code), "{body}: {answer}");
        assert_eq!(answer["id"], Value::Null);
    }
}

#[test]
fn a_bad_listen_address_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("q.yaml");
    let base = format!(
        "registry:\n  root: {}\ncredentials:\n  process_env: false\n",
        fixture_registry().display()
    );
    std::fs::write(&config, format!("{base}server:\n  listen: nonsense\n")).unwrap();
    let out = querygate_command()
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("server.listen: 'nonsense'"), "{stderr}");

    std::fs::write(&config, &base).unwrap();
    let out = querygate_command()
        .args(["serve", "--listen", "also-nonsense", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The option is checked with the rest of the configuration and named.
    assert!(
        stderr.contains("--listen (server.listen): 'also-nonsense' is not an address"),
        "{stderr}"
    );

    // `--listen` to a public address is held to the same rule as the file's `listen`.
    let out = querygate_command()
        .args(["serve", "--listen", "0.0.0.0:0", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--listen (server.listen): 0.0.0.0:0 is not a loopback address"),
        "{stderr}"
    );

    // A public address without authentication needs allow_unauthenticated.
    std::fs::write(&config, format!("{base}server:\n  listen: 0.0.0.0:0\n")).unwrap();
    let out = querygate_command()
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("allow_unauthenticated"), "{stderr}");
}

/// With authentication on, a path the server does not have is 404, not the 401 that `/mcp`
/// answers without a credential: the authentication layer wraps `/mcp` only.
#[tokio::test]
async fn unknown_paths_are_404_also_with_authentication() {
    use crate::support::identity::{JwksServer, SigningKey, jwt_server};
    crate::mcp_support::install_crypto_provider();
    let key = SigningKey::new("k1");
    let jwks = JwksServer::start(json!({"keys": [key.jwk()]})).await;
    let server = jwt_server(&jwks, "300ms", "", "").await;
    let http = reqwest::Client::new();
    let base = server.url.trim_end_matches("/mcp").to_owned();
    for path in [
        "/.well-known/openid-configuration",
        "/.well-known/oauth-authorization-server",
        "/nope",
    ] {
        let response = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }
    let document = http
        .get(format!("{base}/.well-known/oauth-protected-resource"))
        .send()
        .await
        .unwrap();
    assert_eq!(document.status(), 200);
    let unauthenticated = http
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
}
