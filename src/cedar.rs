//! Policy as code: a tenant's Cedar policies (`tenants[].policy_files`), parsed and
//! validated against querygate's schema ([`SCHEMA`]) at load, reloaded when their files
//! change, and asked about every upstream request of every statement at the gate.
//!
//! The model:
//! - principal `Querygate::Principal::"<typed name>"` (`jwt:<issuer>#<sub>`, `uri:…`,
//!   `dns:…`, `cn:…`, `local`, `anonymous`), in `Querygate::Group::"jwt:<issuer>#<g>"` for each
//!   group of its token's `groups` claim, with `subject`, `issuer`, `auth_method` and `tenant`;
//!   a policy naming a principal or group by a bare name is refused at load;
//! - action: the statement's class (`select`, `mutation_create`, `mutation_delete`,
//!   `lifecycle`, `unknown`), in the action group `read` (select) or `write` (the others);
//! - resource `Querygate::Method::"provider.service.resource.method"`: one planned request,
//!   with `provider`, `service`, `resource`, `method`, `http_method`, `verb` (the SQL verb),
//!   `reads` (the request only reads), `effect` (`read`, `write`, `delete` or `other`: the
//!   engine's answer, or the tenant's `read_methods` / `not_read_methods`), `runtime_parameters` and
//!   `omitted_parameters`; each parameter the statement gives literal values is a tag whose
//!   value is the set of those values (`resource.getTag("project")`);
//! - context: `tool`, `mode`, `sql_class` (the class as written) and `row_cap`.
//!
//! A tenant with policies runs only what they permit (Cedar's default deny): every request
//! of a statement must be permitted, and no policy may forbid it. A policy that fails to
//! evaluate denies (fail closed). No I/O on the request path: loading reads files, deciding
//! does not.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, OnceLock, RwLock, Weak};
use std::time::Duration;

use cedar_policy::{
    ActionConstraint, Authorizer, Context, Decision, Entities, Entity, EntityId, EntityTypeName,
    EntityUid, PolicyId, PolicySet, Request, RestrictedExpression, Schema, ValidationMode,
    Validator,
};
use miette::Diagnostic;

use crate::auth::Principal;
use crate::engine::{ParamValues, PlannedRequest};
use crate::governance::TenantRules;
use crate::policy::{Mode, QueryClass};

mod names;
pub(super) mod slice;

use slice::{ActionSlice, Guards};

/// The Cedar schema every tenant's policies are validated against.
pub const SCHEMA: &str = r#"namespace Querygate {
  // A group the principal belongs to: "jwt:<issuer>#<group>", a name of the groups claim
  // of a token of that issuer.
  entity Group;

  // Who calls: "jwt:<issuer>#<sub>", "uri:…", "dns:…" or "cn:…" (a client certificate),
  // "local" or "anonymous".
  entity Principal in [Group] {
    subject: String,      // JWT sub (bound to no issuer), certificate identity, "local" or "anonymous"
    issuer: String,       // JWT iss; "" for other methods
    auth_method: String,  // "jwt", "mtls", "local" or "anonymous"
    tenant: String,
  };

  // One upstream request of the statement: provider.service.resource.method. Each parameter
  // given literal values is a tag: resource.getTag("project") is the set of its values.
  entity Method {
    provider: String,
    service: String,
    resource: String,
    method: String,
    http_method: String,              // "GET", "POST", ...
    verb: String,                     // "SELECT", "INSERT", "UPDATE", "REPLACE", "DELETE", "EXEC", ...
    reads: Bool,                      // the request only reads (effect == "read")
    effect: String,                   // "read", "write", "delete" or "other" (the engine's, or tenants[].read_methods / not_read_methods)
    runtime_parameters: Set<String>,  // values known only while the statement runs
    omitted_parameters: Set<String>,  // not given: the method's default, or none
  } tags Set<String>;

  type Call = {
    tool: String,       // run_select_query, run_mutation_query, run_lifecycle_operation
    mode: String,       // read_only, safe, delete_safe, full_access
    sql_class: String,  // the class of the statement as written
    row_cap: Long,      // rows the call returns at most
  };

  // Action groups.
  action "read";
  action "write";

  // The statement's class: the strongest effect of its requests (a SELECT of a method that
  // is not a read is not a "select"; an EXEC of a method that deletes is "mutation_delete").
  action "select" in ["read"] appliesTo { principal: [Principal], resource: [Method], context: Call };
  action "mutation_create" in ["write"] appliesTo { principal: [Principal], resource: [Method], context: Call };
  action "mutation_delete" in ["write"] appliesTo { principal: [Principal], resource: [Method], context: Call };
  action "lifecycle" in ["write"] appliesTo { principal: [Principal], resource: [Method], context: Call };
  action "unknown" in ["write"] appliesTo { principal: [Principal], resource: [Method], context: Call };
}
"#;

