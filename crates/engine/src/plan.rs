//! Turns an analysed query into table plans: for each API table occurrence, the select
//! method whose required parameters the statement supplies, where each parameter's values
//! come from (literals, `IN` lists, another table's column), and the load order.

use std::sync::Arc;

use super::document::{BodyTranslate, DocumentStore, Method, Param, ParamLocation, Resource};
use super::error::{Error, ErrorKind, Result};
use super::request_body::{BodyField, BodyTemplate, body_fields};
use super::rows::RowLocator;
use super::sql::{Analysis, Binding, Conjunct, Filter, Referenced, Source};
use super::types::SqlVerb;

/// How one API table occurrence is filled.
#[derive(Debug)]
pub(crate) struct TablePlan {
    /// Local SQLite table name.
    pub(crate) local: String,
    pub(crate) resource: Arc<Resource>,
    /// Index of the chosen method in `resource.methods`.
    pub(crate) method: usize,
    /// Table columns: the row schema's properties, then parameter columns.
    pub(crate) columns: Vec<String>,
    /// What `SELECT *` shows: the response schema's properties.
    pub(crate) star_columns: Vec<String>,
    /// Columns the row schema types as boolean.
    pub(crate) boolean_columns: Vec<String>,
    /// The row schema declares no properties: columns come from the data.
    pub(crate) dynamic_columns: bool,
    /// Response columns named otherwise than their wire names (`config.snake_case_aliases`),
    /// as (column, wire name): rows fill the column from the wire name, and SQL may name
    /// either.
    pub(crate) wire_names: Vec<(String, String)>,
    pub(crate) locator: Arc<RowLocator>,
    /// Supplied parameters (required and optional) and their sources.
    pub(crate) params: Vec<(Param, Source)>,
    /// Occurrences whose rows supply this one's parameters.
    pub(crate) depends_on: Vec<usize>,
    /// OData query options pushed down to every request (`$filter`, `$top`, …).
    pub(crate) pushdown: Vec<(Param, String)>,
    /// The WHERE conjuncts (with the column each names) whose values this table's requests
    /// carry as parameters: the rows are already those the statement asked for.
    pub(crate) consumed: Vec<(Conjunct, String)>,
    /// How the method's request body is made, when its operation takes one; the fields
    /// given are the `params` located in the body.
    pub(crate) body: Option<Arc<BodyTemplate>>,
}

impl TablePlan {
    /// The chosen method.
    pub(crate) fn method(&self) -> &Method {
        &self.resource.methods[self.method]
    }

    /// Keeps in `columns` (what the local table is created with, and so what each row
    /// loads) only the columns the statement may use. A table whose columns come from the
    /// data keeps them all. A `value` column stays (rows that are not JSON objects land
    /// there, and each still counts as a row); when nothing else is used the first column
    /// stays, so the table keeps its shape for `count(*)`.
    pub(crate) fn project(&mut self, referenced: &Referenced) {
        if self.dynamic_columns || *referenced == Referenced::All {
            return;
        }
        let first = self.columns.first().cloned();
        let wire_names = &self.wire_names;
        self.columns.retain(|c| {
            referenced.includes(c)
                || c.eq_ignore_ascii_case(VALUE_COLUMN)
                || wire_names
                    .iter()
                    .any(|(column, wire)| column == c && referenced.includes(wire))
        });
        if self.columns.is_empty() {
            self.columns.extend(first);
        }
    }
}

/// The column rows that are not JSON objects are loaded into.
const VALUE_COLUMN: &str = "value";

/// Plans every occurrence. `resources[i]` is occurrence `i`'s resource.
pub(crate) fn plan_tables(
    store: &DocumentStore,
    analysis: &Analysis,
    resources: Vec<Arc<Resource>>,
) -> Result<Vec<TablePlan>> {
    let mut plans = Vec::with_capacity(resources.len());
    for (index, resource) in resources.into_iter().enumerate() {
        plans.push(plan_one(store, analysis, index, resource)?);
    }
    check_acyclic(&plans)?;
    Ok(plans)
}

