//! Pending approvals in PostgreSQL (`approval_requests`, migration 0006), shared by every
//! replica. A state change is one `UPDATE … WHERE state = <from>`: of two replicas redeeming
//! the same approval, exactly one changes a row.

use std::sync::atomic::{AtomicU32, Ordering};

use sqlx_core::query::query;
use sqlx_core::query_as::query_as;
use sqlx_postgres::{PgPool, Postgres};

use super::pending::{
    CallKey, Decided, PendingApproval, PendingFuture, PendingRequest, PendingState, PendingStore,
    RecordDecision, TooMany, Undecided, now_ms, parse_state,
};
use super::store::StoreError;

/// How many creations pass between two prunes of long-expired rows.
const PRUNE_EVERY: u32 = 64;

/// The columns every read selects, in [`Row`]'s order.
const COLUMNS: &str = "request::text, state, decision::text";

type Row = (String, String, Option<String>);

/// The PostgreSQL store of pending approvals.
#[derive(Debug)]
pub struct PgPendingStore {
    pool: PgPool,
    created: AtomicU32,
}

impl PgPendingStore {
    /// A store over `pool` (the schema comes from `querygate migrate`).
    pub fn new(pool: PgPool) -> Self {
        PgPendingStore {
            pool,
            created: AtomicU32::new(0),
        }
    }
}

fn db(err: sqlx_core::Error) -> StoreError {
    StoreError::Pending(err)
}

fn row(row: Row) -> Result<PendingApproval, StoreError> {
    let (request, state, decision) = row;
    let request: PendingRequest =
        serde_json::from_str(&request).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let decision = decision
        .map(|d| serde_json::from_str::<Decided>(&d))
        .transpose()
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(PendingApproval {
        request,
        state: parse_state(&state)?,
        decision,
    })
}

fn ms(value: u64) -> f64 {
    value as f64
}

