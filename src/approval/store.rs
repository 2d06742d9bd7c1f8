//! Where redeemed approval ids are recorded, so an approval runs its call at most once: in
//! memory for one replica, in PostgreSQL for several.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::SystemTime;

/// The future a store returns.
pub type StoreFuture<'a> = Pin<Box<dyn Future<Output = Result<bool, StoreError>> + Send + 'a>>;

/// Why the store could not answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// PostgreSQL could not record the redemption (unreachable, or the statement failed).
    #[error("redeeming an approval in PostgreSQL: {0}")]
    Database(#[source] sqlx_core::Error),
    /// The in-memory store's lock was poisoned by a panic while it was held.
    #[error("the in-memory approval store's lock is poisoned")]
    Poisoned,
    /// PostgreSQL could not read or write a pending approval.
    #[error("pending approvals in PostgreSQL: {0}")]
    Pending(#[source] sqlx_core::Error),
    /// A stored pending approval cannot be read back.
    #[error("a stored pending approval is unreadable: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// The stable code of a call refused because of this error.
    pub fn code(&self) -> crate::code::Code {
        match self {
            StoreError::Database(_)
            | StoreError::Poisoned
            | StoreError::Pending(_)
            | StoreError::Corrupt(_) => crate::code::Code::PolicyApprovalUnavailable,
        }
    }
}

/// Records redeemed approvals.
pub trait ApprovalStore: Send + Sync + std::fmt::Debug {
    /// Records `id` of `tenant` as redeemed, remembered at least until `expires_at`: `true`
    /// the first time, `false` when it was already redeemed (here or on another replica).
    fn redeem<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        expires_at: SystemTime,
    ) -> StoreFuture<'a>;
}

/// Redeemed ids in this process; entries are dropped once their approval has expired.
#[derive(Debug, Default)]
pub struct MemoryStore {
    redeemed: Mutex<HashMap<(String, String), SystemTime>>,
}

impl ApprovalStore for MemoryStore {
    fn redeem<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        expires_at: SystemTime,
    ) -> StoreFuture<'a> {
        let result = match self.redeemed.lock() {
            Ok(mut redeemed) => {
                let now = SystemTime::now();
                redeemed.retain(|_, expiry| *expiry > now);
                Ok(redeemed
                    .insert((tenant.to_owned(), id.to_owned()), expires_at)
                    .is_none())
            }
            Err(_) => Err(StoreError::Poisoned),
        };
        Box::pin(async move { result })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::code::Code;

    #[tokio::test]
    async fn a_poisoned_lock_is_its_own_error() {
        let store = Arc::new(MemoryStore::default());
        let later = SystemTime::now() + Duration::from_secs(60);
        assert!(matches!(store.redeem("t", "a", later).await, Ok(true)));
        assert!(matches!(store.redeem("t", "a", later).await, Ok(false)));
        let poisoner = Arc::clone(&store);
        let _ = std::thread::spawn(move || {
            let _held = poisoner.redeemed.lock();
            panic!("poison the lock");
        })
        .join();
        let err = match store.redeem("t", "b", later).await {
            Err(err) => err,
            Ok(fresh) => panic!("a poisoned store answered {fresh}"),
        };
        assert!(matches!(err, StoreError::Poisoned), "{err:?}");
        assert_eq!(err.code(), Code::PolicyApprovalUnavailable);
    }

    #[test]
    fn a_database_failure_keeps_its_cause() {
        let err = StoreError::Database(sqlx_core::Error::PoolTimedOut);
        assert_eq!(err.code(), Code::PolicyApprovalUnavailable);
        assert!(
            err.to_string()
                .starts_with("redeeming an approval in PostgreSQL: "),
            "{err}"
        );
        assert!(std::error::Error::source(&err).is_some());
    }
}