/// The parsed schema, its action entities and the entity type names (parsed once: parsing a
/// type name runs Cedar's parser, too slow for every call).
struct Model {
    schema: Schema,
    actions: Entities,
    principal_type: EntityTypeName,
    group_type: EntityTypeName,
    method_type: EntityTypeName,
    /// The action of each class, in [`QueryClass::ALL`]'s order.
    action_uids: Vec<EntityUid>,
}

impl Model {
    fn action(&self, class: QueryClass) -> &EntityUid {
        let index = QueryClass::ALL
            .iter()
            .position(|c| *c == class)
            .unwrap_or(QueryClass::ALL.len() - 1);
        &self.action_uids[index]
    }

    /// Whether a policy's action scope can hold for `action` (the action or one of its
    /// groups named).
    fn action_matches(&self, constraint: &ActionConstraint, action: &EntityUid) -> bool {
        let in_group = |group: &EntityUid| {
            group == action
                || self
                    .actions
                    .ancestors(action)
                    .is_some_and(|mut a| a.any(|a| a == group))
        };
        match constraint {
            ActionConstraint::Any => true,
            ActionConstraint::Eq(uid) => uid == action,
            ActionConstraint::In(groups) => groups.iter().any(in_group),
        }
    }
}

fn model() -> Result<&'static Model, String> {
    static MODEL: OnceLock<Result<Model, String>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let (schema, _warnings) = Schema::from_cedarschema_str(SCHEMA)
                .map_err(|err| format!("querygate's Cedar schema does not parse: {err}"))?;
            let actions = schema
                .action_entities()
                .map_err(|err| format!("querygate's Cedar schema has bad actions: {err}"))?;
            let name = |n: &str| {
                EntityTypeName::from_str(n).map_err(|e| format!("bad Cedar type name {n}: {e}"))
            };
            let action_type = name("Querygate::Action")?;
            let action_uids = QueryClass::ALL
                .iter()
                .map(|c| {
                    EntityUid::from_type_name_and_id(action_type.clone(), EntityId::new(c.as_str()))
                })
                .collect();
            Ok(Model {
                schema,
                actions,
                principal_type: name("Querygate::Principal")?,
                group_type: name("Querygate::Group")?,
                method_type: name("Querygate::Method")?,
                action_uids,
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A problem in a policy file, where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyProblem {
    /// The file.
    pub file: PathBuf,
    /// 1-based line and column, when the problem has a position.
    pub position: Option<(usize, usize)>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for PolicyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, column)) => write!(
                f,
                "{}:{line}:{column}: {}",
                self.file.display(),
                self.message
            ),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// 1-based line and column of byte `offset` in `text`.
fn position(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The problems of one diagnostic: one per label (or one without a position), with its
/// help when it has one.
fn problems_of(file: &Path, text: &str, diagnostic: &dyn Diagnostic) -> Vec<PolicyProblem> {
    let mut message = diagnostic.to_string();
    if let Some(help) = diagnostic.help() {
        message = format!("{message} (help: {help})");
    }
    let positions: Vec<(usize, usize)> = diagnostic
        .labels()
        .map(|labels| labels.map(|l| position(text, l.offset())).collect())
        .unwrap_or_default();
    match positions.first() {
        Some(first) => vec![PolicyProblem {
            file: file.to_owned(),
            position: Some(*first),
            message,
        }],
        None => vec![PolicyProblem {
            file: file.to_owned(),
            position: None,
            message,
        }],
    }
}

/// The policy files of `paths`: each a file, or a folder whose `*.cedar` files are taken
/// (sorted by name, not recursively).
fn files_of(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Vec<PolicyProblem>> {
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for path in paths {
        let problem = |message: String| PolicyProblem {
            file: path.clone(),
            position: None,
            message,
        };
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => match std::fs::read_dir(path) {
                Ok(entries) => {
                    let mut found: Vec<PathBuf> = entries
                        .filter_map(Result::ok)
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|e| e == "cedar") && p.is_file())
                        .collect();
                    found.sort();
                    files.extend(found);
                }
                Err(err) => problems.push(problem(format!("cannot list the folder: {err}"))),
            },
            Ok(_) => files.push(path.clone()),
            Err(err) => problems.push(problem(format!("cannot read it: {err}"))),
        }
    }
    if problems.is_empty() {
        Ok(files)
    } else {
        Err(problems)
    }
}

