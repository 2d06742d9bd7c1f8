//! A statement's tables: created with the columns its plan names, filled from response
//! pages, read for the values one table passes to another.

use std::collections::HashMap;

use rusqlite::Connection;
use rusqlite::types::Value as SqlValue;

use super::connection::{Session, quote_ident};
use super::limits::{EvalLimits, is_too_big};
use super::sqlite_internal;
use crate::error::{Error, ErrorKind, Result};
use crate::rows::{self, ColumnBinder, Loaded, RowLocator, RowWriter};

/// A table the statement created: its columns in order, and their bind positions.
pub(super) struct Table {
    columns: Vec<String>,
    binder: ColumnBinder,
}

/// The declared type of columns the provider document types as boolean.
pub(super) const BOOLEAN: &str = "BOOLEAN";

fn contains_ci(names: &[String], name: &str) -> bool {
    names.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Creates `table` with `columns` (ASCII-case-insensitive duplicates dropped; `value` when
/// there are none), those in `booleans` declared BOOLEAN, and records it in `tables`.
pub(super) fn create(
    session: &mut Session,
    tables: &mut HashMap<String, Table>,
    table: String,
    columns: Vec<String>,
    booleans: &[String],
    wire_names: &[(String, String)],
) -> Result<()> {
    let mut unique: Vec<String> = Vec::with_capacity(columns.len());
    for column in columns {
        if !unique.iter().any(|c| c.eq_ignore_ascii_case(&column)) {
            unique.push(column);
        }
    }
    if unique.is_empty() {
        unique.push("value".to_owned());
    }
    // Declared BOOLEAN (NUMERIC affinity: JSON true/false are stored as 1/0 and compare as
    // numbers); a query reads the declared type back to give such columns as booleans.
    let mut defs: Vec<String> = unique
        .iter()
        .map(|c| match contains_ci(booleans, c) {
            true => format!("{} {BOOLEAN}", quote_ident(c)),
            false => quote_ident(c),
        })
        .collect();
    // A wire name names its column in SQL too: a generated column after the stored ones
    // (an INSERT without a column list binds only the stored ones).
    let wire_names: Vec<(String, String)> = wire_names
        .iter()
        .filter(|(column, wire)| contains_ci(&unique, column) && !contains_ci(&unique, wire))
        .cloned()
        .collect();
    let mut generated: Vec<&str> = Vec::new();
    for (column, wire) in &wire_names {
        if generated.iter().any(|g| g.eq_ignore_ascii_case(wire)) {
            continue;
        }
        generated.push(wire);
        let declared = match contains_ci(booleans, column) {
            true => format!(" {BOOLEAN}"),
            false => String::new(),
        };
        defs.push(format!(
            "{}{declared} GENERATED ALWAYS AS ({}) VIRTUAL",
            quote_ident(wire),
            quote_ident(column)
        ));
    }
    let statement = format!("CREATE TABLE {} ({})", quote_ident(&table), defs.join(", "));
    session
        .create_table(&table, statement)
        .map_err(sqlite_internal)?;
    let binder = ColumnBinder::with_wire_names(&unique, &wire_names);
    tables.insert(
        table,
        Table {
            columns: unique,
            binder,
        },
    );
    Ok(())
}

/// A response page to load.
pub(super) struct Page<'a> {
    pub(super) body: &'a [u8],
    pub(super) locator: &'a RowLocator,
    pub(super) wanted: &'a [Vec<String>],
}

/// Inserts the rows of `page` into `table`, with the `fixed` values (request parameters) in
/// their columns; the rows inserted and the scalars at the page's wanted paths.
pub(super) fn load(
    conn: &Connection,
    tables: &HashMap<String, Table>,
    table: &str,
    page: Page<'_>,
    fixed: &[(String, SqlValue)],
    limits: &EvalLimits,
) -> Result<Loaded> {
    let state = tables
        .get(table)
        .ok_or_else(|| Error::internal(format!("no table {table}")))?;
    let fixed: Vec<(usize, SqlValue)> = fixed
        .iter()
        .filter_map(|(name, value)| {
            let position = state
                .columns
                .iter()
                .position(|c| c.eq_ignore_ascii_case(name))?;
            Some((position + 1, value.clone()))
        })
        .collect();
    let mut writer = RowWriter::new(conn, table, state.columns.len());
    let Page {
        body,
        locator,
        wanted,
    } = page;
    rows::load_rows(body, locator, &state.binder, &fixed, &mut writer, wanted).map_err(|err| {
        match err {
            rows::RowsError::Json(err) => Error::new(
                ErrorKind::Upstream,
                format!("upstream response is not valid JSON: {err}"),
            ),
            rows::RowsError::Sqlite(err) if is_too_big(&err) => limits.too_big(),
            rows::RowsError::Sqlite(err) => sqlite_internal(err),
        }
    })
}

/// Distinct non-null values of `column` of `table`.
pub(super) fn distinct(
    conn: &Connection,
    tables: &HashMap<String, Table>,
    table: &str,
    column: &str,
) -> Result<Vec<SqlValue>> {
    let state = tables
        .get(table)
        .ok_or_else(|| Error::internal(format!("no table {table}")))?;
    let Some(column) = state
        .columns
        .iter()
        .find(|c| c.eq_ignore_ascii_case(column))
    else {
        return Err(Error::invalid_sql(format!("no such column: {column}")));
    };
    let sql = format!(
        "SELECT DISTINCT {col} FROM {table} WHERE {col} IS NOT NULL",
        col = quote_ident(column),
        table = quote_ident(table)
    );
    let mut statement = conn.prepare(&sql).map_err(sqlite_internal)?;
    let values = statement
        .query_map([], |row| row.get::<_, SqlValue>(0))
        .map_err(sqlite_internal)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sqlite_internal)?;
    Ok(values)
}
