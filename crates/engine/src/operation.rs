//! `/*+ AWAIT */`: polling the long-running operation a write or EXEC starts (Google
//! style: an `Operation` object with `selfLink`, done once it has an `endTime`), as StackQL
//! does, and fetching its `targetLink` for `RETURNING`.

use bytes::Bytes;
use serde_json::Value;

use super::config::AwaitLimits;
use super::document::{DocumentStore, Method};
use super::error::{Error, ErrorKind, Result};
use super::upstream::{Leg, Upstream};

/// How an awaited operation ended.
pub(crate) struct Awaited {
    /// The finished operation, or with `want_target` the resource its `targetLink` names.
    pub(crate) body: Bytes,
    /// `body` is the target resource, not the operation.
    pub(crate) is_target: bool,
    /// The operation's `name`, for messages.
    pub(crate) name: Option<String>,
}

/// Whether `method` may be awaited: its response schema is an `…Operation` (StackQL's rule).
pub(crate) fn check_awaitable(store: &DocumentStore, method: &Method) -> Result<()> {
    if method
        .response_schema_name(store)?
        .is_some_and(|n| n.ends_with("Operation"))
    {
        return Ok(());
    }
    Err(Error::invalid_sql(format!(
        "method {} is not awaitable: its response is not a long-running Operation; drop /*+ AWAIT */",
        method.name
    )))
}

/// Polls the operation `first` describes until it is done, every
/// `limits.poll_interval`, giving up after `limits.max_wait`.
pub(crate) async fn await_operation(
    upstream: &Upstream,
    limits: &AwaitLimits,
    leg: &Leg<'_>,
    first: &Bytes,
    want_target: bool,
) -> Result<Awaited> {
    let started = tokio::time::Instant::now();
    let mut operation = parse(first)?;
    loop {
        let name = operation
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if is_done(&operation) {
            if let Some(error) = operation.get("error").filter(|e| !e.is_null()) {
                let mut detail = error.to_string();
                detail.truncate(1024);
                return Err(Error::new(
                    ErrorKind::Upstream,
                    format!(
                        "operation {} finished with errors: {detail}",
                        name.as_deref().unwrap_or("(unnamed)")
                    ),
                ));
            }
            let target = operation.get("targetLink").and_then(Value::as_str);
            if want_target && let Some(target) = target {
                let body = upstream.get_link(leg, target).await?;
                return Ok(Awaited {
                    body,
                    is_target: true,
                    name,
                });
            }
            return Ok(Awaited {
                body: Bytes::from(operation.to_string()),
                is_target: false,
                name,
            });
        }
        let Some(link) = operation
            .get("selfLink")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return Err(Error::new(
                ErrorKind::Upstream,
                "cannot AWAIT: the operation has no 'selfLink' to poll",
            ));
        };
        if started.elapsed() + limits.poll_interval > limits.max_wait {
            return Err(Error::new(
                ErrorKind::LimitExceeded,
                format!(
                    "operation {} was not done after {} s of AWAIT; it goes on upstream",
                    name.as_deref().unwrap_or("(unnamed)"),
                    limits.max_wait.as_secs()
                ),
            ));
        }
        tokio::time::sleep(limits.poll_interval).await;
        operation = parse(&upstream.get_link(leg, &link).await?)?;
    }
}

/// Done as StackQL judges it: a non-empty `endTime` (or Google's `status: DONE`).
pub(crate) fn is_done(operation: &Value) -> bool {
    operation
        .get("endTime")
        .and_then(Value::as_str)
        .is_some_and(|t| !t.is_empty())
        || operation.get("status").and_then(Value::as_str) == Some("DONE")
}

fn parse(body: &Bytes) -> Result<Value> {
    serde_json::from_slice(body).map_err(|_| {
        Error::new(
            ErrorKind::Upstream,
            "cannot AWAIT: the operation answer is not JSON",
        )
    })
}
