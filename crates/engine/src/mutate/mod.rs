//! The write path: INSERT, UPDATE (PATCH), REPLACE (PUT), DELETE and EXEC.
//!
//! A statement's named values are split into request parameters (names of the chosen
//! method's parameters) and request body fields (everything else; a `data__` prefix is
//! dropped), body values are typed by the request schema, and each request is sent once —
//! writes are never retried. A non-2xx answer is a typed upstream error; success returns a
//! message per request, a timestamp and, with `RETURNING` (or for EXEC), the rows of the
//! responses.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::document::{Method, Param, ParamLocation, Resource, SchemaAt};
use super::error::{Error, ErrorKind, Result};
use super::eval::{Database, settled};
use super::identity::{check_provider_material, credential_error, resolve as resolve_auth};
use super::preview::{self, MASK, PREVIEW_REQUESTS, is_secret_name};
use super::request_body::{BodyTemplate, set_path};
use super::requests::{ParamValues, PlannedRequest, request};
use super::rows::RowLocator;
use super::sql::{Exec, InsertRows, Mutation, Returning, Scalar};
use super::state::Inner;
use super::state::open_resource;
use super::types::{Cell, ExecContext, PlannedWrite, QueryOutput, RequestPreview, SqlVerb};
use super::upstream::{AuthParts, Leg, Scrubber, unsigned_request, unsigned_wire};

mod planned;
mod prepare;
mod resume;
mod send;

use planned::planned;
use prepare::{cell_scalar, check_required, choose_method, named_row, prepare, row_request};
pub(crate) use resume::{resume_exec, resume_mutation};
use send::send_all;

/// The prefix some provider documents give request body columns.
const BODY_PREFIX: &str = "data__";

/// One prepared upstream request.
struct Request {
    params: Vec<(Param, String)>,
    body: Option<Value>,
}

/// Everything the async half needs, prepared off the async threads.
struct Prepared {
    resource: Arc<Resource>,
    method: usize,
    auth: Value,
    base_url: Option<String>,
    media_type: String,
    requests: Vec<Request>,
    /// Where rows sit in a response, and the columns the response schema declares.
    locator: Arc<RowLocator>,
    columns: Vec<String>,
    /// (column, wire name) of the columns named otherwise (`config.snake_case_aliases`).
    wire_names: Vec<(String, String)>,
}

impl Prepared {
    fn method(&self) -> &Method {
        &self.resource.methods[self.method]
    }

    /// The upstream leg of `request` (one of this write's), sent with `auth` for the
    /// caller of `cx`; its body is given to the call.
    fn leg<'a>(
        &'a self,
        request: &'a Request,
        auth: &'a AuthParts,
        cx: &'a ExecContext,
    ) -> Leg<'a> {
        Leg {
            method: self.method(),
            base_url: self.base_url.as_deref(),
            values: request.params.iter().map(|(p, v)| (p, v.clone())).collect(),
            body: None,
            auth,
            credentials: cx.credentials.as_ref(),
            tenant: &cx.tenant,
            deadline: cx.deadline,
            admission: None,
        }
    }
}

/// A statement's named values, one list per upstream request.
type Rows = Vec<Vec<(String, Scalar)>>;

/// Runs an INSERT, UPDATE, REPLACE or DELETE.
pub(crate) async fn run_mutation(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    mutation: Mutation,
) -> Result<QueryOutput> {
    let verb = mutation.verb;
    let returning = mutation.returning.clone();
    // Rows of INSERT … SELECT come from the read path first.
    let rows: Rows = match mutation.insert {
        Some((columns, InsertRows::Values(values))) => values
            .into_iter()
            .map(|row| named_row(&columns, row))
            .collect::<Result<_>>()?,
        Some((columns, InsertRows::Query(query))) => {
            let output = super::select::run(inner, cx, query, None).await?;
            if output.columns.len() != columns.len() {
                return Err(Error::invalid_sql(format!(
                    "INSERT names {} columns but its SELECT returns {}",
                    columns.len(),
                    output.columns.len()
                )));
            }
            output
                .rows
                .into_iter()
                .map(|row| named_row(&columns, row.into_iter().map(cell_scalar).collect()))
                .collect::<Result<_>>()?
        }
        None => condition_rows(&mutation.conditions, &mutation.assignments),
    };
    let where_names: Vec<String> = mutation.conditions.iter().map(|(n, _)| n.clone()).collect();
    let prepared =
        plan_mutation(inner, cx, verb, mutation.target.clone(), rows, where_names).await?;
    let awaiting = mutation.await_operation;
    check_delete_await(inner, &prepared, verb, awaiting, returning.is_some())?;
    send_all(
        inner,
        cx,
        &prepared,
        returning.as_ref(),
        verb.as_str(),
        awaiting,
    )
    .await
}

