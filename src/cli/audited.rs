//! `querygate query` statements with side effects (writes, EXEC) and `querygate registry
//! pull` are audited like tool calls: principal `local`, auth method `local`, the OS user;
//! an intent durable before anything is sent, an outcome after, `audit.failure_mode`
//! applied. Statements the mode gate refuses get one outcome record. Reads that run are not
//! audited (they change nothing). Each command chains its records in a stream of its own
//! (`app::open_local_audit`): several may run at once.

use std::future::Future;
use std::time::Instant;

pub(super) use crate::audit::record::Decision;
use crate::audit::record::{self, AuditRecord, Outcome, Phase};
use crate::code::Code;
use crate::config::Config;
use crate::engine::{Error, QueryOutput};
use crate::policy::QueryClass;

/// The command being audited.
pub(super) struct CliCall<'a> {
    /// `query`, or `pull_provider` for `registry pull`.
    pub(super) tool: &'a str,
    /// The statement, for `query`.
    pub(super) sql: Option<&'a str>,
    /// What it would do.
    pub(super) class: QueryClass,
    /// Whether a person approved it (`--yes` or the terminal prompt).
    pub(super) approved: bool,
    /// The tenant it runs for.
    pub(super) tenant: &'a str,
    /// Arguments worth recording (`registry_pull`: provider, version).
    pub(super) args: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Runs `work` between an intent and an outcome record. `Err`: the audit stopped the
/// command (the text says whether anything ran).
pub(super) async fn run(
    config: &Config,
    call: CliCall<'_>,
    work: impl Future<Output = Result<QueryOutput, Error>>,
) -> Result<Result<QueryOutput, Error>, String> {
    let Some(auditor) = crate::app::open_local_audit(config, false).await? else {
        return Ok(work.await);
    };
    let mut record = base_record(config, &call);
    record.phase = Phase::Intent;
    record.decision = if call.approved {
        Decision::NeedsApprovalAccepted
    } else {
        Decision::Allow
    };
    let started = Instant::now();
    if let Err(failure) = auditor.record(record.clone()).await {
        auditor.sink().close().await;
        return Err(failure.message);
    }
    let result = work.await;
    record.phase = Phase::Outcome;
    record.duration_ms = Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
    match &result {
        Ok(output) => {
            record.outcome = Some(Outcome::Ok);
            record.rows_returned = u64::try_from(output.rows.len()).ok();
            record.upstream_status = output.upstream_status;
        }
        Err(err) => {
            // After a write the upstream acknowledged, what it did is not known.
            record.outcome = Some(match err.acknowledged_write() {
                Some(_) => Outcome::Unknown,
                None => Outcome::Error,
            });
            record.error_code = Some(Code::from(err.kind()).as_str().to_owned());
            record.error = Some(err.message().to_owned());
            record.upstream_status = err
                .upstream_failure()
                .map(|f| f.status)
                .or(err.acknowledged_write());
        }
    }
    let written = auditor.record(record).await;
    auditor.sink().close().await;
    match written {
        Ok(_) => Ok(result),
        Err(failure) => Err(failure.message),
    }
}

/// A statement the mode gate refused, for its record.
pub(super) struct Refused<'a> {
    /// The gate's decision.
    pub(super) decision: Decision,
    /// The stable code.
    pub(super) code: Code,
    /// What the person was told.
    pub(super) message: &'a str,
}

/// Writes the outcome record of a refused command. `Err`: the record could not be written.
pub(super) async fn record_refusal(
    config: &Config,
    call: CliCall<'_>,
    refused: Refused<'_>,
) -> Result<(), String> {
    let Some(auditor) = crate::app::open_local_audit(config, false).await? else {
        return Ok(());
    };
    let mut record = base_record(config, &call);
    record.phase = Phase::Outcome;
    record.decision = refused.decision;
    record.outcome = Some(Outcome::Error);
    record.error_code = Some(refused.code.as_str().to_owned());
    record.error = Some(refused.message.to_owned());
    record.duration_ms = Some(0);
    let written = auditor.record(record).await;
    auditor.sink().close().await;
    written.map(|_| ()).map_err(|failure| failure.message)
}

/// The fields every record of a command shares: who, what, where.
fn base_record(config: &Config, call: &CliCall<'_>) -> AuditRecord {
    let mode = config
        .tenant(call.tenant)
        .map(|t| t.mode.as_str())
        .unwrap_or_default();
    AuditRecord {
        timestamp: record::timestamp_now(),
        call_id: record::new_call_id(),
        tenant: call.tenant.to_owned(),
        principal: "local".to_owned(),
        auth_method: "local".to_owned(),
        os_user: Some(record::os_user()),
        client_name: Some("querygate-cli".to_owned()),
        client_version: Some(env!("CARGO_PKG_VERSION").to_owned()),
        tool: call.tool.to_owned(),
        mode: mode.to_owned(),
        // `registry pull` carries no statement: no class.
        query_class: call.sql.map(|_| call.class.as_str().to_owned()),
        sql: call.sql.map(str::to_owned),
        args: call.args.clone(),
        ..Default::default()
    }
}
