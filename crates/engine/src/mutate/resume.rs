//! Resuming an awaited write from its operation's handle (see `operation_handle`): the
//! statement is planned again for its method, auth and rows, nothing is sent, and the
//! operation is polled from the handle.

use super::*;
use crate::operation_handle::OperationHandle;

/// Resumes an awaited INSERT … VALUES, UPDATE, REPLACE or DELETE.
pub(crate) async fn resume_mutation(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    mutation: &Mutation,
    handle: &OperationHandle,
) -> Result<QueryOutput> {
    let rows: Rows = match &mutation.insert {
        Some((columns, InsertRows::Values(values))) => values
            .iter()
            .map(|row| named_row(columns, row.clone()))
            .collect::<Result<_>>()?,
        Some((_, InsertRows::Query(_))) => {
            return Err(Error::unsupported(
                "an INSERT … SELECT cannot be resumed from its operation",
            ));
        }
        None => condition_rows(&mutation.conditions, &mutation.assignments),
    };
    let where_names: Vec<String> = mutation.conditions.iter().map(|(n, _)| n.clone()).collect();
    let prepared = plan_mutation(
        inner,
        cx,
        mutation.verb,
        mutation.target.clone(),
        rows,
        where_names,
    )
    .await?;
    resume_prepared(
        inner,
        cx,
        &prepared,
        mutation.returning.as_ref(),
        mutation.verb.as_str(),
        handle,
    )
    .await
}

/// Resumes an awaited EXEC.
pub(crate) async fn resume_exec(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    exec: Exec,
    handle: &OperationHandle,
) -> Result<QueryOutput> {
    let prepared = plan_exec(inner, cx, exec).await?;
    resume_prepared(inner, cx, &prepared, Some(&Returning::All), "EXEC", handle).await
}

/// Polls the operation at `handle` for the one request of `prepared`, as `send_all` does
/// after the write, and returns the rows `returning` asks for.
async fn resume_prepared(
    inner: &Arc<Inner>,
    cx: &ExecContext,
    prepared: &Prepared,
    returning: Option<&Returning>,
    verb: &str,
    handle: &OperationHandle,
) -> Result<QueryOutput> {
    let [request] = prepared.requests.as_slice() else {
        return Err(Error::unsupported(
            "a write of several requests cannot be resumed from one operation",
        ));
    };
    let method = prepared.method();
    crate::operation::check_awaitable(&inner.store, method)?;
    let auth = resolve_auth(
        &inner.upstream,
        &prepared.resource.provider,
        &prepared.auth,
        &cx.credentials,
        cx.caller(),
    )
    .await?;
    let leg = prepared.leg(request, &auth, cx);
    // The operation as the write's answer described it: not done, polled at its link.
    let first = Bytes::from(
        serde_json::json!({ "name": handle.name, "selfLink": handle.link }).to_string(),
    );
    let done = crate::operation::await_operation(
        &inner.upstream,
        &inner.config.upstream.await_operations,
        &leg,
        &first,
        returning.is_some(),
    )
    .await?;
    let bodies = if returning.is_some() && !done.body.iter().all(u8::is_ascii_whitespace) {
        vec![done.body]
    } else {
        Vec::new()
    };
    let mut output =
        send::returned_output(inner, cx, prepared, returning, bodies, done.is_target).await?;
    let resource = &prepared.resource;
    output.messages = vec![format!(
        "{verb} {}: operation {} completed (polled from its stored handle; the request was not sent again)",
        resource.full_name(),
        done.name.as_deref().unwrap_or("(unnamed)")
    )];
    output.timestamp =
        Some(humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string());
    Ok(output)
}
