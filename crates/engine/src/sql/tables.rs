//! Finds `provider.service.resource` tables anywhere in a query (FROM, JOIN, subqueries,
//! CTEs, UNION legs), renames each occurrence to a local SQLite table, and collects the
//! equality predicates that can supply request parameters.

use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, Ident, InTarget, JoinConstraint, JoinOperator, ObjectName,
    ObjectNamePart, Query, Select, SelectItem, SelectItemQualifiedWildcardKind, SetExpr,
    TableAlias, TableFactor, VisitMut, VisitorMut,
};

use super::scalar::{Scalar, scalar, unnest};
use crate::error::{Error, Result};

/// One appearance of an API table in the statement.
#[derive(Debug, Clone)]
pub(crate) struct Occurrence {
    pub(crate) provider: String,
    pub(crate) service: String,
    pub(crate) resource: String,
    /// The name the query uses for it (its alias, or the resource name).
    pub(crate) alias: String,
    /// The local SQLite table it was renamed to.
    pub(crate) local: String,
}

/// A literal from the statement, with whether SQL wrote it as a number.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Literal {
    pub(crate) text: String,
    pub(crate) numeric: bool,
}

/// Where a parameter value comes from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    /// `col = 'v'` (one value) or `col IN ('a', 'b')` (fan-out).
    Literals(Vec<Literal>),
    /// `a.col = b.other`: the distinct values of another occurrence's column.
    Column { occurrence: usize, column: String },
    /// `a.col = f(b.x, …)` or `a.col IN (SELECT f(x) FROM b …)`: the distinct values of an
    /// SQL expression over one other occurrence's columns (`alias.col` or, in a subquery,
    /// bare names), evaluated once that occurrence is loaded.
    Expr { occurrence: usize, sql: String },
    /// `a.col = lower('ACME')`: an expression without column references, evaluated by
    /// SQLite before the request.
    Constant(String),
}

impl Source {
    /// The occurrence whose rows this source reads, if any.
    pub(crate) fn depends_on(&self) -> Option<usize> {
        match self {
            Source::Column { occurrence, .. } | Source::Expr { occurrence, .. } => {
                Some(*occurrence)
            }
            Source::Literals(_) | Source::Constant(_) => None,
        }
    }
}

/// A predicate that may bind a request parameter of an occurrence.
#[derive(Debug, Clone)]
pub(crate) struct Binding {
    pub(crate) occurrence: usize,
    pub(crate) column: String,
    pub(crate) source: Source,
    /// The WHERE conjunct it was read from (`None` for a join's `ON`).
    pub(crate) conjunct: Option<Conjunct>,
}

/// One conjunct of a SELECT's WHERE clause: the `index`-th of `a AND b AND …` in the
/// `select`-th SELECT of the statement (in the order they are written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conjunct {
    pub(crate) select: usize,
    pub(crate) index: usize,
    /// The occurrences its column may belong to: one for `alias.col`, every API table of
    /// the SELECT for a bare name.
    pub(crate) targets: Vec<usize>,
}

#[derive(Debug, Clone)]
enum FromEntry {
    Api(usize),
    Named(Ident),
    Opaque,
}

/// A predicate on a column that cannot bind a request parameter (`LIKE`, `<`, `NOT IN`, …):
/// it only filters fetched rows.
#[derive(Debug, Clone)]
pub(crate) struct Filter {
    pub(crate) occurrence: usize,
    pub(crate) column: String,
    /// The operator as the statement wrote it, e.g. `LIKE`.
    pub(crate) operator: String,
}

/// What the analysis found.
#[derive(Debug)]
pub(crate) struct Analysis {
    pub(crate) occurrences: Vec<Occurrence>,
    pub(crate) bindings: Vec<Binding>,
    pub(crate) filters: Vec<Filter>,
    selects: Vec<Vec<FromEntry>>,
}

