//! The MCP face of tasks (`crate::tasks`): which calls become tasks, and `tasks/get` and
//! `tasks/cancel` answered from the task store for the tenant and principal that made the
//! task (anyone else is told there is no such task).

use rmcp::ErrorData;
use rmcp::model::{
    CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload, TaskStatus,
};
use serde_json::Value;

use crate::tasks::{TaskOwner, TaskRecord, TaskState, Tasks, rfc3339};
use crate::tenant::Principal;

/// Whether a call of `tool` may become a task, for a client that declared the extension:
/// the tools that run statements. Which of their calls do is decided once the statement is
/// prepared (the pipeline's task step: a lifecycle operation, or a statement with
/// `/*+ AWAIT */`); the others are answered as without tasks.
pub(super) fn may_become_task(tool: &str) -> bool {
    crate::tasks::TASK_TOOLS.contains(&tool)
}

/// The task a submitted call answers with.
pub(super) fn created(tasks: &Tasks, record: &TaskRecord) -> CreateTaskResult {
    CreateTaskResult::new(task(tasks, record))
}

/// `tasks/get`: the task with its result once it has one.
pub(super) async fn get(
    tasks: &Tasks,
    principal: Option<&Principal>,
    id: &str,
) -> Result<GetTaskResult, ErrorData> {
    let owner = owner(principal)?;
    let record = tasks
        .get(&owner, id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| not_found(id))?;
    Ok(GetTaskResult::new(detailed(tasks, &record)))
}

/// `tasks/cancel`: the task is cancelled (a finished task stays as it is).
pub(super) async fn cancel(
    tasks: &Tasks,
    principal: Option<&Principal>,
    id: &str,
) -> Result<(), ErrorData> {
    let owner = owner(principal)?;
    tasks
        .cancel(&owner, id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| not_found(id))?;
    Ok(())
}

fn owner(principal: Option<&Principal>) -> Result<TaskOwner, ErrorData> {
    principal.map(TaskOwner::of).ok_or_else(|| {
        ErrorData::invalid_request("the request carries no authenticated principal", None)
    })
}

fn not_found(id: &str) -> ErrorData {
    // The same answer for another principal's task as for none: ids are not confirmed.
    ErrorData::invalid_params(
        format!("no task '{}' of this principal", id.escape_debug()),
        None,
    )
}

fn store_error(err: crate::tasks::TaskStoreError) -> ErrorData {
    tracing::warn!(error = %err, "the task store failed");
    ErrorData::internal_error("the task store cannot be read; try again", None)
}

fn task(tasks: &Tasks, record: &TaskRecord) -> Task {
    let status = match record.state {
        TaskState::Working => TaskStatus::Working,
        TaskState::Completed => TaskStatus::Completed,
        TaskState::Failed => TaskStatus::Failed,
        TaskState::Cancelled => TaskStatus::Cancelled,
    };
    // Kept `tasks.retention` after it finished; its time to live counts from creation.
    let lived = if record.state.is_terminal() {
        record.updated_ms.saturating_sub(record.created_ms)
    } else {
        0
    };
    let task = Task::new(
        record.id.clone(),
        status,
        rfc3339(record.created_ms),
        rfc3339(record.updated_ms),
    )
    .with_ttl_ms(lived.saturating_add(tasks.retention_ms()))
    .with_poll_interval_ms(tasks.poll_interval_ms());
    match &record.status_message {
        Some(message) => task.with_status_message(message.clone()),
        None => task,
    }
}

fn detailed(tasks: &Tasks, record: &TaskRecord) -> DetailedTask {
    let object = |value: &Option<Value>| -> JsonObject {
        match value {
            Some(Value::Object(map)) => map.clone(),
            _ => JsonObject::new(),
        }
    };
    let payload = match record.state {
        TaskState::Working => TaskPayload::Working,
        TaskState::Completed => TaskPayload::Completed {
            result: object(&record.result),
        },
        TaskState::Failed => TaskPayload::Failed {
            error: object(&record.result),
        },
        TaskState::Cancelled => TaskPayload::Cancelled,
    };
    DetailedTask::new(task(tasks, record), payload)
}
