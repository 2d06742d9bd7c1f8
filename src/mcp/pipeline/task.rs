//! The task step: a call submitted as an MCP task (see `crate::tasks`) becomes one here,
//! after the gate, the quotas and admission let it through and before its intent record:
//! its task is stored and the client gets the task while the call goes on. Only a call
//! that may wait on an upstream operation becomes one (a lifecycle operation, or a
//! statement with `/*+ AWAIT */`); any other passes on as a call that is no task.

use std::sync::Arc;

use tower::{Service, ServiceExt as _};

use super::step::{Step, StepFuture};
use super::{Call, CallError, ToolReply};
use crate::engine::PreparedStatement;
use crate::tasks::TaskStart;

/// Starts the task of a submitted call.
pub(super) struct TaskStep;

impl Step for TaskStep {
    fn run<S>(self: Arc<Self>, inner: S, mut call: Call) -> StepFuture
    where
        S: Service<Call, Response = ToolReply, Error = CallError> + Send + 'static,
        S::Future: Send,
    {
        let Some(start) = TaskStart::current() else {
            return Box::pin(inner.oneshot(call));
        };
        let statement = match &call.statement {
            Some(Ok(statement)) => Some(statement),
            _ => None,
        };
        if !becomes_task(call.tool(), statement) {
            // Submitted as a task but answered as a call: its records name no task.
            call.origin.task_id = None;
            return Box::pin(inner.oneshot(call));
        }
        Box::pin(async move {
            match start.begin(&call).await {
                Ok(()) => inner.oneshot(call).await,
                Err(refused) => Ok(ToolReply::allowed(refused)),
            }
        })
    }
}

/// Whether a call of `tool` running `statement` may wait on an upstream operation: every
/// lifecycle operation, and any statement with `/*+ AWAIT */`.
fn becomes_task(tool: &str, statement: Option<&PreparedStatement>) -> bool {
    tool == "run_lifecycle_operation" || statement.is_some_and(PreparedStatement::awaits_operation)
}

#[cfg(test)]
mod tests {
    use super::becomes_task;
    use crate::engine::PreparedStatement;

    fn becomes(tool: &str, sql: &str) -> bool {
        let statement = PreparedStatement::parse(sql).unwrap();
        becomes_task(tool, Some(&statement))
    }

    #[test]
    fn calls_that_may_wait_on_an_operation_become_tasks() {
        assert!(becomes("run_lifecycle_operation", "EXEC p.s.r.m @a = 1"));
        assert!(becomes(
            "run_mutation_query",
            "INSERT /*+ AWAIT */ INTO p.s.r (a) VALUES (1)"
        ));
        assert!(!becomes(
            "run_mutation_query",
            "INSERT INTO p.s.r (a) VALUES (1)"
        ));
        assert!(!becomes("run_select_query", "SELECT 1"));
        assert!(!becomes_task("run_mutation_query", None));
        assert!(becomes_task("run_lifecycle_operation", None));
    }
}
