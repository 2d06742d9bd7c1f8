//! The MCP endpoint of `querygate serve`: streamable HTTP at `/mcp`, stateless (no `Mcp-Session-Id`; any replica
//! answers any request). 2026-07-28 clients send per-request `_meta` (and may call
//! `server/discover`); 2025-11-25 and 2025-06-18 clients `initialize` on the same endpoint.
//! Host and Origin headers are checked, request bodies are bounded.

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::config::ServerConfig;
use crate::mcp::QuerygateMcp;

/// rmcp's streamable HTTP settings for `settings` bound to `addr`: stateless (legacy session
/// mode off), JSON responses, Host and Origin allowlists (loopback names and origins of the
/// listen port unless configured), the body limit, and `shutdown` to end streams.
pub fn transport_config(
    settings: &ServerConfig,
    addr: SocketAddr,
    shutdown: CancellationToken,
) -> StreamableHttpServerConfig {
    let port = addr.port();
    let hosts = settings.allowed_hosts.clone().unwrap_or_else(|| {
        vec![
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
            "::1".to_owned(),
        ]
    });
    let mut origins = settings.allowed_origins.clone();
    if origins.is_empty() {
        origins = vec![
            format!("http://127.0.0.1:{port}"),
            format!("http://localhost:{port}"),
        ];
    }
    StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(settings.max_request_bytes)
        .with_cancellation_token(shutdown)
}

/// rmcp's stateless streamable HTTP service over `handler`, configured by [`transport_config`].
pub fn service(
    handler: QuerygateMcp,
    settings: &ServerConfig,
    addr: SocketAddr,
    shutdown: CancellationToken,
) -> StreamableHttpService<QuerygateMcp, NeverSessionManager> {
    StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        transport_config(settings, addr, shutdown),
    )
}