/// A tenant's policies, parsed and validated.
#[derive(Debug)]
pub struct LoadedPolicies {
    set: PolicySet,
    /// Each file read, with its text (to tell a change).
    sources: Vec<(PathBuf, String)>,
    /// The policies that can apply to each action, in [`QueryClass::ALL`]'s order.
    slices: Vec<ActionSlice>,
}

/// Slices `set` by action, then by the subject and the provider each policy guards on.
fn slices_of(model: &Model, set: &PolicySet) -> Result<Vec<ActionSlice>, String> {
    let policies: Vec<(&cedar_policy::Policy, Guards)> = set
        .policies()
        .map(|p| (p, slice::guards_of(p, &model.principal_type)))
        .collect();
    QueryClass::ALL
        .iter()
        .map(|class| {
            let action = model.action(*class);
            let applying: Vec<(&cedar_policy::Policy, &Guards)> = policies
                .iter()
                .filter(|(p, _)| model.action_matches(&p.action_constraint(), action))
                .map(|(p, g)| (*p, g))
                .collect();
            ActionSlice::of(&applying)
        })
        .collect()
}

impl LoadedPolicies {
    /// How many policies there are.
    pub fn len(&self) -> usize {
        self.set.policies().count()
    }

    /// Whether there are none (every statement is then denied).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The policies' ids, in file order.
    pub fn ids(&self) -> Vec<String> {
        self.set.policies().map(|p| p.id().to_string()).collect()
    }
}