/// Renames API tables in `query` and collects occurrences and bindings.
pub(crate) fn analyse(query: &mut Query) -> Result<Analysis> {
    let mut collector = Collector {
        analysis: Analysis {
            occurrences: Vec::new(),
            bindings: Vec::new(),
            filters: Vec::new(),
            selects: Vec::new(),
        },
        scopes: Vec::new(),
        current: None,
    };
    if let ControlFlow::Break(err) = query.visit(&mut collector) {
        return Err(err);
    }
    Ok(collector.analysis)
}

/// Replaces `*` and `alias.*` over API tables by their explicit columns (`columns(i)` gives
/// occurrence `i`'s), so `SELECT *` yields the response schema's properties.
pub(crate) fn expand_wildcards(
    query: &mut Query,
    analysis: &Analysis,
    columns: &dyn Fn(usize) -> Vec<String>,
) {
    let mut expander = Expander {
        analysis,
        columns,
        next: 0,
    };
    let _ = query.visit(&mut expander);
}

struct Collector {
    analysis: Analysis,
    /// Each SELECT being visited (its number, its API occurrences), innermost last.
    scopes: Vec<(usize, Vec<usize>)>,
    /// The WHERE conjunct whose bindings are being read.
    current: Option<Conjunct>,
}

impl VisitorMut for Collector {
    type Break = Error;

    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<Error> {
        match self.collect_select(select) {
            Ok(()) => ControlFlow::Continue(()),
            Err(err) => ControlFlow::Break(err),
        }
    }

    /// Predicates are read after the SELECT's subqueries were visited, so an
    /// `IN (SELECT …)` can name the occurrence its subquery reads.
    fn post_visit_select(&mut self, select: &mut Select) -> ControlFlow<Error> {
        let (number, in_scope) = self.scopes.pop().unwrap_or_default();
        if in_scope.is_empty() {
            return ControlFlow::Continue(());
        }
        let mut on: Vec<&Expr> = Vec::new();
        for table in &select.from {
            for join in &table.joins {
                if let Some(JoinConstraint::On(constraint)) = join_constraint(&join.join_operator) {
                    conjuncts_of(constraint, &mut on);
                }
            }
        }
        let mut conjuncts: Vec<&Expr> = Vec::new();
        if let Some(selection) = &select.selection {
            conjuncts_of(selection, &mut conjuncts);
        }
        let aliases = projection_aliases(&select.projection);
        for conjunct in on {
            self.current = None;
            self.bind(conjunct, &in_scope, &aliases);
        }
        // Under an outer join only a conjunct naming its table (`sn.region = 'x'`) may be
        // dropped once it filled a request parameter, as StackQL consumes it: the rows
        // without a match stay null-extended. A bare name stays a filter there.
        let outer = has_outer_join(select);
        for (index, conjunct) in conjuncts.into_iter().enumerate() {
            let column = conjunct_column(conjunct);
            let qualified = matches!(unnest(column), Expr::CompoundIdentifier(_));
            self.current = (!outer || qualified).then(|| Conjunct {
                select: number,
                index,
                targets: self
                    .column_ref(column, &in_scope, &aliases)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(occurrence, _)| occurrence)
                    .collect(),
            });
            self.bind(conjunct, &in_scope, &aliases);
        }
        self.current = None;
        ControlFlow::Continue(())
    }
}

impl Collector {
    fn collect_select(&mut self, select: &mut Select) -> Result<()> {
        let mut from = Vec::new();
        for table in &mut select.from {
            self.collect_factor(&mut table.relation, &mut from)?;
            for join in &mut table.joins {
                self.collect_factor(&mut join.relation, &mut from)?;
            }
        }
        let in_scope: Vec<usize> = from
            .iter()
            .filter_map(|entry| match entry {
                FromEntry::Api(i) => Some(*i),
                _ => None,
            })
            .collect();
        self.scopes.push((self.analysis.selects.len(), in_scope));
        self.analysis.selects.push(from);
        Ok(())
    }

