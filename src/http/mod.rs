//! The HTTP stage of `querygate serve`: the router and its middleware, composed in one place
//! ([`router`]), and the listener that serves it ([`server`], [`tls`]). It knows nothing
//! about SQL or tools: it hands authenticated requests to rmcp's streamable HTTP service.
//!
//! ```text
//! server (accept loop: connection cap, TLS handshake per connection, header-read timeout)
//!  └─ request id → sensitive headers → trace → propagate id → timeout
//!      ├─ /healthz, /readyz, /.well-known/oauth-protected-resource[/mcp]  (no authentication),
//!      │  /metrics (only while authentication is off; else on the admin listener only)
//!      ├─ /approvals…: the approval API (with approval.out_of_band), behind the same
//!      │  authentication and tenant limits as /mcp
//!      ├─ /approve…: the approval web page (approval.web): its own OpenID Connect sign-in
//!      │  and session cookie, a body limit, security headers
//!      └─ /mcp: body limit → auth (Principal or 401/403) → tenant limits (429)
//!               → concurrency limit → body read (408, JSON-RPC 400s) → response bytes held
//!               until sent → rmcp StreamableHttpService
//! ```
//!
//! The concurrency limit (`server.max_in_flight`) is shared by all tenants, so it comes after
//! each tenant's own limits: a request refused by authentication or by its tenant's limits
//! never holds or waits for one of its slots, and a tenant holds at most its own
//! `max_in_flight` of them.
//!
//! The optional admin listener ([`admin`]) serves the probes over plain HTTP; [`drain`] is
//! the stop sequence both listeners follow; [`ready`] is `/readyz`.

pub mod admin;
pub mod approvals;
pub mod approve_web;
pub mod body;
pub mod drain;
pub mod limits;
pub mod mcp;
pub mod ready;
mod response_hold;
pub mod server;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
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

use crate::auth::{AuthLayer, Authentication};
use crate::clock::Clock;
use crate::config::Config;
use crate::mcp::QuerygateMcp;
use crate::telemetry::Metrics;

/// How much longer than `server.call_timeout` a whole HTTP request may take (reading the
/// body, the JSON-RPC handling around the call, writing the answer) before it gets 408.
pub const REQUEST_TIMEOUT_MARGIN: Duration = Duration::from_secs(30);

/// What the public HTTP surface serves, besides the configuration: the parts the
/// composition root built.
#[derive(Debug)]
pub struct Surface {
    /// The MCP handler behind `/mcp`.
    pub handler: QuerygateMcp,
    /// How callers of `/mcp` and the approval API are authenticated.
    pub authentication: Arc<Authentication>,
    /// The bound address (for the `Host` checks).
    pub addr: SocketAddr,
    /// Ends rmcp's streams.
    pub shutdown: CancellationToken,
    /// The `/readyz` checks.
    pub readiness: ready::Readiness,
    /// The metrics `/metrics` renders (served here only while authentication is off).
    pub metrics: Option<Arc<Metrics>>,
    /// What the per-tenant request rates are measured on.
    pub clock: Clock,
}

/// The public HTTP surface of `surface`: `/mcp` behind authentication, and the public
/// `/healthz`, `/readyz`, protected resource metadata and, while authentication is off,
/// `/metrics`, all behind the HTTP-level middleware. With `approval.web`, the approval page
/// too; its sign-in verifier is the one error.
pub fn router(config: &Config, surface: Surface) -> Result<Router, crate::auth::AuthSetupError> {
    let Surface {
        handler,
        authentication,
        addr,
        shutdown,
        readiness,
        metrics,
        clock,
    } = surface;
    let settings = &config.server;
    // The approval page signs its users in itself (OpenID Connect): not behind the bearer
    // authentication of `/mcp`.
    let web = approve_web::routes(
        config,
        handler.out_of_band(),
        handler.auditor(),
        authentication.failure_reporter(),
    )?
    .map(|web| web.route_layer(RequestBodyLimitLayer::new(16 * 1024)));
    let authenticated = authentication.enabled();
    let limiter = Arc::new(limits::TenantLimiter::new(&config.tenants, clock));
    // The approval API, behind the same authentication and limits as `/mcp`.
    let approvals = handler.out_of_band().map(|oob| {
        approvals::routes(oob, handler.auditor())
            .route_layer(limits::TenantLimitLayer::new(limiter.clone()))
            .route_layer(AuthLayer::new(authentication.clone()))
            .route_layer(RequestBodyLimitLayer::new(64 * 1024))
    });
    // Layers added later wrap the earlier ones: a request meets them bottom to top.
    let mcp = Router::new()
        // Reads the whole body in time (408), answers unparsable JSON-RPC with 400, keeps a
        // tool result's bytes counted until its response body is sent.
        .nest_service(
            "/mcp",
            mcp::service(
                handler,
                settings,
                addr,
                shutdown,
                crate::auth::metadata::metadata_url(&config.auth),
            ),
        )
        // `route_layer`: the layers wrap `/mcp` only, so a path the server does not have is
        // a plain 404 (not a 401 of the authentication layer).
        // Bound the requests handled at once over all tenants (`server.max_in_flight`); more
        // wait for a slot. After the tenant limits: what they refuse takes no slot.
        .route_layer(GlobalConcurrencyLimitLayer::new(settings.max_in_flight))
        // The caller's tenant limits: rate and requests in flight (429).
        .route_layer(limits::TenantLimitLayer::new(limiter))
        // Who is calling: a Principal in the extensions, or 401/403 before the body is read.
        .route_layer(AuthLayer::new(authentication))
        // Refuse bodies over `server.max_request_bytes` by Content-Length (413).
        .route_layer(RequestBodyLimitLayer::new(settings.max_request_bytes));

    let mut public = ready::probes(readiness);
    // With authentication on, the metrics (every tenant id and its activity) are not for
    // whoever reaches the main port: only the admin listener serves them.
    if let Some(metrics) = metrics.filter(|_| !authenticated) {
        public = public.merge(metrics_route(metrics));
    }
    if config.auth.jwt.is_some() {
        let document = crate::auth::metadata::document(&config.auth);
        let serve = move || {
            let document = document.clone();
            async move { axum::Json(document) }
        };
        public = public
            .route(
                "/.well-known/oauth-protected-resource",
                axum::routing::get(serve.clone()),
            )
            .route(
                "/.well-known/oauth-protected-resource/mcp",
                axum::routing::get(serve),
            );
    }

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
        ));

    let mut app = public.merge(mcp);
    if let Some(approvals) = approvals {
        app = app.merge(approvals);
    }
    if let Some(web) = web {
        app = app.merge(web);
    }
    Ok(app.layer(stack))
}

/// `GET /metrics`: the Prometheus metrics as OpenMetrics text, without authentication, as
/// Prometheus scrapes it (the admin listener mounts it; the main router too while
/// authentication is off).
pub fn metrics_route(metrics: Arc<Metrics>) -> Router {
    Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let metrics = metrics.clone();
            async move {
                (
                    [(
                        http::header::CONTENT_TYPE,
                        crate::telemetry::metrics::CONTENT_TYPE,
                    )],
                    metrics.render(),
                )
            }
        }),
    )
}
