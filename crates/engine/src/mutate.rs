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

use super::Inner;
use super::discovery::open_resource;
use super::document::{Method, Param, ParamLocation, Resource, SchemaAt};
use super::error::{Error, ErrorKind, Result};
use super::eval::{Database, settled};
use super::preview::{self, MASK, PREVIEW_REQUESTS, is_secret_name};
use super::request_body::{BodyTemplate, set_path};
use super::requests::{ParamValues, PlannedRequest, request};
use super::rows::RowLocator;
use super::slots;
use super::sql::{Exec, InsertRows, Mutation, Returning, Scalar};
use super::types::{Cell, ExecContext, PlannedWrite, QueryOutput, RequestPreview, SqlVerb};
use super::upstream::{
    AuthParts, Leg, Scrubber, check_provider_material, credential_error, resolve_auth,
    unsigned_request, unsigned_wire,
};

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
}

impl Prepared {
    fn method(&self) -> &Method {
        &self.resource.methods[self.method]
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
    let planning = slots::slot(cx).await;
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

/// What a prepared write would send, once its provider's credential material is known to
/// be present.
fn planned(cx: &ExecContext, prepared: &Prepared, verb: &str) -> Result<PlannedWrite> {
    let provider = &prepared.resource.provider;
    check_provider_material(provider, &prepared.auth, cx.credentials.as_ref())
        .map_err(|cause| credential_error(provider, &cause))?;
    let method = prepared.method();
    let resource = prepared.resource.full_name();
    // Each piece length-prefixed, so no two different plans hash alike.
    let mut hasher = Sha256::new();
    let mut piece = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_be_bytes());
        hasher.update(bytes);
    };
    piece(b"querygate-plan/v2");
    piece(resource.as_bytes());
    piece(method.name.as_bytes());
    // The documents the method was read from: another replica's other documents plan
    // another digest, even for the same requests.
    piece(method.documents_sha256.as_bytes());
    let unsigned = AuthParts::default();
    let secrets = Scrubber::new(&unsigned, cx.credentials.as_ref());
    let mut previews = Vec::new();
    for request in &prepared.requests {
        let leg = Leg {
            method,
            base_url: prepared.base_url.as_deref(),
            values: request.params.iter().map(|(p, v)| (p, v.clone())).collect(),
            body: None,
            auth: &unsigned,
            credentials: cx.credentials.as_ref(),
            tenant: &cx.tenant,
            deadline: cx.deadline,
            admission: None,
        };
        let (url, headers) = unsigned_request(&leg)?;
        piece(method.http_method.as_bytes());
        piece(url.as_bytes());
        for (name, value) in &headers {
            piece(name.as_bytes());
            piece(value);
        }
        let body = request
            .body
            .as_ref()
            .map(|b| b.to_string())
            .unwrap_or_default();
        piece(prepared.media_type.as_bytes());
        piece(body.as_bytes());
        if previews.len() < PREVIEW_REQUESTS {
            previews.push(request_preview(
                &leg,
                request,
                &prepared.media_type,
                &secrets,
            )?);
        }
    }
    let digest = hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    Ok(PlannedWrite {
        verb: verb.to_ascii_uppercase(),
        provider: provider.clone(),
        resource,
        method: method.name.clone(),
        requests: prepared.requests.len(),
        digest,
        previews,
    })
}

