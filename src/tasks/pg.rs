//! Tasks in PostgreSQL (`mcp_tasks`, migration 0010), shared by every replica: any replica
//! answers for any task, and a replica takes over a task whose runner stopped renewing its
//! lease.

use sqlx_core::query::query;
use sqlx_core::query_as::query_as;
use sqlx_core::query_scalar::query_scalar;
use sqlx_postgres::{PgPool, Postgres};

use super::record::{Finish, TaskCall, TaskOwner, TaskRecord, TaskState};
use super::store::{StoreFuture, TaskStore, TaskStoreError};
use crate::engine::OperationHandle;

/// The columns every read selects, in [`Row`]'s order.
const COLUMNS: &str = "task_id, tenant, principal_method, principal_issuer, principal_subject, \
    call::text, state, handle::text, result::text, status_message, cancel_requested, replica, \
    lease_until_ms, created_ms, updated_ms";

type Row = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    bool,
    String,
    i64,
    i64,
    i64,
);

/// The PostgreSQL store of tasks.
#[derive(Debug)]
pub struct PgTaskStore {
    pool: PgPool,
}

impl PgTaskStore {
    /// A store over `pool` (the schema comes from `querygate migrate`).
    pub fn new(pool: PgPool) -> Self {
        PgTaskStore { pool }
    }
}

fn corrupt(err: impl std::fmt::Display) -> TaskStoreError {
    TaskStoreError::Corrupt(err.to_string())
}

fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn record(row: Row) -> Result<TaskRecord, TaskStoreError> {
    let (
        id,
        tenant,
        method,
        issuer,
        subject,
        call,
        state,
        handle,
        result,
        status_message,
        cancel_requested,
        replica,
        lease_until_ms,
        created_ms,
        updated_ms,
    ) = row;
    let call: TaskCall = serde_json::from_str(&call).map_err(corrupt)?;
    let handle = handle
        .map(|h| serde_json::from_str::<OperationHandle>(&h))
        .transpose()
        .map_err(corrupt)?;
    let result = result
        .map(|r| serde_json::from_str(&r))
        .transpose()
        .map_err(corrupt)?;
    let unsigned = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(TaskRecord {
        id,
        owner: TaskOwner {
            tenant,
            method,
            issuer,
            subject,
        },
        call,
        state: TaskState::parse(&state).ok_or_else(|| corrupt(format!("state '{state}'")))?,
        handle,
        result,
        status_message,
        cancel_requested,
        replica,
        lease_until_ms: unsigned(lease_until_ms),
        created_ms: unsigned(created_ms),
        updated_ms: unsigned(updated_ms),
    })
}

