//! [`AppBuilder`]: the one place every entry point (serve, stdio, the command line, tests,
//! benches) gets its parts from: the engine, the tenants with their policies, the audit,
//! the PostgreSQL pool and the clock, wired into the MCP handler the same way for each.

use std::sync::Arc;

use super::audit_open::{close_audit, open_audit_deferred, open_audit_on, open_audit_scoped};
use super::{App, AppError, warn_at_start};
use crate::clock::Clock;
use crate::config::Config;
use crate::engine::Engine;
use crate::mcp::{self, QuerygateMcp, StartError, Transport};
use crate::tenant::Tenants;

/// How an [`App`] is built: from its configuration, with the parts a caller hands in
/// instead of the ones the configuration describes (tests: a clock they step, an audit
/// sink of their own).
#[derive(Debug)]
pub struct AppBuilder {
    config: Config,
    clock: Clock,
    /// `Some`: the audit given (`Some(None)`: none); `None`: opened from `audit:`.
    audit: Option<Option<crate::audit::Auditor>>,
}

impl AppBuilder {
    /// The builder for `config`, with the system clock and the audit `audit:` describes.
    pub(super) fn new(config: Config) -> Self {
        AppBuilder {
            config,
            clock: Clock::system(),
            audit: None,
        }
    }

    /// The clock the components keeping time read (approval lifetimes, the result cache's
    /// TTL, request rates, JWKS refetch floors, `/readyz` reuse); the system clock unless set.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The audit of tool calls, instead of the one `audit:` describes; `None` serves
    /// without audit.
    pub fn audit(mut self, audit: Option<crate::audit::Auditor>) -> Self {
        self.audit = Some(audit);
        self
    }

    /// Builds everything and binds `server.listen` (port 0 picks a free port;
    /// [`App::local_addr`] tells which).
    pub async fn build(self) -> Result<App, AppError> {
        let AppBuilder {
            config,
            clock,
            audit,
        } = self;
        let pool = crate::db::shared_pool(&config).map_err(StartError::Database)?;
        let audit = match audit {
            Some(audit) => audit,
            None => open_audit_on(&config, pool.clone(), true).await?,
        };
        App::assemble(config, clock, audit, pool).await
    }

    /// Serves one MCP session on stdin/stdout (`querygate stdio`), audited as a local
    /// process (a stream of its own in files).
    pub async fn run_stdio(self) -> Result<(), AppError> {
        let AppBuilder {
            config,
            clock,
            audit,
        } = self;
        let tenants = Tenants::open(&config)?;
        tenants.watch_policies();
        warn_at_start(&config);
        let pool = crate::db::shared_pool(&config).map_err(StartError::Database)?;
        let audit = match audit {
            Some(audit) => audit,
            None => {
                open_audit_scoped(
                    &config,
                    pool.clone(),
                    true,
                    crate::audit::open::Scope::Local,
                )
                .await?
            }
        };
        let parts = Wiring {
            tenants,
            transport: Transport::Stdio,
            audit: audit.clone(),
            metrics: None,
            pool,
            clock,
        };
        let handler = parts.handler(&config, Engine::new(config.engine.clone())?)?;
        let served = mcp::stdio::serve(handler).await;
        close_audit(audit).await;
        served?;
        Ok(())
    }

    /// The MCP handler for `transport` alone (no listener), audited by the audit given with
    /// [`AppBuilder::audit`] or not at all: `querygate policy explain` (which runs nothing)
    /// and tests that drive the pipeline directly.
    pub fn handler(self, transport: Transport) -> Result<QuerygateMcp, AppError> {
        let AppBuilder {
            config,
            clock,
            audit,
        } = self;
        let pool = crate::db::shared_pool(&config).map_err(StartError::Database)?;
        let parts = Wiring {
            tenants: Tenants::open(&config)?,
            transport,
            audit: audit.flatten(),
            metrics: None,
            pool,
            clock,
        };
        parts.handler(&config, Engine::new(config.engine.clone())?)
    }

    /// The handler `querygate query` and `querygate registry pull` run their one call
    /// through (`Transport::Cli`), and its audit, opened at the first record
    /// ([`open_audit_deferred`]): close it with [`close_audit`] after the call.
    pub fn cli_handler(self) -> Result<(QuerygateMcp, Option<crate::audit::Auditor>), AppError> {
        let AppBuilder {
            config,
            clock,
            audit,
        } = self;
        let audit = match audit {
            Some(audit) => audit,
            None => open_audit_deferred(&config)?,
        };
        let engine = cli_engine(&config)?;
        let pool = crate::db::shared_pool(&config).map_err(StartError::Database)?;
        let parts = Wiring {
            tenants: Tenants::open(&config)?,
            transport: Transport::Cli,
            audit: audit.clone(),
            metrics: None,
            pool,
            clock,
        };
        Ok((parts.handler(&config, engine)?, audit))
    }

    /// The engine and the local user's context for the commands that read only what is
    /// installed or listed (`querygate providers`, `querygate registry list`), outside the
    /// tool-call pipeline.
    pub fn local(self) -> Result<(Engine, crate::engine::ExecContext), AppError> {
        let engine = cli_engine(&self.config)?;
        let cx = Tenants::open(&self.config)?.context(&crate::tenant::Principal::local())?;
        Ok((engine, cx))
    }
}

/// What the MCP handler is wired from besides the engine: the parts an entry point made.
pub(super) struct Wiring {
    pub(super) tenants: Tenants,
    pub(super) transport: Transport,
    pub(super) audit: Option<crate::audit::Auditor>,
    pub(super) metrics: Option<Arc<crate::telemetry::Metrics>>,
    pub(super) pool: Option<crate::db::PgPool>,
    pub(super) clock: Clock,
}

impl Wiring {
    /// The MCP handler over `engine` and these parts.
    pub(super) fn handler(self, config: &Config, engine: Engine) -> Result<QuerygateMcp, AppError> {
        Ok(mcp::build(
            config,
            mcp::Parts {
                engine,
                tenants: self.tenants,
                transport: self.transport,
                audit: self.audit,
                metrics: self.metrics,
                pool: self.pool,
                clock: self.clock,
            },
        )?)
    }
}

/// The engine of a command-line command, warning about provider settings that name no
/// installed provider (a server says so per call instead).
fn cli_engine(config: &Config) -> Result<Engine, AppError> {
    let engine = Engine::new(config.engine.clone())?;
    for name in engine.unmatched_provider_settings() {
        tracing::warn!(
            "providers.{} in the configuration names no installed provider; its settings apply to nothing",
            name.escape_debug()
        );
    }
    Ok(engine)
}