/// What a person is shown of `request` (sent as `leg`): built as it would be sent, but with
/// the values of secret-named path, query and header parameters as [`MASK`], then masked
/// by [`preview::preview`].
fn request_preview(
    leg: &Leg<'_>,
    request: &Request,
    media_type: &str,
    secrets: &Scrubber,
) -> Result<RequestPreview> {
    let shown = Leg {
        values: request
            .params
            .iter()
            .map(|(p, v)| {
                // A server variable is checked against its pattern: it keeps its value,
                // masked afterwards only if the credentials hold it.
                let masked = p.location != ParamLocation::Server && is_secret_name(&p.name);
                (p, if masked { MASK.to_owned() } else { v.clone() })
            })
            .collect(),
        body: None,
        ..*leg
    };
    let body = request
        .body
        .as_ref()
        .map(|b| (media_type, Bytes::from(b.to_string())));
    let wire = unsigned_wire(&shown, body)?;
    Ok(preview::preview(wire, media_type, secrets))
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
    let planning = slots::slot(cx).await;
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

/// The planned request of one row of named values.
fn row_request(
    resource: &Arc<Resource>,
    method: &Method,
    row: &[(String, Scalar)],
    runtime: bool,
) -> PlannedRequest {
    request(resource, method, |param| {
        let value = row.iter().find_map(|(name, value)| {
            param_named(method, name)
                .is_some_and(|p| std::ptr::eq(p, param))
                .then_some(value)
        });
        match value.and_then(Scalar::as_param) {
            Some(_) if runtime => ParamValues::Runtime,
            Some(text) => ParamValues::Given(vec![text]),
            None => ParamValues::Omitted,
        }
    })
}

fn named_row(columns: &[String], row: Vec<Scalar>) -> Result<Vec<(String, Scalar)>> {
    if row.len() != columns.len() {
        return Err(Error::invalid_sql(format!(
            "INSERT names {} columns but a row has {} values",
            columns.len(),
            row.len()
        )));
    }
    Ok(columns.iter().cloned().zip(row).collect())
}

fn cell_scalar(cell: Cell) -> Scalar {
    match cell {
        Cell::Null => Scalar::Null,
        Cell::Boolean(b) => Scalar::Bool(b),
        Cell::Integer(i) => Scalar::Number(i.to_string()),
        Cell::Real(r) => Scalar::Number(r.to_string()),
        Cell::Text(t) => Scalar::Text(t),
        Cell::Blob(b) => Scalar::Text(String::from_utf8_lossy(&b).into_owned()),
    }
}

fn param_named<'m>(method: &'m Method, name: &str) -> Option<&'m Param> {
    if name.starts_with(BODY_PREFIX) {
        return None;
    }
    method
        .params
        .iter()
        .find(|p| method.answers_to(&p.name, name))
}

/// The first method bound to `verb` whose required parameters every row supplies.
fn choose_method(
    resource: &Resource,
    verb: SqlVerb,
    rows: &[Vec<(String, Scalar)>],
) -> Result<usize> {
    let candidates = resource.methods_for(verb);
    if candidates.is_empty()
        && let Some(broken) = resource.broken_for(verb)
    {
        return Err(broken);
    }
    if candidates.is_empty() {
        let names: Vec<&str> = resource.methods.iter().map(|m| m.name.as_str()).collect();
        return Err(Error::unsupported(format!(
            "resource '{}' has no method bound to {}; its methods (callable with EXEC): {}",
            resource.full_name(),
            verb.as_str().to_ascii_uppercase(),
            names.join(", ")
        )));
    }
    let supplies = |method: &Method| {
        rows.iter().all(|row| {
            method
                .required_params()
                .all(|param| supplied(method, param, row))
        })
    };
    let chosen = candidates.iter().find(|m| supplies(m));
    if chosen.is_none()
        && let Some(broken) = resource.broken_for(verb)
    {
        return Err(broken);
    }
    let chosen = chosen.ok_or_else(|| {
        let listing: Vec<String> = candidates
            .iter()
            .map(|m| {
                let required: Vec<&str> = m.required_params().map(|p| p.name.as_str()).collect();
                format!("{}({})", m.name, required.join(", "))
            })
            .collect();
        Error::new(
            ErrorKind::MissingParameters,
            format!(
                "cannot {} '{}': no {} method has all its required parameters supplied; methods and their required parameters: {}",
                verb.as_str().to_ascii_uppercase(),
                resource.full_name(),
                verb.as_str(),
                listing.join("; ")
            ),
        )
    })?;
    resource
        .methods
        .iter()
        .position(|m| std::ptr::eq(m, *chosen))
        .ok_or_else(|| Error::internal("chosen method not found in its resource"))
}

/// Whether `values` give `param` of `method` a non-NULL value.
fn supplied(method: &Method, param: &Param, values: &[(String, Scalar)]) -> bool {
    values.iter().any(|(name, value)| {
        *value != Scalar::Null && param_named(method, name).is_some_and(|p| std::ptr::eq(p, param))
    })
}

fn check_required(resource: &Resource, method: &Method, args: &[(String, Scalar)]) -> Result<()> {
    let missing: Vec<&str> = method
        .required_params()
        .filter(|param| !supplied(method, param, args))
        .map(|p| p.name.as_str())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::MissingParameters,
        format!(
            "EXEC {}.{} needs @{}",
            resource.full_name(),
            method.name,
            missing.join(", @")
        ),
    ))
}

