//! What a provider method does upstream: its [`Effect`] (read, write, delete, other) and the
//! evidence that decided it, worked out once per method from the provider document and the
//! API knowledge shipped with the engine. Every decision above the engine (the mode gate,
//! Cedar, quotas, the result cache, the audit) reads this answer, never the HTTP verb.
//!
//! The sources, in the order they decide (the first that knows wins):
//!
//! 1. AWS's Service Authorization Reference (`data/aws-access-levels.tsv`), for documents
//!    signed with `aws_signing_v4` whose service `data/aws-services.tsv` maps to an IAM
//!    prefix: the action the request sends (its `X-Amz-Target` header, the `Action` of its
//!    query string, else the operation's id); access levels `List` and `Read` only read, the
//!    others do not. It decides when the data lists the action, and always for the query
//!    protocols (`x-protocol: query` or `ec2`), whose documents bind every action, deletes
//!    included, to GET: there an action the data does not list is not a read.
//! 2. HTTP `GET` or `HEAD`: a read; HTTP `DELETE`: a delete.
//! 3. A GraphQL operation in the document (`x-stackQL-graphQL.query`): parsed; a document of
//!    `query` operations only is a read, one with a `mutation` or `subscription` is not, and
//!    one that does not parse is `other`.
//! 4. The reviewed table of the registry's other methods bound to POST… under SELECT
//!    (`data/method-effects.tsv`), keyed by provider, service, resource, method, HTTP method
//!    and path: a document that moves a method to another path or verb loses its entry.
//! 5. The document's SQL binding of a method that is not a read: `insert`, `update` or
//!    `replace` is a write, `delete` a delete.
//! 6. Anything else: `other` (fail closed).
//!
//! A tenant's `read_methods` and `not_read_methods` override this answer above the engine.

mod aws;
mod graphql;
mod reviewed;

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

/// What a method does upstream, from the least to the most dangerous: a statement takes the
/// strongest effect of its requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Only reads: nothing changes upstream.
    Read,
    /// Creates or changes something.
    Write,
    /// Deletes something.
    Delete,
    /// Side effects, cost, or not known: never a read.
    Other,
}

impl Effect {
    /// `read`, `write`, `delete` or `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Read => "read",
            Effect::Write => "write",
            Effect::Delete => "delete",
            Effect::Other => "other",
        }
    }

    /// Parses `read`, `write`, `delete` or `other`.
    pub fn parse(text: &str) -> Option<Effect> {
        match text {
            "read" => Some(Effect::Read),
            "write" => Some(Effect::Write),
            "delete" => Some(Effect::Delete),
            "other" => Some(Effect::Other),
            _ => None,
        }
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which source decided an effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectSource {
    /// The HTTP method (`GET`, `HEAD`, `DELETE`).
    HttpMethod,
    /// The GraphQL operation of the document's query.
    Graphql,
    /// AWS's Service Authorization Reference access level.
    AwsAccessLevel,
    /// The reviewed table of methods bound to POST… under SELECT.
    ReviewedTable,
    /// The document's SQL binding (`insert`, `update`, `replace`, `delete`).
    SqlBinding,
    /// Nothing known: not a read.
    Unknown,
    /// The tenant's `read_methods`.
    TenantReadMethods,
    /// The tenant's `not_read_methods`.
    TenantNotReadMethods,
}

impl EffectSource {
    /// The source's name (`http_method`, `aws_access_level`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            EffectSource::HttpMethod => "http_method",
            EffectSource::Graphql => "graphql",
            EffectSource::AwsAccessLevel => "aws_access_level",
            EffectSource::ReviewedTable => "reviewed_table",
            EffectSource::SqlBinding => "sql_binding",
            EffectSource::Unknown => "unknown",
            EffectSource::TenantReadMethods => "tenant_read_methods",
            EffectSource::TenantNotReadMethods => "tenant_not_read_methods",
        }
    }
}

/// A method's effect with the evidence for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MethodEffect {
    /// What the method does.
    pub effect: Effect,
    /// Which source decided.
    pub source: EffectSource,
    /// The rule or table entry that decided, for people ("ec2:DescribeInstances (the
    /// Action of the path): AWS access level List").
    #[serde(serialize_with = "as_str")]
    pub evidence: Arc<str>,
}

fn as_str<S: serde::Serializer>(text: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(text)
}

impl MethodEffect {
    /// An effect decided by `source`, with `evidence`.
    pub fn new(effect: Effect, source: EffectSource, evidence: impl Into<Arc<str>>) -> Self {
        MethodEffect {
            effect,
            source,
            evidence: evidence.into(),
        }
    }