fn plan_one(
    store: &DocumentStore,
    analysis: &Analysis,
    index: usize,
    resource: Arc<Resource>,
) -> Result<TablePlan> {
    let occurrence = &analysis.occurrences[index];
    let mut bindings: Vec<&Binding> = analysis
        .bindings
        .iter()
        .filter(|b| b.occurrence == index)
        .filter(|b| b.source.depends_on() != Some(index))
        .collect();
    // A literal beats a link to another table for the same parameter.
    bindings.sort_by_key(|b| b.source.depends_on().is_some());
    let bound = |method: &Method, param: &Param| -> Option<&Source> {
        binding_for(&bindings, method, param).map(|b| &b.source)
    };

    // StackQL's choice: the first method, in the verb's order, whose required parameters
    // and required request-body fields the statement all gives.
    let body_given = |method: &Method| -> bool {
        required_body_fields(store, method).iter().all(|field| {
            bindings
                .iter()
                .any(|b| answers_to_field(method, field, &b.column))
        })
    };
    let candidates = resource.methods_for(SqlVerb::Select);
    let chosen = candidates.iter().position(|method| {
        method.required_params().all(|p| bound(method, p).is_some()) && body_given(method)
    });
    // `org LIKE 'ac%'` on a required parameter: name it before anything is fetched.
    let filtered_param = filtered_required_param(analysis, index, &bindings, &candidates);
    let Some(chosen) = chosen else {
        if let Some(broken) = resource.broken_for(SqlVerb::Select) {
            return Err(broken);
        }
        let err = missing_params_error(store, &resource, &candidates);
        return Err(match filtered_param {
            Some((filter, needing)) => filter_error(&resource, filter, &needing, Some(err)),
            None => err,
        });
    };
    let method = candidates[chosen];
    let method_index = resource
        .methods
        .iter()
        .position(|m| std::ptr::eq(m, method))
        .ok_or_else(|| Error::internal("chosen method not found in its resource"))?;

    let body = BodyTemplate::for_method(store, method)?.map(Arc::new);
    let Bound {
        params,
        depends_on,
        consumed,
    } = bind_params(store, method, &bindings, body.is_some())?;

    let shape = method.row_shape(store)?;
    let boolean_columns = shape
        .columns
        .iter()
        .filter(|c| c.type_name == "boolean")
        .map(|c| c.name.clone())
        .collect();
    let schema_columns: Vec<String> = shape.columns.iter().map(|c| c.name.clone()).collect();
    let wire_names = super::document::wire_names(&shape.columns);
    let dynamic_columns = schema_columns.is_empty();
    // The chosen method neither takes nor returns the filtered parameter: the filter could
    // only fail after a request to the wrong endpoint.
    if let Some((filter, needing)) = filtered_param
        && !contains_ci(&schema_columns, &filter.column)
        && !method
            .params
            .iter()
            .any(|p| p.name.eq_ignore_ascii_case(&filter.column))
    {
        return Err(filter_error(&resource, filter, &needing, None));
    }
    let mut columns = table_columns(method, &params, &schema_columns);
    for name in super::union_params::union_required(store, &resource, method, &schema_columns) {
        if !contains_ci(&columns, &name) {
            columns.push(name);
        }
    }
    // StackQL's rule: `SELECT *` is the response schema's properties, never the parameters.
    let star_columns = schema_columns;
    Ok(TablePlan {
        local: occurrence.local.clone(),
        resource,
        method: method_index,
        columns,
        star_columns,
        boolean_columns,
        dynamic_columns,
        wire_names,
        locator: shape.locator.clone(),
        params,
        depends_on,
        pushdown: Vec::new(),
        consumed,
        body,
    })
}

/// A filter of occurrence `index` that no binding gives (`org LIKE 'ac%'`) on a parameter
/// some of the `candidates` require, with the names of those methods.
fn filtered_required_param<'a>(
    analysis: &'a Analysis,
    index: usize,
    bindings: &[&Binding],
    candidates: &[&'a Method],
) -> Option<(&'a Filter, Vec<&'a str>)> {
    analysis
        .filters
        .iter()
        .filter(|f| f.occurrence == index)
        .filter(|f| {
            !bindings
                .iter()
                .any(|b| b.column.eq_ignore_ascii_case(&f.column))
        })
        .find_map(|f| {
            let needing: Vec<&str> = candidates
                .iter()
                .filter(|m| {
                    m.required_params()
                        .any(|p| m.answers_to(&p.name, &f.column))
                })
                .map(|m| m.name.as_str())
                .collect();
            (!needing.is_empty()).then_some((f, needing))
        })
}

