//! Out-of-band approvals: a call that needs approval, and whose client cannot be asked in
//! the call, is kept as a pending approval until someone decides it (the HTTP API, the CLI).
//! The call repeated after an approval runs once: the approval goes from `approved` to
//! `used` in one atomic step, in memory for one replica or in PostgreSQL for several.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::store::StoreError;

/// Who made the call an approval is for: the principal's method, issuer and subject.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Requester {
    /// How the principal was authenticated (`jwt`, `mtls`, `anonymous`, …).
    pub method: String,
    /// The JWT issuer, empty for other methods.
    pub issuer: String,
    /// The subject.
    pub subject: String,
}

/// What a pending approval is for: one call (tenant, principal, tool, arguments digest).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallKey {
    /// The tenant.
    pub tenant: String,
    /// Who made the call.
    pub requester: Requester,
    /// The tool.
    pub tool: String,
    /// SHA-256 of the call's canonical arguments.
    pub arguments_sha256: String,
}

/// The part of a pending approval fixed when it is made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRequest {
    /// Its id (128 random bits, hex).
    pub id: String,
    /// The tenant.
    pub tenant: String,
    /// Who made the call.
    pub requester: Requester,
    /// The tool.
    pub tool: String,
    /// The query class (`mutation_delete`, …).
    pub class: String,
    /// The tenant's mode when it was asked.
    pub mode: String,
    /// The SQL as the client sent it (show it escaped: [`crate::safe_text::escape_inline`]).
    pub sql: Option<String>,
    /// SHA-256 of the call's canonical arguments.
    pub arguments_sha256: String,
    /// The hash of the plan: the call runs only if planning it again gives the same.
    pub plan_hash: String,
    /// The writes the engine resolved, one line each (provider, verb, resource, method,
    /// how many requests; no credential is part of them).
    pub writes: Vec<String>,
    /// The upstream requests of each write, in the order of `writes`, as they would be
    /// sent before auth, secrets masked (empty in approvals made before previews existed).
    #[serde(default)]
    pub requests: Vec<WriteRequests>,
    /// The prompt a person asked in the call would see (trusted fields first, the SQL
    /// last, escaped onto one line).
    pub prompt: String,
    /// When it was made, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// When it expires (`approval.ttl` after it was made), milliseconds since the epoch.
    pub expires_at_ms: u64,
}

/// The requests of one write an approver is shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteRequests {
    /// The first requests (at most [`crate::engine::PREVIEW_REQUESTS`]), secrets masked.
    pub shown: Vec<crate::engine::RequestPreview>,
    /// How many more requests the write sends that are not shown.
    pub not_shown: usize,
}

impl WriteRequests {
    /// The requests of `write` an approver is shown.
    pub fn of(write: &crate::engine::PlannedWrite) -> Self {
        WriteRequests {
            shown: write.previews.clone(),
            not_shown: write.requests.saturating_sub(write.previews.len()),
        }
    }

    /// The lines that show the requests, each escaped onto one line: `Request <n>: <METHOD>
    /// <url>`, with its body and media type, then how many are not shown. The requests are
    /// as they would be sent before auth (no `Authorization` header is part of them),
    /// secrets masked as `***`.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .shown
            .iter()
            .enumerate()
            .map(|(index, request)| request_line(index + 1, request))
            .collect();
        if self.not_shown > 0 {
            lines.push(format!(
                "… and {} more requests like these, not shown",
                self.not_shown
            ));
        }
        lines
    }
}

/// One request as a line of the prompt (and the webhook's text) shows it.
fn request_line(number: usize, request: &crate::engine::RequestPreview) -> String {
    use crate::safe_text::escape_inline as inline;
    let mut line = format!(
        "Request {number}: {} {}",
        inline(&request.http_method),
        inline(&request.url)
    );
    if let Some(body) = &request.body {
        line.push_str(&format!(
            " · body ({}, {} bytes): {}",
            inline(request.media_type.as_deref().unwrap_or("no media type")),
            request.body_bytes,
            inline(body)
        ));
    }
    line
}

