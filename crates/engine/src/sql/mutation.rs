//! The write statements: `INSERT INTO p.s.r (cols) VALUES|SELECT …`, `UPDATE p.s.r SET …
//! WHERE …` (PATCH), `REPLACE p.s.r SET … WHERE …` (PUT), `DELETE FROM p.s.r WHERE …`, each
//! with an optional `RETURNING`, and `EXEC p.s.r.method @param = 'v', … [, @@json = '{…}']`.
//! WHERE clauses of UPDATE, REPLACE and DELETE are conjunctions of `col = literal` and
//! `col IN (literal, …)`: each names a request parameter (or, for UPDATE and REPLACE,
//! nothing else); an `IN` list makes one request per value.

use sqlparser::ast::{
    AssignmentTarget, Delete, Expr, FromTable, InTarget, Insert, ObjectName, Query, SelectItem,
    TableFactor, TableObject, Update,
};
use sqlparser::tokenizer::Token;

use super::scalar::{Scalar, scalar, unnest};
use super::tables::{name_parts, split_and};
use crate::error::{Error, Result};
use crate::types::SqlVerb;

/// What `RETURNING` asks for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Returning {
    /// `RETURNING *`
    All,
    /// `RETURNING a, b`
    Columns(Vec<String>),
}

/// Where an INSERT's rows come from.
#[derive(Debug, Clone)]
pub(crate) enum InsertRows {
    /// `VALUES (…), (…)` of literals.
    Values(Vec<Vec<Scalar>>),
    /// `SELECT …` (literals or a query over API tables), run through the read path.
    Query(Box<Query>),
}

/// An INSERT, UPDATE, REPLACE or DELETE.
#[derive(Debug, Clone)]
pub(crate) struct Mutation {
    pub(crate) verb: SqlVerb,
    /// `[provider, service, resource]`.
    pub(crate) target: [String; 3],
    /// INSERT: the column list and its rows.
    pub(crate) insert: Option<(Vec<String>, InsertRows)>,
    /// UPDATE / REPLACE: `SET` columns.
    pub(crate) assignments: Vec<(String, Scalar)>,
    /// `WHERE col = literal` and `col IN (literal, …)` conjuncts: each column with its
    /// values (one for `=`); an `IN` list makes one request per value.
    pub(crate) conditions: Vec<(String, Vec<Scalar>)>,
    pub(crate) returning: Option<Returning>,
    /// `/*+ AWAIT */`: wait for the long-running operation the write starts.
    pub(crate) await_operation: bool,
}

/// `EXEC p.s.r.method @a = 'v', … [, @@json = '{…}']`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Exec {
    /// `[provider, service, resource, method]`.
    pub(crate) target: [String; 4],
    pub(crate) args: Vec<(String, Scalar)>,
    /// The `@@json` request body, as written.
    pub(crate) json_body: Option<String>,
    /// `/*+ AWAIT */`: wait for the long-running operation the call starts.
    pub(crate) await_operation: bool,
}

fn target3(name: &ObjectName, verb: &str) -> Result<[String; 3]> {
    let parts = name_parts(name)?;
    <[String; 3]>::try_from(parts).map_err(|_| {
        Error::invalid_sql(format!(
            "{verb} needs a provider.service.resource table, not '{name}'"
        ))
    })
}

fn must_scalar(expr: &Expr, what: &str) -> Result<Scalar> {
    scalar(expr).ok_or_else(|| {
        Error::invalid_sql(format!(
            "{what} must be a literal (a quoted string, number, TRUE/FALSE or NULL), not '{expr}'"
        ))
    })
}

