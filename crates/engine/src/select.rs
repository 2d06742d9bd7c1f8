//! Runs a SELECT: plan (off the async threads), load each API table in dependency order —
//! fan-out legs concurrently, bounded, pages decoded into SQLite as they arrive — then
//! evaluate the rewritten statement in SQLite.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use rusqlite::types::Value as SqlValue;
use serde_json::Value;
use sqlparser::ast::Query;
use tokio::sync::Semaphore;

use super::document::{Param, ParamLocation};
use super::error::{Error, ErrorKind, Result};
use super::eval::{Database, PendingLoad, near_word, settled};
use super::identity::{check_provider_material, credential_error, resolve as resolve_auth};
use super::inline;
use super::plan::{TablePlan, consumed_conjuncts, contains_ci, plan_tables};
use super::request_body;
use super::requests::{ParamValues, PlannedRequest, request};
use super::rows::RowLocator;
use super::sql::{Source, analyse, drop_conjuncts, expand_wildcards, referenced};
use super::state::Inner;
use super::state::{open_provider, provider_resource};
use super::transform;
use super::types::{Cell, ExecContext, QueryOutput};
use super::upstream::{AuthParts, Leg, LegBody, LegEnd};

/// A planned table plus what calling its provider needs.
struct TableJob {
    plan: TablePlan,
    /// The name the statement uses for the table (for expressions over its columns).
    alias: String,
    auth: Value,
    base_url: Option<String>,
    locator: Arc<RowLocator>,
}

/// A query's plan made before it runs ([`requests_planned`], for the decisions taken on its
/// requests), handed on to [`run`] so that the statement is not planned twice and what runs
/// is exactly what was decided on. It is used only for the tenant (and allowed providers)
/// it was made for; otherwise the statement is planned again.
pub(crate) struct Planned {
    tenant: String,
    allowed: Option<std::collections::BTreeSet<String>>,
    sql: String,
    jobs: Vec<TableJob>,
}

impl std::fmt::Debug for Planned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The rewritten SQL may carry the statement's literals: only its shape here.
        f.debug_struct("Planned")
            .field("tenant", &self.tenant)
            .field("tables", &self.jobs.len())
            .finish_non_exhaustive()
    }
}

impl Planned {
    /// Whether the plan was made for the caller of `cx`.
    fn fits(&self, cx: &ExecContext) -> bool {
        self.tenant == cx.tenant && self.allowed == cx.allowed_providers
    }
}

/// Runs a query statement, with its plan when one was made before ([`Planned`]).
pub(crate) async fn run(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    query: Box<Query>,
    planned: Option<Planned>,
) -> Result<QueryOutput> {
    run_planned(inner, cx, query, Vec::new(), planned).await
}

/// Runs a query statement over API tables and `sources`: local tables filled from results
/// already at hand (the rows of `(EXEC …)` row sources), by name.
pub(crate) async fn run_with(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    query: Box<Query>,
    sources: Vec<(String, QueryOutput)>,
) -> Result<QueryOutput> {
    run_planned(inner, cx, query, sources, None).await
}

