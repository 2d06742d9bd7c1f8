//! The engine's one error type: a closed [`ErrorKind`], a message written for the person or
//! model who sent the statement, and, for upstream failures, the typed HTTP status.

use std::fmt;

/// What went wrong, as a closed set the MCP surface maps to stable codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// A configured limit was hit (requests per statement, response size).
    LimitExceeded,
    /// Credentials the provider needs could not be resolved.
    Credentials,
    /// The local registry is unreadable.
    Registry,
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
    pub fn is_retryable_status(status: u16) -> bool {
        status == 408 || status == 429 || status >= 500
    }
}

/// An engine error. `Display` is the message meant for the caller.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    upstream: Option<Box<UpstreamFailure>>,
}

impl Error {
    /// Creates an error of `kind` with a message for the caller.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            upstream: None,
        }
    }

    /// An upstream non-success status.
    pub fn upstream(failure: UpstreamFailure) -> Self {
        let message = format!(
            "upstream http error: {{\"http_status\": {}, \"retryable\": {}}}: {} returned {}: {}",
            failure.status, failure.retryable, failure.request, failure.status, failure.body
        );
        Error {
            kind: ErrorKind::Upstream,
            message,
            upstream: Some(Box::new(failure)),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The typed upstream failure, when the upstream answered with an error status.
    pub fn upstream_failure(&self) -> Option<&UpstreamFailure> {
        self.upstream.as_deref()
    }

    /// The message for the caller.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Appends a note to the message, keeping kind and upstream failure.
    pub(crate) fn with_note(mut self, note: &str) -> Self {
        self.message.push_str(" (");
        self.message.push_str(note);
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

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
