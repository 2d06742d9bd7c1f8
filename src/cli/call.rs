//! `querygate query` and `querygate registry pull` as tool calls: each runs once through
//! the pipeline `serve` and `stdio` use (`Transport::Cli`, the local principal), so the
//! same gate, approvals, admission, timeout and audit apply. The statement's class picks
//! the SQL tool; the pipeline hands back the engine's output, which the CLI renders.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::approve::TerminalApprover;
use crate::config::Config;
use crate::engine::{ParsedSql, QueryOutput};
use crate::mcp::pipeline::{ApprovalChannel, CallError, CallOrigin, ReplyBody, ToolCall};
use crate::policy::{self, QueryClass};
use crate::tenant::Principal;

/// What the person asked for.
pub(super) enum Command {
    /// `querygate query [--yes] SQL`.
    Query {
        /// The statement.
        sql: String,
        /// `--yes`: approve what the mode holds for approval.
        yes: bool,
    },
    /// `querygate registry pull PROVIDER [VERSION]`.
    Pull {
        /// The provider.
        provider: String,
        /// The version, else the newest usable one.
        version: Option<String>,
    },
}

/// Why a command produced no output: what to print and the exit code.
#[derive(Debug)]
pub(super) struct Failure {
    /// The message (already safe to print).
    pub(super) message: String,
    /// 2 for a configuration that cannot work, 1 otherwise.
    pub(super) exit_code: i32,
}

impl Failure {
    fn new(message: impl Into<String>, exit_code: i32) -> Self {
        Failure {
            message: message.into(),
            exit_code,
        }
    }
}

/// Runs `command` through the pipeline and returns the engine's output.
pub(super) async fn run(config: &Config, command: Command) -> Result<QueryOutput, Failure> {
    let (handler, audit) = crate::app::App::builder(config.clone())
        .cli_handler()
        .map_err(|err| Failure::new(err.to_string(), err.exit_code()))?;
    let result = Box::pin(handler.pipeline().call(tool_call(command))).await;
    crate::app::close_audit(audit).await;
    let reply = result.map_err(|err| {
        let exit_code = match err {
            // The local tenant cannot be served, or the tool is not offered
            // (server.enabled_tools): the configuration decides.
            CallError::Tenant(_) | CallError::UnknownTool(_) => 2,
            CallError::InvalidArguments { .. } | CallError::Unauthenticated => 1,
        };
        Failure::new(err.to_string(), exit_code)
    })?;
    let outcome = match reply.body {
        // The CLI never goes out of band; were it to, the pending result is what it shows.
        ReplyBody::Complete(outcome) | ReplyBody::UrlElicitation { outcome, .. } => outcome,
        // The CLI offers no resumable approval channel.
        ReplyBody::InputRequired { .. } => {
            return Err(Failure::new("the call asked for a resumable approval", 1));
        }
    };
    if let Some(failure) = outcome.error {
        return Err(Failure::new(failure.message, 1));
    }
    outcome
        .output
        .map(|output| *output)
        .ok_or_else(|| Failure::new("the tool returned no output for the CLI", 1))
}

/// The tool call of `command`, made by the local user.
fn tool_call(command: Command) -> ToolCall {
    let origin = CallOrigin {
        client_name: Some("querygate-cli".to_owned()),
        client_version: Some(env!("CARGO_PKG_VERSION").to_owned()),
        ..CallOrigin::default()
    };
    let mut arguments = Map::new();
    match command {
        Command::Query { sql, yes } => {
            let tool = tool_for(policy::classify(&ParsedSql::parse(&sql)));
            arguments.insert("sql".into(), Value::String(sql));
            ToolCall {
                name: tool.to_owned(),
                arguments,
                principal: Some(Principal::local()),
                approval: match TerminalApprover::for_command(yes) {
                    Some(approver) => ApprovalChannel::Inline(Arc::new(approver)),
                    None => ApprovalChannel::Unavailable,
                },
                origin: CallOrigin {
                    command: Some("query"),
                    ..origin
                },
                progress: None,
            }
        }
        Command::Pull { provider, version } => {
            arguments.insert("provider".into(), Value::String(provider));
            if let Some(version) = version {
                arguments.insert("version".into(), Value::String(version));
            }
            ToolCall {
                name: "pull_provider".to_owned(),
                arguments,
                principal: Some(Principal::local()),
                approval: ApprovalChannel::Unavailable,
                progress: None,
                origin,
            }
        }
    }
}

/// The SQL tool that runs statements of `class`. No tool runs `unknown` statements: the
/// read tool's gate refuses them (or the parse error, or the several statements), saying
/// why.
pub(super) fn tool_for(class: QueryClass) -> &'static str {
    match class {
        QueryClass::Select | QueryClass::Unknown => "run_select_query",
        QueryClass::MutationCreate | QueryClass::MutationDelete => "run_mutation_query",
        QueryClass::Lifecycle => "run_lifecycle_operation",
    }
}
