//! The composition root: builds the engine, the tenants, the MCP handler and the HTTP stage
//! from a validated [`Config`], and runs them. The CLI, the integration tests and the load
//! benchmark all start servers through [`App`], so they run the same wiring.

use std::future::Future;
use std::net::SocketAddr;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::engine::Engine;
use crate::http::server::ConnectionLimits;
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
}

impl AppError {
    /// The process exit code: 2 for a configuration that cannot work, 1 for a runtime failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            AppError::Engine(_) | AppError::Tenant(_) | AppError::Mcp(_) => 2,
            AppError::Bind { .. } | AppError::Serve(_) | AppError::Stdio(_) => 1,
        }
    }
}

/// A bound, not yet running `querygate serve`.
#[derive(Debug)]
pub struct App {
    listener: TcpListener,
    addr: SocketAddr,
    router: Router,
    limits: ConnectionLimits,
    /// Ends rmcp's open streams when the server stops.
    streams: CancellationToken,
}

impl App {
    /// Builds everything `config` describes and binds `server.listen` (port 0 picks a free
    /// port; [`App::local_addr`] tells which).
    pub async fn build(config: Config) -> Result<App, AppError> {
        let handler = handler(&config, Transport::Http)?;
        let listener = TcpListener::bind(&config.server.listen)
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
        let router = crate::http::router(handler, &config.server, addr, streams.clone());
        Ok(App {
            listener,
            addr,
            router,
            limits: ConnectionLimits::default(),
            streams,
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The MCP endpoint's URL, e.g. `http://127.0.0.1:8765/mcp`.
    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Serves until `shutdown` resolves, then stops accepting connections, ends open streams
    /// and lets the requests in flight finish.
    pub async fn run_until<F>(self, shutdown: F) -> Result<(), AppError>
    where
        F: Future<Output = ()> + Send,
    {
        let streams = self.streams.clone();
        let stop = async move {
            shutdown.await;
            streams.cancel();
        };
        crate::http::server::serve(self.listener, self.router, self.limits, stop)
            .await
            .map_err(AppError::Serve)
    }
}

/// Serves one MCP session on stdin/stdout for `config`.
pub async fn run_stdio(config: Config) -> Result<(), AppError> {
    let handler = handler(&config, Transport::Stdio)?;
    mcp::stdio::serve(handler).await?;
    Ok(())
}

/// The MCP handler for `transport`: engine, tenants and content from `config`.
pub fn handler(config: &Config, transport: Transport) -> Result<QuerygateMcp, AppError> {
    let engine = Engine::new(config.engine.clone())?;
    let tenants = Tenants::open(config)?;
    Ok(mcp::build(config, engine, tenants, transport)?)
}