    /// The effect of a method known only by its HTTP method (upper case): `GET` and `HEAD`
    /// read, `DELETE` deletes, anything else is `other` (not a read).
    pub fn of_http_method(http: &str) -> Self {
        match http {
            "GET" | "HEAD" => MethodEffect::new(
                Effect::Read,
                EffectSource::HttpMethod,
                format!("HTTP {http} reads"),
            ),
            "DELETE" => MethodEffect::new(
                Effect::Delete,
                EffectSource::HttpMethod,
                "HTTP DELETE deletes",
            ),
            _ => MethodEffect::new(
                Effect::Other,
                EffectSource::Unknown,
                format!("HTTP {http} with no knowledge that it only reads: not a read"),
            ),
        }
    }

    /// Whether the method only reads.
    pub fn is_read(&self) -> bool {
        self.effect == Effect::Read
    }
}

impl fmt::Display for MethodEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, {}", self.effect, self.evidence)
    }
}

/// What the effect of a method is worked out from.
pub(crate) struct MethodFacts<'a> {
    /// The provider's SQL name.
    pub(crate) provider: &'a str,
    /// The service's SQL name.
    pub(crate) service: &'a str,
    /// The resource's name.
    pub(crate) resource: &'a str,
    /// The method's name.
    pub(crate) method: &'a str,
    /// The HTTP method, lower case as in the document.
    pub(crate) http_method: &'a str,
    /// The OpenAPI path template.
    pub(crate) path: &'a str,
    /// The operation object.
    pub(crate) operation: &'a serde_json::Value,
    /// The document the operation is in (its `info` names the AWS service).
    pub(crate) document: &'a serde_json::Value,
    /// The default of the method's `X-Amz-Target` header parameter, when it has one.
    pub(crate) aws_target: Option<&'a str>,
    /// The provider's `config.auth.type` in its document.
    pub(crate) auth_type: Option<&'a str>,
    /// The SQL verbs the resource binds the method to (`select`, `insert`, …).
    pub(crate) sql_verbs: &'a [&'a str],
}

/// The name of the request header that carries an AWS JSON-protocol action.
pub(crate) const AWS_TARGET_HEADER: &str = "X-Amz-Target";

/// The effect of the method `facts` describes (see the module's sources, in order).
pub(crate) fn of_method(facts: &MethodFacts<'_>) -> MethodEffect {
    let http = facts.http_method.to_ascii_uppercase();
    // AWS's reference first: an AWS query-protocol document binds every action to GET
    // (`GET /?Action=DeleteUser`), so there the verb says nothing, and a known action's
    // level is better evidence than a verb anywhere.
    let aws = aws::effect(facts);
    let aws_decides = aws
        .as_ref()
        .is_some_and(|found| found.known || found.verb_meaningless);
    if let Some(found) = &aws
        && aws_decides
        && found.effect.is_read()
    {
        return found.effect.clone();
    }
    if !aws_decides && matches!(http.as_str(), "GET" | "HEAD") {
        return MethodEffect::of_http_method(&http);
    }
    if http == "DELETE" {
        return MethodEffect::of_http_method(&http);
    }
    if !aws_decides {
        if let Some(query) = graphql::query_of(facts.operation) {
            return graphql::effect(query);
        }
        if let Some(entry) = reviewed::lookup(facts, &http) {
            return entry;
        }
    }
    let aws = aws.map(|found| found.effect);
    let binding = facts.sql_verbs.iter().find_map(|verb| match *verb {
        "insert" | "update" | "replace" => Some((Effect::Write, *verb)),
        "delete" => Some((Effect::Delete, *verb)),
        _ => None,
    });
    let aws_note = aws
        .as_ref()
        .map(|found| format!(" ({})", found.evidence))
        .unwrap_or_default();
    if let Some((effect, verb)) = binding {
        return MethodEffect::new(
            effect,
            EffectSource::SqlBinding,
            format!(
                "the document binds this HTTP {http} method to SQL {}{aws_note}",
                verb.to_ascii_uppercase()
            ),
        );
    }
    match aws {
        Some(found) => MethodEffect::new(Effect::Other, found.source, found.evidence),
        None => MethodEffect::of_http_method(&http),
    }
}

/// The counts of the knowledge the engine ships, for `docs/engine.md` and the census.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct KnowledgeCounts {
    /// AWS actions with an access level.
    pub aws_actions: usize,
    /// AWS documents mapped to an IAM service prefix.
    pub aws_services: usize,
    /// Entries of the reviewed table.
    pub reviewed_methods: usize,
}

/// How much API knowledge the engine ships.
pub fn knowledge_counts() -> KnowledgeCounts {
    KnowledgeCounts {
        aws_actions: aws::action_count(),
        aws_services: aws::service_count(),
        reviewed_methods: reviewed::entry_count(),
    }
}

#[cfg(test)]
mod tests;
