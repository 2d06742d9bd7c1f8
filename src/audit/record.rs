//! The audit record: what one tool call did (an `outcome` record for every call) or is about
//! to do (an `intent` record, written before a side effect reaches the upstream). Flat,
//! primitive fields only: never result rows, never credential values.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Which record of a call this is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Written (durably) before a side effect reaches the upstream.
    Intent,
    /// Written when the call ends, whatever the end was.
    #[default]
    Outcome,
    /// A request refused by authentication (no call was made): the reason in `error_code`,
    /// the client's address in `client_addr`, what the credential names in `principal`,
    /// `issuer` or `cert_fingerprint`. Rate-limited: `suppressed` counts the failures of the
    /// same reason and address not recorded since the previous record of that pair.
    AuthFailure,
    /// Files were deleted by rotation (`max_files`, `max_age`): `pruned` names, for every
    /// stream that had records in them, the last of its records that went (its seq and
    /// hash), so a stream that now starts later is known to have been pruned, not cut.
    /// Written, and durable, before the files are deleted.
    Prune,
    /// An out-of-band approval was decided (the HTTP API, the CLI): `principal`/`issuer`/
    /// `auth_method` name the decider, `approver`, `approval_method` and `approval_reason`
    /// say who, through what and why, `decision` is `needs_approval_accepted` or
    /// `needs_approval_declined`, and `tool`, `query_class`, `sql`, `approval_id` name the
    /// call decided. Written, and durable, before the decision is stored.
    ApprovalDecision,
}

impl Phase {
    /// The string in records and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Intent => "intent",
            Phase::Outcome => "outcome",
            Phase::AuthFailure => "auth_failure",
            Phase::Prune => "prune",
            Phase::ApprovalDecision => "approval_decision",
        }
    }
}

/// What the mode gate decided, with StackQL's audit strings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The call was allowed without approval.
    #[default]
    Allow,
    /// The call was refused by the mode (or another rule) without asking anyone.
    RefuseImmediate,
    /// An approval prompt was returned to the client (the call did not run yet).
    NeedsApprovalRequested,
    /// A person approved; the call ran.
    NeedsApprovalAccepted,
    /// A person declined; the call did not run.
    NeedsApprovalDeclined,
    /// The prompt was dismissed; the call did not run.
    NeedsApprovalCancelled,
    /// Approval was needed but the client cannot be asked; the call did not run.
    NeedsApprovalUnavailable,
}

impl Decision {
    /// The string in records and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::RefuseImmediate => "refuse_immediate",
            Decision::NeedsApprovalRequested => "needs_approval_requested",
            Decision::NeedsApprovalAccepted => "needs_approval_accepted",
            Decision::NeedsApprovalDeclined => "needs_approval_declined",
            Decision::NeedsApprovalCancelled => "needs_approval_cancelled",
            Decision::NeedsApprovalUnavailable => "needs_approval_unavailable",
        }
    }

    /// Whether the call went on to run (allowed or approved).
    pub fn ran(self) -> bool {
        matches!(self, Decision::Allow | Decision::NeedsApprovalAccepted)
    }
}

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The tool returned a result.
    Ok,
    /// The call ended with an error (a refusal, a tool error, the audit itself).
    Error,
    /// A timeout or the client's cancellation cut the call after a request may have reached
    /// the upstream: whether the side effect happened is not known.
    Unknown,
}

impl Outcome {
    /// The string in records and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Unknown => "unknown",
        }
    }
}

/// StackQL's statement classes, as recorded in `query_class`.
pub mod class {
    /// SELECT and other reads.
    pub const SELECT: &str = "select";
    /// INSERT, UPDATE, REPLACE.
    pub const MUTATION_CREATE: &str = "mutation_create";
    /// DELETE.
    pub const MUTATION_DELETE: &str = "mutation_delete";
    /// EXEC of a provider method.
    pub const LIFECYCLE: &str = "lifecycle";
    /// Anything that could not be classified.
    pub const UNKNOWN: &str = "unknown";

    /// Whether a call of this class may change infrastructure (`unknown` counts: fail
    /// closed).
    pub fn has_side_effect(class: &str) -> bool {
        class != SELECT
    }
}

