//! Approval of single calls across replicas. The first call that needs approval gets a
//! sealed request state (HMAC over a key ring every replica shares); the client's retry,
//! on any replica, opens it, and the approval's one-time id is redeemed in a store before
//! the call runs.
//!
//! The seal binds the tenant, the principal (its method, issuer and subject), the tool and the SHA-256 of the call's canonical
//! arguments (as associated data: a state made for one call does not open for another),
//! the one-time id, the hash of the plan the person was shown, and an expiry. The state is
//! signed, not encrypted: it holds no secret.

mod keys;
mod oob;
pub mod pending;
mod pending_pg;
mod postgres;
mod store;
mod warnings;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::model::{RequestStateCodec, SealOptions};
use serde::{Deserialize, Serialize};

pub use keys::KeyRing;
pub use oob::{DecideError, Decider, MAX_REASON_BYTES, OutOfBand};
pub use pending::{
    DecisionMethod, MemoryPendingStore, PendingApproval, PendingState, PendingStore,
};
pub use pending_pg::PgPendingStore;
pub use postgres::PostgresStore;
pub use store::{ApprovalStore, MemoryStore, StoreError, StoreFuture};
pub use warnings::start_warnings;

use crate::clock::Clock;
use crate::digest;

/// Why an approval cannot be issued or redeemed.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    /// The state was tampered with, has expired, or was made for another call, tenant,
    /// principal or tool. One error for all, as the codec's guidance asks.
    #[error("the approval is invalid, expired, or was given for another call")]
    Invalid,
    /// The approval was already decided: used, declined or dismissed (one decision each).
    #[error("the approval was already used, declined or dismissed")]
    Replayed,
    /// The store of redeemed approvals cannot be reached.
    #[error("the approval store is unavailable: {0}")]
    Store(#[from] StoreError),
    /// The key ring cannot be built or used.
    #[error("approval keys: {0}")]
    Keys(String),
}

/// What an approval is for: the call it may run.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// The caller's tenant.
    pub tenant: &'a str,
    /// How the caller was authenticated (`jwt`, `mtls`, `local`, `anonymous`).
    pub method: &'a str,
    /// The caller's issuer (the JWT `iss`), empty for methods without one.
    pub issuer: &'a str,
    /// The caller's subject.
    pub subject: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// SHA-256 (hex) of the call's canonical arguments.
    pub arguments_sha256: &'a str,
}

impl Binding<'_> {
    /// The associated data the seal authenticates: each field length-prefixed.
    fn associated_data(&self) -> Vec<u8> {
        let mut data = b"querygate-approval/v2".to_vec();
        for field in [
            self.tenant,
            self.method,
            self.issuer,
            self.subject,
            self.tool,
            self.arguments_sha256,
        ] {
            data.extend_from_slice(&(field.len() as u64).to_be_bytes());
            data.extend_from_slice(field.as_bytes());
        }
        data
    }
}

/// The payload's format version: 2 carries the plan hash; a state of another version (one
/// sealed before an upgrade) does not open.
const STATE_VERSION: u8 = 2;

/// The sealed payload: readable by anyone holding the state, so it holds no secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalState {
    /// Format version.
    pub v: u8,
    /// The one-time id.
    pub id: String,
    /// The tenant it was issued to (also bound as associated data).
    pub tenant: String,
    /// The query class the call had when the approval was asked.
    pub class: String,
    /// The hash of the plan the person was shown: the call runs only if planning it again
    /// gives the same.
    pub plan: String,
    /// Expiry, milliseconds since the Unix epoch (the seal checks it too).
    pub expires_at_ms: u64,
}

/// Where one-time ids come from.
type IdSource = fn() -> Result<String, ring::error::Unspecified>;

/// Issues and redeems approvals.
#[derive(Debug, Clone)]
pub struct Approvals {
    codec: Arc<RequestStateCodec>,
    ttl: Duration,
    store: Arc<dyn ApprovalStore>,
    ids: IdSource,
    /// What expiry is stamped and checked on.
    clock: Clock,
}