fn conditions(selection: Option<&Expr>, verb: &str) -> Result<Vec<(String, Vec<Scalar>)>> {
    let Some(selection) = selection else {
        return Ok(Vec::new());
    };
    let mut conjuncts = Vec::new();
    split_and(selection, &mut conjuncts);
    let mut out = Vec::new();
    for conjunct in conjuncts {
        if let Expr::In {
            expr,
            target: InTarget::List(list),
            negated: false,
            ..
        } = unnest(&conjunct)
        {
            let column = match unnest(expr) {
                Expr::Identifier(id) => id.value.clone(),
                Expr::CompoundIdentifier(ids) if !ids.is_empty() => {
                    ids[ids.len() - 1].value.clone()
                }
                other => {
                    return Err(Error::invalid_sql(format!(
                        "the WHERE clause of {verb} needs `column IN (literal, …)`, not '{other} IN …'"
                    )));
                }
            };
            let mut values = Vec::with_capacity(list.len());
            for item in list {
                values.push(must_scalar(
                    item,
                    &format!("a value of '{column}' in WHERE … IN"),
                )?);
            }
            if values.is_empty() {
                return Err(Error::invalid_sql(format!(
                    "the IN list of '{column}' is empty"
                )));
            }
            out.push((column, values));
            continue;
        }
        let Expr::BinaryOp {
            left,
            op: sqlparser::ast::BinaryOperator::Eq,
            right,
        } = unnest(&conjunct)
        else {
            return Err(Error::invalid_sql(format!(
                "the WHERE clause of {verb} may only join `column = literal` and `column IN (literal, …)` conditions with AND; '{conjunct}' is not one"
            )));
        };
        let (column, value) = match (unnest(left), unnest(right)) {
            (Expr::Identifier(id), value) | (value, Expr::Identifier(id)) => {
                (id.value.clone(), value)
            }
            (Expr::CompoundIdentifier(ids), value) | (value, Expr::CompoundIdentifier(ids)) => {
                let Some(last) = ids.last() else {
                    return Err(Error::invalid_sql("empty column name"));
                };
                (last.value.clone(), value)
            }
            _ => {
                return Err(Error::invalid_sql(format!(
                    "the WHERE clause of {verb} needs `column = literal`, not '{conjunct}'"
                )));
            }
        };
        let value = must_scalar(value, &format!("the value of '{column}' in WHERE"))?;
        out.push((column, vec![value]));
    }
    Ok(out)
}

fn returning(items: Option<&Vec<SelectItem>>) -> Result<Option<Returning>> {
    let Some(items) = items else {
        return Ok(None);
    };
    let mut columns = Vec::new();
    for item in items {
        match item {
            SelectItem::Wildcard(_) => return Ok(Some(Returning::All)),
            SelectItem::UnnamedExpr(Expr::Identifier(id)) => columns.push(id.value.clone()),
            other => {
                return Err(Error::invalid_sql(format!(
                    "RETURNING takes * or plain column names, not '{other}'"
                )));
            }
        }
    }
    Ok(Some(Returning::Columns(columns)))
}

/// An INSERT statement.
pub(crate) fn insert(insert: Insert) -> Result<Mutation> {
    if insert.replace_into || insert.or.is_some() || insert.on.is_some() {
        return Err(Error::invalid_sql(
            "INSERT OR …/REPLACE INTO/ON CONFLICT have no meaning for API tables; use INSERT INTO, or REPLACE p.s.r SET … WHERE … for a PUT",
        ));
    }
    let TableObject::TableName(name) = &insert.table else {
        return Err(Error::invalid_sql(
            "INSERT needs a provider.service.resource table",
        ));
    };
    let target = target3(name, "INSERT")?;
    let columns: Vec<String> = insert
        .columns
        .iter()
        .map(|c| name_parts(c).map(|parts| parts.join(".")))
        .collect::<Result<_>>()?;
    if columns.is_empty() {
        return Err(Error::invalid_sql(
            "INSERT needs a column list: INSERT INTO p.s.r (col, …) SELECT …",
        ));
    }
    let source = insert
        .source
        .ok_or_else(|| Error::invalid_sql("INSERT needs VALUES (…) or SELECT …"))?;
    let rows = match source.body.as_ref() {
        sqlparser::ast::SetExpr::Values(values) => {
            let mut rows = Vec::new();
            for row in &values.rows {
                let mut cells = Vec::new();
                for expr in row.iter() {
                    cells.push(must_scalar(expr, "a VALUES entry")?);
                }
                rows.push(cells);
            }
            InsertRows::Values(rows)
        }
        _ => match super::constant_rows::constant_rows(&source) {
            Some(rows) => InsertRows::Values(rows),
            None => InsertRows::Query(source),
        },
    };
    Ok(Mutation {
        verb: SqlVerb::Insert,
        target,
        insert: Some((columns, rows)),
        assignments: Vec::new(),
        conditions: Vec::new(),
        returning: returning(insert.returning.as_ref())?,
        await_operation: false,
    })
}

/// An UPDATE statement; `replace` marks StackQL's `REPLACE p.s.r SET …` (PUT).
pub(crate) fn update(update: Update, replace: bool) -> Result<Mutation> {
    let verb_name = if replace { "REPLACE" } else { "UPDATE" };
    if update.from.is_some() || !update.table.joins.is_empty() {
        return Err(Error::invalid_sql(format!(
            "{verb_name} takes one provider.service.resource table, without FROM or joins"
        )));
    }
    let TableFactor::Table { name, .. } = &update.table.relation else {
        return Err(Error::invalid_sql(format!(
            "{verb_name} needs a provider.service.resource table"
        )));
    };
    let target = target3(name, verb_name)?;
    let mut assignments = Vec::new();
    for assignment in &update.assignments {
        let AssignmentTarget::ColumnName(column) = &assignment.target else {
            return Err(Error::invalid_sql(format!(
                "{verb_name} assigns one column at a time"
            )));
        };
        let column = name_parts(column)?.pop().unwrap_or_default();
        let value = must_scalar(
            &assignment.value,
            &format!("the value of '{column}' in SET"),
        )?;
        assignments.push((column, value));
    }
    Ok(Mutation {
        verb: if replace {
            SqlVerb::Replace
        } else {
            SqlVerb::Update
        },
        target,
        insert: None,
        assignments,
        conditions: conditions(update.selection.as_ref(), verb_name)?,
        returning: returning(update.returning.as_ref())?,
        await_operation: false,
    })
}