/// The binding that gives `method`'s parameter `param` (the first: literals come first).
fn binding_for<'a>(
    bindings: &[&'a Binding],
    method: &Method,
    param: &Param,
) -> Option<&'a Binding> {
    bindings
        .iter()
        .find(|b| method.answers_to(&param.name, &b.column))
        .copied()
}

/// The parameters a chosen method gets from a statement's bindings, with their sources.
struct Bound {
    params: Vec<(Param, Source)>,
    depends_on: Vec<usize>,
    consumed: Vec<(Conjunct, String)>,
}

/// Binds `method`'s parameters, then (when it takes a request body) the body fields given
/// in WHERE, from `bindings` (literals first).
fn bind_params(
    store: &DocumentStore,
    method: &Method,
    bindings: &[&Binding],
    has_body: bool,
) -> Result<Bound> {
    let mut params = Vec::new();
    let mut depends_on = Vec::new();
    let mut consumed = Vec::new();
    let mut take = |binding: &Binding, param: Param| {
        let source = &binding.source;
        match source.depends_on() {
            Some(occurrence) if !depends_on.contains(&occurrence) => {
                depends_on.push(occurrence);
            }
            Some(_) => {}
            // Values from the statement itself: each request asks for exactly them.
            None => consumed.extend(
                binding
                    .conjunct
                    .clone()
                    .map(|c| (c, binding.column.clone())),
            ),
        }
        params.push((param, source.clone()));
    };
    for param in &method.params {
        if let Some(binding) = binding_for(bindings, method, param) {
            take(binding, param.clone());
        }
    }
    // Request-body fields given in WHERE go in the body (a parameter of the same name
    // takes the value first).
    if has_body {
        for field in body_fields(store, method)? {
            if method
                .params
                .iter()
                .any(|p| method.answers_to(&p.name, &field.wire))
            {
                continue;
            }
            let Some(found) = bindings
                .iter()
                .find(|b| gives_field(method, &field, &b.column))
            else {
                continue;
            };
            take(found, body_param(&field, &found.column));
        }
    }
    Ok(Bound {
        params,
        depends_on,
        consumed,
    })
}

/// A table's columns: the row schema's properties, then the method's parameters and the
/// body fields given, then (with a native casing) each parameter's snake_case alias.
fn table_columns(
    method: &Method,
    params: &[(Param, Source)],
    schema_columns: &[String],
) -> Vec<String> {
    let mut columns = schema_columns.to_vec();
    let body_columns = params
        .iter()
        .filter(|(p, _)| p.location == ParamLocation::Body)
        .map(|(p, _)| p);
    for param in method.params.iter().chain(body_columns) {
        if !contains_ci(&columns, &param.name) {
            columns.push(param.name.clone());
        }
    }
    // With a native casing, each parameter is also a column under its snake_case name.
    for param in &method.params {
        if let Some(alias) = method.sql_alias(&param.name)
            && !contains_ci(&columns, &alias)
        {
            columns.push(alias);
        }
    }
    columns
}

/// Whether the statement's column `column` gives the body field `field`: its `data__`
/// form always; its own name (or snake_case alias) when the method's translate algorithm
/// is `naive…` or the field is required (the field then chose the method).
fn gives_field(method: &Method, field: &BodyField, column: &str) -> bool {
    let prefixed = column
        .get(..BODY_PREFIX.len())
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(BODY_PREFIX))
        && column[BODY_PREFIX.len()..].eq_ignore_ascii_case(&field.wire);
    let naive = matches!(method.request.translate, BodyTranslate::Naive { .. });
    prefixed || ((naive || field.required) && method.answers_to(&field.wire, column))
}

/// The parameter a body field given as `column` is: a column of that name, sent in the body.
fn body_param(field: &BodyField, column: &str) -> Param {
    let prefixed = column
        .get(..BODY_PREFIX.len())
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(BODY_PREFIX));
    Param {
        name: if prefixed {
            format!("{BODY_PREFIX}{}", field.wire)
        } else {
            field.wire.clone()
        },
        location: ParamLocation::Body,
        required: field.required,
        default: None,
        allowed: Vec::new(),
        env_var: None,
        type_name: field.type_name.clone(),
        description: field.description.clone(),
        body_path: field.path.clone(),
    }
}

/// The prefix StackQL's default translate algorithm gives body fields in SQL.
const BODY_PREFIX: &str = "data__";

