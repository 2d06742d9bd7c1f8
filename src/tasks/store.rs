//! Where tasks are kept: in memory for one replica, or in PostgreSQL (`pg`) for several.
//! Every read names the owner: a task is found only by the tenant and principal that made
//! it. A state change is one conditional step (`… WHERE state = 'working'`): a task ends
//! once, whichever replica ends it.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use futures::future::BoxFuture;

use super::record::{Finish, TaskOwner, TaskRecord, TaskState};
use crate::engine::OperationHandle;

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum TaskStoreError {
    /// The tenant has `tasks.max_tasks` tasks already.
    #[error(
        "the tenant has {0} tasks already (tasks.max_tasks); wait for some to finish and expire"
    )]
    TooMany(usize),
    /// PostgreSQL failed.
    #[error("task store: {0}")]
    Database(#[from] sqlx_core::Error),
    /// A row could not be read back.
    #[error("task store: a stored task cannot be read: {0}")]
    Corrupt(String),
}

/// A store operation.
pub type StoreFuture<'a, T> = BoxFuture<'a, Result<T, TaskStoreError>>;

/// Where tasks are kept.
pub trait TaskStore: Send + Sync + std::fmt::Debug {
    /// Stores a new task, unless its tenant has `max` already.
    fn create<'a>(&'a self, record: &'a TaskRecord, max: usize) -> StoreFuture<'a, ()>;

    /// The task `id` of `owner`; `None` when there is none, or another owner's.
    fn get<'a>(&'a self, owner: &'a TaskOwner, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>>;

    /// `owner`'s tasks, newest first.
    fn list<'a>(&'a self, owner: &'a TaskOwner) -> StoreFuture<'a, Vec<TaskRecord>>;

    /// Keeps the handle of the operation the working task `id` waits on.
    fn set_handle<'a>(
        &'a self,
        id: &'a str,
        handle: &'a OperationHandle,
        now_ms: u64,
    ) -> StoreFuture<'a, ()>;

    /// Ends the working task `id` that `replica` holds; `false` when it had ended already
    /// (cancelled) or another replica took it over.
    fn finish<'a>(
        &'a self,
        id: &'a str,
        replica: &'a str,
        finish: &'a Finish,
        now_ms: u64,
    ) -> StoreFuture<'a, bool>;

    /// Cancels `owner`'s working task `id`: the task is `cancelled` at once; the result
    /// is the task as it is now (`None`: no such task of `owner`).
    fn cancel<'a>(
        &'a self,
        owner: &'a TaskOwner,
        id: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Option<TaskRecord>>;

    /// Extends `replica`'s lease on its working tasks `ids` to `until_ms`; returns those of
    /// `ids` that are no longer its working tasks (cancelled, or taken over).
    fn renew<'a>(
        &'a self,
        replica: &'a str,
        ids: &'a [String],
        until_ms: u64,
    ) -> StoreFuture<'a, Vec<String>>;

    /// Takes over one working task whose lease ran out before `now_ms`, for `replica`
    /// until `until_ms`: at most one replica gets each.
    fn claim_expired<'a>(
        &'a self,
        replica: &'a str,
        now_ms: u64,
        until_ms: u64,
    ) -> StoreFuture<'a, Option<TaskRecord>>;

    /// Drops finished tasks that last changed before `before_ms`; how many.
    fn prune(&self, before_ms: u64) -> StoreFuture<'_, u64>;
}

/// The store of one replica.
#[derive(Debug, Default)]
pub struct MemoryTaskStore {
    tasks: Mutex<HashMap<String, TaskRecord>>,
}

