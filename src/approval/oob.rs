//! Out-of-band approval as a service: the store of pending approvals, who may decide them
//! (`approval.approvers`, `require_distinct_approver`), the decision (audited before it is
//! stored), the link and the webhook that announces a new pending approval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use serde_json::Value;

use super::pending::{
    Decided, DecisionMethod, PendingApproval, PendingRequest, PendingState, PendingStore,
    RecordDecision, Undecided, now_ms,
};
use super::store::StoreError;
use crate::audit::Auditor;
use crate::audit::record::{self, AuditRecord, Decision, Phase};
use crate::auth::{Method, Principal};
use crate::code::Code;
use crate::config::{ApprovalConfig, ApproverRule};
use crate::safe_text::escape_inline;

/// The longest reason a decider may give (bytes); longer ones are refused.
pub const MAX_REASON_BYTES: usize = 1024;

/// Who decides: a principal of the HTTP API, or the operator at `querygate approvals`.
#[derive(Debug, Clone, Copy)]
pub enum Decider<'a> {
    /// An authenticated caller of the API.
    Principal(&'a Principal),
    /// A person signed in to the approval web page (OpenID Connect): a principal of the
    /// tenant its ID token names, under the same rules as a caller of the API.
    Web(&'a Principal),
    /// The local operator of the CLI (its operating-system user): whoever can reach the
    /// database with the service's credentials can change any row anyway, so the approver
    /// rules do not narrow it; `require_distinct_approver` still applies.
    Operator(&'a str),
}

impl Decider<'_> {
    /// As a person reads it, for the record and the API.
    pub fn display(&self) -> String {
        match self {
            Decider::Principal(p) | Decider::Web(p) => p.display_name(),
            Decider::Operator(user) => format!("cli:{user}"),
        }
    }

    /// The decider's typed identity: the principal's typed name, `cli:<os user>` for the
    /// CLI's operator.
    pub fn typed_name(&self) -> String {
        match self {
            Decider::Principal(p) | Decider::Web(p) => p.typed_name(),
            Decider::Operator(user) => format!("cli:{user}"),
        }
    }

    /// The authenticated principal deciding, if it is one (not the CLI's operator).
    pub fn principal(&self) -> Option<&Principal> {
        match self {
            Decider::Principal(p) | Decider::Web(p) => Some(p),
            Decider::Operator(_) => None,
        }
    }

    fn method(&self) -> DecisionMethod {
        match self {
            Decider::Principal(_) => DecisionMethod::Api,
            Decider::Web(_) => DecisionMethod::Web,
            Decider::Operator(_) => DecisionMethod::Cli,
        }
    }

    /// Whether this decider is the principal that made the call.
    fn is_requester(&self, request: &PendingRequest) -> bool {
        match self {
            Decider::Principal(p) | Decider::Web(p) => {
                p.method.as_str() == request.requester.method
                    && p.issuer.as_deref().unwrap_or_default() == request.requester.issuer
                    && p.subject == request.requester.subject
            }
            // A call made by the local user of `querygate query` or stdio.
            Decider::Operator(_) => request.requester.method == Method::Local.as_str(),
        }
    }
}

/// Why a decision (or a look) was refused.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// No approval of that id in the decider's tenant (another tenant's is not found
    /// either).
    #[error("no approval '{0}' in this tenant")]
    NotFound(String),
    /// The decider may not see or decide it.
    #[error("{0}")]
    NotAllowed(String),
    /// It is no longer pending.
    #[error("the approval is {0}, not pending: it cannot be decided any more")]
    NotPending(&'static str),
    /// The request is malformed (a reason too long).
    #[error("{0}")]
    Invalid(String),
    /// The store cannot be reached.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The decision's audit record could not be written: nothing was decided.
    #[error("the decision's audit record could not be written ({0}); nothing was decided")]
    Audit(String),
}

impl DecideError {
    /// The stable code.
    pub fn code(&self) -> Code {
        match self {
            DecideError::NotFound(_) => Code::ApprovalNotFound,
            DecideError::NotAllowed(_) => Code::ApprovalNotAllowed,
            DecideError::NotPending(_) => Code::ApprovalConflict,
            DecideError::Invalid(_) => Code::ArgumentsInvalid,
            DecideError::Store(err) => err.code(),
            DecideError::Audit(_) => Code::AuditUnavailable,
        }
    }

    /// The HTTP status the API answers with.
    pub fn status(&self) -> u16 {
        match self {
            DecideError::NotFound(_) => 404,
            DecideError::NotAllowed(_) => 403,
            DecideError::NotPending(_) => 409,
            DecideError::Invalid(_) => 400,
            DecideError::Store(_) | DecideError::Audit(_) => 503,
        }
    }
}

/// Out-of-band approvals: the store and the rules.
#[derive(Debug)]
pub struct OutOfBand {
    store: Arc<dyn PendingStore>,
    config: ApprovalConfig,
    webhook: Option<Webhook>,
    /// Seals the approval page's cookies (keys derived from the approval key ring).
    session: Option<Arc<rmcp::model::RequestStateCodec>>,
}

#[derive(Debug)]
struct Webhook {
    client: reqwest::Client,
    url: String,
    pacer: Pacer,
}

/// How many announcements each tenant has sent in its current minute.
#[derive(Debug)]
struct Pacer {
    paced: Mutex<HashMap<String, Pace>>,
    max_per_minute: u32,
}

/// One tenant's announcements in the minute that began at `started`.
#[derive(Debug)]
struct Pace {
    started: Instant,
    sent: u32,
    skipped: u32,
}

/// How long one pacing window of the webhook lasts.
const PACE_WINDOW: Duration = Duration::from_secs(60);

impl Pacer {
    fn new(max_per_minute: u32) -> Self {
        Pacer {
            paced: Mutex::new(HashMap::new()),
            max_per_minute,
        }
    }

    /// Whether an announcement of `tenant` goes out at `now`: `Some(skipped)` (how many of
    /// the tenant's were left out before it, to say so) while the tenant has sent fewer
    /// than `max_per_minute` in its window, else `None` (counted as skipped).
    fn admit(&self, tenant: &str, now: Instant) -> Option<u32> {
        let Ok(mut paced) = self.paced.lock() else {
            return Some(0);
        };
        paced.retain(|_, p| now.duration_since(p.started) < PACE_WINDOW || p.skipped > 0);
        let pace = paced.entry(tenant.to_owned()).or_insert(Pace {
            started: now,
            sent: 0,
            skipped: 0,
        });
        if now.duration_since(pace.started) >= PACE_WINDOW {
            pace.started = now;
            pace.sent = 0;
        }
        if pace.sent >= self.max_per_minute {
            pace.skipped += 1;
            if pace.skipped == 1 {
                tracing::warn!(
                    tenant = %escape_inline(tenant),
                    "the approval webhook announced {} approvals of this tenant in the last minute (approval.webhook.max_per_minute): further ones are not announced until the minute ends",
                    pace.sent
                );
            }
            return None;
        }
        pace.sent += 1;
        Some(std::mem::take(&mut pace.skipped))
    }
}

impl OutOfBand {
    /// Out-of-band approvals kept in `store`, as `config` says.
    pub fn new(config: &ApprovalConfig, store: Arc<dyn PendingStore>) -> Result<Self, String> {
        let webhook = match &config.webhook {
            Some(hook) => {
                let tls = crate::client_tls::web_pki()?;
                let client = reqwest::Client::builder()
                    .tls_backend_preconfigured(tls)
                    .timeout(hook.timeout)
                    .redirect(reqwest::redirect::Policy::none())
                    .user_agent(concat!("querygate/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .map_err(|err| format!("approval webhook client: {err}"))?;
                Some(Webhook {
                    client,
                    url: hook.url.clone(),
                    pacer: Pacer::new(hook.max_per_minute),
                })
            }
            None => None,
        };
        Ok(OutOfBand {
            store,
            config: config.clone(),
            webhook,
            session: None,
        })
    }

    /// Seals the approval page's cookies with keys derived from `keys` (so replicas sharing
    /// `approval.key_files` accept each other's sign-ins, and keys rotate together).
    pub fn with_session_keys(mut self, keys: &super::KeyRing) -> Result<Self, String> {
        let codec = keys
            .derived_codec("querygate-approval-web/session/v1")
            .map_err(|err| err.to_string())?;
        self.session = Some(Arc::new(codec));
        Ok(self)
    }

    /// The codec of the approval page's cookies, when [`OutOfBand::with_session_keys`] set it.
    pub fn session_codec(&self) -> Option<Arc<rmcp::model::RequestStateCodec>> {
        self.session.clone()
    }

    /// The store.
    pub fn store(&self) -> &dyn PendingStore {
        self.store.as_ref()
    }

    /// The settings.
    pub fn config(&self) -> &ApprovalConfig {
        &self.config
    }

    /// The link of approval `id`: `<approval.link_base>/<id>`, else `/approvals/<id>`.
    pub fn link(&self, id: &str) -> String {
        match &self.config.link_base {
            Some(base) => format!("{base}/{id}"),
            None => format!("/approvals/{id}"),
        }
    }

    /// Tells the webhook of a new pending approval, in the background: a failure (or a
    /// timeout, `approval.webhook.timeout`) is logged, never fatal to the call. At most
    /// `approval.webhook.max_per_minute` per tenant; the next one sent says how many were
    /// left out.
    pub fn announce(&self, approval: &PendingApproval) {
        let Some(hook) = &self.webhook else {
            return;
        };
        let Some(skipped) = hook.pacer.admit(&approval.request.tenant, Instant::now()) else {
            return;
        };
        let mut text = announcement(approval, &self.link(&approval.request.id));
        if skipped > 0 {
            text.push_str(&format!(
                "\n(and {skipped} more approvals of this tenant requested before this one, not announced: approval.webhook.max_per_minute)"
            ));
        }
        let body = serde_json::json!({ "text": slack_text(&text) });
        let request = hook
            .client
            .post(&hook.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        let tenant = approval.request.tenant.clone();
        let id = approval.request.id.clone();
        tokio::spawn(async move {
            match request.send().await {
                Ok(response) if response.status().is_success() => {}
                Ok(response) => tracing::warn!(
                    %tenant,
                    approval_id = %id,
                    "the approval webhook answered {}",
                    response.status()
                ),
                Err(err) => tracing::warn!(
                    %tenant,
                    approval_id = %id,
                    "the approval webhook could not be told: {}",
                    crate::safe_text::escape_controls(&err.without_url().to_string())
                ),
            }
        });
    }

    /// Whether `decider` may see the approvals of `tenant`: a principal of that tenant that
    /// some approver rule of the tenant names (for any class).
    pub fn may_view(&self, decider: &Principal, tenant: &str) -> Result<(), DecideError> {
        if decider.tenant != tenant {
            return Err(DecideError::NotAllowed(format!(
                "a principal of tenant '{}' may not see the approvals of another tenant",
                escape_inline(&decider.tenant)
            )));
        }
        if self
            .rules(tenant)
            .any(|rule| matches(rule, decider, &self.config.groups_claim))
        {
            Ok(())
        } else {
            Err(DecideError::NotAllowed(format!(
                "{} is not an approver of tenant '{}' (approval.approvers)",
                escape_inline(&decider.display_name()),
                escape_inline(tenant)
            )))
        }
    }

    /// Whether `decider` may decide `request`: of its tenant, named by a rule for its class,
    /// and (with `require_distinct_approver`) not the principal that made the call.
    pub fn may_decide(
        &self,
        decider: Decider<'_>,
        request: &PendingRequest,
    ) -> Result<(), DecideError> {
        if let Some(p) = decider.principal() {
            if p.tenant != request.tenant {
                return Err(DecideError::NotFound(request.id.clone()));
            }
            if matches!(p.method, Method::Anonymous) {
                return Err(DecideError::NotAllowed(
                    "an unauthenticated caller cannot decide approvals (configure auth)".into(),
                ));
            }
            let named = self
                .rules(&request.tenant)
                .filter(|rule| rule.classes.is_empty() || rule.classes.contains(&request.class))
                .any(|rule| matches(rule, p, &self.config.groups_claim));
            if !named {
                return Err(DecideError::NotAllowed(format!(
                    "{} may not decide {} approvals of tenant '{}' (approval.approvers)",
                    escape_inline(&p.display_name()),
                    request.class,
                    escape_inline(&request.tenant)
                )));
            }
        }
        if self.config.require_distinct_approver && decider.is_requester(request) {
            return Err(DecideError::NotAllowed(
                "the principal that made the call cannot approve or deny it (approval.require_distinct_approver)".into(),
            ));
        }
        Ok(())
    }

    fn rules<'a>(&'a self, tenant: &'a str) -> impl Iterator<Item = &'a ApproverRule> + 'a {
        self.config
            .approvers
            .iter()
            .filter(move |r| r.tenant == tenant)
    }

    /// The approval `id` of `tenant`, if `decider` may see it.
    pub async fn show(
        &self,
        decider: Decider<'_>,
        tenant: &str,
        id: &str,
    ) -> Result<PendingApproval, DecideError> {
        if let Some(p) = decider.principal() {
            if p.tenant != tenant {
                return Err(DecideError::NotFound(id.to_owned()));
            }
            self.may_view(p, tenant)?;
        }
        self.store
            .get(tenant, id)
            .await?
            .ok_or_else(|| DecideError::NotFound(id.to_owned()))
    }

    /// Approves (`approve`) or denies approval `id` of `tenant` for `decider`, with
    /// `reason`: checks who may, writes the decision's audit record (durable first), then
    /// stores the decision if the approval is still pending.
    pub async fn decide(
        &self,
        decider: Decider<'_>,
        tenant: &str,
        id: &str,
        approve: bool,
        reason: &str,
        audit: Option<&Auditor>,
    ) -> Result<PendingApproval, DecideError> {
        if reason.len() > MAX_REASON_BYTES {
            return Err(DecideError::Invalid(format!(
                "the reason holds {} bytes; at most {MAX_REASON_BYTES}",
                reason.len()
            )));
        }
        let approval = match decider.principal() {
            Some(p) if p.tenant != tenant => {
                return Err(DecideError::NotFound(id.to_owned()));
            }
            _ => self
                .store
                .get(tenant, id)
                .await?
                .ok_or_else(|| DecideError::NotFound(id.to_owned()))?,
        };
        self.may_decide(decider, &approval.request)?;
        let state = approval.state_now();
        if state != PendingState::Pending {
            return Err(DecideError::NotPending(state.as_str()));
        }
        let decided = Decided {
            by: decider.display(),
            by_id: decider.typed_name(),
            method: decider.method(),
            reason: reason.to_owned(),
            at_ms: now_ms(),
        };
        // The decision's record is written while the store holds the approval, before its
        // state changes: durable first, and once, however many decide at the same time.
        let record_decided = decided.clone();
        let record: RecordDecision<'_> = Box::new(move |held: &PendingApproval| {
            let record =
                audit.map(|_| decision_record(decider, &held.request, approve, &record_decided));
            Box::pin(async move {
                match (audit, record) {
                    (Some(auditor), Some(record)) => auditor
                        .record(record)
                        .await
                        .map(drop)
                        .map_err(|failure| failure.error.to_string()),
                    _ => Ok(()),
                }
            })
        });
        match self
            .store
            .decide(tenant, id, approve, decided, record)
            .await?
        {
            Ok(approval) => Ok(approval),
            Err(Undecided::NotFound) => Err(DecideError::NotFound(id.to_owned())),
            Err(Undecided::NotPending(state)) => Err(DecideError::NotPending(state.as_str())),
            Err(Undecided::NotRecorded(error)) => Err(DecideError::Audit(error)),
        }
    }
}

/// Whether `rule` names `principal`: by its typed name, by a group of its issuer's groups
/// claim the rule names for that issuer, or by all the claims of a token of the rule's
/// issuer. A name bound to one issuer never matches a token of another.
fn matches(rule: &ApproverRule, principal: &Principal, groups_claim: &str) -> bool {
    if principal.tenant != rule.tenant || matches!(principal.method, Method::Anonymous) {
        return false;
    }
    if rule.subjects.contains(&principal.typed_name()) {
        return true;
    }
    let (Method::Jwt, Some(issuer), Some(claims)) = (
        principal.method,
        principal.issuer.as_deref(),
        principal.claims.as_deref(),
    ) else {
        return false;
    };
    let holds = |claim: &str, value: &str| match claims.get(claim) {
        Some(Value::String(s)) => s == value,
        Some(Value::Array(items)) => items.iter().any(|i| i.as_str() == Some(value)),
        _ => false,
    };
    let in_group = |typed: &String| {
        typed
            .strip_prefix("jwt:")
            .and_then(|rest| rest.strip_prefix(issuer))
            .and_then(|rest| rest.strip_prefix('#'))
            .is_some_and(|group| holds(groups_claim, group))
    };
    if rule.groups.iter().any(in_group) {
        return true;
    }
    rule.issuer.as_deref() == Some(issuer)
        && !rule.claims.is_empty()
        && rule.claims.iter().all(|(k, v)| holds(k, v))
}

/// `text` as Slack's message format shows it literally: `&`, `<` and `>` are its control
/// characters (`<!channel>` notifies a channel, `<https://x|label>` disguises a link), so
/// SQL or a subject carrying them is escaped as Slack asks, `&amp;`, `&lt;`, `&gt;`.
fn slack_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            other => out.push(other),
        }
    }
    out
}

