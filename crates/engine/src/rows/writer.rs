//! Inserting decoded rows: many rows per `INSERT … VALUES (…), (…), …` statement, so SQLite
//! runs one statement (one step and reset) per batch of rows rather than per row. The
//! statement of a full batch is prepared (or taken from the connection's cache) once per
//! writer and kept for every batch it inserts.

use std::borrow::Cow;

use rusqlite::limits::Limit;
use rusqlite::types::Value;
use rusqlite::{CachedStatement, Connection};

/// Most rows one INSERT statement carries.
const ROWS_PER_INSERT: usize = 64;

/// One column value of a buffered row.
#[derive(Debug, Clone)]
pub(super) enum Cell<'a> {
    Null,
    Integer(i64),
    Real(f64),
    Text(Cow<'a, str>),
    /// A request parameter's value (`fixed`).
    Fixed(&'a Value),
}

/// Where the rows of a load go: a table of `width` columns, filled through `conn`.
pub(crate) struct RowWriter<'c> {
    conn: &'c Connection,
    /// The table's name, quoted for SQL.
    table: String,
    width: usize,
    per_insert: usize,
    /// The SQL of an INSERT of `per_insert` rows.
    full: String,
    /// That INSERT, once a full batch has been inserted.
    full_statement: Option<CachedStatement<'c>>,
}

impl<'c> RowWriter<'c> {
    /// A writer into `table` (an unquoted name) with `width` columns, bound in order.
    pub(crate) fn new(conn: &'c Connection, table: &str, width: usize) -> Self {
        let width = width.max(1);
        let variables = conn
            .limit(Limit::SQLITE_LIMIT_VARIABLE_NUMBER)
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(999)
            .max(1);
        let per_insert = (variables / width).clamp(1, ROWS_PER_INSERT);
        let table = format!("\"{}\"", table.replace('"', "\"\""));
        let full = insert_sql(&table, width, per_insert);
        RowWriter {
            conn,
            table,
            width,
            per_insert,
            full,
            full_statement: None,
        }
    }

    /// Number of columns of a row.
    pub(super) fn width(&self) -> usize {
        self.width
    }

    /// Rows buffered before they are inserted together.
    pub(super) fn per_insert(&self) -> usize {
        self.per_insert
    }

    /// Inserts the `rows` rows held in `cells` (row-major, `width` cells each); returns the
    /// number of rows inserted.
    pub(super) fn insert(&mut self, cells: &[Cell<'_>], rows: usize) -> rusqlite::Result<u64> {
        if rows == 0 {
            return Ok(0);
        }
        if rows != self.per_insert {
            let sql = insert_sql(&self.table, self.width, rows);
            let mut statement = self.conn.prepare_cached(&sql)?;
            return execute(&mut statement, cells, rows * self.width);
        }
        let statement = match &mut self.full_statement {
            Some(statement) => statement,
            empty => empty.insert(self.conn.prepare_cached(&self.full)?),
        };
        execute(statement, cells, rows * self.width)
    }
}

/// Binds the first `count` of `cells` to `statement`'s variables 1… and runs it. Every one
/// of its `count` variables is bound, NULL too, so nothing of an earlier batch stays bound
/// and the statement's bindings need no clearing first.
fn execute(
    statement: &mut CachedStatement<'_>,
    cells: &[Cell<'_>],
    count: usize,
) -> rusqlite::Result<u64> {
    let Some(cells) = cells.get(..count) else {
        return Err(rusqlite::Error::InvalidParameterCount(cells.len(), count));
    };
    for (index, cell) in cells.iter().enumerate() {
        let position = index + 1;
        match cell {
            Cell::Null => statement.raw_bind_parameter(position, rusqlite::types::Null)?,
            Cell::Integer(i) => statement.raw_bind_parameter(position, *i)?,
            Cell::Real(f) => statement.raw_bind_parameter(position, *f)?,
            Cell::Text(text) => statement.raw_bind_parameter(position, text.as_ref())?,
            Cell::Fixed(value) => statement.raw_bind_parameter(position, *value)?,
        }
    }
    Ok(statement.raw_execute()? as u64)
}

impl std::fmt::Debug for RowWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowWriter")
            .field("table", &self.table)
            .field("width", &self.width)
            .field("per_insert", &self.per_insert)
            .finish_non_exhaustive()
    }
}

/// `INSERT INTO table VALUES (?, …), …` with `rows` groups of `width` variables.
fn insert_sql(table: &str, width: usize, rows: usize) -> String {
    let group = format!("({})", vec!["?"; width].join(","));
    format!(
        "INSERT INTO {table} VALUES {}",
        vec![group.as_str(); rows].join(",")
    )
}