impl PendingRequest {
    /// The call it is for.
    pub fn key(&self) -> CallKey {
        CallKey {
            tenant: self.tenant.clone(),
            requester: self.requester.clone(),
            tool: self.tool.clone(),
            arguments_sha256: self.arguments_sha256.clone(),
        }
    }
}

/// Where an approval is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PendingState {
    /// Waiting for a decision.
    Pending,
    /// Approved: the call's next repetition runs it.
    Approved,
    /// Denied: the call is refused with the reason.
    Denied,
    /// Not decided (or not used) before its expiry.
    Expired,
    /// Approved and run: it runs nothing more.
    Used,
}

impl PendingState {
    /// The string in records, the API and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            PendingState::Pending => "pending",
            PendingState::Approved => "approved",
            PendingState::Denied => "denied",
            PendingState::Expired => "expired",
            PendingState::Used => "used",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "pending" => PendingState::Pending,
            "approved" => PendingState::Approved,
            "denied" => PendingState::Denied,
            "expired" => PendingState::Expired,
            "used" => PendingState::Used,
            _ => return None,
        })
    }
}

/// Through what a decision was made (`approval_method` in the audit record).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionMethod {
    /// The HTTP API (`POST /approvals/{id}/approve|deny`).
    Api,
    /// `querygate approvals approve|deny`.
    Cli,
    /// The approval web page (`/approve`), signed in with OpenID Connect.
    Web,
    /// `elicitation/create` in the call (stdio, the terminal of `querygate query`).
    Elicitation,
    /// A resumable round of MCP 2026-07-28.
    Mrtr,
}

impl DecisionMethod {
    /// The string in records and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionMethod::Api => "api",
            DecisionMethod::Cli => "cli",
            DecisionMethod::Web => "web",
            DecisionMethod::Elicitation => "elicitation",
            DecisionMethod::Mrtr => "mrtr",
        }
    }
}

/// Who decided an approval, how and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    /// The decider as a person reads it (`bob (https://idp.example.com)`, `cli:alice`).
    pub by: String,
    /// The decider's typed identity (`jwt:https://idp.example.com#bob`, `cli:alice`); empty
    /// in approvals stored before it was kept.
    #[serde(default)]
    pub by_id: String,
    /// Through what.
    pub method: DecisionMethod,
    /// The reason given (may be empty).
    pub reason: String,
    /// When, milliseconds since the epoch.
    pub at_ms: u64,
}

/// A pending approval and where it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// What it is for.
    #[serde(flatten)]
    pub request: PendingRequest,
    /// Its state as stored (see [`PendingApproval::state_at`] for the expiry).
    pub state: PendingState,
    /// The decision, once made.
    pub decision: Option<Decided>,
}

impl PendingApproval {
    /// Its state at `now_ms`: a pending or approved approval past its expiry is expired.
    pub fn state_at(&self, now_ms: u64) -> PendingState {
        match self.state {
            PendingState::Pending | PendingState::Approved
                if now_ms >= self.request.expires_at_ms =>
            {
                PendingState::Expired
            }
            state => state,
        }
    }

    /// Its state now.
    pub fn state_now(&self) -> PendingState {
        self.state_at(now_ms())
    }
}

/// Why a decision was not recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Undecided {
    /// No approval of that id in the tenant.
    NotFound,
    /// It is no longer pending (its state now).
    NotPending(PendingState),
    /// The decision's record could not be written (the error): nothing was decided.
    NotRecorded(String),
}

/// A new pending approval was not stored: its requester already holds this many pending
/// approvals in the tenant (`approval.max_pending_per_principal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooMany {
    /// The requester's pending approvals now.
    pub pending: u32,
}

/// What runs while a decision holds its approval, before the state changes: writes the
/// decision's audit record. An error leaves the approval pending.
pub type RecordDecision<'a> =
    Box<dyn FnOnce(&PendingApproval) -> BoxFuture<'a, Result<(), String>> + Send + 'a>;

