//! The pipeline's [`Approver`] at a terminal: `querygate query --yes` approves in advance;
//! without it, the person at the terminal is asked `[y/N]` on stderr and answers on stdin.
//! Where neither is possible (stdin or stderr is not a terminal), the CLI offers no approver
//! and the gate refuses what needs approval.

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::mcp::pipeline::{ApprovalAnswer, ApprovalPrompt, Approver};

/// How the person at the terminal approves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TerminalApprover {
    /// `--yes`: approved before the call was made.
    Approved,
    /// Asked at the terminal.
    Asking,
}

impl TerminalApprover {
    /// The approver for `--yes` (`yes`), else one asking at the terminal when stdin and
    /// stderr are terminals; `None`: nobody can be asked.
    pub(super) fn for_command(yes: bool) -> Option<Self> {
        use std::io::IsTerminal as _;
        if yes {
            Some(TerminalApprover::Approved)
        } else if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
            Some(TerminalApprover::Asking)
        } else {
            None
        }
    }
}

impl Approver for TerminalApprover {
    /// Waits for the person as long as it takes (the prompt's TTL is for remote clients):
    /// `y` or `yes` approves, anything else declines.
    fn ask(
        &self,
        prompt: ApprovalPrompt,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, ApprovalAnswer> {
        let asking = *self == TerminalApprover::Asking;
        Box::pin(async move {
            if !asking {
                return ApprovalAnswer::Accept;
            }
            eprint!(
                "Approve this {} statement ({})? [y/N] ",
                prompt.class, prompt.reason
            );
            let read = tokio::task::spawn_blocking(|| {
                let mut answer = String::new();
                std::io::stdin().read_line(&mut answer).map(|_| answer)
            });
            tokio::select! {
                () = cancel.cancelled() => ApprovalAnswer::Cancel,
                answer = read => match answer {
                    Ok(Ok(answer)) => answer_of(&answer),
                    Ok(Err(err)) => ApprovalAnswer::Failed(format!("cannot read the answer: {err}")),
                    Err(err) => ApprovalAnswer::Failed(format!("cannot read the answer: {err}")),
                },
            }
        })
    }
}

/// `y` or `yes` (any case, spaces around) approves; anything else declines.
fn answer_of(line: &str) -> ApprovalAnswer {
    if matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        ApprovalAnswer::Accept
    } else {
        ApprovalAnswer::Decline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_y_or_yes_approves() {
        for line in ["y\n", "YES\n", "  yes  \n"] {
            assert_eq!(answer_of(line), ApprovalAnswer::Accept, "{line:?}");
        }
        for line in ["\n", "n\n", "yess\n", "ok\n", ""] {
            assert_eq!(answer_of(line), ApprovalAnswer::Decline, "{line:?}");
        }
    }

    #[tokio::test]
    async fn yes_approves_without_asking() {
        let prompt = ApprovalPrompt {
            message: "Approve?".into(),
            class: crate::policy::QueryClass::MutationDelete,
            reason: "server is in 'safe' mode".into(),
            ttl: std::time::Duration::from_secs(1),
        };
        let answer = TerminalApprover::Approved
            .ask(prompt, CancellationToken::new())
            .await;
        assert_eq!(answer, ApprovalAnswer::Accept);
    }
}