/// Plans an INSERT, UPDATE, REPLACE or DELETE as [`run_mutation`] would and stops before
/// anything is sent (the rows of INSERT … SELECT are not read: its SELECT is checked).
pub(crate) async fn check_mutation(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    mutation: &Mutation,
) -> Result<PlannedWrite> {
    let verb = mutation.verb;
    let rows: Rows = match &mutation.insert {
        Some((columns, InsertRows::Values(values))) => values
            .iter()
            .map(|row| named_row(columns, row.clone()))
            .collect::<Result<_>>()?,
        Some((_, InsertRows::Query(query))) => {
            super::select::check(inner, cx, query.clone()).await?;
            Vec::new()
        }
        None => condition_rows(&mutation.conditions, &mutation.assignments),
    };
    let where_names: Vec<String> = mutation.conditions.iter().map(|(n, _)| n.clone()).collect();
    let prepared =
        plan_mutation(inner, cx, verb, mutation.target.clone(), rows, where_names).await?;
    let awaiting = mutation.await_operation;
    check_delete_await(
        inner,
        &prepared,
        verb,
        awaiting,
        mutation.returning.is_some(),
    )?;
    if awaiting {
        super::operation::check_awaitable(&inner.store, prepared.method())?;
    }
    planned(cx, &prepared, verb.as_str())
}

/// Opens the target, chooses the method the rows supply and prepares the requests, off the
/// async threads.
async fn plan_mutation(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    verb: SqlVerb,
    target: [String; 3],
    rows: Rows,
    where_names: Vec<String>,
) -> Result<Prepared> {
    let (planner, plan_cx) = (inner.clone(), cx.clone());
    let planning = cx.slot().await;
    let prepared = tokio::task::spawn_blocking(move || {
        let resource = open_resource(&planner, &plan_cx, &target)?;
        let method = choose_method(&resource, verb, &rows)?;
        prepare(&planner, resource, method, rows, &where_names, None)
    })
    .await
    .map_err(|err| Error::internal(format!("planning task failed: {err}")))??;
    drop(planning);
    Ok(prepared)
}

/// A DELETE with `/*+ AWAIT */` and `RETURNING` is refused before anything is sent.
fn check_delete_await(
    inner: &Inner,
    prepared: &Prepared,
    verb: SqlVerb,
    awaiting: bool,
    returning: bool,
) -> Result<()> {
    if awaiting && verb == SqlVerb::Delete && returning {
        // StackQL's order: a method that cannot be awaited is named first.
        super::operation::check_awaitable(&inner.store, prepared.method())?;
        return Err(Error::unsupported(
            "RETURNING from a DELETE with /*+ AWAIT */ is not supported (StackQL refuses it too: once the operation is done the resource is gone); drop RETURNING to await the delete, or /*+ AWAIT */ to return the delete's response; nothing was sent",
        ));
    }
    Ok(())
}

/// One request's values per combination of the WHERE values (`key IN (…)` fans out, in
/// the order written), each followed by the SET assignments.
fn condition_rows(
    conditions: &[(String, Vec<Scalar>)],
    assignments: &[(String, Scalar)],
) -> Vec<Vec<(String, Scalar)>> {
    let mut rows: Vec<Vec<(String, Scalar)>> = vec![Vec::new()];
    for (column, values) in conditions {
        let mut next = Vec::with_capacity(rows.len() * values.len());
        for row in &rows {
            for value in values {
                let mut extended = row.clone();
                extended.push((column.clone(), value.clone()));
                next.push(extended);
            }
        }
        rows = next;
    }
    for row in &mut rows {
        row.extend(assignments.iter().cloned());
    }
    rows
}

/// `SELECT * FROM <target> WHERE <the conditions> LIMIT <limit>`: the read that shows the
/// rows an UPDATE, REPLACE or DELETE names. Names are quoted and values written as SQL
/// literals, so nothing of the statement is read as SQL a second time.
pub(crate) fn matching_select(mutation: &Mutation, limit: usize) -> String {
    let ident = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
    let literal = |value: &Scalar| match value {
        Scalar::Text(text) => format!("'{}'", text.replace('\'', "''")),
        Scalar::Number(number) => number.clone(),
        Scalar::Bool(true) => "TRUE".to_owned(),
        Scalar::Bool(false) => "FALSE".to_owned(),
        Scalar::Null => "NULL".to_owned(),
    };
    let table: Vec<String> = mutation.target.iter().map(|part| ident(part)).collect();
    let conditions: Vec<String> = mutation
        .conditions
        .iter()
        .map(|(column, values)| match values.as_slice() {
            [one] => format!("{} = {}", ident(column), literal(one)),
            many => format!(
                "{} IN ({})",
                ident(column),
                many.iter().map(literal).collect::<Vec<_>>().join(", ")
            ),
        })
        .collect();
    format!(
        "SELECT * FROM {} WHERE {} LIMIT {limit}",
        table.join("."),
        conditions.join(" AND ")
    )
}