async fn run_planned(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    query: Box<Query>,
    sources: Vec<(String, QueryOutput)>,
    planned: Option<Planned>,
) -> Result<QueryOutput> {
    let (sql, jobs, original) = match planned.filter(|planned| planned.fits(cx)) {
        Some(planned) => {
            // The call's first slot is its planning slot: the plan was made before, so that
            // slot is handed back at once, before any request waits on the upstream.
            drop(cx.slot().await);
            (planned.sql, planned.jobs, query)
        }
        None => {
            let original = query.clone();
            let planning = cx.slot().await;
            let (sql, jobs) = plan(inner, cx, query).await?;
            drop(planning);
            (sql, jobs, original)
        }
    };

    let db = Database::open(inner.config.eval, cx.slots.clone(), &inner.sqlite_threads);
    for (table, rows) in sources {
        load_output(&db, &table, rows).await?;
    }
    // The final SQL compiles over the planned (empty) tables before any request is sent.
    // Those tables are then the ones the pages load into: made before the statement's
    // transaction (which the compile begins), so a kept table is reused with its cached
    // INSERTs rather than dropped and made again inside the transaction.
    let tables_made = !jobs.is_empty() && jobs.iter().all(|job| !job.plan.dynamic_columns);
    if tables_made {
        for job in &jobs {
            db.create_table_with_wire_names(
                &job.plan.local,
                job.plan.columns.clone(),
                &job.plan.boolean_columns,
                job.plan.wire_names.clone(),
            )?;
        }
        db.query(format!("EXPLAIN {sql}"), usize::MAX)
            .await
            .map_err(|err| in_user_terms(err, &original))?;
    }
    let budget = Budget {
        requests: AtomicUsize::new(0),
        limit: inner.config.upstream.max_requests_per_statement,
        permits: Semaphore::new(inner.config.upstream.max_concurrency.max(1)),
    };
    let mut warnings = Vec::new();
    let mut loaded = vec![false; jobs.len()];
    while loaded.iter().any(|done| !done) {
        let wave: Vec<usize> = (0..jobs.len())
            .filter(|i| !loaded[*i] && jobs[*i].plan.depends_on.iter().all(|d| loaded[*d]))
            .collect();
        if wave.is_empty() {
            return Err(Error::internal("table dependencies did not resolve"));
        }
        // Every request of the wave is counted before any of them is sent.
        let mut wave_params = Vec::with_capacity(wave.len());
        for i in &wave {
            wave_params.push(table_params(&db, &jobs, *i).await?);
        }
        budget.reserve(&jobs, &wave, &wave_params)?;
        let results = futures::future::join_all(wave.iter().zip(wave_params).map(|(i, params)| {
            let table = Load {
                jobs: &jobs,
                index: *i,
                made: tables_made,
            };
            load_table(inner, cx, &db, table, params, &budget)
        }))
        .await;
        for result in results {
            warnings.extend(result?);
        }
        for i in wave {
            loaded[i] = true;
        }
    }
    let mut output = db
        .query(sql, inner.config.max_result_rows)
        .await
        .map_err(|err| in_user_terms(err, &original))?;
    output.warnings = warnings;
    Ok(output)
}

/// Fills `table` with a result's rows (as JSON objects: nested JSON stays text).
async fn load_output(db: &Database, table: &str, output: QueryOutput) -> Result<()> {
    // Columns that hold booleans stay booleans when read back.
    let booleans: Vec<String> = output
        .columns
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            output
                .rows
                .iter()
                .any(|row| matches!(row.get(*i), Some(Cell::Boolean(_))))
        })
        .map(|(_, name)| name.clone())
        .collect();
    db.create_table(table, output.columns.clone(), &booleans)?;
    let rows: Vec<Value> = output
        .rows
        .into_iter()
        .map(|row| {
            Value::Object(
                output
                    .columns
                    .iter()
                    .cloned()
                    .zip(row.into_iter().map(|cell| match cell {
                        Cell::Null => Value::Null,
                        Cell::Boolean(b) => Value::Bool(b),
                        Cell::Integer(i) => Value::from(i),
                        Cell::Real(r) => Value::from(r),
                        Cell::Text(t) => Value::String(t),
                        Cell::Blob(b) => Value::String(String::from_utf8_lossy(&b).into_owned()),
                    }))
                    .collect(),
            )
        })
        .collect();
    let body = bytes::Bytes::from(Value::Array(rows).to_string());
    let load = db.load(
        table,
        body,
        Arc::new(RowLocator::Path(Vec::new())),
        Vec::new(),
        Vec::new(),
    );
    settled(load.await?).await?;
    Ok(())
}