/// The future a pending store returns.
pub type PendingFuture<'a, T> = BoxFuture<'a, Result<T, StoreError>>;

/// Where pending approvals are kept. Every operation names the tenant: nothing of one
/// tenant is found through another.
pub trait PendingStore: Send + Sync + std::fmt::Debug {
    /// The newest approval for the call `key` that can still say something: pending or
    /// approved (also past expiry, so the call learns it expired), or denied and not yet
    /// expired. Used and expired ones are not returned.
    fn current<'a>(&'a self, key: &'a CallKey) -> PendingFuture<'a, Option<PendingApproval>>;

    /// Stores `request` as pending, unless the call already has a pending one: then that
    /// one is returned (so concurrent calls, on any replica, share one approval).
    /// With a new one, the requester may hold at most `max_pending` pending, unexpired
    /// approvals in the tenant: beyond, nothing is stored ([`TooMany`]). Counted under a lock
    /// (in PostgreSQL: one per requester, across replicas).
    fn create(
        &self,
        request: PendingRequest,
        max_pending: u32,
    ) -> PendingFuture<'_, Result<PendingApproval, TooMany>>;

    /// The approval `id` of `tenant`.
    fn get<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> PendingFuture<'a, Option<PendingApproval>>;

    /// The approvals of `tenant`, newest first (expired ones are kept an hour).
    fn list<'a>(&'a self, tenant: &'a str) -> PendingFuture<'a, Vec<PendingApproval>>;

    /// Records a decision on a pending, unexpired approval: approved (`approve`) or denied.
    /// The approval is held from the check that it is pending to the change of its state,
    /// and `record` runs in between: of deciders racing on one approval (on any replica)
    /// exactly one records its decision and changes the state; the others find it decided.
    fn decide<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        approve: bool,
        decided: Decided,
        record: RecordDecision<'a>,
    ) -> PendingFuture<'a, Result<PendingApproval, Undecided>>;

    /// Records that the approval page's session `session_sha256` was signed out: refused
    /// until `until_ms` (when its cookie expires anyway), on every replica sharing the store.
    fn sign_out<'a>(&'a self, session_sha256: &'a str, until_ms: u64) -> PendingFuture<'a, ()>;

    /// Whether the approval page's session `session_sha256` was signed out.
    fn signed_out<'a>(&'a self, session_sha256: &'a str) -> PendingFuture<'a, bool>;

    /// Moves the approval from `from` to `to` if it is in `from` (and, when `from` is
    /// approved, not expired): `true` when this call moved it. `approved → used` is how a
    /// call redeems its approval: exactly one repetition, on any replica, gets `true`.
    fn transition<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        from: PendingState,
        to: PendingState,
    ) -> PendingFuture<'a, bool>;
}

/// How long an approval is kept after its expiry (for the API's list and the audit trail).
pub const RETENTION: Duration = Duration::from_secs(3600);

/// Now, milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Pending approvals in this process (one replica).
#[derive(Debug, Default)]
pub struct MemoryPendingStore {
    approvals: Mutex<HashMap<(String, String), PendingApproval>>,
    /// Held by a decision from its check to its state change (decisions are rare: one
    /// lock for the store).
    deciding: tokio::sync::Mutex<()>,
    /// Signed-out sessions of the approval page, each until its cookie expires.
    signed_out: Mutex<HashMap<String, u64>>,
}

impl MemoryPendingStore {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut HashMap<(String, String), PendingApproval>) -> T,
    ) -> Result<T, StoreError> {
        let mut approvals = self.approvals.lock().map_err(|_| StoreError::Poisoned)?;
        Ok(f(&mut approvals))
    }

    /// How many approvals it holds (any state).
    pub fn len(&self) -> usize {
        self.approvals.lock().map_or(0, |a| a.len())
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn current_of<'a>(
    approvals: impl Iterator<Item = &'a PendingApproval>,
    key: &CallKey,
    now: u64,
) -> Option<PendingApproval> {
    approvals
        .filter(|a| a.request.key() == *key)
        .filter(|a| match a.state {
            PendingState::Pending | PendingState::Approved => true,
            PendingState::Denied => now < a.request.expires_at_ms,
            PendingState::Expired | PendingState::Used => false,
        })
        .max_by_key(|a| a.request.created_at_ms)
        .cloned()
}

