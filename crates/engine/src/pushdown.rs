//! OData query-option push-down (`config.queryParamPushdown` with `dialect: odata`, as
//! StackQL's any-sdk does): for a SELECT over one API table, WHERE comparisons (and
//! `LIKE 'prefix%'`, as `startswith`) become `$filter`, ORDER BY `$orderby`, the
//! referenced columns `$select` and LIMIT `$top`.
//! SQLite still evaluates the whole statement over the rows, so a pushed option only makes
//! the upstream send less; `$top` is pushed only when nothing else can drop rows after it.

use serde_json::Value;
use sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, LimitClause, OrderBy, OrderByKind, OrderBySort, Query,
    Select, SelectItem, SetExpr,
};

use super::document::{Param, ParamLocation};
use super::sql::Literal;

/// One capability of the push-down config (`filter`, `select`, …).
struct Capability<'a> {
    config: &'a Value,
    default_param: &'static str,
}

impl Capability<'_> {
    fn of<'a>(
        pushdown: &'a Value,
        key: &str,
        default_param: &'static str,
    ) -> Option<Capability<'a>> {
        let config = pushdown.get(key)?;
        let dialect = config
            .get("dialect")
            .and_then(Value::as_str)
            .unwrap_or("odata");
        dialect.eq_ignore_ascii_case("odata").then_some(Capability {
            config,
            default_param,
        })
    }

    fn param(&self) -> String {
        self.config
            .get("paramName")
            .and_then(Value::as_str)
            .unwrap_or(self.default_param)
            .to_owned()
    }

    fn supports(&self, column: &str) -> bool {
        match self
            .config
            .get("supportedColumns")
            .and_then(Value::as_array)
        {
            Some(columns) => columns
                .iter()
                .filter_map(Value::as_str)
                .any(|c| c == "*" || c.eq_ignore_ascii_case(column)),
            None => true,
        }
    }

    fn supports_operator(&self, op: &str) -> bool {
        match self
            .config
            .get("supportedOperators")
            .and_then(Value::as_array)
        {
            Some(ops) => ops
                .iter()
                .filter_map(Value::as_str)
                .any(|o| o.eq_ignore_ascii_case(op)),
            None => true,
        }
    }
}

/// The OData query parameters to add to every request of the statement's one API table.
/// `columns` are the table's response columns as (name in SQL, name on the wire; they
/// differ under `config.snake_case_aliases`), push-down never touching parameters; the
/// options name the wire names. `alias` is the name the statement uses for the table.
pub(crate) fn odata_params(
    pushdown: &Value,
    query: &Query,
    alias: &str,
    columns: &[(String, String)],
) -> Vec<(Param, String)> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Vec::new();
    };
    if query.with.is_some() || select.from.len() != 1 || !select.from[0].joins.is_empty() {
        return Vec::new();
    }
    let column_of = |expr: &Expr| -> Option<String> {
        let name = match expr {
            Expr::Identifier(ident) => &ident.value,
            Expr::CompoundIdentifier(parts)
                if parts.len() == 2 && parts[0].value.eq_ignore_ascii_case(alias) =>
            {
                &parts[1].value
            }
            _ => return None,
        };
        columns
            .iter()
            .find(|(sql, wire)| sql.eq_ignore_ascii_case(name) || wire.eq_ignore_ascii_case(name))
            .map(|(_, wire)| wire.clone())
    };
    let mut out: Vec<(String, String)> = Vec::new();

    // $filter: `column op literal` conjuncts.
    let mut conjuncts = Vec::new();
    if let Some(selection) = &select.selection {
        super::sql::split_conjuncts(selection, &mut conjuncts);
    }
    let mut all_pushed = true;
    if let Some(filter) = Capability::of(pushdown, "filter", "$filter") {
        let mut terms = Vec::new();
        for conjunct in &conjuncts {
            match filter_term(conjunct, &column_of, &filter) {
                Some(term) => terms.push(term),
                None => all_pushed = false,
            }
        }
        if terms.len() > 1 && !filter.supports_operator("and") {
            terms.truncate(1);
            all_pushed = false;
        }
        if !terms.is_empty() {
            out.push((filter.param(), terms.join(" and ")));
        }
    } else {
        all_pushed = conjuncts.is_empty();
    }

    // $orderby: every ORDER BY term a plain supported column.
    let order_pushed = match query
        .order_by
        .as_ref()
        .map(|o| orderby(pushdown, o, &column_of))
    {
        None => true,
        Some(None) => false,
        Some(Some(pushed)) => {
            out.push(pushed);
            true
        }
    };

    // $select: every column the statement reads, when all are plain columns.
    let plain_projection = select.projection.iter().all(|item| match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
            column_of(e).is_some()
        }
        _ => false,
    });
    if plain_projection
        && let Some(capability) = Capability::of(pushdown, "select", "$select")
        && let Some(pushed) = select_option(&capability, query, select, &column_of)
    {
        out.push(pushed);
    }

    // $top: only when no later step can drop or reorder rows before the LIMIT.
    let simple = plain_projection
        && select.distinct.is_none()
        && select.having.is_none()
        && matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
    if simple
        && all_pushed
        && order_pushed
        && let Some(LimitClause::LimitOffset {
            limit: Some(limit),
            offset: None,
            ..
        }) = &query.limit_clause
        && let Some(n) = super::sql::literal_of(limit).and_then(|l| l.text.parse::<u64>().ok())
        && let Some(capability) = Capability::of(pushdown, "top", "$top")
    {
        let n = match capability.config.get("maxValue").and_then(Value::as_u64) {
            Some(max) if max > 0 => n.min(max),
            _ => n,
        };
        out.push((capability.param(), n.to_string()));
    }

    out.into_iter()
        .map(|(name, value)| (query_param(name), value))
        .collect()
}