/// Reads, parses and validates the policies of `paths` (files or folders of `*.cedar`).
/// A policy's id is its `@id("…")` annotation, else `<file name>#<n>` (its place in the
/// file, from 1). Every problem is reported, with its position.
pub fn load(paths: &[PathBuf]) -> Result<LoadedPolicies, Vec<PolicyProblem>> {
    let files = files_of(paths)?;
    let mut sources = Vec::new();
    let mut problems = Vec::new();
    for file in files {
        match std::fs::read_to_string(&file) {
            Ok(text) => sources.push((file, text)),
            Err(err) => problems.push(PolicyProblem {
                file,
                position: None,
                message: format!("cannot read it: {err}"),
            }),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    parse_sources(sources)
}

/// Parses and validates policy texts (`(file, text)` pairs).
#[expect(
    clippy::too_many_lines,
    reason = "parses, validates and links every policy text against the schema, collecting every problem before failing"
)]
pub fn parse_sources(
    sources: Vec<(PathBuf, String)>,
) -> Result<LoadedPolicies, Vec<PolicyProblem>> {
    let model = model().map_err(|message| {
        vec![PolicyProblem {
            file: PathBuf::from("<schema>"),
            position: None,
            message,
        }]
    })?;
    let mut problems = Vec::new();
    let mut set = PolicySet::new();
    // Which source each policy id came from.
    let mut origin: BTreeMap<String, usize> = BTreeMap::new();
    for (index, (file, text)) in sources.iter().enumerate() {
        let parsed = match PolicySet::from_str(text) {
            Ok(parsed) => parsed,
            Err(errors) => {
                for error in errors.iter() {
                    problems.extend(problems_of(file, text, error));
                }
                continue;
            }
        };
        if parsed.templates().next().is_some() {
            problems.push(PolicyProblem {
                file: file.clone(),
                position: None,
                message:
                    "templates (?principal, ?resource) are not supported: write static policies"
                        .to_owned(),
            });
            continue;
        }
        let name = file.file_name().map_or_else(
            || file.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        // `PolicySet::from_str` numbers policies `policy0`, `policy1`… in text order.
        let mut policies: Vec<_> = parsed.policies().collect();
        policies.sort_by_key(|p| {
            p.id()
                .to_string()
                .trim_start_matches("policy")
                .parse::<usize>()
                .unwrap_or(usize::MAX)
        });
        for (n, policy) in policies.into_iter().enumerate() {
            let id = policy
                .annotation("id")
                .map_or_else(|| format!("{name}#{}", n + 1), str::to_owned);
            if let Some(&other) = origin.get(&id) {
                problems.push(PolicyProblem {
                    file: file.clone(),
                    position: None,
                    message: format!(
                        "policy id '{}' is used twice (also in {}); give each policy its own @id",
                        id.escape_debug(),
                        sources[other].0.display()
                    ),
                });
                continue;
            }
            origin.insert(id.clone(), index);
            for message in names::untyped_names(policy) {
                problems.push(PolicyProblem {
                    file: file.clone(),
                    position: None,
                    message: format!("policy '{}': {message}", id.escape_debug()),
                });
            }
            if let Err(err) = set.add(policy.new_id(PolicyId::new(&id))) {
                problems.push(PolicyProblem {
                    file: file.clone(),
                    position: None,
                    message: err.to_string(),
                });
            }
        }
    }
    if problems.is_empty() {
        let validator = Validator::new(model.schema.clone());
        let result = validator.validate(&set, ValidationMode::Strict);
        for error in result.validation_errors() {
            let id = error.policy_id().to_string();
            let (file, text) = origin
                .get(&id)
                .and_then(|&i| sources.get(i))
                .map_or((Path::new("<policies>"), ""), |(f, t)| {
                    (f.as_path(), t.as_str())
                });
            let mut found = problems_of(file, text, error);
            for problem in &mut found {
                problem.message = format!("policy '{}': {}", id.escape_debug(), problem.message);
            }
            problems.extend(found);
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let slices = slices_of(model, &set).map_err(|message| {
        vec![PolicyProblem {
            file: PathBuf::from("<policies>"),
            position: None,
            message,
        }]
    })?;
    Ok(LoadedPolicies {
        set,
        sources,
        slices,
    })
}

/// A tenant's policies, replaced when their files change (a broken change is logged and
/// the policies in force are kept).
#[derive(Debug)]
pub struct TenantPolicies {
    tenant: String,
    paths: Vec<PathBuf>,
    interval: Duration,
    current: RwLock<Arc<LoadedPolicies>>,
}

impl PartialEq for TenantPolicies {
    fn eq(&self, other: &Self) -> bool {
        self.tenant == other.tenant && self.paths == other.paths && self.interval == other.interval
    }
}

impl TenantPolicies {
    /// Loads the policies of `paths` for `tenant` (a problem fails the load).
    pub fn open(
        tenant: &str,
        paths: Vec<PathBuf>,
        interval: Duration,
    ) -> Result<Self, Vec<PolicyProblem>> {
        let loaded = load(&paths)?;
        Ok(TenantPolicies {
            tenant: tenant.to_owned(),
            paths,
            interval,
            current: RwLock::new(Arc::new(loaded)),
        })
    }

    /// The configured files and folders.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// The policies in force.
    pub fn current(&self) -> Arc<LoadedPolicies> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the files again; when their text changed, parses and validates them and puts
    /// them in force, or logs why not and keeps the current ones. Whether new policies are
    /// in force.
    pub fn reload_if_changed(&self) -> bool {
        let current = self.current();
        let sources = match files_of(&self.paths).map(|files| {
            files
                .into_iter()
                .map(|f| {
                    let text = std::fs::read_to_string(&f);
                    (f, text)
                })
                .collect::<Vec<_>>()
        }) {
            Ok(sources) => sources,
            Err(problems) => {
                self.log_broken(&problems);
                return false;
            }
        };
        let unchanged = sources.len() == current.sources.len()
            && sources
                .iter()
                .zip(&current.sources)
                .all(|((f, t), (g, u))| f == g && t.as_ref().is_ok_and(|t| t == u));
        if unchanged {
            return false;
        }
        let mut texts = Vec::new();
        for (file, text) in sources {
            match text {
                Ok(text) => texts.push((file, text)),
                Err(err) => {
                    self.log_broken(&[PolicyProblem {
                        file,
                        position: None,
                        message: format!("cannot read it: {err}"),
                    }]);
                    return false;
                }
            }
        }
        match parse_sources(texts) {
            Ok(loaded) => {
                let count = loaded.len();
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(loaded);
                tracing::info!(tenant = %self.tenant, policies = count, "Cedar policies reloaded");
                true
            }
            Err(problems) => {
                self.log_broken(&problems);
                false
            }
        }
    }

    fn log_broken(&self, problems: &[PolicyProblem]) {
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        tracing::error!(
            tenant = %self.tenant,
            "Cedar policies not reloaded, keeping the ones in force: {}",
            text.join("; ")
        );
    }

    /// Checks the files every `policy_reload_interval` until the policies are dropped.
    pub fn watch(self: &Arc<Self>) {
        let weak: Weak<Self> = Arc::downgrade(self);
        let interval = self.interval;
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(this) = weak.upgrade() else { break };
                // Reading files blocks: keep it off the async workers.
                let _ = tokio::task::spawn_blocking(move || this.reload_if_changed()).await;
            }
        });
    }
}

