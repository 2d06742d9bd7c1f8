//! What a person approving a call is shown, and what the approval is bound to: the prompt
//! (trusted fields first, the client's SQL last and escaped) and the hash of the plan the
//! engine resolved.

use super::PreparedCall;
use crate::approval::pending::WriteRequests;
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
        for line in WriteRequests::of(write).lines() {
            message.push_str("\n  ");
            message.push_str(&line);
        }
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

/// The hash an approval is bound to: of every planned write's digest, in order (the
/// engine's [`plan_hash`](crate::engine::plan_hash), which `validate_mutation_query` shows).
pub(super) fn plan_hash(planned: &[PlannedWrite]) -> String {
    crate::engine::plan_hash(planned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_hash_is_the_one_approvals_were_bound_to() {
        let write = |digest: &str| PlannedWrite {
            verb: "DELETE".into(),
            provider: "p".into(),
            resource: "p.s.r".into(),
            method: "delete".into(),
            requests: 1,
            digest: digest.into(),
            previews: Vec::new(),
        };
        let planned = [write("aa"), write("bb")];
        assert_eq!(
            plan_hash(&planned),
            crate::digest::sha256_hex(b"querygate-plan-set/v1\naa\nbb\n")
        );
    }
}
