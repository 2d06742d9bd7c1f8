//! The `approval:` section: how approvals of single calls are sealed and redeemed, and how
//! out-of-band approvals are kept, announced and decided (who may approve what).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::principal_name::{GroupName, PrincipalName};
use super::problems::Problems;

/// Where redeemed approval ids are kept, so each approval runs its call at most once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStoreKind {
    /// In this process (one replica).
    #[default]
    Memory,
    /// In PostgreSQL (the `database:` section), shared by every replica.
    Postgres,
}

/// When a call that needs approval is approved out of band (a pending approval decided
/// through the HTTP API or the CLI) instead of in the call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutOfBand {
    /// Never: only clients that can be asked in the call get writes approved.
    #[default]
    Off,
    /// For clients that cannot be asked in the call (older protocols over stateless HTTP,
    /// clients without elicitation); the others are asked in the call as before.
    Fallback,
    /// For every MCP client, also those that could be asked in the call: a person other
    /// than the one at the chat decides.
    Always,
}

impl OutOfBand {
    /// The string in configuration and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            OutOfBand::Off => "off",
            OutOfBand::Fallback => "fallback",
            OutOfBand::Always => "always",
        }
    }
}

/// The webhook told of every new pending approval (`approval.webhook`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Where the JSON (`{"text": …}`, Slack-compatible) is POSTed.
    pub url: String,
    /// How long one delivery may take.
    pub timeout: Duration,
    /// Announcements per tenant and minute at most; further ones are left out (and the
    /// next one says how many).
    pub max_per_minute: u32,
}

/// Who may decide the pending approvals of a tenant (`approval.approvers[]`). A decider
/// matches when it is of `tenant`, the approval's class is in `classes` (empty: every
/// class), and its typed name is in `subjects`, or one of its typed groups (the JWT claim
/// `approval.groups_claim` of the issuer the group names) is in `groups`, or it holds a
/// token of `issuer` in which every claim of `claims` has the value given. Names are typed
/// ([`super::PrincipalName`], [`super::GroupName`]): a bare name is refused at load.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproverRule {
    /// The tenant whose approvals this rule lets decide.
    pub tenant: String,
    /// Query classes (`mutation_create`, `mutation_delete`, `lifecycle`, `select`); empty:
    /// all.
    #[serde(default)]
    pub classes: Vec<String>,
    /// Principals by typed name: `jwt:<issuer>#<sub>`, or `uri:`, `dns:`, `cn:` for a client
    /// certificate's identity.
    #[serde(default)]
    pub subjects: Vec<String>,
    /// Groups by typed name, `jwt:<issuer>#<group>`: a name in the groups claim of a token of
    /// that issuer.
    #[serde(default)]
    pub groups: Vec<String>,
    /// JWT claims and the value each must have (a string claim equal to it, or an array
    /// claim holding it); all must match, in a token of `issuer`.
    #[serde(default)]
    pub claims: BTreeMap<String, String>,
    /// The issuer whose tokens `claims` is tested on; required with `claims`.
    #[serde(default)]
    pub issuer: Option<String>,
}

/// The approval web page (`approval.web`): `/approve` on the main listener, signed in with
/// OpenID Connect (authorization code with PKCE) against an issuer of `auth.jwt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebConfig {
    /// The OpenID provider's issuer URL: its `/.well-known/openid-configuration` is read,
    /// and it must be one of `auth.jwt.issuers[]` (whose keys verify the ID token and whose
    /// tenants it may name).
    pub issuer: String,
    /// The client id registered at the provider (the ID token's audience).
    pub client_id: String,
    /// The environment variable holding the client secret (`client_secret_basic`); `None`:
    /// a public client (PKCE only).
    pub client_secret_env: Option<String>,
    /// This server's URL as the browser reaches it (e.g. `https://querygate.example`): the
    /// redirect URI is `<base_url>/approve/callback`, approval links `<base_url>/approve/<id>`.
    pub base_url: String,
    /// The scopes asked for (`openid` always among them).
    pub scopes: Vec<String>,
    /// How long a sign-in lasts (the session cookie's lifetime).
    pub session_ttl: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWeb {
    issuer: String,
    client_id: String,
    #[serde(default)]
    client_secret_env: Option<String>,
    base_url: String,
    #[serde(default = "web_scopes")]
    scopes: Vec<String>,
    #[serde(default = "web_session_ttl", with = "humantime_serde")]
    session_ttl: Duration,
}