/// Plans a query statement and checks it without calling any upstream API: the tables,
/// methods and parameters resolve, every provider's credential material is present (no
/// token is fetched), and SQLite compiles the rewritten statement over empty tables with
/// the planned columns (skipped when a table's columns come only from data).
pub(crate) async fn check(inner: &Arc<Inner>, cx: &ExecContext, query: Box<Query>) -> Result<()> {
    let original = query.clone();
    let planning = cx.slot().await;
    let (sql, jobs) = plan(inner, cx, query).await?;
    drop(planning);
    for job in &jobs {
        check_provider_material(
            &job.plan.resource.provider,
            &job.auth,
            cx.credentials.as_ref(),
        )
        .map_err(|cause| credential_error(&job.plan.resource.provider, &cause))?;
    }
    if jobs.iter().any(|job| job.plan.dynamic_columns) {
        return Ok(());
    }
    let db = Database::open(inner.config.eval, cx.slots.clone(), &inner.sqlite_threads);
    for job in &jobs {
        db.create_table_with_wire_names(
            &job.plan.local,
            job.plan.columns.clone(),
            &job.plan.boolean_columns,
            job.plan.wire_names.clone(),
        )?;
    }
    // EXPLAIN compiles the statement (names, columns, functions) without running it.
    db.query(format!("EXPLAIN {sql}"), usize::MAX)
        .await
        .map_err(|err| in_user_terms(err, &original))?;
    Ok(())
}

/// A compile error of the rewritten SQL placed in the statement as written: the word SQLite
/// stopped at, with its line and column in the statement when the statement has it.
fn in_user_terms(err: Error, original: &Query) -> Error {
    if err.kind() != ErrorKind::InvalidSql {
        return err;
    }
    let Some(word) = near_word(err.message()) else {
        return err;
    };
    let Some((line, column)) = locate(original, word) else {
        return err;
    };
    let message = err.message();
    let head = message
        .strip_suffix(&format!("(near '{word}')"))
        .unwrap_or(message)
        .trim_end();
    Error::invalid_sql(format!(
        "{head} (near '{word}' at line {line}, column {column} of the statement)"
    ))
}

/// Where the statement first names `word` (an identifier, column or function name).
fn locate(query: &Query, word: &str) -> Option<(u64, u64)> {
    use sqlparser::ast::{Expr, Ident, Visit, Visitor};
    use std::ops::ControlFlow;

    struct Finder<'w> {
        word: &'w str,
    }
    impl Visitor for Finder<'_> {
        type Break = (u64, u64);
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<(u64, u64)> {
            let idents: Vec<&Ident> = match expr {
                Expr::Identifier(ident) => vec![ident],
                Expr::CompoundIdentifier(parts) => parts.iter().collect(),
                Expr::Function(function) => function
                    .name
                    .0
                    .iter()
                    .filter_map(|p| p.as_ident())
                    .collect(),
                _ => Vec::new(),
            };
            for ident in idents {
                let start = ident.span.start;
                if ident.value.eq_ignore_ascii_case(self.word) && start.line > 0 {
                    return ControlFlow::Break((start.line, start.column));
                }
            }
            ControlFlow::Continue(())
        }
    }
    match query.visit(&mut Finder { word }) {
        ControlFlow::Break(found) => Some(found),
        ControlFlow::Continue(()) => None,
    }
}

struct Budget {
    requests: AtomicUsize,
    limit: usize,
    permits: Semaphore,
}

/// A table's parameters with their values: each combination is one upstream request.
type TableParams = Vec<(Param, Vec<ParamValue>)>;

impl Budget {
    /// Counts the requests of the tables in `wave` (one per combination of parameter values)
    /// towards the statement's limit, failing before any is sent when they would pass it.
    fn reserve(&self, jobs: &[TableJob], wave: &[usize], params: &[TableParams]) -> Result<()> {
        let counts: Vec<(String, usize)> = wave
            .iter()
            .zip(params)
            .map(|(i, params)| {
                let legs = params
                    .iter()
                    .fold(1usize, |n, (_, values)| n.saturating_mul(values.len()));
                (jobs[*i].plan.resource.full_name(), legs)
            })
            .collect();
        let wanted = counts
            .iter()
            .fold(0usize, |n, (_, legs)| n.saturating_add(*legs));
        let used = self
            .requests
            .fetch_add(wanted, Ordering::SeqCst)
            .saturating_add(wanted);
        if used <= self.limit {
            return Ok(());
        }
        let each: Vec<String> = counts
            .iter()
            .filter(|(_, legs)| *legs > 0)
            .map(|(name, legs)| format!("'{name}': {legs}"))
            .collect();
        Err(Error::new(
            ErrorKind::LimitExceeded,
            format!(
                "the statement needs {used} upstream requests ({}), over the limit of {} (upstream.max_requests_per_statement); nothing more was sent; narrow the IN lists or joins",
                each.join(", "),
                self.limit
            ),
        ))
    }
}

