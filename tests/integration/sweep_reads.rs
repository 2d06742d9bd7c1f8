//! The registry sweep's modes (`scripts/sweep.sh`): each swept SELECT is classed as the
//! gate classes it (the engine's planned requests, `governance::bound_class`,
//! `policy::decide`), so the sweep reports `read_only` and `safe` beside `full_access`
//! (in `safe` nobody approves: a held read is a failure), and every request a statement
//! allowed in `read_only` sent is checked against the shipped knowledge independently of
//! the engine: from what the mock saw on the wire (the `X-Amz-Target` header, the form's
//! `Action`) and the method the case reads.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use querygate::engine::{Engine, ExecContext, PreparedStatement};
use querygate::governance::{TenantRules, bound_class};
use querygate::policy::{Mode, QueryClass, Verdict, decide};
use serde_json::Value;

/// One request the sweep's mock received.
#[derive(Clone, Debug)]
pub(crate) struct Sent {
    pub(crate) method: String,
    pub(crate) path_and_query: String,
    pub(crate) target: Option<String>,
    pub(crate) body: Vec<u8>,
}

/// The requests of the case under way.
pub(crate) type SentLog = Arc<Mutex<Vec<Sent>>>;

/// What the case's SELECT method is, for the independent check.
#[derive(Clone, Debug, Default)]
pub(crate) struct CaseMethod {
    pub(crate) provider: String,
    pub(crate) service: String,
    pub(crate) resource: String,
    pub(crate) method: String,
    /// Upper case.
    pub(crate) http_method: String,
    /// The OpenAPI path template.
    pub(crate) path: String,
    pub(crate) operation_id: Option<String>,
    /// The `x-stackQL-graphQL.query` template, when the operation has one.
    pub(crate) graphql: Option<String>,
    /// The service document's `info.x-serviceName` and `info.x-endpointPrefix`.
    pub(crate) service_name: Option<String>,
    pub(crate) endpoint_prefix: Option<String>,
}

/// The shipped knowledge, read from `crates/engine/data` by the test itself.
pub(crate) struct Knowledge {
    /// `prefix:action` (lower case) → access level.
    levels: HashMap<String, String>,
    /// `x-serviceName` → IAM prefix, and `x-endpointPrefix` → IAM prefix.
    by_name: HashMap<String, String>,
    by_endpoint: HashMap<String, String>,
    /// provider, service, resource, method, verb, path → effect.
    table: HashMap<[String; 6], String>,
}

fn data(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("crates/engine/data")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn rows(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split('\t').collect())
}

impl Knowledge {
    pub(crate) fn load() -> Self {
        let levels = data("aws-access-levels.tsv");
        let services = data("aws-services.tsv");
        let table = data("method-effects.tsv");
        let mut knowledge = Knowledge {
            levels: HashMap::new(),
            by_name: HashMap::new(),
            by_endpoint: HashMap::new(),
            table: HashMap::new(),
        };
        for row in rows(&levels) {
            knowledge.levels.insert(
                format!("{}:{}", row[0], row[1]).to_lowercase(),
                row[2].to_owned(),
            );
        }
        for row in rows(&services) {
            if row[0] != "-" {
                knowledge
                    .by_name
                    .insert(row[0].to_owned(), row[2].to_owned());
            }
            if row[1] != "-" {
                knowledge
                    .by_endpoint
                    .entry(row[1].to_owned())
                    .or_insert_with(|| row[2].to_owned());
            }
        }
        for row in rows(&table) {
            let key = [row[0], row[1], row[2], row[3], row[4], row[5]].map(str::to_owned);
            knowledge.table.insert(key, row[6].to_owned());
        }
        knowledge
    }

