//! What a person approving a call is shown, and what the approval is bound to: the prompt
//! (trusted fields first, the client's SQL last and escaped) and the hash of the plan the
//! engine resolved.

use super::PreparedCall;
use crate::engine::PlannedWrite;

/// The prompt a person sees: the trusted fields first (what querygate itself worked out:
/// tenant, principal, tool, class, mode, the writes the engine resolved and the hash of the
/// plan the approval is bound to), then the client's SQL, escaped onto one line so that no
/// control, bidirectional or line-breaking character in it can pose as, reorder or hide a
/// trusted field.
pub(super) fn prompt(call: &PreparedCall, planned: &[PlannedWrite], plan: &str) -> String {
    use crate::safe_text::escape_inline as inline;
    let mut message = format!(
        "Approve {} ({})?\n\nTenant: {}\nPrincipal: {}\nTool: {}\nClass: {}\nMode: {}",
        call.tool(),
        call.class,
        inline(&call.cx.tenant),
        inline(&call.principal.display_name()),
        call.tool(),
        call.class,
        call.mode
    );
    for write in planned {
        message.push_str("\nProvider: ");
        message.push_str(&write_line(write));
    }
    message.push_str(&format!("\nPlan: sha256:{plan}"));
    if let Some(sql) = &call.sql {
        message.push_str("\n\nSQL as the client sent it (escaped, on one line): ");
        message.push_str(&inline(sql));
    }
    message
}

/// One write the engine resolved, as the prompt shows it: `<provider> · <VERB> <resource>
/// via method <method> (<n> requests)`, each name escaped.
pub(super) fn write_line(write: &PlannedWrite) -> String {
    use crate::safe_text::escape_inline as inline;
    let requests = match write.requests {
        0 => "requests from its SELECT's rows".to_owned(),
        1 => "1 request".to_owned(),
        n => format!("{n} requests"),
    };
    format!(
        "{} · {} {} via method {} ({requests})",
        inline(&write.provider),
        write.verb,
        inline(&write.resource),
        inline(&write.method),
    )
}

/// The hash an approval is bound to: of every planned write's digest, in order.
pub(super) fn plan_hash(planned: &[PlannedWrite]) -> String {
    let mut text = String::from("querygate-plan-set/v1\n");
    for write in planned {
        text.push_str(&write.digest);
        text.push('\n');
    }
    crate::digest::sha256_hex(text.as_bytes())
}