fn prepare(
    inner: &Inner,
    cx: &ExecContext,
    mut query: Box<Query>,
) -> Result<(String, Vec<TableJob>)> {
    super::views::expand(inner, cx, &mut query)?;
    let analysis = analyse(&mut query)?;
    let mut resources = Vec::with_capacity(analysis.occurrences.len());
    let mut providers = Vec::with_capacity(analysis.occurrences.len());
    for occurrence in &analysis.occurrences {
        let provider = open_provider(inner, cx, &occurrence.provider)?;
        resources.push(provider_resource(
            inner,
            &provider,
            &occurrence.service,
            &occurrence.resource,
        )?);
        providers.push(provider);
    }
    let mut plans = plan_tables(&inner.store, &analysis, resources)?;
    drop_conjuncts(&mut query, &consumed_conjuncts(&plans));
    if let [plan] = plans.as_mut_slice()
        && let Some(pushdown) = &plan.method().pushdown
        && !plan.dynamic_columns
    {
        let method = plan.method();
        let response_columns: Vec<(String, String)> = plan
            .star_columns
            .iter()
            .filter(|c| !method.params.iter().any(|p| method.answers_to(&p.name, c)))
            .map(|c| {
                let wire = plan.wire_names.iter().find(|(column, _)| column == c);
                (
                    c.clone(),
                    wire.map_or_else(|| c.clone(), |(_, w)| w.clone()),
                )
            })
            .collect();
        plan.pushdown = super::pushdown::odata_params(
            pushdown,
            &query,
            &analysis.occurrences[0].alias,
            &response_columns,
        );
    }
    expand_wildcards(&mut query, &analysis, &|i| {
        plans
            .get(i)
            .filter(|p| !p.dynamic_columns)
            .map(|p| p.star_columns.clone())
            .unwrap_or_default()
    });
    // Projection push-down: each table loads only the columns the statement can reach.
    let referenced = referenced(&query);
    for plan in &mut plans {
        plan.project(&referenced);
    }
    let jobs = plans
        .into_iter()
        .zip(providers)
        .zip(&analysis.occurrences)
        .map(|((plan, provider), occurrence)| TableJob {
            alias: occurrence.alias.clone(),
            locator: plan.locator.clone(),
            auth: inner.effective_auth(&provider),
            base_url: inner
                .config
                .providers
                .get(&provider.name)
                .and_then(|p| p.base_url.clone()),
            plan,
        })
        .collect();
    Ok((query.to_string(), jobs))
}

/// The upstream requests `query` would make, planned as [`run`] plans them; nothing is
/// sent. A parameter whose values come from another table's rows or from an expression is
/// [`ParamValues::Runtime`].
pub(crate) fn requests(
    inner: &Inner,
    cx: &ExecContext,
    query: Box<Query>,
) -> Result<Vec<PlannedRequest>> {
    let (_, jobs) = prepare(inner, cx, query)?;
    Ok(job_requests(&jobs))
}

/// [`requests`], with the plan they came from, to hand on to [`run`].
pub(crate) fn requests_planned(
    inner: &Inner,
    cx: &ExecContext,
    query: Box<Query>,
) -> Result<(Vec<PlannedRequest>, Planned)> {
    let (sql, jobs) = prepare(inner, cx, query)?;
    let requests = job_requests(&jobs);
    let planned = Planned {
        tenant: cx.tenant.clone(),
        allowed: cx.allowed_providers.clone(),
        sql,
        jobs,
    };
    Ok((requests, planned))
}

