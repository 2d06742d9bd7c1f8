//! The composition root: builds the engine, the tenants, the MCP handler and the HTTP stage
//! from a validated [`Config`], and runs them. Every entry point asks [`App::builder`] for
//! what it needs: `serve`, the integration tests and the load benchmark an [`App`],
//! `stdio` a session ([`AppBuilder::run_stdio`]), the command line a handler
//! ([`AppBuilder::cli_handler`], [`AppBuilder::handler`]) or the engine alone
//! ([`AppBuilder::local`]), so they run the same wiring.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::{AuthSetupError, Authentication};
use crate::clock::Clock;
use crate::config::Config;
use crate::engine::Engine;
use crate::http::drain::Drain;
use crate::http::ready::Readiness;
use crate::http::server::ConnectionLimits;
use crate::http::tls::{Tls, TlsError};
use crate::mcp::stdio::StdioError;
use crate::mcp::{self, StartError, Transport};
use crate::tenant::{TenantError, Tenants};

mod audit_open;
mod builder;

pub use audit_open::{
    AuditOpenError, close_audit, open_audit, open_audit_deferred, open_local_audit,
};
pub use builder::AppBuilder;
use builder::Wiring;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The engine could not be built from the configuration.
    #[error("{0}")]
    Engine(#[from] crate::engine::Error),
    /// A tenant's credential store could not be opened.
    #[error(transparent)]
    Tenant(#[from] TenantError),
    /// The MCP surface could not be built (an allowlist names something unknown, …).
    #[error(transparent)]
    Mcp(#[from] StartError),
    /// Authentication cannot be set up (unreadable keys, …).
    #[error(transparent)]
    Auth(#[from] AuthSetupError),
    /// TLS cannot be set up (unreadable certificate or key, …).
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The listen address could not be bound.
    #[error("cannot listen on {listen}: {source}")]
    Bind {
        /// `server.listen` or `server.admin_listen`.
        listen: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The HTTP server failed while running.
    #[error("the HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
    /// The stdio session failed.
    #[error(transparent)]
    Stdio(#[from] StdioError),
    /// The audit location cannot be written or its database reached.
    #[error(transparent)]
    Audit(#[from] AuditOpenError),
}

impl AppError {
    /// The stable code of this error, for logs and exit reports: the setup error's own code
    /// where it has one (`auth.setup.*`, `start.*`), else one per variant.
    pub fn code(&self) -> &'static str {
        match self {
            AppError::Engine(_) => "start.engine",
            AppError::Tenant(_) => "start.tenant",
            AppError::Mcp(err) => err.code(),
            AppError::Auth(err) => err.code(),
            AppError::Tls(_) => "start.tls",
            AppError::Bind { .. } => "start.bind",
            AppError::Serve(_) => "serve.failed",
            AppError::Stdio(_) => "serve.stdio_failed",
            AppError::Audit(AuditOpenError::Database(_)) => "start.audit_database",
            AppError::Audit(AuditOpenError::Sink(err)) => err.code().as_str(),
        }
    }

    /// The process exit code: 2 for a configuration that cannot work, 1 for a runtime failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            AppError::Engine(_)
            | AppError::Tenant(_)
            | AppError::Mcp(_)
            | AppError::Auth(_)
            | AppError::Tls(_) => 2,
            AppError::Bind { .. }
            | AppError::Serve(_)
            | AppError::Stdio(_)
            | AppError::Audit(_) => 1,
        }
    }
}

/// A bound, not yet running `querygate serve`.
#[derive(Debug)]
pub struct App {
    listener: TcpListener,
    addr: SocketAddr,
    router: Router,
    tls: Option<Tls>,
    limits: ConnectionLimits,
    /// Ends rmcp's open streams when the server stops.
    streams: CancellationToken,
    /// The audit of tool calls, flushed when the server stops.
    audit: Option<crate::audit::Auditor>,
    /// The main listener's stop sequence (`/readyz` follows it).
    drain: Drain,
    /// `server.drain.delay` for the listen address ([`crate::config::DrainConfig::delay_for`]).
    drain_delay: Duration,
    /// `server.drain.timeout`.
    drain_timeout: Duration,
    /// The admin listener (`server.admin_listen`): plain HTTP, the probes and
    /// [`admin_routes`].
    admin: Option<AdminListener>,
}

/// The bound admin listener.
#[derive(Debug)]
struct AdminListener {
    listener: TcpListener,
    addr: SocketAddr,
    router: Router,
}

impl App {
    /// The builder of an app for `config`.
    pub fn builder(config: Config) -> AppBuilder {
        AppBuilder::new(config)
    }

    /// Builds everything `config` describes and binds `server.listen` (port 0 picks a free
    /// port; [`App::local_addr`] tells which).
    pub async fn build(config: Config) -> Result<App, AppError> {
        App::builder(config).build().await
    }

    /// Builds the server over `audit` and `pool`, the process's one PostgreSQL pool
    /// ([`crate::db::shared_pool`]), which the approval store, the quota windows and
    /// `/readyz` share with the audit sink.
    pub(super) async fn assemble(
        config: Config,
        clock: Clock,
        audit: Option<crate::audit::Auditor>,
        pool: Option<crate::db::PgPool>,
    ) -> Result<App, AppError> {
        let listen = config.server.listen;
        let authentication = Authentication::from_config(&config, &clock)?;
        let tls = config
            .server
            .tls
            .as_ref()
            .map(crate::http::tls::build)
            .transpose()?;
        let tenants = Tenants::open(&config)?;
        tenants.watch_policies();
        warn_at_serve(&config, authentication.enabled());
        let (metrics, audit) = observed(&config, audit);
        // Refusals of the auth layer and of the TLS handshake: counted, logged, audited.
        let refusals = Arc::new(crate::auth::failures::FailureReporter::new(
            audit.clone(),
            metrics
                .clone()
                .map(|m| m as Arc<dyn crate::auth::failures::FailureCounter>),
        ));
        let authentication = Arc::new(authentication.with_failure_reporter(refusals.clone()));
        let tls = tls.map(|tls| crate::http::tls::Tls {
            refusals: Some(refusals),
            ..tls
        });
        let engine = match &metrics {
            Some(metrics) => Engine::with_observer(config.engine.clone(), metrics.clone()),
            None => Engine::new(config.engine.clone()),
        }?;
        let handler = Wiring {
            tenants,
            transport: Transport::Http,
            audit: audit.clone(),
            metrics: metrics.clone(),
            pool: pool.clone(),
            clock: clock.clone(),
        }
        .handler(&config, engine)?;
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| AppError::Bind { listen, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| AppError::Bind { listen, source })?;
        let streams = CancellationToken::new();
        // Task leases, takeovers of tasks other replicas left, and retention; until stop.
        if let Some(tasks) = handler.tasks() {
            tasks.spawn_background(handler.pipeline().clone(), streams.clone());
        }
        let drain = Drain::new();
        let readiness = Readiness::new(
            &config,
            pool,
            drain.clone(),
            // With best_effort calls go on without their records: the metric and the log
            // say so; readiness does not take the replica out of service for it.
            audit
                .as_ref()
                .filter(|a| a.failure_mode() != crate::audit::FailureMode::BestEffort)
                .map(crate::audit::Auditor::health),
            clock.clone(),
        );
        let admin = match &config.server.admin_listen {
            Some(admin) => Some(bind_admin(*admin, readiness.clone(), metrics.clone()).await?),
            None => None,
        };
        let router = crate::http::router(
            &config,
            crate::http::Surface {
                handler,
                authentication,
                addr,
                shutdown: streams.clone(),
                readiness,
                metrics,
                clock,
            },
        )?;
        if let Some(tls) = &tls {
            tls.certificate.watch();
        }
        Ok(App {
            listener,
            addr,
            router,
            tls,
            limits: ConnectionLimits {
                max_connections: config.server.max_connections,
                header_read_timeout: config.server.header_read_timeout,
            },
            streams,
            audit,
            drain,
            drain_delay: config.server.drain.delay_for(addr),
            drain_timeout: config.server.drain.timeout,
            admin,
        })
    }

    /// The admin listener's address, when `server.admin_listen` is set.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|admin| admin.addr)
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The MCP endpoint's URL, e.g. `http://127.0.0.1:8765/mcp` (`https` with TLS).
    pub fn mcp_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}/mcp", self.addr)
    }

    /// Serves until `shutdown` resolves, then drains (`server.drain`): `/readyz` answers 503
    /// at once and every response carries `Connection: close`; new connections are still
    /// accepted for `drain.delay`, so load balancers notice; then the listener closes and the
    /// connections end as their requests finish, for up to `drain.timeout`, after which what
    /// is left is cut. The audit is flushed last. The admin listener answers throughout.
    pub async fn run_until<F>(self, shutdown: F) -> Result<(), AppError>
    where
        F: Future<Output = ()> + Send,
    {
        self.run_until_hurried(shutdown, std::future::pending())
            .await
    }

    /// [`App::run_until`], where `hurry` resolving during the drain skips what is left of
    /// the delay and the timeout: requests still in flight are cut at once (`querygate
    /// serve`: a second Ctrl-C or SIGTERM).
    pub async fn run_until_hurried<F, H>(self, shutdown: F, hurry: H) -> Result<(), AppError>
    where
        F: Future<Output = ()> + Send,
        H: Future<Output = ()> + Send,
    {
        let App {
            listener,
            router,
            tls,
            limits,
            streams,
            audit,
            drain,
            drain_delay,
            drain_timeout,
            admin,
            ..
        } = self;
        let admin_drain = Drain::new();
        let admin = admin.map(|admin| {
            tokio::spawn(crate::http::server::serve(
                admin.listener,
                admin.router,
                None,
                ConnectionLimits {
                    max_connections: crate::http::admin::ADMIN_MAX_CONNECTIONS,
                    ..limits
                },
                admin_drain.clone(),
            ))
        });
        let conduct = async {
            shutdown.await;
            drain.begin();
            admin_drain.begin();
            tracing::info!(
                "draining: /readyz answers 503; the listener closes in {}",
                humantime::format_duration(drain_delay)
            );
            let mut hurry = std::pin::pin!(hurry);
            let mut hurried = tokio::select! {
                () = tokio::time::sleep(drain_delay) => false,
                () = &mut hurry => true,
            };
            drain.close();
            if !hurried {
                tracing::info!(
                    "listener closed; requests in flight have {} to finish",
                    humantime::format_duration(drain_timeout)
                );
                hurried = tokio::select! {
                    () = tokio::time::sleep(drain_timeout) => false,
                    () = &mut hurry => true,
                };
            }
            if hurried {
                eprintln!("querygate: stopping now: ending the requests still in flight");
            } else {
                eprintln!(
                    "querygate: drain timeout ({}) reached: ending the requests still in flight",
                    humantime::format_duration(drain_timeout)
                );
            }
            drain.cut();
            streams.cancel();
            std::future::pending::<()>().await;
        };
        let served = tokio::select! {
            served = crate::http::server::serve(listener, router, tls, limits, drain.clone()) => {
                served.map_err(AppError::Serve)
            }
            () = conduct => Ok(()),
        };
        // Nothing is in flight any more (or the deadline has passed): end rmcp's streams and
        // the admin listener.
        streams.cancel();
        admin_drain.cut();
        if let Some(admin) = admin {
            match admin.await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::warn!("the admin listener failed: {err}"),
                Err(err) => tracing::warn!("the admin listener task failed: {err}"),
            }
        }
        close_audit(audit).await;
        served
    }
}

