//! Running a task: the call submitted by the handler runs on its own (not on the client's
//! request); the pipeline's task step stores the task once the gate allowed the call, and
//! the handler answers with the task at that moment. A task another replica left behind is
//! resumed from its stored operation handle, through the pipeline's resume path (no gate,
//! no intent, no second write).

use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::Tasks;
use super::record::{Finish, TaskCall, TaskOwner, TaskRecord, TaskState};
use super::store::TaskStoreError;
use crate::code::Code;
use crate::engine::{
    Engine, ExecContext, OperationHandle, OperationSink, PreparedStatement, QueryOutput,
};
use crate::mcp::pipeline::{
    ApprovalChannel, CallError, CallOrigin, Pipeline, PreparedCall, ReplyBody, ToolCall,
    ToolOutcome, ToolReply,
};
use crate::mcp::tools::ToolError;
use crate::tenant::Principal;

tokio::task_local! {
    /// The task a submitted call becomes once the gate allowed it.
    static STARTING: Arc<TaskStart>;
    /// The operation a resumed call polls (`None`: none was stored).
    static RESUMING: Option<OperationHandle>;
}

/// What a submitted call answers first.
#[derive(Debug)]
pub enum Submitted {
    /// It became a task (the gate allowed it and its record is stored).
    Task(TaskRecord),
    /// It ended before it became one: refused, held for approval, or failed before it
    /// would have run; the reply is the call's as without tasks.
    Reply(Result<ToolReply, CallError>),
}

/// A submitted call that may become a task.
#[derive(Debug)]
pub struct TaskStart {
    tasks: Arc<Tasks>,
    id: String,
    token: CancellationToken,
    answer: Mutex<Option<oneshot::Sender<Submitted>>>,
    /// The call became a task (its record is stored).
    began: std::sync::atomic::AtomicBool,
}

/// The message of a resumed task whose operation handle was never stored.
const NO_HANDLE: &str = "the replica running this task stopped before the upstream operation's handle was stored: the write may have been sent, and it is not sent again; check the resource upstream before trying again";

impl TaskStart {
    /// The task of the call being run, if it was submitted as one.
    pub(crate) fn current() -> Option<Arc<TaskStart>> {
        STARTING.try_with(Arc::clone).ok()
    }

    /// Makes `call` a task: its record is stored (under `tasks.max_tasks`) and the handler
    /// answers with it. `Err`: the tool error that ends the call instead, before anything
    /// is sent.
    pub(crate) async fn begin(&self, call: &PreparedCall) -> Result<(), ToolOutcome> {
        let tasks = &self.tasks;
        let now = tasks.now_ms();
        let record = TaskRecord {
            id: self.id.clone(),
            owner: TaskOwner::of(&call.principal),
            call: TaskCall {
                tool: call.tool().to_owned(),
                arguments: call.arguments.clone(),
                groups: call.principal.groups.clone(),
                fingerprint: call.principal.fingerprint.clone(),
                call_id: Some(call.call_id.clone()),
            },
            state: TaskState::Working,
            handle: None,
            result: None,
            status_message: None,
            cancel_requested: false,
            replica: tasks.replica.clone(),
            lease_until_ms: tasks.lease_until_ms(),
            created_ms: now,
            updated_ms: now,
        };
        match tasks.store.create(&record, tasks.config.max_tasks).await {
            Ok(()) => {}
            Err(TaskStoreError::TooMany(held)) => {
                return Err(ToolOutcome::error(
                    Code::QuotaExceeded,
                    format!(
                        "the tenant has {held} tasks (tasks.max_tasks is {}); nothing was sent: try again once earlier tasks have finished and expired (tasks.retention)",
                        tasks.config.max_tasks
                    ),
                ));
            }
            Err(err) => {
                tracing::warn!(error = %err, "the task store failed; the call was not run");
                return Err(ToolOutcome::error(
                    Code::Internal,
                    "the task could not be stored; nothing was sent",
                ));
            }
        }
        tasks.run_locally(&self.id, self.token.clone());
        tasks.count(TaskState::Working);
        self.began.store(true, std::sync::atomic::Ordering::Release);
        let answer = self
            .answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(answer) = answer {
            let _ = answer.send(Submitted::Task(record));
        }
        Ok(())
    }