/// What the gate knows of a statement when it asks the policies.
#[derive(Debug, Clone, Copy)]
pub struct Question<'a> {
    /// Who calls.
    pub principal: &'a Principal,
    /// The tool.
    pub tool: &'a str,
    /// The tenant's mode.
    pub mode: Mode,
    /// The statement's class (the action).
    pub class: QueryClass,
    /// The class as written.
    pub sql_class: QueryClass,
    /// The SQL verb (`SELECT`, `DELETE`, …).
    pub verb: &'a str,
    /// Rows the call returns at most.
    pub row_cap: usize,
    /// The statement's upstream requests.
    pub requests: &'a [PlannedRequest],
    /// The tenant's read rules (`reads`).
    pub rules: &'a TenantRules,
}

/// The policies' answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestAnswer {
    /// `provider.service.resource.method`.
    pub method: String,
    /// Whether it may be sent.
    pub allowed: bool,
    /// The policies that decided: the permits that allowed it, or the forbids that denied
    /// it (empty when nothing permits it).
    pub policies: Vec<String>,
    /// Why policies failed to evaluate (each denies), in the order of their ids.
    pub errors: Vec<String>,
}

/// The policies' answer for a statement: one per request, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// One per request.
    pub requests: Vec<RequestAnswer>,
}

impl Answer {
    /// The first request denied, if any.
    pub fn denied(&self) -> Option<&RequestAnswer> {
        self.requests.iter().find(|r| !r.allowed)
    }

    /// The policy ids that decided, without repeats, in order: the denied request's, or
    /// every request's permits.
    pub fn policy_ids(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        let answers: Vec<&RequestAnswer> = match self.denied() {
            Some(denied) => vec![denied],
            None => self.requests.iter().collect(),
        };
        answers
            .into_iter()
            .flat_map(|r| r.policies.iter())
            .filter(|id| seen.insert(id.as_str()))
            .cloned()
            .collect()
    }
}