/// The webhook's text: trusted fields first, the SQL last, escaped onto one line.
fn announcement(approval: &PendingApproval, link: &str) -> String {
    let r = &approval.request;
    let requester = if r.requester.issuer.is_empty() {
        r.requester.subject.clone()
    } else {
        format!("{} ({})", r.requester.subject, r.requester.issuer)
    };
    let mut text = format!(
        "Approval requested: {} ({}) for tenant {} by {}\nApproval: {}\nLink: {}\nExpires: {}",
        r.tool,
        r.class,
        escape_inline(&r.tenant),
        escape_inline(&requester),
        r.id,
        link,
        record::timestamp(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(r.expires_at_ms)
        ),
    );
    for (index, write) in r.writes.iter().enumerate() {
        text.push_str("\nWrite: ");
        text.push_str(&escape_inline(write));
        for line in r.requests.get(index).map(|w| w.lines()).unwrap_or_default() {
            text.push_str("\n  ");
            text.push_str(&line);
        }
    }
    text.push_str(&format!("\nPlan: sha256:{}", r.plan_hash));
    if let Some(sql) = &r.sql {
        text.push_str("\nSQL (escaped, on one line): ");
        text.push_str(&escape_inline(sql));
    }
    text
}

fn decision_record(
    decider: Decider<'_>,
    request: &PendingRequest,
    approve: bool,
    decided: &Decided,
) -> AuditRecord {
    let (principal, issuer, auth_method, os_user) = match decider {
        Decider::Principal(p) | Decider::Web(p) => (
            p.subject.clone(),
            p.issuer.clone(),
            p.method.as_str().to_owned(),
            None,
        ),
        Decider::Operator(user) => (
            format!("cli:{user}"),
            None,
            Method::Local.as_str().to_owned(),
            Some(user.to_owned()),
        ),
    };
    AuditRecord {
        timestamp: record::timestamp_now(),
        phase: Phase::ApprovalDecision,
        call_id: record::new_call_id(),
        tenant: request.tenant.clone(),
        principal,
        issuer,
        auth_method,
        os_user,
        tool: request.tool.clone(),
        mode: request.mode.clone(),
        decision: if approve {
            Decision::NeedsApprovalAccepted
        } else {
            Decision::NeedsApprovalDeclined
        },
        query_class: Some(request.class.clone()),
        sql: request.sql.clone(),
        approval_id: Some(request.id.clone()),
        approver: Some(decided.by.clone()),
        approver_id: Some(decided.by_id.clone()),
        approval_method: Some(decided.method.as_str().to_owned()),
        approval_reason: Some(decided.reason.clone()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_webhook_announces_at_most_max_per_minute_per_tenant_and_says_what_it_left_out() {
        let hook = Pacer::new(2);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(hook.admit("acme", at(0)), Some(0));
        assert_eq!(hook.admit("acme", at(1)), Some(0));
        assert_eq!(hook.admit("acme", at(2)), None);
        assert_eq!(hook.admit("acme", at(3)), None);
        // Another tenant has its own minute.
        assert_eq!(hook.admit("globex", at(3)), Some(0));
        // The next minute: the first one sent says two were left out, once.
        assert_eq!(hook.admit("acme", at(60)), Some(2));
        assert_eq!(hook.admit("acme", at(61)), Some(0));
        assert_eq!(hook.admit("acme", at(62)), None);
    }

    #[test]
    fn slack_control_characters_in_the_webhook_text_are_shown_not_acted_on() {
        assert_eq!(
            slack_text(
                "DELETE … WHERE name = '<!channel>' AND x = '<https://evil.example|docs> & co'"
            ),
            "DELETE … WHERE name = '&lt;!channel&gt;' AND x = '&lt;https://evil.example|docs&gt; &amp; co'"
        );
        assert_eq!(
            slack_text("Link: https://ops.example/approvals/a1"),
            "Link: https://ops.example/approvals/a1"
        );
    }
}
