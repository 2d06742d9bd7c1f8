//! What a statement would send upstream, planned as running it plans it but without sending
//! anything: for each request (or fan-out of requests), the method it runs, that method's
//! HTTP method, and the value the statement gives each of its parameters. The tool-call
//! gate decides on this; it never reads the SQL itself.

use super::error::Result;
use super::requests::PlannedRequest;
use super::state::Inner;
use super::types::ExecContext;
use super::{mutate, select, sql};

/// The requests of `statement` for the tenant of `cx`. SHOW, DESCRIBE and REGISTRY
/// statements call no provider API: none.
pub(crate) fn plan(
    inner: &Inner,
    cx: &ExecContext,
    statement: &sql::Statement,
) -> Result<Vec<PlannedRequest>> {
    match statement {
        sql::Statement::Query(query) => select::requests(inner, cx, query.clone()),
        sql::Statement::QueryOverExec { query, execs } => {
            let mut out = Vec::new();
            for exec in execs {
                out.extend(mutate::exec_requests(inner, cx, exec)?);
            }
            out.extend(select::requests(inner, cx, query.clone())?);
            Ok(out)
        }
        sql::Statement::Mutation(mutation) => mutate::mutation_requests(inner, cx, mutation),
        sql::Statement::Exec(exec) => mutate::exec_requests(inner, cx, exec),
        sql::Statement::Show { .. }
        | sql::Statement::Describe { .. }
        | sql::Statement::Registry(_) => Ok(Vec::new()),
    }
}
