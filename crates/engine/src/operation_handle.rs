//! The handle of a long-running operation an awaited write started (its `selfLink`), told
//! to whoever runs the call, and polling resumed from such a handle without sending the
//! write again: a caller that keeps the handle somewhere durable can finish the wait after
//! the process that sent the write is gone.
//!
//! Whoever runs a statement wraps it in [`observing_operations`]; once the upstream has
//! acknowledged an awaited write whose operation is not done yet, the sink gets the
//! operation's handle, before the first poll. [`crate::Engine::resume_operation`] plans the
//! same statement again (nothing is sent), then polls from the handle until the operation
//! is done, exactly as `/*+ AWAIT */` does.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{Error, Result};
use super::sql::Statement;
use super::types::{ExecContext, QueryOutput};
use super::{Engine, PreparedStatement};

/// Where an awaited operation is polled: the operation's `selfLink` and its `name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationHandle {
    /// The URL the operation is polled at (its `selfLink`).
    pub link: String,
    /// The operation's name, for messages.
    pub name: Option<String>,
}

/// Told the handle of each awaited operation a call starts.
pub type OperationSink = Arc<dyn Fn(OperationHandle) + Send + Sync>;

tokio::task_local! {
    static SINK: OperationSink;
}

/// Runs `call`, telling `sink` the handle of each awaited operation it starts, once the
/// upstream acknowledged the write and before the operation is polled.
pub async fn observing_operations<F: std::future::Future>(
    sink: OperationSink,
    call: F,
) -> F::Output {
    SINK.scope(sink, call).await
}

/// Notes the operation an acknowledged awaited write answered with (`first`), for the call
/// being run: told to the sink when the operation is not done yet and names a `selfLink`.
pub(crate) fn started(first: &Bytes) {
    let Ok(operation) = serde_json::from_slice::<Value>(first) else {
        return;
    };
    if super::operation::is_done(&operation) {
        return;
    }
    let Some(link) = operation.get("selfLink").and_then(Value::as_str) else {
        return;
    };
    let handle = OperationHandle {
        link: link.to_owned(),
        name: operation
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned),
    };
    let _ = SINK.try_with(|sink| sink(handle));
}

impl PreparedStatement {
    /// Whether running the statement waits for a long-running operation (`/*+ AWAIT */` on
    /// a write, an EXEC, or an EXEC a query reads).
    pub fn awaits_operation(&self) -> bool {
        match &self.statement {
            Statement::Mutation(mutation) => mutation.await_operation,
            Statement::Exec(exec) => exec.await_operation,
            Statement::QueryOverExec { execs, .. } => execs.iter().any(|e| e.await_operation),
            _ => false,
        }
    }
}

impl Engine {
    /// Finishes an awaited write whose request was sent already: plans `statement` again
    /// (nothing is sent), then polls the operation at `handle` until it is done, and returns
    /// what the write would have (messages, and the rows `RETURNING` asks for). Only a
    /// write of one request, INSERT … VALUES, UPDATE, REPLACE, DELETE or EXEC, can be
    /// resumed; anything else is refused before any request.
    pub async fn resume_operation(
        &self,
        cx: &ExecContext,
        statement: PreparedStatement,
        handle: &OperationHandle,
    ) -> Result<QueryOutput> {
        match statement.statement {
            Statement::Mutation(mutation) if mutation.await_operation => {
                super::mutate::resume_mutation(&self.inner, cx, &mutation, handle).await
            }
            Statement::Exec(exec) if exec.await_operation => {
                super::mutate::resume_exec(&self.inner, cx, exec, handle).await
            }
            _ => Err(Error::unsupported(
                "only an awaited write or EXEC of one request can be resumed from its operation",
            )),
        }
    }
}
