//! Response bytes → rows, decoded straight into SQLite binds.
//!
//! Row data is never materialised as a `serde_json::Value` tree. A strict JSON scanner walks
//! the body to the rows named by a [`RowLocator`]; each row object is then read key by key,
//! matching keys are looked up in a [`ColumnBinder`] and their values are taken as raw slices
//! of the body, kept as cells borrowing the body and bound into an `INSERT` of many rows
//! ([`RowWriter`]) once a batch is full. Unknown properties are skipped by the scanner, which
//! checks their syntax without decoding them. On the common paths (unescaped strings,
//! numbers, booleans, nested JSON) no heap allocation happens per row or per property. A body
//! that is not JSON fails with `serde_json`'s own account of where.
//!
//! [`load_rows`] and [`discover_columns`] (column names for responses whose schema declares
//! none) also return the scalars at requested paths (pagination tokens) from the same pass;
//! [`extract_scalars`] is the skim that finds such scalars alone.
//!
//! Files: `locator` (where the rows are), `binder` (column name → bind position), `scan` (the
//! JSON scanner), `walk` (following the locator to the rows), `load` / `discover` (what to
//! do with each row), `writer` (batched INSERTs), `capture` (scalars found during the walk),
//! `scalars` (the skim).

mod binder;
mod capture;
mod discover;
mod load;
mod locator;
mod scalars;
mod scan;
mod walk;
mod writer;

#[cfg(test)]
mod tests;

use rusqlite::types::Value;
use serde::de::DeserializeSeed;

pub(crate) use self::binder::ColumnBinder;
pub(crate) use self::locator::{RowLocator, Step};
pub(crate) use self::scan::same_key;
pub(crate) use self::writer::RowWriter;

use self::capture::Captures;
use self::discover::DiscoverSink;
use self::load::LoadSink;
use self::scalars::ScalarSeed;
use self::scan::json_error;
use self::walk::{Halt, walk};

/// Maximum number of column names [`discover_columns`] returns.
const MAX_DISCOVERED_COLUMNS: usize = 512;

/// Name of the column that receives rows which are not JSON objects.
const VALUE_COLUMN: &str = "value";

/// Why [`load_rows`] failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RowsError {
    /// The body is not valid JSON (or is truncated).
    #[error("response body is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// SQLite rejected a bind or the insert itself.
    #[error("sqlite insert failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// What [`load_rows`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Loaded {
    /// Rows inserted (the sum of the statement's change counts).
    pub(crate) rows: u64,
    /// The scalar at each wanted path, as [`extract_scalars`] gives it.
    pub(crate) scalars: Vec<Option<String>>,
}