impl PendingStore for MemoryPendingStore {
    fn current<'a>(&'a self, key: &'a CallKey) -> PendingFuture<'a, Option<PendingApproval>> {
        let result = self.with(|approvals| current_of(approvals.values(), key, now_ms()));
        Box::pin(async move { result })
    }

    fn create(
        &self,
        request: PendingRequest,
        max_pending: u32,
    ) -> PendingFuture<'_, Result<PendingApproval, TooMany>> {
        let result = self.with(|approvals| {
            let now = now_ms();
            let keep = u64::try_from(RETENTION.as_millis()).unwrap_or(u64::MAX);
            approvals.retain(|_, a| a.request.expires_at_ms.saturating_add(keep) > now);
            let key = request.key();
            if let Some(existing) = approvals
                .values()
                .find(|a| a.state_at(now) == PendingState::Pending && a.request.key() == key)
            {
                return Ok(existing.clone());
            }
            let pending = approvals
                .values()
                .filter(|a| {
                    a.state_at(now) == PendingState::Pending
                        && a.request.tenant == request.tenant
                        && a.request.requester == request.requester
                })
                .count();
            let pending = u32::try_from(pending).unwrap_or(u32::MAX);
            if pending >= max_pending {
                return Err(TooMany { pending });
            }
            let approval = PendingApproval {
                request,
                state: PendingState::Pending,
                decision: None,
            };
            approvals.insert(
                (approval.request.tenant.clone(), approval.request.id.clone()),
                approval.clone(),
            );
            Ok(approval)
        });
        Box::pin(async move { result })
    }

    fn get<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> PendingFuture<'a, Option<PendingApproval>> {
        let result =
            self.with(|approvals| approvals.get(&(tenant.to_owned(), id.to_owned())).cloned());
        Box::pin(async move { result })
    }

    fn list<'a>(&'a self, tenant: &'a str) -> PendingFuture<'a, Vec<PendingApproval>> {
        let result = self.with(|approvals| {
            let mut list: Vec<PendingApproval> = approvals
                .values()
                .filter(|a| a.request.tenant == tenant)
                .cloned()
                .collect();
            list.sort_by_key(|a| std::cmp::Reverse(a.request.created_at_ms));
            list
        });
        Box::pin(async move { result })
    }

    fn decide<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        approve: bool,
        decided: Decided,
        record: RecordDecision<'a>,
    ) -> PendingFuture<'a, Result<PendingApproval, Undecided>> {
        Box::pin(async move {
            let _held = self.deciding.lock().await;
            let key = (tenant.to_owned(), id.to_owned());
            let pending = self.with(|approvals| match approvals.get(&key) {
                None => Err(Undecided::NotFound),
                Some(approval) => match approval.state_at(now_ms()) {
                    PendingState::Pending => Ok(approval.clone()),
                    other => Err(Undecided::NotPending(other)),
                },
            })?;
            let pending = match pending {
                Ok(pending) => pending,
                Err(undecided) => return Ok(Err(undecided)),
            };
            if let Err(error) = record(&pending).await {
                return Ok(Err(Undecided::NotRecorded(error)));
            }
            // Only a decision changes a pending approval, and this one holds the lock.
            self.with(|approvals| match approvals.get_mut(&key) {
                None => Err(Undecided::NotFound),
                Some(approval) => {
                    approval.state = if approve {
                        PendingState::Approved
                    } else {
                        PendingState::Denied
                    };
                    approval.decision = Some(decided);
                    Ok(approval.clone())
                }
            })
        })
    }

    fn sign_out<'a>(&'a self, session_sha256: &'a str, until_ms: u64) -> PendingFuture<'a, ()> {
        let result = self
            .signed_out
            .lock()
            .map(|mut signed_out| {
                let now = now_ms();
                signed_out.retain(|_, until| *until > now);
                signed_out.insert(session_sha256.to_owned(), until_ms);
            })
            .map_err(|_| StoreError::Poisoned);
        Box::pin(async move { result })
    }

    fn signed_out<'a>(&'a self, session_sha256: &'a str) -> PendingFuture<'a, bool> {
        let result = self
            .signed_out
            .lock()
            .map(|signed_out| signed_out.contains_key(session_sha256))
            .map_err(|_| StoreError::Poisoned);
        Box::pin(async move { result })
    }

    fn transition<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        from: PendingState,
        to: PendingState,
    ) -> PendingFuture<'a, bool> {
        let result =
            self.with(
                |approvals| match approvals.get_mut(&(tenant.to_owned(), id.to_owned())) {
                    Some(approval)
                        if approval.state == from
                            && (from != PendingState::Approved
                                || approval.state_at(now_ms()) == PendingState::Approved) =>
                    {
                        approval.state = to;
                        true
                    }
                    _ => false,
                },
            );
        Box::pin(async move { result })
    }
}

