//! Running a statement's final SQL over its loaded tables, within its time budget.

use std::time::Duration;

use rusqlite::Connection;
use rusqlite::types::ValueRef;

use super::limits::{Budget, EvalLimits, is_too_big};
use super::sqlite_internal;
use super::tables::BOOLEAN;
use crate::error::{Error, ErrorKind, Result};
use crate::types::{Cell, QueryOutput};

/// How a run of the final SQL ended.
pub(super) enum Ran {
    /// It finished (or failed) within its time.
    Done(QueryOutput),
    /// It was stopped at the end of `slice`, before the statement's own budget: nothing of
    /// it is kept, and it may run again (it only reads).
    Unfinished,
}

/// Runs the final SQL within the time budget, or within `slice` of it when given; a value
/// over the length limit or a spent budget ends it with a `LimitExceeded` error.
pub(super) fn run_bounded(
    conn: &mut Connection,
    sql: &str,
    max_rows: usize,
    limits: &EvalLimits,
    slice: Option<Duration>,
) -> Result<Ran> {
    let time = slice.map_or(limits.max_time, |slice| slice.min(limits.max_time));
    let budget = Budget::arm(conn, time).map_err(sqlite_internal)?;
    let result = run_query(conn, sql, max_rows, limits);
    Budget::disarm(conn).map_err(sqlite_internal)?;
    match result {
        // Once the budget is spent SQLite stops the statement: whatever error it ended
        // with, the budget is the cause.
        Err(_) if budget.spent() && time < limits.max_time => Ok(Ran::Unfinished),
        Err(_) if budget.spent() => Err(limits.out_of_time()),
        other => other.map(Ran::Done),
    }
}

fn run_query(
    conn: &Connection,
    sql: &str,
    max_rows: usize,
    limits: &EvalLimits,
) -> Result<QueryOutput> {
    let sql_error = |err| sql_error(err, limits);
    // Cached: the same statement over the same (kept) tables is not parsed again.
    let mut statement = conn.prepare_cached(sql).map_err(sql_error)?;
    if !statement.readonly() {
        return Err(Error::unsupported(
            "only read-only SQL runs against fetched rows",
        ));
    }
    // The result's columns are read once the statement has stepped: a cached statement over
    // a table made again since (same name, other columns) is compiled again by its first
    // step, and only then names the table's columns now.
    let mut shape: Option<Shape> = None;
    let mut rows = statement.query([]).map_err(sql_error)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(sql_error)? {
        if out.len() >= max_rows {
            return Err(Error::new(
                ErrorKind::LimitExceeded,
                format!(
                    "the result has more than {max_rows} rows (limits.max_result_rows); add a LIMIT or a narrower WHERE"
                ),
            ));
        }
        let shape = shape.get_or_insert_with(|| Shape::of(row.as_ref()));
        let mut cells = Vec::with_capacity(shape.columns.len());
        for (i, is_boolean) in shape.boolean.iter().enumerate() {
            let cell = match row.get_ref(i).map_err(sql_error)? {
                ValueRef::Null => Cell::Null,
                ValueRef::Integer(v @ (0 | 1)) if *is_boolean => Cell::Boolean(v == 1),
                ValueRef::Integer(v) => Cell::Integer(v),
                ValueRef::Real(v) => Cell::Real(v),
                ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => Cell::Blob(b.to_vec()),
            };
            cells.push(cell);
        }
        out.push(cells);
    }
    drop(rows);
    let columns = match shape {
        Some(shape) => shape.columns,
        None => Shape::of(&statement).columns,
    };
    Ok(QueryOutput {
        columns,
        rows: out,
        warnings: Vec::new(),
        ..Default::default()
    })
}

/// The columns of a query's result, and which of them come back as booleans.
struct Shape {
    columns: Vec<String>,
    /// Whether each column is a plain reference to a BOOLEAN column.
    boolean: Vec<bool>,
}

