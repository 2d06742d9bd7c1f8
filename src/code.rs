//! Stable error codes: every tool error carries one, in its text and its structured content,
//! so audit records, metrics and agents never have to parse prose. The set is closed; the
//! engine's [`ErrorKind`]s map onto it in one exhaustive match.

use std::fmt;

use serde::Serialize;

use crate::engine::ErrorKind;

/// A stable error code (`area.what`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Code {
    /// The tenant's mode never runs this class of statement.
    #[serde(rename = "policy.refused")]
    PolicyRefused,
    /// The tenant's `allowed_tools` or the credential's scopes do not include the tool.
    #[serde(rename = "policy.tool_not_allowed")]
    PolicyToolNotAllowed,
    /// The statement is not of the class this tool runs; the message names the right tool.
    #[serde(rename = "policy.wrong_tool")]
    PolicyWrongTool,
    /// The text holds several statements; one statement per call.
    #[serde(rename = "policy.multiple_statements")]
    PolicyMultipleStatements,
    /// A request of the statement gives a parameter the tenant pins
    /// (`tenants[].pinned_parameters`) another value, or leaves it to its default.
    #[serde(rename = "policy.parameter_pinned")]
    PolicyParameterPinned,
    /// The credential lacks the scope of the call's query class
    /// (`auth.jwt.enforce_query_scopes`); over HTTP the answer is `403` with a
    /// `WWW-Authenticate: Bearer error="insufficient_scope"` step-up challenge.
    #[serde(rename = "auth.insufficient_scope")]
    AuthInsufficientScope,
    /// The tenant's Cedar policies (`tenants[].policy_files`) do not permit a request of
    /// the statement, or forbid it; the message and `structuredContent.error.policies` name
    /// the policies that decided.
    #[serde(rename = "policy.denied")]
    PolicyDenied,
    /// The call needs approval and the client cannot be asked (no elicitation).
    #[serde(rename = "policy.approval_required")]
    PolicyApprovalRequired,
    /// The person declined the approval.
    #[serde(rename = "policy.approval_declined")]
    PolicyApprovalDeclined,
    /// The person dismissed the approval prompt.
    #[serde(rename = "policy.approval_cancelled")]
    PolicyApprovalCancelled,
    /// The approval state is invalid, expired, already used, or made for another call.
    #[serde(rename = "policy.approval_invalid")]
    PolicyApprovalInvalid,
    /// The approval store cannot be reached, so an approval cannot be redeemed.
    #[serde(rename = "policy.approval_unavailable")]
    PolicyApprovalUnavailable,
    /// The call waits for an out-of-band approval: nothing ran; repeat the same call once
    /// it is decided.
    #[serde(rename = "policy.approval_pending")]
    PolicyApprovalPending,
    /// The out-of-band approval of the call expired before it was decided or used.
    #[serde(rename = "policy.approval_expired")]
    PolicyApprovalExpired,
    /// No approval of that id in the decider's tenant (approval API and CLI).
    #[serde(rename = "approval.not_found")]
    ApprovalNotFound,
    /// The decider may not see or decide the approval (`approval.approvers`, four eyes).
    #[serde(rename = "approval.not_allowed")]
    ApprovalNotAllowed,
    /// The approval is no longer pending: decided, used or expired.
    #[serde(rename = "approval.conflict")]
    ApprovalConflict,
    /// An argument's value is not acceptable (the message names it).
    #[serde(rename = "arguments.invalid")]
    ArgumentsInvalid,
    /// The SQL does not parse or uses a construct the engine rejects.
    #[serde(rename = "sql.invalid")]
    SqlInvalid,
    /// A statement kind the engine does not run.
    #[serde(rename = "sql.unsupported")]
    SqlUnsupported,
    /// No such provider, service, resource or method.
    #[serde(rename = "sql.unknown_table")]
    SqlUnknownTable,
    /// No method's required parameters are supplied by the statement.
    #[serde(rename = "sql.missing_parameters")]
    SqlMissingParameters,
    /// The tenant may not use this provider.
    #[serde(rename = "provider.not_allowed")]
    ProviderNotAllowed,
    /// A provider document is malformed or missing.
    #[serde(rename = "provider.bad_document")]
    ProviderBadDocument,
    /// The upstream API answered with an error status.
    #[serde(rename = "upstream.rejected")]
    UpstreamRejected,
    /// The upstream API could not be reached or did not answer in time.
    #[serde(rename = "upstream.unavailable")]
    UpstreamUnavailable,
    /// The provider asked this tenant to wait (`Retry-After`), or the tenant's configured
    /// request rate to it (`providers.<p>.max_requests_per_second`) is taken, for longer
    /// than the call has left: nothing more was sent; retry after the delay the error names.
    #[serde(rename = "upstream.throttled")]
    UpstreamThrottled,
    /// A configured limit was hit.
    #[serde(rename = "limit.exceeded")]
    LimitExceeded,
    /// The tenant's or the principal's quota for the statement's class is used up for the
    /// current window (`tenants[].quotas`): nothing ran; retry after `retry_after_seconds`.
    #[serde(rename = "quota.exceeded")]
    QuotaExceeded,
    /// The shared quota store cannot be reached and `quotas.on_store_failure` refuses the
    /// call: nothing ran; retry after `retry_after_seconds`.
    #[serde(rename = "quota.unavailable")]
    QuotaUnavailable,
    /// Credentials a provider needs could not be resolved.
    #[serde(rename = "credentials.unresolved")]
    CredentialsUnresolved,
    /// The provider's tenant exchanges the caller's bearer token for an upstream token
    /// (`tenants[].providers.<name>.token_exchange`), and the call carries none (stdio, the
    /// command line, mTLS, no authentication): nothing was sent. Call over HTTP with a JWT.
    #[serde(rename = "credentials.no_subject_token")]
    CredentialsNoSubjectToken,
    /// The local or remote registry cannot be used.
    #[serde(rename = "registry.unavailable")]
    RegistryUnavailable,
    /// A document of the package `pull_provider` fetched is unsigned, or its signature does
    /// not verify with a trusted certificate (StackQL's scheme; `registry.verify`,
    /// `registry.trusted_certificates`): nothing was installed.
    #[serde(rename = "registry.signature_invalid")]
    RegistrySignatureInvalid,
    /// Something asked for does not exist (a query library entry, …).
    #[serde(rename = "not_found")]
    NotFound,
    /// The call ran past `server.call_timeout` and nothing was sent that changes anything.
    #[serde(rename = "call.timeout")]
    CallTimeout,
    /// A write may have been applied, but whether it was is not known: the call ran past
    /// `server.call_timeout` or was cancelled after a write may have been sent, or the
    /// upstream connection broke after a write was sent.
    #[serde(rename = "call.outcome_unknown")]
    CallOutcomeUnknown,
    /// The client went away or cancelled the call (`notifications/cancelled`) before it
    /// finished, and nothing was sent that changes anything.
    #[serde(rename = "call.cancelled")]
    CallCancelled,
    /// The server's evaluation capacity (or the tenant's share of it) stayed full for the
    /// whole admission wait: nothing ran; retry after the delay the error names.
    #[serde(rename = "server.busy")]
    ServerBusy,
    /// The call's audit record could not be written, and `audit.failure_mode` stops the
    /// call: refused before it ran (an intent), or its result withheld (an outcome).
    #[serde(rename = "audit.unavailable")]
    AuditUnavailable,
    /// A bug or a broken invariant.
    #[serde(rename = "internal")]
    Internal,
}

