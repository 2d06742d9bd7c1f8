//! `SELECT … FROM (EXEC …)` in a tool that runs reads: such a statement is written as an
//! EXEC (class `lifecycle`), and a tool that runs only `select` takes it only when every
//! request it plans reads, by the effect the engine gives each method (the tenant's
//! `read_methods` and `not_read_methods` applied, see `bind`): StackQL's "Google IAM
//! Policy Agg", an aggregate over `getIamPolicy` (a POST whose effect is read), runs in
//! `run_select_query`. An EXEC of any other effect, or one whose requests did not plan,
//! keeps the refusal naming `run_lifecycle_operation`, in every mode.

use super::PreparedCall;
use crate::policy::QueryClass;

/// Whether `call` is a SELECT over EXEC row sources that only reads, sent to a tool that
/// runs `select` statements (`runs`).
pub(super) fn reads_exec_rows(call: &PreparedCall, runs: &[QueryClass]) -> bool {
    let over_exec = matches!(&call.statement, Some(Ok(s)) if s.is_query_over_exec());
    // A failed plan is `Plan::Failed`, never `Planned`.
    let planned = call.plan.requests().is_some_and(|r| !r.is_empty());
    over_exec && planned && call.class == QueryClass::Select && runs.contains(&QueryClass::Select)
}
