//! The resume path of a task another replica left (see `crate::tasks`): the stored call is
//! prepared and bound as any call, then runs through the audit (its outcome record, with
//! the task's id) and the tool alone. The gate, quotas, admission and the intent record
//! were passed when the task started; the tool polls the stored operation instead of
//! sending the write again.

use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use super::{CallError, Pipeline, ToolCall, ToolReply, bind, prepare};

impl Pipeline {
    /// Resumes the task `call` describes, stopping when `cancel` fires.
    pub(crate) async fn resume(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> Result<ToolReply, CallError> {
        let intake = &self.intake;
        let mut prepared = prepare::prepare(&intake.prepare, call, cancel)?;
        bind::bind(&intake.keeper, &mut prepared).await;
        self.resume_stack.clone().oneshot(prepared).await
    }
}
