//! What the validate tools say of a statement's upstream requests: each request's effect
//! and the evidence for it (the engine's answer, or the tenant's `read_methods` /
//! `not_read_methods`), and the class the statement takes from them, as the gate decides.

use schemars::JsonSchema;
use serde::Serialize;

use super::Invocation;
use crate::engine::{PlannedRequest, PreparedStatement};
use crate::governance::{self, TenantRules};
use crate::policy::QueryClass;

/// One upstream request of a statement and what it does.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestEffect {
    /// `provider.service.resource.method`.
    pub(crate) method: String,
    /// The method's HTTP method.
    pub(crate) http_method: String,
    /// `read`, `write`, `delete` or `other` (side effects, cost, or not known).
    pub(crate) effect: String,
    /// What decided it: `http_method`, `graphql`, `aws_access_level`, `reviewed_table`,
    /// `sql_binding`, `unknown`, `tenant_read_methods` or `tenant_not_read_methods`.
    pub(crate) source: String,
    /// The rule or table entry that decided, e.g. "ec2:DescribeInstances (the Action of
    /// the path): AWS access level List".
    pub(crate) evidence: String,
}

/// The statement's class as the gate decides it, and its requests with their effects.
pub(crate) struct Classified {
    /// The class (the strongest effect of its requests; the class written when it plans
    /// none or does not plan).
    pub(crate) class: QueryClass,
    /// Its requests, with their effects (empty when it does not plan).
    pub(crate) requests: Vec<RequestEffect>,
}

/// The tenant's rules of `invocation`'s caller.
fn rules_of(invocation: &Invocation) -> TenantRules {
    invocation
        .services
        .tenants
        .config(&invocation.cx.tenant)
        .map(|tenant| tenant.rules.clone())
        .unwrap_or_default()
}

/// Each of `requests` with its effect for a tenant with `rules`.
pub(crate) fn shown(requests: &[PlannedRequest], rules: &TenantRules) -> Vec<RequestEffect> {
    requests
        .iter()
        .map(|request| {
            let effect = rules.effect(request);
            RequestEffect {
                method: request.full_method(),
                http_method: request.http_method.clone(),
                effect: effect.effect.as_str().to_owned(),
                source: effect.source.as_str().to_owned(),
                evidence: effect.evidence.to_string(),
            }
        })
        .collect()
}

/// Plans `statement` for the caller (nothing is sent) and classes it as `bind` does.
pub(crate) async fn classify(invocation: &Invocation, statement: &PreparedStatement) -> Classified {
    let written = if statement.nests_statements() {
        QueryClass::Unknown
    } else {
        QueryClass::of_kind(statement.kind())
    };
    let planned = invocation
        .services
        .engine
        .requests(&invocation.cx, statement)
        .await;
    match planned {
        Ok(requests) => {
            let rules = rules_of(invocation);
            Classified {
                class: governance::bound_class(written, &requests, &rules),
                requests: shown(&requests, &rules),
            }
        }
        Err(_) => Classified {
            class: written,
            requests: Vec::new(),
        },
    }
}