fn prepare(
    inner: &Inner,
    resource: Arc<Resource>,
    method_index: usize,
    rows: Vec<Vec<(String, Scalar)>>,
    where_names: &[String],
    json_body: Option<Value>,
) -> Result<Prepared> {
    let method = &resource.methods[method_index];
    let provider = inner.registry.open(&resource.provider)?;
    let schema = method.request_schema(&inner.store)?;
    let media_type = schema
        .as_ref()
        .map(|(media, _)| media.clone())
        .unwrap_or_else(|| "application/json".to_owned());
    if schema.is_some() && !media_type.contains("json") {
        return Err(Error::unsupported(format!(
            "{}.{} takes a '{media_type}' request body; only JSON bodies are sent",
            resource.full_name(),
            method.name
        )));
    }
    let body_schema = schema.and_then(|(_, s)| s);
    // `naive_<Key>`: the fields are those of the body's `<Key>` object, and go there.
    let parent = match (method.request.translate.parent(), &body_schema) {
        (Some(key), Some(schema)) => schema
            .property(&inner.store, key)?
            .map(|inner_schema| (key.to_owned(), inner_schema)),
        _ => None,
    };
    let template = BodyTemplate::for_method(&inner.store, method)?;
    let media_type = template
        .as_ref()
        .map_or(media_type, |t| t.media_type.clone());
    let mut requests = Vec::with_capacity(rows.len());
    for row in rows {
        let mut params = Vec::new();
        let mut fields: Vec<(Vec<String>, Value)> = Vec::new();
        for (name, value) in row {
            if let Some(param) = param_named(method, &name) {
                if let Some(text) = value.as_param() {
                    params.push((param.clone(), text));
                }
                continue;
            }
            let in_where = where_names.iter().any(|w| w == &name);
            let not_in_where = || {
                Error::invalid_sql(format!(
                    "'{name}' in WHERE is not a parameter of {}.{} (parameters: {})",
                    resource.full_name(),
                    method.name,
                    param_list(method)
                ))
            };
            if method.request_body.is_none() {
                if in_where {
                    return Err(not_in_where());
                }
                return Err(Error::invalid_sql(format!(
                    "'{name}' is not a parameter of {}.{} (parameters: {}), and the method takes no request body",
                    resource.full_name(),
                    method.name,
                    param_list(method)
                )));
            }
            let field = name.strip_prefix(BODY_PREFIX).unwrap_or(&name).to_owned();
            // The parent object's field when it has one by that name, else the top level's.
            let (schema, prefix) = match &parent {
                Some((key, inner_schema)) => {
                    let wire = wire_field(inner, Some(inner_schema), method, field.clone())?;
                    if inner_schema.property(&inner.store, &wire)?.is_some() {
                        (Some(inner_schema), Some(key.clone()))
                    } else {
                        (body_schema.as_ref(), None)
                    }
                }
                None => (body_schema.as_ref(), None),
            };
            let field = wire_field(inner, schema, method, field)?;
            // A WHERE name is a body field only when the body schema declares it (Cloud
            // Control's `DELETE … WHERE Identifier = …`).
            let declared = match schema {
                Some(schema) => schema.property(&inner.store, &field)?.is_some(),
                None => false,
            };
            if in_where && !declared {
                return Err(not_in_where());
            }
            let value = body_value(inner, schema, &field, value, method)?;
            let path = prefix.into_iter().chain(std::iter::once(field)).collect();
            fields.push((path, value));
        }
        let body = match &json_body {
            // `@@json`: the body as given, with the named fields set over an object.
            Some(Value::Object(map)) => {
                let mut body = Value::Object(map.clone());
                for (path, value) in fields {
                    set_path(&mut body, &path, value);
                }
                Some(body)
            }
            Some(other) => Some(other.clone()),
            None => match &template {
                Some(template) => template.render(fields),
                None => None,
            },
        };
        requests.push(Request { params, body });
    }
    let base_url = inner
        .config
        .providers
        .get(&resource.provider)
        .and_then(|p| p.base_url.clone());
    let shape = method.row_shape(&inner.store)?;
    Ok(Prepared {
        locator: shape.locator.clone(),
        columns: shape.columns.iter().map(|c| c.name.clone()).collect(),
        auth: inner.effective_auth(&provider),
        base_url,
        media_type,
        requests,
        method: method_index,
        resource,
    })
}

/// The body property a SQL name means: itself, or with a native casing the property whose
/// snake_case form it is (`display_name` → `DisplayName`).
fn wire_field(
    inner: &Inner,
    schema: Option<&SchemaAt>,
    method: &Method,
    field: String,
) -> Result<String> {
    let (Some(_), Some(schema)) = (&method.native_casing, schema) else {
        return Ok(field);
    };
    Ok(schema
        .properties(&inner.store)?
        .into_iter()
        .map(|(name, _)| name)
        .find(|name| name != &field && method.answers_to(name, &field))
        .unwrap_or(field))
}