impl Approvals {
    /// Approvals sealed with `keys`, valid for `ttl` on `clock`, redeemed in `store`.
    pub fn new(
        keys: &KeyRing,
        ttl: Duration,
        store: Arc<dyn ApprovalStore>,
        clock: Clock,
    ) -> Result<Self, ApprovalError> {
        Ok(Approvals {
            codec: Arc::new(keys.codec()?),
            ttl,
            store,
            ids: digest::random_id,
            clock,
        })
    }

    /// A fresh one-time id, for an approval asked in the middle of a call (a sealed one
    /// gets its id from [`Approvals::issue`]). Without randomness there is none, and the
    /// caller must not ask.
    pub fn new_id(&self) -> Result<String, ApprovalError> {
        (self.ids)().map_err(|_| ApprovalError::Keys("no randomness for an approval id".into()))
    }

    /// How long an issued approval stays redeemable.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Seals a new approval request for the call `binding` describes: the sealed state and
    /// its one-time id.
    pub fn issue(
        &self,
        binding: Binding<'_>,
        class: &str,
        plan: &str,
    ) -> Result<(String, ApprovalState), ApprovalError> {
        let id = self.new_id()?;
        let expires = self.clock.now() + self.ttl;
        let state = ApprovalState {
            v: STATE_VERSION,
            id,
            tenant: binding.tenant.to_owned(),
            class: class.to_owned(),
            plan: plan.to_owned(),
            expires_at_ms: millis(expires),
        };
        let ad = binding.associated_data();
        let sealed = self
            .codec
            .seal_json_with(
                &state,
                &SealOptions::new().associated_data(&ad).ttl(self.ttl),
            )
            .map_err(|err| ApprovalError::Keys(err.to_string()))?;
        Ok((sealed, state))
    }

    /// Opens a state the client sent back for the call `binding` describes.
    pub fn open(&self, sealed: &str, binding: Binding<'_>) -> Result<ApprovalState, ApprovalError> {
        let ad = binding.associated_data();
        let state: ApprovalState = self
            .codec
            .open_json_with(sealed, &ad)
            .map_err(|_| ApprovalError::Invalid)?;
        if state.v != STATE_VERSION
            || state.tenant != binding.tenant
            || state.expires_at_ms < millis(self.clock.now())
        {
            return Err(ApprovalError::Invalid);
        }
        Ok(state)
    }

    /// Redeems an opened approval: the first redemption of its id succeeds, any later one,
    /// on any replica sharing the store, is [`ApprovalError::Replayed`].
    pub async fn redeem(&self, state: &ApprovalState) -> Result<(), ApprovalError> {
        let expires = UNIX_EPOCH + Duration::from_millis(state.expires_at_ms);
        if self.store.redeem(&state.tenant, &state.id, expires).await? {
            Ok(())
        } else {
            Err(ApprovalError::Replayed)
        }
    }
}