impl RequestAnswer {
    /// Why the request is denied, for the refusal.
    pub fn why_denied(&self) -> String {
        let quoted = |ids: &[String]| {
            ids.iter()
                .map(|id| format!("'{}'", id.escape_debug()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.errors.is_empty() {
            format!(
                "Cedar policy {} failed to evaluate for {} (an error denies): {}",
                quoted(&self.policies),
                self.method,
                self.errors.join("; ")
            )
        } else if self.policies.is_empty() {
            format!(
                "no Cedar policy of this tenant permits {} (tenants[].policy_files: only what a policy permits runs)",
                self.method
            )
        } else {
            format!(
                "denied by Cedar policy {} for {}",
                quoted(&self.policies),
                self.method
            )
        }
    }
}

fn uid(type_name: &EntityTypeName, id: &str) -> EntityUid {
    EntityUid::from_type_name_and_id(type_name.clone(), EntityId::new(id))
}

fn string(text: &str) -> RestrictedExpression {
    RestrictedExpression::new_string(text.to_owned())
}

fn strings<'s>(values: impl IntoIterator<Item = &'s str>) -> RestrictedExpression {
    RestrictedExpression::new_set(values.into_iter().map(string))
}

/// Asks `policies` about every request of the statement described by `question`.
///
/// What depends only on the tenant's policies (the policy slices, the schema, the action
/// entities and the type names) was built at load; per call this builds the principal, its
/// groups and the context once, and per request its resource entity and its store, and
/// evaluates only the policies that can apply to the action, the request's provider and
/// the principal's subject (a request none can apply to is denied without asking Cedar).
pub fn decide(policies: &LoadedPolicies, question: &Question<'_>) -> Result<Answer, String> {
    let model = model()?;
    let principal = question.principal;
    let principal_name = principal.typed_name();
    let principal_uid = uid(&model.principal_type, &principal_name);
    let groups: Vec<EntityUid> = principal
        .typed_groups()
        .map(|g| uid(&model.group_type, &g))
        .collect();
    let principal_entity = Entity::new_with_tags(
        principal_uid.clone(),
        [
            ("subject".to_owned(), string(&principal.subject)),
            (
                "issuer".to_owned(),
                string(principal.issuer.as_deref().unwrap_or_default()),
            ),
            ("auth_method".to_owned(), string(principal.method.as_str())),
            ("tenant".to_owned(), string(&principal.tenant)),
        ],
        groups.iter().cloned(),
        [],
    )
    .map_err(|e| e.to_string())?;
    // The principal and its groups, in each request's store.
    let mut people: Vec<Entity> = std::iter::once(principal_entity)
        .chain(
            groups
                .into_iter()
                .map(|g| Entity::new_no_attrs(g, Default::default())),
        )
        .collect();
    let action = model.action(question.class);
    let slice = QueryClass::ALL
        .iter()
        .position(|c| *c == question.class)
        .and_then(|i| policies.slices.get(i));
    let context = Context::from_pairs([
        ("tool".to_owned(), string(question.tool)),
        ("mode".to_owned(), string(question.mode.as_str())),
        ("sql_class".to_owned(), string(question.sql_class.as_str())),
        (
            "row_cap".to_owned(),
            RestrictedExpression::new_long(i64::try_from(question.row_cap).unwrap_or(i64::MAX)),
        ),
    ])
    .map_err(|e| e.to_string())?;
    let authorizer = Authorizer::new();
    let principal_slices: Vec<_> = slice
        .map(|s| s.principal_slices(&principal_name, &principal.subject))
        .unwrap_or_default();
    let mut answers = Vec::with_capacity(question.requests.len());
    for (n, request) in question.requests.iter().enumerate() {
        let method = request.full_method();
        // No slice (a class the schema lacks): nothing applies, so nothing permits it.
        let sets: Vec<&PolicySet> = slice
            .map(|s| s.sets_for(&principal_slices, &request.provider).collect())
            .unwrap_or_default();
        let mut outcome = Outcome::default();
        if !sets.is_empty() {
            let resource_uid = uid(&model.method_type, &method);
            let (entity, _) = resource_entity(resource_uid.clone(), request, question)?;
            // Each request its own store, built in one go (one transitive closure): a
            // policy sees only the request's resource. The last request takes the people.
            let people = if n + 1 == question.requests.len() {
                std::mem::take(&mut people)
            } else {
                people.clone()
            };
            let entities = model
                .actions
                .clone()
                .add_entities(people.into_iter().chain(std::iter::once(entity)), None)
                .map_err(|e| e.to_string())?;
            let cedar_request = Request::new(
                principal_uid.clone(),
                action.clone(),
                resource_uid,
                context.clone(),
                None,
            )
            .map_err(|e| e.to_string())?;
            for set in sets {
                outcome.add(&authorizer.is_authorized(&cedar_request, set, &entities));
            }
        }
        answers.push(outcome.answer(method));
    }
    Ok(Answer { requests: answers })
}

/// What the policy sets asked about one request said, together: Cedar's answer over their
/// union (each policy is evaluated on its own, so the union's satisfied permits, satisfied
/// forbids and errors are those of the sets together).
#[derive(Debug, Default)]
struct Outcome {
    /// Satisfied permits (of the sets that had no satisfied forbid).
    permits: Vec<String>,
    /// Satisfied forbids.
    forbids: Vec<String>,
    /// Policies that failed to evaluate, with the error.
    errors: Vec<(String, String)>,
}

impl Outcome {
    fn add(&mut self, response: &cedar_policy::Response) {
        let diagnostics = response.diagnostics();
        // Cedar's reasons are the satisfied permits when the set allows, else its satisfied
        // forbids (none when nothing permits and nothing forbids).
        let reasons = diagnostics.reason().map(ToString::to_string);
        match response.decision() {
            Decision::Allow => self.permits.extend(reasons),
            Decision::Deny => self.forbids.extend(reasons),
        }
        self.errors.extend(diagnostics.errors().map(|e| {
            let id = match e {
                cedar_policy::AuthorizationError::PolicyEvaluationError(e) => {
                    e.policy_id().to_string()
                }
            };
            (id, e.to_string())
        }));
    }

    /// The answer: allowed when a policy permits, none forbids and none failed; the
    /// policies that decided (the failed ones, else the forbids, else the permits), sorted.
    fn answer(mut self, method: String) -> RequestAnswer {
        let allowed = self.errors.is_empty() && self.forbids.is_empty() && !self.permits.is_empty();
        let mut policies = if !self.errors.is_empty() {
            self.errors.sort();
            self.errors.iter().map(|(id, _)| id.clone()).collect()
        } else if !self.forbids.is_empty() {
            self.forbids
        } else {
            self.permits
        };
        policies.sort();
        RequestAnswer {
            method,
            allowed,
            policies,
            errors: self.errors.into_iter().map(|(_, error)| error).collect(),
        }
    }
}

/// The resource entity of one request, and its tags (for `explain`).
fn resource_entity(
    uid: EntityUid,
    request: &PlannedRequest,
    question: &Question<'_>,
) -> Result<(Entity, BTreeMap<String, Vec<String>>), String> {
    let mut tags: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut runtime = Vec::new();
    let mut omitted = Vec::new();
    let effect = question.rules.effect(request);
    for param in &request.params {
        let names = std::iter::once(param.name.as_str()).chain(param.sql_name.as_deref());
        match &param.values {
            ParamValues::Given(values) => {
                for name in names {
                    tags.insert(name.to_owned(), values.clone());
                }
            }
            ParamValues::Runtime => runtime.extend(names),
            ParamValues::Omitted => omitted.extend(names),
        }
    }
    let entity = Entity::new_with_tags(
        uid,
        [
            ("provider".to_owned(), string(&request.provider)),
            ("service".to_owned(), string(&request.service)),
            ("resource".to_owned(), string(&request.resource)),
            ("method".to_owned(), string(&request.method)),
            ("http_method".to_owned(), string(&request.http_method)),
            ("verb".to_owned(), string(question.verb)),
            (
                "reads".to_owned(),
                RestrictedExpression::new_bool(effect.is_read()),
            ),
            ("effect".to_owned(), string(effect.effect.as_str())),
            ("runtime_parameters".to_owned(), strings(runtime)),
            ("omitted_parameters".to_owned(), strings(omitted)),
        ],
        [],
        tags.iter()
            .map(|(name, values)| (name.clone(), strings(values.iter().map(String::as_str)))),
    )
    .map_err(|e| e.to_string())?;
    Ok((entity, tags))
}

/// The parameter tags a request's resource carries (for `policy explain`).
pub fn request_tags(request: &PlannedRequest) -> BTreeMap<String, Vec<String>> {
    let mut tags = BTreeMap::new();
    for param in &request.params {
        if let ParamValues::Given(values) = &param.values {
            tags.insert(param.name.clone(), values.clone());
        }
    }
    tags
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests;