/// Runs `EXEC p.s.r.method …`.
pub(crate) async fn run_exec(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    exec: Exec,
) -> Result<QueryOutput> {
    let awaiting = exec.await_operation;
    let prepared = plan_exec(inner, cx, exec).await?;
    send_all(
        inner,
        cx,
        &prepared,
        Some(&Returning::All),
        "EXEC",
        awaiting,
    )
    .await
}

/// Plans an EXEC as [`run_exec`] would and stops before anything is sent.
pub(crate) async fn check_exec(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    exec: &Exec,
) -> Result<PlannedWrite> {
    let prepared = plan_exec(inner, cx, exec.clone()).await?;
    if exec.await_operation {
        super::operation::check_awaitable(&inner.store, prepared.method())?;
    }
    planned(cx, &prepared, "EXEC")
}

/// Opens the target and its method, checks the required arguments and prepares the
/// request, off the async threads.
async fn plan_exec(inner: &Arc<Inner>, cx: &ExecContext, exec: Exec) -> Result<Prepared> {
    let [provider, service, resource_name, method_name] = exec.target;
    let (planner, plan_cx) = (inner.clone(), cx.clone());
    let planning = cx.slot().await;
    let json_body = exec
        .json_body
        .map(|text| {
            serde_json::from_str::<Value>(&text)
                .map_err(|err| Error::invalid_sql(format!("@@json is not valid JSON: {err}")))
        })
        .transpose()?;
    let args = exec.args;
    let prepared = tokio::task::spawn_blocking(move || {
        let resource = open_resource(&planner, &plan_cx, &[provider, service, resource_name])?;
        let method = exec_method(&resource, &method_name)?;
        check_required(&resource, &resource.methods[method], &args)?;
        prepare(&planner, resource, method, vec![args], &[], json_body)
    })
    .await
    .map_err(|err| Error::internal(format!("planning task failed: {err}")))??;
    drop(planning);
    Ok(prepared)
}

/// The index of the method `EXEC` names.
fn exec_method(resource: &Resource, method_name: &str) -> Result<usize> {
    if let Some(method) = resource.methods.iter().position(|m| m.name == method_name) {
        return Ok(method);
    }
    if let Some(broken) = resource.broken_method(method_name) {
        return Err(broken);
    }
    let names: Vec<&str> = resource.methods.iter().map(|m| m.name.as_str()).collect();
    Err(Error::unknown(format!(
        "resource '{}' has no method '{method_name}' (methods: {})",
        resource.full_name(),
        names.join(", ")
    )))
}

/// The requests an INSERT, UPDATE, REPLACE or DELETE would send (one per row or per
/// combination of `WHERE` values), planned as running it plans them; nothing is sent. The
/// requests of an `INSERT … SELECT`'s query come first, and the values its rows give are
/// [`ParamValues::Runtime`].
pub(crate) fn mutation_requests(
    inner: &Inner,
    cx: &ExecContext,
    mutation: &Mutation,
) -> Result<Vec<PlannedRequest>> {
    let mut out = Vec::new();
    let (rows, runtime) = match &mutation.insert {
        Some((columns, InsertRows::Values(values))) => (
            values
                .iter()
                .map(|row| named_row(columns, row.clone()))
                .collect::<Result<Vec<_>>>()?,
            false,
        ),
        Some((columns, InsertRows::Query(query))) => {
            out.extend(super::select::requests(inner, cx, query.clone())?);
            // The columns are known, their values only once the query ran.
            let row = columns
                .iter()
                .map(|c| (c.clone(), Scalar::Text(String::new())))
                .collect();
            (vec![row], true)
        }
        None => (
            condition_rows(&mutation.conditions, &mutation.assignments),
            false,
        ),
    };
    let resource = open_resource(inner, cx, &mutation.target)?;
    let method = &resource.methods[choose_method(&resource, mutation.verb, &rows)?];
    for row in &rows {
        out.push(row_request(&resource, method, row, runtime));
    }
    Ok(out)
}

/// The request `EXEC` would send; nothing is sent.
pub(crate) fn exec_requests(
    inner: &Inner,
    cx: &ExecContext,
    exec: &Exec,
) -> Result<Vec<PlannedRequest>> {
    let [provider, service, resource_name, method_name] = &exec.target;
    let names = [provider.clone(), service.clone(), resource_name.clone()];
    let resource = open_resource(inner, cx, &names)?;
    let method = &resource.methods[exec_method(&resource, method_name)?];
    Ok(vec![row_request(&resource, method, &exec.args, false)])
}
