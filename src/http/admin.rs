//! The admin listener (`server.admin_listen`): plain HTTP without client certificates or
//! authentication, for probes and scrapers that cannot present the credentials the main
//! listener asks for. It serves `/healthz` and `/readyz`, plus the routes the composition
//! root adds (`extra`, e.g. a metrics endpoint). It carries nothing about tenants or calls:
//! keep it on a port only the platform reaches (a NetworkPolicy, a loopback address).

use std::time::Duration;

use axum::Router;
use http::StatusCode;
use tower_http::timeout::TimeoutLayer;

use super::ready::{Readiness, probes};

/// The longest an admin request may take (then 408).
pub const ADMIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections the admin listener serves at once.
pub const ADMIN_MAX_CONNECTIONS: usize = 64;

/// The admin listener's routes: the probes of `readiness`, and `extra`.
pub fn router(readiness: Readiness, extra: Router) -> Router {
    probes(readiness)
        .merge(extra)
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            ADMIN_REQUEST_TIMEOUT,
        ))
}
