//! The statement's parameters a view does not show, passed on to the tables its DDL
//! reads, as StackQL assigns a view's remaining required parameters from the statement:
//! `SELECT * FROM databricks_workspace.postgres.vw_branches WHERE parent = 'projects/p1'
//! AND deployment_name = 'dbc-1'` reaches `postgres_branches` (which needs `parent`, a name
//! the view's projection does not have) with `parent = 'projects/p1'` added to the DDL's
//! WHERE. A name the view shows stays a condition over the view's rows (and replaces the
//! DDL's own condition on it, see [`super::views`]).

use sqlparser::ast::{BinaryOperator, Expr, Ident, InTarget, Query, SelectItem, SetExpr};

/// A `name = value` or `name IN (…)` of the statement, as [`super::views`] found it.
pub(super) struct Unshown<'a> {
    /// Its position among the SELECT's WHERE conjuncts.
    pub(super) index: usize,
    pub(super) name: &'a str,
    /// `Some(value)` for `=`, else the IN list.
    pub(super) eq: Option<&'a Expr>,
    pub(super) list: &'a [Expr],
}

/// Adds each of `given` whose name the view does not project (`names`: its projected
/// names; `None` for a `*`, which may show anything: nothing is passed on then) to the
/// DDL's top WHERE; returns the indexes of those passed on.
pub(super) fn pass_on(
    ddl: &mut Query,
    names: &[Option<String>],
    given: &[Unshown<'_>],
) -> Vec<usize> {
    if names.iter().any(Option::is_none) {
        return Vec::new();
    }
    let SetExpr::Select(select) = ddl.body.as_mut() else {
        return Vec::new();
    };
    let mut passed = Vec::new();
    for g in given {
        let shown = names
            .iter()
            .flatten()
            .any(|n| n.eq_ignore_ascii_case(g.name));
        if shown {
            continue;
        }
        let column = Box::new(Expr::Identifier(Ident::with_quote('"', g.name)));
        let condition = match g.eq {
            Some(value) => Expr::BinaryOp {
                left: column,
                op: BinaryOperator::Eq,
                right: Box::new(value.clone()),
            },
            None => Expr::In {
                expr: column,
                target: InTarget::List(g.list.to_vec()),
                negated: false,
                global: false,
            },
        };
        select.selection = Some(match select.selection.take() {
            Some(existing) => Expr::BinaryOp {
                left: Box::new(Expr::Nested(Box::new(existing))),
                op: BinaryOperator::And,
                right: Box::new(condition),
            },
            None => condition,
        });
        passed.push(g.index);
    }
    passed
}

/// Quotes the aliases of the DDL's top projection that are written bare: a view may name a
/// column after a keyword (databricks' `… AS default`), which its own SQL dialect accepts
/// and SQLite does not.
pub(super) fn quote_aliases(ddl: &mut Query) {
    let SetExpr::Select(select) = ddl.body.as_mut() else {
        return;
    };
    for item in &mut select.projection {
        if let SelectItem::ExprWithAlias { alias, .. } = item
            && alias.quote_style.is_none()
        {
            alias.quote_style = Some('"');
        }
    }
}
