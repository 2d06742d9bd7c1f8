//! The engine's one error type: a closed [`ErrorKind`], a message written for the person or
//! model who sent the statement, and, for upstream failures, the typed HTTP status.

use std::borrow::Cow;
use std::fmt;

/// What went wrong, as a closed set the MCP surface maps to stable codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The SQL text does not parse, or uses a construct the engine rejects.
    InvalidSql,
    /// A statement kind the engine does not run (yet), e.g. `INSERT` before the write path.
    UnsupportedStatement,
    /// No such provider, service, resource or method.
    UnknownTable,
    /// The tenant may not use this provider.
    ProviderNotAllowed,
    /// No select method's required parameters are satisfied by the statement.
    MissingParameters,
    /// A provider document is malformed or missing; the message names the file and pointer.
    BadDocument,
    /// The upstream API answered with a non-success status.
    Upstream,
    /// The upstream could not be reached or did not answer in time.
    UpstreamUnavailable,
    /// A write's request went out, but no complete answer came back (the connection broke
    /// or timed out after sending): the change may have been applied.
    UpstreamOutcomeUnknown,
    /// The provider asked this tenant to wait (`Retry-After`), or its configured request
    /// rate is taken, for longer than the call has left: the request was not sent.
    UpstreamThrottled,
    /// A configured limit was hit (requests per statement, response size).
    LimitExceeded,
    /// Credentials the provider needs could not be resolved.
    Credentials,
    /// A provider whose tenant exchanges the caller's bearer token for an upstream token
    /// was called without one (stdio, the command line, mTLS, no authentication).
    SubjectTokenMissing,
    /// The local registry is unreadable, or the remote registry or a package from it failed.
    Registry,
    /// A pulled package's document is unsigned, or its signature does not verify with a
    /// trusted certificate (StackQL's scheme): nothing was installed. The message names the
    /// document.
    RegistrySignature,
    /// A bug or an invariant broken inside the engine.
    Internal,
}

/// An upstream HTTP failure, carried as values rather than text to parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamFailure {
    /// The HTTP status code the upstream returned.
    pub status: u16,
    /// Whether retrying the same request may succeed (408, 429 and 5xx).
    pub retryable: bool,
    /// The start of the upstream's response body (truncated, lossy UTF-8).
    pub body: String,
    /// The method and URL that failed, without query string or credentials.
    pub request: String,
}

impl UpstreamFailure {
    /// Whether a status is worth retrying: 408, 429 and every 5xx.
    pub(crate) fn is_retryable_status(status: u16) -> bool {
        status == 408 || status == 429 || status >= 500
    }
}

/// An engine error. `Display` is the message meant for the caller.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    upstream: Option<Box<UpstreamFailure>>,
    acknowledged: Option<u16>,
    timed_out: bool,
    retry_after: Option<std::time::Duration>,
}

impl Error {
    /// Creates an error of `kind` with a message for the caller.
    /// Control characters in it (from documents, packages, upstream bodies) are escaped.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        let message = message.into();
        Error {
            kind,
            message: escape_controls(&message).into_owned(),
            upstream: None,
            acknowledged: None,
            timed_out: false,
            retry_after: None,
        }
    }

    /// An upstream non-success status.
    pub fn upstream(failure: UpstreamFailure) -> Self {
        let message = format!(
            "upstream http error: {{\"http_status\": {}, \"retryable\": {}}}: {} returned {}: {}",
            failure.status,
            failure.retryable,
            escape_controls(&failure.request),
            failure.status,
            escape_controls(&failure.body)
        );
        Error {
            kind: ErrorKind::Upstream,
            message,
            upstream: Some(Box::new(failure)),
            acknowledged: None,
            timed_out: false,
            retry_after: None,
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The same error as another kind.
    pub(crate) fn into_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// The typed upstream failure, when the upstream answered with an error status.
    pub fn upstream_failure(&self) -> Option<&UpstreamFailure> {
        self.upstream.as_deref()
    }

    /// The status a write request of the failed statement was answered with, when the
    /// upstream had acknowledged a write before this error (awaiting its operation, a later
    /// request of the same statement, or reading its `RETURNING` rows failed): the side
    /// effect may have happened.
    pub fn acknowledged_write(&self) -> Option<u16> {
        self.acknowledged
    }

    /// This error, after the upstream acknowledged a write with `status` (the first
    /// acknowledgement noted is kept).
    pub(crate) fn after_write(mut self, status: u16) -> Self {
        self.acknowledged.get_or_insert(status);
        self
    }

    /// Whether the upstream request ran past its time limit (reqwest's `is_timeout`), as
    /// opposed to failing otherwise: metrics count timeouts apart.
    pub(crate) fn is_timeout(&self) -> bool {
        self.timed_out
    }

    /// This error, marked as a request that ran past its time limit.
    pub(crate) fn timed_out(mut self) -> Self {
        self.timed_out = true;
        self
    }

    /// How long the caller should wait before retrying, when the error says
    /// ([`ErrorKind::UpstreamThrottled`]).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.retry_after
    }

    /// This error, telling the caller to retry after `wait`.
    pub(crate) fn retry_after_wait(mut self, wait: std::time::Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    /// The message for the caller.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Appends a note to the message, keeping kind and upstream failure.
    pub(crate) fn with_note(mut self, note: &str) -> Self {
        self.message.push_str(" (");
        self.message.push_str(&escape_controls(note));
        self.message.push(')');
        self
    }

    pub(crate) fn invalid_sql(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidSql, message)
    }

    pub(crate) fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::UnsupportedStatement, message)
    }

    pub(crate) fn unknown(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::UnknownTable, message)
    }

    pub(crate) fn bad_document(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadDocument, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// `text` with control characters (and the bidirectional-text controls) escaped as Rust
/// escapes (`\n`, `\u{1b}`), so text from outside can neither drive a terminal nor forge a
/// log line; borrowed when there is nothing to escape.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    fn needs(c: char) -> bool {
        c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    }
    if !text.chars().any(needs) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert!(matches!(escape_controls("plain 'é'"), Cow::Borrowed(_)));
        assert_eq!(
            escape_controls("a\u{1b}[31mred\nINFO forged\r\t\u{202e}x"),
            "a\\u{1b}[31mred\\nINFO forged\\r\\t\\u{202e}x"
        );
        let err = Error::new(ErrorKind::Registry, "bad \u{7}name");
        assert_eq!(err.to_string(), "bad \\u{7}name");
        let err = Error::upstream(UpstreamFailure {
            status: 500,
            retryable: true,
            body: "line\nINFO fake".to_owned(),
            request: "GET http://h/p".to_owned(),
        })
        .with_note("x\u{1b}");
        assert!(
            err.message().ends_with("500: line\\nINFO fake (x\\u{1b})"),
            "{err}"
        );
    }
}
