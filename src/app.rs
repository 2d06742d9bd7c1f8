//! The composition root: builds the engine, the tenants, the MCP handler and the HTTP stage
//! from a validated [`Config`], and runs them. The CLI, the integration tests and the load
//! benchmark all start servers through [`App`], so they run the same wiring.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::{AuthSetupError, Authentication};
use crate::config::Config;
use crate::engine::Engine;
use crate::http::drain::Drain;
use crate::http::ready::Readiness;
use crate::http::server::ConnectionLimits;
use crate::http::tls::{Tls, TlsError};
use crate::mcp::stdio::StdioError;
use crate::mcp::{self, QuerygateMcp, StartError, Transport};
use crate::tenant::{TenantError, Tenants};

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
    /// `server.listen` is not an address.
    #[error("server.listen '{0}' is not an address such as 127.0.0.1:8765 or localhost:8765")]
    Listen(String),
    /// `server.admin_listen` is not an address.
    #[error("server.admin_listen '{0}' is not an address such as 127.0.0.1:9090 or localhost:9090")]
    AdminListen(String),
    /// A non-loopback address without authentication, not explicitly allowed.
    #[error(
        "{0} is not a loopback address and no authentication is configured (auth.mtls or auth.jwt); set server.allow_unauthenticated: true to serve it anyway"
    )]
    Unauthenticated(SocketAddr),
    /// Authentication cannot be set up (unreadable keys, …).
    #[error(transparent)]
    Auth(#[from] AuthSetupError),
    /// TLS cannot be set up (unreadable certificate or key, …).
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The listen address could not be bound.
    #[error("cannot listen on {listen}: {source}")]
    Bind {
        /// `server.listen`.
        listen: String,
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

/// Why the audit could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum AuditOpenError {
    /// The database of the PostgreSQL sink cannot be reached.
    #[error("audit: {0}")]
    Database(#[from] crate::db::DbError),
    /// The sink cannot be started (an unwritable location, an unreadable HMAC key, …).
    #[error("audit: {0}")]
    Sink(#[from] crate::audit::AuditError),
}

impl AppError {
    /// The stable code of this error, for logs and exit reports: the setup error's own code
    /// where it has one (`auth.setup.*`, `start.*`), else one per variant.
    pub fn code(&self) -> &'static str {
        match self {
            AppError::Engine(_) => "start.engine",
            AppError::Tenant(_) => "start.tenant",
            AppError::Mcp(err) => err.code(),
            AppError::Listen(_) => "start.listen",
            AppError::AdminListen(_) => "start.admin_listen",
            AppError::Unauthenticated(_) => "start.unauthenticated",
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
            | AppError::Listen(_)
            | AppError::AdminListen(_)
            | AppError::Unauthenticated(_)
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
    /// Builds everything `config` describes and binds `server.listen` (port 0 picks a free
    /// port; [`App::local_addr`] tells which).
    pub async fn build(config: Config) -> Result<App, AppError> {
        let pool = crate::db::shared_pool(&config).map_err(StartError::Database)?;
        let audit = open_audit_on(&config, pool.clone(), true).await?;
        App::assemble(config, audit, pool).await
    }

    /// [`App::build`] with the audit of tool calls given (tests inject their own sink);
    /// `None` serves without audit.
    pub async fn build_with(
        config: Config,
        audit: Option<crate::audit::Auditor>,
    ) -> Result<App, AppError> {
        let pool = crate::db::shared_pool(&config).map_err(StartError::Database)?;
        App::assemble(config, audit, pool).await
    }

    /// Builds the server over `audit` and `pool`, the process's one PostgreSQL pool
    /// ([`crate::db::shared_pool`]), which the approval store, the quota windows and
    /// `/readyz` share with the audit sink.
    async fn assemble(
        config: Config,
        audit: Option<crate::audit::Auditor>,
        pool: Option<crate::db::PgPool>,
    ) -> Result<App, AppError> {
        let listen: SocketAddr = crate::config::resolve_listen(&config.server.listen)
            .ok_or_else(|| AppError::Listen(config.server.listen.clone()))?;
        let authentication = Authentication::from_config(&config)?;
        let tls = config
            .server
            .tls
            .as_ref()
            .map(crate::http::tls::build)
            .transpose()?;
        watch_policies(&config);
        let mtls_required = config.server.tls.as_ref().is_some_and(|t| {
            t.client_ca_file.is_some() && t.client_auth == crate::config::ClientAuth::Required
        });
        if !authentication.enabled() && !mtls_required && !listen.ip().is_loopback() {
            if !config.server.allow_unauthenticated {
                return Err(AppError::Unauthenticated(listen));
            }
            tracing::warn!("serving {listen} without authentication");
            eprintln!(
                "querygate: warning: serving {listen} without authentication (server.allow_unauthenticated); anyone who reaches it acts as tenant 'default'"
            );
        }
        warn_at_start(&config);
        if config.telemetry.metrics
            && authentication.enabled()
            && config.server.admin_listen.is_none()
        {
            tracing::warn!(
                "/metrics is not served: with authentication on it is served on server.admin_listen only, which is not set"
            );
        }
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
        let handler = observed_handler(
            &config,
            Transport::Http,
            audit.clone(),
            metrics.clone(),
            pool.clone(),
        )?;
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| AppError::Bind {
                listen: config.server.listen.clone(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| AppError::Bind {
            listen: config.server.listen.clone(),
            source,
        })?;
        let streams = CancellationToken::new();
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
        );
        let admin = match &config.server.admin_listen {
            Some(admin) => Some(bind_admin(admin, readiness.clone(), metrics.clone()).await?),
            None => None,
        };
        let router = crate::http::router(
            handler,
            &config,
            authentication,
            addr,
            streams.clone(),
            readiness,
            metrics,
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
    listen: &str,
    readiness: Readiness,
    metrics: Option<Arc<crate::telemetry::Metrics>>,
) -> Result<AdminListener, AppError> {
    let addr: SocketAddr = crate::config::resolve_listen(listen)
        .ok_or_else(|| AppError::AdminListen(listen.to_owned()))?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| AppError::Bind {
            listen: listen.to_owned(),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| AppError::Bind {
        listen: listen.to_owned(),
        source,
    })?;
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

/// Serves one MCP session on stdin/stdout for `config`.
pub async fn run_stdio(config: Config) -> Result<(), AppError> {
    watch_policies(&config);
    warn_at_start(&config);
    let pool = crate::db::shared_pool(&config).map_err(StartError::Database)?;
    let audit = open_audit_scoped(
        &config,
        pool.clone(),
        true,
        crate::audit::open::Scope::Local,
    )
    .await?;
    let handler = observed_handler(&config, Transport::Stdio, audit.clone(), None, pool)?;
    let served = mcp::stdio::serve(handler).await;
    close_audit(audit).await;
    served?;
    Ok(())
}

/// Reloads each tenant's Cedar policies when their files change, for as long as they are
/// in use (`tenants[].policy_reload_interval`).
fn watch_policies(config: &Config) {
    for tenant in &config.tenants {
        if let Some(policies) = &tenant.policies {
            policies.watch();
        }
    }
}

/// The handler of `querygate policy explain`: the pipeline's tenants, engine and gate,
/// without audit (explaining runs nothing).
pub fn explain_handler(config: &Config) -> Result<QuerygateMcp, AppError> {
    let engine = Engine::new(config.engine.clone())?;
    let tenants = Tenants::open(config)?;
    Ok(mcp::build(config, engine, tenants, Transport::Cli, None)?)
}

/// The MCP handler for `transport`: engine, tenants and content from `config`.
pub fn handler(
    config: &Config,
    transport: Transport,
    audit: Option<crate::audit::Auditor>,
) -> Result<QuerygateMcp, AppError> {
    let pool = crate::db::shared_pool(config).map_err(StartError::Database)?;
    observed_handler(config, transport, audit, None, pool)
}

/// The handler `querygate query` and `querygate registry pull` run their one call through
/// (`Transport::Cli`), and its audit, opened at the first record ([`open_audit_deferred`]):
/// close it with [`close_audit`] after the call.
pub fn cli_handler(
    config: &Config,
) -> Result<(QuerygateMcp, Option<crate::audit::Auditor>), AppError> {
    let audit = open_audit_deferred(config)?;
    let engine = Engine::new(config.engine.clone())?;
    for name in engine.unmatched_provider_settings() {
        tracing::warn!(
            "providers.{} in the configuration names no installed provider; its settings apply to nothing",
            name.escape_debug()
        );
    }
    let tenants = Tenants::open(config)?;
    let handler = mcp::build(config, engine, tenants, Transport::Cli, audit.clone())?;
    Ok((handler, audit))
}

/// Says what the approval settings mean for whoever starts the server (stderr and the
/// log): [`crate::approval::start_warnings`], and what the registry's signature settings
/// mean ([`crate::engine::RemoteRegistryConfig::start_warnings`]).
fn warn_at_start(config: &Config) {
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

/// [`handler`] whose tool calls and upstream requests are counted in `metrics`.
fn observed_handler(
    config: &Config,
    transport: Transport,
    audit: Option<crate::audit::Auditor>,
    metrics: Option<Arc<crate::telemetry::Metrics>>,
    pool: Option<crate::db::PgPool>,
) -> Result<QuerygateMcp, AppError> {
    let engine = match &metrics {
        Some(metrics) => Engine::with_observer(config.engine.clone(), metrics.clone())?,
        None => Engine::new(config.engine.clone())?,
    };
    let tenants = Tenants::open(config)?;
    Ok(mcp::build_observed(
        config, engine, tenants, transport, audit, metrics, pool,
    )?)
}
/// Opens the audit of a server's tool calls from `audit:` (and `database:` for the
/// PostgreSQL sink); an unwritable location or an unreachable database stops the start.
pub async fn open_audit(
    config: &Config,
    announce: bool,
) -> Result<Option<crate::audit::Auditor>, AuditOpenError> {
    let pool = crate::db::shared_pool(config)?;
    open_audit_on(config, pool, announce).await
}

/// [`open_audit`] over `pool`, the process's shared pool.
async fn open_audit_on(
    config: &Config,
    pool: Option<crate::db::PgPool>,
    announce: bool,
) -> Result<Option<crate::audit::Auditor>, AuditOpenError> {
    open_audit_scoped(config, pool, announce, crate::audit::open::Scope::Server).await
}

/// [`open_audit`] for a local process (`querygate stdio`, the command line): in files, a
/// stream of its own, as several may write one folder at once.
pub async fn open_local_audit(
    config: &Config,
    announce: bool,
) -> Result<Option<crate::audit::Auditor>, AuditOpenError> {
    let pool = crate::db::shared_pool(config)?;
    open_audit_scoped(config, pool, announce, crate::audit::open::Scope::Local).await
}

/// Opens the audit over `pool` (`None` when nothing is kept in PostgreSQL); the PostgreSQL
/// sink does not start while its database cannot be reached.
async fn open_audit_scoped(
    config: &Config,
    pool: Option<crate::db::PgPool>,
    announce: bool,
    scope: crate::audit::open::Scope,
) -> Result<Option<crate::audit::Auditor>, AuditOpenError> {
    use crate::audit::SinkSettings;
    let needs_database =
        config.audit.enabled && matches!(config.audit.sink, SinkSettings::Postgres { .. });
    let pool = match pool {
        Some(pool) if needs_database => {
            crate::db::check_reachable(&pool, &config.database).await?;
            Some(pool)
        }
        _ => None,
    };
    let audit = crate::audit::open::open_scoped(&config.audit, pool, scope).await?;
    match &audit {
        _ if !announce => {}
        Some(auditor) => eprintln!(
            "querygate: audit records go to {} (failure_mode {})",
            auditor.sink().describe(),
            auditor.failure_mode().as_str()
        ),
        None => eprintln!("querygate: audit is off (audit.enabled: false)"),
    }
    Ok(audit)
}

/// The audit of one CLI command: its sink (and database connection) is opened at the
/// first record, so a command that writes none leaves no trace; failing to open it fails
/// that write, under `audit.failure_mode`.
pub fn open_audit_deferred(
    config: &Config,
) -> Result<Option<crate::audit::Auditor>, AuditOpenError> {
    use crate::audit::deferred::DeferredSink;
    use crate::audit::{AuditError, SinkSettings};
    if !config.audit.enabled {
        return Ok(None);
    }
    let settings = config.audit.clone();
    let database = config.database.clone();
    let kind = match settings.sink {
        SinkSettings::File { .. } => "file",
        SinkSettings::Postgres { .. } => "postgres",
        SinkSettings::Otlp => "otlp",
    };
    let opener = Box::new(move || {
        let settings = settings.clone();
        let database = database.clone();
        Box::pin(async move {
            let pool = match settings.sink {
                SinkSettings::Postgres { .. } => Some(
                    crate::db::connect(&database)
                        .await
                        .map_err(|err| AuditError::Unavailable(err.to_string()))?,
                ),
                SinkSettings::File { .. } | SinkSettings::Otlp => None,
            };
            crate::audit::open::start_sink(&settings, pool, crate::audit::open::Scope::Local).await
        }) as futures::future::BoxFuture<'static, _>
    });
    let sink = Arc::new(DeferredSink::new(kind, opener));
    Ok(Some(crate::audit::open::auditor_over(&config.audit, sink)?))
}

/// Writes the records still queued before the process ends.
pub async fn close_audit(audit: Option<crate::audit::Auditor>) {
    if let Some(auditor) = audit {
        auditor.sink().close().await;
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