pub(super) fn parse_state(text: &str) -> Result<PendingState, StoreError> {
    PendingState::parse(text).ok_or_else(|| StoreError::Corrupt(format!("unknown state '{text}'")))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn request(id: &str, tenant: &str, ttl_ms: u64) -> PendingRequest {
        let now = now_ms();
        PendingRequest {
            id: id.to_owned(),
            tenant: tenant.to_owned(),
            requester: Requester {
                method: "jwt".into(),
                issuer: "https://idp".into(),
                subject: "alice".into(),
            },
            tool: "run_mutation_query".into(),
            class: "mutation_delete".into(),
            mode: "safe".into(),
            sql: Some(
                "DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-1'".into(),
            ),
            arguments_sha256: "a".repeat(64),
            plan_hash: "b".repeat(64),
            writes: vec![
                "testapi · DELETE testapi.widgets.widgets via method delete (1 request)".into(),
            ],
            requests: Vec::new(),
            prompt: "Approve run_mutation_query (mutation_delete)?\n\nTenant: acme\n…".repeat(4),
            created_at_ms: now,
            expires_at_ms: now + ttl_ms,
        }
    }

    #[test]
    fn requests_are_shown_one_escaped_line_each() {
        let requests = WriteRequests {
            shown: vec![crate::engine::RequestPreview {
                http_method: "POST".into(),
                url: "https://api.example.com/w?x=1".into(),
                headers: Vec::new(),
                media_type: Some("application/json".into()),
                body: Some("{\"name\":\"a\\nb\u{202e}\"}\nInjected: yes".into()),
                body_bytes: 30,
            }],
            not_shown: 4,
        };
        let lines = requests.lines();
        assert_eq!(lines.len(), 2);
        assert!(
            !lines[0].contains('\n') && !lines[0].contains('\u{202e}'),
            "{}",
            lines[0]
        );
        assert!(lines[0].starts_with(
            "Request 1: POST https://api.example.com/w?x=1 · body (application/json, 30 bytes): "
        ));
        assert_eq!(lines[1], "… and 4 more requests like these, not shown");
    }

    #[test]
    fn an_approval_stored_before_request_previews_still_reads() {
        let mut stored = serde_json::to_value(request("o1", "acme", 60_000)).unwrap();
        stored.as_object_mut().unwrap().remove("requests");
        let read: PendingRequest = serde_json::from_value(stored).unwrap();
        assert!(read.requests.is_empty());
        assert_eq!(read.writes.len(), 1);
    }

    fn no_record<'a>() -> RecordDecision<'a> {
        Box::new(|_| Box::pin(async { Ok(()) }))
    }

    fn decided() -> Decided {
        Decided {
            by: "bob".into(),
            by_id: "jwt:https://idp.example#bob".into(),
            method: DecisionMethod::Api,
            reason: "ok".into(),
            at_ms: now_ms(),
        }
    }

    #[tokio::test]
    async fn one_pending_per_call_one_decision_one_use() {
        let store = MemoryPendingStore::default();
        let first = store
            .create(request("a1", "acme", 60_000), 100)
            .await
            .unwrap()
            .unwrap();
        // The same call again: the same approval.
        let again = store
            .create(request("a2", "acme", 60_000), 100)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(again.request.id, "a1");
        // Another tenant's call is another approval, invisible to acme.
        store
            .create(request("g1", "globex", 60_000), 100)
            .await
            .unwrap()
            .unwrap();
        assert!(store.get("acme", "g1").await.unwrap().is_none());
        assert_eq!(store.list("acme").await.unwrap().len(), 1);
        assert_eq!(
            store
                .decide("globex", "a1", true, decided(), no_record())
                .await
                .unwrap(),
            Err(Undecided::NotFound)
        );
        let approved = store
            .decide("acme", "a1", true, decided(), no_record())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(approved.state, PendingState::Approved);
        assert_eq!(
            store
                .decide("acme", "a1", false, decided(), no_record())
                .await
                .unwrap(),
            Err(Undecided::NotPending(PendingState::Approved))
        );
        let key = first.request.key();
        let used = PendingState::Used;
        assert!(
            store
                .transition("acme", "a1", PendingState::Approved, used)
                .await
                .unwrap()
        );
        assert!(
            !store
                .transition("acme", "a1", PendingState::Approved, used)
                .await
                .unwrap()
        );
        assert!(store.current(&key).await.unwrap().is_none());
    }

    /// Resident memory of this process, bytes (Linux).
    fn rss() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        pages * 4096
    }

    #[tokio::test]
    #[ignore = "a measurement: cargo test --lib approval::pending -- --ignored --nocapture"]
    async fn memory_of_a_thousand_pending_approvals() {
        async fn fill(store: &MemoryPendingStore, tenant: &str) -> usize {
            let mut json = 0;
            for i in 0..1000u32 {
                let mut r = request(&format!("{i:032x}"), tenant, 300_000);
                r.arguments_sha256 = format!("{i:064x}");
                // A prompt as the gate writes it (~560 bytes).
                r.prompt = format!(
                    "Approve run_mutation_query (mutation_delete)?\n\nTenant: acme\nPrincipal: alice (https://idp.example.com)\nTool: run_mutation_query\nClass: mutation_delete\nMode: safe\nProvider: {}\nPlan: sha256:{}\n\nSQL as the client sent it (escaped, on one line): {}",
                    r.writes[0],
                    r.plan_hash,
                    r.sql.clone().unwrap_or_default()
                );
                let made = store.create(r, 100).await.unwrap().unwrap();
                json += serde_json::to_vec(&made).unwrap().len();
            }
            json
        }
        let store = MemoryPendingStore::default();
        // Warm the allocator up with a first thousand, then measure a second.
        fill(&store, "warm").await;
        let before = rss();
        let json = fill(&store, "acme").await;
        let after = rss();
        assert_eq!(store.len(), 2000);
        println!(
            "1000 pending approvals: RSS +{} KiB ({} B each); JSON {} KiB ({} B each)",
            after.saturating_sub(before) / 1024,
            after.saturating_sub(before) / 1000,
            json / 1024,
            json / 1000
        );
    }

    #[tokio::test]
    async fn an_expired_approval_cannot_be_decided_or_used() {
        let store = MemoryPendingStore::default();
        store
            .create(request("e1", "acme", 0), 100)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            store
                .decide("acme", "e1", true, decided(), no_record())
                .await
                .unwrap(),
            Err(Undecided::NotPending(PendingState::Expired))
        );
        let current = store.current(&request("x", "acme", 0).key()).await.unwrap();
        assert_eq!(current.unwrap().state_now(), PendingState::Expired);
    }
}