/// A DELETE statement.
pub(crate) fn delete(delete: Delete) -> Result<Mutation> {
    let tables = match &delete.from {
        FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
    };
    let [table] = tables.as_slice() else {
        return Err(Error::invalid_sql(
            "DELETE takes one provider.service.resource table",
        ));
    };
    if delete.using.is_some() || !table.joins.is_empty() {
        return Err(Error::invalid_sql(
            "DELETE takes one provider.service.resource table, without USING or joins",
        ));
    }
    let TableFactor::Table { name, .. } = &table.relation else {
        return Err(Error::invalid_sql(
            "DELETE needs a provider.service.resource table",
        ));
    };
    Ok(Mutation {
        verb: SqlVerb::Delete,
        target: target3(name, "DELETE")?,
        insert: None,
        assignments: Vec::new(),
        conditions: conditions(delete.selection.as_ref(), "DELETE")?,
        returning: returning(delete.returning.as_ref())?,
        await_operation: false,
    })
}

/// `EXEC` after its keyword (comments and whitespace already dropped).
pub(crate) fn exec(tokens: &[Token]) -> Result<Exec> {
    let (name, mut rest) = super::dotted_name(tokens);
    let target = <[String; 4]>::try_from(name).map_err(|_| {
        Error::invalid_sql(
            "EXEC needs provider.service.resource.method, e.g. EXEC github.repos.repos.enable_automated_security_fixes @owner = 'o', @repo = 'r'",
        )
    })?;
    let mut args: Vec<(String, Scalar)> = Vec::new();
    let mut json_body = None;
    while !rest.is_empty() {
        let (is_body, after) = match rest {
            [Token::AtAt, after @ ..] => (true, after),
            [Token::AtSign, after @ ..] => (false, after),
            _ => {
                return Err(Error::invalid_sql(format!(
                    "EXEC arguments are `@name = value` (and `@@json = '{{…}}'` for a body), separated by commas; found '{}'",
                    rest[0]
                )));
            }
        };
        let [Token::Word(word), Token::Eq, value, after @ ..] = after else {
            return Err(Error::invalid_sql(
                "EXEC arguments are `@name = value`: a name, '=', then a literal",
            ));
        };
        let (value, after) = match (value, after) {
            (Token::Minus, [Token::Number(n, _), after @ ..]) => {
                (Scalar::Number(format!("-{n}")), after)
            }
            (Token::SingleQuotedString(s), _) => (Scalar::Text(s.clone()), after),
            (Token::Number(n, _), _) => (Scalar::Number(n.clone()), after),
            (Token::Word(w), _) if w.quote_style.is_none() => {
                match w.value.to_ascii_uppercase().as_str() {
                    "TRUE" => (Scalar::Bool(true), after),
                    "FALSE" => (Scalar::Bool(false), after),
                    "NULL" => (Scalar::Null, after),
                    _ => {
                        return Err(Error::invalid_sql(format!(
                            "the value of @{} must be a literal; quote text as '{}'",
                            word.value, w.value
                        )));
                    }
                }
            }
            (other, _) => {
                return Err(Error::invalid_sql(format!(
                    "the value of @{} must be a literal, not '{other}'",
                    word.value
                )));
            }
        };
        if is_body {
            if !word.value.eq_ignore_ascii_case("json") {
                return Err(Error::invalid_sql(format!(
                    "unknown EXEC option @@{}: only @@json (the request body) exists",
                    word.value
                )));
            }
            let Scalar::Text(text) = value else {
                return Err(Error::invalid_sql(
                    "@@json takes the request body as a quoted JSON string",
                ));
            };
            json_body = Some(text);
        } else {
            if args.iter().any(|(n, _)| n == &word.value) {
                return Err(Error::invalid_sql(format!(
                    "@{} is given twice",
                    word.value
                )));
            }
            args.push((word.value.clone(), value));
        }
        rest = match after {
            [] => after,
            [Token::Comma, more @ ..] if !more.is_empty() => more,
            _ => {
                return Err(Error::invalid_sql("EXEC arguments are separated by commas"));
            }
        };
    }
    Ok(Exec {
        target,
        args,
        json_body,
        await_operation: false,
    })
}

