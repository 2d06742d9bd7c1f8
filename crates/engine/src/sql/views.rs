//! Resource views in a query: each `provider.service.resource` that is a view becomes the
//! subquery of its DDL, aliased as the table was, before the query is analysed (so the API
//! tables the DDL names are planned as any other). As in StackQL, the statement's own
//! `name = value` and `name IN (…)` conjuncts (unqualified, or qualified by the view's
//! alias) replace the DDL's conjuncts on the same name: `WHERE Identifier = 'b1' AND
//! region = 'eu-west-1'` on `awscc.s3.buckets` reaches `awscc.cloud_control.resource` with
//! those values in place of the DDL's placeholders. The view used is the first of its
//! fallback chain whose required parameters the statement gives.

use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, Ident, InTarget, Query, Select, SelectItem, SetExpr,
    Statement as SqlStatement, TableAlias, TableFactor, VisitMut, VisitorMut,
};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;

use super::scalar::unnest;
use super::tables::{literal, name_parts, split_and};
use super::view_params::{Unshown, pass_on, quote_aliases};
use crate::document::View;
use crate::error::{Error, ErrorKind, Result};

/// Views expanded per statement at most (views over views included): a view that names
/// itself, directly or through others, stops here.
const MAX_EXPANSIONS: usize = 64;

/// A resource's views, as [`expand`] needs them.
pub(crate) struct ViewSet {
    /// `provider.service.resource`, for messages.
    pub(crate) full_name: String,
    pub(crate) views: Vec<View>,
}

/// Finds a table's views: `None` for a table that is not a view.
pub(crate) type Lookup<'a> = dyn FnMut(&[String; 3]) -> Result<Option<ViewSet>> + 'a;

/// Replaces every view in `query` by its DDL (see the module documentation).
pub(crate) fn expand(query: &mut Query, lookup: &mut Lookup<'_>) -> Result<()> {
    let mut expander = Expander {
        lookup,
        expansions: 0,
    };
    match query.visit(&mut expander) {
        ControlFlow::Break(err) => Err(err),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// A view's parsed DDL: the query, and the names its top SELECT projects (`None` when it
/// projects `*`).
pub(crate) fn parse_ddl(full_name: &str, ddl: &str) -> Result<Box<Query>> {
    let bad = |why: String| {
        Error::bad_document(format!(
            "the view DDL of '{full_name}' cannot be used: {why}"
        ))
    };
    let mut statements =
        Parser::parse_sql(&SQLiteDialect {}, ddl).map_err(|err| bad(err.to_string()))?;
    match (statements.pop(), statements.is_empty()) {
        (Some(SqlStatement::Query(query)), true) => Ok(query),
        _ => Err(bad("it is not one SELECT".to_owned())),
    }
}

/// The names a view's DDL projects, in order, each with the expression it is computed
/// from; a `*` (or `t.*`) is `None`.
pub(crate) fn projected(query: &Query) -> Vec<Option<(String, Expr)>> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return vec![None];
    };
    select
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::ExprWithAlias { expr, alias } => Some((alias.value.clone(), expr.clone())),
            SelectItem::UnnamedExpr(expr) => Some((
                match unnest(expr) {
                    Expr::Identifier(ident) => ident.value.clone(),
                    Expr::CompoundIdentifier(parts) => parts
                        .last()
                        .map(|i| i.value.clone())
                        .unwrap_or_else(|| expr.to_string()),
                    other => other.to_string(),
                },
                expr.clone(),
            )),
            _ => None,
        })
        .collect()
}

struct Expander<'l, 'a> {
    lookup: &'l mut Lookup<'a>,
    expansions: usize,
}

/// A conjunct of the statement that can give a view a parameter.
struct Given {
    /// Its position in the SELECT's WHERE conjuncts.
    index: usize,
    name: String,
    /// Whether it names the view's alias (`v.name`).
    qualified: bool,
    value: GivenValue,
}

enum GivenValue {
    Eq(Box<Expr>),
    In(Vec<Expr>),
}

impl VisitorMut for Expander<'_, '_> {
    type Break = Error;

    /// The views of a SELECT's FROM are expanded before its parts are visited, so the DDL
    /// inserted is visited (and its own views expanded) in turn.
    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<Error> {
        match self.expand_select(select) {
            Ok(()) => ControlFlow::Continue(()),
            Err(err) => ControlFlow::Break(err),
        }
    }
}