/// The plan of each table `query` reads, as a person approving it sees it and as its
/// approval is bound to (see `read_plan`).
pub(crate) fn planned_reads(
    inner: &Inner,
    cx: &ExecContext,
    query: Box<Query>,
) -> Result<Vec<super::types::PlannedWrite>> {
    let (_, jobs) = prepare(inner, cx, query)?;
    jobs.iter()
        .map(|job| {
            let plan = &job.plan;
            super::read_plan::planned_read(
                cx,
                &super::read_plan::ReadJob {
                    resource: &plan.resource,
                    method: plan.method(),
                    base_url: job.base_url.as_deref(),
                    params: &plan.params,
                    pushdown: &plan.pushdown,
                    body: plan.body.as_deref(),
                },
            )
        })
        .collect()
}

fn job_requests(jobs: &[TableJob]) -> Vec<PlannedRequest> {
    jobs.iter()
        .map(|job| {
            let plan = &job.plan;
            request(&plan.resource, plan.method(), |param| {
                let bound = plan.params.iter().find(|(p, _)| p.name == param.name);
                let pushed = plan.pushdown.iter().find(|(p, _)| p.name == param.name);
                match (bound, pushed) {
                    (Some((_, Source::Literals(literals))), _) => {
                        ParamValues::Given(literals.iter().map(|l| l.text.clone()).collect())
                    }
                    (Some(_), _) => ParamValues::Runtime,
                    (None, Some((_, value))) => ParamValues::Given(vec![value.clone()]),
                    (None, None) => ParamValues::Omitted,
                }
            })
        })
        .collect()
}

/// [`prepare`]s `query` on this thread when the models and documents it needs are cached (no
/// file to read, no model to build), else on a blocking thread.
async fn plan(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    query: Box<Query>,
) -> Result<(String, Vec<TableJob>)> {
    if let Some(planned) = inline::cached_only(|| prepare(inner, cx, query.clone())) {
        return planned;
    }
    let (planner, plan_cx) = (inner.clone(), cx.clone());
    tokio::task::spawn_blocking(move || prepare(&planner, &plan_cx, query))
        .await
        .map_err(|err| Error::internal(format!("planning task failed: {err}")))?
}

/// One value of a parameter: the text sent upstream and the SQL value stored in its column.
#[derive(Clone)]
struct ParamValue {
    text: String,
    sql: SqlValue,
}

async fn param_values(
    db: &Database,
    jobs: &[TableJob],
    source: &Source,
) -> Result<Vec<ParamValue>> {
    match source {
        Source::Literals(literals) => Ok(literals
            .iter()
            .map(|l| ParamValue {
                text: l.text.clone(),
                sql: if l.numeric {
                    l.text
                        .parse::<i64>()
                        .map(SqlValue::Integer)
                        .or_else(|_| l.text.parse::<f64>().map(SqlValue::Real))
                        .unwrap_or_else(|_| SqlValue::Text(l.text.clone()))
                } else {
                    SqlValue::Text(l.text.clone())
                },
            })
            .collect()),
        Source::Constant(sql) => evaluated(db, format!("SELECT ({sql})")).await,
        Source::Expr { occurrence, sql } => {
            let table = &jobs[*occurrence].plan;
            let alias = jobs[*occurrence].alias.replace('"', "\"\"");
            evaluated(
                db,
                format!(
                    "SELECT DISTINCT ({sql}) FROM \"{}\" AS \"{alias}\"",
                    table.local
                ),
            )
            .await
        }
        Source::Column { occurrence, column } => {
            let table = &jobs[*occurrence].plan;
            if !contains_ci(&table.columns, column) {
                return Ok(Vec::new());
            }
            let values = db.distinct(&table.local, column).await?;
            Ok(values
                .into_iter()
                .filter_map(|sql| {
                    let text = match &sql {
                        SqlValue::Integer(i) => i.to_string(),
                        SqlValue::Real(r) => r.to_string(),
                        SqlValue::Text(t) => t.clone(),
                        SqlValue::Null | SqlValue::Blob(_) => return None,
                    };
                    Some(ParamValue { text, sql })
                })
                .collect())
        }
    }
}