impl PgPendingStore {
    async fn current_of(&self, key: &CallKey) -> Result<Option<PendingApproval>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM approval_requests \
             WHERE tenant = $1 AND principal_method = $2 AND principal_issuer = $3 \
               AND principal_subject = $4 AND tool = $5 AND arguments_sha256 = $6 \
               AND (state IN ('pending', 'approved') OR (state = 'denied' AND expires_at > now())) \
             ORDER BY created_at DESC LIMIT 1"
        );
        let found = query_as::<Postgres, Row>(&sql)
            .bind(&key.tenant)
            .bind(&key.requester.method)
            .bind(&key.requester.issuer)
            .bind(&key.requester.subject)
            .bind(&key.tool)
            .bind(&key.arguments_sha256)
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?;
        found.map(row).transpose()
    }

    async fn insert(
        &self,
        request: PendingRequest,
        max_pending: u32,
    ) -> Result<Result<PendingApproval, TooMany>, StoreError> {
        if self
            .created
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(PRUNE_EVERY)
        {
            let _ =
                query("DELETE FROM approval_requests WHERE expires_at < now() - interval '1 hour'")
                    .execute(&self.pool)
                    .await;
        }
        let doc =
            serde_json::to_string(&request).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let r = &request.requester;
        // The requester's creations are serialized (on every replica) by a lock held to the
        // end of the transaction, so the count below is the count the insert sees.
        let mut tx = self.pool.begin().await.map_err(db)?;
        query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(format!(
                "querygate.approval_requests\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}",
                request.tenant, r.method, r.issuer, r.subject
            ))
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        // A pending approval of the call that has expired no longer blocks a new one.
        query(
            "UPDATE approval_requests SET state = 'expired' \
             WHERE tenant = $1 AND principal_method = $2 AND principal_issuer = $3 \
               AND principal_subject = $4 AND tool = $5 AND arguments_sha256 = $6 \
               AND state = 'pending' AND expires_at <= now()",
        )
        .bind(&request.tenant)
        .bind(&r.method)
        .bind(&r.issuer)
        .bind(&r.subject)
        .bind(&request.tool)
        .bind(&request.arguments_sha256)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        let (pending,): (i64,) = query_as(
            "SELECT count(*) FROM approval_requests \
             WHERE tenant = $1 AND principal_method = $2 AND principal_issuer = $3 \
               AND principal_subject = $4 AND state = 'pending' AND expires_at > now() \
               AND NOT (tool = $5 AND arguments_sha256 = $6)",
        )
        .bind(&request.tenant)
        .bind(&r.method)
        .bind(&r.issuer)
        .bind(&r.subject)
        .bind(&request.tool)
        .bind(&request.arguments_sha256)
        .fetch_one(&mut *tx)
        .await
        .map_err(db)?;
        let inserted = query(
            "INSERT INTO approval_requests (tenant, approval_id, principal_method, principal_issuer, \
               principal_subject, tool, arguments_sha256, request, created_at, expires_at) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8::jsonb, to_timestamp($9 / 1000.0), to_timestamp($10 / 1000.0) \
             WHERE $11 \
             ON CONFLICT DO NOTHING",
        )
        .bind(&request.tenant)
        .bind(&request.id)
        .bind(&r.method)
        .bind(&r.issuer)
        .bind(&r.subject)
        .bind(&request.tool)
        .bind(&request.arguments_sha256)
        .bind(&doc)
        .bind(ms(request.created_at_ms))
        .bind(ms(request.expires_at_ms))
        .bind(pending < i64::from(max_pending))
        .execute(&mut *tx)
        .await
        .map_err(db)?
        .rows_affected()
            == 1;
        tx.commit().await.map_err(db)?;
        if inserted {
            return Ok(Ok(PendingApproval {
                request,
                state: PendingState::Pending,
                decision: None,
            }));
        }
        // The call's own pending approval (made here or on another replica) is shared.
        match self.current_of(&request.key()).await? {
            Some(existing) if existing.state_now() == PendingState::Pending => Ok(Ok(existing)),
            _ if pending >= i64::from(max_pending) => Ok(Err(TooMany {
                pending: u32::try_from(pending).unwrap_or(u32::MAX),
            })),
            Some(existing) => Ok(Ok(existing)),
            None => Err(StoreError::Corrupt(
                "a pending approval of the call was neither inserted nor found".into(),
            )),
        }
    }

    async fn fetch(&self, tenant: &str, id: &str) -> Result<Option<PendingApproval>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM approval_requests WHERE tenant = $1 AND approval_id = $2"
        );
        query_as::<Postgres, Row>(&sql)
            .bind(tenant)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?
            .map(row)
            .transpose()
    }

    async fn all(&self, tenant: &str) -> Result<Vec<PendingApproval>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM approval_requests WHERE tenant = $1 \
             AND expires_at > now() - interval '1 hour' ORDER BY created_at DESC LIMIT 1000"
        );
        query_as::<Postgres, Row>(&sql)
            .bind(tenant)
            .fetch_all(&self.pool)
            .await
            .map_err(db)?
            .into_iter()
            .map(row)
            .collect()
    }

    async fn set_decision(
        &self,
        tenant: &str,
        id: &str,
        approve: bool,
        decided: Decided,
        record: RecordDecision<'_>,
    ) -> Result<Result<PendingApproval, Undecided>, StoreError> {
        let doc =
            serde_json::to_string(&decided).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let to = if approve { "approved" } else { "denied" };
        // The row is locked from the check to the update: a second decider, on any replica,
        // waits, then finds it decided and records nothing.
        let mut tx = self.pool.begin().await.map_err(db)?;
        let locked = query_as::<Postgres, Row>(&format!(
            "SELECT {COLUMNS} FROM approval_requests \
             WHERE tenant = $1 AND approval_id = $2 AND state = 'pending' AND expires_at > now() \
             FOR UPDATE"
        ))
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
        let Some(locked) = locked else {
            tx.rollback().await.map_err(db)?;
            return Ok(Err(match self.fetch(tenant, id).await? {
                None => Undecided::NotFound,
                Some(approval) => Undecided::NotPending(match approval.state_at(now_ms()) {
                    // Our clock says pending, the database's says expired.
                    PendingState::Pending => PendingState::Expired,
                    other => other,
                }),
            }));
        };
        if let Err(error) = record(&row(locked)?).await {
            tx.rollback().await.map_err(db)?;
            return Ok(Err(Undecided::NotRecorded(error)));
        }
        let updated = query_as::<Postgres, Row>(&format!(
            "UPDATE approval_requests SET state = $3, decision = $4::jsonb \
             WHERE tenant = $1 AND approval_id = $2 RETURNING {COLUMNS}"
        ))
        .bind(tenant)
        .bind(id)
        .bind(to)
        .bind(&doc)
        .fetch_one(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(Ok(row(updated)?))
    }

    async fn move_state(
        &self,
        tenant: &str,
        id: &str,
        from: PendingState,
        to: PendingState,
    ) -> Result<bool, StoreError> {
        let unexpired = if from == PendingState::Approved {
            " AND expires_at > now()"
        } else {
            ""
        };
        let sql = format!(
            "UPDATE approval_requests SET state = $4 \
             WHERE tenant = $1 AND approval_id = $2 AND state = $3{unexpired}"
        );
        Ok(query(&sql)
            .bind(tenant)
            .bind(id)
            .bind(from.as_str())
            .bind(to.as_str())
            .execute(&self.pool)
            .await
            .map_err(db)?
            .rows_affected()
            == 1)
    }
}