/// Binds `server.admin_listen` and builds its router: the probes of `readiness` and
/// [`admin_routes`].
async fn bind_admin(
    listen: SocketAddr,
    readiness: Readiness,
    metrics: Option<Arc<crate::telemetry::Metrics>>,
) -> Result<AdminListener, AppError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| AppError::Bind { listen, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| AppError::Bind { listen, source })?;
    let router = crate::http::admin::router(readiness, admin_routes(metrics));
    Ok(AdminListener {
        listener,
        addr,
        router,
    })
}

/// The routes the admin listener serves besides `/healthz` and `/readyz`: `/metrics` when
/// metrics are on.
fn admin_routes(metrics: Option<Arc<crate::telemetry::Metrics>>) -> Router {
    metrics.map(crate::http::metrics_route).unwrap_or_default()
}

/// The server's metrics (`telemetry.metrics`), and `audit` counted in them.
fn observed(
    config: &Config,
    audit: Option<crate::audit::Auditor>,
) -> (
    Option<Arc<crate::telemetry::Metrics>>,
    Option<crate::audit::Auditor>,
) {
    let metrics = config.telemetry.metrics.then(|| {
        let tenants = config.tenants.iter().map(|t| t.id.as_str());
        crate::telemetry::Metrics::new(mcp::tool_names(), tenants)
    });
    let audit = match (audit, &metrics) {
        (Some(auditor), Some(metrics)) => {
            metrics.watch_audit_sink(auditor.sink().kind());
            if let Some(stats) = auditor.sink().export_stats() {
                stats.observe(metrics.clone());
            }
            Some(auditor.observed(metrics.clone()))
        }
        (audit, _) => audit,
    };
    (metrics, audit)
}