    fn collect_factor(
        &mut self,
        factor: &mut TableFactor,
        from: &mut Vec<FromEntry>,
    ) -> Result<()> {
        match factor {
            TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } => {
                let parts = name_parts(name)?;
                if parts.len() == 3 {
                    let index = self.analysis.occurrences.len();
                    let local = format!("__qg_t{index}");
                    let [provider, service, resource] = [&parts[0], &parts[1], &parts[2]];
                    let alias_name = match alias {
                        Some(a) => a.name.value.clone(),
                        None => {
                            *alias = Some(TableAlias {
                                explicit: true,
                                name: Ident::with_quote('"', resource.clone()),
                                columns: Vec::new(),
                                at: None,
                            });
                            resource.clone()
                        }
                    };
                    self.analysis.occurrences.push(Occurrence {
                        provider: provider.clone(),
                        service: service.clone(),
                        resource: resource.clone(),
                        alias: alias_name,
                        local: local.clone(),
                    });
                    *name = ObjectName(vec![ObjectNamePart::Identifier(Ident::new(local))]);
                    from.push(FromEntry::Api(index));
                } else if parts.len() > 1 {
                    return Err(Error::invalid_sql(format!(
                        "table '{}' is not of the form provider.service.resource (quote a resource name that contains dots: p.s.\"a.b\")",
                        parts.join(".")
                    )));
                } else {
                    let ident = match alias {
                        Some(a) => a.name.clone(),
                        None => Ident::with_quote('"', parts.concat()),
                    };
                    from.push(FromEntry::Named(ident));
                }
            }
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => {
                self.collect_factor(&mut table_with_joins.relation, from)?;
                for join in &mut table_with_joins.joins {
                    self.collect_factor(&mut join.relation, from)?;
                }
            }
            other => from.push(match other {
                TableFactor::Table { alias: Some(a), .. }
                | TableFactor::Derived { alias: Some(a), .. }
                | TableFactor::TableFunction { alias: Some(a), .. }
                | TableFactor::Function { alias: Some(a), .. } => FromEntry::Named(a.name.clone()),
                _ => FromEntry::Opaque,
            }),
        }
        Ok(())
    }

    fn bind(&mut self, conjunct: &Expr, in_scope: &[usize], aliases: &[(String, Expr)]) {
        match conjunct {
            Expr::BinaryOp {
                left,
                op: BinaryOperator::Eq,
                right,
            } => {
                let lhs = self.column_ref(left, in_scope, aliases);
                let rhs = self.column_ref(right, in_scope, aliases);
                match (lhs, rhs) {
                    (Some(targets), None) => self.bind_value(&targets, right, in_scope),
                    (None, Some(targets)) => self.bind_value(&targets, left, in_scope),
                    (Some(l), Some(r)) => {
                        // A qualified side (`b.other`) feeds the other side, which may be a
                        // bare name (`col`): every other table in scope may have `col` as a
                        // parameter (the planner keeps only real ones).
                        for (from, to) in [(&r, &l), (&l, &r)] {
                            if let [(occurrence, column)] = from.as_slice() {
                                let targets: Vec<(usize, String)> = to
                                    .iter()
                                    .filter(|(o, _)| o != occurrence)
                                    .cloned()
                                    .collect();
                                self.push(
                                    &targets,
                                    Source::Column {
                                        occurrence: *occurrence,
                                        column: column.clone(),
                                    },
                                );
                            }
                        }
                    }
                    (None, None) => {}
                }
            }
            Expr::In {
                expr,
                target: InTarget::List(list),
                negated: false,
                ..
            } => {
                if let Some(targets) = self.column_ref(expr, in_scope, aliases) {
                    let values: Option<Vec<Literal>> = list.iter().map(literal).collect();
                    if let Some(values) = values {
                        self.push(&targets, Source::Literals(values));
                    }
                }
            }
            Expr::In {
                expr,
                target: InTarget::Subquery(subquery),
                negated: false,
                ..
            } => {
                if let Some(targets) = self.column_ref(expr, in_scope, aliases)
                    && let Some((occurrence, sql)) = self.subquery_source(subquery)
                {
                    let targets: Vec<(usize, String)> = targets
                        .into_iter()
                        .filter(|(o, _)| *o != occurrence)
                        .collect();
                    self.push(&targets, Source::Expr { occurrence, sql });
                }
            }
            other => self.filter(other, in_scope, aliases),
        }
    }

    /// Records a column compared other than by `=` or `IN (literals)`.
    fn filter(&mut self, conjunct: &Expr, in_scope: &[usize], aliases: &[(String, Expr)]) {
        let (column, operator) = match conjunct {
            Expr::Like { expr, negated, .. } => (expr, if *negated { "NOT LIKE" } else { "LIKE" }),
            Expr::ILike { expr, negated, .. } => {
                (expr, if *negated { "NOT ILIKE" } else { "ILIKE" })
            }
            Expr::SimilarTo { expr, .. } => (expr, "SIMILAR TO"),
            Expr::RLike { expr, .. } => (expr, "REGEXP"),
            Expr::Between { expr, .. } => (expr, "BETWEEN"),
            // Negated, or over something other than a list of literals.
            Expr::In { expr, negated, .. } => (expr, if *negated { "NOT IN" } else { "IN" }),
            Expr::BinaryOp {
                left,
                op:
                    BinaryOperator::NotEq
                    | BinaryOperator::Lt
                    | BinaryOperator::LtEq
                    | BinaryOperator::Gt
                    | BinaryOperator::GtEq,
                ..
            } => (left, ""),
            _ => return,
        };
        let operator = match conjunct {
            Expr::BinaryOp { op, .. } => op.to_string(),
            _ => operator.to_owned(),
        };
        for (occurrence, column) in self
            .column_ref(column, in_scope, aliases)
            .unwrap_or_default()
        {
            self.analysis.filters.push(Filter {
                occurrence,
                column,
                operator: operator.clone(),
            });
        }
    }

    /// Binds `targets` to a value expression: a literal, a constant expression, or an
    /// expression over exactly one other occurrence's qualified columns.
    fn bind_value(&mut self, targets: &[(usize, String)], value: &Expr, in_scope: &[usize]) {
        if let Some(value) = literal(value) {
            self.push(targets, Source::Literals(vec![value]));
            return;
        }
        match self.referenced_occurrences(value, in_scope) {
            Some(refs) if refs.is_empty() => {
                self.push(targets, Source::Constant(value.to_string()));
            }
            Some(refs) if refs.len() == 1 => {
                let occurrence = refs[0];
                let targets: Vec<(usize, String)> = targets
                    .iter()
                    .filter(|(o, _)| *o != occurrence)
                    .cloned()
                    .collect();
                self.push(
                    &targets,
                    Source::Expr {
                        occurrence,
                        sql: value.to_string(),
                    },
                );
            }
            _ => {}
        }
    }

    /// The occurrences an expression reads through `alias.column` references; `None` when
    /// it has a bare name, an unknown qualifier or a subquery (nothing safe to evaluate).
    fn referenced_occurrences(&self, expr: &Expr, in_scope: &[usize]) -> Option<Vec<usize>> {
        let mut refs: Vec<usize> = Vec::new();
        let mut usable = true;
        let _ = sqlparser::ast::visit_expressions(expr, |e| {
            match e {
                Expr::Identifier(_)
                | Expr::Subquery(_)
                | Expr::Exists { .. }
                | Expr::In {
                    target: InTarget::Subquery(_),
                    ..
                } => usable = false,
                Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                    match in_scope.iter().find(|i| {
                        self.analysis.occurrences[**i]
                            .alias
                            .eq_ignore_ascii_case(&parts[0].value)
                    }) {
                        Some(found) if !refs.contains(found) => refs.push(*found),
                        Some(_) => {}
                        None => usable = false,
                    }
                }
                Expr::CompoundIdentifier(_) => usable = false,
                _ => {}
            }
            ControlFlow::<()>::Continue(())
        });
        usable.then_some(refs)
    }

    /// For `IN (SELECT e FROM <api table> …)`: the table's occurrence and `e`, whose
    /// distinct values over that table's rows feed the outer parameter.
    fn subquery_source(&self, subquery: &Query) -> Option<(usize, String)> {
        let SetExpr::Select(select) = subquery.body.as_ref() else {
            return None;
        };
        let [table] = select.from.as_slice() else {
            return None;
        };
        if !table.joins.is_empty() || select.projection.len() != 1 {
            return None;
        }
        let TableFactor::Table { name, .. } = &table.relation else {
            return None;
        };
        let local = name_parts(name).ok()?.concat();
        let occurrence = self
            .analysis
            .occurrences
            .iter()
            .position(|o| o.local == local)?;
        let expr = match &select.projection[0] {
            SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => expr,
            _ => return None,
        };
        let mut nested = false;
        let _ = sqlparser::ast::visit_expressions(expr, |e| {
            if matches!(
                e,
                Expr::Subquery(_)
                    | Expr::Exists { .. }
                    | Expr::In {
                        target: InTarget::Subquery(_),
                        ..
                    }
            ) {
                nested = true;
            }
            ControlFlow::<()>::Continue(())
        });
        (!nested).then(|| (occurrence, expr.to_string()))
    }

    fn push(&mut self, targets: &[(usize, String)], source: Source) {
        for (occurrence, column) in targets {
            self.analysis.bindings.push(Binding {
                occurrence: *occurrence,
                column: column.clone(),
                source: source.clone(),
                conjunct: self.current.clone(),
            });
        }
    }

    /// The occurrence(s) and column a column reference may mean. A bare name may belong to
    /// any API table in scope (the planner keeps only real parameters); `alias.col` to one.
    fn column_ref(
        &self,
        expr: &Expr,
        in_scope: &[usize],
        aliases: &[(String, Expr)],
    ) -> Option<Vec<(usize, String)>> {
        match unnest(expr) {
            Expr::Identifier(ident) => {
                let bare = in_scope.iter().map(|i| (*i, ident.value.clone()));
                if let Some((_, target)) = aliases
                    .iter()
                    .find(|(a, _)| a.eq_ignore_ascii_case(&ident.value))
                    && !matches!(target, Expr::Identifier(i) if i.value.eq_ignore_ascii_case(&ident.value))
                {
                    // SQLite reads a WHERE name as the table's column before a same-named
                    // alias: the name may be a parameter column of the table (homebrew's
                    // `SELECT name AS formula_name … WHERE formula_name = 'curl'`), else the
                    // alias's expression. Both are offered; the planner keeps real ones.
                    let mut refs = self.column_ref(target, in_scope, &[]).unwrap_or_default();
                    refs.extend(bare);
                    return Some(refs);
                }
                Some(bare.collect())
            }
            Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                let (qualifier, column) = (&parts[0].value, &parts[1].value);
                let found = in_scope.iter().find(|i| {
                    self.analysis.occurrences[**i]
                        .alias
                        .eq_ignore_ascii_case(qualifier)
                })?;
                Some(vec![(*found, column.clone())])
            }
            _ => None,
        }
    }
}

