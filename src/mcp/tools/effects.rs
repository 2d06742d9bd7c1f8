//! What the validate tools say of a statement's upstream requests: each request's effect
//! and the evidence for it (the engine's answer, or the tenant's `read_methods` /
//! `not_read_methods`), and the class the statement takes from them, as the gate decides.

use schemars::JsonSchema;
use serde::Serialize;

use super::Invocation;
use crate::engine::{PlannedRequest, PreparedStatement};
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

/// Each of `requests` with its effect for the caller's tenant.
fn shown(invocation: &Invocation, requests: &[PlannedRequest]) -> Vec<RequestEffect> {
    let keeper = &invocation.services.keeper;
    requests
        .iter()
        .zip(keeper.effects(&invocation.cx.tenant, requests))
        .map(|(request, effect)| RequestEffect {
            method: request.full_method(),
            http_method: request.http_method.clone(),
            effect: effect.effect.as_str().to_owned(),
            source: effect.source.as_str().to_owned(),
            evidence: effect.evidence.to_string(),
        })
        .collect()
}

/// Plans `statement` for the caller (nothing is sent) and classes it as `bind` does.
pub(crate) async fn classify(invocation: &Invocation, statement: &PreparedStatement) -> Classified {
    let (class, plan) = invocation
        .services
        .keeper
        .classify(&invocation.cx, statement)
        .await;
    Classified {
        class,
        requests: plan
            .requests()
            .map(|requests| shown(invocation, requests))
            .unwrap_or_default(),
    }
}
