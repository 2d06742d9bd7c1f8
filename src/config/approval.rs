//! The `approval:` section: how approvals of single calls are sealed and redeemed, and how
//! out-of-band approvals are kept, announced and decided (who may approve what).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

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
}

/// Who may decide the pending approvals of a tenant (`approval.approvers[]`). A decider
/// matches when it is of `tenant`, the approval's class is in `classes` (empty: every
/// class), and its subject is in `subjects`, or one of its groups (the JWT claim
/// `approval.groups_claim`) is in `groups`, or every claim of `claims` has the value given.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproverRule {
    /// The tenant whose approvals this rule lets decide.
    pub tenant: String,
    /// Query classes (`mutation_create`, `mutation_delete`, `lifecycle`, `select`); empty:
    /// all.
    #[serde(default)]
    pub classes: Vec<String>,
    /// Principals by subject (JWT `sub`, certificate identity).
    #[serde(default)]
    pub subjects: Vec<String>,
    /// Groups from the JWT's groups claim.
    #[serde(default)]
    pub groups: Vec<String>,
    /// JWT claims and the value each must have (a string claim equal to it, or an array
    /// claim holding it); all must match.
    #[serde(default)]
    pub claims: BTreeMap<String, String>,
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
    /// The JWT claim that holds a principal's groups.
    pub groups_claim: String,
    /// Whether the principal that made a call may not approve it (four eyes).
    pub require_distinct_approver: bool,
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
    pub(super) groups_claim: String,
    pub(super) require_distinct_approver: bool,
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
            groups_claim: "groups".to_owned(),
            require_distinct_approver: true,
        }
    }
}

/// The classes an approver rule may name.
const CLASSES: [&str; 4] = ["select", "mutation_create", "mutation_delete", "lifecycle"];

fn http_url(value: &str) -> bool {
    url::Url::parse(value).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
}

/// Checks the section, pushing each problem with its key.
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
        WebhookConfig {
            url: w.url,
            timeout: w.timeout,
        }
    });
    for (i, rule) in raw.approvers.iter().enumerate() {
        let key = format!("approval.approvers[{i}]");
        if rule.subjects.is_empty() && rule.groups.is_empty() && rule.claims.is_empty() {
            problems.push(key.clone(), "names nobody: give subjects, groups or claims");
        }
        for class in &rule.classes {
            if !CLASSES.contains(&class.as_str()) {
                problems.push(
                    format!("{key}.classes"),
                    format!("'{class}' is not a class (one of {})", CLASSES.join(", ")),
                );
            }
        }
    }
    if raw.groups_claim.is_empty() {
        problems.push("approval.groups_claim", "must not be empty");
    }
    ApprovalConfig {
        key_files: raw.key_files,
        ttl: raw.ttl,
        store: raw.store,
        out_of_band: raw.out_of_band,
        wait: raw.wait,
        link_base: raw.link_base.map(|b| b.trim_end_matches('/').to_owned()),
        webhook,
        approvers: raw.approvers,
        groups_claim: raw.groups_claim,
        require_distinct_approver: raw.require_distinct_approver,
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
            "out_of_band: fallback\nwait: 10s\nlink_base: https://ops.example/approvals/\nwebhook: {url: http://127.0.0.1:9/hook}\napprovers: [{tenant: acme, groups: [sre], classes: [mutation_delete]}]",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            config.link_base.as_deref(),
            Some("https://ops.example/approvals")
        );
        assert_eq!(config.webhook.unwrap().timeout, Duration::from_secs(5));
        let (_, problems) = keys_of(
            "out_of_band: always\nttl: 5s\nwait: 10s\nlink_base: ftp://x\nwebhook: {url: nope}\napprovers: [{tenant: acme}, {tenant: acme, subjects: [a], classes: [drop]}]",
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
}
