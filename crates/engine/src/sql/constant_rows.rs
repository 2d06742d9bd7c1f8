//! `INSERT … SELECT` whose SELECT only lists literals (`SELECT 'a', 1 UNION ALL SELECT 'b',
//! 2`): its rows are known before anything runs, so the INSERT is planned as `VALUES` is
//! (its bodies shown to an approver and bound into the plan hash), not read at run time.

use sqlparser::ast::{GroupByExpr, Query, Select, SelectItem, SetExpr, SetOperator, SetQuantifier};

use super::scalar::{Scalar, scalar};

/// The rows of `query` when it is a SELECT of literals without FROM, or a `UNION ALL` of
/// such SELECTs, with nothing else around them; `None` otherwise (it is read at run time).
pub(crate) fn constant_rows(query: &Query) -> Option<Vec<Vec<Scalar>>> {
    let bare = query.with.is_none()
        && query.order_by.is_none()
        && query.limit_clause.is_none()
        && query.fetch.is_none()
        && query.locks.is_empty()
        && query.for_clause.is_none()
        && query.settings.is_none()
        && query.format_clause.is_none()
        && query.pipe_operators.is_empty();
    if !bare {
        return None;
    }
    let mut rows = Vec::new();
    collect(&query.body, &mut rows)?;
    Some(rows)
}

/// Appends the rows of `body` in order; `None` when a part is not a SELECT of literals.
fn collect(body: &SetExpr, rows: &mut Vec<Vec<Scalar>>) -> Option<()> {
    match body {
        SetExpr::Select(select) => {
            rows.push(literal_row(select)?);
            Some(())
        }
        // UNION (without ALL) removes duplicates and may reorder: left to the read path.
        SetExpr::SetOperation {
            op: SetOperator::Union,
            set_quantifier: SetQuantifier::All,
            left,
            right,
        } => {
            collect(left, rows)?;
            collect(right, rows)
        }
        SetExpr::Query(inner) => {
            rows.extend(constant_rows(inner)?);
            Some(())
        }
        _ => None,
    }
}

/// The one row of a SELECT that has only a list of literals (aliases allowed).
fn literal_row(select: &Select) -> Option<Vec<Scalar>> {
    let plain = select.from.is_empty()
        && select.selection.is_none()
        && select.prewhere.is_none()
        && select.having.is_none()
        && select.qualify.is_none()
        && select.distinct.is_none()
        && select.top.is_none()
        && select.into.is_none()
        && select.exclude.is_none()
        && select.value_table_mode.is_none()
        && select.lateral_views.is_empty()
        && select.connect_by.is_empty()
        && select.cluster_by.is_empty()
        && select.distribute_by.is_empty()
        && select.sort_by.is_empty()
        && select.named_window.is_empty()
        && matches!(&select.group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
    if !plain {
        return None;
    }
    select
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => scalar(expr),
            _ => None,
        })
        .collect()
}
