//! The planned-request types (what one upstream request of a statement would be: its
//! method, HTTP method, parameter values and effect) and how one is made from a method;
//! select and mutate both make them.

use std::sync::Arc;

use serde::Serialize;

use super::document::{Method, Param, Resource};
use super::effect::{AWS_TARGET_HEADER, Effect, EffectSource, MethodEffect};

/// One upstream request a statement would make, or one group of requests that differ only
/// in the values of fanned-out parameters (`IN` lists, one request per value).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedRequest {
    /// The provider's SQL name.
    pub provider: String,
    /// The service.
    pub service: String,
    /// The resource.
    pub resource: String,
    /// The method of the resource that runs.
    pub method: String,
    /// The method's HTTP method, upper case (`GET`, `POST`, …).
    pub http_method: String,
    /// Every parameter the method takes (path, query, header and server variables), with
    /// the values the statement gives it.
    pub params: Vec<PlannedParam>,
    /// What the request does upstream, with the evidence: the method's effect, or `other`
    /// when the statement sets the header that names the AWS action the effect was read
    /// from.
    pub effect: MethodEffect,
}

impl PlannedRequest {
    /// `provider.service.resource.method`.
    pub fn full_method(&self) -> String {
        format!(
            "{}.{}.{}.{}",
            self.provider, self.service, self.resource, self.method
        )
    }

    /// Whether the engine knows the request only reads (see [`MethodEffect`]).
    pub fn is_read(&self) -> bool {
        self.effect.is_read()
    }
}

/// One parameter of a planned request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedParam {
    /// The parameter's name in the provider document.
    pub name: String,
    /// The snake_case name it also answers to in SQL, under a native casing or the
    /// provider's `snake_case_aliases`.
    pub sql_name: Option<String>,
    /// The values the statement gives it.
    pub values: ParamValues,
}

impl PlannedParam {
    /// Whether `name` names this parameter (its document name or its SQL alias, ignoring
    /// ASCII case).
    pub fn is_named(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
            || self
                .sql_name
                .as_deref()
                .is_some_and(|alias| alias.eq_ignore_ascii_case(name))
    }
}

/// Where a parameter's values come from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "values")]
pub enum ParamValues {
    /// Literal values written in the statement: one request per value.
    Given(Vec<String>),
    /// Values known only while the statement runs: another table's rows, an expression,
    /// or the rows of an `INSERT … SELECT`.
    Runtime,
    /// Not given: the request carries the document's default, a value from the
    /// credentials, or none.
    Omitted,
}

/// A planned request of `method` of `resource`, each parameter's values from `values`.
pub(crate) fn request(
    resource: &Arc<Resource>,
    method: &Method,
    mut values: impl FnMut(&Param) -> ParamValues,
) -> PlannedRequest {
    let params: Vec<PlannedParam> = method
        .params
        .iter()
        .map(|param| PlannedParam {
            name: param.name.clone(),
            sql_name: method.sql_alias(&param.name),
            values: values(param),
        })
        .collect();
    PlannedRequest {
        effect: request_effect(method, &params),
        provider: resource.provider.clone(),
        service: resource.service.clone(),
        resource: resource.name.clone(),
        method: method.name.clone(),
        http_method: method.http_method.to_ascii_uppercase(),
        params,
    }
}

/// The effect of a request of `method` with `params`: the method's, unless the statement
/// gives the `X-Amz-Target` header a value of its own, when the action the effect was read
/// from may not be the one sent.
fn request_effect(method: &Method, params: &[PlannedParam]) -> MethodEffect {
    let retargeted = params.iter().any(|param| {
        param.name.eq_ignore_ascii_case(AWS_TARGET_HEADER)
            && !matches!(param.values, ParamValues::Omitted)
    });
    if retargeted && method.effect.effect != Effect::Other {
        return MethodEffect::new(
            Effect::Other,
            EffectSource::Unknown,
            format!(
                "the statement sets {AWS_TARGET_HEADER}: the action sent is not known, not a read"
            ),
        );
    }
    method.effect.clone()
}