/// Whether the SELECT has a LEFT, RIGHT or FULL join (at any depth of its FROM).
fn has_outer_join(select: &Select) -> bool {
    fn outer(factor: &TableFactor) -> bool {
        match factor {
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => joins_outer(table_with_joins),
            _ => false,
        }
    }
    fn joins_outer(table: &sqlparser::ast::TableWithJoins) -> bool {
        outer(&table.relation)
            || table.joins.iter().any(|join| {
                matches!(
                    join.join_operator,
                    JoinOperator::Left(_)
                        | JoinOperator::LeftOuter(_)
                        | JoinOperator::Right(_)
                        | JoinOperator::RightOuter(_)
                        | JoinOperator::FullOuter(_)
                ) || outer(&join.relation)
            })
    }
    select.from.iter().any(joins_outer)
}

/// The side of `col = v` or `col IN (…)` that names a column (the left when neither does).
fn conjunct_column(conjunct: &Expr) -> &Expr {
    match conjunct {
        Expr::BinaryOp { left, right, .. } => match unnest(left) {
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) => left,
            _ => right,
        },
        Expr::In { expr, .. } => expr,
        other => other,
    }
}

/// Drops from each SELECT's WHERE clause the conjuncts in `dropped` (request parameters
/// they supplied already chose the rows: StackQL does not apply them again).
pub(crate) fn drop_conjuncts(query: &mut Query, dropped: &[Conjunct]) {
    if dropped.is_empty() {
        return;
    }
    let mut dropper = Dropper { dropped, next: 0 };
    let _ = query.visit(&mut dropper);
}

