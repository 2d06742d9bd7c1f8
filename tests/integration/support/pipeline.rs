//! Tool calls handed to the pipeline directly, as an entry point without HTTP does
//! (no approval channel, no progress), for the tests of what the pipeline decides alone.

use querygate::mcp::pipeline::{ApprovalChannel, ToolCall};
use querygate::tenant::Principal;
use serde_json::Value;

/// A call of `tool` with `arguments` (a JSON object) as `principal` (`None`: nobody
/// authenticated), with no way to ask for approval.
pub fn tool_call(tool: &str, arguments: Value, principal: Option<Principal>) -> ToolCall {
    ToolCall {
        name: tool.to_owned(),
        arguments: arguments.as_object().cloned().unwrap_or_default(),
        principal,
        approval: ApprovalChannel::Unavailable,
        origin: Default::default(),
        progress: None,
    }
}
