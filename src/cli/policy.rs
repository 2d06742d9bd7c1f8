//! `querygate policy check` and `querygate policy explain`: Cedar policy files checked
//! against querygate's schema, and a statement planned through the tool-call pipeline (its
//! `prepare`, `bind` and gate, sending nothing) with what the tenant's policies decide.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::{Map, Value};

use super::PolicyAction;
use crate::config::Config;
use crate::engine::{ParamValues, ParsedSql};
use crate::mcp::pipeline::{ApprovalChannel, CallOrigin, Explanation, ToolCall};
use crate::policy::{self, Verdict};
use crate::tenant::Principal;

/// `querygate policy check [--schema] FILE...`: 0 when every file is good, 1 otherwise.
pub(super) fn check(schema: bool, files: &[PathBuf]) -> i32 {
    if schema {
        print!("{}", crate::cedar::SCHEMA);
        return 0;
    }
    match crate::cedar::load(files) {
        Ok(loaded) => {
            println!(
                "{} Cedar {} valid against querygate's schema: {}",
                loaded.len(),
                if loaded.len() == 1 {
                    "policy is"
                } else {
                    "policies are"
                },
                loaded.ids().join(", ")
            );
            0
        }
        Err(problems) => {
            for problem in &problems {
                eprintln!("error: {}", super::said(&problem.to_string()));
            }
            1
        }
    }
}

/// `querygate policy explain`: prints the explanation; 0 when the statement would run (or
/// be held for approval), 1 when refused, 2 when the tenant cannot be served.
pub(super) async fn run(config: &Config, action: PolicyAction) -> i32 {
    let PolicyAction::Explain {
        tenant,
        subject,
        issuer,
        groups,
        sql,
    } = action
    else {
        return 2;
    };
    let handler = match crate::app::App::builder(config.clone()).handler(crate::mcp::Transport::Cli)
    {
        Ok(handler) => handler,
        Err(err) => {
            eprintln!("error: {err}");
            return err.exit_code();
        }
    };
    let mut principal = Principal::local();
    principal.tenant = tenant;
    principal.subject = subject;
    if let Some(issuer) = issuer {
        principal.method = crate::auth::Method::Jwt;
        principal.issuer = Some(issuer);
    } else if principal.subject.contains(':') {
        // A certificate's identity (`uri:…`, `dns:…`, `cn:…`) is an mTLS principal.
        principal.method = crate::auth::Method::Mtls;
    }
    principal.groups = groups;
    let tool = super::call::tool_for(policy::classify(&ParsedSql::parse(&sql)));
    let mut arguments = Map::new();
    arguments.insert("sql".into(), Value::String(sql));
    let call = ToolCall {
        name: tool.to_owned(),
        arguments,
        principal: Some(principal),
        approval: ApprovalChannel::Unavailable,
        // Refusals name the tool, as the call's would.
        origin: CallOrigin::default(),
        progress: None,
    };
    match handler.pipeline().explain(call).await {
        Ok(explanation) => {
            print!("{}", super::said(&render(&explanation)));
            match explanation.verdict {
                Ok(Verdict::Allow | Verdict::NeedsApproval(_)) => 0,
                Ok(Verdict::Refuse(_)) | Err(_) => 1,
            }
        }
        Err(err) => {
            eprintln!("error: {}", super::said(&err.to_string()));
            2
        }
    }
}

/// The explanation as text, one fact a line.
#[expect(
    clippy::too_many_lines,
    reason = "one line per fact of the explanation, in the order they are printed"
)]
pub(super) fn render(e: &Explanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "tenant:    {} (mode {})", e.tenant, e.mode);
    let groups = if e.groups.is_empty() {
        String::new()
    } else {
        format!(", groups {}", e.groups.join(", "))
    };
    let _ = writeln!(out, "principal: {}{groups}", e.principal);
    let class = if e.class == e.sql_class {
        e.class.to_string()
    } else {
        format!("{} (written as {})", e.class, e.sql_class)
    };
    let _ = writeln!(out, "statement: {class}, tool {}", e.tool);
    match e.policies {
        None => {
            let _ = writeln!(out, "policies:  none configured (no Cedar policy is asked)");
        }
        Some(n) => {
            let _ = writeln!(out, "policies:  {n} in force; only what they permit runs");
        }
    }
    match &e.requests {
        None => {
            let _ = writeln!(out, "requests:  not planned");
        }
        Some(requests) if requests.is_empty() => {
            let _ = writeln!(out, "requests:  none (nothing is sent upstream)");
        }
        Some(requests) => {
            let answers = e.answer.as_ref().map(|a| a.requests.as_slice());
            for (i, request) in requests.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "request {}: {} {}",
                    i + 1,
                    request.http_method,
                    request.full_method()
                );
                let params: Vec<String> = request
                    .params
                    .iter()
                    .filter_map(|p| match &p.values {
                        ParamValues::Given(values) => Some(format!(
                            "{} = {}",
                            p.name,
                            values
                                .iter()
                                .map(|v| format!("'{}'", v.escape_debug()))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )),
                        ParamValues::Runtime => Some(format!("{} = (at run time)", p.name)),
                        ParamValues::Omitted => None,
                    })
                    .collect();
                let omitted = request
                    .params
                    .iter()
                    .filter(|p| p.values == ParamValues::Omitted)
                    .count();
                let omitted = match (omitted, params.is_empty()) {
                    (0, _) => String::new(),
                    (n, true) => format!("none given ({n} not given)"),
                    (n, false) => format!(" ({n} more not given)"),
                };
                if !params.is_empty() || !omitted.is_empty() {
                    let _ = writeln!(out, "  parameters: {}{omitted}", params.join("; "));
                }
                if let Some(effect) = e.effects.get(i) {
                    let _ = writeln!(
                        out,
                        "  effect: {} ({}; source {})",
                        effect.effect,
                        effect.evidence.escape_debug(),
                        effect.source.as_str()
                    );
                }
                if let Some(answer) = answers.and_then(|a| a.get(i)) {
                    let ids: Vec<String> = answer
                        .policies
                        .iter()
                        .map(|id| format!("'{}'", id.escape_debug()))
                        .collect();
                    if answer.allowed {
                        let _ = writeln!(out, "  cedar: allow, permitted by {}", ids.join(", "));
                    } else {
                        let _ = writeln!(out, "  cedar: deny, {}", answer.why_denied());
                    }
                }
            }
        }
    }
    let decision = match &e.verdict {
        Ok(Verdict::Allow) => "allow: the statement would run".to_owned(),
        Ok(Verdict::NeedsApproval(reason)) => {
            format!("needs approval ({reason}): it would run once a person approves it")
        }
        Ok(Verdict::Refuse(reason)) => format!("refuse [policy.refused]: {reason}"),
        Err((code, message)) => format!("refuse [{code}]: {message}"),
    };
    let _ = writeln!(out, "decision:  {decision}");
    out
}