fn param_list(method: &Method) -> String {
    let names: Vec<String> = method
        .params
        .iter()
        .filter(|p| p.location != ParamLocation::Server || p.required)
        .map(|p| p.name.clone())
        .collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// A body field's JSON value, typed by its schema: numbers and booleans as such, objects
/// and arrays parsed from their JSON text, strings as given.
fn body_value(
    inner: &Inner,
    schema: Option<&SchemaAt>,
    field: &str,
    value: Scalar,
    method: &Method,
) -> Result<Value> {
    let property = match schema {
        Some(schema) => {
            let property = schema.property(&inner.store, field)?;
            let declares_fields = schema.schema.get("properties").is_some()
                || ["allOf", "anyOf", "oneOf"]
                    .iter()
                    .any(|k| schema.schema.get(k).is_some());
            let open = schema
                .schema
                .get("additionalProperties")
                .is_some_and(|a| a != false);
            if property.is_none() && declares_fields && !open {
                let fields: Vec<String> = schema
                    .properties(&inner.store)?
                    .into_iter()
                    .map(|(name, _)| name)
                    .collect();
                return Err(Error::invalid_sql(format!(
                    "'{field}' is neither a parameter nor a request body field of method '{}' (parameters: {}; body fields: {})",
                    method.name,
                    param_list(method),
                    fields.join(", ")
                )));
            }
            property
        }
        None => None,
    };
    let type_name = property.as_ref().and_then(|p| p.type_name()).unwrap_or("");
    let bad = |expected: &str, shown: &str| {
        Error::invalid_sql(format!(
            "body field '{field}' expects {expected}; '{shown}' is not one"
        ))
    };
    Ok(match (type_name, value) {
        (_, Scalar::Null) => Value::Null,
        ("string", Scalar::Text(t) | Scalar::Number(t)) => Value::String(t),
        ("string", Scalar::Bool(b)) => Value::String(b.to_string()),
        ("integer" | "number", Scalar::Number(t) | Scalar::Text(t)) => {
            serde_json::from_str::<serde_json::Number>(t.trim())
                .map(Value::Number)
                .map_err(|_| bad("a number", &t))?
        }
        ("boolean", Scalar::Bool(b)) => Value::Bool(b),
        ("boolean", Scalar::Number(t) | Scalar::Text(t)) => match t.as_str() {
            "1" | "true" | "TRUE" | "True" => Value::Bool(true),
            "0" | "false" | "FALSE" | "False" => Value::Bool(false),
            _ => return Err(bad("true or false", &t)),
        },
        ("object" | "array", Scalar::Text(t)) => {
            let parsed: Value = serde_json::from_str(&t)
                .map_err(|_| bad(&format!("JSON ({type_name}) as a quoted string"), &t))?;
            parsed
        }
        (_, Scalar::Text(t)) => {
            let trimmed = t.trim_start();
            if trimmed.starts_with('{') || trimmed.starts_with('[') {
                serde_json::from_str(&t).unwrap_or(Value::String(t))
            } else {
                Value::String(t)
            }
        }
        (_, Scalar::Number(t)) => serde_json::from_str::<serde_json::Number>(&t)
            .map(Value::Number)
            .unwrap_or(Value::String(t)),
        (_, Scalar::Bool(b)) => Value::Bool(b),
    })
}

async fn send_all(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    prepared: &Prepared,
    returning: Option<&Returning>,
    verb: &str,
    awaiting: bool,
) -> Result<QueryOutput> {
    let resource = &prepared.resource;
    let method = prepared.method();
    if awaiting {
        super::operation::check_awaitable(&inner.store, method)?;
    }
    let auth = resolve_auth(
        &inner.upstream,
        &resource.provider,
        &prepared.auth,
        &cx.credentials,
        cx.caller(),
    )
    .await?;
    let total = prepared.requests.len();
    let mut messages = Vec::with_capacity(total);
    let mut bodies = Vec::new();
    let mut targets = false;
    // The status of the last write the upstream acknowledged: an error after it may leave
    // the side effect done.
    let mut acknowledged: Option<u16> = None;
    let after_write = |err: Error, acknowledged: Option<u16>| match acknowledged {
        Some(status) => err.after_write(status),
        None => err,
    };
    for (index, request) in prepared.requests.iter().enumerate() {
        let leg = Leg {
            method,
            base_url: prepared.base_url.as_deref(),
            values: request.params.iter().map(|(p, v)| (p, v.clone())).collect(),
            body: None,
            auth: &auth,
            credentials: cx.credentials.as_ref(),
            tenant: &cx.tenant,
            deadline: cx.deadline,
            admission: None,
        };
        let body = request
            .body
            .as_ref()
            .map(|b| (prepared.media_type.as_str(), Bytes::from(b.to_string())));
        let (status, response) = match inner.upstream.call(&leg, body).await {
            Ok(done) => done,
            Err(err) if total > 1 => {
                return Err(after_write(
                    err.with_note(&format!(
                        "request {} of {total} failed; the {index} before it succeeded and are not undone",
                        index + 1
                    )),
                    acknowledged,
                ));
            }
            Err(err) => return Err(err),
        };
        acknowledged = Some(status);
        tracing::info!(
            tenant = %cx.tenant,
            resource = %resource.full_name(),
            method = %method.name,
            status,
            "write request succeeded"
        );
        let (response, awaited) = if awaiting {
            let done = super::operation::await_operation(
                &inner.upstream,
                &inner.config.upstream.await_operations,
                &leg,
                &response,
                returning.is_some(),
            )
            .await
            .map_err(|err| {
                let err = err.after_write(status);
                if total > 1 {
                    err.with_note(&format!(
                        "awaiting request {} of {total}; the {index} before it completed and are not undone",
                        index + 1
                    ))
                } else {
                    err
                }
            })?;
            messages.push(format!(
                "{verb} {}: {}.{} answered {status}; operation {} completed",
                resource.full_name(),
                resource.name,
                method.name,
                done.name.as_deref().unwrap_or("(unnamed)")
            ));
            targets |= done.is_target;
            (done.body, true)
        } else {
            (response, false)
        };
        if !awaited {
            messages.push(format!(
                "{verb} {}: {}.{} answered {status}; the operation was despatched successfully",
                resource.full_name(),
                resource.name,
                method.name
            ));
        }
        if returning.is_some() && !response.iter().all(u8::is_ascii_whitespace) {
            bodies.push(response);
        }
    }
    let mut output = match returning {
        // The awaited operations' targets: one row each, columns from the data.
        Some(returning) if targets => {
            let locator = Arc::new(RowLocator::Path(Vec::new()));
            returned_rows(
                locator,
                Vec::new(),
                bodies,
                returning,
                inner.config.max_result_rows,
                Database::open(inner.config.eval, cx.slots.clone(), &inner.sqlite_threads),
            )
            .await
            .map_err(|err| after_write(err, acknowledged))?
        }
        Some(returning) if !bodies.is_empty() => returned_rows(
            prepared.locator.clone(),
            prepared.columns.clone(),
            bodies,
            returning,
            inner.config.max_result_rows,
            Database::open(inner.config.eval, cx.slots.clone(), &inner.sqlite_threads),
        )
        .await
        .map_err(|err| after_write(err, acknowledged))?,
        _ => QueryOutput::default(),
    };
    output.messages = messages;
    output.upstream_status = acknowledged;
    output.timestamp =
        Some(humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string());
    Ok(output)
}

/// Rows of the responses, located and typed as the method's select rows would be, then
/// projected to the `RETURNING` columns, in `db`.
async fn returned_rows(
    locator: Arc<RowLocator>,
    mut columns: Vec<String>,
    bodies: Vec<Bytes>,
    returning: &Returning,
    max_rows: usize,
    db: Database,
) -> Result<QueryOutput> {
    for body in &bodies {
        // A body that is not JSON carries no rows; the messages still report success.
        let Ok(found) = db.discover(body.clone(), locator.clone()).await else {
            return Ok(QueryOutput::default());
        };
        for name in found {
            if !columns.iter().any(|c| c.eq_ignore_ascii_case(&name)) {
                columns.push(name);
            }
        }
    }
    if columns.is_empty() {
        return Ok(QueryOutput::default());
    }
    const TABLE: &str = "__qg_returning";
    db.create_table(TABLE, columns.clone(), &[])?;
    for body in bodies {
        let load = db.load(TABLE, body, locator.clone(), Vec::new(), Vec::new());
        settled(load.await?).await?;
    }
    let projection = match returning {
        Returning::All => "*".to_owned(),
        Returning::Columns(wanted) => {
            let mut quoted = Vec::new();
            for name in wanted {
                if !columns.iter().any(|c| c.eq_ignore_ascii_case(name)) {
                    return Err(Error::invalid_sql(format!(
                        "RETURNING '{name}': the response has no such field (fields: {})",
                        columns.join(", ")
                    )));
                }
                quoted.push(format!("\"{}\"", name.replace('"', "\"\"")));
            }
            quoted.join(", ")
        }
    };
    db.query(format!("SELECT {projection} FROM {TABLE}"), max_rows)
        .await
}