fn web_scopes() -> Vec<String> {
    vec!["openid".to_owned()]
}

fn web_session_ttl() -> Duration {
    Duration::from_secs(15 * 60)
}

/// Approval settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalConfig {
    /// Files holding the HMAC keys that seal approval requests: the first seals, all open.
    /// Empty: a random key made at start (one replica only).
    pub key_files: Vec<PathBuf>,
    /// How long an approval request stays redeemable.
    pub ttl: Duration,
    /// Where redeemed approvals are recorded, and where pending out-of-band approvals are
    /// kept.
    pub store: ApprovalStoreKind,
    /// When calls are approved out of band.
    pub out_of_band: OutOfBand,
    /// How long a call needing out-of-band approval waits for the decision before it
    /// returns the pending result.
    pub wait: Duration,
    /// The base URL of approval links: `<link_base>/<id>` (e.g. a chat-ops page or this
    /// server's `/approvals`); `None`: the API path `/approvals/<id>`.
    pub link_base: Option<String>,
    /// The webhook told of new pending approvals.
    pub webhook: Option<WebhookConfig>,
    /// Who may decide out-of-band approvals, per tenant and class.
    pub approvers: Vec<ApproverRule>,
    /// Pending approvals one principal may hold in a tenant at once; a call that would make
    /// one more is refused (`limit.exceeded`).
    pub max_pending_per_principal: u32,
    /// The JWT claim that holds a principal's groups.
    pub groups_claim: String,
    /// Whether the principal that made a call may not approve it (four eyes).
    pub require_distinct_approver: bool,
    /// The approval web page, signed in with OpenID Connect; `None`: not served.
    pub web: Option<WebConfig>,
    /// Whether the pending result of a client of MCP 2025-11-25 or older over stateless
    /// HTTP is a URL-mode elicitation (JSON-RPC error -32042 pointing at the page) instead
    /// of the `policy.approval_pending` tool error.
    pub url_elicitation: bool,
}

