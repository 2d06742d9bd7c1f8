//! querygate's engine: SQL over REST APIs: provider documents → plan → upstream calls →
//! SQLite evaluation.
//!
//! This crate knows nothing about MCP, HTTP serving, authentication or audit, and depends on
//! none of the crates that do them. Callers use [`Engine`] and the types re-exported here;
//! the modules are private, but for [`thread_priority`] and [`client_tls`], which querygate's
//! server uses as well.

#![warn(unreachable_pub)]

mod config;
mod credential_report;
mod credentials;
mod discovery;
mod document;
mod effect;
mod error;
mod eval;
mod identity;
mod inline;
pub mod lock;
mod mutate;
mod observe;
mod operation;
mod operation_handle;
mod plan;
mod preview;
mod pushdown;
mod raw_body;
mod read_plan;
mod registry;
mod reload;
mod remote;
mod request_body;
mod requests;
mod rows;
mod select;
mod slots;
mod source_cache;
mod sql;
mod state;
mod statement_requests;
mod template;
mod transform;
mod types;
mod union_params;
mod upstream;
mod views;
mod xml;

pub mod client_tls;
pub mod thread_priority;

use std::sync::Arc;

pub use self::config::{
    AwaitLimits, DEFAULT_REGISTRY_RECHECK, EngineConfig, ProviderSettings, UpstreamLimits,
};
pub use self::credential_report::{
    CredentialReport, CredentialStatus, ProviderCredentials, ProviderSource,
};
pub use self::credentials::{
    AwsRole, CredentialSource, CredentialStore, ExchangeKind, SourceOutcome, SubjectToken,
    TokenExchange,
};
pub use self::effect::{Effect, EffectSource, KnowledgeCounts, MethodEffect, knowledge_counts};
pub use self::error::{Error, ErrorKind, Result, UpstreamFailure, escape_controls};
pub use self::eval::EvalLimits;
pub use self::observe::{UpstreamObserver, UpstreamResult};
pub use self::operation_handle::{OperationHandle, OperationSink, observing_operations};
pub use self::preview::{PREVIEW_REQUESTS, PREVIEW_TEXT_BYTES};
pub use self::remote::{
    DEFAULT_REGISTRY_URL, PullOutcome, RegistryProvider, RemoteRegistryConfig, SkippedVersion,
};
#[cfg(any(test, feature = "test-support"))]
pub use self::remote::{sign_document, verify_folder};
pub use self::requests::{ParamValues, PlannedParam, PlannedRequest};
pub use self::slots::{EvalSlot, EvalSlots};
pub use self::types::{
    Cell, ColumnInfo, ExecContext, MethodContract, MethodInfo, ParamInfo, PlannedWrite,
    ProviderInfo, QueryOutput, RequestPreview, ResourceInfo, ServiceInfo, SqlVerb, plan_hash,
};
pub use self::upstream::RetryPolicy;
pub use self::upstream::provenance::collecting as collect_upstream_request_ids;

use self::state::Inner;

