//! Approval prompts as MCP elicitation: the pipeline's [`Approver`] over an rmcp session
//! (`elicitation/create` in the middle of a call, for clients of older revisions over
//! stdio), and the translation of a resumable (MRTR) round: the answer in `inputResponses`
//! in, the input request out.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use rmcp::RoleServer;
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, InputRequest, InputRequiredResult, InputResponses, ServerRequest,
};
use rmcp::service::{Peer, PeerRequestOptions};
use tokio_util::sync::CancellationToken;

use super::pipeline::{ApprovalAnswer, ApprovalPrompt, Approver};

/// The key of the approval prompt in `inputRequests` / `inputResponses`.
pub(crate) const APPROVAL_KEY: &str = "approval";

/// Asks through `elicitation/create` in the client's session.
#[derive(Debug, Clone)]
pub(crate) struct RmcpApprover {
    peer: Peer<RoleServer>,
}

impl RmcpApprover {
    /// An approver asking the client at the other end of `peer`.
    pub(crate) fn new(peer: Peer<RoleServer>) -> Self {
        RmcpApprover { peer }
    }
}

impl Approver for RmcpApprover {
    /// Waits at most the prompt's TTL and no longer than the client waits for the tool
    /// call; a prompt that is no longer wanted (it expired, or the call was cancelled) is
    /// withdrawn with `notifications/cancelled`.
    fn ask(
        &self,
        prompt: ApprovalPrompt,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, ApprovalAnswer> {
        Box::pin(async move {
            let request =
                ServerRequest::ElicitRequest(ElicitRequest::new(elicitation(prompt.message)));
            let mut handle = match self
                .peer
                .send_cancellable_request(request, PeerRequestOptions::no_options())
                .await
            {
                Ok(handle) => handle,
                Err(err) => return transport_error(err),
            };
            let answer = tokio::select! {
                biased;
                () = cancel.cancelled() => None,
                answer = tokio::time::timeout(prompt.ttl, &mut handle.rx) => Some(answer),
            };
            match answer {
                Some(Ok(Ok(Ok(ClientResult::ElicitResult(result))))) => answer_of(Some(result)),
                Some(Ok(Ok(Ok(_)))) => transport_error(rmcp::ServiceError::UnexpectedResponse),
                Some(Ok(Ok(Err(err)))) => transport_error(err),
                Some(Ok(Err(_))) => transport_error(rmcp::ServiceError::TransportClosed),
                Some(Err(_)) => {
                    let _ = handle
                        .cancel(Some("the approval prompt expired".to_owned()))
                        .await;
                    ApprovalAnswer::Expired
                }
                None => {
                    let _ = handle
                        .cancel(Some("the tool call was cancelled".to_owned()))
                        .await;
                    ApprovalAnswer::Cancel
                }
            }
        })
    }
}

fn transport_error(err: rmcp::ServiceError) -> ApprovalAnswer {
    ApprovalAnswer::Failed(format!("elicitation transport error: {err}"))
}

/// The pipeline's answer for an elicitation result (`None`: the response was not one).
fn answer_of(result: Option<ElicitResult>) -> ApprovalAnswer {
    match result.map(|r| r.action) {
        Some(ElicitationAction::Accept) => ApprovalAnswer::Accept,
        Some(ElicitationAction::Decline) => ApprovalAnswer::Decline,
        Some(ElicitationAction::Cancel) => ApprovalAnswer::Cancel,
        Some(other) => ApprovalAnswer::Failed(format!("unexpected elicitation action {other:?}")),
        None => ApprovalAnswer::Failed(
            "unexpected approval response (expected an elicitation result)".to_owned(),
        ),
    }
}

/// The answer a resumable round carries in `inputResponses["approval"]`, if any.
pub(crate) fn resumed_answer(responses: Option<&InputResponses>) -> Option<ApprovalAnswer> {
    let answer = responses?.get(APPROVAL_KEY)?;
    Some(answer_of(
        serde_json::from_value::<ElicitResult>(answer.clone()).ok(),
    ))
}

/// The MRTR reply asking the client to put `prompt` to a person.
pub(crate) fn input_required(prompt: String, sealed: String) -> InputRequiredResult {
    let requests = BTreeMap::from([(
        APPROVAL_KEY.to_owned(),
        InputRequest::Elicitation(ElicitRequest::new(elicitation(prompt))),
    )]);
    InputRequiredResult::new(Some(requests), Some(sealed))
}

fn elicitation(message: String) -> ElicitRequestParams {
    // Nothing to fill in: accepting is the approval.
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: ElicitationSchema::builder().build_unchecked(),
    }
}