/// The WHERE conjuncts that filled request parameters and that SQLite need not apply
/// again (StackQL removes them from the SQL it runs over the rows): those whose every
/// possible table either took the value as a parameter too or has no column of that name
/// (a bare name that another table also has stays, as SQLite would find it ambiguous).
pub(crate) fn consumed_conjuncts(plans: &[TablePlan]) -> Vec<Conjunct> {
    let mut out: Vec<Conjunct> = Vec::new();
    for (owner, plan) in plans.iter().enumerate() {
        for (conjunct, column) in &plan.consumed {
            let clear = conjunct.targets.iter().all(|target| {
                *target == owner
                    || plans.get(*target).is_none_or(|other| {
                        other.consumed.iter().any(|(c, _)| c == conjunct)
                            || !contains_ci(&other.columns, column)
                    })
            });
            if clear && !out.contains(conjunct) {
                out.push(conjunct.clone());
            }
        }
    }
    out
}

/// A method's required request-body fields; a request schema that does not resolve
/// counts as none (the method's parameters still decide).
fn required_body_fields(store: &DocumentStore, method: &Method) -> Vec<String> {
    method.required_body_fields(store).unwrap_or_default()
}

/// Whether the statement's column `column` names the body field `field`: as written, in
/// its `data__` form, or as its snake_case alias under a native casing.
fn answers_to_field(method: &Method, field: &str, column: &str) -> bool {
    method.answers_to(field, column)
        || column
            .get(..BODY_PREFIX.len())
            .is_some_and(|prefix| prefix.eq_ignore_ascii_case(BODY_PREFIX))
            && column[BODY_PREFIX.len()..].eq_ignore_ascii_case(field)
}

pub(crate) fn contains_ci(names: &[String], name: &str) -> bool {
    names.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// A required parameter compared with `LIKE`, `<`, … instead of `=` or `IN`.
fn filter_error(
    resource: &Resource,
    filter: &Filter,
    needing: &[&str],
    missing: Option<Error>,
) -> Error {
    let column = &filter.column;
    let mut message = format!(
        "'{column}' is a required parameter of '{}' (method {}): give it with = or IN, as {column} = 'value' or {column} IN ('a', 'b'); `{column} {}` only filters rows already fetched and cannot choose what to fetch",
        resource.full_name(),
        needing.join(", "),
        filter.operator
    );
    if let Some(missing) = missing {
        message.push_str(" (");
        message.push_str(missing.message());
        message.push(')');
    }
    Error::new(ErrorKind::MissingParameters, message)
}

fn missing_params_error(
    store: &DocumentStore,
    resource: &Resource,
    candidates: &[&Method],
) -> Error {
    let listing: Vec<String> = candidates
        .iter()
        .map(|m| {
            let required: Vec<String> = m
                .required_params()
                .map(|p| match p.location {
                    ParamLocation::Server => format!("{} (server variable)", p.name),
                    _ => p.name.clone(),
                })
                .chain(
                    required_body_fields(store, m)
                        .into_iter()
                        .map(|field| format!("{field} (body field)")),
                )
                .collect();
            format!("{}({})", m.name, required.join(", "))
        })
        .collect();
    let message = if listing.is_empty() {
        format!(
            "resource '{}' has no method bound to SELECT",
            resource.full_name()
        )
    } else {
        format!(
            "cannot SELECT from '{}': no select method has all its required parameters in the WHERE clause (as col = 'value' or col IN (...)); methods and their required parameters: {}",
            resource.full_name(),
            listing.join("; ")
        )
    };
    Error::new(ErrorKind::MissingParameters, message)
}

fn check_acyclic(plans: &[TablePlan]) -> Result<()> {
    // Depth-first search for a cycle in the "supplies parameters to" graph.
    fn visit(plans: &[TablePlan], node: usize, state: &mut [u8]) -> bool {
        match state.get(node) {
            Some(1) => return false,
            Some(2) | None => return true,
            _ => {}
        }
        state[node] = 1;
        for dep in &plans[node].depends_on {
            if !visit(plans, *dep, state) {
                return false;
            }
        }
        state[node] = 2;
        true
    }
    let mut state = vec![0u8; plans.len()];
    for node in 0..plans.len() {
        if !visit(plans, node, &mut state) {
            return Err(Error::invalid_sql(format!(
                "tables '{}' supply each other's required parameters in a cycle; give one of them a literal value",
                plans[node].resource.full_name()
            )));
        }
    }
    Ok(())
}