impl ApprovalConfig {
    /// Whether out-of-band approval is on.
    pub fn out_of_band_enabled(&self) -> bool {
        self.out_of_band != OutOfBand::Off
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
    url: String,
    #[serde(default = "webhook_timeout", with = "humantime_serde")]
    timeout: Duration,
    #[serde(default = "webhook_max_per_minute")]
    max_per_minute: u32,
}

fn webhook_max_per_minute() -> u32 {
    20
}

fn webhook_timeout() -> Duration {
    Duration::from_secs(5)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawApproval {
    pub(super) key_files: Vec<PathBuf>,
    #[serde(with = "humantime_serde")]
    pub(super) ttl: Duration,
    pub(super) store: ApprovalStoreKind,
    pub(super) out_of_band: OutOfBand,
    #[serde(with = "humantime_serde")]
    pub(super) wait: Duration,
    pub(super) link_base: Option<String>,
    pub(super) webhook: Option<RawWebhook>,
    pub(super) approvers: Vec<ApproverRule>,
    pub(super) max_pending_per_principal: u32,
    pub(super) groups_claim: String,
    pub(super) require_distinct_approver: bool,
    pub(super) web: Option<RawWeb>,
    pub(super) url_elicitation: bool,
}

impl Default for RawApproval {
    fn default() -> Self {
        RawApproval {
            key_files: Vec::new(),
            ttl: Duration::from_secs(300),
            store: ApprovalStoreKind::Memory,
            out_of_band: OutOfBand::Off,
            wait: Duration::from_secs(30),
            link_base: None,
            webhook: None,
            approvers: Vec::new(),
            max_pending_per_principal: 10,
            groups_claim: "groups".to_owned(),
            require_distinct_approver: true,
            web: None,
            url_elicitation: false,
        }
    }
}

/// The classes an approver rule may name.
const CLASSES: [&str; 4] = ["select", "mutation_create", "mutation_delete", "lifecycle"];

fn http_url(value: &str) -> bool {
    url::Url::parse(value).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
}

/// Checks the section, pushing each problem with its key.
#[expect(
    clippy::too_many_lines,
    reason = "one check per key of the approval section, each pushing its own problem"
)]
pub(super) fn check_approval(raw: RawApproval, problems: &mut Problems) -> ApprovalConfig {
    if raw.ttl.is_zero() {
        problems.push("approval.ttl", "must be greater than 0");
    } else if raw.ttl > Duration::from_secs(24 * 3600) {
        problems.push("approval.ttl", "must be at most 24h");
    }
    for (i, file) in raw.key_files.iter().enumerate() {
        if raw.key_files[..i].contains(file) {
            problems.push(
                "approval.key_files",
                format!("names '{}' twice", file.display()),
            );
        }
    }
    // Key files let every replica, and every later process, open a state; the memory store
    // knows only this process's redemptions: one approval would run its call once on each.
    if !raw.key_files.is_empty() && raw.store == ApprovalStoreKind::Memory {
        problems.push(
            "approval.store",
            "is memory while approval.key_files is set: every replica (and every restart) holding the keys opens the same approval, but each process remembers only its own redemptions, so one approval could run its call once per process; set approval.store: postgres (with database:) so redemptions are shared, or remove approval.key_files for a single replica",
        );
    }
    if raw.out_of_band != OutOfBand::Off && raw.wait > raw.ttl {
        problems.push(
            "approval.wait",
            "must be at most approval.ttl (a call cannot wait for an approval that has expired)",
        );
    }
    if let Some(base) = &raw.link_base
        && !http_url(base)
    {
        problems.push("approval.link_base", "must be an http or https URL");
    }
    let webhook = raw.webhook.map(|w| {
        if !http_url(&w.url) {
            problems.push("approval.webhook.url", "must be an http or https URL");
        }
        if w.timeout.is_zero() || w.timeout > Duration::from_secs(60) {
            problems.push("approval.webhook.timeout", "must be between 1ms and 60s");
        }
        if w.max_per_minute == 0 || w.max_per_minute > 10_000 {
            problems.push(
                "approval.webhook.max_per_minute",
                "must be a whole number from 1 to 10000",
            );
        }
        WebhookConfig {
            url: w.url,
            timeout: w.timeout,
            max_per_minute: w.max_per_minute,
        }
    });
    let mut approvers = raw.approvers;
    for (i, rule) in approvers.iter_mut().enumerate() {
        let key = format!("approval.approvers[{i}]");
        if rule.subjects.is_empty() && rule.groups.is_empty() && rule.claims.is_empty() {
            problems.push(key.clone(), "names nobody: give subjects, groups or claims");
        }
        check_names(rule, &key, problems);
        for class in &rule.classes {
            if !CLASSES.contains(&class.as_str()) {
                problems.push(
                    format!("{key}.classes"),
                    format!("'{class}' is not a class (one of {})", CLASSES.join(", ")),
                );
            }
        }
    }
    if raw.max_pending_per_principal == 0 || raw.max_pending_per_principal > 10_000 {
        problems.push(
            "approval.max_pending_per_principal",
            "must be a whole number from 1 to 10000",
        );
    }
    if raw.groups_claim.is_empty() {
        problems.push("approval.groups_claim", "must not be empty");
    }
    let web = raw.web.map(|web| check_web(web, raw.out_of_band, problems));
    if raw.url_elicitation {
        if raw.out_of_band == OutOfBand::Off {
            problems.push(
                "approval.url_elicitation",
                "needs approval.out_of_band (fallback or always): the URL points at a pending approval",
            );
        }
        if web.is_none() && raw.link_base.is_none() {
            problems.push(
                "approval.url_elicitation",
                "needs approval.web or approval.link_base: the client opens the approval's link, which must be an absolute URL",
            );
        }
    }
    let link_base = raw
        .link_base
        .map(|b| b.trim_end_matches('/').to_owned())
        .or_else(|| web.as_ref().map(|w| format!("{}/approve", w.base_url)));
    ApprovalConfig {
        key_files: raw.key_files,
        ttl: raw.ttl,
        store: raw.store,
        out_of_band: raw.out_of_band,
        wait: raw.wait,
        link_base,
        webhook,
        approvers,
        max_pending_per_principal: raw.max_pending_per_principal,
        groups_claim: raw.groups_claim,
        require_distinct_approver: raw.require_distinct_approver,
        web,
        url_elicitation: raw.url_elicitation,
    }
}