impl TaskStore for PgTaskStore {
    fn create<'a>(&'a self, record: &'a TaskRecord, max: usize) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let call = serde_json::to_string(&record.call).map_err(corrupt)?;
            let mut tx = self.pool.begin().await?;
            // One creator per tenant at a time, so the count below holds until the insert.
            query::<Postgres>("SELECT pg_advisory_xact_lock(hashtext('mcp_tasks:' || $1))")
                .bind(&record.owner.tenant)
                .execute(&mut *tx)
                .await?;
            let held: i64 = query_scalar("SELECT count(*) FROM mcp_tasks WHERE tenant = $1")
                .bind(&record.owner.tenant)
                .fetch_one(&mut *tx)
                .await?;
            let held = usize::try_from(held).unwrap_or(usize::MAX);
            if held >= max {
                return Err(TaskStoreError::TooMany(held));
            }
            query::<Postgres>(
                "INSERT INTO mcp_tasks (task_id, tenant, principal_method, principal_issuer, \
                 principal_subject, call, state, replica, lease_until_ms, created_ms, updated_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6::jsonb, 'working', $7, $8, $9, $9)",
            )
            .bind(&record.id)
            .bind(&record.owner.tenant)
            .bind(&record.owner.method)
            .bind(&record.owner.issuer)
            .bind(&record.owner.subject)
            .bind(call)
            .bind(&record.replica)
            .bind(ms(record.lease_until_ms))
            .bind(ms(record.created_ms))
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn get<'a>(&'a self, owner: &'a TaskOwner, id: &'a str) -> StoreFuture<'a, Option<TaskRecord>> {
        Box::pin(async move {
            let sql = format!(
                "SELECT {COLUMNS} FROM mcp_tasks WHERE task_id = $1 AND tenant = $2 \
                 AND principal_method = $3 AND principal_issuer = $4 AND principal_subject = $5"
            );
            let row = query_as::<Postgres, Row>(&sql)
                .bind(id)
                .bind(&owner.tenant)
                .bind(&owner.method)
                .bind(&owner.issuer)
                .bind(&owner.subject)
                .fetch_optional(&self.pool)
                .await?;
            row.map(record).transpose()
        })
    }

    fn list<'a>(&'a self, owner: &'a TaskOwner) -> StoreFuture<'a, Vec<TaskRecord>> {
        Box::pin(async move {
            let sql = format!(
                "SELECT {COLUMNS} FROM mcp_tasks WHERE tenant = $1 AND principal_method = $2 \
                 AND principal_issuer = $3 AND principal_subject = $4 \
                 ORDER BY created_ms DESC, task_id DESC"
            );
            let rows = query_as::<Postgres, Row>(&sql)
                .bind(&owner.tenant)
                .bind(&owner.method)
                .bind(&owner.issuer)
                .bind(&owner.subject)
                .fetch_all(&self.pool)
                .await?;
            rows.into_iter().map(record).collect()
        })
    }

    fn set_handle<'a>(
        &'a self,
        id: &'a str,
        handle: &'a OperationHandle,
        now_ms: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let handle = serde_json::to_string(handle).map_err(corrupt)?;
            query::<Postgres>(
                "UPDATE mcp_tasks SET handle = $2::jsonb, updated_ms = $3 \
                 WHERE task_id = $1 AND state = 'working'",
            )
            .bind(id)
            .bind(handle)
            .bind(ms(now_ms))
            .execute(&self.pool)
            .await?;
            Ok(())
        })
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        replica: &'a str,
        finish: &'a Finish,
        now_ms: u64,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let result = finish
                .result
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(corrupt)?;
            let done = query::<Postgres>(
                "UPDATE mcp_tasks SET state = $2, result = $3::jsonb, status_message = $4, \
                 updated_ms = $5 WHERE task_id = $1 AND replica = $6 AND state = 'working'",
            )
            .bind(id)
            .bind(finish.state.as_str())
            .bind(result)
            .bind(&finish.status_message)
            .bind(ms(now_ms))
            .bind(replica)
            .execute(&self.pool)
            .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn cancel<'a>(
        &'a self,
        owner: &'a TaskOwner,
        id: &'a str,
        now_ms: u64,
    ) -> StoreFuture<'a, Option<TaskRecord>> {
        Box::pin(async move {
            query::<Postgres>(
                "UPDATE mcp_tasks SET state = 'cancelled', cancel_requested = true, \
                 status_message = $6, updated_ms = $7 \
                 WHERE task_id = $1 AND tenant = $2 AND principal_method = $3 \
                 AND principal_issuer = $4 AND principal_subject = $5 AND state = 'working'",
            )
            .bind(id)
            .bind(&owner.tenant)
            .bind(&owner.method)
            .bind(&owner.issuer)
            .bind(&owner.subject)
            .bind(super::CANCELLED_MESSAGE)
            .bind(ms(now_ms))
            .execute(&self.pool)
            .await?;
            self.get(owner, id).await
        })
    }

    fn renew<'a>(
        &'a self,
        replica: &'a str,
        ids: &'a [String],
        until_ms: u64,
    ) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let kept: Vec<String> = query_scalar(
                "UPDATE mcp_tasks SET lease_until_ms = $3 \
                 WHERE task_id = ANY($1) AND replica = $2 AND state = 'working' \
                 RETURNING task_id",
            )
            .bind(ids)
            .bind(replica)
            .bind(ms(until_ms))
            .fetch_all(&self.pool)
            .await?;
            Ok(ids
                .iter()
                .filter(|id| !kept.contains(id))
                .cloned()
                .collect())
        })
    }

    fn claim_expired<'a>(
        &'a self,
        replica: &'a str,
        now_ms: u64,
        until_ms: u64,
    ) -> StoreFuture<'a, Option<TaskRecord>> {
        Box::pin(async move {
            let sql = format!(
                "UPDATE mcp_tasks SET replica = $1, lease_until_ms = $3 \
                 WHERE task_id = (SELECT task_id FROM mcp_tasks \
                     WHERE state = 'working' AND lease_until_ms < $2 \
                     ORDER BY lease_until_ms LIMIT 1 FOR UPDATE SKIP LOCKED) \
                 AND state = 'working' AND lease_until_ms < $2 \
                 RETURNING {COLUMNS}"
            );
            let row = query_as::<Postgres, Row>(&sql)
                .bind(replica)
                .bind(ms(now_ms))
                .bind(ms(until_ms))
                .fetch_optional(&self.pool)
                .await?;
            row.map(record).transpose()
        })
    }

    fn prune(&self, before_ms: u64) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            let done = query::<Postgres>(
                "DELETE FROM mcp_tasks WHERE state <> 'working' AND updated_ms < $1",
            )
            .bind(ms(before_ms))
            .execute(&self.pool)
            .await?;
            Ok(done.rows_affected())
        })
    }
}
