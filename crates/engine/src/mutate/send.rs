//! Sending a prepared write: each request once (writes are never retried), the messages,
//! the awaited operations and the rows `RETURNING` (or EXEC) asks for.

use super::*;

pub(super) async fn send_all(
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
        crate::operation::check_awaitable(&inner.store, method)?;
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
        let leg = prepared.leg(request, &auth, cx);
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
            crate::operation_handle::started(&response);
            let done = crate::operation::await_operation(
                &inner.upstream,
                &inner.config.upstream.await_operations,
                &leg,
                &response,
                returning.is_some(),
            )
            .await
            .map_err(|err| awaiting_failed(err.after_write(status), index, total))?;
            let operation = done.name.as_deref().unwrap_or("(unnamed)");
            messages.push(sent_message(
                verb,
                resource,
                &method.name,
                status,
                Some(operation),
            ));
            targets |= done.is_target;
            (done.body, true)
        } else {
            (response, false)
        };
        if !awaited {
            messages.push(sent_message(verb, resource, &method.name, status, None));
        }
        if returning.is_some() && !response.iter().all(u8::is_ascii_whitespace) {
            bodies.push(response);
        }
    }
    let mut output = returned_output(inner, cx, prepared, returning, bodies, targets)
        .await
        .map_err(|err| after_write(err, acknowledged))?;
    output.messages = messages;
    output.upstream_status = acknowledged;
    output.timestamp =
        Some(humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string());
    Ok(output)
}

/// An error awaiting the operation of request `index` of `total`: with several, it names
/// which, and that those before it completed and are not undone.
fn awaiting_failed(err: Error, index: usize, total: usize) -> Error {
    if total > 1 {
        err.with_note(&format!(
            "awaiting request {} of {total}; the {index} before it completed and are not undone",
            index + 1
        ))
    } else {
        err
    }
}

/// The rows `RETURNING` asks for, from the response `bodies`: with awaited operations'
/// `targets`, one row each with columns from the data; else located and typed as the
/// method's select rows. Empty without `RETURNING` or bodies.
pub(super) async fn returned_output(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    prepared: &Prepared,
    returning: Option<&Returning>,
    bodies: Vec<Bytes>,
    targets: bool,
) -> Result<QueryOutput> {
    let db = || Database::open(inner.config.eval, cx.slots.clone(), &inner.sqlite_threads);
    match returning {
        // The awaited operations' targets: one row each, columns from the data.
        Some(returning) if targets => {
            let locator = Arc::new(RowLocator::Path(Vec::new()));
            let max_rows = inner.config.max_result_rows;
            let columns = (Vec::new(), Vec::new());
            returned_rows(locator, columns, bodies, returning, max_rows, db()).await
        }
        Some(returning) if !bodies.is_empty() => {
            returned_rows(
                prepared.locator.clone(),
                (prepared.columns.clone(), prepared.wire_names.clone()),
                bodies,
                returning,
                inner.config.max_result_rows,
                db(),
            )
            .await
        }
        _ => Ok(QueryOutput::default()),
    }
}

/// The message of one sent request: `operation` names the awaited operation that completed.
fn sent_message(
    verb: &str,
    resource: &Resource,
    method: &str,
    status: u16,
    operation: Option<&str>,
) -> String {
    let (full, name) = (resource.full_name(), &resource.name);
    match operation {
        Some(operation) => {
            format!(
                "{verb} {full}: {name}.{method} answered {status}; operation {operation} completed"
            )
        }
        None => format!(
            "{verb} {full}: {name}.{method} answered {status}; the operation was despatched successfully"
        ),
    }
}

/// Rows of the responses, located and typed as the method's select rows would be, then
/// projected to the `RETURNING` columns, in `db`. `columns`: the response schema's
/// columns, and those named otherwise than their wire names (column, wire name).
async fn returned_rows(
    locator: Arc<RowLocator>,
    (mut columns, wire_names): (Vec<String>, Vec<(String, String)>),
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
            let is_wire = wire_names
                .iter()
                .any(|(_, wire)| wire.eq_ignore_ascii_case(&name));
            if !is_wire && !columns.iter().any(|c| c.eq_ignore_ascii_case(&name)) {
                columns.push(name);
            }
        }
    }
    if columns.is_empty() {
        return Ok(QueryOutput::default());
    }
    let mut unique: Vec<String> = Vec::with_capacity(columns.len());
    for column in columns {
        if !unique.iter().any(|c| c.eq_ignore_ascii_case(&column)) {
            unique.push(column);
        }
    }
    let columns = unique;
    const TABLE: &str = "__qg_returning";
    db.create_table_with_wire_names(TABLE, columns.clone(), &[], wire_names.clone())?;
    for body in bodies {
        let load = db.load(TABLE, body, locator.clone(), Vec::new(), Vec::new());
        settled(load.await?).await?;
    }
    let projection = match returning {
        // The stored columns: a wire name's generated column is not one of them.
        Returning::All => columns
            .iter()
            .map(|c| format!("\"{}\"", c.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(", "),
        Returning::Columns(wanted) => {
            let mut quoted = Vec::new();
            for name in wanted {
                let known = columns.iter().any(|c| c.eq_ignore_ascii_case(name))
                    || wire_names
                        .iter()
                        .any(|(_, wire)| wire.eq_ignore_ascii_case(name));
                if !known {
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