impl Shape {
    fn of(statement: &rusqlite::Statement<'_>) -> Shape {
        Shape {
            columns: statement.column_names().map(str::to_owned).collect(),
            boolean: statement
                .columns()
                .map(|c| {
                    c.decl_type()
                        .is_some_and(|t| t.eq_ignore_ascii_case(BOOLEAN))
                })
                .collect(),
        }
    }
}

/// Errors from the user's SQL (unknown column, bad function use) are the caller's to fix.
fn sql_error(err: rusqlite::Error, limits: &EvalLimits) -> Error {
    if is_too_big(&err) {
        return limits.too_big();
    }
    match err {
        rusqlite::Error::SqliteFailure(code, _)
            if code.code == rusqlite::ErrorCode::OperationInterrupted =>
        {
            Error::internal("query interrupted")
        }
        rusqlite::Error::SqliteFailure(_, Some(message)) => {
            Error::invalid_sql(message.replace(INTERNAL_TABLE, "table #"))
        }
        // SQLite's message names the SQL it compiled (the engine's rewrite, with its own
        // table names) and an offset in it: only the word there is kept, for the caller to
        // place in the statement as written.
        rusqlite::Error::SqlInputError {
            msg, sql, offset, ..
        } => {
            let message = msg.replace(INTERNAL_TABLE, "table #");
            match word_at(&sql, offset) {
                Some(word)
                    if !word.starts_with(INTERNAL_TABLE) && !message.starts_with("near ") =>
                {
                    Error::invalid_sql(format!("{message}{NEAR}{word}')"))
                }
                _ => Error::invalid_sql(message),
            }
        }
        other => Error::invalid_sql(other.to_string().replace(INTERNAL_TABLE, "table #")),
    }
}

/// The prefix of the engine's local table names.
const INTERNAL_TABLE: &str = "__qg_t";

/// How a compile error names the word SQLite stopped at: `… (near 'word')`.
const NEAR: &str = " (near '";

/// The word SQLite points at in a compile error, if [`sql_error`] named one.
pub(crate) fn near_word(message: &str) -> Option<&str> {
    let start = message.rfind(NEAR)? + NEAR.len();
    message[start..].strip_suffix("')")
}

/// The identifier (or single character) at byte `offset` of `sql`.
fn word_at(sql: &str, offset: i32) -> Option<String> {
    let rest = sql.get(usize::try_from(offset).ok()?..)?;
    let word: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    match word.is_empty() {
        false => Some(word),
        true => rest
            .chars()
            .next()
            .filter(|c| !c.is_whitespace() && *c != '\'')
            .map(String::from),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A cached query whose table was made again with other columns names the new ones
    /// (its first step compiles it again), with and without rows.
    #[test]
    fn a_cached_query_over_a_table_made_again_reads_its_columns_now() {
        let conn = Connection::open_in_memory().unwrap();
        let limits = EvalLimits::default();
        let sql = "SELECT * FROM t";
        conn.execute_batch("CREATE TABLE t (a, b, c BOOLEAN); INSERT INTO t VALUES (1, 2, 1)")
            .unwrap();
        let first = run_query(&conn, sql, 10, &limits).unwrap();
        assert_eq!(first.columns, ["a", "b", "c"]);
        assert_eq!(first.rows[0][2], Cell::Boolean(true));
        for rows in ["INSERT INTO t VALUES (1, 2)", ""] {
            conn.execute_batch(&format!(
                "DROP TABLE t; CREATE TABLE t (x BOOLEAN, y); {rows}"
            ))
            .unwrap();
            let again = run_query(&conn, sql, 10, &limits).unwrap();
            assert_eq!(again.columns, ["x", "y"], "{rows:?}");
            if !rows.is_empty() {
                assert_eq!(again.rows, [[Cell::Boolean(true), Cell::Integer(2)]]);
            }
        }
    }
}