impl Code {
    /// Every code, for documentation and tests.
    pub const ALL: [Code; 41] = [
        Code::PolicyRefused,
        Code::PolicyToolNotAllowed,
        Code::PolicyWrongTool,
        Code::PolicyMultipleStatements,
        Code::PolicyParameterPinned,
        Code::AuthInsufficientScope,
        Code::PolicyDenied,
        Code::PolicyApprovalRequired,
        Code::PolicyApprovalDeclined,
        Code::PolicyApprovalCancelled,
        Code::PolicyApprovalInvalid,
        Code::PolicyApprovalUnavailable,
        Code::PolicyApprovalPending,
        Code::PolicyApprovalExpired,
        Code::ApprovalNotFound,
        Code::ApprovalNotAllowed,
        Code::ApprovalConflict,
        Code::ArgumentsInvalid,
        Code::SqlInvalid,
        Code::SqlUnsupported,
        Code::SqlUnknownTable,
        Code::SqlMissingParameters,
        Code::ProviderNotAllowed,
        Code::ProviderBadDocument,
        Code::UpstreamRejected,
        Code::UpstreamUnavailable,
        Code::UpstreamThrottled,
        Code::LimitExceeded,
        Code::QuotaExceeded,
        Code::QuotaUnavailable,
        Code::CredentialsUnresolved,
        Code::CredentialsNoSubjectToken,
        Code::RegistryUnavailable,
        Code::RegistrySignatureInvalid,
        Code::NotFound,
        Code::CallTimeout,
        Code::CallOutcomeUnknown,
        Code::CallCancelled,
        Code::ServerBusy,
        Code::AuditUnavailable,
        Code::Internal,
    ];

