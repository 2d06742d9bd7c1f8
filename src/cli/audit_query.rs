//! `querygate audit query`: runs the filter of [`crate::audit::query`] over files or the
//! database and prints the records as a table or as JSON Lines. From files, records are
//! written as they are found (a table's columns are measured by a first run of the query),
//! so memory does not grow with the files or with what matches.

use std::io::{IsTerminal as _, Write};
use std::path::PathBuf;

use crate::audit::query::{self, FileMatches, Filter, Matches};
use crate::engine::{Cell, QueryOutput};

use super::audit_table::{Widths, cells};
use super::{Output, RecordFormat};

/// Where the records are read.
pub(super) enum Source<'a> {
    /// The `audit_events` table.
    Database(&'a crate::db::PgPool),
    /// These files (or the error of listing them).
    Files(std::io::Result<Vec<PathBuf>>),
}

/// Runs the query and prints what it found; the exit code: 0, 1 when the records cannot be
/// read or some are not intact, 2 when the filter is refused.
pub(super) async fn run(source: Source<'_>, filter: Filter, format: RecordFormat) -> i32 {
    let filter = match filter.checked() {
        Ok(filter) => filter,
        Err(err) => {
            eprintln!("error: {err}");
            return 2;
        }
    };
    let files = match source {
        Source::Database(pool) => {
            return match query::query_database(pool, &filter).await {
                Ok(found) => print(&found, format),
                Err(err) => cannot_read(&err.to_string()),
            };
        }
        Source::Files(files) => files,
    };
    let found = match files.and_then(|files| FileMatches::open(&files, &filter)) {
        Ok(found) => found,
        Err(err) => return cannot_read(&err.to_string()),
    };
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let to_terminal = std::io::stdout().is_terminal();
    let written = match format {
        RecordFormat::Json => stream_json(found, &mut stdout, to_terminal),
        RecordFormat::Table => stream_table(found, &mut stdout),
    };
    let found = match written {
        Ok(found) => found,
        Err(Failure::Read(err)) => {
            let _ = stdout.flush();
            return cannot_read(&err.to_string());
        }
        Err(Failure::Write) => return 1,
    };
    if stdout.flush().is_err() {
        return 1;
    }
    drop(stdout);
    warn(&found.unreadable, found.out_of_order)
}

/// Prints `found` (read whole: from the database) and its warnings.
fn print(found: &Matches, format: RecordFormat) -> i32 {
    let mut stdout = std::io::stdout().lock();
    let to_terminal = stdout.is_terminal();
    let text = render(found, format, to_terminal);
    if stdout.write_all(text.as_bytes()).is_err() || stdout.flush().is_err() {
        return 1;
    }
    warn(&found.unreadable, found.out_of_order)
}

fn cannot_read(err: &str) -> i32 {
    eprintln!("error: cannot read the audit records: {}", super::said(err));
    1
}

/// The warnings after the records; the exit code.
fn warn(unreadable: &[String], out_of_order: u64) -> i32 {
    for problem in unreadable {
        eprintln!(
            "warning: not an intact record, left out (run `querygate audit verify`): {}",
            super::said(problem)
        );
    }
    if out_of_order > 0 {
        eprintln!(
            "warning: {out_of_order} record(s) shown after records of calls that started later: their calls outlasted more matching records than the reorder window holds ({} MiB)",
            query::WINDOW_BYTES / (1024 * 1024)
        );
    }
    if unreadable.is_empty() { 0 } else { 1 }
}

/// Why printing records from files stopped.
enum Failure {
    /// A file could not be read.
    Read(std::io::Error),
    /// The output could not be written.
    Write,
}

/// JSON Lines from files, each record written as it is found.
fn stream_json(
    mut found: FileMatches,
    out: &mut impl Write,
    to_terminal: bool,
) -> Result<FileMatches, Failure> {
    for record in found.by_ref() {
        let record = record.map_err(Failure::Read)?;
        let written = if to_terminal {
            out.write_all(crate::safe_text::escape_json_text(record.line).as_bytes())
        } else {
            out.write_all(record.line.as_bytes())
        };
        written
            .and_then(|()| out.write_all(b"\n"))
            .map_err(|_| Failure::Write)?;
    }
    Ok(found)
}

/// The table from files: the query run once to measure the columns, and again (over the
/// same bytes) to write the rows.
fn stream_table(mut measured: FileMatches, out: &mut impl Write) -> Result<FileMatches, Failure> {
    let mut widths = Widths::new();
    let mut rows = 0usize;
    for record in measured.by_ref() {
        widths.fit(&cells(&record.map_err(Failure::Read)?.stored));
        rows += 1;
    }
    widths.head(out).map_err(|_| Failure::Write)?;
    for record in measured.again().map_err(Failure::Read)?.take(rows) {
        let record = record.map_err(Failure::Read)?;
        widths
            .line(out, &cells(&record.stored))
            .map_err(|_| Failure::Write)?;
    }
    Widths::foot(out, rows).map_err(|_| Failure::Write)?;
    Ok(measured)
}

/// JSON Lines: each record as stored (escaped as the JSON output of `querygate query` when
/// it goes to a terminal, byte for byte otherwise); the table: through the table renderer of
/// `querygate query`, which escapes control and bidirectional characters.
fn render(found: &Matches, format: RecordFormat, to_terminal: bool) -> String {
    match format {
        RecordFormat::Json => {
            let mut out = String::new();
            for record in &found.records {
                if to_terminal {
                    out.push_str(&crate::safe_text::escape_json_text(record.line.clone()));
                } else {
                    out.push_str(&record.line);
                }
                out.push('\n');
            }
            out
        }
        RecordFormat::Table => {
            let table = QueryOutput {
                columns: query::COLUMNS.iter().map(|c| (*c).to_owned()).collect(),
                rows: found
                    .records
                    .iter()
                    .map(|r| {
                        query::table_row(&r.stored)
                            .into_iter()
                            .map(Cell::Text)
                            .collect()
                    })
                    .collect(),
                ..Default::default()
            };
            super::render(&table, Output::Table, to_terminal)
        }
    }
}