struct Dropper<'a> {
    dropped: &'a [Conjunct],
    next: usize,
}

impl VisitorMut for Dropper<'_> {
    type Break = ();

    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        let number = self.next;
        self.next += 1;
        let Some(selection) = select.selection.take() else {
            return ControlFlow::Continue(());
        };
        if !self.dropped.iter().any(|c| c.select == number) {
            select.selection = Some(selection);
            return ControlFlow::Continue(());
        }
        let mut conjuncts = Vec::new();
        conjuncts_of(&selection, &mut conjuncts);
        // Each kept conjunct in parentheses: `a OR b` stays one term.
        let kept: Vec<Expr> = conjuncts
            .into_iter()
            .enumerate()
            .filter(|(index, _)| {
                !self
                    .dropped
                    .iter()
                    .any(|c| c.select == number && c.index == *index)
            })
            .map(|(_, conjunct)| Expr::Nested(Box::new(conjunct.clone())))
            .collect();
        select.selection = kept.into_iter().reduce(|left, right| Expr::BinaryOp {
            left: Box::new(left),
            op: BinaryOperator::And,
            right: Box::new(right),
        });
        ControlFlow::Continue(())
    }
}

pub(super) fn join_constraint(op: &JoinOperator) -> Option<&JoinConstraint> {
    match op {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c)
        | JoinOperator::CrossJoin(c)
        | JoinOperator::Semi(c)
        | JoinOperator::LeftSemi(c)
        | JoinOperator::RightSemi(c)
        | JoinOperator::Anti(c)
        | JoinOperator::LeftAnti(c)
        | JoinOperator::RightAnti(c) => Some(c),
        _ => None,
    }
}