/// The rule's names are typed (and written as they compare: DNS names in lower case);
/// `claims` say whose tokens they test.
fn check_names(rule: &mut ApproverRule, key: &str, problems: &mut Problems) {
    for subject in &mut rule.subjects {
        match PrincipalName::parse(subject) {
            Ok(PrincipalName::Local | PrincipalName::Anonymous) => problems.push(
                format!("{key}.subjects"),
                format!(
                    "'{subject}' cannot decide through the API or the page (the local operator decides with querygate approvals)"
                ),
            ),
            Ok(name) => *subject = name.to_string(),
            Err(message) => problems.push(format!("{key}.subjects"), message),
        }
    }
    for group in &rule.groups {
        if let Err(message) = GroupName::parse(group) {
            problems.push(format!("{key}.groups"), message);
        }
    }
    match (&rule.issuer, rule.claims.is_empty()) {
        (None, false) => problems.push(
            format!("{key}.issuer"),
            "missing: claims are tested only on the tokens of the issuer named here (one of auth.jwt.issuers[].issuer)",
        ),
        (Some(_), true) => problems.push(
            format!("{key}.issuer"),
            "names the issuer of claims, and this rule has none",
        ),
        _ => {}
    }
}

fn check_web(raw: RawWeb, out_of_band: OutOfBand, problems: &mut Problems) -> WebConfig {
    if out_of_band == OutOfBand::Off {
        problems.push(
            "approval.web",
            "needs approval.out_of_band (fallback or always): the page decides pending approvals",
        );
    }
    if !http_url(&raw.issuer) {
        problems.push("approval.web.issuer", "must be an http or https URL");
    }
    if raw.client_id.is_empty() {
        problems.push("approval.web.client_id", "must not be empty");
    }
    if raw.client_secret_env.as_deref().is_some_and(str::is_empty) {
        problems.push("approval.web.client_secret_env", "must not be empty");
    }
    let base = url::Url::parse(&raw.base_url).ok();
    if !http_url(&raw.base_url)
        || base
            .as_ref()
            .is_some_and(|u| u.query().is_some() || u.fragment().is_some())
    {
        problems.push(
            "approval.web.base_url",
            "must be an http or https URL without query or fragment",
        );
    }
    if !raw.scopes.iter().any(|s| s == "openid") {
        problems.push("approval.web.scopes", "must include openid");
    }
    if raw
        .scopes
        .iter()
        .any(|s| s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        problems.push(
            "approval.web.scopes",
            "a scope is one word without spaces or control characters",
        );
    }
    if raw.session_ttl < Duration::from_secs(60) || raw.session_ttl > Duration::from_secs(12 * 3600)
    {
        problems.push("approval.web.session_ttl", "must be between 1m and 12h");
    }
    WebConfig {
        issuer: raw.issuer,
        client_id: raw.client_id,
        client_secret_env: raw.client_secret_env,
        base_url: raw.base_url.trim_end_matches('/').to_owned(),
        scopes: raw.scopes,
        session_ttl: raw.session_ttl,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_of(yaml: &str) -> (ApprovalConfig, Vec<String>) {
        let raw: RawApproval = serde_norway::from_str(yaml).unwrap();
        let mut problems = Problems::default();
        let config = check_approval(raw, &mut problems);
        (config, problems.iter().map(|p| p.key.clone()).collect())
    }

    #[test]
    fn out_of_band_settings_are_checked() {
        let (config, problems) = keys_of("{}");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(config.out_of_band, OutOfBand::Off);
        assert_eq!(config.wait, Duration::from_secs(30));
        assert!(config.require_distinct_approver);
        // A short ttl is fine while out-of-band approval is off.
        assert!(keys_of("ttl: 1s").1.is_empty());
        let (config, problems) = keys_of(
            "out_of_band: fallback\nwait: 10s\nlink_base: https://ops.example/approvals/\nwebhook: {url: http://127.0.0.1:9/hook}\napprovers: [{tenant: acme, groups: ['jwt:https://idp.example#sre'], classes: [mutation_delete]}]",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            config.link_base.as_deref(),
            Some("https://ops.example/approvals")
        );
        assert_eq!(config.webhook.unwrap().timeout, Duration::from_secs(5));
        let (_, problems) = keys_of(
            "out_of_band: always\nttl: 5s\nwait: 10s\nlink_base: ftp://x\nwebhook: {url: nope}\napprovers: [{tenant: acme}, {tenant: acme, subjects: ['jwt:https://idp#a'], classes: [drop]}]",
        );
        for key in [
            "approval.wait",
            "approval.link_base",
            "approval.webhook.url",
            "approval.approvers[0]",
            "approval.approvers[1].classes",
        ] {
            assert!(problems.iter().any(|p| p == key), "{key}: {problems:?}");
        }
    }

    #[test]
    fn approvers_are_named_by_typed_names_bound_to_their_issuer() {
        let (config, problems) = keys_of(
            "approvers: [{tenant: acme, subjects: ['jwt:https://idp#carol', 'dns:Approver.Example', 'uri:spiffe://acme/approver'], groups: ['jwt:https://idp#sre'], claims: {dept: ops}, issuer: https://idp}]",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            config.approvers[0].subjects,
            [
                "jwt:https://idp#carol",
                "dns:approver.example",
                "uri:spiffe://acme/approver"
            ]
        );
        let raw: RawApproval = serde_norway::from_str(
            "approvers: [{tenant: acme, subjects: [carol, local, 'spiffe://acme/approver'], groups: [sre], claims: {dept: ops}}, {tenant: acme, subjects: ['jwt:https://idp#a'], issuer: https://idp}]",
        )
        .unwrap();
        let mut problems = Problems::default();
        check_approval(raw, &mut problems);
        let said: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        let has = |key: &str, text: &str| {
            assert!(
                said.iter().any(|p| p.contains(key) && p.contains(text)),
                "{key} {text}: {said:#?}"
            )
        };
        has("approval.approvers[0].subjects", "'jwt:<issuer>#carol'");
        has("approval.approvers[0].subjects", "'local' cannot decide");
        has("approval.approvers[0].subjects", "'spiffe://acme/approver'");
        has("approval.approvers[0].groups", "'jwt:<issuer>#sre'");
        has("approval.approvers[0].issuer", "missing");
        has("approval.approvers[1].issuer", "has none");
        assert_eq!(said.len(), 6, "{said:#?}");
    }

    #[test]
    fn the_web_page_and_url_elicitation_are_checked() {
        let (config, problems) = keys_of(
            "out_of_band: fallback\nurl_elicitation: true\nweb: {issuer: https://idp.example, client_id: qg, base_url: https://qg.example/}",
        );
        assert!(problems.is_empty(), "{problems:?}");
        let web = config.web.unwrap();
        assert_eq!(web.base_url, "https://qg.example");
        assert_eq!(web.scopes, ["openid"]);
        assert_eq!(web.session_ttl, Duration::from_secs(900));
        // Links point at the page unless link_base says otherwise.
        assert_eq!(
            config.link_base.as_deref(),
            Some("https://qg.example/approve")
        );
        assert!(config.url_elicitation);
        let (_, problems) = keys_of(
            "url_elicitation: true\nweb: {issuer: nope, client_id: '', client_secret_env: '', base_url: 'https://qg.example/?a=1', scopes: [profile, 'a b'], session_ttl: 5s}",
        );
        for key in [
            "approval.web",
            "approval.web.issuer",
            "approval.web.client_id",
            "approval.web.client_secret_env",
            "approval.web.base_url",
            "approval.web.scopes",
            "approval.web.session_ttl",
            "approval.url_elicitation",
        ] {
            assert!(problems.iter().any(|p| p == key), "{key}: {problems:?}");
        }
        // URL elicitation needs an absolute link.
        let (_, problems) = keys_of("out_of_band: fallback\nurl_elicitation: true");
        assert_eq!(problems, ["approval.url_elicitation"]);
    }
}
