//! The gate's rules, held by everything that asks them: the pipeline's `bind` and mode gate,
//! the validate tools and `querygate policy explain`. It plans a statement's requests and
//! classes it by their effects for the caller's tenant, gives the tenant mode's verdict on a
//! class (the one place [`policy::decide`] is asked), checks pinned parameters, and says
//! whether a read may be sent unattended. It runs nothing and sends nothing.

use std::sync::Arc;

use crate::code::Code;
use crate::engine::{Engine, ExecContext, MethodEffect, PlannedRequest, PreparedStatement};
use crate::governance::{self, PinViolation, TenantRules};
use crate::policy::{self, Mode, QueryClass, Verdict};
use crate::tenant::Tenants;

/// The rules of a tenant that configures none.
static NO_RULES: TenantRules = TenantRules {
    read_methods: Vec::new(),
    not_read_methods: Vec::new(),
    pinned_parameters: std::collections::BTreeMap::new(),
};

/// What planning a statement's requests gave.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plan {
    /// Not planned: the call is not a SQL call, or its statement does not parse.
    NotPlanned,
    /// The requests the statement would make, in order.
    Planned(Vec<PlannedRequest>),
    /// The engine could not plan them: the code and message of its error (running the
    /// statement fails the same way, before any request).
    Failed(Code, String),
}

impl Plan {
    /// The planned requests, if the statement planned.
    pub(crate) fn requests(&self) -> Option<&[PlannedRequest]> {
        match self {
            Plan::Planned(requests) => Some(requests),
            Plan::NotPlanned | Plan::Failed(..) => None,
        }
    }

    /// The planned requests, taken out (the plan is left `NotPlanned`).
    pub(crate) fn take_requests(&mut self) -> Option<Vec<PlannedRequest>> {
        match std::mem::replace(self, Plan::NotPlanned) {
            Plan::Planned(requests) => Some(requests),
            other => {
                *self = other;
                None
            }
        }
    }
}

/// The gate's rules over the tenants' configuration and the engine's plans.
#[derive(Clone)]
pub(crate) struct Gatekeeper {
    engine: Engine,
    tenants: Arc<Tenants>,
}

impl std::fmt::Debug for Gatekeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gatekeeper").finish_non_exhaustive()
    }
}

impl Gatekeeper {
    /// Rules over `tenants`, planning with `engine`.
    pub(crate) fn new(engine: Engine, tenants: Arc<Tenants>) -> Self {
        Gatekeeper { engine, tenants }
    }

    /// The engine that plans.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The tenants whose rules these are.
    pub(crate) fn tenants(&self) -> &Arc<Tenants> {
        &self.tenants
    }

    /// The rules of `tenant` (`read_methods`, `not_read_methods`, `pinned_parameters`).
    pub(crate) fn rules(&self, tenant: &str) -> &TenantRules {
        self.tenants
            .config(tenant)
            .map_or(&NO_RULES, |config| &config.rules)
    }

    /// What a tenant in `mode` does with a statement of `class`, before Cedar and approvals.
    pub(crate) fn verdict(mode: Mode, class: QueryClass) -> Verdict {
        policy::decide(mode, class)
    }

    /// Plans `statement`'s requests for the caller of `cx` and keeps the plan with the
    /// statement (a run does not plan it again): the plan, and the class the statement
    /// takes from the effects of its requests (`written` when it does not plan).
    pub(crate) async fn bind(
        &self,
        cx: &ExecContext,
        written: QueryClass,
        statement: &mut PreparedStatement,
    ) -> (QueryClass, Plan) {
        match self.engine.plan_requests(cx, statement).await {
            Ok(requests) => self.classed(&cx.tenant, written, requests),
            Err(err) => (
                written,
                Plan::Failed(err.kind().into(), err.message().to_owned()),
            ),
        }
    }

    /// As [`Gatekeeper::bind`] for a statement that is only looked at (the validate
    /// tools): the plan is not kept with it.
    pub(crate) async fn classify(
        &self,
        cx: &ExecContext,
        statement: &PreparedStatement,
    ) -> (QueryClass, Plan) {
        let written = if statement.nests_statements() {
            QueryClass::Unknown
        } else {
            QueryClass::of_kind(statement.kind())
        };
        match self.engine.requests(cx, statement).await {
            Ok(requests) => self.classed(&cx.tenant, written, requests),
            Err(err) => (
                written,
                Plan::Failed(err.kind().into(), err.message().to_owned()),
            ),
        }
    }

    fn classed(
        &self,
        tenant: &str,
        written: QueryClass,
        requests: Vec<PlannedRequest>,
    ) -> (QueryClass, Plan) {
        let class = governance::bound_class(written, &requests, self.rules(tenant));
        (class, Plan::Planned(requests))
    }

    /// What each of `requests` does for `tenant`, with the evidence, in request order.
    pub(crate) fn effects(&self, tenant: &str, requests: &[PlannedRequest]) -> Vec<MethodEffect> {
        let rules = self.rules(tenant);
        requests
            .iter()
            .map(|request| rules.effect(request))
            .collect()
    }

    /// The first of `requests` that gives a parameter pinned for `tenant` a value it does
    /// not allow.
    pub(crate) fn check_pins(
        &self,
        tenant: &str,
        requests: &[PlannedRequest],
    ) -> Result<(), PinViolation> {
        governance::check_pins(requests, self.rules(tenant))
    }

    /// Whether `requests` may be sent for `tenant` as an unattended read, e.g. the current
    /// rows `validate_mutation_query` shows: every request a read by the tenant's rules, no
    /// pinned parameter given another value, and no Cedar policies to ask per caller. `Err`
    /// says why not.
    pub(crate) fn unattended_read(
        &self,
        tenant: &str,
        requests: &[PlannedRequest],
    ) -> Result<(), String> {
        if let Some(write) = governance::first_write(requests, self.rules(tenant)) {
            return Err(format!(
                "the matching SELECT would call {} with {}, which may change something upstream",
                write.full_method(),
                write.http_method
            ));
        }
        self.check_pins(tenant, requests)
            .map_err(|pinned| pinned.to_string())?;
        if self.tenants.policies(tenant).is_some() {
            return Err(
                "the tenant's Cedar policies decide each read per caller; run the SELECT with run_select_query to see the rows"
                    .to_owned(),
            );
        }
        Ok(())
    }
}
