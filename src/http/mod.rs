//! The HTTP stage of `querygate serve`: the router and its middleware, composed in one place
//! ([`router`]), and the listener that serves it ([`server`]). It knows nothing about SQL or
//! tools: it hands authenticated requests to rmcp's streamable HTTP service at `/mcp`.
//!
//! ```text
//! server (accept loop: connection cap, TLS handshake per connection, header-read timeout)
//!  └─ request id → sensitive headers → trace → propagate id → timeout → concurrency limit
//!      ├─ /healthz                              (no authentication)
//!      └─ /mcp: body limit → rmcp StreamableHttpService
//! ```

pub mod mcp;
pub mod server;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use http::StatusCode;
use http::header::{AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION};
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::config::ServerConfig;
use crate::mcp::QuerygateMcp;

/// Requests the server handles at once (over all connections); more wait for a slot.
pub const MAX_IN_FLIGHT: usize = 1024;

/// How much longer than `server.call_timeout` a whole HTTP request may take (reading the
/// body, the JSON-RPC handling around the call, writing the answer) before it gets 408.
pub const REQUEST_TIMEOUT_MARGIN: Duration = Duration::from_secs(30);

/// The public HTTP surface for `handler`, bound to `addr`: `/mcp` and `/healthz`, behind the
/// HTTP-level middleware. `shutdown` ends rmcp's streams.
pub fn router(
    handler: QuerygateMcp,
    settings: &ServerConfig,
    addr: SocketAddr,
    shutdown: CancellationToken,
) -> Router {
    let mcp = Router::new()
        .nest_service("/mcp", mcp::service(handler, settings, addr, shutdown))
        // Without authentication every caller is the anonymous principal of tenant `default`,
        // named explicitly: the MCP handler refuses requests that carry no principal.
        .layer(axum::Extension(crate::tenant::Principal::anonymous()))
        // Refuse bodies over `server.max_request_bytes` (413) before rmcp buffers them.
        .layer(RequestBodyLimitLayer::new(settings.max_request_bytes));

    // Outermost first: a request passes these top to bottom.
    let stack = ServiceBuilder::new()
        // Give every request an `x-request-id` (a UUID) unless the client sent one.
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        // Keep credentials out of traces and logs.
        .layer(SetSensitiveRequestHeadersLayer::new([
            AUTHORIZATION,
            PROXY_AUTHORIZATION,
            COOKIE,
        ]))
        // One span per request; failures (5xx) are logged.
        .layer(TraceLayer::new_for_http())
        // Echo the request id in the response.
        .layer(PropagateRequestIdLayer::x_request_id())
        // Bound a whole request: the tool call's own timeout plus a margin; then 408.
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            settings.call_timeout + REQUEST_TIMEOUT_MARGIN,
        ))
        // Bound the requests handled at once; more wait for a slot.
        .layer(GlobalConcurrencyLimitLayer::new(MAX_IN_FLIGHT));

    Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .merge(mcp)
        .layer(stack)
}