impl Expander<'_, '_> {
    fn expand_select(&mut self, select: &mut Select) -> Result<()> {
        let mut conjuncts = Vec::new();
        if let Some(selection) = &select.selection {
            split_and(selection, &mut conjuncts);
        }
        let single = select.from.len() == 1 && select.from.iter().all(|t| t.joins.is_empty());
        let mut pushed: Vec<usize> = Vec::new();
        let mut factors: Vec<&mut TableFactor> = Vec::new();
        for table in &mut select.from {
            collect_factors(&mut table.relation, &mut factors);
            for join in &mut table.joins {
                collect_factors(&mut join.relation, &mut factors);
            }
        }
        for factor in factors {
            let TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } = &*factor
            else {
                continue;
            };
            let Ok(parts) = <[String; 3]>::try_from(name_parts(name)?) else {
                continue;
            };
            let Some(set) = (self.lookup)(&parts)? else {
                continue;
            };
            if set.views.is_empty() {
                continue;
            }
            self.expansions += 1;
            if self.expansions > MAX_EXPANSIONS {
                return Err(Error::bad_document(format!(
                    "'{}': more than {MAX_EXPANSIONS} views in one statement (a view that reads itself?)",
                    set.full_name
                )));
            }
            let alias_name = alias
                .as_ref()
                .map(|a| a.name.value.clone())
                .unwrap_or_else(|| parts[2].clone());
            let given = given_params(&conjuncts, &alias_name);
            let view = choose(&set, &given)?;
            let mut ddl = parse_ddl(&set.full_name, &view.ddl)?;
            let names = projected(&ddl);
            quote_aliases(&mut ddl);
            let mut took = clobber(&mut ddl, &given);
            let passed = pass_on_unshown(&mut ddl, &names, &given, &took, single);
            took.extend(passed);
            for index in took {
                let Some(g) = given.iter().find(|g| g.index == index) else {
                    continue;
                };
                // The view's rows are those the value asked for: the conjunct is not applied
                // again, unless another table of the SELECT may own the bare name.
                let shown = names.iter().any(|n| match n {
                    Some((n, _)) => n.eq_ignore_ascii_case(&g.name),
                    None => true,
                });
                if (single || g.qualified || !shown) && !pushed.contains(&index) {
                    pushed.push(index);
                }
            }
            *factor = TableFactor::Derived {
                lateral: false,
                subquery: ddl,
                alias: Some(TableAlias {
                    explicit: true,
                    name: Ident::with_quote('"', alias_name),
                    columns: Vec::new(),
                    at: None,
                }),
                sample: None,
            };
        }
        if !pushed.is_empty() {
            let kept: Vec<Expr> = conjuncts
                .into_iter()
                .enumerate()
                .filter(|(i, _)| !pushed.contains(i))
                .map(|(_, c)| c)
                .collect();
            select.selection = kept.into_iter().reduce(|a, b| Expr::BinaryOp {
                left: Box::new(a),
                op: BinaryOperator::And,
                right: Box::new(b),
            });
        }
        Ok(())
    }
}

/// Passes the statement's conjuncts the view does not show (and the DDL did not take) on
/// to the tables its DDL reads (see [`super::view_params`]); a bare name in a SELECT of
/// several tables may be another table's and stays. Returns the indexes passed on.
fn pass_on_unshown(
    ddl: &mut Query,
    names: &[Option<(String, Expr)>],
    given: &[Given],
    took: &[usize],
    single: bool,
) -> Vec<usize> {
    let shown: Vec<Option<String>> = names
        .iter()
        .map(|n| n.as_ref().map(|(n, _)| n.clone()))
        .collect();
    let unshown: Vec<Unshown<'_>> = given
        .iter()
        .filter(|g| !took.contains(&g.index) && (single || g.qualified))
        .map(|g| Unshown {
            index: g.index,
            name: &g.name,
            eq: match &g.value {
                GivenValue::Eq(value) => Some(value.as_ref()),
                GivenValue::In(_) => None,
            },
            list: match &g.value {
                GivenValue::Eq(_) => &[],
                GivenValue::In(list) => list.as_slice(),
            },
        })
        .collect();
    pass_on(ddl, &shown, &unshown)
}

fn collect_factors<'a>(factor: &'a mut TableFactor, out: &mut Vec<&'a mut TableFactor>) {
    if let TableFactor::NestedJoin {
        table_with_joins, ..
    } = factor
    {
        collect_factors(&mut table_with_joins.relation, out);
        for join in &mut table_with_joins.joins {
            collect_factors(&mut join.relation, out);
        }
    } else {
        out.push(factor);
    }
}