/// The non-null values of the first column of `sql`, run in the statement's SQLite.
async fn evaluated(db: &Database, sql: String) -> Result<Vec<ParamValue>> {
    let out = db.query(sql, usize::MAX).await?;
    Ok(out
        .rows
        .into_iter()
        .filter_map(|row| {
            let (text, sql) = match row.into_iter().next()? {
                Cell::Boolean(b) => (b.to_string(), SqlValue::Integer(i64::from(b))),
                Cell::Integer(i) => (i.to_string(), SqlValue::Integer(i)),
                Cell::Real(r) => (r.to_string(), SqlValue::Real(r)),
                Cell::Text(t) => (t.clone(), SqlValue::Text(t)),
                Cell::Null | Cell::Blob(_) => return None,
            };
            Some(ParamValue { text, sql })
        })
        .collect())
}

/// Every combination of parameter values: one upstream request each.
fn combinations(params: &[(Param, Vec<ParamValue>)]) -> Vec<Vec<(&Param, ParamValue)>> {
    let mut legs: Vec<Vec<(&Param, ParamValue)>> = vec![Vec::new()];
    for (param, values) in params {
        let mut next = Vec::with_capacity(legs.len() * values.len());
        for leg in &legs {
            for value in values {
                let mut extended = leg.clone();
                extended.push((param, value.clone()));
                next.push(extended);
            }
        }
        legs = next;
    }
    legs
}

/// A table's parameter values: literals, or the distinct values of a loaded table's column.
async fn table_params(db: &Database, jobs: &[TableJob], index: usize) -> Result<TableParams> {
    let mut params = Vec::with_capacity(jobs[index].plan.params.len());
    for (param, source) in &jobs[index].plan.params {
        params.push((param.clone(), param_values(db, jobs, source).await?));
    }
    Ok(params)
}

/// The table of `jobs[index]` to load; `made`: its (empty) table was already created for
/// this statement, before its transaction.
struct Load<'a> {
    jobs: &'a [TableJob],
    index: usize,
    made: bool,
}

async fn load_table(
    inner: &Inner,
    cx: &ExecContext,
    db: &Database,
    table: Load<'_>,
    params: TableParams,
    budget: &Budget,
) -> Result<Vec<String>> {
    let Load { jobs, index, made } = table;
    let job = &jobs[index];
    let plan = &job.plan;
    // Counted by `Budget::reserve` before the wave started.
    let legs = combinations(&params);
    let provider = plan.resource.provider.as_str();
    let auth = if legs.is_empty() {
        None
    } else {
        Some(
            resolve_auth(
                &inner.upstream,
                provider,
                &job.auth,
                &cx.credentials,
                cx.caller(),
            )
            .await?,
        )
    };
    if !plan.dynamic_columns && !made {
        db.create_table_with_wire_names(
            &plan.local,
            plan.columns.clone(),
            &plan.boolean_columns,
            plan.wire_names.clone(),
        )?;
    }

    // Collected first: a closure held across awaits would make the future's `Send` proof
    // fail for callers that box it.
    let mut fetches = Vec::with_capacity(legs.len());
    for leg in &legs {
        fetches.push(fetch_leg(inner, cx, db, job, budget, auth.as_ref(), leg));
    }
    let concurrency = inner.config.upstream.max_concurrency.max(1);
    let results: Vec<Result<(LegEnd, Vec<Page>)>> = futures::stream::iter(fetches)
        .buffer_unordered(concurrency)
        .collect()
        .await;

    let mut warnings = Vec::new();
    let mut held = Vec::new();
    let mut pending = Vec::new();
    for result in results {
        let (end, pages) = result?;
        if let LegEnd::PageLimit { pages } = end {
            warnings.push(format!(
                "'{}': stopped after {pages} pages (upstream.page_limit); the result may be incomplete",
                plan.resource.full_name()
            ));
        }
        for page in pages {
            match page {
                Page::Loading(load) => pending.push(load),
                Page::Loaded => {}
                Page::Held(body, fixed, names) => held.push((body, fixed, names)),
            }
        }
    }
    for load in pending {
        settled(load).await?;
    }
    if plan.dynamic_columns {
        let mut columns: Vec<String> = Vec::new();
        for name in held.iter().flat_map(|(_, _, names)| names) {
            if !contains_ci(&columns, name) {
                columns.push(name.clone());
            }
        }
        for name in &plan.columns {
            if !contains_ci(&columns, name) {
                columns.push(name.clone());
            }
        }
        db.create_table(&plan.local, columns, &plan.boolean_columns)?;
        for (body, fixed, _) in held {
            let load = db.load(&plan.local, body, job.locator.clone(), fixed, Vec::new());
            settled(load.await?).await?;
        }
    }
    Ok(warnings)
}