    /// The call ended: before it became a task, its reply goes to the handler; after, the
    /// task ends with it.
    async fn finished(&self, result: Result<ToolReply, CallError>) {
        let answer = self
            .answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match answer {
            Some(answer) => {
                let _ = answer.send(Submitted::Reply(result));
            }
            None => self.tasks.end(&self.id, finish_of(result)).await,
        }
    }
}

impl Tasks {
    /// Runs `call` (whose client declared the tasks extension) on its own: the answer is
    /// the task once the gate allowed it, or the call's own reply when it ended before.
    /// When `client_gone` fires before the answer (the client disconnected while the call
    /// waited for the gate, e.g. an out-of-band approval), the call is stopped.
    pub async fn submit(
        self: &Arc<Self>,
        pipeline: Pipeline,
        mut call: ToolCall,
        client_gone: CancellationToken,
    ) -> Submitted {
        let id = crate::audit::record::new_call_id();
        call.origin.task_id = Some(id.clone());
        let (answer, answered) = oneshot::channel();
        let token = CancellationToken::new();
        let run_token = token.clone();
        let start = Arc::new(TaskStart {
            tasks: self.clone(),
            id: id.clone(),
            token: token.clone(),
            answer: Mutex::new(Some(answer)),
            began: std::sync::atomic::AtomicBool::new(false),
        });
        let sink = self.handle_sink(id);
        tokio::spawn(async move {
            let run = pipeline.call_until(call, run_token);
            let result = STARTING
                .scope(
                    start.clone(),
                    crate::engine::observing_operations(sink, run),
                )
                .await;
            start.finished(result).await;
        });
        let mut answered = answered;
        let answer = tokio::select! {
            answer = &mut answered => answer,
            () = client_gone.cancelled() => {
                token.cancel();
                answered.await
            }
        };
        answer.unwrap_or_else(|_| {
            Submitted::Reply(Ok(ToolReply::allowed(ToolOutcome::error(
                Code::Internal,
                "the call ended without an answer",
            ))))
        })
    }

    /// Keeps the handle of the operation task `id` waits on, as soon as the engine has it.
    fn handle_sink(self: &Arc<Self>, id: String) -> OperationSink {
        let tasks = self.clone();
        Arc::new(move |handle: OperationHandle| {
            let (tasks, id) = (tasks.clone(), id.clone());
            tokio::spawn(async move {
                if let Err(err) = tasks.store.set_handle(&id, &handle, tasks.now_ms()).await {
                    tracing::warn!(task = %id, error = %err, "the task's operation handle was not stored");
                }
            });
        })
    }

    /// Resumes `record`, whose replica stopped: polls its operation from the stored handle
    /// through the pipeline's resume path, and ends the task with the outcome.
    pub(super) async fn resume(self: Arc<Self>, pipeline: Pipeline, record: TaskRecord) {
        let token = CancellationToken::new();
        self.run_locally(&record.id, token.clone());
        self.count(TaskState::Working);
        tracing::info!(task = %record.id, handle = record.handle.is_some(), "resuming a task another replica left");
        let call = ToolCall {
            name: record.call.tool.clone(),
            arguments: record.call.arguments.clone(),
            principal: Some(principal_of(&record)),
            approval: ApprovalChannel::Unavailable,
            origin: CallOrigin {
                request_id: record.call.call_id.clone(),
                task_id: Some(record.id.clone()),
                ..CallOrigin::default()
            },
            progress: None,
        };
        let result = RESUMING
            .scope(record.handle.clone(), pipeline.resume(call, token))
            .await;
        self.end(&record.id, finish_of(result)).await;
    }

