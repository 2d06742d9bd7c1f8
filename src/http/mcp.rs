//! The MCP endpoint of `querygate serve`: streamable HTTP at `/mcp`, stateless (no `Mcp-Session-Id`; any replica
//! answers any request). 2026-07-28 clients send per-request `_meta` (and may call
//! `server/discover`); 2025-11-25 and 2025-06-18 clients `initialize` on the same endpoint.
//! Host and Origin headers are checked, request bodies are bounded.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;

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

/// rmcp's stateless streamable HTTP service over `handler`, configured by [`transport_config`],
/// behind an [`Endpoint`].
pub fn service(
    handler: QuerygateMcp,
    settings: &ServerConfig,
    addr: SocketAddr,
    shutdown: CancellationToken,
) -> Endpoint {
    Endpoint(Arc::new(StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        transport_config(settings, addr, shutdown),
    )))
}

/// rmcp's streamable HTTP service, shared: cloning it is one reference count. The layers in
/// front of `/mcp` clone their inner service for every request (tower's ready-service
/// pattern), and rmcp's own service copies its settings (the host and origin allowlists)
/// on every clone; this one hands each request to the shared service instead.
#[derive(Clone)]
pub struct Endpoint(Arc<StreamableHttpService<QuerygateMcp, NeverSessionManager>>);

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").finish_non_exhaustive()
    }
}

impl tower::Service<Request<Body>> for Endpoint {
    type Response = Response<BoxBody<Bytes, Infallible>>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { Ok(service.handle(request).await) })
    }
}