    /// Why `sent`, a request of `case`, is not known to be a read (`None`: it is).
    pub(crate) fn not_a_read(&self, case: &CaseMethod, sent: &Sent) -> Option<String> {
        if matches!(sent.method.as_str(), "GET" | "HEAD") {
            return None;
        }
        if let Some(query) = &case.graphql {
            let head = query.trim_start();
            return (!(head.starts_with("query") || head.starts_with('{')))
                .then(|| format!("GraphQL operation that is not a query: {head:.40}"));
        }
        if case.provider == "aws" || case.provider == "awscc" {
            let form = String::from_utf8_lossy(&sent.body);
            let action = sent
                .target
                .as_deref()
                .map(|t| t.rsplit('.').next().unwrap_or(t).to_owned())
                .or_else(|| action_of(&form))
                .or_else(|| {
                    sent.path_and_query
                        .split_once('?')
                        .and_then(|(_, q)| action_of(q))
                })
                .or_else(|| case.operation_id.clone());
            let prefix = case
                .service_name
                .as_ref()
                .and_then(|n| self.by_name.get(n))
                .or_else(|| {
                    case.endpoint_prefix
                        .as_ref()
                        .and_then(|e| self.by_endpoint.get(e))
                });
            let (Some(action), Some(prefix)) = (action, prefix) else {
                return Some(format!(
                    "{} {}: no AWS action or service",
                    sent.method, sent.path_and_query
                ));
            };
            return match self
                .levels
                .get(&format!("{prefix}:{action}").to_lowercase())
            {
                Some(level) if level == "List" || level == "Read" => None,
                other => Some(format!("{prefix}:{action} is {other:?}")),
            };
        }
        let key = [
            &case.provider,
            &case.service,
            &case.resource,
            &case.method,
            &case.http_method,
            &case.path,
        ]
        .map(|s| s.to_owned());
        match self.table.get(&key).map(String::as_str) {
            Some("read") => None,
            other => Some(format!("{}: reviewed table says {other:?}", key.join("."))),
        }
    }
}

fn action_of(form: &str) -> Option<String> {
    form.split('&')
        .find_map(|pair| pair.strip_prefix("Action="))
        .map(str::to_owned)
}

/// The class the gate gives `sql` for a tenant without rules, and the evidence of its
/// strongest request when it is not a read (`Err`: it does not plan).
pub(crate) async fn class_of(
    engine: &Engine,
    cx: &ExecContext,
    sql: &str,
) -> Result<(QueryClass, String), String> {
    let statement = PreparedStatement::parse(sql).map_err(|err| err.message().to_owned())?;
    let requests = engine
        .requests(cx, &statement)
        .await
        .map_err(|err| err.message().to_owned())?;
    let rules = TenantRules::default();
    let class = bound_class(QueryClass::Select, &requests, &rules);
    let why = requests
        .iter()
        .map(|r| rules.effect(r))
        .filter(|e| !e.is_read())
        .map(|e| format!("{} ({})", e.effect, e.source.as_str()))
        .next()
        .unwrap_or_default();
    Ok((class, why))
}

/// Whether the gate runs a statement of `class` in `mode` with nobody to approve it.
pub(crate) fn runs_unattended(mode: Mode, class: QueryClass) -> bool {
    decide(mode, class) == Verdict::Allow
}

/// The case's method, from the service document.
pub(crate) fn case_method(
    [provider, service, resource, method]: [&str; 4],
    http_method: &str,
    path: &str,
    op: &Value,
    doc: &Value,
) -> CaseMethod {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    CaseMethod {
        provider: provider.to_owned(),
        service: service.to_owned(),
        resource: resource.to_owned(),
        method: method.to_owned(),
        http_method: http_method.to_ascii_uppercase(),
        path: path.to_owned(),
        operation_id: text(op.get("operationId")),
        graphql: text(op.pointer("/x-stackQL-graphQL/query")),
        service_name: text(doc.pointer("/info/x-serviceName")),
        endpoint_prefix: text(doc.pointer("/info/x-endpointPrefix")),
    }
}

/// A JSON pointer token unescaped (`~1` → `/`, `~0` → `~`).
pub(crate) fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}