impl MemoryTaskStore {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, TaskRecord>) -> T) -> T {
        f(&mut self.tasks.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl TaskStore for MemoryTaskStore {
    fn create<'a>(&'a self, record: &'a TaskRecord, max: usize) -> StoreFuture<'a, ()> {
        let result = self.with(|tasks| {
            let held = tasks
                .values()
                .filter(|t| t.owner.tenant == record.owner.tenant)
                .count();
            if held >= max {
                return Err(TaskStoreError::TooMany(held));
            }
            tasks.insert(record.id.clone(), record.clone());
            Ok(())
        });
        Box::pin(std::future::ready(result))
    }

    fn get<'a>(&'a self, owner: &'a TaskOwner, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        let found = self.with(|tasks| tasks.get(id).filter(|t| &t.owner == owner).cloned());
        Box::pin(std::future::ready(Ok(found)))
    }

    fn list<'a>(&'a self, owner: &'a TaskOwner) -> StoreFuture<'a, Vec<TaskRecord>> {
        let mut found: Vec<TaskRecord> = self.with(|tasks| {
            tasks
                .values()
                .filter(|t| &t.owner == owner)
                .cloned()
                .collect()
        });
        found.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(b.id.cmp(&a.id)));
        Box::pin(std::future::ready(Ok(found)))
    }

    fn set_handle<'a>(
        &'a self,
        id: &'a str,
        handle: &'a OperationHandle,
        now_ms: u64,
    ) -> StoreFuture<'a, ()> {
        self.with(|tasks| {
            if let Some(task) = tasks.get_mut(id).filter(|t| t.state == TaskState::Working) {
                task.handle = Some(handle.clone());
                task.updated_ms = now_ms;
            }
        });
        Box::pin(std::future::ready(Ok(())))
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        replica: &'a str,
        finish: &'a Finish,
        now_ms: u64,
    ) -> StoreFuture<'a, bool> {
        let ended = self.with(|tasks| match tasks.get_mut(id) {
            Some(task) if task.state == TaskState::Working && task.replica == replica => {
                task.state = finish.state;
                task.result = finish.result.clone();
                task.status_message = finish.status_message.clone();
                task.updated_ms = now_ms;
                true
            }
            _ => false,
        });
        Box::pin(std::future::ready(Ok(ended)))
    }

    fn cancel<'a>(
        &'a self,
        owner: &'a TaskOwner,
        id: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Option<TaskRecord>> {
        let found = self.with(|tasks| {
            let task = tasks.get_mut(id).filter(|t| &t.owner == owner)?;
            if task.state == TaskState::Working {
                task.state = TaskState::Cancelled;
                task.cancel_requested = true;
                task.status_message = Some(super::CANCELLED_MESSAGE.to_owned());
                task.updated_ms = now_ms;
            }
            Some(task.clone())
        });
        Box::pin(std::future::ready(Ok(found)))
    }

    fn renew<'a>(
        &'a self,
        replica: &'a str,
        ids: &'a [String],
        until_ms: u64,
    ) -> StoreFuture<'a, Vec<String>> {
        let lost = self.with(|tasks| {
            ids.iter()
                .filter(|id| match tasks.get_mut(id.as_str()) {
                    Some(task) if task.state == TaskState::Working && task.replica == replica => {
                        task.lease_until_ms = until_ms;
                        false
                    }
                    _ => true,
                })
                .cloned()
                .collect()
        });
        Box::pin(std::future::ready(Ok(lost)))
    }

    fn claim_expired<'a>(
        &'a self,
        replica: &'a str,
        now_ms: u64,
        until_ms: u64,
    ) -> StoreFuture<'a, Option<TaskRecord>> {
        let claimed = self.with(|tasks| {
            let task = tasks
                .values_mut()
                .filter(|t| t.state == TaskState::Working && t.lease_until_ms < now_ms)
                .min_by_key(|t| t.lease_until_ms)?;
            task.replica = replica.to_owned();
            task.lease_until_ms = until_ms;
            Some(task.clone())
        });
        Box::pin(std::future::ready(Ok(claimed)))
    }

    fn prune(&self, before_ms: u64) -> StoreFuture<'_, u64> {
        let pruned = self.with(|tasks| {
            let before = tasks.len();
            tasks.retain(|_, t| !(t.state.is_terminal() && t.updated_ms < before_ms));
            (before - tasks.len()) as u64
        });
        Box::pin(std::future::ready(Ok(pruned)))
    }
}