/// Says what a server's settings mean for whoever starts it: an address served without
/// authentication, [`warn_at_start`], and `/metrics` served nowhere.
fn warn_at_serve(config: &Config, authenticated: bool) {
    let listen = config.server.listen;
    // Loading refused this without `server.allow_unauthenticated`.
    if crate::config::exposed_unauthenticated(listen, &config.auth, config.server.tls.as_ref()) {
        tracing::warn!("serving {listen} without authentication");
        eprintln!(
            "querygate: warning: serving {listen} without authentication (server.allow_unauthenticated); anyone who reaches it acts as tenant 'default'"
        );
    }
    warn_at_start(config);
    if config.telemetry.metrics && authenticated && config.server.admin_listen.is_none() {
        tracing::warn!(
            "/metrics is not served: with authentication on it is served on server.admin_listen only, which is not set"
        );
    }
}

/// Says what the approval settings mean for whoever starts the server (stderr and the
/// log): [`crate::approval::start_warnings`], and what the registry's signature settings
/// mean ([`crate::engine::RemoteRegistryConfig::start_warnings`]).
pub(super) fn warn_at_start(config: &Config) {
    let approval = crate::approval::start_warnings(config);
    for warning in approval
        .into_iter()
        .chain(config.engine.remote.start_warnings())
    {
        tracing::warn!("{warning}");
        eprintln!("querygate: warning: {warning}");
    }
    // The provider lock is checked once now; /readyz checks it again while serving.
    let lock = crate::http::ready::lock_checker(config);
    match lock.check() {
        Ok(true) => {
            tracing::info!(lock_file = %lock.lock_file().display(), "the registry holds what its provider lock says")
        }
        Ok(false) => {}
        Err(err) => {
            let message = format!(
                "the registry differs from its provider lock: {}; /readyz answers 503 until it matches",
                err.0
            );
            tracing::error!("{message}");
            eprintln!(
                "querygate: error: {}",
                crate::safe_text::escape_controls(&message)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::DbError;

    #[test]
    fn setup_errors_keep_their_typed_cause_and_stable_code() {
        let err = AppError::from(StartError::Database(DbError::NotConfigured));
        assert_eq!(err.code(), "start.database");
        assert_eq!(err.exit_code(), 2);
        assert_eq!(
            err.to_string(),
            "approval store: no database is configured (set database.url or database.url_file)"
        );
        let start = match &err {
            AppError::Mcp(start) => start,
            other => panic!("not a start error: {other:?}"),
        };
        let cause = std::error::Error::source(start).map(|c| c.to_string());
        assert_eq!(cause, Some(DbError::NotConfigured.to_string()));

        let err = AppError::from(AuthSetupError::KeyMalformed {
            path: "k.pem".into(),
        });
        assert_eq!(err.code(), "auth.setup.key_malformed");
        assert_eq!(err.exit_code(), 2);

        let err = AppError::from(AuditOpenError::Sink(crate::audit::AuditError::Closed));
        assert_eq!(err.code(), "audit.unavailable");
        assert_eq!(err.exit_code(), 1);
    }
}
