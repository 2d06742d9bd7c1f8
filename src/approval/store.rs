//! Where redeemed approval ids are recorded, so an approval runs its call at most once: in
//! memory for one replica, in PostgreSQL for several.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::SystemTime;

/// The future a store returns.
pub type StoreFuture<'a> = Pin<Box<dyn Future<Output = Result<bool, StoreError>> + Send + 'a>>;

/// The store could not answer.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

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
            Err(_) => Err(StoreError("approval store lock poisoned".into())),
        };
        Box::pin(async move { result })
    }
}