    /// Ends task `id` (if this replica still holds it and it is working).
    async fn end(&self, id: &str, finish: Finish) {
        match self
            .store
            .finish(id, &self.replica, &finish, self.now_ms())
            .await
        {
            Ok(true) => self.count(finish.state),
            Ok(false) => {}
            // Its lease runs out unrenewed: another replica resumes it.
            Err(err) => tracing::warn!(task = %id, error = %err, "the task's end was not stored"),
        }
        self.done_locally(id);
    }
}

/// Whether the call being run was submitted as a task and did not become one (refused,
/// held for approval, failed before): its audit record names no task.
pub(crate) fn submitted_but_no_task() -> bool {
    STARTING
        .try_with(|start| !start.began.load(std::sync::atomic::Ordering::Acquire))
        .unwrap_or(false)
}

/// Whether the call being run is a task (submitted or resumed): `server.call_timeout`
/// does not bound it (the engine's `upstream.await_operations.max_wait` does).
pub(crate) fn in_task() -> bool {
    STARTING.try_with(|_| ()).is_ok() || RESUMING.try_with(|_| ()).is_ok()
}

/// Runs a write's statement, or, in a resumed task, polls its operation from the stored
/// handle without sending anything.
pub(crate) async fn run_or_resume(
    engine: &Engine,
    cx: &ExecContext,
    statement: PreparedStatement,
) -> Result<QueryOutput, ToolError> {
    match RESUMING.try_with(Clone::clone) {
        Err(_) => Ok(engine.run(cx, statement).await?),
        Ok(Some(handle)) => Ok(engine.resume_operation(cx, statement, &handle).await?),
        Ok(None) => Err(ToolError::Failed {
            code: Code::CallOutcomeUnknown,
            message: NO_HANDLE.to_owned(),
            upstream_status: None,
            acknowledged: true,
            retry_after: None,
        }),
    }
}

/// The principal of a resumed task: who made it, without any credential of theirs.
fn principal_of(record: &TaskRecord) -> Principal {
    let method = match record.owner.method.as_str() {
        "mtls" => crate::auth::Method::Mtls,
        "jwt" => crate::auth::Method::Jwt,
        "local" => crate::auth::Method::Local,
        _ => crate::auth::Method::Anonymous,
    };
    Principal {
        subject: record.owner.subject.clone(),
        tenant: record.owner.tenant.clone(),
        method,
        issuer: (!record.owner.issuer.is_empty()).then(|| record.owner.issuer.clone()),
        fingerprint: record.call.fingerprint.clone(),
        tools: None,
        query_scopes: None,
        claims: None,
        groups: record.call.groups.clone(),
        subject_token: None,
    }
}

/// How a task ends with the call's `result`.
fn finish_of(result: Result<ToolReply, CallError>) -> Finish {
    match result {
        Ok(ToolReply {
            body: ReplyBody::Complete(outcome),
            ..
        }) => Finish {
            state: TaskState::Completed,
            status_message: outcome.code().map(|code| format!("finished with {code}")),
            result: Some(call_tool_result(outcome)),
        },
        Ok(_) => failed(
            -32603,
            "the call asked for input after it had become a task",
        ),
        Err(err @ (CallError::UnknownTool(_) | CallError::InvalidArguments { .. })) => {
            failed(-32602, &err.to_string())
        }
        Err(err) => failed(-32600, &err.to_string()),
    }
}

fn failed(code: i32, message: &str) -> Finish {
    Finish {
        state: TaskState::Failed,
        result: Some(json!({ "code": code, "message": message })),
        status_message: Some(message.to_owned()),
    }
}

/// The `CallToolResult` of a finished call, as `tools/call` would have answered it.
pub fn call_tool_result(outcome: ToolOutcome) -> Value {
    let mut result = if outcome.is_error() {
        CallToolResult::error(vec![ContentBlock::text(outcome.text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(outcome.text)])
    };
    result.structured_content = outcome.structured;
    serde_json::to_value(result).unwrap_or_else(|_| json!({}))
}