#[cfg(test)]
mod tests {
    use crate::sql::{Statement, parse};

    use super::*;

    fn mutation(sql: &str) -> Mutation {
        match parse(sql).unwrap() {
            Statement::Mutation(m) => m,
            other => panic!("not a mutation: {other:?}"),
        }
    }

    #[test]
    fn parses_the_four_verbs() {
        let m = mutation(
            "INSERT INTO github.repos.repos (org, name, private) VALUES ('acme', 'x', true) RETURNING *",
        );
        assert_eq!(m.verb, SqlVerb::Insert);
        assert_eq!(m.target, ["github", "repos", "repos"].map(String::from));
        let Some((columns, InsertRows::Values(rows))) = &m.insert else {
            panic!("values")
        };
        assert_eq!(columns, &["org", "name", "private"]);
        assert_eq!(rows[0][2], Scalar::Bool(true));
        assert_eq!(m.returning, Some(Returning::All));

        // Rows of literals are rows known now, planned as VALUES are.
        let m = mutation("INSERT INTO p.s.r (a, b) SELECT 'x', 1 UNION ALL SELECT 'y' AS a, -2");
        let Some((_, InsertRows::Values(rows))) = &m.insert else {
            panic!("constant rows: {:?}", m.insert)
        };
        assert_eq!(
            rows,
            &[
                vec![Scalar::Text("x".into()), Scalar::Number("1".into())],
                vec![Scalar::Text("y".into()), Scalar::Number("-2".into())]
            ]
        );
        // Anything read, filtered, deduplicated or computed is read at run time.
        for sql in [
            "INSERT INTO p.s.r (a) SELECT name FROM q.s.r",
            "INSERT INTO p.s.r (a) SELECT 'x' WHERE 1 = 0",
            "INSERT INTO p.s.r (a) SELECT 'x' UNION SELECT 'x'",
            "INSERT INTO p.s.r (a) SELECT 'x' || 'y'",
            "INSERT INTO p.s.r (a) SELECT 'x' LIMIT 0",
            "INSERT INTO p.s.r (a) WITH c AS (SELECT 1) SELECT 'x'",
            "INSERT INTO p.s.r (a) SELECT DISTINCT 'x'",
        ] {
            assert!(
                matches!(mutation(sql).insert, Some((_, InsertRows::Query(_)))),
                "{sql}"
            );
        }

        let m = mutation(
            "UPDATE p.s.r SET description = 'd', size = -3 WHERE owner = 'o' AND repo = 'r'",
        );
        assert_eq!(m.verb, SqlVerb::Update);
        assert_eq!(
            m.assignments[1],
            ("size".into(), Scalar::Number("-3".into()))
        );
        assert_eq!(m.conditions.len(), 2);

        let m = mutation("  /* hint */ REPLACE p.s.r SET a = 1 WHERE id = 'x' RETURNING a, b");
        assert_eq!(m.verb, SqlVerb::Replace);
        assert_eq!(
            m.returning,
            Some(Returning::Columns(vec!["a".into(), "b".into()]))
        );

        let m = mutation("DELETE FROM p.s.r WHERE id = '1'");
        assert_eq!(m.verb, SqlVerb::Delete);
        assert_eq!(
            m.conditions,
            vec![("id".into(), vec![Scalar::Text("1".into())])]
        );
    }

    #[test]
    fn refuses_what_an_api_cannot_do() {
        for sql in [
            "DELETE FROM p.s.r WHERE id > 3",
            "DELETE FROM p.s.r WHERE id = other",
            "UPDATE p.s.r SET a = b WHERE id = '1'",
            "INSERT INTO p.s.r VALUES ('x')",
            "INSERT OR REPLACE INTO p.s.r (a) VALUES ('x')",
            "DELETE FROM p.s WHERE id = '1'",
        ] {
            assert!(parse(sql).is_err(), "{sql}");
        }
    }

    #[test]
    fn parses_exec_with_a_json_body() {
        let Statement::Exec(exec) = parse(
            "EXEC google.compute.instances.start @project = 'p', @zone = 'z', @count = -2, @@json = '{\"a\": [1]}';",
        )
        .unwrap() else {
            panic!("exec")
        };
        assert_eq!(exec.target[3], "start");
        assert_eq!(exec.args[2], ("count".into(), Scalar::Number("-2".into())));
        assert_eq!(exec.json_body.as_deref(), Some("{\"a\": [1]}"));
        for bad in [
            "EXEC p.s.r @a = 'x'",
            "EXEC p.s.r.m @a 'x'",
            "EXEC p.s.r.m @a = 'x' @b = 'y'",
            "EXEC p.s.r.m @@body = '{}'",
            "EXEC p.s.r.m @a = 'x', @a = 'y'",
            "EXEC p.s.r.m @a = x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
