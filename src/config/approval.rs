//! The `approval:` section: how approvals of single calls are sealed and redeemed.

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

/// Approval settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalConfig {
    /// Files holding the HMAC keys that seal approval requests: the first seals, all open.
    /// Empty: a random key made at start (one replica only).
    pub key_files: Vec<PathBuf>,
    /// How long an approval request stays redeemable.
    pub ttl: Duration,
    /// Where redeemed approvals are recorded.
    pub store: ApprovalStoreKind,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawApproval {
    pub(super) key_files: Vec<PathBuf>,
    #[serde(with = "humantime_serde")]
    pub(super) ttl: Duration,
    pub(super) store: ApprovalStoreKind,
}

impl Default for RawApproval {
    fn default() -> Self {
        RawApproval {
            key_files: Vec::new(),
            ttl: Duration::from_secs(300),
            store: ApprovalStoreKind::Memory,
        }
    }
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
    ApprovalConfig {
        key_files: raw.key_files,
        ttl: raw.ttl,
        store: raw.store,
    }
}