/// Decodes the rows of `body` found at `locator` and inserts them through `writer` (into a
/// table whose columns are the binder's positions 1…N, several rows per INSERT), and reads
/// the scalars at the `wanted` paths (pagination tokens) in the same pass.
///
/// For each row: every column position is first set to NULL, then `fixed` values are bound
/// (pairs of (1-based position, value): the request parameters of this call, e.g. `org`),
/// then each JSON property whose name matches a column is bound: JSON string → TEXT;
/// integer fitting i64 → INTEGER; u64 above i64::MAX → TEXT of its exact digits; other numbers
/// → REAL (a number too large for f64 → TEXT of its digits); true/false → INTEGER 1/0;
/// null → NULL; nested object/array → TEXT holding that value's JSON exactly as it appears in
/// the body, so SQLite `json_extract(col, '$.a.b')` works. A JSON property matching a position
/// that `fixed` also binds wins over the fixed value only if it is non-null. Unknown properties
/// are skipped without allocation. A row element that is not an object binds that scalar (or
/// an array's JSON text) to the column named `value` if the binder has one, else it is
/// skipped. An empty (all-whitespace) body holds zero rows.
///
/// The `wanted` scalars are those [`extract_scalars`] would find. One that sits beside the
/// rows (a property off the rows' path: `nextPageToken` next to `items`) is taken during the
/// same pass; one the rows' path runs into (through a `[*]`, or rows at the root) costs a
/// separate skim.
///
/// Rows are inserted in batches while the body is read, so on an error some rows before it
/// may have been inserted: run this inside a transaction or savepoint. A fixed position
/// outside the table is an error once a row is built.
pub(crate) fn load_rows(
    body: &[u8],
    locator: &RowLocator,
    binder: &ColumnBinder,
    fixed: &[(usize, Value)],
    writer: &mut RowWriter<'_>,
    wanted: &[Vec<String>],
) -> Result<Loaded, RowsError> {
    if is_blank(body) {
        return Ok(Loaded {
            rows: 0,
            scalars: vec![None; wanted.len()],
        });
    }
    let cells = vec![writer::Cell::Null; writer.width() * writer.per_insert()];
    let mut sink = LoadSink {
        writer,
        binder,
        fixed,
        cells,
        buffered: 0,
        rows: 0,
        recent_keys: Vec::new(),
    };
    let mut captures = Captures::plan(wanted, locator);
    match walk(body, locator, &mut sink, &mut captures) {
        Ok(()) => {}
        Err(Halt::Syntax(error)) => return Err(RowsError::Json(json_error(body, error))),
        Err(Halt::Sink(failure)) => return Err(failure),
    }
    sink.flush()?;
    Ok(Loaded {
        rows: sink.rows,
        scalars: captures.finish(body, wanted)?,
    })
}

/// Skims `body` once and returns, for each path (object keys from the root, e.g.
/// ["nextPageToken"], ["result_info", "page"], ["@odata.nextLink"]), the scalar found there as a
/// string (numbers as their decimal text exactly as written, bools as "true"/"false"), or None
/// when absent, null or not a scalar. Everything not on a requested path is skipped with
/// `IgnoredAny`. An empty (all-whitespace) body → all None. An empty path names the root.
pub(crate) fn extract_scalars(
    body: &[u8],
    paths: &[Vec<String>],
) -> Result<Vec<Option<String>>, serde_json::Error> {
    let mut out = vec![None; paths.len()];
    if is_blank(body) {
        return Ok(out);
    }
    let active: Vec<usize> = (0..paths.len()).collect();
    let mut de = serde_json::Deserializer::from_slice(body);
    ScalarSeed {
        paths,
        active: &active,
        depth: 0,
        out: &mut out,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(out)
}

/// Collects the distinct top-level property names of the rows at `locator` (for responses
/// whose schema declares no properties), in first-seen order, capped at 512 names. Names that
/// differ only in ASCII case count as one (SQLite columns are case-insensitive); the first
/// spelling seen is kept. Rows that are not objects contribute the column `value` (where
/// [`load_rows`] binds them). An empty (all-whitespace) body → no names. Also returns the
/// scalars at the `wanted` paths, found as [`load_rows`] finds them.
pub(crate) fn discover_columns(
    body: &[u8],
    locator: &RowLocator,
    wanted: &[Vec<String>],
) -> Result<(Vec<String>, Vec<Option<String>>), serde_json::Error> {
    if is_blank(body) {
        return Ok((Vec::new(), vec![None; wanted.len()]));
    }
    let mut sink = DiscoverSink::default();
    let mut captures = Captures::plan(wanted, locator);
    match walk(body, locator, &mut sink, &mut captures) {
        Ok(()) => {}
        Err(Halt::Syntax(error)) => return Err(json_error(body, error)),
        Err(Halt::Sink(RowsError::Json(error))) => return Err(error),
        Err(Halt::Sink(RowsError::Sqlite(error))) => {
            return Err(serde::de::Error::custom(error));
        }
    }
    let names = sink.names.names.into_iter().map(String::from).collect();
    Ok((names, captures.finish(body, wanted)?))
}

fn is_blank(body: &[u8]) -> bool {
    body.iter().all(u8::is_ascii_whitespace)
}
