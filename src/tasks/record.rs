//! What a task is: its state, its owner (tenant and principal), the call it runs and the
//! handle of the upstream operation it waits on.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::engine::OperationHandle;
use crate::tenant::Principal;

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Running (or waiting for a replica to resume it).
    Working,
    /// Finished with a result (a tool error included).
    Completed,
    /// Finished with a JSON-RPC error.
    Failed,
    /// Cancelled by its client.
    Cancelled,
}

impl TaskState {
    /// Every state, for metrics.
    pub const ALL: [TaskState; 4] = [
        TaskState::Working,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Cancelled,
    ];

    /// `working`, `completed`, `failed` or `cancelled` (the spec's and the column's names).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Working => "working",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
        }
    }

    /// The state named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        TaskState::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Whether the task has finished.
    pub fn is_terminal(self) -> bool {
        self != TaskState::Working
    }
}

/// Who made a task: only the same tenant and principal see it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskOwner {
    /// The tenant.
    pub tenant: String,
    /// How the principal was authenticated (`jwt`, `mtls`, `local`, `anonymous`).
    pub method: String,
    /// The JWT issuer; empty for the other methods.
    pub issuer: String,
    /// The subject.
    pub subject: String,
}

impl TaskOwner {
    /// The owner of a task `principal` makes.
    pub fn of(principal: &Principal) -> Self {
        TaskOwner {
            tenant: principal.tenant.clone(),
            method: principal.method.as_str().to_owned(),
            issuer: principal.issuer.clone().unwrap_or_default(),
            subject: principal.subject.clone(),
        }
    }
}

/// The call a task runs, as another replica needs it to resume: the tool, its arguments,
/// and the principal's non-secret parts (no token: a resumed call uses the tenant's own
/// credentials).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskCall {
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: Map<String, Value>,
    /// The principal's groups (Cedar policies read them).
    #[serde(default)]
    pub groups: Vec<String>,
    /// The client certificate's fingerprint (mTLS).
    #[serde(default)]
    pub fingerprint: Option<String>,
    /// The audit record's id of the call that started the task.
    #[serde(default)]
    pub call_id: Option<String>,
}

/// One task as the store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskRecord {
    /// The task's id (random, unguessable).
    pub id: String,
    /// Who made it.
    pub owner: TaskOwner,
    /// What it runs.
    pub call: TaskCall,
    /// Where it is.
    pub state: TaskState,
    /// The upstream operation's handle, once the write was acknowledged.
    pub handle: Option<OperationHandle>,
    /// A finished task's result: the `CallToolResult` (completed) or the JSON-RPC error
    /// object (failed).
    pub result: Option<Value>,
    /// What a person reads about the state.
    pub status_message: Option<String>,
    /// Its client asked to cancel it.
    pub cancel_requested: bool,
    /// The replica running it.
    pub replica: String,
    /// Until when that replica's claim holds (ms since the epoch).
    pub lease_until_ms: u64,
    /// When it was made (ms since the epoch).
    pub created_ms: u64,
    /// When it last changed (ms since the epoch).
    pub updated_ms: u64,
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Finish {
    /// `completed`, `failed` or `cancelled`.
    pub state: TaskState,
    /// The result or error (none for `cancelled`).
    pub result: Option<Value>,
    /// What a person reads.
    pub status_message: Option<String>,
}
