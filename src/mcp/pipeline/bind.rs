//! `bind`: the upstream requests of a prepared call's statement, planned by the engine
//! before the layers run (nothing is sent), when a decision needs them: for a read, whose
//! class follows the HTTP methods it runs (a SELECT of a method bound to POST, PUT, PATCH
//! or DELETE is classed `lifecycle` unless the tenant's `read_methods` names the method),
//! and for any statement of a tenant with `pinned_parameters` or Cedar `policy_files` (the
//! gate checks them) or a result cache (a write drops the cached results of the resources it
//! touches). A plan that fails leaves the call as it is, its error noted: running it fails
//! the same way, before any request (and the gate refuses it with that error when the
//! tenant's policies must be asked). A SELECT's plan is kept with the statement and run as
//! it is (it is not planned a second time).

use std::sync::Arc;

use super::PreparedCall;
use super::cache::ResultCaches;
use crate::engine::Engine;
use crate::governance;
use crate::mcp::tools::Effect;
use crate::policy::QueryClass;
use crate::tenant::Tenants;

/// What `bind` plans with.
pub(super) struct Bind {
    /// Plans the requests.
    pub(super) engine: Engine,
    /// The tenants' rules and policies.
    pub(super) tenants: Arc<Tenants>,
    /// Which tenants cache results.
    pub(super) results: Arc<ResultCaches>,
}

/// Plans the requests of `call`'s statement when the tenant's rules decide on them.
pub(super) async fn bind(bind: &Bind, call: &mut PreparedCall) {
    if !matches!(call.spec.effect, Effect::Sql(_)) {
        return;
    }
    let Some(Ok(statement)) = &mut call.statement else {
        return;
    };
    let rules = bind
        .tenants
        .config(&call.cx.tenant)
        .map(|tenant| &tenant.rules);
    let pinned = rules.is_some_and(governance::TenantRules::has_pins);
    // A tenant with a result cache: a write's requests name the resources it drops.
    let cached = bind.results.enabled(&call.cx.tenant);
    let policies = bind
        .tenants
        .config(&call.cx.tenant)
        .is_some_and(|tenant| tenant.policies.is_some());
    if call.class != QueryClass::Select && !pinned && !cached && !policies {
        return;
    }
    // The plan stays with the statement: dispatch runs it rather than planning again.
    let requests = match bind.engine.plan_requests(&call.cx, statement).await {
        Ok(requests) => requests,
        Err(err) => {
            call.plan_error = Some((err.kind().into(), err.message().to_owned()));
            return;
        }
    };
    let default_rules = governance::TenantRules::default();
    call.class = governance::bound_class(call.class, &requests, rules.unwrap_or(&default_rules));
    call.requests = Some(requests);
}
