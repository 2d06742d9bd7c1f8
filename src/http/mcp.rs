//! The MCP endpoint of `querygate serve`: streamable HTTP at `/mcp`, stateless (no `Mcp-Session-Id`; any replica
//! answers any request). 2026-07-28 clients send per-request `_meta` (and may call
//! `server/discover`); 2025-11-25 and 2025-06-18 clients `initialize` on the same endpoint.
//! Host and Origin headers are checked, request bodies are read within their bounds
//! ([`super::body`]), and a tool result's counted bytes stay held until its response body
//! has been sent ([`super::response_hold`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use futures::future::BoxFuture;
use http::{Request, Response};

use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::body::{self, BodyLimits, ReadRequest};
use super::response_hold;
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
/// behind an [`Endpoint`] that reads bodies within `settings`' bounds; `resource_metadata`
/// (the RFC 9728 document's URL) goes into the challenge of a step-up `403`.
pub fn service(
    handler: QuerygateMcp,
    settings: &ServerConfig,
    addr: SocketAddr,
    shutdown: CancellationToken,
    resource_metadata: Option<String>,
) -> Endpoint {
    Endpoint {
        rmcp: Arc::new(StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(NeverSessionManager::default()),
            transport_config(settings, addr, shutdown),
        )),
        body_limits: BodyLimits {
            read_timeout: settings.body_read_timeout,
            max_bytes: settings.max_request_bytes,
        },
        resource_metadata: resource_metadata.map(Arc::from),
    }
}

/// The `/mcp` service: reads the request body within its bounds, hands the request to rmcp's
/// streamable HTTP service, and ties a tool result's held bytes to the response body. A
/// tool call the gate refused for a missing scope (the handler leaves the scopes in the
/// request's [`ResponseSlot`](crate::mcp::pipeline::response_bytes::ResponseSlot)) is
/// answered `403` with `WWW-Authenticate: Bearer error="insufficient_scope", scope="…",
/// resource_metadata="…"`: MCP's step-up authorization. The statement is parsed once, by
/// the pipeline; this layer reads only the slot.
///
/// rmcp's service is shared: cloning an `Endpoint` is one reference count. The layers in
/// front of `/mcp` clone their inner service for every request (tower's ready-service
/// pattern), and rmcp's own service copies its settings (the host and origin allowlists)
/// on every clone.
#[derive(Clone)]
pub struct Endpoint {
    rmcp: Arc<StreamableHttpService<QuerygateMcp, NeverSessionManager>>,
    body_limits: BodyLimits,
    resource_metadata: Option<Arc<str>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("body_limits", &self.body_limits)
            .finish_non_exhaustive()
    }
}

impl tower::Service<Request<Body>> for Endpoint {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let rmcp = self.rmcp.clone();
        let limits = self.body_limits;
        let resource_metadata = self.resource_metadata.clone();
        Box::pin(async move {
            let ReadRequest {
                mut request,
                json_body,
            } = match body::read(request, limits).await {
                Ok(read) => read,
                Err(refusal) => return Ok(refusal),
            };
            let slot = response_hold::give_slot(&mut request);
            // A large result is serialized off this worker's queue.
            let handling = std::pin::pin!(rmcp.handle(request));
            let response = response_hold::off_queue_when_large(&slot, handling)
                .await
                .map(Body::new);
            if let Some(scopes) = slot.take_step_up() {
                return Ok(insufficient_scope(&scopes, resource_metadata.as_deref()));
            }
            let response = body::answer_refusal(json_body.as_deref(), response);
            Ok(response_hold::hold_until_sent(&slot, response))
        })
    }
}

/// The `403` of a tool call beyond the token's scopes: the challenge names the scopes the
/// call needs (only those, as MCP's step-up asks) and the protected resource metadata.
fn insufficient_scope(scopes: &[&str], resource_metadata: Option<&str>) -> Response<Body> {
    use http::header::{CONTENT_TYPE, WWW_AUTHENTICATE};
    use http::{HeaderValue, StatusCode};

    let scope = scopes.join(" ");
    let mut challenge = format!("Bearer error=\"insufficient_scope\", scope=\"{scope}\"");
    if let Some(url) = resource_metadata {
        challenge.push_str(&format!(", resource_metadata=\"{url}\""));
    }
    let description = format!("the token lacks the scope {scope} this call needs");
    challenge.push_str(&format!(", error_description=\"{description}\""));
    let body = serde_json::json!({
        "error": "Forbidden",
        "code": crate::code::Code::AuthInsufficientScope.as_str(),
        "message": description,
        "required_scopes": scopes,
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::FORBIDDEN;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        headers.insert(WWW_AUTHENTICATE, value);
    }
    response
}