/// One audit record. Optional fields are left out of the JSON when absent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When the call started, RFC 3339 UTC with microseconds (`2026-11-30T11:30:01.123456Z`).
    pub timestamp: String,
    /// `intent` or `outcome`.
    pub phase: Phase,
    /// The call's id; an intent and its outcome share it.
    pub call_id: String,
    /// The transport request's id (HTTP `x-request-id`, JSON-RPC id on stdio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The MCP task the call ran as (a call a client submitted as a task, and the task's
    /// resumption on another replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// W3C trace id, when the call carries one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// W3C span id of the call: with traces on, the call's span; else the caller's span
    /// (the parent in its `traceparent`), when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    /// The replica (process) that wrote the record; also the chain's stream.
    pub replica: String,
    /// The tenant the call ran for (absent when no tenant was established).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    /// The principal's subject (JWT `sub`, certificate identity, `local` for the CLI);
    /// absent when there was none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub principal: String,
    /// The issuer that vouched for the principal (the JWT `iss`); absent for other
    /// methods. With `principal` it names the caller: one `sub` of two issuers is two
    /// callers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// How the principal was established: `jwt`, `mtls`, `local`, `stdio`, `anonymous`.
    pub auth_method: String,
    /// SHA-256 of the client certificate (mTLS), hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_fingerprint: Option<String>,
    /// The operating-system user (CLI and stdio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_user: Option<String>,
    /// The MCP client's name (`clientInfo.name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_name: Option<String>,
    /// The MCP client's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
    /// The negotiated MCP protocol version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    /// The tool called (absent in `auth_failure` records).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tool: String,
    /// The tenant's mode at call time (absent when the call was refused before its tenant
    /// was known).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// What the gate decided.
    pub decision: Decision,
    /// The statement class (`select`, `mutation_create`, `mutation_delete`, `lifecycle`,
    /// `unknown`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_class: Option<String>,
    /// The SQL (string literals HMACed when `audit.hmac_sql_literals` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql: Option<String>,
    /// SHA-256 of the SQL as sent (HMAC-SHA256 under the audit key when literals are
    /// HMACed), hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql_sha256: Option<String>,
    /// The tool's arguments (the SQL in them treated like `sql`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Map<String, Value>>,
    /// The approval that let the call run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// Who approved or denied the call (`bob (https://idp.example.com)`, `cli:alice`; the
    /// principal asked in the call for elicitation and MRTR).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<String>,
    /// The approver's typed identity: `jwt:<issuer>#<sub>`, `uri:…`/`dns:…`/`cn:…` for a
    /// client certificate, `cli:<os user>` for the CLI, the caller's own for elicitation and
    /// MRTR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver_id: Option<String>,
    /// Through what it was decided: `api`, `web`, `cli`, `elicitation`, `mrtr`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_method: Option<String>,
    /// The reason the decider gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_reason: Option<String>,
    /// How the call ended (outcome records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// Wall-clock time of the call, gate and tool (outcome records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The stable error code (`policy.refused`, `upstream.rejected`, `audit.unavailable`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// The error or refusal text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The Cedar policies that denied the call (`policy.denied`; empty: none permitted it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policies: Option<Vec<String>>,
    /// How many rows the result had (a count; rows are never recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_returned: Option<u64>,
    /// The last HTTP status the upstream answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
    /// Present and true when the result was served from the tenant's result cache
    /// (`tenants[].cache`): nothing was sent upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_hit: Option<bool>,
    /// The request ids the upstreams answered with (`<header>=<value>`, e.g.
    /// `x-ms-request-id=…`), in order: at most 16, each cut to 128 characters, printable
    /// ASCII only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_request_ids: Option<Vec<String>>,
    /// The client's IP address (`auth_failure` records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_addr: Option<String>,
    /// Failures of the same reason and client address left unrecorded since the previous
    /// `auth_failure` record of that pair (rate limiting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppressed: Option<u64>,
    /// The fields cut to their size limit (`sql`, `error`, `args.<name>`, `args`, …):
    /// each one's full size and SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<std::collections::BTreeMap<String, Cut>>,
    /// `prune` records: per stream, the last record that was deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pruned: Option<std::collections::BTreeMap<String, Pruned>>,
}

/// The last record of a stream that a pruning deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pruned {
    /// Its seq: the stream's records up to this one went.
    pub seq: u64,
    /// Its hash: the `prev_hash` of the stream's first remaining record.
    pub hash: String,
}

/// What a field cut to its limit was.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cut {
    /// Its full length in bytes (a string's UTF-8, other values' compact JSON).
    pub bytes: u64,
    /// SHA-256 (hex) of those bytes.
    pub sha256: String,
}

impl AuditRecord {
    /// Whether the call may change something: a side-effect class, or `pull_provider`.
    pub fn has_side_effect(&self) -> bool {
        self.tool == "pull_provider"
            || self
                .query_class
                .as_deref()
                .is_some_and(class::has_side_effect)
    }
}

/// Now, as an audit timestamp (RFC 3339, UTC, microseconds).
pub fn timestamp_now() -> String {
    timestamp(std::time::SystemTime::now())
}

/// `at` as an audit timestamp (RFC 3339, UTC, microseconds).
pub fn timestamp(at: std::time::SystemTime) -> String {
    humantime::format_rfc3339_micros(at).to_string()
}

/// The operating-system user of this process, for local sessions and the CLI's approver:
/// the name of its effective uid in the user database, else `uid:<n>` (a container user
/// without a passwd entry). Never the environment: `$USER` is whatever the caller set.
pub fn os_user() -> String {
    whoami::fallible::username()
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| format!("uid:{}", rustix::process::geteuid().as_raw()))
}

/// A new random call id (128 bits, hex).
pub fn new_call_id() -> String {
    crate::digest::random_id().unwrap_or_else(|_| {
        // Fall back to time and a counter: unique within the process.
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{nanos:024x}{n:08x}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_strings_are_stackqls() {
        for (decision, text) in [
            (Decision::Allow, "allow"),
            (Decision::RefuseImmediate, "refuse_immediate"),
            (Decision::NeedsApprovalRequested, "needs_approval_requested"),
            (Decision::NeedsApprovalAccepted, "needs_approval_accepted"),
            (Decision::NeedsApprovalDeclined, "needs_approval_declined"),
            (Decision::NeedsApprovalCancelled, "needs_approval_cancelled"),
            (
                Decision::NeedsApprovalUnavailable,
                "needs_approval_unavailable",
            ),
        ] {
            assert_eq!(decision.as_str(), text);
            assert_eq!(serde_json::to_value(decision).unwrap(), text);
        }
    }

    #[test]
    fn absent_fields_are_left_out_and_timestamps_are_utc() {
        let record = AuditRecord {
            timestamp: timestamp(std::time::UNIX_EPOCH + std::time::Duration::from_micros(1)),
            tool: "server_info".into(),
            ..Default::default()
        };
        let json = serde_json::to_string(&record).unwrap();
        assert!(
            json.contains("\"timestamp\":\"1970-01-01T00:00:00.000001Z\""),
            "{json}"
        );
        assert!(!json.contains("sql"), "{json}");
        let back: AuditRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn call_ids_are_distinct() {
        assert_ne!(new_call_id(), new_call_id());
        assert_eq!(new_call_id().len(), 32);
    }
}