/// An optional string query parameter named `name` (an OData query option).
fn query_param(name: String) -> Param {
    Param {
        name,
        location: ParamLocation::Query,
        required: false,
        default: None,
        allowed: Vec::new(),
        env_var: None,
        type_name: Some("string".to_owned()),
        description: None,
        body_path: Vec::new(),
    }
}

/// `$orderby` for `order_by`, when every term is a plain column the capability supports.
fn orderby(
    pushdown: &Value,
    order_by: &OrderBy,
    column_of: &dyn Fn(&Expr) -> Option<String>,
) -> Option<(String, String)> {
    let OrderByKind::Expressions(terms) = &order_by.kind else {
        return None;
    };
    let capability = Capability::of(pushdown, "orderBy", "$orderby")?;
    let parts: Option<Vec<String>> = terms
        .iter()
        .map(|term| {
            let column = column_of(&term.expr).filter(|c| capability.supports(c))?;
            match term.options.sort {
                Some(OrderBySort::Desc) => Some(format!("{column} desc")),
                Some(OrderBySort::Using(_)) => None,
                _ => Some(format!("{column} asc")),
            }
        })
        .collect();
    Some((capability.param(), parts?.join(",")))
}

/// `$select` for a query whose projection is plain columns: every column the statement
/// reads (projection, WHERE, ORDER BY), when all are plain columns the capability supports.
fn select_option(
    capability: &Capability<'_>,
    query: &Query,
    select: &Select,
    column_of: &dyn Fn(&Expr) -> Option<String>,
) -> Option<(String, String)> {
    let mut referenced: Vec<String> = Vec::new();
    let mut plain = true;
    let mut note = |expr: &Expr| {
        let _ = sqlparser::ast::visit_expressions(expr, |e| {
            match e {
                Expr::Identifier(_) | Expr::CompoundIdentifier(_) => match column_of(e) {
                    Some(c) if !referenced.contains(&c) => referenced.push(c),
                    Some(_) => {}
                    None => plain = false,
                },
                Expr::Subquery(_) | Expr::Exists { .. } => plain = false,
                _ => {}
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
    };
    for item in &select.projection {
        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
            note(e);
        }
    }
    if let Some(selection) = &select.selection {
        note(selection);
    }
    if let Some(order_by) = &query.order_by
        && let OrderByKind::Expressions(terms) = &order_by.kind
    {
        for term in terms {
            note(&term.expr);
        }
    }
    (plain && referenced.iter().all(|c| capability.supports(c)))
        .then(|| (capability.param(), referenced.join(",")))
}

/// One `$filter` term for `column op literal` (either way round), or `startswith(column,
/// 'prefix')` for `column LIKE 'prefix%'`.
fn filter_term(
    conjunct: &Expr,
    column_of: &dyn Fn(&Expr) -> Option<String>,
    filter: &Capability<'_>,
) -> Option<String> {
    if let Expr::Like {
        negated: false,
        any: false,
        expr,
        pattern,
        escape_char: None,
    } = conjunct
    {
        return startswith_term(expr, pattern, column_of, filter);
    }
    let Expr::BinaryOp { left, op, right } = conjunct else {
        return None;
    };
    let (column, value, flipped) = match (column_of(left), column_of(right)) {
        (Some(column), None) => (column, super::sql::literal_of(right)?, false),
        (None, Some(column)) => (column, super::sql::literal_of(left)?, true),
        _ => return None,
    };
    let op = match (op, flipped) {
        (BinaryOperator::Eq, _) => "eq",
        (BinaryOperator::NotEq, _) => "ne",
        (BinaryOperator::Gt, false) | (BinaryOperator::Lt, true) => "gt",
        (BinaryOperator::GtEq, false) | (BinaryOperator::LtEq, true) => "ge",
        (BinaryOperator::Lt, false) | (BinaryOperator::Gt, true) => "lt",
        (BinaryOperator::LtEq, false) | (BinaryOperator::GtEq, true) => "le",
        _ => return None,
    };
    if !filter.supports(&column) || !filter.supports_operator(op) {
        return None;
    }
    Some(format!("{column} {op} {}", odata_value(&value)))
}

/// `startswith(column,'prefix')` for `column LIKE 'prefix%'` whose prefix has no wildcard
/// (StackQL's rule; any other pattern stays a local filter). SQLite's LIKE ignores ASCII
/// case and OData's `startswith` need not: the SQL still filters what comes back.
fn startswith_term(
    expr: &Expr,
    pattern: &Expr,
    column_of: &dyn Fn(&Expr) -> Option<String>,
    filter: &Capability<'_>,
) -> Option<String> {
    let column = column_of(expr)?;
    let pattern = super::sql::literal_of(pattern).filter(|l| !l.numeric)?;
    let prefix = pattern.text.strip_suffix('%')?;
    if prefix.is_empty()
        || prefix.contains(['%', '_'])
        || !filter.supports(&column)
        || !filter.supports_operator("startswith")
    {
        return None;
    }
    Some(format!(
        "startswith({column},{})",
        odata_value(&Literal {
            text: prefix.to_owned(),
            numeric: false,
        })
    ))
}

fn odata_value(value: &Literal) -> String {
    if value.numeric {
        value.text.clone()
    } else {
        format!("'{}'", value.text.replace('\'', "''"))
    }
}