pub(super) fn split_and(expr: &Expr, out: &mut Vec<Expr>) {
    let mut conjuncts = Vec::new();
    conjuncts_of(expr, &mut conjuncts);
    out.extend(conjuncts.into_iter().cloned());
}

/// The conjuncts of `a AND b AND …`, borrowed.
fn conjuncts_of<'a>(expr: &'a Expr, out: &mut Vec<&'a Expr>) {
    match unnest(expr) {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            conjuncts_of(left, out);
            conjuncts_of(right, out);
        }
        other => out.push(other),
    }
}

/// The SELECT's `expr AS alias` items a WHERE name may mean. An alias the projection also
/// reads as a plain column (`region, JSON_EXTRACT(Properties, '$.Region') AS region`, as
/// awscc's views do) is left out: SQLite resolves a WHERE name to a table's column before
/// an alias, and that column exists, since the projection reads it.
fn projection_aliases(projection: &[SelectItem]) -> Vec<(String, Expr)> {
    let columns: Vec<&str> = projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::UnnamedExpr(Expr::Identifier(ident)) => Some(ident.value.as_str()),
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) => {
                parts.last().map(|ident| ident.value.as_str())
            }
            _ => None,
        })
        .collect();
    projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { expr, alias }
                if !columns.iter().any(|c| c.eq_ignore_ascii_case(&alias.value)) =>
            {
                Some((alias.value.clone(), expr.clone()))
            }
            _ => None,
        })
        .collect()
}

/// A literal: strings, numbers, booleans (as 1 and 0), negative numbers; not NULL.
pub(super) fn literal(expr: &Expr) -> Option<Literal> {
    let (text, numeric) = match scalar(expr)? {
        Scalar::Text(text) => (text, false),
        Scalar::Number(text) => (text, true),
        Scalar::Bool(b) => (if b { "1" } else { "0" }.to_owned(), true),
        Scalar::Null => return None,
    };
    Some(Literal { text, numeric })
}