/// The first view whose required parameters `given` names; an error naming them when
/// none is.
fn choose<'v>(set: &'v ViewSet, given: &[Given]) -> Result<&'v View> {
    let gives = |name: &String| given.iter().any(|g| g.name.eq_ignore_ascii_case(name));
    if let Some(view) = set
        .views
        .iter()
        .find(|v| v.required_params.iter().all(gives))
    {
        return Ok(view);
    }
    let options: Vec<String> = set
        .views
        .iter()
        .map(|v| {
            v.required_params
                .iter()
                .map(|p| format!("{p} = '…'"))
                .collect::<Vec<_>>()
                .join(" AND ")
        })
        .collect();
    Err(Error::new(
        ErrorKind::MissingParameters,
        format!(
            "'{}' is a view that needs WHERE {} (an equality or IN list on each); nothing was sent",
            set.full_name,
            options.join(", or WHERE ")
        ),
    ))
}

/// The conjuncts that can give the view at `alias` a parameter: `name = literal`,
/// `literal = name` and `name IN (literal, …)`, with `name` bare or `alias.name`.
fn given_params(conjuncts: &[Expr], alias: &str) -> Vec<Given> {
    let column = |expr: &Expr| -> Option<(String, bool)> {
        match unnest(expr) {
            Expr::Identifier(ident) => Some((ident.value.clone(), false)),
            Expr::CompoundIdentifier(parts) => match parts.as_slice() {
                [table, name] if table.value.eq_ignore_ascii_case(alias) => {
                    Some((name.value.clone(), true))
                }
                _ => None,
            },
            _ => None,
        }
    };
    let mut out = Vec::new();
    for (index, conjunct) in conjuncts.iter().enumerate() {
        match unnest(conjunct) {
            Expr::BinaryOp {
                left,
                op: BinaryOperator::Eq,
                right,
            } => {
                let found = match (column(left), column(right)) {
                    (Some(c), None) if literal(right).is_some() => Some((c, right)),
                    (None, Some(c)) if literal(left).is_some() => Some((c, left)),
                    _ => None,
                };
                if let Some(((name, qualified), value)) = found {
                    out.push(Given {
                        index,
                        name,
                        qualified,
                        value: GivenValue::Eq(value.clone()),
                    });
                }
            }
            Expr::In {
                expr,
                target: InTarget::List(list),
                negated: false,
                ..
            } if list.iter().all(|v| literal(v).is_some()) => {
                if let Some((name, qualified)) = column(expr) {
                    out.push(Given {
                        index,
                        name,
                        qualified,
                        value: GivenValue::In(list.clone()),
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// Puts each given value in place of the DDL's own `name = …` / `name IN (…)` conjunct on
/// the same name (in its top SELECT's WHERE); returns the indexes of the givens used.
fn clobber(ddl: &mut Query, given: &[Given]) -> Vec<usize> {
    let SetExpr::Select(select) = ddl.body.as_mut() else {
        return Vec::new();
    };
    let Some(selection) = &select.selection else {
        return Vec::new();
    };
    let mut conjuncts = Vec::new();
    split_and(selection, &mut conjuncts);
    let mut used = Vec::new();
    for conjunct in &mut conjuncts {
        let target = match unnest(conjunct) {
            Expr::BinaryOp {
                left,
                op: BinaryOperator::Eq,
                right,
            } => match (bare_name(left), bare_name(right)) {
                (Some(_), Some(_)) => None,
                (Some(_), None) => Some(left.as_ref().clone()),
                (None, Some(_)) => Some(right.as_ref().clone()),
                (None, None) => None,
            },
            Expr::In {
                expr,
                target: InTarget::List(_),
                negated: false,
                ..
            } if bare_name(expr).is_some() => Some(expr.as_ref().clone()),
            _ => None,
        };
        let Some(target) = target else {
            continue;
        };
        let Some(name) = bare_name(&target) else {
            continue;
        };
        // The statement's last conjunct on a name wins, as a later assignment would.
        let Some(g) = given
            .iter()
            .rev()
            .find(|g| g.name.eq_ignore_ascii_case(&name))
        else {
            continue;
        };
        *conjunct = match &g.value {
            GivenValue::Eq(value) => Expr::BinaryOp {
                left: Box::new(target),
                op: BinaryOperator::Eq,
                right: value.clone(),
            },
            GivenValue::In(list) => Expr::In {
                expr: Box::new(target),
                target: InTarget::List(list.clone()),
                negated: false,
                global: false,
            },
        };
        if !used.contains(&g.index) {
            used.push(g.index);
        }
    }
    select.selection = conjuncts.into_iter().reduce(|a, b| Expr::BinaryOp {
        left: Box::new(a),
        op: BinaryOperator::And,
        right: Box::new(b),
    });
    used
}

/// The column a DDL conjunct names: `name` or `t.name`.
fn bare_name(expr: &Expr) -> Option<String> {
    match unnest(expr) {
        Expr::Identifier(ident) => Some(ident.value.clone()),
        Expr::CompoundIdentifier(parts) => parts.last().map(|i| i.value.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn query(sql: &str) -> Box<Query> {
        match Parser::parse_sql(&SQLiteDialect {}, sql).unwrap().pop() {
            Some(SqlStatement::Query(q)) => q,
            _ => panic!("not a query"),
        }
    }

    fn buckets() -> Vec<View> {
        vec![View {
            ddl: "SELECT region, Identifier, JSON_EXTRACT(Properties, '$.BucketName') AS bucket_name \
                  FROM awscc.cloud_control.resource WHERE TypeName = 'AWS::S3::Bucket' \
                  AND Identifier = '<BucketName>' AND region = 'us-east-1'"
                .into(),
            required_params: vec!["Identifier".into()],
        }]
    }

    fn expanded(sql: &str) -> Result<String> {
        let mut q = query(sql);
        expand(&mut q, &mut |parts: &[String; 3]| {
            Ok((parts[2] == "buckets").then(|| ViewSet {
                full_name: parts.join("."),
                views: buckets(),
            }))
        })?;
        Ok(q.to_string())
    }

    #[test]
    fn statement_values_replace_the_ddl_placeholders() {
        let sql = expanded(
            "SELECT bucket_name FROM awscc.s3.buckets WHERE Identifier = 'b1' AND region IN ('eu-west-1', 'us-west-2') AND bucket_name LIKE 'b%'",
        )
        .unwrap();
        assert_eq!(
            sql,
            "SELECT bucket_name FROM (SELECT region, Identifier, JSON_EXTRACT(Properties, '$.BucketName') AS \"bucket_name\" \
             FROM awscc.cloud_control.resource WHERE TypeName = 'AWS::S3::Bucket' AND Identifier = 'b1' \
             AND region IN ('eu-west-1', 'us-west-2')) AS \"buckets\" WHERE bucket_name LIKE 'b%'"
        );
    }

    #[test]
    fn a_join_keeps_bare_conjuncts_the_view_shows() {
        let sql = expanded(
            "SELECT * FROM awscc.s3.buckets b JOIN t ON t.x = b.Identifier WHERE b.Identifier = 'b1' AND region = 'eu-west-1'",
        )
        .unwrap();
        assert!(
            sql.contains("Identifier = 'b1' AND region = 'eu-west-1') AS \"b\""),
            "{sql}"
        );
        assert!(sql.ends_with("WHERE region = 'eu-west-1'"), "{sql}");
    }

    #[test]
    fn a_name_the_view_does_not_show_goes_to_its_ddl() {
        let sql = expanded(
            "SELECT bucket_name FROM awscc.s3.buckets WHERE Identifier = 'b1' AND TypeHint IN ('a', 'b') AND bucket_name = 'x'",
        )
        .unwrap();
        assert!(
            sql.contains("AND Identifier = 'b1' AND region = 'us-east-1') AND \"TypeHint\" IN ('a', 'b')) AS \"buckets\""),
            "{sql}"
        );
        assert!(sql.ends_with("WHERE bucket_name = 'x'"), "{sql}");
        // In a join a bare name may be the other table's: it stays.
        let sql = expanded(
            "SELECT * FROM awscc.s3.buckets b JOIN t ON t.x = b.Identifier WHERE b.Identifier = 'b1' AND TypeHint = 'a'",
        )
        .unwrap();
        assert!(sql.ends_with("WHERE TypeHint = 'a'"), "{sql}");
    }

    #[test]
    fn a_missing_required_parameter_is_named() {
        let err =
            expanded("SELECT * FROM awscc.s3.buckets WHERE region = 'eu-west-1'").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::MissingParameters);
        assert!(
            err.to_string()
                .contains("'awscc.s3.buckets' is a view that needs WHERE Identifier = '…'"),
            "{err}"
        );
    }

    #[test]
    fn a_view_reading_itself_stops() {
        let mut q = query("SELECT * FROM p.s.loop");
        let err = expand(&mut q, &mut |parts: &[String; 3]| {
            Ok(Some(ViewSet {
                full_name: parts.join("."),
                views: vec![View {
                    ddl: "SELECT * FROM p.s.loop".into(),
                    required_params: vec![],
                }],
            }))
        })
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BadDocument);
    }

    #[test]
    fn projection_names() {
        let q = query("SELECT region, t.Identifier, JSON_EXTRACT(p, '$.a') AS a, * FROM x");
        let names: Vec<Option<String>> = projected(&q)
            .into_iter()
            .map(|p| p.map(|(n, _)| n))
            .collect();
        assert_eq!(
            names,
            vec![
                Some("region".into()),
                Some("Identifier".into()),
                Some("a".into()),
                None
            ]
        );
    }
}
