//! Which column names a statement can reach, so an API table loads only those columns
//! (projection push-down).
//!
//! The analysis is deliberately coarse and errs towards loading more: every identifier in
//! the statement (column, table, alias, function, `USING` name, wherever it appears) and
//! every string literal (SQLite accepts some quoted strings as identifiers) counts as a
//! name a column could be reached by. A wildcard that is still in the statement (over a
//! subquery, or a table whose columns come from the data) or a `NATURAL` join reaches
//! columns without naming them: then every column is needed.

use std::collections::HashSet;
use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Ident, JoinConstraint, Query, Select, SelectItem, ValueWithSpan, Visit, Visitor,
};

use super::tables::join_constraint;

/// The column names a statement may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Referenced {
    /// The statement may reach any column.
    All,
    /// Only columns with one of these names (ASCII-lower-cased) can be reached.
    Names(HashSet<String>),
}

impl Referenced {
    /// Whether a column named `column` may be used (ASCII-case-insensitively, as SQLite
    /// resolves names).
    pub(crate) fn includes(&self, column: &str) -> bool {
        match self {
            Referenced::All => true,
            Referenced::Names(names) if column.bytes().any(|b| b.is_ascii_uppercase()) => {
                names.contains(&column.to_ascii_lowercase())
            }
            Referenced::Names(names) => names.contains(column),
        }
    }
}

/// The names `query` (as it will run: API tables renamed, wildcards over API tables
/// expanded) may reach columns by.
pub(crate) fn referenced(query: &Query) -> Referenced {
    let mut collector = Collector::default();
    match query.visit(&mut collector) {
        ControlFlow::Break(()) => Referenced::All,
        ControlFlow::Continue(()) => Referenced::Names(collector.names),
    }
}

#[derive(Default)]
struct Collector {
    names: HashSet<String>,
}

impl Visitor for Collector {
    /// Breaking means "every column may be used".
    type Break = ();

    fn pre_visit_ident(&mut self, ident: &Ident) -> ControlFlow<()> {
        self.names.insert(ident.value.to_ascii_lowercase());
        ControlFlow::Continue(())
    }

    fn pre_visit_value(&mut self, value: &ValueWithSpan) -> ControlFlow<()> {
        if let Some(text) = value.value.clone().into_string() {
            self.names.insert(text.to_ascii_lowercase());
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        match expr {
            Expr::Wildcard(_) | Expr::QualifiedWildcard(..) => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        }
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<()> {
        let wildcard = select.projection.iter().any(|item| {
            matches!(
                item,
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
            )
        });
        let natural = select.from.iter().flat_map(|from| &from.joins).any(|join| {
            matches!(
                join_constraint(&join.join_operator),
                Some(JoinConstraint::Natural)
            )
        });
        if wildcard || natural {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use sqlparser::ast::Statement;
    use sqlparser::dialect::SQLiteDialect;
    use sqlparser::parser::Parser;

    fn names(sql: &str) -> Referenced {
        let statement = Parser::parse_sql(&SQLiteDialect {}, sql)
            .unwrap()
            .pop()
            .unwrap();
        let Statement::Query(query) = statement else {
            panic!("not a query: {sql}");
        };
        referenced(&query)
    }

    fn set(list: &[&str]) -> Referenced {
        Referenced::Names(list.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn every_identifier_and_string_counts() {
        assert_eq!(
            names("SELECT Name, t.\"Stars\" FROM t WHERE org = 'Acme' ORDER BY 2"),
            set(&["name", "t", "stars", "org", "acme"])
        );
        assert_eq!(
            names(
                "SELECT g, count(*) FROM a JOIN b USING (k) WHERE x IN (SELECT y FROM c) \
                 GROUP BY g HAVING sum(z) > 1"
            ),
            set(&["g", "count", "a", "b", "k", "x", "y", "c", "sum", "z"])
        );
    }

    #[test]
    fn wildcards_and_natural_joins_reach_everything() {
        assert_eq!(names("SELECT * FROM t"), Referenced::All);
        assert_eq!(names("SELECT t.* FROM t"), Referenced::All);
        assert_eq!(names("SELECT a FROM (SELECT * FROM t)"), Referenced::All);
        assert_eq!(names("SELECT a FROM t NATURAL JOIN u"), Referenced::All);
        assert_ne!(names("SELECT count(*) FROM t"), Referenced::All);
    }

    #[test]
    fn includes_is_case_insensitive() {
        let found = names("SELECT \"Full_Name\" FROM t");
        assert!(found.includes("full_name"));
        assert!(found.includes("FULL_NAME"));
        assert!(!found.includes("id"));
        assert!(Referenced::All.includes("anything"));
    }
}
