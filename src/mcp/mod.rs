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
//! [`build_observed`] makes the server's parts once (tenants, approvals, caches, quotas,
//! admission, the render threads, what the tools use) and hands them out: the pipeline's
//! steps get what each uses ([`pipeline::Pipeline`]'s build), the tools a `ToolServices`,
//! and the handler what it lists and serves besides tool calls. Nothing holds the whole.
//!
//! The MCP surface talks to the engine only through `crate::engine`'s public API.

pub mod content;
mod elicit;
mod handler;
mod library;
mod malformed;
mod offload;
mod output_schema;
pub mod pipeline;
pub mod render;
pub mod stdio;
mod tools;

use std::sync::Arc;

pub use handler::QuerygateMcp;
pub use library::LibrarySetupError;

use self::content::{Content, ContentError};
use self::handler::HandlerState;
use self::tools::{CATALOGUE, OfferedTools, ToolServices};
use crate::approval::{
    ApprovalStore, Approvals, KeyRing, MemoryPendingStore, MemoryStore, OutOfBand, PendingStore,
    PgPendingStore, PostgresStore,
};
use crate::audit::Auditor;
use crate::config::{ApprovalStoreKind, Config};
use crate::engine::Engine;
use crate::tenant::Tenants;

/// Which transport serves the calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Streamable HTTP.
    Http,
    /// Newline-delimited JSON-RPC on stdin/stdout.
    Stdio,
    /// `querygate query` and `querygate registry pull`: one call of the local user.
    Cli,
}

impl Transport {
    /// `http` or `stdio`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Stdio => "stdio",
            Transport::Cli => "cli",
        }
    }
}

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

/// Builds the MCP handler for `transport` over an engine and tenants, auditing its tool
/// calls with `audit` (opened from `config.audit` by the caller; `None` records nothing),
/// with a PostgreSQL pool of its own where `config` keeps state there.
pub fn build(
    config: &Config,
    engine: Engine,
    tenants: Tenants,
    transport: Transport,
    audit: Option<Auditor>,
) -> Result<QuerygateMcp, StartError> {
    let pool = crate::db::shared_pool(config).map_err(StartError::Database)?;
    build_observed(config, engine, tenants, transport, audit, None, pool)
}

/// [`build`], counting the tool calls in `metrics`, over `pool`: the process's one
/// PostgreSQL pool ([`crate::db::shared_pool`]), which the approval store, the pending
/// approvals and the quota windows use when `config` keeps them there.
#[expect(
    clippy::too_many_lines,
    reason = "the MCP composition: each pipeline step built from configuration, in pipeline order"
)]
pub fn build_observed(
    config: &Config,
    engine: Engine,
    tenants: Tenants,
    transport: Transport,
    audit: Option<Auditor>,
    metrics: Option<Arc<crate::telemetry::Metrics>>,
    pool: Option<crate::db::PgPool>,
) -> Result<QuerygateMcp, StartError> {
    let content = Content::embedded()?;
    let all: Vec<&str> = CATALOGUE.iter().map(|t| t.name).collect();
    content.check_tools(&all)?;
    let server = config.server.clone();
    check_allowlist(
        "enabled_tools",
        "tools",
        server.enabled_tools.as_deref(),
        &all,
    )?;
    let prompts: Vec<&str> = content.prompts.iter().map(|p| p.name.as_str()).collect();
    check_allowlist(
        "enabled_prompts",
        "prompts",
        server.enabled_prompts.as_deref(),
        &prompts,
    )?;
    let resources: Vec<&str> = content.resources.iter().map(|r| r.name.as_str()).collect();
    check_allowlist(
        "enabled_resources",
        "resources",
        server.enabled_resources.as_deref(),
        &resources,
    )?;
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
    let keys = KeyRing::from_files(&config.approval.key_files)?;
    // A per-process key matters only where another replica could be asked to redeem an
    // approval: a shared approval store, or an address beyond this machine (a load
    // balancer may be in front). A loopback server or stdio is one process.
    let shared = config.approval.store == ApprovalStoreKind::Postgres
        || crate::config::resolve_listen(&config.server.listen)
            .is_some_and(|addr| !addr.ip().is_loopback());
    if config.approval.key_files.is_empty() && transport == Transport::Http && shared {
        tracing::warn!(
            "approval.key_files is empty: approvals are sealed with a random key made at start and work on this replica only"
        );
    }
    // State kept in PostgreSQL never falls back to memory: without the pool, fail the start.
    let needs_pool = config.approval.store == ApprovalStoreKind::Postgres
        || config.quotas.store == crate::config::QuotaStoreKind::Postgres;
    if needs_pool && pool.is_none() {
        return Err(StartError::Database(crate::db::DbError::NotConfigured));
    }
    let (store, pending): (Arc<dyn ApprovalStore>, Arc<dyn PendingStore>) =
        match (config.approval.store, &pool) {
            (ApprovalStoreKind::Postgres, Some(pool)) => (
                Arc::new(PostgresStore::new(pool.clone())),
                Arc::new(PgPendingStore::new(pool.clone())),
            ),
            _ => (
                Arc::new(MemoryStore::default()),
                Arc::new(MemoryPendingStore::default()),
            ),
        };
    let quotas = match (config.quotas.store, &pool) {
        (crate::config::QuotaStoreKind::Postgres, Some(pool)) => {
            crate::quota::Quotas::postgres(config.quotas.clone(), &config.tenants, pool.clone())
        }
        _ => crate::quota::Quotas::in_memory(config.quotas.clone(), &config.tenants),
    }
    .observed(
        metrics
            .clone()
            .map(|m| m as Arc<dyn crate::quota::QuotaObserver>),
    );
    let approvals = Approvals::new(&keys, config.approval.ttl, store, config.clock.clone())?;
    // `querygate query` asks at its terminal (or takes --yes): never out of band.
    let out_of_band = if config.approval.out_of_band_enabled() && transport != Transport::Cli {
        Some(Arc::new(
            OutOfBand::new(&config.approval, pending)
                .and_then(|oob| oob.with_session_keys(&keys))
                .map_err(StartError::OutOfBand)?,
        ))
    } else {
        None
    };
    let tenants = Arc::new(tenants);
    let admission = Arc::new(pipeline::admission::Admission::new(
        config.admission.clone(),
    ));
    let render_pool = Arc::new(offload::RenderPool::default());
    let tool_services = Arc::new(ToolServices {
        engine: engine.clone(),
        tenants: tenants.clone(),
        max_rows: server.max_rows,
        render: render_pool.clone(),
        bulk_priority: admission.bulk_work_priority(),
        transport,
        registry_description,
        library,
    });
    let pipeline = pipeline::Pipeline::build(pipeline::Parts {
        engine,
        tenants: tenants.clone(),
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
            config.clock.clone(),
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
    };
    Ok(QuerygateMcp::new(state, &tools, pipeline))
}

/// The names of every tool of the catalogue (the values the `tool` metric label may take).
pub fn tool_names() -> impl Iterator<Item = &'static str> {
    CATALOGUE.iter().map(|t| t.name)
}

fn check_allowlist(
    list: &'static str,
    kind: &'static str,
    names: Option<&[String]>,
    known: &[&str],
) -> Result<(), StartError> {
    for name in names.unwrap_or_default() {
        if !known.contains(&name.as_str()) {
            return Err(StartError::UnknownName {
                list,
                name: name.clone(),
                kind,
                known: known.join(", "),
            });
        }
    }
    Ok(())
}
