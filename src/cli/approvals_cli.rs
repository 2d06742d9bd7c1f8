//! `querygate approvals list|show|approve|deny`: the out-of-band approvals in the database
//! (`approval.store: postgres`), decided as the local operator (`cli:<os user>`, method
//! `cli`). The operator holds the database credentials, with which any row could be changed
//! anyway, so `approval.approvers` does not narrow it; `require_distinct_approver` still
//! refuses an approval of a call the local user made. With `approval.store: memory` the
//! pending approvals live inside the serving process: the command says so and uses the
//! HTTP API instead.

use std::sync::Arc;

use super::ApprovalsAction;
use crate::approval::{DecideError, Decider, OutOfBand, PgPendingStore};
use crate::config::{ApprovalStoreKind, Config};

/// Runs the subcommand; the exit code (0 done, 1 refused or failed, 2 unusable here).
pub(super) async fn run(config: &Config, action: ApprovalsAction) -> i32 {
    if config.approval.store != ApprovalStoreKind::Postgres {
        eprintln!(
            "error: approval.store is memory: pending approvals live in the serving process only; decide them through its HTTP API (POST /approvals/<id>/approve), or set approval.store: postgres"
        );
        return 2;
    }
    let pool = match crate::db::connect(&config.database).await {
        Ok(pool) => pool,
        Err(err) => {
            eprintln!("error: {err}");
            return 1;
        }
    };
    let oob = match OutOfBand::new(&config.approval, Arc::new(PgPendingStore::new(pool))) {
        Ok(oob) => oob,
        Err(err) => {
            eprintln!("error: {err}");
            return 1;
        }
    };
    let user = crate::audit::record::os_user();
    let decider = Decider::Operator(&user);
    let print = |value: serde_json::Value| println!("{value}");
    let outcome: Result<(), DecideError> = match action {
        ApprovalsAction::List { tenant } => match oob.store().list(&tenant).await {
            Ok(list) => {
                for approval in &list {
                    print(crate::http::approvals::view(&oob, approval));
                }
                Ok(())
            }
            Err(err) => Err(err.into()),
        },
        ApprovalsAction::Show { id, tenant } => oob
            .show(decider, &tenant, &id)
            .await
            .map(|a| print(crate::http::approvals::view(&oob, &a))),
        ApprovalsAction::Approve { id, tenant, reason } => {
            decide(config, &oob, decider, &tenant, &id, true, &reason).await
        }
        ApprovalsAction::Deny { id, tenant, reason } => {
            decide(config, &oob, decider, &tenant, &id, false, &reason).await
        }
    };
    match outcome {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("error: {err} [{}]", err.code());
            1
        }
    }
}

async fn decide(
    config: &Config,
    oob: &OutOfBand,
    decider: Decider<'_>,
    tenant: &str,
    id: &str,
    approve: bool,
    reason: &str,
) -> Result<(), DecideError> {
    let audit = crate::app::open_local_audit(config, false)
        .await
        .map_err(|err| DecideError::Audit(err.to_string()))?;
    let approval = oob
        .decide(decider, tenant, id, approve, reason, audit.as_ref())
        .await?;
    println!("{}", crate::http::approvals::view(oob, &approval));
    Ok(())
}