    /// The code as text, e.g. `policy.refused`.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::PolicyRefused => "policy.refused",
            Code::PolicyToolNotAllowed => "policy.tool_not_allowed",
            Code::PolicyWrongTool => "policy.wrong_tool",
            Code::PolicyMultipleStatements => "policy.multiple_statements",
            Code::PolicyParameterPinned => "policy.parameter_pinned",
            Code::AuthInsufficientScope => "auth.insufficient_scope",
            Code::PolicyDenied => "policy.denied",
            Code::PolicyApprovalRequired => "policy.approval_required",
            Code::PolicyApprovalDeclined => "policy.approval_declined",
            Code::PolicyApprovalCancelled => "policy.approval_cancelled",
            Code::PolicyApprovalInvalid => "policy.approval_invalid",
            Code::PolicyApprovalUnavailable => "policy.approval_unavailable",
            Code::PolicyApprovalPending => "policy.approval_pending",
            Code::PolicyApprovalExpired => "policy.approval_expired",
            Code::ApprovalNotFound => "approval.not_found",
            Code::ApprovalNotAllowed => "approval.not_allowed",
            Code::ApprovalConflict => "approval.conflict",
            Code::ArgumentsInvalid => "arguments.invalid",
            Code::SqlInvalid => "sql.invalid",
            Code::SqlUnsupported => "sql.unsupported",
            Code::SqlUnknownTable => "sql.unknown_table",
            Code::SqlMissingParameters => "sql.missing_parameters",
            Code::ProviderNotAllowed => "provider.not_allowed",
            Code::ProviderBadDocument => "provider.bad_document",
            Code::UpstreamRejected => "upstream.rejected",
            Code::UpstreamUnavailable => "upstream.unavailable",
            Code::UpstreamThrottled => "upstream.throttled",
            Code::LimitExceeded => "limit.exceeded",
            Code::QuotaExceeded => "quota.exceeded",
            Code::QuotaUnavailable => "quota.unavailable",
            Code::CredentialsUnresolved => "credentials.unresolved",
            Code::CredentialsNoSubjectToken => "credentials.no_subject_token",
            Code::RegistryUnavailable => "registry.unavailable",
            Code::RegistrySignatureInvalid => "registry.signature_invalid",
            Code::NotFound => "not_found",
            Code::CallTimeout => "call.timeout",
            Code::CallOutcomeUnknown => "call.outcome_unknown",
            Code::CallCancelled => "call.cancelled",
            Code::ServerBusy => "server.busy",
            Code::AuditUnavailable => "audit.unavailable",
            Code::Internal => "internal",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<ErrorKind> for Code {
    fn from(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::InvalidSql => Code::SqlInvalid,
            ErrorKind::UnsupportedStatement => Code::SqlUnsupported,
            ErrorKind::UnknownTable => Code::SqlUnknownTable,
            ErrorKind::ProviderNotAllowed => Code::ProviderNotAllowed,
            ErrorKind::MissingParameters => Code::SqlMissingParameters,
            ErrorKind::BadDocument => Code::ProviderBadDocument,
            ErrorKind::Upstream => Code::UpstreamRejected,
            ErrorKind::UpstreamUnavailable => Code::UpstreamUnavailable,
            ErrorKind::UpstreamOutcomeUnknown => Code::CallOutcomeUnknown,
            ErrorKind::UpstreamThrottled => Code::UpstreamThrottled,
            ErrorKind::LimitExceeded => Code::LimitExceeded,
            ErrorKind::Credentials => Code::CredentialsUnresolved,
            ErrorKind::SubjectTokenMissing => Code::CredentialsNoSubjectToken,
            ErrorKind::Registry => Code::RegistryUnavailable,
            ErrorKind::RegistrySignature => Code::RegistrySignatureInvalid,
            ErrorKind::Internal => Code::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_serialized_forms_agree_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, serde_json::Value::from(code.as_str()));
            assert!(seen.insert(code.as_str()), "duplicate {code}");
        }
    }
}
