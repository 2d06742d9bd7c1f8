//! Resource views (`config.views.select`) as the engine runs and lists them: a SELECT over
//! a view reads its DDL in place of the table (see [`super::sql::expand_views`]); DESCRIBE
//! lists the columns the DDL projects and SHOW METHODS lists each view as StackQL does, as
//! method `__view__` bound to SELECT with the view's required parameters.

use sqlparser::ast::{Expr, Query, SetExpr, TableFactor};

use super::document::Resource;
use super::error::Result;
use super::sql::{ViewSet, expand_views, parse_view_ddl, view_projection};
use super::state::Inner;
use super::state::{open_provider, open_resource, provider_resource};
use super::types::{ColumnInfo, ExecContext, MethodInfo, SqlVerb};

/// The name SHOW METHODS gives a view (any-sdk's `ViewMethodName`).
pub(crate) const VIEW_METHOD_NAME: &str = "__view__";

/// Views read through views at most this deep when listing columns.
const MAX_DEPTH: usize = 8;

/// Replaces the views `query` reads by their DDL, with the statement's parameters.
pub(crate) fn expand(inner: &Inner, cx: &ExecContext, query: &mut Query) -> Result<()> {
    expand_views(query, &mut |[provider, service, resource]: &[String; 3]| {
        let provider = open_provider(inner, cx, provider)?;
        let resource = provider_resource(inner, &provider, service, resource)?;
        Ok((!resource.views.is_empty()).then(|| ViewSet {
            full_name: resource.full_name(),
            views: resource.views.clone(),
        }))
    })
}

/// SHOW METHODS rows of a resource's views.
pub(crate) fn methods(resource: &Resource) -> Vec<MethodInfo> {
    resource
        .views
        .iter()
        .map(|view| MethodInfo {
            name: VIEW_METHOD_NAME.to_owned(),
            sql_verb: Some(SqlVerb::Select),
            required_params: view.required_params.clone(),
            http_method: None,
            effect: None,
        })
        .collect()
}

/// The columns of `provider.service.resource` as a SELECT shows them: a view's projected
/// columns, or the first select method's.
pub(crate) fn columns(
    inner: &Inner,
    cx: &ExecContext,
    names: &[String; 3],
) -> Result<Vec<ColumnInfo>> {
    columns_at(inner, cx, names, 0)
}

fn columns_at(
    inner: &Inner,
    cx: &ExecContext,
    names: &[String; 3],
    depth: usize,
) -> Result<Vec<ColumnInfo>> {
    let resource = open_resource(inner, cx, names)?;
    if let Some(view) = resource.views.first()
        && depth < MAX_DEPTH
    {
        let ddl = parse_view_ddl(&resource.full_name(), &view.ddl)?;
        return view_columns(inner, cx, &ddl, depth);
    }
    let Some(method) = resource.methods_for(SqlVerb::Select).into_iter().next() else {
        return Ok(Vec::new());
    };
    Ok(method
        .columns(&inner.store)?
        .into_iter()
        .map(|c| ColumnInfo {
            name: c.name,
            type_name: c.type_name,
            description: c.description,
        })
        .collect())
}

/// A view's columns: each projected name, typed as the column it reads when it reads one
/// plainly (else `string`, with its expression as the description); a `*` brings the
/// columns of the API table the view reads.
fn view_columns(
    inner: &Inner,
    cx: &ExecContext,
    ddl: &Query,
    depth: usize,
) -> Result<Vec<ColumnInfo>> {
    let source = match first_api_table(ddl) {
        Some(names) => columns_at(inner, cx, &names, depth + 1)?,
        None => Vec::new(),
    };
    let mut out = Vec::new();
    for item in view_projection(ddl) {
        match item {
            None => out.extend(source.iter().cloned()),
            Some((name, expr)) => {
                let plain = match &expr {
                    Expr::Identifier(ident) => Some(&ident.value),
                    Expr::CompoundIdentifier(parts) => parts.last().map(|i| &i.value),
                    _ => None,
                };
                let read =
                    plain.and_then(|p| source.iter().find(|c| c.name.eq_ignore_ascii_case(p)));
                out.push(match read {
                    Some(column) => ColumnInfo {
                        name,
                        type_name: column.type_name.clone(),
                        description: column.description.clone(),
                    },
                    None => ColumnInfo {
                        name,
                        type_name: "string".to_owned(),
                        description: Some(expr.to_string()),
                    },
                });
            }
        }
    }
    Ok(out)
}

/// The first `provider.service.resource` of the DDL's top SELECT's FROM.
fn first_api_table(ddl: &Query) -> Option<[String; 3]> {
    let SetExpr::Select(select) = ddl.body.as_ref() else {
        return None;
    };
    select.from.iter().find_map(|table| match &table.relation {
        TableFactor::Table { name, .. } => {
            let parts: Vec<String> = name
                .0
                .iter()
                .filter_map(|p| p.as_ident().map(|i| i.value.clone()))
                .collect();
            <[String; 3]>::try_from(parts).ok()
        }
        _ => None,
    })
}