impl PendingStore for PgPendingStore {
    fn current<'a>(&'a self, key: &'a CallKey) -> PendingFuture<'a, Option<PendingApproval>> {
        Box::pin(self.current_of(key))
    }

    fn create(
        &self,
        request: PendingRequest,
        max_pending: u32,
    ) -> PendingFuture<'_, Result<PendingApproval, TooMany>> {
        Box::pin(self.insert(request, max_pending))
    }

    fn get<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> PendingFuture<'a, Option<PendingApproval>> {
        Box::pin(self.fetch(tenant, id))
    }

    fn list<'a>(&'a self, tenant: &'a str) -> PendingFuture<'a, Vec<PendingApproval>> {
        Box::pin(self.all(tenant))
    }

    fn decide<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        approve: bool,
        decided: Decided,
        record: RecordDecision<'a>,
    ) -> PendingFuture<'a, Result<PendingApproval, Undecided>> {
        Box::pin(self.set_decision(tenant, id, approve, decided, record))
    }

    fn sign_out<'a>(&'a self, session_sha256: &'a str, until_ms: u64) -> PendingFuture<'a, ()> {
        Box::pin(async move {
            let _ = query("DELETE FROM approval_web_signed_out WHERE expires_at < now()")
                .execute(&self.pool)
                .await;
            let until = i64::try_from(until_ms).unwrap_or(i64::MAX);
            query(
                "INSERT INTO approval_web_signed_out (session_sha256, expires_at) \
                 VALUES ($1, to_timestamp($2::double precision / 1000)) \
                 ON CONFLICT (session_sha256) DO NOTHING",
            )
            .bind(session_sha256)
            .bind(until)
            .execute(&self.pool)
            .await
            .map_err(db)?;
            Ok(())
        })
    }

    fn signed_out<'a>(&'a self, session_sha256: &'a str) -> PendingFuture<'a, bool> {
        Box::pin(async move {
            let found: Option<(i32,)> =
                query_as("SELECT 1 FROM approval_web_signed_out WHERE session_sha256 = $1")
                    .bind(session_sha256)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(db)?;
            Ok(found.is_some())
        })
    }

    fn transition<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        from: PendingState,
        to: PendingState,
    ) -> PendingFuture<'a, bool> {
        Box::pin(self.move_state(tenant, id, from, to))
    }
}
