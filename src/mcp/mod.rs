//! The MCP surface: StackQL's tools, prompts and resources over the engine, served by rmcp
//! statelessly over streamable HTTP (`querygate serve`) and over stdio (`querygate stdio`).
//!
//! ```text
//! transport (http | stdio) → handler (rmcp ServerHandler) → pipeline (prepare → bind, then
//!   the tower stack: audit → mode gate → quota → cache → admission → intent → call
//!   timeout → cancel → dispatch) → tools/* → engine facade
//! cli (`querygate query`, `registry pull`) → the same pipeline, Transport::Cli
//! ```
//!
//! [`build`] makes the server's parts once (tenants, approvals, caches, quotas,
//! admission, the render threads, what the tools use) and hands them out: the pipeline's
//! steps get what each uses ([`pipeline::Pipeline`]'s build), the tools a `ToolServices`,
//! and the handler what it lists and serves besides tool calls. Nothing holds the whole.
//!
//! The MCP surface talks to the engine only through `crate::engine`'s public API.

pub mod content;
mod elicit;
mod gatekeeper;
mod handler;
mod library;
mod malformed;
mod offer;
mod offload;
mod output_schema;
pub mod pipeline;
pub mod render;
pub mod stdio;
mod stores;
mod task_methods;
pub(crate) mod tools;
pub mod transport;

use std::sync::Arc;

pub use handler::QuerygateMcp;
pub use library::LibrarySetupError;

use self::content::{Content, ContentError};
use self::handler::HandlerState;
use self::tools::{CATALOGUE, OfferedTools, ToolServices};
use crate::audit::Auditor;
use crate::config::{ApprovalStoreKind, Config};
use crate::engine::Engine;
use crate::tenant::Tenants;

pub use transport::Transport;

/// Why the MCP server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The embedded content is inconsistent.
    #[error(transparent)]
    Content(#[from] ContentError),
    /// An allowlist names something the server does not offer.
    #[error("server.{list} names '{name}', which is not one of the server's {kind} ({known})")]
    UnknownName {
        /// The config key.
        list: &'static str,
        /// The unknown name.
        name: String,
        /// tools, prompts or resources.
        kind: &'static str,
        /// The names that exist.
        known: String,
    },
    /// The query library cannot be set up (a malformed snapshot, a client that cannot be
    /// built).
    #[error("query library: {0}")]
    Library(#[source] LibrarySetupError),
    /// The database for approvals cannot be set up.
    #[error("approval store: {0}")]
    Database(#[source] crate::db::DbError),
    /// The approval keys cannot be loaded.
    #[error(transparent)]
    Approval(#[from] crate::approval::ApprovalError),
    /// Out-of-band approval cannot be set up (the webhook's client).
    #[error("out-of-band approval: {0}")]
    OutOfBand(String),
}

impl StartError {
    /// The stable code of this error (`start.*`), for logs and exit reports.
    pub fn code(&self) -> &'static str {
        match self {
            StartError::Content(_) => "start.content",
            StartError::UnknownName { .. } => "start.unknown_name",
            StartError::Library(_) => "start.library",
            StartError::Database(_) => "start.database",
            StartError::Approval(_) | StartError::OutOfBand(_) => "start.approval",
        }
    }
}

/// What the MCP handler is built from, besides the configuration: the parts the composition
/// root made once.
#[derive(Debug)]
pub struct Parts {
    /// The engine every call runs on.
    pub engine: Engine,
    /// The tenants, their credential stores and policies.
    pub tenants: Tenants,
    /// HTTP, stdio or the command line.
    pub transport: Transport,
    /// The audit of tool calls (`None` records nothing).
    pub audit: Option<Auditor>,
    /// Where tool calls and quota decisions are counted.
    pub metrics: Option<Arc<crate::telemetry::Metrics>>,
    /// The process's one PostgreSQL pool ([`crate::db::shared_pool`]), which the approval
    /// store, the pending approvals and the quota windows use when `config` keeps them there.
    pub pool: Option<crate::db::PgPool>,
    /// What approval lifetimes and the result cache's TTL are measured on.
    pub clock: crate::clock::Clock,
}

/// Builds the MCP handler for `config` from the composition root's `parts`
/// ([`crate::app::AppBuilder`]).
pub fn build(config: &Config, parts: Parts) -> Result<QuerygateMcp, StartError> {
    let Parts {
        engine,
        tenants,
        transport,
        audit,
        metrics,
        pool,
        clock,
    } = parts;
    let content = Content::embedded()?;
    let server = config.server.clone();
    offer::check_offered(&content, &server)?;
    let tools = Arc::new(OfferedTools::new(server.enabled_tools.as_deref()));
    let registry_description = format!(
        "{} (remote: {})",
        config.engine.registry_root.display(),
        config
            .engine
            .remote
            .url
            .as_deref()
            .unwrap_or("none configured")
    );
    let library = library::Library::new(&content.files, server.query_library_url.as_deref())
        .map_err(StartError::Library)?;
    // State kept in PostgreSQL never falls back to memory: without the pool, fail the start.
    let needs_pool = config.approval.store == ApprovalStoreKind::Postgres
        || config.quotas.store == crate::config::QuotaStoreKind::Postgres;
    if needs_pool && pool.is_none() {
        return Err(StartError::Database(crate::db::DbError::NotConfigured));
    }
    let (approvals, out_of_band) = stores::approvals(config, transport, pool.as_ref(), &clock)?;
    let quotas = stores::quotas(config, pool.as_ref(), metrics.clone());
    let tasks = stores::tasks(config, transport, pool.as_ref(), &clock, metrics.clone());
    let tenants = Arc::new(tenants);
    let admission = Arc::new(pipeline::admission::Admission::new(
        config.admission.clone(),
    ));
    let render_pool = Arc::new(offload::RenderPool::default());
    let keeper = gatekeeper::Gatekeeper::new(engine.clone(), tenants.clone());
    let tool_services = Arc::new(ToolServices {
        engine: engine.clone(),
        keeper: keeper.clone(),
        max_rows: server.max_rows,
        render: render_pool.clone(),
        bulk_priority: admission.bulk_work_priority(),
        transport,
        registry_description,
        library,
        tasks: match &tasks {
            Some(tasks) if tasks.enabled() && pool.is_some() => "postgres",
            Some(tasks) if tasks.enabled() => "memory",
            _ => "off",
        },
    });
    let pipeline = pipeline::Pipeline::build(pipeline::Parts {
        keeper,
        transport,
        tools: tools.clone(),
        tool_services,
        render: server.render,
        max_rows: server.max_rows,
        call_timeout: server.call_timeout,
        approvals,
        out_of_band: out_of_band.clone(),
        audit: audit.clone(),
        audit_reads: transport != Transport::Cli || config.audit.cli_reads,
        metrics,
        admission,
        render_pool,
        results: Arc::new(pipeline::cache::ResultCaches::new(
            config.tenants.iter().map(|tenant| {
                (
                    tenant.id.as_str(),
                    tenant.cache.as_ref(),
                    tenant.token_exchanges.keys().cloned().collect(),
                )
            }),
            clock,
        )),
        quotas: Arc::new(quotas),
    });
    let state = HandlerState {
        content,
        server,
        tenants,
        transport,
        out_of_band,
        audit,
        tasks,
    };
    Ok(QuerygateMcp::new(state, &tools, pipeline))
}

/// The names of every tool of the catalogue (the values the `tool` metric label may take).
pub fn tool_names() -> impl Iterator<Item = &'static str> {
    CATALOGUE.iter().map(|t| t.name)
}