/// Fetches one leg's pages, loading them into SQLite as they arrive (or holding them, with
/// their property names, when the columns come from the data). A page whose next-page token
/// is in its body is loaded before the next request, which needs the token read in that
/// pass; others load while the next page is fetched. A named function rather than a closure, so the future's
/// lifetimes are explicit and it stays `Send` for callers that box it.
async fn fetch_leg(
    inner: &Inner,
    cx: &ExecContext,
    db: &Database,
    job: &TableJob,
    budget: &Budget,
    auth: Option<&AuthParts>,
    leg: &[(&Param, ParamValue)],
) -> Result<(LegEnd, Vec<Page>)> {
    let plan = &job.plan;
    let _permit = budget
        .permits
        .acquire()
        .await
        .map_err(|_| Error::internal("request limiter closed"))?;
    let Some(auth) = auth else {
        return Ok((LegEnd::Complete { pages: 0 }, Vec::new()));
    };
    let body = plan.body.as_ref().and_then(|template| {
        let fields = leg
            .iter()
            .filter(|(p, _)| p.location == ParamLocation::Body)
            .map(|(p, v)| {
                (
                    p.body_path.clone(),
                    request_body::typed(&v.text, p.type_name.as_deref()),
                )
            })
            .collect();
        template.render(fields).map(|json| LegBody {
            media_type: template.media_type.clone(),
            json,
        })
    });
    let request = Leg {
        method: plan.method(),
        base_url: job.base_url.as_deref(),
        values: leg
            .iter()
            .filter(|(p, _)| p.location != ParamLocation::Body)
            .map(|(p, v)| (*p, v.text.clone()))
            .chain(plan.pushdown.iter().map(|(p, v)| (p, v.clone())))
            .collect(),
        body,
        auth,
        credentials: cx.credentials.as_ref(),
        tenant: &cx.tenant,
        deadline: cx.deadline,
        admission: Some(db),
    };
    let method = plan.method();
    let fixed: Vec<(String, SqlValue)> = leg
        .iter()
        .flat_map(|(p, v)| {
            let alias = method.sql_alias(&p.name).map(|a| (a, v.sql.clone()));
            std::iter::once((p.name.clone(), v.sql.clone())).chain(alias)
        })
        .collect();
    let resource = plan.resource.full_name();
    let shape = method.row_shape(&inner.store)?;
    inner
        .upstream
        .fetch(&request, |body, wanted| {
            // Only the planned columns are written (dynamic columns: all, to be discovered).
            let loaded = (!plan.dynamic_columns).then_some(plan.columns.as_slice());
            let body = transform::rows_body(method, &resource, body, &shape.columns, loaded)?;
            let fixed = fixed.clone();
            // Handing the page over may wait for an evaluation slot: meanwhile the next page
            // is not fetched.
            Ok(async move {
                if plan.dynamic_columns {
                    let discovering = db
                        .discover_page(body.clone(), job.locator.clone(), wanted)
                        .await?;
                    let (names, found) = settled(discovering).await?;
                    return Ok((Page::Held(body, fixed, names), found));
                }
                // With fields wanted, the next-page token comes from this load.
                let scanning = !wanted.is_empty();
                let load = db
                    .load(&plan.local, body, job.locator.clone(), fixed, wanted)
                    .await?;
                if scanning {
                    let loaded = settled(load).await?;
                    Ok((Page::Loaded, loaded.scalars))
                } else {
                    Ok((Page::Loading(load), Vec::new()))
                }
            })
        })
        .await
}

/// A fetched page.
enum Page {
    /// Loading; awaited once every leg is fetched.
    Loading(PendingLoad),
    /// Loaded.
    Loaded,
    /// Held with its parameter values and property names until the table is created.
    Held(bytes::Bytes, Vec<(String, SqlValue)>, Vec<String>),
}
