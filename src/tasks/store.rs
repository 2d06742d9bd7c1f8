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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::record::TaskCall;

    fn owner(tenant: &str, subject: &str) -> TaskOwner {
        TaskOwner {
            tenant: tenant.into(),
            method: "jwt".into(),
            issuer: "https://idp".into(),
            subject: subject.into(),
        }
    }

    fn task(id: &str, owner: TaskOwner, replica: &str, lease_until_ms: u64) -> TaskRecord {
        TaskRecord {
            id: id.into(),
            owner,
            call: TaskCall {
                tool: "run_lifecycle_operation".into(),
                arguments: serde_json::Map::new(),
                groups: Vec::new(),
                fingerprint: None,
                call_id: None,
            },
            state: TaskState::Working,
            handle: None,
            result: None,
            status_message: None,
            cancel_requested: false,
            replica: replica.into(),
            lease_until_ms,
            created_ms: 1,
            updated_ms: 1,
        }
    }

    fn done() -> Finish {
        Finish {
            state: TaskState::Completed,
            result: Some(serde_json::json!({"content": []})),
            status_message: None,
        }
    }

    #[tokio::test]
    async fn only_the_owner_finds_a_task() {
        let store = MemoryTaskStore::default();
        let alice = owner("acme", "alice");
        store
            .create(&task("t1", alice.clone(), "r1", 10), 5)
            .await
            .unwrap();
        assert!(store.get(&alice, "t1").await.unwrap().is_some());
        for stranger in [owner("acme", "bob"), owner("globex", "alice")] {
            assert!(store.get(&stranger, "t1").await.unwrap().is_none());
            assert!(store.cancel(&stranger, "t1", 2).await.unwrap().is_none());
            assert!(store.list(&stranger).await.unwrap().is_empty());
        }
        assert_eq!(store.list(&alice).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_tenant_has_at_most_max_tasks() {
        let store = MemoryTaskStore::default();
        for i in 0..2 {
            store
                .create(&task(&format!("t{i}"), owner("acme", "a"), "r1", 10), 2)
                .await
                .unwrap();
        }
        let refused = store
            .create(&task("t2", owner("acme", "b"), "r1", 10), 2)
            .await;
        assert!(
            matches!(refused, Err(TaskStoreError::TooMany(2))),
            "{refused:?}"
        );
        // Another tenant has its own count.
        store
            .create(&task("t3", owner("globex", "a"), "r1", 10), 2)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_task_ends_once_and_only_by_the_replica_holding_it() {
        let store = MemoryTaskStore::default();
        let alice = owner("acme", "alice");
        store
            .create(&task("t1", alice.clone(), "r1", 10), 5)
            .await
            .unwrap();
        assert!(!store.finish("t1", "r2", &done(), 3).await.unwrap());
        assert!(store.finish("t1", "r1", &done(), 3).await.unwrap());
        assert!(!store.finish("t1", "r1", &done(), 4).await.unwrap());
        // A finished task is not cancelled.
        let after = store.cancel(&alice, "t1", 5).await.unwrap().unwrap();
        assert_eq!(after.state, TaskState::Completed);
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_over_once_and_the_old_holder_loses_it() {
        let store = MemoryTaskStore::default();
        store
            .create(&task("t1", owner("acme", "a"), "r1", 100), 5)
            .await
            .unwrap();
        // Not yet expired.
        assert!(store.claim_expired("r2", 50, 1050).await.unwrap().is_none());
        let claimed = store.claim_expired("r2", 150, 1150).await.unwrap().unwrap();
        assert_eq!(claimed.replica, "r2");
        assert!(
            store
                .claim_expired("r3", 151, 1151)
                .await
                .unwrap()
                .is_none()
        );
        // r1 renews and learns it lost the task; r2 keeps it.
        let ids = vec!["t1".to_owned()];
        assert_eq!(store.renew("r1", &ids, 2000).await.unwrap(), ids);
        assert!(store.renew("r2", &ids, 2000).await.unwrap().is_empty());
        assert!(!store.finish("t1", "r1", &done(), 160).await.unwrap());
        assert!(store.finish("t1", "r2", &done(), 160).await.unwrap());
    }

    #[tokio::test]
    async fn finished_tasks_are_pruned_after_retention_working_ones_never() {
        let store = MemoryTaskStore::default();
        let alice = owner("acme", "alice");
        store
            .create(&task("old", alice.clone(), "r1", 10), 5)
            .await
            .unwrap();
        store
            .create(&task("running", alice.clone(), "r1", 10), 5)
            .await
            .unwrap();
        store.finish("old", "r1", &done(), 100).await.unwrap();
        assert_eq!(store.prune(100).await.unwrap(), 0);
        assert_eq!(store.prune(101).await.unwrap(), 1);
        assert!(store.get(&alice, "old").await.unwrap().is_none());
        assert!(store.get(&alice, "running").await.unwrap().is_some());
    }
}
