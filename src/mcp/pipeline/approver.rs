//! How the gate asks a person to approve a call in the middle of it, whatever carries the
//! question: an MCP session's `elicitation/create` (`mcp::elicit`) or the terminal of
//! `querygate query` (`cli::approve`). The pipeline sees only this trait.

use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::policy::QueryClass;

/// What a person is asked.
#[derive(Debug, Clone)]
pub struct ApprovalPrompt {
    /// The whole question: the trusted fields (tenant, principal, tool, class, mode, the
    /// writes the engine resolved) first, then the client's SQL escaped onto one line.
    pub message: String,
    /// What the call would do.
    pub class: QueryClass,
    /// Why the mode holds it for approval (e.g. `server is in 'safe' mode`).
    pub reason: String,
    /// How long the answer may take; an approver that can wait longer answers
    /// [`ApprovalAnswer::Expired`] after it.
    pub ttl: Duration,
}

/// How a prompt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswer {
    /// The person approved: the call runs.
    Accept,
    /// The person declined.
    Decline,
    /// The prompt was dismissed, or withdrawn because the call was cancelled while it was
    /// open (the gate tells the two apart by the call's cancellation token).
    Cancel,
    /// Nobody answered within the prompt's TTL.
    Expired,
    /// The question could not be asked or its answer not read (what went wrong).
    Failed(String),
}

/// Asks a person, in the middle of a call, whether it may run.
pub trait Approver: Send + Sync + std::fmt::Debug {
    /// Asks `prompt` and waits for the answer; stops waiting (and withdraws the question
    /// where the transport can) when `cancel` fires, answering [`ApprovalAnswer::Cancel`].
    fn ask(
        &self,
        prompt: ApprovalPrompt,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, ApprovalAnswer>;
}
