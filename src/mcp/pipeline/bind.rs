//! `bind`: the upstream requests of a prepared call's statement, planned by the engine
//! before the layers run (nothing is sent). Every SQL statement that plans is classed by
//! the strongest effect of its requests (the engine's answer for each method, which the
//! tenant's `read_methods` and `not_read_methods` override; see `governance::bound_class`):
//! a SELECT whose requests only read is a `select` whatever their HTTP method, one that
//! runs a method that is not a read is not, and an EXEC of a method that deletes is a
//! `mutation_delete`. A plan that fails leaves the call's class as it is, its error noted:
//! running it fails the same way, before any request (and the gate refuses it with that
//! error when the tenant's policies must be asked). A SELECT's plan is kept with the
//! statement and run as it is (it is not planned a second time).

use super::PreparedCall;
use crate::mcp::gatekeeper::Gatekeeper;
use crate::mcp::tools::Effect;

/// Plans the requests of `call`'s statement and classes it by their effects.
pub(super) async fn bind(keeper: &Gatekeeper, call: &mut PreparedCall) {
    if !matches!(call.spec.effect, Effect::Sql(_)) {
        return;
    }
    let Some(Ok(statement)) = &mut call.statement else {
        return;
    };
    let (class, plan) = keeper.bind(&call.cx, call.class, statement).await;
    call.class = class;
    call.plan = plan;
}
