//! Long-running calls as MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663
//! of MCP 2026-07-28): a call that may wait on an upstream operation (`run_lifecycle_operation`,
//! or any statement with `/*+ AWAIT */`), from a client that declared the extension, answers
//! at once with a task handle once the gate allowed it; the client polls `tasks/get` on any
//! connection, to any replica, until the task has finished and carries the result.
//!
//! ```text
//! handler ── submit ──▶ spawned: pipeline (audit → gate → quota → cache → admit → TASK → intent …)
//!    ▲                                                    │ the task's record is stored
//!    └──────── Started(task) / Finished(reply) ◀─────────┘ (refusals and approval prompts
//!                                                            answer as before)
//! ```
//!
//! The task's record (state, owner, call, the operation's handle) lives in a [`TaskStore`]:
//! PostgreSQL when `database.url` is set, else memory. The replica running a task holds a
//! lease on it and renews it; when the replica stops, another takes the expired lease over
//! and resumes polling the operation from its stored handle: the write is never sent again
//! (a task whose handle was not stored ends as `call.outcome_unknown`).

mod background;
mod pg;
mod record;
mod runner;
mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

pub use pg::PgTaskStore;
pub use record::{Finish, TaskCall, TaskOwner, TaskRecord, TaskState};
pub use runner::{Submitted, TaskStart};
pub use store::{MemoryTaskStore, TaskStore, TaskStoreError};

pub(crate) use runner::{in_task, run_or_resume, submitted_but_no_task};

use crate::clock::Clock;
use crate::config::TasksConfig;

/// The status message of a cancelled task.
pub(crate) const CANCELLED_MESSAGE: &str =
    "cancelled by its client; an upstream operation already started may go on upstream";

/// The tools whose calls may become tasks: those that can wait on an upstream operation.
pub const TASK_TOOLS: [&str; 3] = [
    "run_lifecycle_operation",
    "run_mutation_query",
    "run_select_query",
];

/// The tasks of this server: the store, this replica's running tasks, the settings.
#[derive(Debug)]
pub struct Tasks {
    store: Arc<dyn TaskStore>,
    config: TasksConfig,
    clock: Clock,
    /// This replica's id in the store's leases.
    replica: String,
    /// The tasks this replica runs, and how to stop each.
    running: Mutex<HashMap<String, CancellationToken>>,
    /// Where task states are counted (`querygate_tasks_total{state}`).
    metrics: Option<Arc<crate::telemetry::Metrics>>,
}

impl Tasks {
    /// Tasks kept in `store`, for `config`, reading time from `clock`.
    pub fn new(
        store: Arc<dyn TaskStore>,
        config: TasksConfig,
        clock: Clock,
        metrics: Option<Arc<crate::telemetry::Metrics>>,
    ) -> Arc<Self> {
        let replica = crate::digest::random_id()
            .unwrap_or_else(|_| format!("replica-{}", std::process::id()));
        Arc::new(Tasks {
            store,
            config,
            clock,
            replica,
            running: Mutex::default(),
            metrics,
        })
    }

    /// Whether tasks are on (`tasks.enabled`).
    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The store's kind, for `server_info`: `postgres` or `memory`.
    pub fn settings(&self) -> &TasksConfig {
        &self.config
    }

    /// The task `id` of `owner`.
    pub async fn get(
        &self,
        owner: &TaskOwner,
        id: &str,
    ) -> Result<Option<TaskRecord>, TaskStoreError> {
        self.store.get(owner, id).await
    }

    /// `owner`'s tasks, newest first.
    pub async fn list(&self, owner: &TaskOwner) -> Result<Vec<TaskRecord>, TaskStoreError> {
        self.store.list(owner).await
    }

    /// Cancels `owner`'s task `id`: it is `cancelled` at once, and the replica running it
    /// stops polling (this one now, another at its next lease renewal).
    pub async fn cancel(
        &self,
        owner: &TaskOwner,
        id: &str,
    ) -> Result<Option<TaskRecord>, TaskStoreError> {
        let before = self.store.get(owner, id).await?;
        let after = self.store.cancel(owner, id, self.now_ms()).await?;
        if let (Some(before), Some(after)) = (&before, &after)
            && before.state == TaskState::Working
            && after.state == TaskState::Cancelled
        {
            self.count(TaskState::Cancelled);
            self.stop_local(id);
        }
        Ok(after)
    }

    /// The suggested polling interval, in milliseconds.
    pub fn poll_interval_ms(&self) -> u64 {
        u64::try_from(self.config.poll_interval.as_millis()).unwrap_or(u64::MAX)
    }

    /// `tasks.retention`, in milliseconds (a task's `ttlMs`).
    pub fn retention_ms(&self) -> u64 {
        u64::try_from(self.config.retention.as_millis()).unwrap_or(u64::MAX)
    }

    /// Counts a task that reached `state` (`querygate_tasks_total{state}`).
    fn count(&self, state: TaskState) {
        if let Some(metrics) = &self.metrics {
            metrics.task_state(state.as_str());
        }
    }

    fn now_ms(&self) -> u64 {
        self.clock
            .now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    fn lease_until_ms(&self) -> u64 {
        self.now_ms() + duration_ms(self.config.lease)
    }

    fn stop_local(&self, id: &str) {
        let token = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        if let Some(token) = token {
            token.cancel();
        }
    }

    fn run_locally(&self, id: &str, token: CancellationToken) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.to_owned(), token);
    }

    fn done_locally(&self, id: &str) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    fn running_ids(&self) -> Vec<String> {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// An RFC 3339 time of `ms` since the epoch.
pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}