/// The engine: cheap to clone, shared by every request.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl Engine {
    /// Builds an engine. Documents are read lazily, on first use.
    pub fn new(config: EngineConfig) -> Result<Self> {
        Engine::build(config, None)
    }

    /// [`Engine::new`], telling `observer` about every upstream request.
    pub fn with_observer(
        config: EngineConfig,
        observer: Arc<dyn UpstreamObserver>,
    ) -> Result<Self> {
        Engine::build(config, Some(observer))
    }

    fn build(config: EngineConfig, observer: Option<Arc<dyn UpstreamObserver>>) -> Result<Self> {
        Ok(Engine {
            inner: Arc::new(Inner::new(config, observer)?),
        })
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Parses and runs one statement (tests' shorthand for [`Engine::run`]): SELECT (over API tables and/or plain SQL), SHOW, DESCRIBE,
    /// INSERT, UPDATE, REPLACE, DELETE or EXEC (writes are sent once, never retried), or
    /// `REGISTRY LIST [provider]` / `REGISTRY PULL provider [version]` (see
    /// [`Engine::registry_list_rows`] and [`Engine::registry_pull_for`]; a pull is refused for a
    /// provider the tenant may not use).
    pub async fn execute(&self, cx: &ExecContext, sql: &str) -> Result<QueryOutput> {
        self.run(cx, PreparedStatement::parse(sql)?).await
    }

    /// Runs a statement parsed with [`PreparedStatement::parse`]: the statement whose
    /// [`kind`](PreparedStatement::kind) the caller checked is exactly the one that runs,
    /// and it is not parsed again.
    pub async fn run(&self, cx: &ExecContext, statement: PreparedStatement) -> Result<QueryOutput> {
        let PreparedStatement {
            statement, planned, ..
        } = statement;
        match statement {
            sql::Statement::Query(query) => select::run(&self.inner, cx, query, planned).await,
            sql::Statement::QueryOverExec { query, execs } => {
                let mut sources = Vec::with_capacity(execs.len());
                for (index, exec) in execs.into_iter().enumerate() {
                    let out = mutate::run_exec(&self.inner, cx, exec).await?;
                    sources.push((sql::exec_table(index), out));
                }
                select::run_with(&self.inner, cx, query, sources).await
            }
            sql::Statement::Mutation(mutation) => {
                mutate::run_mutation(&self.inner, cx, mutation).await
            }
            sql::Statement::Exec(exec) => mutate::run_exec(&self.inner, cx, exec).await,
            sql::Statement::Show { what, like } => {
                let inner = self.inner.clone();
                let cx = cx.clone();
                let _slot = cx.slot().await;
                blocking(move || discovery::show(&inner, &cx, &what, like.as_deref())).await
            }
            sql::Statement::Describe { target } => {
                let inner = self.inner.clone();
                let cx = cx.clone();
                let _slot = cx.slot().await;
                blocking(move || discovery::describe(&inner, &cx, &target)).await
            }
            sql::Statement::Registry(command) => {
                // Mostly downloading: it runs without a slot (one set aside for the
                // statement goes back at once).
                drop(cx.slot().await);
                remote::statement(&self.inner.remote, &self.inner.registry, cx, command).await
            }
        }
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Providers (with their published versions, oldest first) in the remote registry
    /// (`registry.url`), or only `provider`'s entry. Distinct from [`Engine::providers`],
    /// which lists what is installed. A provider name with characters other than letters,
    /// digits, `-`, `_` and `.` fails with `forbidden characters in provider`.
    pub async fn registry_list(&self, provider: Option<&str>) -> Result<Vec<RegistryProvider>> {
        self.inner.remote.list(provider).await
    }

    /// The remote registry's providers (`registry.url`) as the rows of `REGISTRY LIST`: `provider, versions`, or
    /// with `provider` one `provider, version` row per version.
    pub async fn registry_list_rows(&self, provider: Option<&str>) -> Result<QueryOutput> {
        let listed = self.inner.remote.list(provider).await?;
        Ok(remote::list_output(listed, provider.is_some()))
    }

    /// Downloads `provider` from the remote registry and installs it into the local registry
    /// root, where the engine sees it at once, for the tenant of `cx`: refused with
    /// `ProviderNotAllowed` when the tenant may not use the provider, as `REGISTRY PULL` is.
    /// Without `version`, the newest version that has a package and that querygate can use
    /// is installed, and the outcome names the newer ones skipped and why. The package is
    /// checked before it becomes visible (see `docs/engine.md`); an existing copy of the
    /// same version is replaced.
    pub async fn registry_pull_for(
        &self,
        cx: &ExecContext,
        provider: &str,
        version: Option<&str>,
    ) -> Result<PullOutcome> {
        remote::check_pull_allowed(cx, provider)?;
        self.inner
            .remote
            .pull(provider, version, &self.inner.registry)
            .await
    }

    /// Names under configured provider settings (`providers.<name>`) that no installed
    /// provider has, sorted: most likely typos, whose settings (base URL, auth) apply to
    /// nothing. Reads the registry folder.
    pub fn unmatched_provider_settings(&self) -> Vec<String> {
        self.inner.unmatched_provider_settings()
    }

    /// Installed providers this tenant may use.
    pub async fn providers(&self, cx: &ExecContext) -> Result<Vec<ProviderInfo>> {
        let (inner, cx) = (self.inner.clone(), cx.clone());
        blocking(move || discovery::providers(&inner, &cx)).await
    }

    /// Services of a provider.
    pub async fn services(&self, cx: &ExecContext, provider: &str) -> Result<Vec<ServiceInfo>> {
        let (inner, cx, provider) = (self.inner.clone(), cx.clone(), provider.to_owned());
        blocking(move || discovery::services(&inner, &cx, &provider)).await
    }

    /// Resources of a service.
    pub async fn resources(
        &self,
        cx: &ExecContext,
        provider: &str,
        service: &str,
    ) -> Result<Vec<ResourceInfo>> {
        let (inner, cx) = (self.inner.clone(), cx.clone());
        let (provider, service) = (provider.to_owned(), service.to_owned());
        blocking(move || discovery::resources(&inner, &cx, &provider, &service)).await
    }

    /// Methods of a resource, with their SQL verbs and required parameters.
    pub async fn methods(
        &self,
        cx: &ExecContext,
        provider: &str,
        service: &str,
        resource: &str,
    ) -> Result<Vec<MethodInfo>> {
        let (inner, cx) = (self.inner.clone(), cx.clone());
        let names = [provider.to_owned(), service.to_owned(), resource.to_owned()];
        blocking(move || discovery::methods(&inner, &cx, &names)).await
    }

    /// Columns of a resource (those of its first select method).
    pub async fn columns(
        &self,
        cx: &ExecContext,
        provider: &str,
        service: &str,
        resource: &str,
    ) -> Result<Vec<ColumnInfo>> {
        let (inner, cx) = (self.inner.clone(), cx.clone());
        let names = [provider.to_owned(), service.to_owned(), resource.to_owned()];
        blocking(move || discovery::columns(&inner, &cx, &names)).await
    }

    /// A method's full contract: HTTP verb and path, parameters, body schema, columns.
    pub async fn method_contract(
        &self,
        cx: &ExecContext,
        provider: &str,
        service: &str,
        resource: &str,
        method: &str,
    ) -> Result<MethodContract> {
        let (inner, cx) = (self.inner.clone(), cx.clone());
        let names = [provider.to_owned(), service.to_owned(), resource.to_owned()];
        let method = method.to_owned();
        blocking(move || discovery::contract(&inner, &cx, &names, &method)).await
    }
}

impl Engine {
    /// The upstream requests `statement` would make for the tenant of `cx`, planned as
    /// [`Engine::run`] plans them (the same documents, methods and parameter bindings),
    /// without sending anything and without checking credentials: each with the method it
    /// runs, that method's HTTP method, and the values the statement gives its parameters.
    /// SHOW, DESCRIBE and REGISTRY statements make none. The error is the one running it
    /// would have reported first.
    pub async fn requests(
        &self,
        cx: &ExecContext,
        statement: &PreparedStatement,
    ) -> Result<Vec<PlannedRequest>> {
        if let Some(planned) =
            inline::cached_only(|| statement_requests::plan(&self.inner, cx, &statement.statement))
        {
            return planned;
        }
        let (inner, cx, statement) = (self.inner.clone(), cx.clone(), statement.statement.clone());
        blocking(move || statement_requests::plan(&inner, &cx, &statement)).await
    }

    /// [`Engine::requests`], keeping a SELECT's plan in `statement`: [`Engine::run`] then
    /// runs that plan for the same tenant instead of planning the statement again (the
    /// requests decided on are the ones sent).
    pub async fn plan_requests(
        &self,
        cx: &ExecContext,
        statement: &mut PreparedStatement,
    ) -> Result<Vec<PlannedRequest>> {
        let sql::Statement::Query(query) = &statement.statement else {
            return self.requests(cx, statement).await;
        };
        let (requests, planned) = match inline::cached_only(|| {
            select::requests_planned(&self.inner, cx, query.clone())
        }) {
            Some(planned) => planned?,
            None => {
                let (inner, cx, query) = (self.inner.clone(), cx.clone(), query.clone());
                blocking(move || select::requests_planned(&inner, &cx, query)).await?
            }
        };
        statement.planned = Some(planned);
        Ok(requests)
    }
}

impl Engine {
    /// The plan of each table a SELECT reads (see `read_plan`), planned off the async
    /// threads.
    async fn planned_reads(
        &self,
        cx: &ExecContext,
        query: &sqlparser::ast::Query,
    ) -> Result<Vec<PlannedWrite>> {
        let (inner, cx, query) = (self.inner.clone(), cx.clone(), Box::new(query.clone()));
        blocking(move || select::planned_reads(&inner, &cx, query)).await
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Parses `sql` and checks it as [`Engine::check`] does (tests' shorthand).
    pub async fn validate(&self, cx: &ExecContext, sql: &str) -> Result<()> {
        self.check(cx, PreparedStatement::parse(sql)?).await
    }

    /// Resolves a parsed statement as running it would, up to the point where something
    /// would be sent, and stops there: for INSERT, UPDATE, REPLACE, DELETE and EXEC, the
    /// provider is allowed for the tenant, the resource and a method resolve, the required
    /// parameters are supplied, the body fields are the method's, `/*+ AWAIT */` can be
    /// honoured and the provider's credential material is present (no token is fetched);
    /// a SELECT is checked as [`Engine::check`] does; other statements have nothing to
    /// resolve. Nothing is sent upstream. The error is the one running the statement would
    /// have reported first; on success, the writes it would make, in order.
    pub async fn preflight(
        &self,
        cx: &ExecContext,
        statement: &PreparedStatement,
    ) -> Result<Vec<PlannedWrite>> {
        match &statement.statement {
            sql::Statement::Query(query) => {
                select::check(&self.inner, cx, query.clone()).await?;
                self.planned_reads(cx, query).await
            }
            sql::Statement::QueryOverExec { execs, query } => {
                let mut planned = Vec::with_capacity(execs.len());
                for exec in execs {
                    planned.push(mutate::check_exec(&self.inner, cx, exec).await?);
                }
                planned.extend(self.planned_reads(cx, query).await?);
                Ok(planned)
            }
            sql::Statement::Mutation(mutation) => Ok(vec![
                mutate::check_mutation(&self.inner, cx, mutation).await?,
            ]),
            sql::Statement::Exec(exec) => {
                Ok(vec![mutate::check_exec(&self.inner, cx, exec).await?])
            }
            sql::Statement::Show { .. }
            | sql::Statement::Describe { .. }
            | sql::Statement::Registry(_) => Ok(Vec::new()),
        }
    }

    /// Checks a parsed SELECT without running it and without any upstream call: its tables,
    /// methods and required parameters resolve, the credential material of every provider it
    /// reads is present, and SQLite accepts the statement over the planned columns. The error
    /// is the one running it would have reported first. Statements other than SELECT fail
    /// with `UnsupportedStatement`.
    pub async fn check(&self, cx: &ExecContext, statement: PreparedStatement) -> Result<()> {
        match statement.statement {
            sql::Statement::Query(query) => select::check(&self.inner, cx, query).await,
            _ => Err(Error::new(
                ErrorKind::UnsupportedStatement,
                "only SELECT statements can be validated",
            )),
        }
    }
}

/// What a statement would do, known without running it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatementKind {
    /// SELECT (also WITH, UNION, VALUES): reads only.
    Select,
    /// SHOW or DESCRIBE: reads provider documents only.
    Metadata,
    /// INSERT.
    Insert,
    /// UPDATE (PATCH).
    Update,
    /// REPLACE (PUT).
    Replace,
    /// DELETE.
    Delete,
    /// EXEC of a provider method (may do anything the method does).
    Exec,
    /// REGISTRY LIST.
    RegistryList,
    /// REGISTRY PULL (writes the local registry only).
    RegistryPull,
}

impl StatementKind {
    /// The kind of a statement of this SQL verb.
    fn of_verb(verb: SqlVerb) -> StatementKind {
        match verb {
            SqlVerb::Insert => StatementKind::Insert,
            SqlVerb::Update => StatementKind::Update,
            SqlVerb::Replace => StatementKind::Replace,
            SqlVerb::Delete => StatementKind::Delete,
            SqlVerb::Select => StatementKind::Select,
        }
    }

    /// Whether the statement only reads.
    pub fn is_read(self) -> bool {
        matches!(
            self,
            StatementKind::Select | StatementKind::Metadata | StatementKind::RegistryList
        )
    }
}

/// One parsed statement (exactly one per text): what it would do is known before it runs,
/// without reading any provider document. Parse once, check [`kind`](Self::kind), then hand
/// it to [`Engine::run`].
#[derive(Debug)]
pub struct PreparedStatement {
    statement: sql::Statement,
    kind: StatementKind,
    /// What is nested inside it.
    nested: sql::Nested,
    /// A SELECT's plan, made by [`Engine::plan_requests`] and used by [`Engine::run`].
    planned: Option<select::Planned>,
}

impl PreparedStatement {
    /// Parses `sql`; several statements, or none, are refused.
    pub fn parse(sql: &str) -> Result<Self> {
        ParsedSql::parse(sql).into_single()
    }

    /// Parses one statement of `sql`, given the text's tokens.
    fn parse_one(sql: &str, tokens: sql::Tokens) -> Result<Self> {
        let (statement, nested) = sql::parse_nested(sql, tokens)?;
        let kind = match &statement {
            sql::Statement::Query(_) => StatementKind::Select,
            // The EXECs run whatever their methods do: the statement is as dangerous as they.
            sql::Statement::QueryOverExec { .. } => StatementKind::Exec,
            sql::Statement::Show { .. } | sql::Statement::Describe { .. } => {
                StatementKind::Metadata
            }
            sql::Statement::Mutation(m) => StatementKind::of_verb(m.verb),
            sql::Statement::Exec(_) => StatementKind::Exec,
            sql::Statement::Registry(sql::RegistryCommand::List { .. }) => {
                StatementKind::RegistryList
            }
            sql::Statement::Registry(sql::RegistryCommand::Pull { .. }) => {
                StatementKind::RegistryPull
            }
        };
        Ok(PreparedStatement {
            statement,
            kind,
            nested,
            planned: None,
        })
    }

    /// What the statement would do.
    pub fn kind(&self) -> StatementKind {
        self.kind
    }

    /// Whether it is a SELECT over `(EXEC …)` row sources: its kind is
    /// [`StatementKind::Exec`], and only the effects of its methods make it a read.
    pub fn is_query_over_exec(&self) -> bool {
        matches!(self.statement, sql::Statement::QueryOverExec { .. })
    }

    /// The query as the parser read it, printed back in one canonical form (keywords,
    /// spacing and comments normalised): the same query however it was written. `None`
    /// for statements other than queries.
    pub fn normalized_query(&self) -> Option<String> {
        match &self.statement {
            sql::Statement::Query(query) => Some(query.to_string()),
            _ => None,
        }
    }

    /// The read that shows what an UPDATE, REPLACE or DELETE would act on now: `SELECT *
    /// FROM` its table with the same `WHERE` equalities and `IN` lists, at most `limit`
    /// rows. `None` for other statements and for writes without a `WHERE`.
    pub fn matching_read(&self, limit: usize) -> Option<Result<PreparedStatement>> {
        let sql::Statement::Mutation(mutation) = &self.statement else {
            return None;
        };
        if mutation.insert.is_some() || mutation.conditions.is_empty() {
            return None;
        }
        Some(PreparedStatement::parse(&mutate::matching_select(
            mutation, limit,
        )))
    }

    /// Whether other statements are nested inside this one (e.g. a CTE carrying a DELETE):
    /// what it would do is then more than its [`kind`](Self::kind) says.
    pub fn nests_statements(&self) -> bool {
        self.nested.any
    }

    /// The kinds of the writes nested inside this statement (INSERT, UPDATE, DELETE), each
    /// once, in the order they are written: `[Delete]` for `WITH t AS (SELECT 1) DELETE FROM
    /// …`, whose [`kind`](Self::kind) is a SELECT (a query carrying the DELETE). Empty when
    /// nothing is nested, or nothing nested writes.
    pub fn nested_writes(&self) -> Vec<StatementKind> {
        self.nested
            .writes
            .iter()
            .map(|verb| StatementKind::of_verb(*verb))
            .collect()
    }
}

/// A text of SQL as the engine reads it: split into statements at top-level semicolons,
/// each parsed on its own, so what every part would do is known even when the text as a
/// whole cannot run (the engine runs exactly one statement per call).
#[derive(Debug)]
pub struct ParsedSql {
    parts: Vec<Result<PreparedStatement>>,
}

impl ParsedSql {
    /// Splits and parses `sql`. A text of one statement is parsed whole, from the tokens
    /// the split read (the text is tokenized once).
    pub fn parse(sql: &str) -> Self {
        let tokens = sql::tokenize(sql);
        let pieces = sql::split(sql, &tokens);
        let parts = if pieces.len() <= 1 {
            vec![PreparedStatement::parse_one(sql, tokens)]
        } else {
            pieces
                .into_iter()
                .map(|piece| PreparedStatement::parse_one(piece, sql::tokenize(piece)))
                .collect()
        };
        ParsedSql { parts }
    }

    /// Each statement's parse, in order.
    pub fn parts(&self) -> &[Result<PreparedStatement>] {
        &self.parts
    }

    /// The one statement of the text; several are refused, naming how many.
    pub fn into_single(mut self) -> Result<PreparedStatement> {
        match self.parts.len() {
            1 => self
                .parts
                .pop()
                .unwrap_or_else(|| Err(Error::internal("a parsed text lost its statement"))),
            n => Err(Error::invalid_sql(format!(
                "expected exactly one statement, found {n}"
            ))),
        }
    }
}

impl Engine {
    /// Re-sources the tenant's env file, drops auth state derived from it (cached tokens),
    /// and reports every installed provider the tenant may use (or only `provider`): auth
    /// type, where its credentials come from, whether they resolve, and whether they
    /// changed. An unknown `provider` is an error; a configured env file that has gone
    /// missing is an error naming it. No value is ever part of the report.
    pub async fn reload_credentials(
        &self,
        cx: &ExecContext,
        provider: Option<&str>,
    ) -> Result<CredentialReport> {
        let (inner, cx) = (self.inner.clone(), cx.clone());
        let provider = provider.map(str::to_owned);
        blocking(move || reload::reload_credentials(&inner, &cx, provider.as_deref())).await
    }

    /// Per installed provider the tenant may use: its auth type, which credential source
    /// resolves (names only) and, while a token is cached, when it expires. Reads nothing
    /// anew and drops nothing; no value is ever part of the answer.
    pub async fn credential_sources(&self, cx: &ExecContext) -> Result<Vec<ProviderSource>> {
        // The summary kept from an earlier call, while current: no thread switch, no file.
        if let Some(rows) = reload::cached_sources(&self.inner, cx) {
            return Ok(rows);
        }
        let (inner, cx) = (self.inner.clone(), cx.clone());
        blocking(move || reload::credential_sources(&inner, &cx)).await
    }
}

/// Runs document-heavy work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| Error::internal(format!("engine task failed: {err}")))?
}