fn millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approvals(keys: &KeyRing, ttl: Duration) -> Approvals {
        Approvals::new(keys, ttl, Arc::new(MemoryStore::default()), Clock::system()).unwrap()
    }

    fn binding<'a>(tool: &'a str, sha: &'a str) -> Binding<'a> {
        Binding {
            tenant: "acme",
            method: "jwt",
            issuer: "https://idp-a",
            subject: "alice",
            tool,
            arguments_sha256: sha,
        }
    }

    #[tokio::test]
    async fn a_state_opens_only_for_its_call_and_redeems_once() {
        let keys = KeyRing::from_keys(vec![vec![7; 32]]).unwrap();
        let a = approvals(&keys, Duration::from_secs(60));
        let (sealed, issued) = a
            .issue(binding("run_mutation_query", "aa"), "mutation_delete", "p1")
            .unwrap();
        let opened = a
            .open(&sealed, binding("run_mutation_query", "aa"))
            .unwrap();
        assert_eq!(opened, issued);
        for other in [
            binding("run_lifecycle_operation", "aa"),
            binding("run_mutation_query", "ab"),
            Binding {
                tenant: "other",
                ..binding("run_mutation_query", "aa")
            },
            Binding {
                subject: "mallory",
                ..binding("run_mutation_query", "aa")
            },
            Binding {
                issuer: "https://idp-b",
                ..binding("run_mutation_query", "aa")
            },
            Binding {
                method: "mtls",
                ..binding("run_mutation_query", "aa")
            },
        ] {
            assert!(matches!(
                a.open(&sealed, other),
                Err(ApprovalError::Invalid)
            ));
        }
        let mut tampered = sealed.clone();
        tampered.pop();
        tampered.push(if sealed.ends_with('A') { 'B' } else { 'A' });
        assert!(matches!(
            a.open(&tampered, binding("run_mutation_query", "aa")),
            Err(ApprovalError::Invalid)
        ));
        a.redeem(&opened).await.unwrap();
        assert!(matches!(
            a.redeem(&opened).await,
            Err(ApprovalError::Replayed)
        ));
    }

    #[test]
    fn an_approval_opens_until_its_ttl_has_passed_on_the_clock() {
        let keys = KeyRing::from_keys(vec![vec![3; 32]]).unwrap();
        let clock = crate::clock::TestClock::new();
        let a = Approvals::new(
            &keys,
            Duration::from_secs(300),
            Arc::new(MemoryStore::default()),
            clock.clock(),
        )
        .unwrap();
        let call = || binding("run_mutation_query", "aa");
        let (sealed, _) = a.issue(call(), "mutation_delete", "p1").unwrap();
        clock.advance(Duration::from_secs(299));
        assert!(a.open(&sealed, call()).is_ok());
        clock.advance(Duration::from_secs(2));
        assert!(matches!(
            a.open(&sealed, call()),
            Err(ApprovalError::Invalid)
        ));
    }

    #[test]
    fn no_id_no_approval() {
        let keys = KeyRing::from_keys(vec![vec![5; 32]]).unwrap();
        let mut a = approvals(&keys, Duration::from_secs(60));
        assert_eq!(a.new_id().unwrap().len(), 32);
        a.ids = || Err(ring::error::Unspecified);
        assert!(matches!(a.new_id(), Err(ApprovalError::Keys(_))));
        assert!(a.issue(binding("t", "x"), "lifecycle", "p1").is_err());
    }

    #[tokio::test]
    async fn rotation_other_replicas_and_expiry() {
        let old = vec![1u8; 32];
        let new = vec![2u8; 40];
        let before = approvals(
            &KeyRing::from_keys(vec![old.clone()]).unwrap(),
            Duration::from_secs(60),
        );
        let during = approvals(
            &KeyRing::from_keys(vec![new.clone(), old.clone()]).unwrap(),
            Duration::from_secs(60),
        );
        let after = approvals(
            &KeyRing::from_keys(vec![new]).unwrap(),
            Duration::from_secs(60),
        );
        let (sealed_old, _) = before.issue(binding("t", "x"), "lifecycle", "p1").unwrap();
        assert!(during.open(&sealed_old, binding("t", "x")).is_ok());
        assert!(after.open(&sealed_old, binding("t", "x")).is_err());
        let (sealed_new, _) = during.issue(binding("t", "x"), "lifecycle", "p1").unwrap();
        assert!(after.open(&sealed_new, binding("t", "x")).is_ok());
        assert!(before.open(&sealed_new, binding("t", "x")).is_err());

        let short = approvals(
            &KeyRing::from_keys(vec![vec![3; 32]]).unwrap(),
            Duration::from_millis(20),
        );
        let (sealed, _) = short.issue(binding("t", "x"), "lifecycle", "p1").unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(matches!(
            short.open(&sealed, binding("t", "x")),
            Err(ApprovalError::Invalid)
        ));
    }
}
