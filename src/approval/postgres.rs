//! Redeemed approvals in PostgreSQL (`approval_redemptions`, migration 0001), shared by every
//! replica: `INSERT … ON CONFLICT DO NOTHING` makes exactly one redemption of an id succeed,
//! whichever replica the retries land on.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx_core::query::query;
use sqlx_postgres::PgPool;

use super::store::{ApprovalStore, StoreError, StoreFuture};

/// How many redemptions pass between two prunes of long-expired rows.
const PRUNE_EVERY: u32 = 256;

/// The PostgreSQL store.
#[derive(Debug)]
pub struct PostgresStore {
    pool: PgPool,
    redemptions: AtomicU32,
}

impl PostgresStore {
    /// A store over `pool` (the schema comes from `querygate migrate`).
    pub fn new(pool: PgPool) -> Self {
        PostgresStore {
            pool,
            redemptions: AtomicU32::new(0),
        }
    }

    async fn insert(
        &self,
        tenant: &str,
        id: &str,
        expires_at: SystemTime,
    ) -> Result<bool, StoreError> {
        let expires_ms = expires_at
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as f64)
            .unwrap_or(0.0);
        let inserted = query(
            "INSERT INTO approval_redemptions (tenant, approval_id, expires_at) \
             VALUES ($1, $2, to_timestamp($3 / 1000.0)) ON CONFLICT DO NOTHING",
        )
        .bind(tenant)
        .bind(id)
        .bind(expires_ms)
        .execute(&self.pool)
        .await
        .map_err(StoreError::Database)?
        .rows_affected()
            == 1;
        if self
            .redemptions
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(PRUNE_EVERY)
        {
            // An hour past expiry, a sealed state cannot open on any replica whose clock is
            // within an hour of ours.
            let _ = query(
                "DELETE FROM approval_redemptions WHERE expires_at < now() - interval '1 hour'",
            )
            .execute(&self.pool)
            .await;
        }
        Ok(inserted)
    }
}

impl ApprovalStore for PostgresStore {
    fn redeem<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        expires_at: SystemTime,
    ) -> StoreFuture<'a> {
        Box::pin(self.insert(tenant, id, expires_at))
    }
}