pub(super) fn name_parts(name: &ObjectName) -> Result<Vec<String>> {
    name.0
        .iter()
        .map(|part| match part {
            ObjectNamePart::Identifier(ident) => Ok(ident.value.clone()),
            ObjectNamePart::Function(_) => Err(Error::invalid_sql(format!(
                "unsupported table name '{name}'"
            ))),
        })
        .collect()
}

struct Expander<'a> {
    analysis: &'a Analysis,
    columns: &'a dyn Fn(usize) -> Vec<String>,
    next: usize,
}

impl VisitorMut for Expander<'_> {
    type Break = ();

    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        let Some(from) = self.analysis.selects.get(self.next) else {
            return ControlFlow::Break(());
        };
        self.next += 1;
        if !from.iter().any(|e| matches!(e, FromEntry::Api(_))) {
            return ControlFlow::Continue(());
        }
        let mut projection = Vec::with_capacity(select.projection.len());
        for item in select.projection.drain(..) {
            match &item {
                SelectItem::Wildcard(options) if plain(options) => {
                    if from.iter().any(|e| matches!(e, FromEntry::Opaque)) {
                        projection.push(item);
                        continue;
                    }
                    for entry in from {
                        match entry {
                            FromEntry::Api(i) => self.push_columns(*i, &mut projection),
                            FromEntry::Named(ident) => projection.push(qualified_wildcard(ident)),
                            FromEntry::Opaque => {}
                        }
                    }
                }
                SelectItem::QualifiedWildcard(
                    SelectItemQualifiedWildcardKind::ObjectName(name),
                    options,
                ) if plain(options) && name.0.len() == 1 => {
                    let qualifier = name
                        .0
                        .first()
                        .and_then(|p| p.as_ident())
                        .map(|i| i.value.clone());
                    let target = from.iter().find_map(|e| match e {
                        FromEntry::Api(i)
                            if qualifier.as_deref().is_some_and(|q| {
                                self.analysis.occurrences[*i].alias.eq_ignore_ascii_case(q)
                            }) =>
                        {
                            Some(*i)
                        }
                        _ => None,
                    });
                    match target {
                        Some(i) => self.push_columns(i, &mut projection),
                        None => projection.push(item),
                    }
                }
                _ => projection.push(item),
            }
        }
        select.projection = projection;
        ControlFlow::Continue(())
    }
}

impl Expander<'_> {
    fn push_columns(&self, occurrence: usize, projection: &mut Vec<SelectItem>) {
        let alias = &self.analysis.occurrences[occurrence].alias;
        let columns = (self.columns)(occurrence);
        if columns.is_empty() {
            // Columns come from the data: let SQLite expand.
            projection.push(qualified_wildcard(&Ident::with_quote('"', alias.clone())));
            return;
        }
        for column in columns {
            projection.push(SelectItem::UnnamedExpr(Expr::CompoundIdentifier(vec![
                Ident::with_quote('"', alias.clone()),
                Ident::with_quote('"', column),
            ])));
        }
    }
}

fn plain(options: &sqlparser::ast::WildcardAdditionalOptions) -> bool {
    options.opt_ilike.is_none()
        && options.opt_exclude.is_none()
        && options.opt_except.is_none()
        && options.opt_replace.is_none()
        && options.opt_rename.is_none()
}

fn qualified_wildcard(ident: &Ident) -> SelectItem {
    SelectItem::QualifiedWildcard(
        SelectItemQualifiedWildcardKind::ObjectName(ObjectName(vec![ObjectNamePart::Identifier(
            ident.clone(),
        )])),
        Default::default(),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use sqlparser::dialect::SQLiteDialect;
    use sqlparser::parser::Parser;

    use super::*;

    fn query(sql: &str) -> Query {
        match Parser::parse_sql(&SQLiteDialect {}, sql).unwrap().pop() {
            Some(sqlparser::ast::Statement::Query(q)) => *q,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_where_name_the_projection_reads_as_a_column_is_that_column_not_an_alias() {
        let mut q = query(
            "SELECT region, JSON_EXTRACT(p, '$.Region') AS region, JSON_EXTRACT(p, '$.Zone') AS zone \
             FROM p.s.r WHERE region = 'us-east-1' AND zone = 'z'",
        );
        let analysis = analyse(&mut q).unwrap();
        let bound: Vec<&str> = analysis
            .bindings
            .iter()
            .map(|b| b.column.as_str())
            .collect();
        // `zone` is an alias of an expression that binds nothing, and may be the table's
        // own column (SQLite reads a WHERE name as the table's column first): it is offered
        // as that, and binds only if the table has such a parameter.
        assert_eq!(bound, ["region", "zone"]);
    }

    #[test]
    fn where_bindings_know_their_conjunct_and_dropping_one_keeps_the_rest_whole() {
        let mut q = query("SELECT * FROM p.s.r WHERE zone = 'z' AND (a = 1 OR b = 2) AND x > 3");
        let analysis = analyse(&mut q).unwrap();
        let zone = analysis
            .bindings
            .iter()
            .find(|b| b.column == "zone")
            .unwrap();
        let conjunct = zone.conjunct.clone().unwrap();
        assert_eq!((conjunct.select, conjunct.index), (0, 0));
        assert_eq!(conjunct.targets, [0]);
        drop_conjuncts(&mut q, &[conjunct]);
        assert_eq!(
            q.to_string(),
            "SELECT * FROM __qg_t0 AS \"r\" WHERE (a = 1 OR b = 2) AND (x > 3)"
        );
    }

    #[test]
    fn on_conditions_and_outer_join_wheres_are_not_droppable() {
        let mut q =
            query("SELECT * FROM p.s.a AS a JOIN p.s.b AS b ON b.zone = 'z' WHERE a.region = 'r'");
        let analysis = analyse(&mut q).unwrap();
        let of = |column: &str| {
            analysis
                .bindings
                .iter()
                .find(|b| b.column == column)
                .unwrap()
                .conjunct
                .clone()
        };
        assert!(of("zone").is_none());
        assert_eq!(of("region").unwrap().targets, [0]);

        let mut q = query(
            "SELECT * FROM p.s.a AS a LEFT JOIN p.s.b AS b ON b.id = a.id WHERE zone = 'z' AND b.region = 'r'",
        );
        let analysis = analyse(&mut q).unwrap();
        let zone = analysis
            .bindings
            .iter()
            .find(|b| b.column == "zone")
            .unwrap();
        assert!(
            zone.conjunct.is_none(),
            "a bare name under an outer join stays"
        );
        let region = analysis
            .bindings
            .iter()
            .find(|b| b.column == "region")
            .unwrap();
        assert_eq!(region.conjunct.clone().unwrap().targets, [1]);
    }

    #[test]
    fn a_bare_name_may_belong_to_every_table_of_its_select() {
        let mut q = query("SELECT * FROM p.s.a, p.s.b WHERE zone = 'z'");
        let analysis = analyse(&mut q).unwrap();
        let conjunct = analysis.bindings[0].conjunct.clone().unwrap();
        assert_eq!(conjunct.targets, [0, 1]);
        // A subquery's SELECT has a number of its own.
        let mut q =
            query("SELECT * FROM p.s.a WHERE id IN (SELECT id FROM p.s.b WHERE zone = 'z')");
        let analysis = analyse(&mut q).unwrap();
        let zone = analysis
            .bindings
            .iter()
            .find(|b| b.column == "zone")
            .unwrap();
        let conjunct = zone.conjunct.clone().unwrap();
        assert_eq!(
            (conjunct.select, conjunct.targets.as_slice()),
            (1, &[1][..])
        );
        drop_conjuncts(&mut q, &[conjunct]);
        assert_eq!(
            q.to_string(),
            "SELECT * FROM __qg_t0 AS \"a\" WHERE id IN (SELECT id FROM __qg_t1 AS \"b\")"
        );
    }
}
